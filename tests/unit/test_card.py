"""The model card written from a run record: Hugging Face metadata a hub parser reads, what a
client needs to know to open the folder (free or fixed shapes, the EP of a compiled model),
and the command that rebuilds it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from huggingface_hub import ModelCardData
from huggingface_hub.repocard import metadata_load

from planner.render.card import card


def record(**model: Any) -> dict[str, Any]:
    facts = {"id": "BAAI/bge-small-en-v1.5", "name": "BAAI/bge-small-en-v1.5",
             "task": "feature-extraction", "target": "cpu", "precision": "w8a16_pc",
             "tools": {"onnxruntime": "1.32.0", "torch": "2.13.0+cpu"},
             "inputs": ["input_ids: int64[1x128]", "attention_mask: int64[1x128]"],
             "dynamic": True, "compiled": False,
             "rules": ["idempotent-elision (elide optimize): optimize is idempotent"], **model}
    steps = [{"id": "verify", "op": "verify", "action": "run", "status": "ok",
              "proof_check": None, "metrics": {"cosine_mean": 0.9991, "cosine_min": 0.998}},
             {"id": "optimize", "op": "optimize", "action": "elided", "status": "ok",
              "proof_check": {"held": True, "detail": "premises hold on the real input"},
              "metrics": {}}]
    return {"run_id": "r1", "started": "2026-11-27T00:00:00+0000", "steps": steps,
            "modules": [], "model": facts, "overrides": ["target=cpu", "+verify.samples=8"],
            "choices": {"model": "local_hf", "quant": "w8a16_pc", "target": "cpu",
                        "executor": "local"}}


FILES = {"model.onnx": 1000, "config.json": 10, "modules.json": 10, "weights/ab": 5000,
         "weights/cd": 5000}


def test_the_metadata_is_a_hub_model_card(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text(card(record(), FILES, "mit"))
    meta = metadata_load(tmp_path / "README.md")
    assert meta == {"base_model": "BAAI/bge-small-en-v1.5", "base_model_relation": "quantized",
                    "library_name": "sentence-transformers", "license": "mit",
                    "pipeline_tag": "sentence-similarity",
                    "tags": ["onnx", "modelplan", "cpu", "w8a16_pc"]}
    assert ModelCardData(**meta).to_dict()["base_model"] == "BAAI/bge-small-en-v1.5"


def test_a_model_without_id_or_quantization_claims_no_base(tmp_path: Path) -> None:
    text = card(record(id=None, name="my-ckpt", precision="none", task="text-classification"),
                {"model.onnx": 10}, None)
    (tmp_path / "README.md").write_text(text)
    meta = metadata_load(tmp_path / "README.md")
    assert "base_model" not in meta and "license" not in meta
    assert meta["library_name"] == "onnx" and meta["pipeline_tag"] == "text-classification"
    assert "ORTModelForSequenceClassification" in text and "SentenceTransformer" not in text


def test_the_card_says_how_to_open_the_folder_and_rebuild_it() -> None:
    text = card(record(), FILES, None)
    assert "batch and sequence axes are free" in text
    assert '`weights/`: 2 weight file(s), 9.8 KB' in text
    assert "SentenceTransformer(\"path/to/this/folder\", backend=\"onnx\")" in text
    assert "modelplan run model=local_hf quant=w8a16_pc target=cpu +verify.samples=8" in text
    assert "| `optimize` | optimize | elided | elided: premises hold on the real input |" in text
    assert "- idempotent-elision (elide optimize): optimize is idempotent" in text
    assert "Verify: cosine mean 0.9991, min 0.9980" in text


def test_a_compiled_deliverable_names_the_ep_it_needs_and_its_fixed_shapes() -> None:
    text = card(record(target="qnn_htp", compiled=True, dynamic=False), FILES, None)
    assert "tags:\n- onnx\n- modelplan\n- qnn_htp\n- w8a16_pc\n- npu\n- epcontext" in text
    assert "EPContext models compiled for `qnn_htp`" in text
    assert "register_execution_provider_library" in text
    assert "fixed shapes (input_ids: int64[1x128]; attention_mask: int64[1x128])" in text
    assert "from optimum" not in text  # a client on the default providers cannot run it


def test_an_encoder_decoder_card_says_its_generation_speed() -> None:
    """From its graphs' perf: the first token is the encoder, the cross graph and a decoder
    step; each further token a decoder step."""
    rec = record(task="text2text-generation")
    rec["steps"] = [{"id": f"{g}.perf", "op": "perf", "action": "run", "status": "ok",
                     "proof_check": None, "metrics": {"latency_ms_median": ms, "ep": "cpu",
                                                      "latency_ms_p90": ms}}
                    for g, ms in (("encoder", 30.0), ("cross", 5.0), ("decoder", 25.0))]
    text = card(rec, FILES, None)
    assert ("Generation speed: time to first token 60.0 ms (encoder, cross and one decoder "
            "step), then 40.0 tokens/s (25.0 ms a token, one token over the cache)") in text


def test_a_compiled_sentence_transformers_folder_claims_no_sentence_transformers(
        tmp_path: Path) -> None:
    """An EPContext model opens only on the EP that compiled it: sentence-transformers cannot
    load the folder, so the card's library is onnx (the task stays sentence similarity)."""
    text = card(record(target="qnn_htp", compiled=True, dynamic=False), FILES, None)
    (tmp_path / "README.md").write_text(text)
    meta = metadata_load(tmp_path / "README.md")
    assert meta["library_name"] == "onnx" and meta["pipeline_tag"] == "sentence-similarity"
    assert "epcontext" in meta["tags"]


