"""A module's own error on the target: its piece of the QDQ graph compiled for the config's
target (a session on its EP, as the compile step opens one) and fed the fp32 graph's values
at its inputs, beside the same piece on the CPU EP. A loss that is the target's own (the
piece fine on the CPU, bad on the target) shows as the dB between the two.

A piece's outputs here are its output tensors' Q -> DQ copies: what a quantized backend
hands on (a float tensor inside a Q/DQ group is not one the target computes)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from executors.diagnosis import module_error, own_error
from executors.diagnosis.module_error import Runs, Stats, own_fields, session


def worst_leaves(rows: list[dict[str, Any]], n: int) -> list[str]:
    """The `n` modules with the worst own error among those no other row is inside (a parent's
    piece holds its children's: on a simulator, the smallest piece that shows the loss)."""
    tags = [r["tag"] for r in rows if r["tag"] != module_error.UNTAGGED]
    leaves = [r for r in rows if r["tag"] in tags
              and not any(t.startswith(r["tag"] + "/") for t in tags)]
    ranked = sorted(leaves, key=lambda r: (r.get("own_sqnr_db") is None,
                                           r.get("own_sqnr_db") or 0.0))
    return [r["tag"] for r in ranked[:n]]


def target_session(runtime: Any, target: Any, provider_options: dict[str, Any],
                   cpu_fallback: bool, where: Path) -> Callable[[own_error.Piece], Any]:
    """Opens a piece on the target; a failure raises QNN's own first error line."""
    from executors.runtime.nativelog import native_log

    def make(piece: own_error.Piece) -> Any:
        path = where / f"piece{len(list(where.iterdir()))}.onnx"
        onnx.save(piece.model, path)
        with native_log() as log:
            try:
                return runtime.session(path, target, provider_options, cpu_fallback=cpu_fallback)
            except Exception as exc:
                said = runtime.errors(log)[0] if hasattr(runtime, "errors") else []
                cause = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
                raise RuntimeError(f"did not compile: {said[0] if said else cause}") from exc
    return make


def compare_on_target(fp32: onnx.ModelProto, qdq: onnx.ModelProto,
                      feeds: list[dict[str, np.ndarray]], tags: Iterable[str], target: Any,
                      provider_options: dict[str, Any], cpu_fallback: bool = False,
                      say: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Per module of `tags`: its piece's own error on the CPU EP and on `target` (SQNR,
    cosine), both fed the fp32 values on `feeds`; `error` where the target refused it."""
    from executors.runtime.adapters import adapter

    pairs = module_error.compared_tensors(fp32, qdq)
    outs, _ = module_error.module_outputs(qdq, pairs)
    tags = list(tags)
    cpu = own_error.plan_pieces(fp32, qdq, pairs, outs, tags, quantized_outputs=True)
    dev = own_error.plan_pieces(fp32, qdq, pairs, outs, tags, quantized_outputs=True)
    from_fp32, from_qdq = own_error.wanted(cpu)
    runs = Runs(fp32, qdq, from_fp32, from_qdq, ((), ()))
    samples = [own_error.kept(cpu, *runs(feed)) for feed in feeds]
    own_error.run_pieces(qdq, cpu, samples, lambda p: session(p.model.SerializeToString()),
                         Stats)
    with tempfile.TemporaryDirectory(prefix="modelplan-pieces-") as tmp:
        make = target_session(adapter(target), target, provider_options, cpu_fallback, Path(tmp))
        own_error.run_pieces(qdq, dev, samples, make, Stats, progress=lambda p, i: say(
            f"  {target.name}: {p.tag}, sample {i + 1}/{len(samples)}") if say else None)
    rows = []
    for c, d in zip(cpu, dev, strict=True):
        mine, theirs = own_fields(c, 0.0), own_fields(d, 0.0)
        rows.append({"tag": c.tag, "nodes": c.cut.module_nodes,
                     "cpu_sqnr_db": mine["own_sqnr_db"], "cpu_cosine": mine["own_cosine"],
                     "target_sqnr_db": theirs["own_sqnr_db"],
                     "target_cosine": theirs["own_cosine"],
                     **({"error": d.error} if d.error else {})})
    return rows


def diagnose_on_target(reference: Path, candidate: Path, source: Path | None,
                       rows: list[dict[str, Any]], n: int, target_config: dict[str, Any],
                       samples: int, say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """compare_on_target() for the `n` worst modules of a CPU diagnosis (`rows`), on the
    config's target, with `samples` verify inputs."""
    from executors.onnx.artifacts import load
    from executors.onnx.iospecs import io_specs
    from executors.samples import Samples
    from planner.core.targets import of_config

    target = of_config(target_config)
    tags = worst_leaves(rows, n)
    made = Samples(io_specs(reference)[0], "verify", source=source)
    if say:
        say(f"on {target.name}: {len(tags)} piece(s), {samples} sample(s) each: "
            f"{', '.join(tags)}")
    found = compare_on_target(load(reference), load(candidate), made.feeds(samples), tags,
                              target, target_config.get("provider_options") or {},
                              bool(target_config.get("cpu_fallback")), say)
    return {"target": target.name, "samples": samples, "modules": found}
