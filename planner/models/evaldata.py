"""An eval dataset's columns and rows as the planner can check them before anything runs: which
column each of the task's roles reads (`eval.dataset.columns`, else a column named like the
role), and for a local JSON Lines, JSON, CSV or TSV file its rows themselves (they parse, there
are some, no input is missing, labels name the model's classes). Other kinds of data (Parquet,
folders, saved or cached datasets) are read by the `datasets` library in the eval step, which
applies the same column rules. Reads with the standard library only."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from planner.errors import ConfigError
from planner.models.evaluation import EVAL, roles

# Column names a role is found under when eval.dataset.columns does not map it, in order.
ALIASES: dict[str, tuple[str, ...]] = {
    "text": ("text", "sentence", "sentence1", "premise", "content", "document", "source",
             "question1", "input"),
    "text_pair": ("text_pair", "sentence2", "hypothesis", "question2"),
    "label": ("label", "labels", "ner_tags", "fine_label", "coarse_label", "class"),
    "score": ("score", "similarity_score", "relatedness_score"),
    "question": ("question",), "context": ("context",), "answers": ("answers",),
    "id": ("id",), "image": ("image", "img", "pixel_values", "picture", "photo"),
    "audio": ("audio", "speech", "file"), "tokens": ("tokens", "words"),
    "boxes": ("objects", "boxes", "annotations"), "mask": ("mask", "label", "annotation",
                                                           "segmentation"),
    "depth": ("depth", "depth_map"), "keypoints": ("keypoints", "objects", "annotations"),
    "transcript": ("text", "sentence", "transcript", "transcription", "normalized_text"),
    "target": ("target", "text", "caption", "translation", "summary", "label"),
}
INPUT_ROLES = ("text", "image", "audio", "tokens", "question")
PREVIEW_BYTES = 64 << 20  # the part of a file the planner reads (the eval step reads it all)
# tasks whose label column holds the model's own classes (zero-shot ones name their own)
CLASSIFIERS = frozenset({"text-classification", "token-classification", "image-classification",
                         "audio-classification"})
ALL_ROWS = 1 << 20        # shuffled rows: every row may be read, so every row read is checked


def step_columns(task: str, data: dict[str, Any], kind: str, where: str | None,
                 info: dict[str, Any]) -> dict[str, Any]:
    """The eval step's columns: as mapped (eval.dataset.columns, as task roles); for a local
    data file the planner reads, the columns each role reads there, checked on its rows
    (`columns_checked`: the plan then says whether labels are read or PyTorch's predictions
    are the truth)."""
    columns = roles(task, data["columns"])
    path = Path(where) if kind == "file" and where else None
    if path is None or not readable(path):
        return {"columns": columns}
    rows = data["samples"] if not data["shuffle"] else ALL_ROWS
    found = checked_columns(task, columns, path, rows, info)
    return {"columns": dict(sorted(found.items())), "columns_checked": True}


def readable(path: Path) -> bool:
    """Whether the planner reads this data file itself: JSON Lines, CSV, TSV, a JSON array."""
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".csv", ".tsv"):
        return True
    if suffix != ".json":
        return False
    try:
        with path.open("rb") as f:
            return f.read(4096).lstrip()[:1] == b"["
    except OSError:
        return False


class ColumnsError(ValueError):
    """The dataset's columns do not give the task what it reads: one line with a fix."""


def map_columns(task: str, given: dict[str, str], names: list[str],
                dataset: str) -> dict[str, str]:
    """role -> column: the mapped ones (which must exist), then each unmapped role of the task
    found under its aliases (an input role must be found)."""
    out: dict[str, str] = {}
    for role, col in given.items():
        if col not in names:
            raise ColumnsError(f"eval.dataset.columns.{role}: {dataset} has no column {col!r} "
                               f"(it has {', '.join(names)}); map {role} to one of them")
        out[role] = col
    taken = set(out.values())
    for role in EVAL[task].roles:
        if role in out:
            continue
        col = next((a for a in ALIASES.get(role, (role,)) if a in names and a not in taken), None)
        if col is not None:
            out[role] = col
            taken.add(col)
    inputs = [r for r in EVAL[task].roles if r in INPUT_ROLES]
    if inputs and not any(r in out for r in inputs):
        raise ColumnsError(f"eval.dataset.columns: {task} needs a {inputs[0]} column and "
                           f"{dataset} has none named like it (it has {', '.join(names)}); "
                           f"set +eval.dataset.columns.{inputs[0]}=COLUMN")
    return out


