"""Generative families no catalogue entry names, each built from its own config.json and
forward (benchmarks/families_bench.py builds all of the installed transformers'): tiny
random-weight checkpoints saved in bf16 or fp16 as downloaded ones are, built for the CPU in
fp32 through `model=local_hf`, whose greedy generation matches PyTorch token for token."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx
import pytest

from tests.checkpoints import TINY, text_checkpoint
from tests.conftest import run_cli
from tests.integration.conftest import run_json, step

SHAPES = ("export.shapes.prefill_length=8", "export.shapes.context_length=32")
IDS = {"pad_token_id": 0, "bos_token_id": 101, "eos_token_id": 102}
MOE = {"num_local_experts": 4, "num_experts_per_tok": 2}

# (model type, class, dtype saved in, config fields beyond tests/checkpoints.py's TINY)
CASES: tuple[tuple[str, str, str, dict[str, Any]], ...] = (
    ("mixtral", "MixtralForCausalLM", "bfloat16", {**MOE, "num_key_value_heads": 1}),
    # experts looped over in its own forward (runtime/dense_experts.py); a 1-norm router
    ("dbrx", "DbrxForCausalLM", "bfloat16", {
        "d_model": 64, "attn_config": {"kv_n_heads": 1, "clip_qkv": 8.0, "rope_theta": 10000.0},
        "ffn_config": {"moe_num_experts": 4, "moe_top_k": 2, "ffn_hidden_size": 64,
                       "hidden_size": 64}}),
    # its experts' loop squeezes the k picks of a token: TorchScript writes an If on their count,
    # which the graph's constants decide (normalize folds it: executors/onnx/static_ifs.py)
    ("longcat_flash", "LongcatFlashForCausalLM", "bfloat16", {
        "num_layers": 2, "ffn_hidden_size": 128, "expert_ffn_hidden_size": 32,
        "n_routed_experts": 4, "moe_topk": 2, "zero_expert_num": 2, "kv_lora_rank": 16,
        "q_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 16, "v_head_dim": 32,
        "head_dim": 16}),
    ("apertus", "ApertusForCausalLM", "float16", {"num_key_value_heads": 1}),  # xIELU: expm1
    ("bloom", "BloomForCausalLM", "bfloat16", {}),  # no position ids: ALiBi from the mask
    ("bert", "BertLMHeadModel", "float16", {"is_decoder": True}),  # an encoder type's LM
    # no position ids, its positions counted from the cache; its fields named decoder_*
    ("trocr", "TrOCRForCausalLM", "bfloat16", {}),
    # positions counted from the padding index when none are given: PyTorch's reference is
    # stepped at generate's 0, 1, ... as the graphs are
    ("roberta", "RobertaForCausalLM", "bfloat16", {"is_decoder": True}),
    # its heads named num_heads; global and local attention, the local one over a window of 40
    # (its narrowest for these 32 slots and a prompt window of 8: its mask over key indices
    # also covers the window's tokens after the slots; with the decode graph alone, a window
    # of 32 diverged from PyTorch's tokens; a narrower one is a plan-time line)
    ("gpt_neo", "GPTNeoForCausalLM", "bfloat16",
     {"attention_types": [[["global", "local"], 1]], "window_size": 40}),
    # the class AutoModelForCausalLM loads for gemma3: an image-text model, built on its
    # text_config and fed token ids alone; its heads are Gemma3TextConfig's defaults, which its
    # config.json leaves out (OMITTED)
    ("gemma3", "Gemma3ForConditionalGeneration", "bfloat16", {
        "text_config": {"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                        **IDS},
        "mm_tokens_per_image": 4,
        "vision_config": {**TINY, "num_hidden_layers": 1, "image_size": 32, "patch_size": 16}}),
    # language models that read images among their tokens (AutoModelForImageTextToText's
    # classes), fed token ids alone: Qwen3.5 ships its checkpoints as this class, from which
    # Qwen3_5ForCausalLM (AutoModelForCausalLM's for its type) loads the text model (a gated
    # linear-attention layer beside an attention layer); LLaVA's own class runs its Llama
    ("qwen3_5", "Qwen3_5ForConditionalGeneration", "bfloat16", {
        "text_config": {"layer_types": ["linear_attention", "full_attention"],
                        "num_key_value_heads": 1, "head_dim": 32, "linear_num_key_heads": 2,
                        "linear_num_value_heads": 2, "linear_key_head_dim": 16,
                        "linear_value_head_dim": 16, **IDS},
        "vision_config": {"depth": 1, "hidden_size": 32, "intermediate_size": 64,
                          "num_heads": 2, "out_hidden_size": 64}}),
    ("llava", "LlavaForConditionalGeneration", "float16", {
        "text_config": {"model_type": "llama", "num_key_value_heads": 1, **IDS},
        "vision_config": {**TINY, "num_hidden_layers": 1, "image_size": 32,
                          "patch_size": 16}}),
    # a sparse attention's indexer scores keys the static cache does not carry (the slots'
    # are zeros): the context within index_topk chooses every slot, as PyTorch does
    ("deepseek_v32", "DeepseekV32ForCausalLM", "bfloat16", {
        "layer_types": ["indexed_attention", "indexed_attention"],
        "mlp_layer_types": ["dense", "sparse"], "index_head_dim": 64, "index_n_heads": 4,
        "index_topk": 64, "kv_lora_rank": 16, "q_lora_rank": 16, "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 16, "v_head_dim": 32, "head_dim": 16, "n_routed_experts": 4,
        "num_experts_per_tok": 2, "moe_intermediate_size": 32, "n_group": 1,
        "topk_group": 1, "num_key_value_heads": 2, "first_k_dense_replace": 1}),
    # a cache config.json does not say: its sliding-window layer caches twice
    # num_key_value_heads, and its values are v_head_dim wide, not head_dim
    ("mimo_v2_flash", "MiMoV2FlashForCausalLM", "bfloat16", {
        "num_key_value_heads": 1, "head_dim": 32, "v_head_dim": 16,
        "layer_types": ["full_attention", "sliding_attention"],
        "mlp_layer_types": ["dense", "dense"]}),
    # a convolution layer beside an attention layer: its state carried through the graphs
    ("lfm2", "Lfm2ForCausalLM", "bfloat16", {"layer_types": ["conv", "full_attention"],
                                             "num_key_value_heads": 1}),
    # forwards that keep no key/value cache: one graph run on the whole prefix per token (no
    # end token: these random weights choose it first, and a check of one token shows little)
    ("openai-gpt", "OpenAIGPTLMHeadModel", "bfloat16", {"eos_token_id": None}),
    ("rwkv", "RwkvForCausalLM", "float16", {}),  # a recurrent state its output does not give
    ("recurrent_gemma", "RecurrentGemmaForCausalLM", "bfloat16",
     {"eos_token_id": None, "num_key_value_heads": 1, "lru_width": 64}),
)
UNCACHED = ("openai-gpt", "rwkv", "recurrent_gemma")  # the cases built as one prefix graph
# text_config fields a case's config.json leaves to its config class's defaults, as the original
# gemma-3-4b-it's does
OMITTED = {"gemma3": ("num_attention_heads", "num_key_value_heads", "head_dim")}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], dict[str, Any]]:
    """model type -> the run record of its build (each built once per module)."""
    records: dict[str, dict[str, Any]] = {}

    def record(model_type: str) -> dict[str, Any]:
        if model_type not in records:
            _, cls, dtype, fields = next(c for c in CASES if c[0] == model_type)
            tmp = tmp_path_factory.mktemp(model_type)
            ckpt = text_checkpoint(tmp / "ckpt", cls=cls, model_type=model_type, dtype=dtype,
                                   **{**IDS, **fields})
            config = json.loads((ckpt / "config.json").read_text())
            for name in OMITTED.get(model_type, ()):
                del config["text_config"][name]
            (ckpt / "config.json").write_text(json.dumps(config))
            code, rec, err = run_json("model=local_hf", f"model.path={ckpt}", *SHAPES,
                                      "perf=none", "target=cpu", "quant=none",
                                      store=tmp / "store", outputs=tmp / "out")
            assert code == 0, err
            records[model_type] = rec
        return records[model_type]

    return record


@pytest.mark.parametrize("model_type", [c[0] for c in CASES])
def test_generation_matches_pytorch_token_for_token(
        built: Callable[[str], dict[str, Any]], model_type: str) -> None:
    gen = step(built(model_type), "verify_generation")["metrics"]
    assert gen["token_agreement"] == 1.0 and gen["exact_prompts"] == gen["prompts"], gen
    assert gen["cosine_min"] > 0.9999, gen
    if model_type in UNCACHED:  # each step reran the graph on the prefix: 16 tokens a prompt
        assert gen["new_tokens"] == 16 * gen["prompts"], gen


@pytest.mark.parametrize("model_type", UNCACHED)
def test_a_forward_without_a_cache_is_one_graph_on_the_whole_prefix(
        built: Callable[[str], dict[str, Any]], model_type: str, tmp_path: Path) -> None:
    """Its bundle holds one graph of the tokens and their mask, no genai_config.json, with free
    axes where the graph holds at any length (RWKV's and Recurrent Gemma's traces unroll their
    recurrence over the tokens: the export finds it at a shorter length and fixes the axes);
    `modelplan generate` continues a prompt with it."""
    record = built(model_type)
    published = record["published"]
    described = json.loads(Path(published["bundle.json"]).read_text())
    assert list(described["graphs"]) == ["uncached"] and described["context_length"] == 32
    assert "genai_config.json" not in published
    model = onnx.load(str(Path(published["bundle.json"]).parent / "uncached_model.onnx"),
                      load_external_data=False)
    ids = next(i for i in model.graph.input if i.name == "input_ids")
    free = model_type not in ("rwkv", "recurrent_gemma")
    assert bool(ids.type.tensor_type.shape.dim[1].dim_param) is free
    assert ("axes_fixed" in step(record, "uncached.export")["metrics"]) is not free
    card = (Path(record["outputs_dir"]) / "README.md").read_text()
    assert "One graph, `uncached_model.onnx`" in card
    assert ("ORTModelForCausalLM.from_pretrained" in card) is free
    assert ("Its token axis is fixed" in card) is not free
    result = run_cli("generate", str(Path(published["bundle.json"]).parent), "a quick fox",
                     "--new-tokens", "5", "--json")
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    assert got["ep"] == "cpu" and 1 <= len(got["tokens"]) <= 5, got
    assert len(got["tokens"]) == 5 or got["stopped"] == "eos", got


def test_every_expert_is_in_both_graphs(built: Callable[[str], dict[str, Any]]) -> None:
    """A mixture-of-experts block holds all its experts in each graph (the decode graph's one
    token picks 2 of 4; the graph must serve any 2), and no graph counts tokens per expert."""
    record = built("mixtral")
    for graph in ("prefill", "decode"):
        path = Path(step(record, f"{graph}.export")["outputs"]["model.onnx"])
        model = onnx.load(str(path), load_external_data=False)
        experts = [i for i in model.graph.initializer if "experts" in i.name]
        assert experts and all(i.dims[0] == MOE["num_local_experts"] for i in experts), graph
        assert not {"NonZero", "Loop", "If"} & {n.op_type for n in model.graph.node}, graph


def test_a_model_without_position_ids_takes_them_unread(
        built: Callable[[str], dict[str, Any]]) -> None:
    """BLOOM's forward reads no position ids; each graph still takes them, in their place,
    as the host feeds every graph of a role the same inputs."""
    record = built("bloom")
    for graph, first in (("prefill", ["input_ids", "attention_mask", "position_ids"]),
                         ("decode", ["input_ids", "position_ids", "attention_mask"])):
        path = Path(step(record, f"{graph}.export")["outputs"]["model.onnx"])
        model = onnx.load(str(path), load_external_data=False)
        assert [i.name for i in model.graph.input][:3] == first, graph
        assert not any("position_ids" in n.input for n in model.graph.node), graph


@pytest.mark.parametrize("model_type", ["gemma3", "qwen3_5", "llava"])
def test_a_multimodal_class_generates_from_token_ids_alone(
        built: Callable[[str], dict[str, Any]], model_type: str) -> None:
    """Gemma 3's, Qwen3.5's and LLaVA's graphs take no pixel values and hold no vision tower;
    the card says images are not fed."""
    record = built(model_type)
    for graph in ("prefill", "decode"):
        path = Path(step(record, f"{graph}.export")["outputs"]["model.onnx"])
        model = onnx.load(str(path), load_external_data=False)
        assert "pixel_values" not in {i.name for i in model.graph.input}, graph
        assert not any("vision" in i.name for i in model.graph.initializer), graph
    card = Path(record["published"]["README.md"]).read_text()
    assert "the checkpoint's vision_config encoders are not in them" in card


def test_the_cache_buffers_are_those_the_model_fills(
        built: Callable[[str], dict[str, Any]]) -> None:
    """MiMo-V2-Flash's sliding-window layer caches 2 heads where config.json says 1: the decode
    graph takes each layer's buffers as the model fills them, the export says so, and the
    bundle has no genai_config.json (genai's one head_size cannot say keys and values of
    different widths)."""
    record = built("mimo_v2_flash")
    export = step(record, "decode.export")
    assert export["metrics"]["cache_from_model"] == (
        "1 layer of key 1x32, value 1x16; 1 layer of key 2x32, value 2x16")
    model = onnx.load(export["outputs"]["model.onnx"], load_external_data=False)
    dims = {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim]
            for i in model.graph.input}
    assert dims["past_key_values.1.key"][1::2] == [2, 32]
    assert dims["past_key_values.1.value"][1::2] == [2, 16]
    bundle = Path(step(record, "bundle")["outputs"]["bundle.json"]).parent
    assert not (bundle / "genai_config.json").exists()
    card = (Path(record["outputs_dir"]) / "README.md").read_text()
    assert "No `genai_config.json`" in card and "keys and values of different widths" in card


def test_a_convolution_layer_s_state_goes_through_the_decode_graph(
        built: Callable[[str], dict[str, Any]]) -> None:
    """LFM2's convolution layer keeps its last inputs (transformers' LinearAttention cache
    layer): the decode graph takes that state in place of the layer's keys and values and gives
    it back, bundle.json says so, and no genai_config.json describes the bundle."""
    record = built("lfm2")
    published = record["published"]
    described = json.loads(Path(published["bundle.json"]).read_text())
    decode = described["graphs"]["decode"]
    states = {s["name"]: s["shape"] for s in decode["inputs"] if s.get("kind") == "lm_state"}
    assert list(states) == ["past_key_values.0.conv.0"] and states[
        "past_key_values.0.conv.0"][:2] == [1, TINY["hidden_size"]], states
    names = [s["name"] for s in decode["inputs"]]
    assert "past_key_values.0.key" not in names and "past_key_values.1.key" in names
    assert "present.0.conv.0" in [o["name"] for o in decode["outputs"]]
    assert "genai_config.json" not in published


@pytest.mark.slow
def test_an_uncached_graph_is_exported_once_for_the_cpu_and_qnn_htp(tmp_path: Path) -> None:
    """The CPU build's export (free axes) serves the HTP build in the same store: fixed by
    fix_shapes, quantized, compiled to an EPContext graph, and its generation on the
    simulator follows PyTorch's (random weights: a looser threshold than a trained model's)."""
    ckpt = text_checkpoint(tmp_path / "ckpt", cls="OpenAIGPTLMHeadModel",
                           model_type="openai-gpt", dtype="bfloat16",
                           **{**IDS, "eos_token_id": None})
    common = ("model=local_hf", f"model.path={ckpt}", *SHAPES, "perf=none", "verify.samples=2")
    code, cpu, err = run_json(*common, "target=cpu", "quant=none", store=tmp_path / "store",
                              outputs=tmp_path / "out")
    assert code == 0, err
    code, htp, err = run_json(*common, "target=qnn_htp", "quant=w8a16_pc",
                              "verify.threshold=0.95", store=tmp_path / "store",
                              outputs=tmp_path / "out")
    assert code == 0, err
    assert step(htp, "uncached.export")["action"] == "cached"
    assert step(htp, "uncached.export")["key"] == step(cpu, "uncached.export")["key"]
    assert step(htp, "uncached.fix_shapes")["action"] == "run"
    compiled = onnx.load(step(htp, "uncached.compile")["outputs"]["model.onnx"],
                         load_external_data=False)
    assert {n.op_type for n in compiled.graph.node} == {"EPContext"}
    assert step(htp, "uncached.verify")["metrics"]["cosine_mean"] > 0.99
    gen = step(htp, "verify_generation")["metrics"]
    assert gen["new_tokens"] == 32 and gen["cosine_mean"] > 0.95, gen


def test_a_cache_the_graphs_cannot_carry_builds_as_one_graph_on_the_prefix(
        tmp_path: Path) -> None:
    """MiniMax's linear-attention layer needs a cache class of its own: its prefill export
    fails in one line that names export.shapes.decoder_cache=false, and with it the model
    builds as one graph on the whole prefix, whose generation is PyTorch's token for token."""
    ckpt = text_checkpoint(tmp_path / "ckpt", cls="MiniMaxForCausalLM", model_type="minimax",
                           dtype="bfloat16", **{**IDS, "eos_token_id": None},
                           layer_types=["full_attention", "linear_attention"], head_dim=32,
                           num_key_value_heads=2, **MOE)
    common = ("model=local_hf", f"model.path={ckpt}", *SHAPES, "perf=none", "target=cpu",
              "quant=none")
    code, _, err = run_json(*common, store=tmp_path / "store", outputs=tmp_path / "out")
    assert code == 1 and "set export.shapes.decoder_cache=false to build it as one graph " \
        "run on the whole prefix for each new token" in err.strip().splitlines()[-1], err
    code, record, err = run_json(*common, "export.shapes.decoder_cache=false",
                                 store=tmp_path / "store", outputs=tmp_path / "out")
    assert code == 0, err
    assert [s["id"] for s in record["steps"] if s["op"] == "export"] == ["uncached.export"]
    gen = step(record, "verify_generation")["metrics"]
    assert gen["token_agreement"] == 1.0 and gen["new_tokens"] == 16 * gen["prompts"], gen
