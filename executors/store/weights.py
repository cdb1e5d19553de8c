"""Weights stored once (docs/architecture.md §4): every initializer of at least THRESHOLD
bytes is ONNX external data in its own file, `weights/<sha256 of its bytes>` beside the graph, so a step that keeps a
weight writes only the graph and links the blob it already has.

A blob is linked (a hard link; a copy where the file system refuses one) from, in order: the
artifact's own directory, the store's blob pool (`<store>/blobs/<d[:2]>/<d>`, set by the step
wrapper while a step runs), the directory the saved model was loaded from and, outside a store,
the directories of models this process loaded. A blob is written only when none of them holds
it, and is then added to the pool. onnx's own loader and checker refuse hard-linked external
data (a guard against hardlink attacks), so `internalize` reads blobs and the checker sees the
graph with its weight locations masked (`masked`, `blob_problems`). The store's manifest covers
every blob of an entry (its name is its digest); `store gc` drops pool blobs no entry names.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from planner.core.storelayout import WEIGHTS

if TYPE_CHECKING:
    import onnx

POOL = "blobs"                      # the store's blob pool
THRESHOLD = 64 * 1024               # smaller tensors (shapes, biases, norms) stay in the graph
EXTERNAL = 1                        # onnx.TensorProto.EXTERNAL
BLOB = re.compile(rf"^{WEIGHTS}/([0-9a-f]{{64}})$")
CHUNK = 1 << 24
_pool: Path | None = None
_sources: list[Path] = []           # directories of models loaded here: where blobs may be


def blob_digest(rel: str) -> str | None:
    """The content digest a file's relative path names, if it is a blob."""
    found = BLOB.match(rel)
    return found.group(1) if found else None


def pool_path(root: Path, digest: str) -> Path:
    return root / digest[:2] / digest


@contextmanager
def blob_pool(root: Path | None) -> Iterator[None]:
    """Link from (and add to) the pool at `root` while the block runs."""
    global _pool
    saved, _pool = _pool, root
    try:
        yield
    finally:
        _pool = saved


def remember(directory: Path) -> None:
    """A directory whose blobs a later save may link (the inputs a step loaded)."""
    directory = directory.resolve()
    if directory in _sources:
        _sources.remove(directory)
    _sources.insert(0, directory)
    del _sources[16:]


def tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every initializer, subgraphs' included."""
    from onnx.external_data_helper import _get_all_tensors

    yield from _get_all_tensors(model)


def externalize(model: onnx.ModelProto, path: Path, base: Path | None = None) -> set[Path]:
    """Make `model` (to be saved at `path`) keep each large tensor as a blob beside it; tensors
    that are external data elsewhere (relative to `base`, default path's directory) are read
    one at a time. The model's tensors are changed in place: their bytes are released.
    Returns the other external-data files beside `path` that it read (a tool's own layout:
    one `model.onnx.data`, or a file per tensor), for the caller to remove once saved."""
    out = path.parent
    base = base or out
    read: set[Path] = set()
    for tensor in tensors(model):
        if tensor.data_location == EXTERNAL:
            info = {e.key: e.value for e in tensor.external_data}
            digest = blob_digest(info.get("location", ""))
            if digest is None or int(info.get("offset", 0)):
                source = _contained(base, info["location"])
                data = _read(source, int(info.get("offset", 0)),
                             int(info["length"]) if "length" in info else None)
                set_data(tensor, data, out)
                if source.parent.resolve() == out.resolve():
                    read.add(source)
                continue
            if not _place(digest, out, base):
                raise FileNotFoundError(2, f"weight blob {digest[:12]} of tensor {tensor.name!r} "
                                        "is in none of the places it may be", str(base))
        elif tensor.HasField("raw_data") and len(tensor.raw_data) >= THRESHOLD:
            set_data(tensor, tensor.raw_data, out)
    return read


def _read(path: Path, offset: int, length: int | None) -> bytes:
    with path.open("rb") as fh:
        fh.seek(offset)
        return fh.read() if length is None else fh.read(length)


