"""Model sources at plan time: where a checkpoint lives, its content digest, and its I/O specs.

Reads only files (config.json, the checkpoint's bytes for the digest); imports no ML library.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import ConfigError
from planner.models.hfcache import hub_cache
from planner.models.lm_classes import completed
from planner.models.tasks import with_class
from planner.support.atomic import write_atomic
from planner.support.digests import file_sha256

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
    hub = hub_cache()
    repo = hub / ("models--" + hub_id.replace("/", "--"))
    ref = repo / "refs" / "main"
    snap = repo / "snapshots" / ref.read_text().strip() if ref.is_file() else None
    if snap is None or not (snap / "config.json").is_file():
        raise ConfigError(f"model.hub_id: '{hub_id}' is not in the local Hugging Face cache "
                          f"({hub}) and this machine works offline; copy the checkpoint here "
                          "and set model.path=DIR")
    return snap


def checkpoint_location(model: dict[str, Any]) -> Path | None:
    source = model["source"]
    if source == "packaged":
        return packaged_dir(model["package"])
    if source == "hub_cache" and not model.get("path"):
        return hub_cache_dir(model["hub_id"])
    if source in ("local", "onnx_file", "hub_cache"):  # hub_cache + path: a local copy of hub_id
        path = Path(model["path"]).expanduser().resolve()
        checkpoint = source != "onnx_file"
        if not path.exists():
            where = "" if str(path) == model["path"] else f" (here: {path})"
            wanted = "a checkpoint directory" if checkpoint else "an existing .onnx model"
            raise ConfigError(f"model.path: '{model['path']}' does not exist{where}; "
                              f"point it at {wanted}")
        if checkpoint and not (path / "config.json").is_file():
            raise ConfigError(f"model.path: '{model['path']}' is not a Hugging Face checkpoint "
                              "directory (no config.json); point it at one")
        if checkpoint and not any(next(path.glob(p), None) for p in WEIGHTS):
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
        digest = file_sha256(path)
        self.entries[str(path)] = [*stamp, digest]
        self.dirty = True
        return digest

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
            write_atomic(self.file, json.dumps(self.entries, sort_keys=True))
            self.dirty = False
        except OSError:
            pass  # the memo is only a speed-up


@dataclass(frozen=True)
class Source:
    """A model source as the planner read it. `symbolic` says why its checkpoint could not be
    read: the digest then stands for the source's identity, not its content."""

    where: Path | None
    info: dict[str, Any]
    digest: str
    symbolic: str | None = None


def read_source(model: dict[str, Any], memo: DigestMemo, symbolic: bool = False) -> Source:
    """Locate, describe and digest a model source. symbolic: when the checkpoint cannot be read
    here (not installed, not in the cache, not on this disk), plan with a symbolic digest of
    its identity instead of failing (review machines have no weights)."""
    if model["source"] == "random_init":
        return Source(None, model_info(model, None), source_digest(model, None, memo))
    try:
        where = locate(model)
        info = model_info(model, where)
    except ConfigError as exc:
        if not symbolic:
            raise
        return Source(None, {}, symbolic_digest(model), symbolic="; ".join(exc.lines))
    return Source(where, info, source_digest(model, where, memo))


def symbolic_digest(model: dict[str, Any]) -> str:
    """sha256 of what names a source (kind, package, hub id, path as written), never equal
    to a content digest (a different preimage)."""
    identity = {k: model[k] for k in ("source", "package", "hub_id", "path")}
    return hashlib.sha256(b"modelplan-symbolic-source\0" + canonical_json(identity)).hexdigest()


def source_digest(model: dict[str, Any], where: Path | None, memo: DigestMemo) -> str:
    if model["source"] == "random_init":
        return hashlib.sha256(canonical_json(random_init(model))).hexdigest()
    assert where is not None
    return memo.tree_digest(where)


