"""Causal language models at plan time: detected as text-generation from config.json, planned
as a prefill and a decode graph over a static key/value cache (shapes from config.json and
export.shapes, checked against the position limit), delivered by one bundle with a generation
check; a sweep over precisions exports each graph once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planner.errors import ConfigError
from planner.models import generation as lm
from planner.models import tasks as T
from planner.planning import plan_from_overrides
from planner.render.card import facts
from tests.conftest import run_cli

LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 100,
         "hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4,
         "num_key_value_heads": 2, "max_position_embeddings": 64}
GPT2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 100,
        "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64}


def checkpoint(tmp_path: Path, config: dict[str, Any]) -> Path:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps(config))
    (ckpt / "model.safetensors").write_bytes(b"not read at plan time")
    return ckpt


def plan(ckpt: Path, *overrides: str) -> dict[str, Any]:
    return plan_from_overrides(["model=local_hf", f"model.path={ckpt}", "target=cpu",
                                *overrides]).to_json()


def params(ir: dict[str, Any], step: str) -> dict[str, Any]:
    return next(s for s in ir["steps"] if s["id"] == step)["params"]


@pytest.mark.parametrize("config", [LLAMA, GPT2])
def test_a_causal_lm_is_text_generation_with_its_class(config: dict[str, Any]) -> None:
    task, cls = T.detect({"task": None, "model_class": None}, config)
    assert (task, cls) == ("text-generation", config["architectures"][0])
    # its base model's hidden states are still there to export, by the Auto class
    assert T.detect({"task": "feature-extraction", "model_class": None}, config) == \
        ("feature-extraction", None)


def test_an_unlisted_model_type_whose_class_is_a_causal_lm_generates() -> None:
    config = {**LLAMA, "model_type": "mystery", "architectures": ["MysteryForCausalLM"]}
    assert T.detect({"task": None, "model_class": None}, config)[0] == "text-generation"


def test_a_listed_encoder_type_saved_as_a_causal_lm_generates() -> None:
    """BERT's catalogue entry lists encoder tasks; a BertLMHeadModel checkpoint is a causal LM,
    as its class says; the same type saved as an encoder keeps its encoder tasks."""
    config = {"model_type": "bert", "architectures": ["BertLMHeadModel"], "vocab_size": 100,
              "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
              "max_position_embeddings": 64, "is_decoder": True}
    assert T.detect({"task": None, "model_class": None}, config) == \
        ("text-generation", "BertLMHeadModel")
    encoder = {**config, "architectures": ["BertForMaskedLM"]}
    assert T.detect({"task": None, "model_class": None}, encoder) == ("fill-mask",
                                                                       "BertForMaskedLM")


@pytest.mark.parametrize("fields", [
    {"num_layers": 3, "attention_heads": 4, "d_model": 32},            # XGLM's names
    {"decoder_layers": 3, "decoder_attention_heads": 4, "d_model": 32},  # TrOCR's
    {"n_layers": 3, "n_heads": 4, "emb_dim": 32},                      # XLM's
    {"num_layers": 3, "num_heads": 4, "hidden_size": 32},              # GPT-Neo's
    # no count: a kind per layer (Nemotron-H's state-space, MLP and attention layers)
    {"layers_block_type": ["linear_attention", "mlp", "full_attention"],
     "num_attention_heads": 4, "hidden_size": 32}])
def test_the_cache_geometry_under_other_field_names(fields: dict[str, int]) -> None:
    config = {"model_type": "mystery", "architectures": ["MysteryForCausalLM"],
              "vocab_size": 100, "max_position_embeddings": 64, **fields}
    assert lm.shape_of(config) == lm.Shape(layers=3, kv_heads=4, head_dim=8, vocab=100,
                                           positions=64)


def test_two_graphs_over_a_static_cache(tmp_path: Path) -> None:
    ir = plan(checkpoint(tmp_path, LLAMA), "export.shapes.prefill_length=8",
              "export.shapes.context_length=40")
    prefill, decode = params(ir, "prefill.export"), params(ir, "decode.export")
    window = {s["name"]: s["shape"] for s in prefill["inputs"]}
    assert {n: window[n] for n in ("input_ids", "attention_mask", "position_ids")} == {
        "input_ids": [1, 8], "attention_mask": [1, 40 + 8], "position_ids": [1, 8]}
    shapes = {s["name"]: s["shape"] for s in decode["inputs"]}
    assert shapes["input_ids"] == [1, 1] and shapes["attention_mask"] == [1, 41]
    past = [n for n in shapes if n.startswith("past_key_values.")]
    assert len(past) == 2 * 3 and all(shapes[n] == [1, 2, 40, 8] for n in past)  # 2 kv heads
    # a prompt window reads the slots its earlier windows filled, as a token does
    assert {n: s for n, s in window.items() if n.startswith("past_key_values.")} == \
        {n: shapes[n] for n in past}
    assert prefill["outputs"] == decode["outputs"] == [
        "logits", *[f"present.{i}.{p}" for i in range(3) for p in ("key", "value")]]
    ids = [s["id"] for s in ir["steps"]]
    assert ids.count("resolve") == 1 and ir["deliverable"] == "bundle"
    bundle = params(ir, "bundle")
    assert (bundle["prefill_length"], bundle["context_length"]) == (8, 40)
    step = next(s for s in ir["steps"] if s["id"] == "bundle")
    assert step["inputs"] == {"prefill": "prefill.tag", "decode": "decode.tag",
                              "source": "resolve"}  # both graphs tagged, not just one
    assert params(ir, "verify_generation")["new_tokens"] == 16


def test_a_layer_of_its_own_geometry_gets_buffers_of_its_shape(tmp_path: Path) -> None:
    """transformers' per_layer_config (Gemma 4's full-attention layers: wider heads, fewer of
    them) gives that layer's buffers their own shape; the other layers keep the model's."""
    config = {**LLAMA, "per_layer_config": {"1": {"head_dim": 16, "num_key_value_heads": 1}}}
    decode = params(plan(checkpoint(tmp_path, config), "export.shapes.prefill_length=8",
                         "export.shapes.context_length=40"), "decode.export")
    shapes = {s["name"]: s["shape"] for s in decode["inputs"]}
    assert {n: shapes[f"past_key_values.{n}.key"] for n in range(3)} == {
        0: [1, 2, 40, 8], 1: [1, 1, 40, 16], 2: [1, 2, 40, 8]}
    assert all(shapes[f"past_key_values.{n}.value"] == shapes[f"past_key_values.{n}.key"]
               for n in range(3))


def test_layers_that_reuse_another_layers_cache_have_no_buffers(tmp_path: Path) -> None:
    """Gemma 3n's and Gemma 4's last `num_kv_shared_layers` layers read an earlier layer's
    keys and values: the graphs take and give the other layers' entries only."""
    config = {**LLAMA, "num_hidden_layers": 4, "num_kv_shared_layers": 2}
    ir = plan(checkpoint(tmp_path, config), "export.shapes.prefill_length=8",
              "export.shapes.context_length=40")
    decode = params(ir, "decode.export")
    assert [s["name"] for s in decode["inputs"] if s["name"].startswith("past_")] == [
        f"past_key_values.{i}.{p}" for i in range(2) for p in ("key", "value")]
    assert params(ir, "prefill.export")["outputs"] == decode["outputs"] == [
        "logits", *[f"present.{i}.{p}" for i in range(2) for p in ("key", "value")]]