def set_data(tensor: onnx.TensorProto, data: bytes | memoryview, out: Path) -> None:
    """Give `tensor` the little-endian bytes `data`: in the graph when small, else as a blob
    in `out` (written unless it is already there or in the pool)."""
    if len(data) < THRESHOLD:
        del tensor.external_data[:]
        if tensor.HasField("data_location"):  # it was external: now it is not
            tensor.data_location = 0
        tensor.raw_data = bytes(data)
        return
    digest = hashlib.sha256(data).hexdigest()
    if not _place(digest, out, None):
        _write_blob(out, digest, data)
    del tensor.external_data[:]
    tensor.external_data.add(key="location", value=f"{WEIGHTS}/{digest}")
    tensor.external_data.add(key="length", value=str(len(data)))
    tensor.data_location = EXTERNAL
    tensor.ClearField("raw_data")


def _place(digest: str, out: Path, base: Path | None) -> bool:
    """Link blob `digest` into `out/weights/` from wherever it already is; False if nowhere."""
    target = out / WEIGHTS / digest
    if target.is_file():
        return True
    # in a store, only what it verified: its pool and the step's input; else what was loaded
    dirs = ([base] if base else []) + (_sources if _pool is None else [])
    places = [d / WEIGHTS / digest for d in dirs]
    if _pool is not None:
        places.insert(0, pool_path(_pool, digest))
    for src in places:
        if src.is_file() and src.resolve() != target.resolve():
            target.parent.mkdir(exist_ok=True)
            link_or_copy(src, target)
            _add_to_pool(target, digest)
            return True
    return False


def _write_blob(out: Path, digest: str, data: bytes | memoryview) -> None:
    target = out / WEIGHTS / digest
    target.parent.mkdir(exist_ok=True)
    tmp = target.with_name(f".{digest}.{uuid.uuid4().hex[:8]}")
    with tmp.open("wb") as fh:
        for start in range(0, len(data), CHUNK):
            fh.write(data[start:start + CHUNK])
    tmp.replace(target)
    _add_to_pool(target, digest)


def _add_to_pool(blob: Path, digest: str) -> None:
    if _pool is None:
        return
    dest = pool_path(_pool, digest)
    if dest.exists():
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(blob, dest)
    except FileExistsError:
        pass
    except OSError:  # no hard links here: the pool keeps a copy
        tmp = dest.with_name(f".{digest}.{uuid.uuid4().hex[:8]}")
        shutil.copyfile(blob, tmp)
        tmp.replace(dest)


def link_or_copy(src: Path, dst: Path) -> None:
    """A hard link to src at dst; a copy where the file system does not allow one."""
    try:
        os.link(src, dst)
    except FileExistsError:
        raise
    except OSError:
        tmp = dst.with_name(f".{dst.name}.{uuid.uuid4().hex[:8]}")
        shutil.copyfile(src, tmp)
        tmp.replace(dst)


def link_blobs(src: Path, out: Path, skip: frozenset[str] | set[str] = frozenset()
               ) -> tuple[int, int]:
    """Link each blob of `src`/weights/ into `out`/weights/ unless one of its name is there (a
    blob is named by its content: a weight two graphs share is stored once) or it is in `skip`
    (as "weights/<name>"). Returns how many it took and how many of those were there already."""
    taken = there = 0
    for blob in sorted((src / WEIGHTS).glob("*")):
        if f"{WEIGHTS}/{blob.name}" in skip:
            continue
        taken += 1
        (out / WEIGHTS).mkdir(exist_ok=True)
        if (out / WEIGHTS / blob.name).exists():
            there += 1
        else:
            link_or_copy(blob, out / WEIGHTS / blob.name)
    return taken, there


def same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def drop_data_files(directory: Path, keep: set[str]) -> None:
    """Remove external-data files in `directory` that the model there no longer names
    (e.g. what a tool wrote before the weights became blobs)."""
    for f in directory.iterdir():
        if f.is_file() and f.name.startswith("model.onnx.") and f.name not in keep:
            f.unlink()


def _external(tensor: onnx.TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in tensor.external_data}


def _contained(base: Path, location: str) -> Path:
    """`base / location`, refused unless it stays inside `base` (no absolute path, no ..)."""
    rel = Path(location)
    if rel.is_absolute() or ".." in rel.parts or not location:
        raise ValueError(f"external data location {location!r} leaves the model's directory")
    return base / rel