def rows_of(path: Path, limit: int) -> list[dict[str, Any]]:
    """The first `limit` rows of a local JSON Lines, JSON, CSV or TSV file, or one error line
    naming the file (and the line) and what is wrong."""
    shown = str(path)
    try:
        raw = path.read_bytes()[:PREVIEW_BYTES]
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"eval.dataset.path: {shown} is not UTF-8 text (byte {exc.start}); "
                          "give a JSON Lines, CSV or Parquet file") from exc
    except OSError as exc:
        raise ConfigError(f"eval.dataset.path: {shown} cannot be read ({exc.strerror or exc})"
                          ) from exc
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        reader = csv.DictReader(text.splitlines(), delimiter="\t" if suffix == ".tsv" else ",")
        rows = [dict(r) for _, r in zip(range(limit), reader, strict=False)]
        if reader.fieldnames is None:
            raise ConfigError(f"eval.dataset.path: {shown} is empty; give a file with a header "
                              "line and rows")
        ragged = next((i for i, r in enumerate(rows) if None in r), None)
        if ragged is not None:
            raise ConfigError(f"eval.dataset.path: {shown} row {ragged} has more cells than "
                              "its header line names; quote cells that hold the delimiter")
    elif suffix == ".json" and text.lstrip().startswith("["):
        try:
            found = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"eval.dataset.path: {shown} is not valid JSON (line {exc.lineno}: "
                              f"{exc.msg}); fix the file") from exc
        rows = found[:limit]
    else:
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            if len(rows) >= limit:
                break
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ConfigError(f"eval.dataset.path: {shown} line {number} is not a JSON "
                                  f"object ({exc.msg}); fix that line") from exc
    if not rows:
        raise ConfigError(f"eval.dataset.path: {shown} has no rows; give a file with some")
    bad = next((i for i, r in enumerate(rows) if not isinstance(r, dict)), None)
    if bad is not None:
        raise ConfigError(f"eval.dataset.path: {shown} row {bad} is not an object of columns; "
                          "give one object per row")
    return rows


def checked_columns(task: str, given: dict[str, str], path: Path, limit: int,
                    info: dict[str, Any]) -> dict[str, str]:
    """The task's columns in a local data file, checked on its first `limit` rows: the roles
    found, no empty input, labels the model's classes (config.json's id2label) name."""
    rows = rows_of(path, limit)
    names = list(dict.fromkeys(k for r in rows for k in r))
    try:
        columns = map_columns(task, given, names, str(path))
    except ColumnsError as exc:
        raise ConfigError(str(exc)) from exc
    for role, col in columns.items():
        if role not in INPUT_ROLES:
            continue
        empty = next((i for i, r in enumerate(rows) if r.get(col) in (None, "")), None)
        if empty is not None:
            raise ConfigError(f"eval.dataset.columns.{role}: row {empty} of {path} has no "
                              f"{col!r} ({role} input); fill it in or drop the row")
    if "label" in columns and task in CLASSIFIERS:
        _check_labels(task, columns["label"], rows, classes(info), path)
    return columns


def classes(info: dict[str, Any]) -> dict[str, Any]:
    """A classifier's classes: config.json's id2label, else as many as num_labels says (2
    when it says none, as transformers' default), named as transformers names them."""
    if isinstance(info.get("id2label"), dict) and info["id2label"]:
        return info["id2label"]
    count = info.get("num_labels") if isinstance(info.get("num_labels"), int) else 2
    return {str(i): f"LABEL_{i}" for i in range(count)}


def _check_labels(task: str, col: str, rows: list[dict[str, Any]], id2label: dict[str, Any],
                  path: Path) -> None:
    """Class labels a classifier's config.json names, by id or by name (one per row; a list of
    them per row for token classification)."""
    ids = {str(k) for k in id2label}
    names = {str(v).strip().lower() for v in id2label.values()}
    for i, row in enumerate(rows):
        values = row.get(col)
        for value in values if isinstance(values, list) else [values]:
            if value is None or value == "":
                raise ConfigError(f"eval.dataset.columns.label: row {i} of {path} has no label "
                                  f"in {col!r}; fill it in, or drop the column for agreement "
                                  "with PyTorch")
            text = str(int(value) if isinstance(value, bool) else value).strip()
            if text not in ids and text.lower() not in names:
                raise ConfigError(f"eval.dataset.columns.label: row {i} of {path} has a label "
                                  f"in {col!r} that is none of the model's {len(ids)} classes "
                                  f"(config.json id2label); map eval.dataset.columns.label to "
                                  "the column of class ids or names")
