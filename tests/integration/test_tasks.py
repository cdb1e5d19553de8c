"""Every task builds and verifies from a tiny random-weight model, for the CPU (fp32) and for QNN
HTP (w8a16 per-channel, compiled with CPU fallback off), with hierarchy tags on every node of
every graph artifact."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import onnx
import pytest

from executors.onnx.artifacts import TAG_KEY
from tests.conftest import run_cli, shared_dir
from tests.integration.conftest import run_json, step

# task -> (model type, extra overrides, least HTP cosine measured on its tiny model)
TASKS: dict[str, tuple[str, tuple[str, ...], float]] = {
    "feature-extraction": ("bert", ("export.shapes.sequence_length=16",), 0.98),
    "sentence-similarity": ("mpnet", ("export.shapes.sequence_length=16",), 0.98),
    "text-classification": ("roberta", ("export.shapes.sequence_length=16",), 0.98),
    "zero-shot-classification": ("deberta-v2", ("export.shapes.sequence_length=16",), 0.98),
    "token-classification": ("distilbert", ("export.shapes.sequence_length=16",), 0.98),
    "question-answering": ("electra", ("export.shapes.sequence_length=16",), 0.98),
    "fill-mask": ("modernbert", ("export.shapes.sequence_length=16",), 0.98),
    "image-classification": ("vit", (), 0.98),
    "image-feature-extraction": ("dinov2", (), 0.98),
    "image-segmentation": ("segformer", (), 0.98),
    "depth-estimation": ("dpt", (), 0.98),
    "object-detection": ("yolos", (), 0.98),
    "zero-shot-object-detection": ("owlvit", (), 0.98),
    "zero-shot-image-classification": ("clip", ("export.shapes.sequence_length=16",), 0.98),
    "keypoint-detection": ("vitpose", (), 0.98),
    "audio-classification": ("audio-spectrogram-transformer", (), 0.95),
    "automatic-speech-recognition": ("wav2vec2", ("export.shapes.audio_samples=8000",), 0.95),
    "text2text-generation": ("bart", ("export.shapes.sequence_length=16",
                                      "export.shapes.decoder_sequence_length=8"), 0.98),
    "image-to-text": ("vision-encoder-decoder", ("export.shapes.decoder_sequence_length=8",),
                      0.98),
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One store for every task, whichever xdist worker builds it (fp16 reuses a task's steps)."""
    store = shared_dir(tmp_path_factory) / "tasks-store"
    store.mkdir(exist_ok=True)
    return store


def build(task: str, store: Path, out: Path, *target: str) -> dict[str, Any]:
    model_type, extra, _ = TASKS[task]
    code, record, err = run_json("model=tiny_random", f"model.random_init.model_type={model_type}",
                                 f"model.task={task}", "verify.samples=2", "perf=none", *extra,
                                 *target, store=store, outputs=out)
    assert code == 0, err
    return record


def tagged_everywhere(record: dict[str, Any]) -> None:
    """Every graph artifact after `tag` carries a hierarchy tag on every node."""
    for s in record["steps"]:
        if s["op"] == "tag":
            model = onnx.load(s["outputs"]["model.onnx"], load_external_data=False)
            assert all(TAG_KEY in {p.key for p in n.metadata_props} for n in model.graph.node)
        if s["op"] == "export":
            assert s["metrics"]["coverage"]["percent"] == 100.0


@pytest.mark.parametrize("task", list(TASKS))
def test_task_builds_on_cpu_and_htp(task: str, store: Path, tmp_path: Path) -> None:
    cpu = build(task, store, tmp_path / "cpu", "quant=none", "target=cpu")
    tagged_everywhere(cpu)
    verifies = [s for s in cpu["steps"] if s["op"] == "verify"]
    assert verifies and all(s["metrics"]["passed"] for s in verifies)
    threshold = TASKS[task][2]
    htp = build(task, store, tmp_path / "htp", "quant.calibration.samples=8",
                f"verify.threshold={threshold}")
    tagged_everywhere(htp)
    compiled = [s for s in htp["steps"] if s["op"] == "compile"]
    assert compiled and all(s["status"] == "ok" for s in compiled)
    for s in compiled:
        graph = onnx.load(s["outputs"]["model.onnx"], load_external_data=False).graph
        assert {n.op_type for n in graph.node} == {"EPContext"}
    for s in htp["steps"]:
        if s["op"] == "verify":
            assert s["metrics"]["cosine_mean"] >= threshold
    if len(compiled) == 2:  # an encoder-decoder: the pair is the deliverable
        assert {"encoder_model.onnx", "decoder_model.onnx"} <= set(htp["published"])
        assert step(htp, "bundle")["status"] == "ok"
    calibration = [s["metrics"]["calibration_data"] for s in htp["steps"] if s["op"] == "quantize"]
    assert calibration and all(c for c in calibration)


def test_fp16_on_htp_sets_its_own_provider_options(store: Path, tmp_path: Path) -> None:
    record = build("image-classification", store, tmp_path, "quant=fp16")
    compiled = step(record, "compile")
    assert compiled["status"] == "ok"
    verify = step(record, "verify")["metrics"]
    assert verify["cosine_mean"] >= 0.999  # fp16 keeps what w8a16 loses


def test_inspect_hierarchy_matches_the_export_sidecar(cpu_run: dict[str, Any]) -> None:
    # the CPU's graph (its axes free), as the run it is compared with
    result = run_cli("inspect", "model=tiny_bert", "target=cpu", "--hierarchy", "--json")
    assert result.returncode == 0, result.stderr
    traced = json.loads(result.stdout)["hierarchy"]["model"]
    sidecar = json.loads(Path(cpu_run["record"]["published"]["model_htp_metadata.json"])
                         .read_text())
    assert traced == dict(Counter(v["tag"] for v in sidecar["nodes"].values()))
    text = run_cli("inspect", "model=tiny_bert", "--hierarchy").stdout
    assert "BertLayer.1" in text and "task       feature-extraction (text)" in text