def test_a_latent_attention_caches_its_latent_and_rotary_key(tmp_path: Path) -> None:
    """Multi-head latent attention (DeepSeek-V3, MiniCPM3: `kv_lora_rank`): transformers caches
    one head of the compressed latent as the key and one of the rotary key as the value, not
    num_key_value_heads x head_dim; the plan's buffers take those shapes."""
    config = {**LLAMA, "kv_lora_rank": 12, "qk_rope_head_dim": 4, "qk_nope_head_dim": 8,
              "v_head_dim": 8}
    assert lm.layer_shapes(config) == [((1, 12), (1, 4))] * 3
    decode = params(plan(checkpoint(tmp_path, config), "export.shapes.prefill_length=8",
                         "export.shapes.context_length=40"), "decode.export")
    shapes = {s["name"]: s["shape"] for s in decode["inputs"]}
    assert [shapes[f"past_key_values.2.{p}"] for p in ("key", "value")] == [
        [1, 1, 40, 12], [1, 1, 40, 4]]


def test_layers_without_attention_have_no_buffers() -> None:
    """Layers `layer_types` says are "mlp" or "moe", or `kv_sharing_modes` says "reuse", get no
    cache from transformers: the graphs take the other layers' buffers, in order."""
    config = {**LLAMA, "num_hidden_layers": 4,
              "layer_types": ["sliding_attention", "mlp", "full_attention", "moe"]}
    assert lm.cached_layers(config) == [0, 2] and lm.cache_layers(config) == 2
    assert lm.cached_layers({**LLAMA, "kv_sharing_modes": ["own", "reuse", "own"]}) == [0, 2]
    assert lm.cached_layers({**LLAMA, "num_kv_shared_layers": 1,
                             "kv_sharing_modes": ["own", "own", "reuse"]}) == [0, 1]
    own = {**config, "per_layer_config": {"2": {"head_dim": 16}}}  # by the layer's own index
    assert lm.layer_shapes(own) == [((2, 8), (2, 8)), ((2, 16), (2, 16))]


