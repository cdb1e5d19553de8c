"""A Gather's output takes its data's encoding in a QDQ graph for HTP: ONNX Runtime's QNN QDQ
configuration calibrates the output of a Gather over an activation on its own range; once
rewritten, the output's Q and DQ read the data's scale and zero point, and the graph's output
is the selected values exactly as the data's encoding gives them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from executors.onnx.htp_encodings import gathers_share_encodings

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


def quantized(tmp: Path) -> Path:
    """gather_model as quant=w8a16_pc quantizes it for HTP (QNN's QDQ configuration)."""
    from onnxruntime.quantization import QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    class Reader:
        def __init__(self) -> None:
            self.left = [sample(k) for k in range(4)]

        def get_next(self) -> dict | None:
            return self.left.pop() if self.left else None

    src, out = tmp / "fp32.onnx", tmp / "qdq.onnx"
    onnx.save(gather_model(), str(src))
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
