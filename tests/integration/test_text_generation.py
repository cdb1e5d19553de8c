"""Causal LMs built end to end from tiny random checkpoints of each listed family: two graphs of
fixed shapes sharing their weights, greedy generation that matches PyTorch token for token on
the CPU in fp32, the agreement rate on the HTP simulator, the published bundle run by
`modelplan generate`, and language-modelling eval."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from executors.store.content import Store
from tests.checkpoints import text_checkpoint
from tests.conftest import run_cli
from tests.integration.conftest import run_json, step

FAMILIES = ("gpt2", "llama", "mistral", "qwen2", "qwen3", "phi3", "gemma")
SHAPES = ("export.shapes.prefill_length=8", "export.shapes.context_length=32")


def build(tmp: Path, family: str, *args: str) -> dict[str, Any]:
    code, record, err = run_json("model=tiny_random", f"model.random_init.model_type={family}",
                                 *SHAPES, "perf=none", *args, store=tmp / "store",
                                 outputs=tmp / "out")
    assert code == 0, err
    return record


def checkpoint_params(folder: Path) -> tuple[int, bool]:
    """The parameters of the checkpoint a bundle was built from (a tied table counted once),
    and whether its head is tied."""
    import transformers

    config = transformers.AutoConfig.from_pretrained(str(folder))
    model = transformers.AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters()), bool(config.tie_word_embeddings)


def graphs(record: dict[str, Any]) -> dict[str, onnx.ModelProto]:
    folder = Path(step(record, "bundle")["outputs"]["bundle.json"]).parent
    described = json.loads((folder / "bundle.json").read_text())
    return {g: onnx.load(str(folder / e["model"]), load_external_data=False)
            for g, e in described["graphs"].items()}


@pytest.mark.parametrize("family", FAMILIES)
def test_fp32_generation_matches_pytorch_token_for_token(tmp_path: Path, family: str) -> None:
    record = build(tmp_path, family, "target=cpu", "quant=none")
    gen = step(record, "verify_generation")["metrics"]
    assert gen["token_agreement"] == 1.0 and gen["exact_prompts"] == gen["prompts"] == 4
    assert gen["first_divergence_min"] == 16 and gen["cosine_min"] > 0.9999
    bundle = step(record, "bundle")["metrics"]
    assert bundle["weight_blobs"] >= 1  # the embeddings at least: stored once for both graphs
    assert bundle["blobs_shared_by_graphs"] == bundle["weight_blobs"]
    models = graphs(record)
    for value in [*models["prefill"].graph.input, *models["prefill"].graph.output]:
        dims = value.type.tensor_type.shape.dim  # the prompt graph: every shape fixed
        assert all(d.dim_value > 0 and not d.dim_param for d in dims), value.name
    free = {v.name: [d.dim_param for d in v.type.tensor_type.shape.dim if d.dim_param]
            for v in [*models["decode"].graph.input, *models["decode"].graph.output]}
    # the token graph on the CPU: a free past, and present = past + new (genai's decoder)
    assert free["past_key_values.0.key"] == ["past_sequence_length"]
    assert free["present.0.key"] == free["attention_mask"] == ["total_sequence_length"]
    assert free["input_ids"] == ["sequence_length"] and "sequence_length" in free["logits"]
    # each graph holds the checkpoint's weights once: a tied head (gpt2's, gemma's) reads the
    # embedding table, not a transposed copy of it
    folder = Path(step(record, "bundle")["outputs"]["bundle.json"]).parent
    params, tied = checkpoint_params(folder)
    for graph, model in models.items():
        held = sum(int(np.prod(i.dims)) for i in model.graph.initializer
                   if i.data_type == onnx.TensorProto.FLOAT)
        assert held <= params + 4096, (graph, held, params)  # + masks, rotary tables
        transposes = [n for n in model.graph.node if n.name.endswith("/tied_table")]
        assert len(transposes) == (1 if tied else 0), graph


@pytest.mark.slow
@pytest.mark.parametrize(("family", "quant"), [("llama", "w8a16_pc"), ("gpt2", "w8a16_pc"),
                                               ("qwen3", "w4a16"), ("phi3", "w8a16_pc")])
def test_htp_generation_agrees_with_pytorch(tmp_path: Path, family: str, quant: str) -> None:
    record = build(tmp_path, family, "target=qnn_htp", f"quant={quant}")
    for graph in ("prefill", "decode"):
        assert step(record, f"{graph}.compile")["metrics"]["context_nodes"] >= 1
    gen = step(record, "verify_generation")["metrics"]
    assert gen["cosine_mean"] >= 0.99 and gen["token_agreement"] >= 0.75, gen
    # onnxruntime-genai's stages, checked on the first prompt once the pair's sessions closed
    staged = gen["genai_stages"]
    assert staged["prompts"] == 1 and staged["passed"] and staged["cosine_mean"] >= 0.99, staged
    models = graphs(record)
    assert all(n.op_type == "EPContext" for m in models.values() for n in m.graph.node)
    # the weights once on the device: both graphs over one binary, smaller than the pair
    shared = step(record, "share_context")["metrics"]
    assert shared["models"] == ["prefill_ctx.onnx", "decode_ctx.onnx"]
    assert len(shared["binaries"]) == 1
    folder = Path(step(record, "bundle")["outputs"]["bundle.json"]).parent
    pair = sum((folder / f"{g}_model.onnx").stat().st_size for g in ("prefill", "decode"))
    assert shared["binary_bytes"] < pair
    described = json.loads((folder / "bundle.json").read_text())["shared_context"]
    assert (folder / "device" / shared["binaries"][0]).is_file()
    # this host's simulator cannot load a shared binary (measured); if it ever can, say so
    assert described["loads_here"] == shared["loads_here"]
    assert shared["loads_here"] or "SIGSEGV" in shared["why_not"]


@pytest.fixture(scope="module")
def llama_with_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return text_checkpoint(tmp_path_factory.mktemp("lm") / "llama", cls="LlamaForCausalLM",
                           model_type="llama", num_key_value_heads=1, pad_token_id=0)


def test_generate_runs_the_published_bundle_like_pytorch(tmp_path: Path,
                                                         llama_with_tokenizer: Path) -> None:
    import torch
    import transformers

    code, record, err = run_json("model=local_hf", f"model.path={llama_with_tokenizer}",
                                 *SHAPES, "target=cpu", "quant=none", "perf=none",
                                 "verify.new_tokens=4", store=tmp_path / "store",
                                 outputs=tmp_path / "out")
    assert code == 0, err
    folder = Path(record["published"]["bundle.json"]).parent
    assert {"bundle.json", "genai_config.json", "tokenizer.json", "config.json",
            "prefill_model.onnx", "decode_model.onnx"} <= {p.name for p in folder.iterdir()}
    result = run_cli("generate", str(folder), "the cat sat on", "--new-tokens", "6", "--json")
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    model = transformers.LlamaForCausalLM.from_pretrained(str(llama_with_tokenizer)).eval()
    with torch.no_grad():
        want = model.generate(torch.tensor([got["prompt_ids"]]), max_new_tokens=6,
                              do_sample=False, eos_token_id=None, pad_token_id=0)
    assert got["tokens"] == want[0, len(got["prompt_ids"]):].tolist()
    assert got["ttft_ms"] > 0 and got["tokens_per_s"] > 0
    genai = json.loads((folder / "genai_config.json").read_text())
    assert genai["model"]["context_length"] == 32
    assert genai["model"]["decoder"]["num_hidden_layers"] == 2
    bad = run_cli("generate", str(tmp_path), "x")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    # a prompt of the context's 32 tokens (four windows) fills the cache: one token from its
    # last logits; a longer one is one line
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    full = next(t for t in (" ".join(["cat"] * k) for k in range(1, 64))
                if len(tok(t)["input_ids"]) >= 32)
    result = run_cli("generate", str(folder), full, "--new-tokens", "3", "--json")
    filled = json.loads(result.stdout)
    assert len(filled["prompt_ids"]) == 32 and len(filled["tokens"]) == 1
    assert filled["stopped"] == "context"
    bad = run_cli("generate", str(folder), full + " cat")
    assert bad.returncode == 2 and "the cache holds 32" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    # generate stops at the end token genai_config.json names (a copy: the folder's files are
    # the store's), and refuses a config that names no graph of the bundle
    copy = Path(shutil.copytree(folder, tmp_path / "copy"))
    genai["model"]["eos_token_id"] = got["tokens"][2]
    (copy / "genai_config.json").write_text(json.dumps(genai))
    result = run_cli("generate", str(copy), "the cat sat on", "--new-tokens", "6", "--json")
    stopped = json.loads(result.stdout)
    assert stopped["tokens"] == got["tokens"][:got["tokens"].index(got["tokens"][2]) + 1]
    assert stopped["stopped"] == "eos"
    genai["model"]["decoder"]["filename"] = "model.onnx"
    (copy / "genai_config.json").write_text(json.dumps(genai))
    bad = run_cli("generate", str(copy), "the cat sat on")
    assert bad.returncode == 2 and "'model.onnx', which is not one of its graphs" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_eval_scores_next_tokens_the_same_for_pytorch_and_the_export(
        tmp_path: Path, llama_with_tokenizer: Path) -> None:
    code, record, err = run_json("model=local_hf", f"model.path={llama_with_tokenizer}",
                                 *SHAPES, "target=cpu", "quant=w8a16_pc", "perf=none",
                                 "verify=none", "eval=task", "eval.dataset.samples=6",
                                 store=tmp_path / "store", outputs=tmp_path / "out")
    assert code == 0, err
    metrics = step(record, "eval")["metrics"]
    scores = metrics["scores"]
    assert metrics["metric"] == "next_token_accuracy" and metrics["labelled"]
    # the fp32 graphs read texts through the same cache loop as PyTorch: the same numbers
    assert scores["fp32_onnx"]["perplexity"] == pytest.approx(scores["pytorch"]["perplexity"],
                                                              rel=1e-4)
    assert scores["target"]["perplexity"] == pytest.approx(scores["pytorch"]["perplexity"],
                                                           rel=0.05)
    assert metrics["eval_verdict"] == "PASS"
    # one quantized weight set: prefill and decode dequantize the same weights with the same
    # scales (only their activation encodings differ), and a blob is stored once
    weights = {g: quantized_weights(m) for g, m in graphs(record).items()}
    assert len(weights["prefill"]) >= 14 and weights["prefill"] == weights["decode"]
    bundle = step(record, "bundle")["metrics"]
    assert bundle["blobs_shared_by_graphs"] == bundle["weight_blobs"]


def quantized_weights(model: onnx.ModelProto) -> set[tuple[str, str]]:
    """The digests of each constant a DequantizeLinear reads as its data, with its scale's."""
    import hashlib

    inits = {i.name: i for i in model.graph.initializer}

    def digest(name: str) -> str:
        t = inits[name]
        where = [e.value for e in t.external_data if e.key == "location"]
        return where[0] if where else hashlib.sha256(t.raw_data).hexdigest()

    return {(digest(n.input[0]), digest(n.input[1])) for n in model.graph.node
            if n.op_type == "DequantizeLinear" and n.input[0] in inits
            and len(inits[n.input[0]].dims) >= 2}