def test_a_sparse_attention_indexer_bounds_the_context() -> None:
    """DeepSeek-V3.2's indexer chooses index_topk of the slots and the step's token by indexer
    keys the static cache does not carry: of index_topk - 1 slots it chooses all, as PyTorch
    does; more slots are one plan-time line naming the bound."""
    sparse = {**LLAMA, "index_topk": 17}
    # a window's last token sees the slots and the window: 13 + 4 - 1 = 16 of them
    assert lm.lengths(sparse, {}) == (4, 13)
    assert lm.lengths(sparse, {"context_length": 9, "prefill_length": 8}) == (8, 9)
    with pytest.raises(ConfigError, match=r"covers 17 .*context_length \+ "
                                          r"export.shapes.prefill_length to 17 or less"):
        lm.lengths(sparse, {"context_length": 16, "prefill_length": 8})
    with pytest.raises(ConfigError, match=r"index_topk 17 .* set "
                                          r"export.shapes.context_length=16 or less"):
        lm.lengths(sparse, {"context_length": 32})


def test_default_lengths_fit_the_positions(tmp_path: Path) -> None:
    assert lm.lengths(LLAMA, {}) == (64, 64)  # 64 positions: tokens 0 .. 63
    assert lm.lengths({**LLAMA, "max_position_embeddings": 4096}, {}) == (64, 256)


@pytest.mark.parametrize(("overrides", "says"), [
    (["export.shapes.context_length=65"], "export.shapes.context_length=64 or less"),
    (["export.shapes.prefill_length=50", "export.shapes.context_length=32"],
     "export.shapes.prefill_length=32 or less"),
    (["export.shapes.batch_size=2"], "export.shapes.batch_size=1"),
])
def test_shapes_outside_the_model_are_one_line_naming_the_fix(
        tmp_path: Path, overrides: list[str], says: str) -> None:
    ckpt = checkpoint(tmp_path, LLAMA)
    with pytest.raises(ConfigError, match=says.replace(".", r"\.")):
        plan(ckpt, *overrides)
    result = run_cli("plan", "model=local_hf", f"model.path={ckpt}", *overrides)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1


def test_gpt2_fields_give_its_cache(tmp_path: Path) -> None:
    shape = lm.shape_of(GPT2)
    assert (shape.layers, shape.kv_heads, shape.head_dim, shape.positions) == (2, 4, 8, 64)


def test_a_sweep_over_precisions_exports_each_graph_once(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path, LLAMA)
    result = run_cli("plan", "-m", "model=local_hf", f"model.path={ckpt}", "target=qnn_htp",
                     "quant=w8a16_pc,w4a16", "--format", "json")
    assert result.returncode == 0, result.stderr
    merged = json.loads(result.stdout)
    ops = [s["op"] for s in merged["steps"]]
    assert ops.count("export") == 2 and ops.count("quantize") == 4  # two graphs x two
    assert ops.count("lm_bundle") == 2 and ops.count("compile") == 4


def test_plan_text_shows_both_graphs_and_the_bundle(tmp_path: Path) -> None:
    result = run_cli("plan", "model=local_hf", f"model.path={checkpoint(tmp_path, LLAMA)}",
                     "target=qnn_htp")
    assert result.returncode == 0, result.stderr
    for line in ("prefill.compile", "decode.compile", "bundle", "verify_generation",
                 "prefill_length=64 context_length=64"):
        assert line in result.stdout


