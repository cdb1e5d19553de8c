"""Model sources at plan time: where a checkpoint lives, its content digest, and its I/O specs.

Reads only files (config.json, the checkpoint's bytes for the digest); imports no ML library.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

from planner.errors import ConfigError

TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
TASK_BY_SUFFIX = (
    ("ForMaskedLM", "fill-mask"), ("ForSequenceClassification", "text-classification"),
    ("ForTokenClassification", "token-classification"),
    ("ForQuestionAnswering", "question-answering"), ("Model", "feature-extraction"),
)
CHUNK = 1 << 20
WEIGHTS = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json")


def canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def packaged_dir(package: str) -> Path:
    """The checkpoint directory shipped inside an installed Python package (not imported)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"model.package: '{package}' is not installed; "
                          "install it (pip install 'modelplan[run]') or choose another model")
    root = Path(next(iter(spec.submodule_search_locations)))
    for candidate in (root, *sorted(p for p in root.iterdir() if p.is_dir())):
        if (candidate / "config.json").is_file():
            return candidate
    raise ConfigError(f"model.package: '{package}' ships no checkpoint (no config.json under {root})")


def hub_cache_dir(hub_id: str) -> Path:
    """The snapshot of `hub_id` in the local Hugging Face cache; nothing is downloaded."""
    hub = Path(os.environ.get("HF_HUB_CACHE") or
               Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub")
    repo = hub / ("models--" + hub_id.replace("/", "--"))
    ref = repo / "refs" / "main"
    snap = repo / "snapshots" / ref.read_text().strip() if ref.is_file() else None
    if snap is None or not (snap / "config.json").is_file():
        raise ConfigError(f"model.hub_id: '{hub_id}' is not in the local Hugging Face cache "
                          f"({hub}) and this machine works offline; copy the checkpoint here "
                          "and use model=local_hf model.path=DIR")
    return snap


def checkpoint_location(model: dict[str, Any]) -> Path | None:
    source = model["source"]
    if source == "packaged":
        return packaged_dir(model["package"])
    if source == "hub_cache":
        return hub_cache_dir(model["hub_id"])
    if source in ("local", "onnx_file"):
        path = Path(model["path"]).expanduser().resolve()
        if source == "local" and not (path / "config.json").is_file():
            raise ConfigError(f"model.path: '{model['path']}' is not a Hugging Face checkpoint "
                              "directory (no config.json); point it at one")
        if source == "local" and not any(next(path.glob(p), None) for p in WEIGHTS):
            raise ConfigError(f"model.path: '{model['path']}' has a config.json but no weights "
                              "(*.safetensors or pytorch_model*.bin); point it at a complete "
                              "checkpoint")
        if source == "onnx_file" and not path.is_file():
            raise ConfigError(f"model.path: '{model['path']}' is not a file; "
                              "point it at an existing .onnx model")
        return path
    return None


def locate(model: dict[str, Any]) -> Path | None:
    """checkpoint_location(), with a file system error as one line naming the config key."""
    try:
        return checkpoint_location(model)
    except (OSError, ValueError) as exc:  # e.g. a name too long, a NUL in the path
        key = "hub_id" if model["source"] == "hub_cache" else "path"
        value = str(model[key])
        shown = value if len(value) <= 60 else f"{value[:40]}...{value[-12:]}"
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"model.{key}: cannot use {shown!r} ({why}); point it at an existing "
                          "checkpoint") from exc


class DigestMemo:
    """sha256 of files, memoised by (path, size, mtime) in a JSON file next to the store."""

    def __init__(self, memo_file: Path | None) -> None:
        self.file = memo_file
        self.entries: dict[str, list[Any]] = {}
        self.dirty = False
        if memo_file and memo_file.is_file():
            try:
                self.entries = json.loads(memo_file.read_text())
            except (OSError, ValueError):
                self.entries = {}

    def file_digest(self, path: Path) -> str:
        st = path.stat()
        stamp = [st.st_size, st.st_mtime_ns]
        hit = self.entries.get(str(path))
        if hit and hit[:2] == stamp:
            return hit[2]
        h = hashlib.sha256()
        with path.open("rb") as fh:
            while chunk := fh.read(CHUNK):
                h.update(chunk)
        self.entries[str(path)] = [*stamp, h.hexdigest()]
        self.dirty = True
        return h.hexdigest()

    def tree_digest(self, root: Path) -> str:
        """Digest of every non-hidden file under `root` by relative path and content."""
        files = [root] if root.is_file() else sorted(
            p for p in root.rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts))
        h = hashlib.sha256()
        for p in files:
            rel = p.name if root.is_file() else p.relative_to(root).as_posix()
            h.update(f"{rel}\0{self.file_digest(p)}\n".encode())
        return h.hexdigest()

    def save(self) -> None:
        if not (self.dirty and self.file):
            return
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.file.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self.entries, sort_keys=True))
            tmp.replace(self.file)
        except OSError:
            pass  # the memo is only a speed-up


def source_digest(model: dict[str, Any], where: Path | None, memo: DigestMemo) -> str:
    if model["source"] == "random_init":
        return hashlib.sha256(canonical_json(model["random_init"])).hexdigest()
    assert where is not None
    return memo.tree_digest(where)


def model_info(model: dict[str, Any], where: Path | None) -> dict[str, Any]:
    """The parts of a checkpoint's config.json the planner needs."""
    if model["source"] == "random_init":
        ri = model["random_init"]
        if ri["hidden_size"] % ri["num_attention_heads"]:
            raise ConfigError(
                f"model.random_init.hidden_size: {ri['hidden_size']} is not a multiple of "
                f"num_attention_heads {ri['num_attention_heads']}; change one of them")
        return {"model_type": ri["architecture"], "vocab_size": ri["vocab_size"],
                "type_vocab_size": 2, "architectures": ["BertModel"]}
    if where is None or where.is_file():
        return {}
    try:
        return json.loads((where / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"model: cannot read {where / 'config.json'} ({exc}); "
                          "fix or replace the checkpoint") from exc


def detect_task(model: dict[str, Any], info: dict[str, Any]) -> tuple[str | None, str | None]:
    arch = (info.get("architectures") or [None])[0]
    task = model["task"]
    if task is None and arch:
        task = next((t for suffix, t in TASK_BY_SUFFIX if arch.endswith(suffix)), None)
    return task, model["model_class"] or arch


def derive_inputs(info: dict[str, Any], task: str | None, batch: int, seq: int) -> list[dict]:
    """Input specs for a text model: names, dtypes, shapes and value ranges."""
    vocab = info.get("vocab_size")
    if task is None:
        raise ConfigError("model.task: the checkpoint's config.json names no architecture to "
                          "detect the task from; set model.task (e.g. feature-extraction)")
    if not vocab:
        raise ConfigError(
            f"export.inputs: cannot derive input specs for model_type "
            f"'{info.get('model_type')}' (no vocab_size); set export.inputs to a list of "
            "{name, dtype, shape, min, max}")
    specs = [
        {"name": "input_ids", "dtype": "int64", "shape": [batch, seq], "min": 0, "max": vocab - 1},
        {"name": "attention_mask", "dtype": "int64", "shape": [batch, seq], "min": 0, "max": 1},
    ]
    types = info.get("type_vocab_size") or 0
    if types >= 2 or info.get("model_type") == "bert":
        specs.append({"name": "token_type_ids", "dtype": "int64", "shape": [batch, seq],
                      "min": 0, "max": max(types, 1) - 1})
    return specs
