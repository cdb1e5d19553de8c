"""Model types whose graphs hold what HTP has no builder for, built for qnn_htp on the HTP
simulator: Einsum of many equations (XLNet, Funnel), F.fold / F.unfold (MobileViTV2: Col2Im at
the opset export raises to, and a rank-6 unfold chain), a pooling form the QNN EP declines
after its NHWC layout transformation (EfficientNet's pooler), a Mul HTP computes wrongly with
its constant second (PoolFormer's GroupNorm scale), and LLMs: torch.export's (a GatherND on
the mask, Reciprocal) and a state-space one's (Softplus, CumSum, no genai stages)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from tests.checkpoints import TOKENIZER_FILES, minilm_dir, text_checkpoint
from tests.conftest import shared_dir
from tests.integration.conftest import run_json, step

pytestmark = pytest.mark.slow

IMAGE = {"image_processor_type": "ViTImageProcessor", "size": {"height": 64, "width": 64},
         "do_normalize": True, "do_resize": True, "do_rescale": True,
         "image_mean": [0.5] * 3, "image_std": [0.5] * 3}
MODELS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "xlnet": ("XLNetForSequenceClassification", "xlnet",
              {"d_model": 32, "n_layer": 2, "n_head": 2, "d_inner": 64}),
    "funnel": ("FunnelForSequenceClassification", "funnel",
               {"d_model": 32, "n_head": 2, "d_head": 16, "d_inner": 64, "block_sizes": [1, 1],
                "num_decoder_layers": 1}),
    "mobilevitv2": ("MobileViTV2ForImageClassification", "mobilevitv2",
                    {"image_size": 64, "width_multiplier": 0.25}),
    # its pooler: AvgPool2d(hidden_dim, ceil_mode=True), a 320x320 kernel on a 2x2 map
    "efficientnet": ("EfficientNetForImageClassification", "efficientnet",
                     {"image_size": 64, "width_coefficient": 0.25, "depth_coefficient": 0.2,
                      "hidden_dim": 320}),
    # PoolFormer-S12's widths: its last stage's GroupNorm scale Mul, x[1,512,2,2] * c[512,1,1]
    "poolformer": ("PoolFormerForImageClassification", "poolformer",
                   {"image_size": 64, "hidden_sizes": [64, 128, 320, 512],
                    "depths": [1, 1, 1, 1]}),
}


def _checkpoint(factory: pytest.TempPathFactory, name: str) -> Path:
    """A random-weight checkpoint of `name` (text models with MiniLM's tokenizer)."""
    dest = shared_dir(factory) / f"ckpt-{name}"
    with FileLock(f"{dest}.lock"):
        if not (dest / "config.json").is_file():
            import torch
            import transformers

            cls, model_type, config = MODELS[name]
            torch.manual_seed(0)
            if "image_size" not in config:
                config = {**config, "vocab_size": sum(1 for _ in (minilm_dir() / "vocab.txt")
                                                      .open())}
            cfg = transformers.AutoConfig.for_model(model_type, **config)
            model = getattr(transformers, cls)(cfg).eval()
            with torch.no_grad():  # norms' scales as trained ones are, not all ones
                for m in model.modules():
                    if isinstance(m, torch.nn.GroupNorm) and m.weight is not None:
                        m.weight.uniform_(0.5, 1.5)
            model.save_pretrained(str(dest))
            if "image_size" in config:
                (dest / "preprocessor_config.json").write_text(json.dumps(IMAGE))
            else:
                for f in TOKENIZER_FILES:
                    if (minilm_dir() / f).is_file():
                        shutil.copy(minilm_dir() / f, dest / f)
    return dest


def _build(tmp_path: Path, factory: pytest.TempPathFactory, name: str, *args: str) -> dict:
    code, record, err = run_json("model=local_hf", f"model.path={_checkpoint(factory, name)}",
                                 "perf=none", "eval=none", "verify.samples=2", *args,
                                 store=tmp_path / "store", outputs=tmp_path / "out")
    assert code == 0, err
    return record


@pytest.mark.parametrize("name, threshold", [("xlnet", 0.99), ("funnel", 0.95)])
def test_einsum_models_build_for_htp(tmp_path, tmp_path_factory, name, threshold):
    # funnel's w8a16 cosine is 0.98 on the CPU's QDQ too: its loss is quantization, not HTP
    record = _build(tmp_path, tmp_path_factory, name, "target=qnn_htp",
                    f"verify.threshold={threshold}")
    assert step(record, "legalize")["metrics"]["rewrites"]["einsum_general"] >= 4
    assert step(record, "verify")["metrics"]["cosine_mean"] >= threshold


@pytest.mark.parametrize("target", ["cpu", "qnn_htp"])
def test_fold_model_exports_at_opset_18_and_builds(tmp_path, tmp_path_factory, target):
    record = _build(tmp_path, tmp_path_factory, "mobilevitv2", f"target={target}")
    export = step(record, "export")["metrics"]
    assert export["opset_used"] == 18 and "aten::col2im" in export["opset_why"]
    assert step(record, "verify")["metrics"]["cosine_mean"] >= 0.99
    if target == "qnn_htp":
        rewrites = step(record, "legalize")["metrics"]["rewrites"]
        assert rewrites["col2im"] >= 1 and rewrites["index_chains"] >= 1


def test_pooler_kernel_past_its_input_compiles_for_htp(tmp_path, tmp_path_factory):
    # before legalize rewrote it, compile failed: the QNN EP declined the NHWC AveragePool;
    # no verify threshold: this random-init EfficientNet's logits are about 1e-35 (no cosine
    # to read)
    record = _build(tmp_path, tmp_path_factory, "efficientnet", "target=qnn_htp",
                    "verify.threshold=0")
    assert step(record, "legalize")["metrics"]["rewrites"]["covering_average_pools"] == 1
    assert step(record, "compile")["status"] in ("ok", "cached")


def test_group_norm_scale_mul_is_accurate_on_htp(tmp_path, tmp_path_factory):
    # with the constant second, this w8a16_pc build read 0.9998 on the CPU EP and -0.54 on HTP
    record = _build(tmp_path, tmp_path_factory, "poolformer", "target=qnn_htp")
    assert step(record, "legalize")["metrics"]["rewrites"]["constant_first_muls"] == 9
    assert step(record, "verify")["metrics"]["cosine_mean"] >= 0.99


def test_a_torch_export_llm_in_bf16_builds_for_htp(tmp_path, tmp_path_factory):
    # torch.export's graphs index the boolean mask with a GatherND on constant index grids
    # (compile failed on it) and take RMSNorm's rsqrt as Reciprocal(Sqrt), which HTP computed
    # 41x low (prompt graph cosine 0.53 once it compiled); such a norm is now fused into one
    # node (executors/onnx/rms_norms.py), which leaves no Reciprocal
    ckpt = text_checkpoint(shared_dir(tmp_path_factory) / "ckpt-glm4-bf16", "Glm4ForCausalLM",
                           "glm4", dtype="bfloat16", num_key_value_heads=1, head_dim=32,
                           pad_token_id=0, bos_token_id=101, eos_token_id=102)
    code, record, err = run_json(
        "model=local_hf", f"model.path={ckpt}", "export=dynamo", "target=qnn_htp",
        "quant=w8a16_pc", "quant.calibration.samples=4", "verify.samples=2", "perf=none",
        "export.shapes.prefill_length=8", "export.shapes.context_length=32",
        store=tmp_path / "store", outputs=tmp_path / "out")
    assert code == 0, err
    for graph in ("prefill", "decode"):
        rewrites = step(record, f"{graph}.legalize")["metrics"]["rewrites"]
        # 2 layers x 4 RMSNorms, and the last one
        assert rewrites["gathernd"] == 1 and rewrites["rms_norms"] == 9
        assert "reciprocals" not in rewrites
        assert step(record, f"{graph}.verify")["metrics"]["cosine_mean"] >= 0.99
    assert step(record, "verify_generation")["metrics"]["cosine_mean"] >= 0.99


def test_a_state_space_llm_builds_for_htp(tmp_path, tmp_path_factory):
    # Mamba-2: HTP has no Softplus (its step sizes) and declined its chunked scan's CumSum; its
    # 16-bit Log of inputs near 1 is wrong, so the Softplus is composed without one (the
    # recurrent state came out all zero); genai's pipeline has no input for the states: no
    # stages, the bundle runs with `modelplan generate`
    ckpt = text_checkpoint(shared_dir(tmp_path_factory) / "ckpt-mamba2-bf16", "Mamba2ForCausalLM",
                           "mamba2", dtype="bfloat16", num_heads=4, head_dim=32, n_groups=1,
                           state_size=128, expand=2, pad_token_id=0, bos_token_id=101,
                           eos_token_id=102)
    code, record, err = run_json(
        "model=local_hf", f"model.path={ckpt}", "target=qnn_htp", "quant=w8a16_pc",
        "verify.samples=2", "perf=none", "export.shapes.prefill_length=8",
        "export.shapes.context_length=32", store=tmp_path / "store", outputs=tmp_path / "out")
    assert code == 0, err
    for graph in ("prefill", "decode"):
        rewrites = step(record, f"{graph}.legalize")["metrics"]["rewrites"]
        assert rewrites["softplus"] == 2  # one a layer
        assert step(record, f"{graph}.verify")["metrics"]["cosine_mean"] >= 0.99
    assert step(record, "prefill.legalize")["metrics"]["rewrites"]["cumsum"] == 6  # 3 a layer
    staged = step(record, "genai_stages")["metrics"]
    assert staged["stages"] is None and "past_key_values.0.conv.0" in staged["why_not"]
    assert step(record, "verify_generation")["metrics"]["cosine_mean"] >= 0.99


@pytest.mark.slow
def test_a_gated_delta_rule_llm_builds_for_htp(tmp_path, tmp_path_factory):
    # Qwen3.5 from bf16 with the default exporter: its chunked delta rule's triangular solve is
    # composed for TorchScript (no MatMul reading a constant, no Neg: HTP rejects both there),
    # and its decode graph's state update, an outer product as a broadcast Mul, is a MatMul on
    # HTP (the new state came out at cosine 0.06 against the CPU's on the same QDQ graph)
    ckpt = text_checkpoint(
        shared_dir(tmp_path_factory) / "ckpt-qwen3_5-bf16", "Qwen3_5ForCausalLM",
        "qwen3_5_text", dtype="bfloat16", layer_types=["linear_attention", "full_attention"],
        linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=32,
        linear_value_head_dim=32, head_dim=32, num_key_value_heads=2, pad_token_id=0,
        bos_token_id=101, eos_token_id=102)
    code, record, err = run_json(
        "model=local_hf", f"model.path={ckpt}", "target=qnn_htp", "quant=w8a16_pc",
        "verify.samples=2", "perf=none", "export.shapes.prefill_length=8",
        "export.shapes.context_length=32", store=tmp_path / "store", outputs=tmp_path / "out")
    assert code == 0, err
    assert step(record, "decode.legalize")["metrics"]["rewrites"]["outer_products"] >= 1
    for graph in ("prefill", "decode"):
        assert step(record, f"{graph}.verify")["metrics"]["cosine_mean"] >= 0.99
    assert step(record, "verify_generation")["metrics"]["cosine_mean"] >= 0.99
