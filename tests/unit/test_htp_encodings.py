"""Encodings made equal in a QDQ graph for HTP. A Gather's output takes its data's encoding:
ONNX Runtime's QNN QDQ configuration calibrates the output of a Gather over an activation on its
own range; once rewritten, the output's Q and DQ read the data's scale and zero point, and the
graph's output is the selected values exactly as the data's encoding gives them. A Concat's
inputs and output take one encoding covering all their ranges (an interleaved rotary
embedding's `-x_odd` and `x_even`, whose zero points differ)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from executors.onnx.htp_encodings import concats_share_encodings, gathers_share_encodings

SHAPE = [1, 2, 8, 4]


def gather_model() -> onnx.ModelProto:
    """y = Gather(x, 0, axis=1) + 1 and z = x * 2: the first of two columns of a state (which
    the graph also reads whole, as a convolution state's update does)."""
    graph = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["g"], name="/state/Gather", axis=1),
         helper.make_node("Add", ["g", "one"], ["y"], name="/state/Add"),
         helper.make_node("Mul", ["x", "two"], ["z"], name="/state/Mul")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, SHAPE)],
        initializer=[numpy_helper.from_array(np.array(0, np.int64), "i"),
                     numpy_helper.from_array(np.array(1, np.float32), "one"),
                     numpy_helper.from_array(np.array(2, np.float32), "two")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def sample(seed: int) -> dict[str, np.ndarray]:
    """A state near zero, as an untrained model's convolution state is (Zamba's: within 1e-4):
    the quantizer floors both ranges' scale to one value, and the zero points differ (the
    first column is positive, the second negative), which HTP declines."""
    x = np.abs(np.random.default_rng(seed).standard_normal(SHAPE)).astype(np.float32) * 1e-6
    x[:, 1] *= -2
    return {"x": x}


def quantized(tmp: Path, model: onnx.ModelProto | None = None,
              samples: list[dict[str, np.ndarray]] | None = None) -> Path:
    """`model` (gather_model) as quant=w8a16_pc quantizes it for HTP (QNN's QDQ configuration),
    calibrated on `samples` (four of `sample`)."""
    from onnxruntime.quantization import QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    class Reader:
        def __init__(self) -> None:
            self.left = list(samples or [sample(k) for k in range(4)])

        def get_next(self) -> dict | None:
            return self.left.pop() if self.left else None

    src, out = tmp / "fp32.onnx", tmp / "qdq.onnx"
    onnx.save(model or gather_model(), str(src))
    quantize(str(src), str(out), get_qnn_qdq_config(
        str(src), Reader(), activation_type=QuantType.QUInt16, weight_type=QuantType.QUInt8,
        per_channel=True))
    return out


def encodings(model: onnx.ModelProto) -> tuple[list[str], list[str]]:
    """(the Gather's data DQ's scale and zero point, its output Q's)."""
    nodes = {n.name: n for n in model.graph.node}
    producer = {o: n for n in model.graph.node for o in n.output}
    gather = nodes["/state/Gather"]
    q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear"
             and n.input[0] == gather.output[0])
    return list(producer[gather.input[0]].input[1:3]), list(q.input[1:3])


def test_the_gathers_output_takes_its_datas_encoding(tmp_path: Path) -> None:
    import onnxruntime as ort

    model = onnx.load(str(quantized(tmp_path)))
    data, output = encodings(model)
    assert data != output  # the quantizer's own: calibrated on the selected column
    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    assert consts[data[0]] == consts[output[0]] and consts[data[1]] != consts[output[1]]
    assert gathers_share_encodings(model) == 1
    data, output = encodings(model)
    assert data == output
    assert gathers_share_encodings(model) == 0  # idempotent
    onnx.checker.check_model(model)
    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    scale, zero = float(consts[data[0]]), int(consts[data[1]])
    x = sample(9)["x"]
    codes = np.clip(np.round(x / scale) + zero, 0, 65535)
    selected = ((codes - zero) * scale)[:, 0]  # the data as its encoding gives it
    q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear"
             and n.input[0] == "g")
    dq = next(n for n in model.graph.node if q.output[0] in n.input)
    model.graph.output.append(onnx.ValueInfoProto(name=dq.output[0]))  # the Gather's, as read
    got = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run([dq.output[0]], {"x": x})[0]
    np.testing.assert_array_equal(got, selected.astype(np.float32))


ROTARY = [1, 2, 1, 32]  # a key's rotated part: batch, heads, token, head width


