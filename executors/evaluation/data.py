"""Dataset rows for `eval`, offline: a local file or folder, a `save_to_disk` folder or a
cached hub dataset read with the `datasets` library (split, shuffle, seed, samples), each row
reduced to the task's roles (`eval.dataset.columns`, else columns named like the role); or,
without a dataset, the shipped inputs of the model's modality (no labels: agreement metrics).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from executors.evaluation.base import EvalDataError
from executors.samples import media, text
from planner.models.evaldata import ColumnsError, map_columns
from planner.models.evaluation import EVAL
from planner.models.tasks import AUDIO, IMAGE, TEXT

SPLITS = ("test", "validation", "valid", "dev", "train")
AUDIO_FILES = (".wav", ".flac", ".mp3", ".ogg", ".opus")


@dataclass
class Rows:
    rows: list[dict[str, Any]]     # role -> value
    origin: str                    # where they came from, for the record
    labelled: bool                 # a truth role is present
    names: dict[str, list[str]] = field(default_factory=dict)  # role -> its ClassLabel names


def load(params: dict[str, Any], modality: str | None) -> Rows:
    """The rows `eval` runs on (see the module docstring)."""
    task = params["task"]
    if params["dataset_kind"] == "shipped":
        return shipped(task, modality, params["samples"])
    table, split = _table(params)
    table = _undecoded_audio(table)
    if params["shuffle"]:
        table = table.shuffle(seed=params["seed"])
    table = table.select(range(min(params["samples"], len(table))))
    columns = _columns(task, params["columns"], list(table.column_names), params)
    base = Path(params["dataset"])
    base = base.parent if base.is_file() else base
    rows = [{role: _located(role, record[col], base) for role, col in columns.items()}
            for record in table]
    if not rows:
        raise EvalDataError(f"eval.dataset: split {split!r} of {params['dataset']} has no rows; "
                            "choose another eval.dataset.split")
    truth = [r for r in EVAL[task].truth if r in columns]
    shown = ", ".join(f"{r}={c}" for r, c in columns.items())
    label = f"labels from {', '.join(columns[r] for r in truth)}" if truth else \
        "no label column: agreement with PyTorch's predictions"
    where = params["dataset"] + (f" ({params['dataset_name']})" if params["dataset_name"] else "")
    names = {role: n for role, col in columns.items() if (n := class_names(table.features[col]))}
    return Rows(rows, f"{len(rows)} rows of {where}, split {split} ({shown}); {label}",
                bool(truth), names)


def _located(role: str, value: Any, base: Path) -> Any:
    """A relative media path (image, audio, mask, depth) in a data file is relative to the
    file's folder."""
    if role in ("image", "audio", "mask", "depth") and isinstance(value, str) \
            and not Path(value).is_absolute() and (base / value).is_file():
        return str(base / value)
    return value


def class_names(feature: Any) -> list[str]:
    """The names of a ClassLabel column, or of a column of ClassLabel lists; else none."""
    while feature is not None and not hasattr(feature, "names"):
        feature = getattr(feature, "feature", None)
    return list(feature.names) if feature is not None else []