def test_a_width_per_layer_sizes_each_layers_mlp(tmp_path: Path) -> None:
    """Gemma 3n's config.json gives `intermediate_size` as a list, one per layer: the weights
    count each layer's own, and an HTP plan (which sizes its parts from them) is made."""
    per_layer = {**LLAMA, "intermediate_size": [64, 64, 256]}
    uniform = {**LLAMA, "intermediate_size": 64}
    assert lm.weight_bytes(per_layer, 8, 8) - lm.weight_bytes(uniform, 8, 8) == 3 * 32 * 192
    ir = plan_from_overrides(["model=local_hf", f"model.path={checkpoint(tmp_path, per_layer)}",
                              "target=qnn_htp", "quant=w8a16_pc",
                              "export.shapes.prefill_length=8",
                              "export.shapes.context_length=32"]).to_json()
    assert params(ir, "prefill.export")["inputs"][0]["shape"] == [1, 8]


def test_an_attention_free_model_is_planned_for_htp(tmp_path: Path) -> None:
    """Mamba's config.json names no attention heads: its weights are its mixer's projections
    (in 2 x inner x width, out inner x width: three intermediate-sized matrices a layer), and
    an HTP plan, which sizes its parts from them, is made (it raised a TypeError before)."""
    import transformers

    mamba = transformers.MambaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     vocab_size=1024, state_size=16,
                                     architectures=["MambaForCausalLM"]).to_dict()
    assert lm.weight_bytes(mamba, 8, 8) == 2 * 3 * 64 * 128 + 1024 * 64  # its head tied
    ir = plan_from_overrides(["model=local_hf", f"model.path={checkpoint(tmp_path, mamba)}",
                              "target=qnn_htp", "quant=w8a16_pc",
                              "export.shapes.prefill_length=8",
                              "export.shapes.context_length=32"]).to_json()
    assert "prefill.compile" in [s["id"] for s in ir["steps"]]