def test_the_card_says_which_runtime_the_graphs_need() -> None:
    runtime = {"provider": "QNNExecutionProvider", "provider_options": {"soc_model": 60},
               "packages": {"onnxruntime": "1.32.0", "onnxruntime-qnn": "2.7.0"},
               "sdk": {"name": "QNN SDK", "version": "2.51.0", "build": "v2.51.0.2609"},
               "graphs": {"model.onnx": {"kind": "epcontext", "runs_on": "target",
                                         "htp_arch": None, "soc_model": 60}}}
    text = card({**record(), "runtime": runtime}, FILES)
    section = text.split("## Runtime\n", 1)[1].split("\n## ", 1)[0]
    assert ("load with onnxruntime 1.32.0, onnxruntime-qnn 2.7.0, QNN SDK 2.51.0 (backend "
            "build v2.51.0.2609) on `QNNExecutionProvider` with provider options "
            '`{"soc_model": 60}`') in section
    assert "- `model.onnx`: epcontext, compiled for HTP arch the backend default, SoC model 60" \
        in section
    assert "modelplan check path/to/this/folder" in section
    assert "(no runtime manifest)" in card(record(), FILES)


BUNDLE = {"bundle.json": 10, "genai_config.json": 10, "decode_model.onnx": 100,
          "prefill_model.onnx": 100}


def test_a_language_model_card_says_how_onnxruntime_genai_runs_it_where_it_does() -> None:
    rec = record(task="text-generation", genai="decoder")
    text = card(rec, BUNDLE, None)
    assert 'model = og.Model("path/to/this/folder")' in text
    assert "generator.append_tokens(tokenizer.encode(\"a prompt\"))" in text
    pipeline = card(record(task="text-generation", genai="decoder-pipeline", compiled=True,
                           target="qnn_htp"), BUNDLE, None)
    assert "og.Model" not in pipeline and "0.18 does not run" in pipeline
    staged = card(record(task="text-generation", genai="decoder-pipeline", compiled=True,
                         target="qnn_htp"),
                  {**BUNDLE, "prompt_stage_ctx.onnx": 10, "token_stage_ctx.onnx": 10}, None)
    assert "model = og.Model(folder)" in staged and "0.18 does not run" not in staged
    assert "register_execution_provider_library" in staged and "(`qnn_htp`;" in staged
    fixed = card(record(task="text-generation", genai="decoder-pipeline", dynamic=False),
                 {**BUNDLE, "genai_model.onnx": 100}, None)
    assert 'model = og.Model(folder)' in fixed and "0.18 does not run" not in fixed
    assert "windowed key/value cache in uint8" in fixed and "one window" in fixed
    seq2seq = card(record(task="text2text-generation", genai=None), BUNDLE, None)
    assert "og.Model" not in seq2seq and "no runner" in seq2seq


def test_a_whisper_card_says_how_onnxruntime_genai_transcribes_where_it_does() -> None:
    from planner.render.card import genai_layout

    spec = {"graph": "encoder", "outputs": ["last_hidden_state", "cross.0.key"]}
    assert genai_layout([spec, {"graph": "decoder", "outputs": ["logits"]}]) == "whisper"
    assert genai_layout([{**spec, "outputs": ["last_hidden_state"]}, {"graph": "cross"},
                         {"graph": "decoder"}]) is None  # the static cache's graphs
    speech = {"bundle.json": 10, "encoder_model.onnx": 100, "decoder_model.onnx": 100}
    rec = record(task="automatic-speech-recognition", genai="whisper")
    text = card(rec, {**speech, "genai_config.json": 10}, None)
    assert 'model = og.Model("path/to/this/folder")' in text
    assert "generator.set_inputs(inputs)" in text
    short = card(rec, speech, None)  # no genai_config.json: its encoder is not 30 s long
    assert "og.Model" not in short and "3000 log-mel frames" in short
