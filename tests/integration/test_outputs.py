"""Outputs never overwrite each other silently: the folder is named after the model itself, and
publishing over another model's deliverable is refused with the fix unless asked for."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from planner.support.digests import file_sha256
from tests.conftest import run_cli
from tests.integration.conftest import run_json, step

ONNX_RUN = ("model=onnx_file", "quant=none", "target=cpu", "verify=none", "perf=none")


def test_two_onnx_files_never_share_a_folder_silently(cpu_run: dict[str, Any],
                                                      tmp_path: Path) -> None:
    first, second = tmp_path / "a" / "model.onnx", tmp_path / "b" / "model.onnx"
    for path, src in ((first, cpu_run["record"]["published"]["model.onnx"]),
                      (second, step(cpu_run["record"], "export")["outputs"]["model.onnx"])):
        path.parent.mkdir()
        shutil.copy(src, path)
        if (Path(src).parent / "weights").is_dir():  # its external data (blobs) goes with it
            shutil.copytree(Path(src).parent / "weights", path.parent / "weights")
    store, outputs = cpu_run["store"], tmp_path / "out"
    code, record, err = run_json(*ONNX_RUN, f"model.path={first}", store=store, outputs=outputs)
    assert code == 0, err
    folder = outputs / "model-none-cpu"  # named after the file, not after the config option
    assert record["outputs_dir"] == str(folder)
    delivered = file_sha256(folder / "model.onnx")
    refused = run_cli("run", *ONNX_RUN, f"model.path={second}", "--store", str(store),
                      "--outputs", str(outputs))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert f"{folder}: holds the deliverable of another model" in refused.stderr
    assert "pass --name NAME" in refused.stderr and "--overwrite" in refused.stderr
    assert file_sha256(folder / "model.onnx") == delivered  # untouched
    code, _, err = run_json(*ONNX_RUN, f"model.path={first}", store=store, outputs=outputs)
    assert code == 0, err  # the same model may rebuild its own folder
    code, named, err = run_json(*ONNX_RUN, f"model.path={second}", "--name", "second",
                                store=store, outputs=outputs)
    assert code == 0 and named["outputs_dir"] == str(outputs / "second"), err
    code, _, err = run_json(*ONNX_RUN, f"model.path={second}", "--overwrite",
                            store=store, outputs=outputs)
    assert code == 0, err
    assert file_sha256(folder / "model.onnx") == file_sha256(outputs / "second" / "model.onnx")
    assert file_sha256(folder / "model.onnx") != delivered


def test_a_failed_run_keeps_the_previous_deliverable(cpu_run: dict[str, Any],
                                                     tmp_path: Path) -> None:
    store, outputs = cpu_run["store"], tmp_path / "out"
    tiny = ("model=tiny_bert", "target=cpu", "--name", "tiny")
    code, _, err = run_json(*tiny, "quant=none", "verify=none", "perf.iterations=2",
                               "perf.module=BertAttention", store=store, outputs=outputs)
    assert code == 0, err
    folder = outputs / "tiny"
    before = {p.relative_to(folder): file_sha256(p) for p in folder.rglob("*") if p.is_file()}
    assert {"perf_module/metrics.json", "model.onnx"} <= {str(p) for p in before}
    code, failed, err = run_json(*tiny, "quant=w8a8", "verify=cosine", "verify.threshold=1.0",
                                 "perf=none", store=store, outputs=outputs)
    assert code == 1 and failed["status"] == "failed", err
    after = {p.relative_to(folder): file_sha256(p) for p in folder.rglob("*") if p.is_file()}
    assert after.pop(Path("run.failed.json")) and after == before  # untouched, record beside
    assert [p.name for p in outputs.iterdir()] == ["tiny"]  # no staging folder left behind
    code, _, err = run_json(*tiny, "quant=none", "verify=none", "perf=none", store=store,
                                outputs=outputs)
    assert code == 0, err
    names = {str(p.relative_to(folder)) for p in folder.rglob("*")}
    assert not {"perf", "perf_module", "run.failed.json"} & names  # the earlier runs' folders
    assert "model.onnx" in names and [p.name for p in outputs.iterdir()] == ["tiny"]


def test_a_failed_first_run_makes_no_folder_and_measures_nothing(cpu_run: dict[str, Any],
                                                                 tmp_path: Path) -> None:
    """verify fails on a first run: perf does not time the model that is not delivered, the
    error is printed once, and the record is kept beside the folder, which is not made."""
    outputs = tmp_path / "out"
    result = run_cli("run", "model=tiny_bert", "target=cpu", "quant=w8a8", "verify.threshold=1.0",
                     "perf.iterations=2", "--name", "first", "--store", str(cpu_run["store"]),
                     "--outputs", str(outputs))
    assert result.returncode == 1, result.stderr
    said = result.stdout + result.stderr
    assert said.count("is below verify.threshold 1.0") == 1, said
    assert [p.name for p in outputs.iterdir()] == ["first.run.failed.json"]
    record = json.loads((outputs / "first.run.failed.json").read_text())
    assert record["status"] == "failed" and step(record, "verify")["status"] == "failed"
    perf = step(record, "perf")
    assert perf["status"] == "skipped" and not perf["outputs"], perf
    assert "staging" not in said and f"Run record: {outputs / 'first.run.failed.json'}" in said
    code, _, err = run_json("model=tiny_bert", "target=cpu", "quant=none", "verify=none",
                            "perf=none", "--name", "first", store=cpu_run["store"],
                            outputs=outputs)
    assert code == 0, err
    assert [p.name for p in outputs.iterdir()] == ["first"]  # the failure's record went with it
