"""Model sources and exporters beyond the defaults: hub cache, custom code, dynamo."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.integration.conftest import CPU_RUN, run_json, step

CPU = ("quant=none", "target=cpu", "verify=none", "perf=none", "export.shapes.sequence_length=32")


def tiny_checkpoint(cpu_run: dict[str, Any], dest: Path) -> Path:
    src = Path(step(cpu_run["record"], "resolve")["outputs"]["source.json"]).parent / "checkpoint"
    shutil.copytree(src, dest)
    return dest


def test_hub_cache_model_is_used_offline(cpu_run: dict[str, Any], tmp_path: Path,
                                         monkeypatch: Any) -> None:
    hub = tmp_path / "hub"
    repo = hub / "models--acme--tiny-bert"
    tiny_checkpoint(cpu_run, repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123abcd")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    code, record, err = run_json("model=hub_cache", "model.hub_id=acme/tiny-bert", *CPU,
                                 store=tmp_path / "store", outputs=tmp_path / "out")
    assert code == 0, err
    assert step(record, "resolve")["metrics"]["checkpoint"].endswith("0123abcd")


def test_custom_code_is_refused_unless_trusted(cpu_run: dict[str, Any], tmp_path: Path) -> None:
    ckpt = tiny_checkpoint(cpu_run, tmp_path / "ckpt")
    config = json.loads((ckpt / "config.json").read_text())
    config["auto_map"] = {"AutoModel": "modeling_evil.EvilModel"}
    (ckpt / "config.json").write_text(json.dumps(config))
    code, record, err = run_json("model=local_hf", f"model.path={ckpt}", *CPU,
                                 store=tmp_path / "store", outputs=tmp_path / "out")
    assert code == 1
    assert "needs custom code" in step(record, "resolve")["error"]
    assert "model.trust_remote_code=true" in err


def test_dynamo_export_with_report(tmp_path: Path) -> None:
    code, record, err = run_json(*CPU_RUN, "export=dynamo", "export.report=true",
                                 "export.shapes.sequence_length=32", store=tmp_path / "store",
                                 outputs=tmp_path / "out")
    assert code == 0, err
    export = step(record, "export")
    assert export["metrics"]["max_abs_vs_torch"] <= 1e-4
    assert export["metrics"]["coverage"]["direct"] > 0
    report = Path(export["outputs"]["model_hierarchy.md"]).read_text()
    assert report.startswith("# Hierarchy report") and "/BertModel/BertEncoder" in report
