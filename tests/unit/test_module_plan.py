"""perf.module in the plan: an extract step keyed by the graph it cuts and the module, a
compile of the pieces when the deliverable is an EPContext model (from the graph it was
compiled from), a perf step for the pieces; clear errors where it cannot apply."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.errors import ConfigError, PlanError
from planner.planning import plan_from_overrides, plan_sweep

TINY = ("model=tiny_bert", "export.shapes.sequence_length=32")


def steps(*overrides: str, store: Path) -> dict[str, dict]:
    ir = plan_from_overrides([*TINY, *overrides], store=str(store)).to_json()
    return {s["id"]: s for s in ir["steps"] if s["action"] != "elided"}


def test_cpu_extracts_from_the_deliverable_and_times_the_pieces(tmp_path: Path) -> None:
    got = steps("target=cpu", "quant=w8a8", "perf.module=BertAttention", store=tmp_path)
    assert got["extract"]["inputs"] == {"model": "tag", "hierarchy": "export"}
    assert got["extract"]["params"] == {"module": "BertAttention"}
    assert got["perf_module"]["inputs"] == {"model": "extract"}
    assert got["perf_module"]["params"] == got["perf"]["params"]
    assert "compile_module" not in got
    assert list(got)[-2:] == ["extract", "perf_module"]


def test_an_epcontext_deliverable_is_cut_from_its_source_graph_and_recompiled(
        tmp_path: Path) -> None:
    got = steps("perf.module=BertLayer", store=tmp_path)
    assert got["compile"]["inputs"] == {"model": "tag"}
    assert got["extract"]["inputs"] == {"model": "tag", "hierarchy": "export"}
    assert got["compile_module"]["op"] == "compile"
    assert got["compile_module"]["params"] == got["compile"]["params"]
    assert got["compile_module"]["inputs"] == {"model": "extract"}
    assert got["perf_module"]["inputs"] == {"model": "compile_module"}
    assert sum(s["op"] == "legalize" for s in got.values()) == 1


def test_the_extract_key_follows_the_source_artifact_and_the_module(tmp_path: Path) -> None:
    a = steps("target=cpu", "perf.module=BertAttention", store=tmp_path)
    b = steps("target=cpu", "perf.module=BertLayer", store=tmp_path)
    c = steps("target=cpu", "quant=w8a8", "perf.module=BertAttention", store=tmp_path)
    assert a["tag"]["key"] == b["tag"]["key"] and a["extract"]["key"] != b["extract"]["key"]
    assert a["extract"]["key"] != c["extract"]["key"]
    assert "extract" not in steps("target=cpu", store=tmp_path)


def test_a_sweep_over_modules_shares_everything_up_to_extract(tmp_path: Path) -> None:
    sweep = plan_sweep([*TINY, "target=cpu", "perf.module=BertAttention,BertLayer"],
                       store=str(tmp_path))
    shared = {v["step"]["id"] for v in sweep.unique.values() if len(v["jobs"]) == 2}
    own = sorted(v["step"]["id"] for v in sweep.unique.values() if len(v["jobs"]) == 1)
    assert {"resolve", "export", "normalize", "tag", "verify", "perf"} <= shared
    assert own == ["extract", "extract", "perf_module", "perf_module"]


def test_a_module_needs_a_torch_export_and_a_perf_step(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"")
    with pytest.raises(PlanError, match="perf.module=BertLayer: modules are found by the "
                                        "hierarchy tags of a torch export"):
        plan_from_overrides(["model=onnx_file", f"model.path={model}", "target=cpu",
                             "quant=none", "perf.module=BertLayer"], store=str(tmp_path))
    with pytest.raises(PlanError, match="needs perf.iterations of 1 or more; use perf=quick"):
        steps("perf=none", "perf.module=BertLayer", store=tmp_path)


def test_a_malformed_module_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="perf.module: 'Bert Layer' does not match"):
        steps("perf.module=Bert Layer", store=tmp_path)
    with pytest.raises(ConfigError, match="export.torch_modules.0: 'torch.nn.Linear' does not"):
        steps("export.torch_modules=[torch.nn.Linear]", store=tmp_path)


def test_torch_modules_are_export_params_in_a_canonical_order(tmp_path: Path) -> None:
    a = steps("export.torch_modules=[Linear,LayerNorm]", store=tmp_path)["export"]
    b = steps("export.torch_modules=[LayerNorm,Linear]", store=tmp_path)["export"]
    assert a["params"]["torch_modules"] == ["LayerNorm", "Linear"] and a["key"] == b["key"]
    assert steps(store=tmp_path)["export"]["params"]["torch_modules"] == []


def test_a_perf_module_typo_is_refused_at_plan_time_when_the_export_is_stored(
        tmp_path: Path) -> None:
    import json

    from executors.onnx.artifacts import SIDECAR
    from planner.config.compose import compose
    from planner.core import module_perf
    from planner.core.storelayout import entry_dir
    from planner.errors import PlanError
    from planner.planning import plan_for

    assert module_perf.HIERARCHY_FILE == SIDECAR
    config = compose(["model=tiny_bert", "target=cpu", "quant=none", "verify=none",
                      "perf.module=BertAttenton"])
    config["store"]["path"] = str(tmp_path)
    export = plan_for(config).step("export")  # nothing exported yet: the plan is made
    entry = entry_dir(tmp_path, export.key)
    entry.mkdir(parents=True)
    (entry / SIDECAR).write_text(json.dumps({
        "root": "/BertModel", "inlined_classes": ["Linear"],
        "traced_modules": ["/BertModel", "/BertModel/BertEncoder",
                           "/BertModel/BertEncoder/BertLayer.0/BertAttention"]}))
    with pytest.raises(PlanError, match=r"perf.module=BertAttenton matches no module of "
                                        r"BertModel \(did you mean 'BertAttention'\?\)"):
        plan_for(config)
    config["perf"]["module"] = "Linear"
    with pytest.raises(PlanError, match="export.torch_modules=\\[Linear\\]"):
        plan_for(config)
    config["perf"]["module"] = "BertAttention"
    assert plan_for(config).step("extract").params["module"] == "BertAttention"