def _table(params: dict[str, Any]) -> tuple[Any, str]:
    """The dataset's rows of the chosen split (datasets.Dataset), read without network."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import threading

    import datasets
    from tqdm import tqdm

    datasets.disable_progress_bars()
    tqdm.set_lock(threading.RLock())  # its default lock is a semaphore the step's process leaks
    where, kind, name = params["dataset"], params["dataset_kind"], params["dataset_name"]
    try:
        if kind == "folder" and _audio_folder_without_decoder(Path(where)):
            found = _audio_folder(Path(where))
        elif kind == "saved":
            found = datasets.load_from_disk(where)
        elif kind == "file":
            suffix = Path(where).suffix.lower().lstrip(".")
            builder = {"jsonl": "json", "tsv": "csv", "txt": "text"}.get(suffix, suffix)
            extra = {"delimiter": "\t"} if suffix == "tsv" else {}
            found = datasets.load_dataset(builder, data_files=where, **extra)
        else:
            found = datasets.load_dataset(where, name) if name else datasets.load_dataset(where)
    except Exception as exc:
        cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise EvalDataError(f"eval.dataset.path: cannot read {where} as a dataset ({cause}); "
                            "point it at JSON Lines, CSV, Parquet, an image or audio folder or "
                            "a save_to_disk folder") from exc
    if isinstance(found, datasets.Dataset):
        return found, params["split"] or "all"
    splits = list(found)
    split = params["split"] or next((s for s in SPLITS if s in found and not _hidden(found[s])),
                                    splits[0])
    if split not in found:
        raise EvalDataError(f"eval.dataset.split: {params['dataset']} has no split {split!r} "
                            f"(it has {', '.join(splits)}); set eval.dataset.split to one of them")
    return found[split], split


def _hidden(table: Any) -> bool:
    """A split whose class labels are all -1, the `datasets` mark of a withheld test set
    (GLUE's test splits): not the default split to evaluate on."""
    labels = [c for c, f in table.features.items() if getattr(f, "names", None)]
    return bool(labels) and len(table) > 0 and all(
        v == -1 for v in table.select(range(min(len(table), 64)))[labels[0]])


def _audio_folder_without_decoder(folder: Path) -> bool:
    """An audio folder where `datasets` cannot read it: its Audio feature needs torchcodec."""
    import importlib.util

    return importlib.util.find_spec("torchcodec") is None and any(
        p.suffix.lower() in AUDIO_FILES for p in folder.rglob("*"))


def _audio_folder(folder: Path) -> Any:
    """An audio folder in `datasets`' audiofolder layout, read without torchcodec: `audio`
    holds each file's path (read by `audio_array` with soundfile), the other columns come from
    the folder's metadata.jsonl or metadata.csv (matched by `file_name`), else `label` is the
    file's class subfolder."""
    import csv
    import json

    import datasets

    meta = next((folder / n for n in ("metadata.jsonl", "metadata.csv")
                 if (folder / n).is_file()), None)
    if meta is None:
        files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in AUDIO_FILES)
        return datasets.Dataset.from_list(
            [{"audio": str(p), **({"label": p.parent.name} if p.parent != folder else {})}
             for p in files])
    with meta.open(newline="") as f:
        records = [json.loads(line) for line in f if line.strip()] \
            if meta.suffix == ".jsonl" else list(csv.DictReader(f))
    if any("file_name" not in r for r in records):
        raise ValueError(f"{meta.name} has rows without a file_name column")
    return datasets.Dataset.from_list(
        [{"audio": str(folder / r.pop("file_name")), **r} for r in records])


def _undecoded_audio(table: Any) -> Any:
    """Audio columns as {bytes, path} cells (read by `audio_array` with soundfile): decoding
    them with `datasets` needs torchcodec."""
    import datasets

    for name, feature in table.features.items():
        if isinstance(feature, datasets.Audio) and feature.decode:
            table = table.cast_column(name, datasets.Audio(decode=False))
    return table


def _columns(task: str, given: dict[str, str], names: list[str],
             params: dict[str, Any]) -> dict[str, str]:
    """role -> column, by the planner's rules (planner/models/evaldata.py)."""
    try:
        return map_columns(task, given, names, params["dataset"])
    except ColumnsError as exc:
        raise EvalDataError(str(exc)) from exc


