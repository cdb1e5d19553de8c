"""The QNN HTP pipeline on tiny_bert: quantize -> legalize -> compile -> verify -> perf, on the
real QNN EP (HTP simulator), and compile failures that name QNN's reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from executors.onnx.artifacts import TAG_KEY, problems
from executors.runtime import qnn
from planner.core.targets import named
from tests.conftest import run_cli
from tests.integration.conftest import QNN_RUN, run_json, step


def test_pipeline_order_and_metrics(qnn_run: dict[str, Any]) -> None:
    record = qnn_run["record"]
    assert [s["id"] for s in record["steps"]] == [
        "resolve", "export", "fix_shapes", "normalize", "optimize", "legalize", "quantize",
        "tag", "compile", "verify", "perf"]
    # the export leaves the text axes free (the CPU's graph); fix_shapes fixes them for HTP
    assert step(record, "fix_shapes")["metrics"]["axes_fixed"] == 6
    verify = step(record, "verify")["metrics"]
    assert verify["cosine_mean"] >= 0.99 and verify["passed"] is True
    assert {"cosine_min", "max_abs"} <= set(verify)
    perf = step(record, "perf")["metrics"]
    assert perf["latency_ms_median"] > 0 and perf["latency_ms_p90"] >= perf["latency_ms_median"]
    assert perf["nodes_total"] >= 1 and perf["nodes_on_ep"] == perf["nodes_total"]
    assert perf["nodes_by_ep"] == {"QNNExecutionProvider": perf["nodes_total"]}
    legal = step(record, "legalize")["metrics"]
    assert legal["wheres_rewritten"] >= 1 and legal["gelus_fused"] == 2


def test_quantized_artifact_is_fully_tagged_with_qdq(qnn_run: dict[str, Any]) -> None:
    tagged = Path(step(qnn_run["record"], "tag")["outputs"]["model.onnx"])
    assert problems(tagged, tagged=True) == []
    model = onnx.load(str(tagged), load_external_data=False)
    qdq = [n for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert qdq and all(TAG_KEY in {p.key for p in n.metadata_props} for n in qdq)
    assert step(qnn_run["record"], "tag")["metrics"]["matched"]["qdq"] == len(qdq)
    assert step(qnn_run["record"], "tag")["metrics"]["matched"].get("root", 0) == 0


def test_compiled_model_loads_without_cpu_fallback(qnn_run: dict[str, Any]) -> None:
    compiled = Path(step(qnn_run["record"], "compile")["outputs"]["model.onnx"])
    model = onnx.load(str(compiled), load_external_data=False)
    assert [n.op_type for n in model.graph.node] == ["EPContext"]
    with qnn.native_log():
        sess = qnn.session(compiled, named("qnn_htp"), {}, cpu_fallback=False)
    feed = {i.name: np.ones([d.dim_value for d in i.type.tensor_type.shape.dim], np.int64)
            for i in model.graph.input}
    assert np.isfinite(sess.run(None, feed)[0]).all()


def test_w8a8_below_threshold_fails_verify_with_numbers(qnn_run: dict[str, Any]) -> None:
    store, outputs = qnn_run["store"], qnn_run["outputs"]
    code, record, err = run_json(*QNN_RUN, "quant=w8a8", "verify.threshold=0.99999999",
                                 store=store, outputs=outputs)
    assert code == 1
    verify = step(record, "verify")
    assert verify["status"] == "failed" and "cosine_mean" in verify["error"]
    assert "use quant=w8a16_pc" in verify["error"]
    assert verify["wall_s"] > 0 and verify["peak_rss_mb"] > 0  # what the failed verify cost
    assert step(record, "perf")["status"] == "skipped"  # it would measure no deliverable
    assert not list(Path(store).glob(f"??/{verify['key']}"))  # no wrong artifact stored
    assert err.strip().splitlines()[-1].startswith("modelplan: error: step verify")


def test_compile_failure_names_the_node_and_stores_nothing(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Erf", ["r"], ["y"], name="lonely_erf")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "erf.onnx"
    onnx.save(model, str(path))
    code, record, _err = run_json("model=onnx_file", f"model.path={path}", "verify=none",
                                  "perf=none", "quant.calibration.samples=2",
                                  store=tmp_path / "store", outputs=tmp_path / "out")
    assert code == 1
    failed = next(s for s in record["steps"] if s["status"] == "failed")
    assert failed["id"] == "legalize" and "Erf" in failed["error"]


def test_an_op_htp_lacks_fails_legalize_naming_it(tmp_path: Path) -> None:
    """Det has no QNN EP builder: legalize refuses it before quantize and compile spend time,
    naming the node and a fix, and the failed run publishes no model."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "shape"], ["r2"], name="reshape"),
             helper.make_node("Det", ["r2"], ["d"], name="det_node"),
             helper.make_node("Add", ["r", "d"], ["y"], name="add")]
    shape = helper.make_tensor("shape", TensorProto.INT64, [3], [1, 2, 2])
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [shape]),
                              opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "det.onnx"
    onnx.save(model, str(path))
    store = tmp_path / "store"
    code, record, err = run_json("model=onnx_file", f"model.path={path}", "verify=none",
                                 "perf=none", "quant.calibration.samples=2",
                                 store=store, outputs=tmp_path / "out")
    assert code == 1, err
    legalize = step(record, "legalize")
    assert legalize["status"] == "failed"
    assert "Det node 'det_node'" in legalize["error"] and "HTP has no Det" in legalize["error"]
    assert "cpu_fallback=true" in err and "Traceback" not in err
    compile_step = step(record, "compile")
    assert compile_step["status"] == "skipped"
    assert not list(store.glob(f"??/{legalize['key']}"))
    assert record["outputs_dir"] == str(tmp_path / "out" / "det-w8a16_pc-qnn_htp")
    assert not (tmp_path / "out").joinpath("det-w8a16_pc-qnn_htp", "model.onnx").exists()


def test_help_lists_commands() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    assert all(c in result.stdout for c in ("plan", "run", "apply", "store", "config"))
