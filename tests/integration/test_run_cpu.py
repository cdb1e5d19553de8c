"""`modelplan run` on tiny_bert for the CPU target: real export, tags, store, run record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import onnx
import onnxruntime as ort

import schemas
from executors.onnx.artifacts import FACTS_KEY, TAG_KEY, problems
from tests.conftest import run_cli
from tests.integration.conftest import CPU_RUN, run_json, step, store_copy


def test_run_record_is_valid_and_elides_optimize(cpu_run: dict[str, Any]) -> None:
    record = cpu_run["record"]
    jsonschema.Draft202012Validator(schemas.load("run")).validate(record)
    actions = {s["id"]: s["action"] for s in record["steps"]}
    assert actions == {"resolve": "run", "export": "run", "normalize": "run",
                       "optimize": "elided", "tag": "run"}
    assert step(record, "optimize")["proof_check"] == {
        "held": True, "detail": "premises hold on the real input"}
    assert step(record, "normalize")["metrics"]["ort_passes_to_fixed_point"] >= 1
    for s in record["steps"]:
        if s["action"] == "run":
            assert s["wall_s"] > 0 and s["peak_rss_mb"] > 0
            assert all(Path(p).is_file() for p in s["outputs"].values())


def test_final_model_is_fully_tagged_and_matches_torch(cpu_run: dict[str, Any]) -> None:
    import torch
    import transformers

    final = Path(cpu_run["record"]["published"]["model.onnx"])
    assert problems(final, tagged=True) == []
    model = onnx.load(str(final), load_external_data=False)
    assert all(TAG_KEY in {p.key for p in n.metadata_props} for n in model.graph.node)
    assert FACTS_KEY in {p.key for p in model.metadata_props}
    checkpoint = Path(step(cpu_run["record"], "resolve")["outputs"]["source.json"]).parent
    torch_model = transformers.BertModel.from_pretrained(str(checkpoint / "checkpoint"),
                                                         attn_implementation="eager").eval()
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 1000, size=(1, 128))
    mask = np.zeros((1, 128), dtype=np.int64)
    mask[0, :90] = 1
    feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    got = ort.InferenceSession(str(final), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    with torch.no_grad():
        want = torch_model(**{k: torch.from_numpy(v) for k, v in feed.items()}).last_hidden_state
    assert np.abs(got - want.numpy()).max() <= 1e-4


def test_hierarchy_sidecar_covers_every_exported_node(cpu_run: dict[str, Any]) -> None:
    export = step(cpu_run["record"], "export")
    meta = json.loads(Path(export["outputs"]["model_htp_metadata.json"]).read_text())
    exported = onnx.load(export["outputs"]["model.onnx"], load_external_data=False)
    assert set(meta["nodes"]) == {n.name for n in exported.graph.node}
    assert meta["coverage"]["percent"] == 100.0
    assert meta["coverage"]["direct"] > meta["coverage"]["root"]
    assert "/BertModel/BertEncoder/BertLayer.0/BertAttention" in meta["traced_modules"]
    assert all(not n.metadata_props for n in exported.graph.node)  # export writes none


def test_second_run_is_all_cached(cpu_run: dict[str, Any]) -> None:
    code, record, err = run_json(*CPU_RUN, store=cpu_run["store"], outputs=cpu_run["outputs"])
    assert code == 0, err
    assert [s["action"] for s in record["steps"]] == ["cached"] * 3 + ["elided", "cached"]


def test_optimize_with_fusions_keeps_full_tags(cpu_run: dict[str, Any], tmp_path: Path) -> None:
    args = [a for a in CPU_RUN] + ["optim=transformer"]
    store = store_copy(cpu_run, tmp_path / "store")  # optimize must run: no other test's entry
    code, record, err = run_json(*args, store=store, outputs=tmp_path / "out")
    assert code == 0, err
    opt = step(record, "optimize")
    assert opt["action"] == "run"
    assert opt["metrics"]["fused_ops"].get("Gelu", 0) > 0
    assert problems(Path(record["published"]["model.onnx"]), tagged=True) == []
    assert step(record, "export")["action"] == "cached"


def test_apply_runs_a_saved_plan_and_refuses_a_tampered_one(cpu_run: dict[str, Any],
                                                            tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    store = str(cpu_run["store"])
    assert run_cli("plan", *CPU_RUN, "--store", store, "--format", "json", "-o",
                   str(plan)).returncode == 0
    ok = run_cli("apply", str(plan), "--store", store, "--outputs", str(tmp_path), "--json")
    assert ok.returncode == 0, ok.stderr
    assert {s["action"] for s in json.loads(ok.stdout)["steps"]} <= {"cached", "elided"}
    ir = json.loads(plan.read_text())
    ir["steps"][1]["params"]["opset"] = 13
    bad = tmp_path / "tampered.json"
    bad.write_text(json.dumps(ir))
    refused = run_cli("apply", str(bad), "--store", store, "--outputs", str(tmp_path))
    assert refused.returncode == 2
    assert "step export key does not match its content" in refused.stderr
    assert "Traceback" not in refused.stderr
    ir["steps"][1]["params"]["_target_"] = "os.system"
    bad.write_text(json.dumps(ir))
    refused = run_cli("apply", str(bad), "--store", store)
    assert refused.returncode == 2
    assert "step export (export) has params ['_target_', 'dynamic', 'exporter'" in refused.stderr
    assert "but export declares ['dynamic', 'exporter', 'fallback', 'graph', 'hierarchy'" \
        in refused.stderr


def test_apply_rejects_non_plans(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text('{"steps": []}')
    result = run_cli("apply", str(tmp_path / "x.json"), "--store", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.startswith("modelplan: error: ") and "not a valid plan" in result.stderr


def test_store_ls_verify_gc(cpu_run: dict[str, Any], tmp_path: Path) -> None:
    store = cpu_run["store"]
    ls = run_cli("store", "ls", "--store", str(store))
    assert ls.returncode == 0 and " entries, " in ls.stdout
    assert run_cli("store", "verify", "--store", str(store)).returncode == 0
    dry = run_cli("store", "gc", "--store", str(store), "--dry-run")
    assert dry.returncode == 0 and "would remove" in dry.stdout