def shipped(task: str, modality: str | None, samples: int) -> Rows:
    """The shipped inputs of the task's modality: sentences (pairs for similarity and NLI),
    photographs (and crops), speech synthesized from the sentences. No labels."""
    roles = set(EVAL[task].roles)
    if modality in (IMAGE, AUDIO):  # a task of several modalities: the model's own input
        roles = (roles - {"text", "text_pair", "audio", "image"}) | {modality}
    elif modality == TEXT:
        roles -= {"audio", "image"}
    lines = text.sentences("verify") + text.sentences("calibration")
    photos = media.views("verify") + media.views("calibration")
    rows: list[dict[str, Any]] = []
    for i in range(samples):
        row: dict[str, Any] = {}
        if "image" in roles:
            row["image"] = photos[i % len(photos)]
        if "audio" in roles:
            row["audio"] = {"array": media.speaker().say(lines[i % len(lines)]),
                            "sampling_rate": media.RATE}
        if "tokens" in roles:
            row["tokens"] = lines[i % len(lines)].split()
        if "question" in roles:
            row["context"] = lines[i % len(lines)]
            row["question"] = _question(lines[i % len(lines)])
        if "text" in roles and "image" not in roles and "audio" not in roles:
            row["text"] = lines[(2 * i) % len(lines)] if "text_pair" in roles else \
                lines[i % len(lines)]
        if "text_pair" in roles:
            row["text_pair"] = lines[(2 * i + 1) % len(lines)]
        rows.append(row)
    what = {"image": "photographs", "audio": "synthesized speech"}
    kind = next((what[r] for r in ("image", "audio") if r in roles),
                "sentence pairs" if "text_pair" in roles else "sentences")
    own = EVAL[task].truth == ("text",)  # self-supervised: the input is its own label
    return Rows(rows, f"{samples} shipped {kind}; " + (
        ("labels: the masked tokens" if task == "fill-mask" else "labels: each next token")
        if own else
        "no labels: agreement with PyTorch's predictions"), own)


def _question(sentence: str) -> str:
    """A question about a sentence: its longest word asked for."""
    word = max(sentence.split(), key=len).strip(".,;:!?")
    return f"What is said about {word}?"


def opened(value: Any) -> Any:
    """An image-like cell opened: {'bytes'|'path'}, bytes or a path (a .npy array file too)
    as a PIL image or an array; anything else as it is."""
    from PIL import Image

    if isinstance(value, dict):
        value = value.get("path") if value.get("bytes") is None else value["bytes"]
    if isinstance(value, bytes):
        import io

        return Image.open(io.BytesIO(value))
    if isinstance(value, str | Path):
        return np.load(value) if str(value).endswith(".npy") else Image.open(value)
    return value


def image_array(value: Any) -> np.ndarray:
    """An image cell (PIL image, path, array, {'bytes'|'path'}) as uint8 RGB [H, W, 3]."""
    from PIL import Image

    value = opened(value)
    if isinstance(value, Image.Image):
        return np.asarray(value.convert("RGB"))
    arr = np.asarray(value)
    if arr.ndim == 2:
        arr = np.stack([arr] * 3, axis=-1)
    if arr.dtype != np.uint8:
        arr = np.clip(arr * (255 if arr.max() <= 1.0 else 1), 0, 255).astype(np.uint8)
    return arr[..., :3]


def audio_array(value: Any, rate: int) -> np.ndarray:
    """An audio cell ({'array', 'sampling_rate'}, an array, a path, {'bytes'|'path'}) as
    float32 at `rate`."""
    if isinstance(value, dict) and "array" not in value:
        value = value.get("path") if value.get("bytes") is None else value["bytes"]
    if isinstance(value, str | Path | bytes):
        import io

        import soundfile

        data, got = soundfile.read(io.BytesIO(value) if isinstance(value, bytes) else str(value),
                                   dtype="float32")
        value = {"array": data, "sampling_rate": got}
    if isinstance(value, dict):
        wav = np.asarray(value["array"], np.float32)
        got = int(value.get("sampling_rate") or rate)
    else:
        wav, got = np.asarray(value, np.float32), rate
    if wav.ndim > 1:
        wav = wav.mean(axis=-1)
    return media.resampled(wav, got, rate)