@pytest.mark.parametrize("target", ["cpu", pytest.param("qnn_htp", marks=pytest.mark.slow)])
def test_graphs_split_into_parts_generate_like_the_whole(tmp_path: Path, target: str) -> None:
    """export.parts=2: each graph cut at its decoder layers into two models run in a chain
    (on HTP each compiled on its own); the tokens are the unsplit build's."""
    quant = "none" if target == "cpu" else "w8a16_pc"
    record = build(tmp_path, "llama", f"target={target}", f"quant={quant}", "export.parts=2")
    whole = build(tmp_path / "whole", "llama", f"target={target}", f"quant={quant}")
    for graph in ("prefill", "decode"):
        split = step(record, f"{graph}.split")["metrics"]
        assert split["parts"] == 2 and split["block"].endswith("LlamaDecoderLayer")
    got = step(record, "verify_generation")["metrics"]
    want = step(whole, "verify_generation")["metrics"]
    if target == "cpu":
        assert got["token_agreement"] == 1.0
    assert [p["deliverable"] for p in got["per_prompt"]] == \
        [p["deliverable"] for p in want["per_prompt"]] or got["token_agreement"] >= 0.75
    folder = Path(step(record, "bundle")["outputs"]["bundle.json"]).parent
    described = json.loads((folder / "bundle.json").read_text())["graphs"]
    assert described["decode"]["parts"] == 2 and described["decode"]["model"] == \
        "decode_parts.json"
    assert (folder / "decode_part1.onnx").is_file() and not list(folder.rglob("inputs.npz"))
    # every part reads the one weights/ folder: a blob both graphs use is stored once
    assert not list(folder.glob("*_parts/"))
    if target == "qnn_htp":  # each part compiled by a step and key of its own
        compiled = [step(record, f"prefill.compile.{k}") for k in (0, 1)]
        assert [c["metrics"]["part"] for c in compiled] == [0, 1]
        assert all(c["metrics"]["context_nodes"] >= 1 for c in compiled)
        # a part carried to the next step is a hard link to an entry, never written through
        checked = run_cli("store", "verify", "--store", str(tmp_path / "store"))
        assert checked.returncode == 0, checked.stdout + checked.stderr
        # part 1's compile lost (a crash, an interrupt): the rebuild compiles part 1 alone
        shutil.rmtree(Store(tmp_path / "store").entry_dir(compiled[1]["key"]))
        again = build(tmp_path, "llama", f"target={target}", f"quant={quant}", "export.parts=2")
        assert {s: step(again, s)["action"] for s in (
            "prefill.split", "prefill.compile.0", "prefill.compile.1", "decode.compile.1",
            "bundle")} == {"prefill.split": "cached", "prefill.compile.0": "cached",
                           "prefill.compile.1": "run", "decode.compile.1": "cached",
                           "bundle": "cached"}
    if target == "cpu":  # (an EPContext part holds its weights in its context binary)
        for part in ("prefill_part0.onnx", "decode_part0.onnx"):
            model = onnx.load(str(folder / part), load_external_data=False)
            assert all(e.value.startswith("weights/") for t in model.graph.initializer
                       for e in t.external_data if e.key == "location")