def interleaved_rotation() -> onnx.ModelProto:
    """GLM-4V's interleaved rotate-half, as TorchScript writes it: y[2i] = -x[2i+1] and
    y[2i+1] = x[2i] (strided Slices, a Neg, each Unsqueezed on a new last axis, a Concat on
    it, a Reshape back)."""
    def ints(values: list[int], name: str) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(values, np.int64), name)

    graph = helper.make_graph(
        [helper.make_node("Slice", ["x", "zero", "end", "last", "two"], ["even"], name="/Even"),
         helper.make_node("Slice", ["x", "one", "end", "last", "two"], ["odd"], name="/Odd"),
         helper.make_node("Neg", ["odd"], ["neg"], name="/Neg"),
         helper.make_node("Unsqueeze", ["neg", "last"], ["a"], name="/UnsqueezeNeg"),
         helper.make_node("Unsqueeze", ["even", "last"], ["b"], name="/UnsqueezeEven"),
         helper.make_node("Concat", ["a", "b"], ["pairs"], name="/Concat", axis=-1),
         helper.make_node("Reshape", ["pairs", "shape"], ["y"], name="/Reshape")], "rotate",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ROTARY)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ROTARY)],
        initializer=[ints([0], "zero"), ints([1], "one"), ints([2**62], "end"),
                     ints([-1], "last"), ints([2], "two"), ints(ROTARY, "shape")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def keys(seed: int, low: float = -0.83, high: float = 0.57) -> dict[str, np.ndarray]:
    """Keys of a range skewed to one side, as GLM-4V's second layer's are: `-x_odd`'s zero
    point then differs from `x_even`'s by about 12000 codes."""
    rng = np.random.default_rng(seed)
    return {"x": rng.uniform(low, high, ROTARY).astype(np.float32)}


def run_float(model: onnx.ModelProto, x: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, x)[0]


def concat_group(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """The (scale, zero point) names of the Concat's input Qs and output Q."""
    producer = {o: n for n in model.graph.node for o in n.output}
    concat = next(n for n in model.graph.node if n.op_type == "Concat")
    qs = [producer[producer[i].input[0]] for i in concat.input]
    qs += [n for n in model.graph.node if n.op_type == "QuantizeLinear"
           and n.input[0] == concat.output[0]]
    return [(q.input[1], q.input[2]) for q in qs]


def test_a_concats_inputs_and_output_take_one_encoding_covering_their_ranges(
        tmp_path: Path) -> None:
    import onnxruntime as ort

    model = onnx.load(str(quantized(tmp_path, interleaved_rotation(),
                                    [keys(k) for k in range(4)])))
    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    before = [(float(consts[s]), int(consts[z])) for s, z in concat_group(model)]
    assert len(set(before)) > 1 and abs(before[0][1] - before[1][1]) > 10000  # the quantizer's
    x = keys(9, -0.38, 0.38)
    want = run_float(interleaved_rotation(), x)
    assert concats_share_encodings(model) == 1
    assert concats_share_encodings(model) == 0  # idempotent
    onnx.checker.check_model(model)
    group = concat_group(model)
    assert len(set(group)) == 1
    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    scale, zero = float(consts[group[0][0]]), int(consts[group[0][1]])
    for s, z in before:  # the one range covers each of the group's ranges (to half a code)
        assert -zero * scale <= -z * s + scale / 2
        assert (65535 - zero) * scale >= (65535 - z) * s - scale / 2
    got = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, x)[0]
    np.testing.assert_allclose(got, want, atol=2 * scale)


def test_a_concat_of_a_constants_codes_is_left_as_it_is(tmp_path: Path) -> None:
    """A quantized constant's codes would have to be quantized again: not done."""
    graph = helper.make_graph(
        [helper.make_node("Concat", ["x", "c"], ["y"], name="/Concat", axis=-1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        initializer=[numpy_helper.from_array(np.full((1, 4), 5.0, np.float32), "c")])
    model = onnx.load(str(quantized(tmp_path, helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 21)]),
        [{"x": np.random.default_rng(k).standard_normal((1, 4)).astype(np.float32)}
         for k in range(4)])))
    before = model.SerializeToString()
    assert concats_share_encodings(model) == 0
    assert model.SerializeToString() == before


def chained_model() -> onnx.ModelProto:
    """Three Concats in a chain, a Gather between the first two, a Reshape after the last (the
    quantizer shares one encoding across a Reshape)."""
    def node(op: str, ins: list[str], out: str, **attrs: Any) -> onnx.NodeProto:
        return helper.make_node(op, ins, [out], name=f"/{out}", **attrs)

    graph = helper.make_graph(
        [node("Neg", ["x"], "nx"), node("Add", ["x", "shift"], "sx"),
         node("Concat", ["nx", "sx"], "c1", axis=1),
         node("Gather", ["c1", "rows"], "g", axis=1),
         node("Mul", ["g", "three"], "mg"),
         node("Concat", ["g", "mg"], "c2", axis=1),
         node("Concat", ["c2", "sx"], "c3", axis=1),
         node("Reshape", ["c3", "flat"], "y")], "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 96])],
        initializer=[numpy_helper.from_array(np.array(0.5, np.float32), "shift"),
                     numpy_helper.from_array(np.array(3, np.float32), "three"),
                     numpy_helper.from_array(np.array([0, 1, 2, 3], np.int64), "rows"),
                     numpy_helper.from_array(np.array([1, 96], np.int64), "flat")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def test_concats_linked_through_shared_encodings_take_one_and_keep_the_gathers(
        tmp_path: Path) -> None:
    """One pass gives the chain one encoding; the Gather's output keeps its data's, and the
    Reshape's input and output keep sharing theirs."""
    model = onnx.load(str(quantized(tmp_path, chained_model(), [
        {"x": np.random.default_rng(k).standard_normal((1, 4, 8)).astype(np.float32)}
        for k in range(4)])))
    x = {"x": np.random.default_rng(9).standard_normal((1, 4, 8)).astype(np.float32)}
    want = run_float(chained_model(), x)
    gathers_share_encodings(model)
    assert concats_share_encodings(model) == 3
    assert concats_share_encodings(model) == 0 and gathers_share_encodings(model) == 0
    onnx.checker.check_model(model)
    pairs = {(n.input[1], n.input[2]) for n in model.graph.node
             if n.op_type in ("QuantizeLinear", "DequantizeLinear")
             and any(t in n.input[0] or t in n.output[0] for t in ("c1", "c2", "c3", "g", "y"))}
    assert len(pairs) == 1, pairs  # the Concats, the Gather's data and output, the Reshape's
    np.testing.assert_allclose(run_float(model, x), want, atol=0.01)
