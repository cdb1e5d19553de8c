"""Profiled names mapped back to hierarchy tags, and per-node times summed up the module tree:
fused and renamed ONNX Runtime nodes, QNN op names with suffixes of their own, ORT profiler
events split per run, the QNN profiling CSV."""

from __future__ import annotations

from pathlib import Path

import pytest
from onnx import TensorProto, helper

from executors.onnx.artifacts import TAG_KEY
from executors.runtime import breakdown as B
from executors.runtime import profiling as P

TAGS = {"emb": "/M/Emb", "q": "/M/Layer.0/Attn", "k": "/M/Layer.0/Attn", "out": "/M/Layer.0",
        "/model/layer.0/ffn/MatMul": "/M/Layer.0/Ffn"}


def graph(nodes: list[tuple[str, str, list[str], list[str]]], tags: dict[str, str]):
    made = []
    for name, op, ins, outs in nodes:
        n = helper.make_node(op, ins, outs, name=name)
        if name in tags:
            n.metadata_props.add(key=TAG_KEY, value=tags[name])
        made.append(n)
    return helper.make_graph(made, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64,
                                                                        [1])], [], [])


def test_rows_sum_up_the_tree_with_shares_of_the_total() -> None:
    mapped = {"emb": ("/M/Emb", "name"), "q": ("/M/Layer.0/Attn", "name"),
              "k": ("/M/Layer.0/Attn", "output"), "out": ("/M/Layer.0", "prefix")}
    per_node = {"emb": 1.0, "q": 2.0, "k": 3.0, "out": 4.0, "lost": 10.0}
    rows = B.module_rows(per_node, mapped, TAGS, total=20.0)
    by = {r["tag"]: r for r in rows}
    assert [r["tag"] for r in rows] == ["/M", "/M/Emb", "/M/Layer.0", "/M/Layer.0/Attn",
                                        "/M/Layer.0/Ffn"]
    assert by["/M"]["ms"] == 10.0 and by["/M"]["self_ms"] == 0.0 and by["/M"]["percent"] == 50.0
    assert by["/M/Layer.0"]["ms"] == 9.0 and by["/M/Layer.0"]["self_ms"] == 4.0
    assert by["/M/Layer.0/Attn"]["nodes"] == 2 and by["/M"]["nodes"] == 5
    assert by["/M/Layer.0/Ffn"]["ms"] == 0.0  # a module with nodes but no measured time
    assert [r["depth"] for r in rows] == [1, 2, 2, 3, 3]
    cover = B.coverage(per_node, mapped, total=20.0)
    assert cover["attributed_ms"] == 10.0 and cover["unattributed_ms"] == 10.0
    assert cover["coverage_percent"] == 50.0
    assert cover["mapped_by_percent"] == {"name": 15.0, "output": 15.0, "prefix": 20.0,
                                          "unattributed": 50.0}


def test_fused_and_renamed_nodes_map_through_outputs_prefixes_and_neighbours() -> None:
    source = graph([("emb", "Gather", ["W", "ids"], ["e"]), ("q", "MatMul", ["e", "Wq"], ["qo"]),
                    ("k", "Add", ["qo", "b"], ["ko"]), ("out", "Relu", ["ko"], ["y"])], TAGS)
    optimized = graph([("emb", "Gather", ["W", "ids"], ["e"]),
                       ("reshape_token_3", "Reshape", ["e", "s"], ["e2"]),   # neighbours
                       ("q/MatMulAddFusion", "Gemm", ["e2", "Wq", "b"], ["g"]),  # prefix
                       ("fused_token_9", "Reshape", ["g", "s"], ["ko"]),      # output
                       ("out", "Relu", ["ko"], ["y"])], {})
    mapped = B.map_graph(optimized, source, B.graph_tags(source))
    assert mapped["emb"] == ("/M/Emb", "name")
    assert mapped["q/MatMulAddFusion"] == ("/M/Layer.0/Attn", "prefix")
    assert mapped["fused_token_9"] == ("/M/Layer.0/Attn", "output")
    assert mapped["reshape_token_3"] == ("/M", "neighbours")  # between /M/Emb and /M/Layer.0
    assert mapped["out"] == ("/M/Layer.0", "name")


