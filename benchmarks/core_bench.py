"""The planning core as the GitHub Action and the pre-commit hooks install it: a fresh venv,
`pip install <this checkout>` without extras (no torch, no onnxruntime). Prints the install
time, the size of its site-packages, and the median wall time of `modelplan plan` and
`modelplan diff --rev` there. Needs a package index (PyPI) for the three dependencies.

Run: python benchmarks/core_bench.py [N]   (N timed runs per command, default 7)"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "onnx", "onnxruntime", "transformers")


def run(*cmd: str | Path, cwd: Path | None = None) -> float:
    t0 = time.perf_counter()
    subprocess.run([str(c) for c in cmd], check=True, cwd=cwd, capture_output=True, text=True)
    return time.perf_counter() - t0


def size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def review_repo(root: Path) -> None:
    """A repository with a team config, a base commit and a change (w8a8 -> w8a16)."""
    (root / "conf" / "quant").mkdir(parents=True)
    quant = root / "conf" / "quant" / "ours.yaml"
    quant.write_text("defaults:\n  - w8a8\n  - _self_\nname: ours\n")
    git = ("git", "-C", root, "-c", "user.name=b", "-c", "user.email=b@example.com")
    run(*git[:3], "init", "-q")
    run(*git, "add", "-A")
    run(*git, "commit", "-qm", "base")
    quant.write_text("defaults:\n  - w8a16\n  - _self_\nname: ours\n")
    run(*git, "commit", "-qam", "w8a16")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    with tempfile.TemporaryDirectory(prefix="modelplan-core-") as tmp:
        venv = Path(tmp) / "venv"
        run(sys.executable, "-m", "venv", venv)
        pip = venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-cache-dir"
        run(*pip, "--upgrade", "pip")
        install = run(*pip, ROOT)
        site = next((venv / "lib").glob("python3*/site-packages"))
        present = [m for m in HEAVY if (site / m).exists()]
        dists = sorted(p.name.split("-")[0] for p in site.glob("*.dist-info"))
        modelplan = venv / "bin" / "modelplan"
        repo = Path(tmp) / "repo"
        review_repo(repo)
        store = Path(tmp) / "store"
        cmds = {
            "plan model=tiny_bert": (modelplan, "plan", "model=tiny_bert", "--store", store),
            "plan --symbolic-sources (MiniLM, no weights)":
                (modelplan, "plan", "--symbolic-sources", "--store", store),
            "diff --rev HEAD~1 (two plans)":
                (modelplan, "diff", "--rev", "HEAD~1", "--config-dir", "conf", "quant=ours"),
        }
        times, first = {}, {}
        for label, cmd in cmds.items():
            first[label] = run(*cmd, cwd=repo)  # also warms the page cache and the digest memo
            times[label] = statistics.median(run(*cmd, cwd=repo) for _ in range(n))
        print(f"planning core (pip install <checkout>, no extras), Python "
              f"{sys.version_info.major}.{sys.version_info.minor}, {os.cpu_count()} cores")
        print(f"  install (pip, wheels from the index)  {install:6.1f} s")
        tools = sum(size_mb(p) for p in site.glob("*") if p.name.split("-")[0].split(".")[0]
                    in ("pip", "setuptools", "_distutils_hack", "distutils"))
        print(f"  site-packages                         {size_mb(site):6.1f} MB "
              f"({size_mb(site) - tools:.1f} MB without the venv's own pip and setuptools)")
        print(f"  distributions                         {', '.join(dists)}")
        print(f"  heavy packages present                {present or 'none'}")
        for label, t in times.items():
            print(f"  modelplan {label:<44} {t:5.2f} s (median of {n}; first run "
                  f"{first[label]:.2f} s)")
        shutil.rmtree(venv)


if __name__ == "__main__":
    main()