def test_parts_follow_the_weights_and_the_target(tmp_path: Path) -> None:
    """A 7B-shaped model at 16-bit tables and 8-bit weights is ~7 GB: four parts under 1.8 GB
    on HTP (one embedded context binary each), one on the CPU (weights stay in files)."""
    seven_b = {**LLAMA, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
               "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000,
               "max_position_embeddings": 4096}
    size = lm.weight_bytes(seven_b, 8, 16)
    assert 6.5e9 < size < 7.5e9
    assert lm.parts(seven_b, None, 8, 16, compiles=True) == -(-size // lm.PART_BYTES)
    assert lm.parts(seven_b, None, 8, 16, compiles=False) == 1
    assert lm.parts(seven_b, 3, 8, 16, compiles=False) == 3
    with pytest.raises(ConfigError, match="export.parts=32 or less"):
        lm.parts(seven_b, 40, 8, 16, compiles=True)
    ir = plan(checkpoint(tmp_path, LLAMA), "export.parts=3", "quant=w8a16_pc")
    assert params(ir, "prefill.split") == {"parts": 3} == params(ir, "decode.split")
    assert "prefill.split" not in [s["id"] for s in plan(tmp_path / "ckpt")["steps"]]


def test_each_part_compiles_in_a_step_and_key_of_its_own(tmp_path: Path) -> None:
    """On HTP a graph cut into three parts is compiled by three chained steps, one part each,
    with a key each (a compile failing on part k re-runs from part k alone); the graph's
    deliverable is the last, and the bundle reads it. An uncut graph keeps its one step."""
    ir = plan(checkpoint(tmp_path, LLAMA), "export.parts=3", "quant=w8a16_pc",
              "target=qnn_htp")
    steps = {s["id"]: s for s in ir["steps"]}
    for graph in ("prefill", "decode"):
        chain = [steps[f"{graph}.compile.{k}"] for k in range(3)]
        assert f"{graph}.compile" not in steps
        assert [s["params"]["part"] for s in chain] == [0, 1, 2]
        assert [s["inputs"]["model"] for s in chain] == \
            [f"{graph}.split", f"{graph}.compile.0", f"{graph}.compile.1"]
        assert len({s["key"] for s in chain}) == 3
        assert steps["bundle"]["inputs"][graph] == f"{graph}.compile.2"
    whole = {s["id"]: s for s in plan(tmp_path / "ckpt", "quant=w8a16_pc",
                                      "target=qnn_htp")["steps"]}
    assert "part" not in whole["prefill.compile"]["params"]
    assert "prefill.compile.0" not in whole


def test_a_config_naming_no_class_generates_when_asked_to(tmp_path: Path) -> None:
    """A config.json with no `architectures` of a type the catalogue lists by its encoder
    (bloom): model.task=text-generation takes transformers' causal LM class of the type, as
    model.model_class would; without either the task is asked for in one line."""
    bloom = {"model_type": "bloom", "vocab_size": 100, "hidden_size": 32, "n_layer": 2,
             "n_head": 4}
    ckpt = checkpoint(tmp_path, bloom)
    for asked in (["model.task=text-generation"], ["model.model_class=BloomForCausalLM"]):
        ir = plan(ckpt, *asked)
        assert {"prefill.export", "decode.export"} <= {s["id"] for s in ir["steps"]}, asked
    with pytest.raises(ConfigError, match="set model.task to one of"):
        plan(ckpt)


def test_genai_stages_on_a_target_that_compiles(tmp_path: Path) -> None:
    """On HTP the two tagged quantized graphs (what each graph's compile reads) also become
    genai's pipeline stages in one step of the prefill length's window, which the bundle reads;
    not on the CPU (genai runs its graphs), not over parts, not for a cache of layers of their
    own geometry (genai's decoder gives every layer one); with host layers too (genai runs
    them as stages of their own)."""
    ckpt = checkpoint(tmp_path, LLAMA)
    ir = plan(ckpt, "quant=w8a16_pc", "target=qnn_htp", "export.shapes.prefill_length=16")
    steps = {s["id"]: s for s in ir["steps"]}
    staged = steps["genai_stages"]
    assert staged["inputs"] == {"prefill": "prefill.tag", "decode": "decode.tag"} == \
        steps["share_context"]["inputs"]
    assert staged["params"]["window"] == 16 and staged["params"]["target"] == "qnn_htp"
    assert steps["bundle"]["inputs"]["stages"] == "genai_stages"
    host = plan(ckpt, "quant=w8a16_pc", "target=qnn_htp", "export.on_host=[embeddings,head]")
    assert "stages" in next(s for s in host["steps"] if s["id"] == "bundle")["inputs"]
    for overrides in (["target=cpu"], ["target=qnn_htp", "export.parts=3"],
                      ["target=qnn_htp", "export.genai_stages=false"]):
        other = plan(ckpt, "quant=w8a16_pc", *overrides)
        assert "genai_stages" not in [s["id"] for s in other["steps"]], overrides
        assert "stages" not in params(other, "bundle") and \
            "stages" not in next(s for s in other["steps"] if s["id"] == "bundle")["inputs"]
    wide = {**LLAMA, "per_layer_config": {"1": {"head_dim": 16}}}
    assert lm.genai_stages_not(wide, {}) is not None and lm.genai_stages_not(LLAMA, {}) is None
    assert lm.genai_stages_not(LLAMA, {"prefill": ["inputs_embeds"]}) is None
    assert "token_type_ids" in lm.genai_stages_not(LLAMA, {"prefill": ["token_type_ids"]})


def test_blocks_and_parts_of_a_tagged_graph() -> None:
    from onnx import TensorProto, helper

    from executors.onnx import subgraph

    tags = ["/M/Emb", "/M/L.0/A", "/M/L.0/B", "/M/L.1/A", "/M/L.2/A", "/M/L.3/A", "/M/Norm",
            None]
    prefix, index = subgraph.blocks(tags)
    assert prefix == "/M/L" and index == [None, 0, 0, 1, 2, 3, None, None]
    names = ["x", "e", "a0", "b0", "a1", "a2", "a3", "n", "h"]
    nodes = [helper.make_node("Relu", [names[i]], [names[i + 1]]) for i in range(len(tags))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1])], [helper.make_tensor_value_info("h", TensorProto.FLOAT,
                                                                       [1])])
    # the embeddings go with the first part, the norm and head with the last
    assert subgraph.assign(graph, index, 2) == [0, 0, 0, 0, 1, 1, 1, 1]
    with pytest.raises(ValueError, match="4 repeated block"):
        subgraph.assign(graph, index, 5)