def random_init(model: dict[str, Any]) -> dict[str, Any]:
    """The effective random-init spec: the model type's tiny config under the user's fields."""
    from planner.models.tiny import TINY, TINY_PREPROCESSOR, generic

    ri = model["random_init"]
    tiny = TINY[ri["model_type"]] if ri["model_type"] in TINY else generic(ri["model_type"])
    _check_types(tiny, ri.get("config") or {}, f"model.random_init.config ({ri['model_type']})")
    return {"model_type": ri["model_type"], "seed": ri["seed"],
            "config": _merged(tiny, ri.get("config") or {}),
            "preprocessor": _merged(TINY_PREPROCESSOR.get(ri["model_type"], {}),
                                    ri.get("preprocessor") or {})}


# config.json fields that size or count something (layers, heads, widths, vocabulary, lengths)
_SIZE = re.compile(r"^(num_|n_)|(_size|_dim|_layers|_heads|_positions|_length)$|^d_(model|ff|kv)$")
_JSON_TYPES = ((bool, "true or false"), (int, "an integer"), (float, "a number"),
               (str, "a string"), (list, "a list"), (dict, "a mapping"))


def _json_type(value: Any) -> str | None:
    return next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), None)


def _check_types(base: dict[str, Any], new: dict[str, Any], where: str) -> None:
    """A field the model type's tiny config has must keep its JSON type (an integer may stand
    for a number): caught here, at plan time, instead of by transformers in the resolve step."""
    for key, value in new.items():
        if _SIZE.search(key) and isinstance(value, int) and not isinstance(value, bool) \
                and value < 1:
            raise ConfigError(f"{where.partition(' (')[0]}.{key}: {value} is a size or a count "
                              "of the model; give it 1 or more")
        want, have = _json_type(base.get(key)), _json_type(value)
        if want is None or value is None or have == want or (want, have) == ("a number",
                                                                              "an integer"):
            continue
        if isinstance(value, dict):
            continue
        path, _, owner = where.partition(" (")
        raise ConfigError(f"{path}.{key}: {value!r} is not {want}; give it {want}, as "
                          f"{owner[:-1]}'s tiny config does ({key}: {base[key]!r})")
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _check_types(base[key], value, where.replace(" (", f".{key} (", 1))


def _merged(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in new.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def model_info(model: dict[str, Any], where: Path | None) -> dict[str, Any]:
    """The parts of a checkpoint's config.json the planner needs (a config that names no class
    takes the one the model config asks for: planner/models/tasks.py `with_class`)."""
    if model["source"] == "random_init":
        ri = random_init(model)
        cfg = ri["config"]
        heads, hidden = cfg.get("num_attention_heads"), cfg.get("hidden_size")
        if isinstance(heads, int) and isinstance(hidden, int) and hidden % heads:
            raise ConfigError(
                f"model.random_init.config.hidden_size: {hidden} is not a multiple of "
                f"num_attention_heads {heads}; change one of them")
        return with_class(model, {**cfg, "model_type": ri["model_type"], "architectures": []})
    if where is None or where.is_file():
        return {}
    return with_class(model, completed(_read_json(where / "config.json", required=True)))


def preprocessor_info(model: dict[str, Any], where: Path | None) -> dict[str, Any]:
    """The checkpoint's preprocessor_config.json (image processor or feature extractor), or
    what a random-init model's `preprocessor` says of it."""
    if model["source"] == "random_init":
        pre = random_init(model)["preprocessor"]
        size = pre.get("image_size")
        h, w = (size, size) if isinstance(size, int) else (size or (None, None))
        return {**({"size": {"height": h, "width": w}} if h else {}),
                **({"sampling_rate": pre["sampling_rate"]} if "sampling_rate" in pre else {})}
    if where is None or where.is_file():
        return {}
    return _read_json(where / "preprocessor_config.json", required=False)


def checkpoint_files(where: Path | None) -> tuple[str, ...]:
    if where is None or where.is_file():
        return ()
    return tuple(sorted(p.name for p in where.iterdir() if p.is_file()))


def _read_json(path: Path, required: bool) -> dict[str, Any]:
    if not path.is_file() and not required:
        return {}
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"model: cannot read {path} ({exc}); "
                          "fix or replace the checkpoint") from exc
