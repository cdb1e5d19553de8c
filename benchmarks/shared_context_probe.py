"""Figures for EPContext weight sharing on the QNN EP (executors/runtime/shared_context.py):
a prefill/decode pair of QDQ MatMul graphs (1 MiB of uint8 weights, sequence 8 and 1) compiled
sharing one context binary and one binary per graph. Prints the binary sizes, whether each set
loads on this host (each attempt in a child process: exit code or signal), the load time of
each session and the cosine of each graph's output against the CPU EP.

Run: python benchmarks/shared_context_probe.py [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from executors.runtime import shared_context as sc
from planner.core.targets import named
from tests.qdq_pairs import write_pair

HTP = named("qnn_htp")


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _sizes(models: list[Path]) -> str:
    bins = sc.binaries_of(models)
    return f"{len(bins)} binary(ies), {sum(b.stat().st_size for b in bins):,} bytes " + \
        "(" + ", ".join(f"{b.name} {b.stat().st_size:,}" for b in bins) + ")"


def _run_on_host(sources: list[Path], cs: sc.ContextSet) -> None:
    import onnxruntime as ort

    rng = np.random.default_rng(1)
    for source, model in zip(sources, cs.models, strict=True):
        start = time.perf_counter()
        sess = sc.open_sessions(HTP, sc.ContextSet([model], [], cs.shared))[0]
        took = time.perf_counter() - start
        x = rng.uniform(-1, 1, size=sess.get_inputs()[0].shape).astype(np.float32)
        cpu = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"])
        cos = _cosine(sess.run(None, {"x": x})[0], cpu.run(None, {"x": x})[0])
        print(f"  {model.name}: session {took * 1000:.0f} ms, cosine vs CPU {cos:.5f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="shared_context_"))
    sources = write_pair(root / "src", hidden=512, inner=1024)
    print(f"weights: {2 * 512 * 1024:,} bytes uint8 in each source graph ({root})")
    for share in (True, False):
        label = "shared" if share else "separate"
        start = time.perf_counter()
        models = sc.compile_group(HTP, sources, root / label, share=share)
        print(f"{label}: compiled in {time.perf_counter() - start:.2f} s (child processes), "
              f"{_sizes(models)}")
        problem = sc.load_problem(HTP, models, shared=share)
        print(f"  loads here: {'yes' if not problem else 'no: ' + problem}")
        if not problem:
            _run_on_host(sources, sc.ContextSet(models, sc.binaries_of(models), share))
    cs = sc.build_context_set(HTP, sources, root / "build")
    print(f"build_context_set: shared={cs.shared} binaries={len(cs.binaries)}"
          + (f"; {cs.reason}" if cs.reason else ""))


if __name__ == "__main__":
    main()