def test_embeddings_and_head_on_the_host(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path, LLAMA)
    ir = plan(ckpt, "export.on_host=[embeddings,head]")
    prefill, decode = params(ir, "prefill.export"), params(ir, "decode.export")
    assert prefill["inputs"][0]["name"] == decode["inputs"][0]["name"] == "inputs_embeds"
    assert prefill["inputs"][0]["shape"] == [1, 64, 32] and decode["inputs"][0]["shape"] == \
        [1, 1, 32]
    assert prefill["outputs"][0] == "hidden_states"
    assert params(ir, "host_layers") == {"layers": ["embeddings", "head"]}
    bundle = next(s for s in ir["steps"] if s["id"] == "bundle")
    assert bundle["inputs"]["host"] == "host_layers"
    only_head = plan(ckpt, "export.on_host=[head]")
    assert params(only_head, "prefill.export")["inputs"][0]["name"] == "input_ids"
    (tmp_path / "b").mkdir()
    bert = checkpoint(tmp_path / "b", {"model_type": "bert", "architectures": ["BertModel"],
                                       "vocab_size": 100})
    with pytest.raises(ConfigError, match="export.on_host"):
        plan(bert, "export.on_host=[head]")


def test_review_findings_are_plan_time_lines(tmp_path: Path) -> None:
    """A sliding window below the cache, parts or a host head the model cannot take, eval of
    a host-placed build: each one line at plan time, not a failure hours into the build."""
    mistral = {**LLAMA, "model_type": "mistral", "architectures": ["MistralForCausalLM"],
               "sliding_window": 16}
    # its mask counts key indices: a window of 16 covers 15 slots (over 16, the logits left
    # PyTorch's by 0.11); a prompt window's last token sees the slots and the window
    assert lm.lengths(mistral, {}) == (4, 12)
    with pytest.raises(ConfigError, match="sliding window of 16 tokens.*length=15 or less"):
        lm.lengths(mistral, {"context_length": 32})
    # the length left unset shrinks to fit the one set; two set that do not fit are refused
    assert lm.lengths(mistral, {"context_length": 14}) == (2, 14)
    assert lm.lengths(mistral, {"prefill_length": 6}) == (6, 10)
    with pytest.raises(ConfigError, match="context_length \\+ export.shapes.prefill_length to "
                                          "16 or less"):
        lm.lengths(mistral, {"context_length": 14, "prefill_length": 4})
    assert lm.lengths({**mistral, "use_sliding_window": False}, {})[1] == 64
    # GPT-Neo's local attention: its window also covers the step's token, after the slots
    neo = {**GPT2, "model_type": "gpt_neo", "window_size": 16}
    assert lm.lengths(neo, {}) == (4, 12)
    with pytest.raises(ConfigError, match=r"16 tokens \(window_size\).*length=15 or less"):
        lm.lengths(neo, {"context_length": 16})
    ckpt = checkpoint(tmp_path, {**LLAMA, "final_logit_softcapping": 30.0})
    with pytest.raises(ConfigError, match="final_logit_softcapping"):
        plan(ckpt, "export.on_host=[head]")
    assert plan(ckpt, "export.on_host=[embeddings]")
    with pytest.raises(ConfigError, match="export.on_host"):
        plan(ckpt, "export.on_host=[embeddings]", "eval=task")
    with pytest.raises(ConfigError, match="export.parts: 2 parts"):
        plan_from_overrides(["model=tiny_bert", "target=cpu", "export.parts=2"])
    with pytest.raises(ConfigError, match="has no num_hidden_layers") as got:
        lm.shape_of({k: v for k, v in LLAMA.items() if k != "num_hidden_layers"})
    assert "recurrent" not in str(got.value)
    mamba = {"model_type": "mamba", "hidden_size": 32, "num_hidden_layers": 2,
             "vocab_size": 100, "state_size": 16}  # no attention heads: its layers' states
    assert lm.shape_of(mamba) == lm.Shape(2, 1, 32, 100, None)  # the export reads the states


@pytest.mark.parametrize(("overrides", "free"), [
    ((), True),  # the CPU: genai's decoder reads the token graph at any length
    (("export.shapes.dynamic=false",), False),
    (("export.on_host=[embeddings]",), False),  # genai's decoder looks its tokens up itself
    (("export.parts=2",), False),
    (("export=dynamo",), False),
    (("target=qnn_htp", "quant=w8a16_pc"), False),  # HTP compiles fixed shapes
])
def test_the_token_graph_has_a_free_past_where_genai_can_run_it(
        tmp_path: Path, overrides: tuple[str, ...], free: bool) -> None:
    ir = plan(checkpoint(tmp_path, LLAMA), *overrides)
    assert params(ir, "decode.export").get("dynamic", False) is free
    assert "dynamic" not in params(ir, "prefill.export")  # the prompt graph's stays fixed
    assert facts(ir)["genai"] == ("decoder" if free else "decoder-pipeline")  # for its card