@pytest.mark.parametrize(("target", "quant"), [
    ("cpu", "none"), pytest.param("qnn_htp", "w4a16", marks=pytest.mark.slow)])
def test_embeddings_and_head_on_the_host(tmp_path: Path, target: str, quant: str) -> None:
    """export.on_host=[embeddings,head]: the target's graphs take and give hidden states; the
    bundle's host graphs look the tokens up and compute the logits on the CPU."""
    record = build(tmp_path, "qwen3", f"target={target}", f"quant={quant}",
                   "export.on_host=[embeddings,head]")
    layers = step(record, "host_layers")["metrics"]["layers"]
    assert set(layers) == {"embeddings", "head"} and max(v["max_abs"] for v in
                                                         layers.values()) < 1e-4
    models = graphs(record)
    for model in models.values():
        assert model.graph.input[0].name == "inputs_embeds"
        assert model.graph.output[0].name == "hidden_states"
        # the vocabulary-sized matrices are off the target: no Gather of token ids left
        assert not any(n.op_type == "Gather" and "input_ids" in n.input for n in model.graph.node)
    gen = step(record, "verify_generation")["metrics"]
    if target == "cpu":
        assert gen["token_agreement"] == 1.0
    else:
        assert gen["cosine_mean"] > 0.99 and gen["token_agreement"] >= 0.75
    folder = Path(step(record, "bundle")["outputs"]["bundle.json"]).parent
    assert json.loads((folder / "bundle.json").read_text())["host"] == {
        "embeddings": "embed_model.onnx", "head": "head_model.onnx"}