def test_qnn_op_names_map_by_name_prefix_input_and_order() -> None:
    tags = {"/model/layer.0/ffn/MatMul": "/M/Layer.0/Ffn",
            "/model/layer.0/ffn/MatMul_output_0_QuantizeLinear": "/M/Layer.0/Ffn",
            "/model/Where/legalized_Cast": "/M", "Gelu_0": "/M/Layer.0/Ffn/Act"}
    events = ["Input OpId_2", "input_idsCast:OpId_16", "OpId_17",
              "/model/Where/legalized_Cast_ort_qnn_ep_convert:OpId_78",
              "/model/layer.0/ffn/MatMul:OpId_40",
              "/model/layer.0/ffn/MatMul_output_0_QuantizeLinear_OutputReshape:OpId_43",
              "Transpose_token_28:OpId_47", "Gelu_0:OpId_128", "Output OpId_3"]
    mapped = P._map_ops(events, tags, {"input_ids": "/M/Emb"})
    assert mapped["Input OpId_2"] == ("/M", "graph-io")
    assert mapped["input_idsCast:OpId_16"] == ("/M/Emb", "input")
    assert mapped["OpId_17"] == ("/M", "neighbours")
    assert mapped["/model/Where/legalized_Cast_ort_qnn_ep_convert:OpId_78"] == ("/M", "prefix")
    assert mapped["/model/layer.0/ffn/MatMul:OpId_40"] == ("/M/Layer.0/Ffn", "name")
    assert mapped["/model/layer.0/ffn/MatMul_output_0_QuantizeLinear_OutputReshape:OpId_43"] \
        == ("/M/Layer.0/Ffn", "prefix")
    assert mapped["Transpose_token_28:OpId_47"] == ("/M/Layer.0/Ffn", "neighbours")
    assert mapped["Gelu_0:OpId_128"] == ("/M/Layer.0/Ffn/Act", "name")


CSV = """Msg Timestamp,Message,Time,Unit of Measurement,Timing Source,Event Level,Event Identifier
0,BACKEND,685,US,BACKEND,ROOT,Accelerator (load binary) time
0,BACKEND,300,CYCLES,BACKEND,ROOT,Accelerator (execute) time (cycles)
0,NODE,100,CYCLES,BACKEND,SUB-EVENT,/model/a/MatMul:OpId_40 (cycles)
0,NODE,200,CYCLES,BACKEND,SUB-EVENT,Output OpId_3 (cycles)
0,BACKEND,30,US,BACKEND,ROOT,Accelerator (execute) time
0,EXECUTE,31,US,BACKEND,ROOT,QNN (execute) time
0,BACKEND,500,CYCLES,BACKEND,ROOT,Accelerator (execute) time (cycles)
0,NODE,400,CYCLES,BACKEND,SUB-EVENT,/model/a/MatMul:OpId_40 (cycles)
0,NODE,100,CYCLES,BACKEND,SUB-EVENT,Output OpId_3 (cycles)
0,BACKEND,50,US,BACKEND,ROOT,Accelerator (execute) time
"""


def test_qnn_profile_csv_is_read_per_execution(tmp_path: Path) -> None:
    path = tmp_path / "qnn.csv"
    path.write_text(CSV)
    runs = P.qnn_runs(path)
    assert [(r["cycles"], r["us"]) for r in runs] == [(300.0, 30.0), (500.0, 50.0)]
    assert runs[1]["ops"] == [("/model/a/MatMul:OpId_40", 400.0), ("Output OpId_3", 100.0)]
    assert P.op_name("/model/a/MatMul:OpId_40") == "/model/a/MatMul"
    assert P.op_name("OpId_17") == "OpId_17"


def test_basic_profiling_without_per_op_events_says_so(tmp_path: Path) -> None:
    path = tmp_path / "qnn.csv"
    path.write_text("\n".join(line for line in CSV.splitlines() if "SUB-EVENT" not in line))
    got = P._qnn(path, tmp_path / "unused.onnx", warmup=0)
    assert got["modules"] == [] and got["profile"]["per_op"] is False
    assert "no per-op events" in got["profile"]["note"]


def event(name: str, ts: int, dur: int, cat: str = "Node") -> dict:
    return {"cat": cat, "name": name, "ts": ts, "dur": dur,
            "args": {"provider": "CPUExecutionProvider"} if cat == "Node" else {}}


def test_kernel_times_are_averaged_over_the_runs_after_warm_up() -> None:
    events = [event("model_run", 0, 100, "Session"), event("a_kernel_time", 10, 90),
              event("model_run", 200, 10, "Session"), event("a_kernel_time", 201, 4),
              event("b_kernel_time", 205, 4), event("b_fence_before", 205, 1),
              event("model_run", 300, 20, "Session"), event("a_kernel_time", 301, 6),
              event("b_kernel_time", 308, 10)]
    per_node, total, runs = P.kernel_ms(events, skip=1)
    assert runs == 2 and total == pytest.approx(0.015)
    assert per_node == pytest.approx({"a": 0.005, "b": 0.007})
    assert P.nodes_by_ep(events, "CPUExecutionProvider") == {"nodes_total": 2, "nodes_on_ep": 2,
                                            "nodes_by_ep": {"CPUExecutionProvider": 2}}


def test_rows_move_to_the_record_and_shared_metrics_stay_whole() -> None:
    from executors.run.records import lift_modules, step_record

    shared = {"latency_ms_median": 1.0, "modules": [{"tag": "/M", "depth": 1, "nodes": 2,
                                                     "ms": 1.0}]}
    plan_step = {"id": "perf", "op": "perf", "action": "run"}
    jobs = [[step_record(plan_step, "0" * 64, metrics=shared)] for _ in range(2)]
    for steps in jobs:  # two sweep jobs that share one perf step
        assert lift_modules(steps) == [{"step": "perf", "tag": "/M", "depth": 1, "nodes": 2,
                                        "ms": 1.0}]
        assert steps[0]["metrics"] == {"latency_ms_median": 1.0}
    assert "modules" in shared