def data_file(tensor: onnx.TensorProto, base: Path) -> tuple[Path, int]:
    """The file (inside `base`) and offset of an external tensor's bytes."""
    info = _external(tensor)
    return _contained(base, info["location"]), int(info.get("offset", 0))


def internalize(model: onnx.ModelProto, base: Path, skip: frozenset[str] = frozenset()) -> None:
    """Read every external tensor of `model` (saved in `base`) but those named in `skip`."""
    for tensor in tensors(model):
        if tensor.data_location == EXTERNAL and tensor.name not in skip:
            length = _external(tensor).get("length")
            tensor.raw_data = _read(*data_file(tensor, base),
                                    int(length) if length is not None else None)
            del tensor.external_data[:]
            tensor.data_location = 0


def gather(model: onnx.ModelProto, base: Path, out: Path) -> None:
    """Point every large tensor of `model` (saved in `base`) at one new file `out`, its bytes
    copied there in chunks: a single data file for a tool whose loader refuses hard-linked
    blobs, made without holding the weights in memory."""
    offset = 0
    with out.open("wb") as dst:
        for tensor in tensors(model):
            if tensor.data_location == EXTERNAL:
                length = _external(tensor).get("length")
                path, start = data_file(tensor, base)
                with path.open("rb") as src:
                    src.seek(start)
                    left = int(length) if length is not None else path.stat().st_size - start
                    size = left
                    while left:
                        chunk = src.read(min(CHUNK, left))
                        if not chunk:
                            raise OSError(f"{path} is shorter than tensor {tensor.name!r}")
                        dst.write(chunk)
                        left -= len(chunk)
            elif tensor.HasField("raw_data") and len(tensor.raw_data) >= THRESHOLD:
                size = len(tensor.raw_data)
                dst.write(tensor.raw_data)
                tensor.ClearField("raw_data")
            else:
                continue
            del tensor.external_data[:]
            for key, value in (("location", out.name), ("offset", str(offset)),
                               ("length", str(size))):
                tensor.external_data.add(key=key, value=value)
            tensor.data_location = EXTERNAL
            offset += size
            pad = -offset % 4096  # each tensor page-aligned, as ORT maps external data
            dst.write(b"\0" * pad)
            offset += pad


def blob_problems(model: onnx.ModelProto, base: Path) -> list[str]:
    """External data that is missing, outside `base`, not a regular file, or short."""
    found = []
    for tensor in tensors(model):
        if tensor.data_location != EXTERNAL:
            continue
        info = _external(tensor)
        try:
            path = _contained(base, info.get("location", ""))
        except ValueError as exc:
            found.append(f"tensor {tensor.name!r}: {exc}")
            continue
        if path.is_symlink() or not path.is_file():
            found.append(f"tensor {tensor.name!r}: its data {info.get('location')} is not a "
                         "regular file")
        elif "length" in info and path.stat().st_size < int(info.get("offset", 0)) + \
                int(info["length"]):
            found.append(f"tensor {tensor.name!r}: its data {info['location']} is shorter than "
                         "its declared length")
    return found


# op -> its weight input (Gather's: the table it looks rows up in, an embedding)
WEIGHTED = {"MatMul": 1, "Gemm": 1, "Conv": 1, "ConvTranspose": 1, "Gather": 0}


def matmul_weights(model: onnx.ModelProto) -> frozenset[str]:
    """The initializers that only feed the weight input of MatMul, Gemm or Conv nodes, or the
    table of a Gather (an embedding): most of a model's bytes, and what graph rewrites
    (fusions, shape inference) never read."""
    used: dict[str, bool] = {}
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            used[name] = used.get(name, True) and WEIGHTED.get(node.op_type) == i
    return frozenset(name for name, only in used.items() if only)


def has_external(model: onnx.ModelProto) -> bool:
    return any(t.data_location == EXTERNAL for t in tensors(model))


def unmask(model: onnx.ModelProto) -> None:
    """Undo `masked` on a model made from a masked one (in place)."""
    for tensor in tensors(model):
        for entry in tensor.external_data:
            if entry.key == "location" and entry.value.startswith("#"):
                entry.value = entry.value[1:]


def masked(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` whose external locations onnx.checker does not resolve (it checks
    the graph; blob_problems checks the files)."""
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for tensor in tensors(copy):
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = f"#{entry.value}"
    return copy
