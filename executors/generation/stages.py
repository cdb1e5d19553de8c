"""onnxruntime-genai's decoder-pipeline stages over a causal LM's prompt and token graphs of
fixed shapes (a target that compiles), in the layout genai 0.18 runs with its default cache of
a fixed length (Olive's StaticLLM layout; measured in benchmarks/genai_pipeline_probe.py).

genai keeps one buffer per layer's keys and values, `[1, kv heads, slots, head width]`, passes
it through every stage and takes the stage's output of the same name pattern as the next past.
It feeds each stage `input_ids` (the prompt in windows of the prompt graph's length, left
aligned, the last one padded after its tokens; then one token), int32 `past_seq_len` [1, 1]
(the position of the input's last slot: (k + 1) x window - 1 for the k-th window, then each
token's own; genai feeds it only when the stage also takes `total_seq_len` [1]) and the
buffers; it feeds no mask and no positions. modelplan's graphs take both, and give back only
the new entries. A stage is the graph with:
* positions `start + (0 .. width-1)`, `start = past_seq_len - (width-1)` (held at the last
  slot's position past it: a last window's padding);
* a mask: the slots before `start` (the earlier windows' and tokens'), then the input's own
  tokens (the graph's causal mask orders them);
* each layer's buffer given back with the new entries written at their positions through a
  one-hot of the slots (`Equal`, `Cast`, `past x (1 - taken) + hot @ new`: ops the HTP runs,
  no scatter, no dynamic shape; a padding position past the last slot writes nothing).

The prompt and token graphs both read the buffers, so a prompt of any length up to the slots
reads as genai feeds it: window after window, each seeing the ones before."""

from __future__ import annotations

from typing import Any

from planner.models.roles import CACHE

IDS, MASK, POSITIONS = "input_ids", "attention_mask", "position_ids"
EMBEDS = "inputs_embeds"  # the token input where the host looks the ids up (export.on_host)
PAST_SEQ_LEN, TOTAL_SEQ_LEN = "past_seq_len", "total_seq_len"
STAGES = ("prompt", "token")  # genai runs the first on the prompt, the second on each token
FILES = {name: f"{name}_stage.onnx" for name in STAGES}
NEW = "stage_new"  # the graph's own new entries, renamed so the buffers take its output names


def stage(model: Any, slots: int) -> Any:
    """The prompt graph or the token graph as a stage over `slots` slots per buffer (module
    docstring), changed in place and returned."""
    from onnx import TensorProto, helper

    g = model.graph
    new = {o.name: f"{NEW}{o.name[len(CACHE.present):]}" for o in g.output
           if o.name.startswith(CACHE.present + ".")}
    entry = next(o for o in g.output if o.name in new)
    elem = entry.type.tensor_type.elem_type
    kv, hd = (d.dim_value for d in entry.type.tensor_type.shape.dim[1:4:2])
    width = next(i for i in g.input if i.name in (IDS, EMBEDS)).type.tensor_type.shape.dim[1] \
        .dim_value
    for n in g.node:  # the graph's own nodes may read its outputs too
        n.input[:] = [new.get(x, x) for x in n.input]
        n.output[:] = [new.get(x, x) for x in n.output]
    for v in g.value_info:  # a shape recorded under an output's name is the new entries'
        v.name = new.get(v.name, v.name)
    kept_outputs = [o for o in g.output if o.name not in new]
    del g.output[:]
    g.output.extend(kept_outputs)
    kept_inputs = [i for i in g.input if i.name not in (MASK, POSITIONS)]
    del g.input[:]
    g.input.extend(kept_inputs)
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    nodes = _positions(width, slots, dtype)
    buffer = [1, kv, slots, hd]
    for present, written in new.items():
        past = CACHE.past + present[len(CACHE.present):]
        nodes += [helper.make_node("Mul", [past, "stage.kept"], [f"{written}.old"]),
                  helper.make_node("MatMul", ["stage.hot", written], [f"{written}.put"]),
                  helper.make_node("Add", [f"{written}.old", f"{written}.put"], [present])]
        g.output.append(helper.make_tensor_value_info(present, elem, buffer))
    g.input.append(helper.make_tensor_value_info(PAST_SEQ_LEN, TensorProto.INT32, [1, 1]))
    g.input.append(helper.make_tensor_value_info(TOTAL_SEQ_LEN, TensorProto.INT32, [1]))
    for n in reversed(nodes):
        g.node.insert(0, n)
    return model


def _positions(width: int, slots: int, dtype: Any) -> list[Any]:
    """The nodes that make the graph's positions and mask from `past_seq_len`, and the one-hot
    `stage.hot` [slots, width] of where each new entry goes with `stage.kept` [slots, 1]."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    def const(name: str, value: Any) -> Any:
        return helper.make_node("Constant", [], [name],
                                value=numpy_helper.from_array(np.asarray(value), name))

    return [
        const("stage.offsets", np.arange(width, dtype=np.int64)[None]),
        const("stage.back", np.array(width - 1, np.int64)),
        const("stage.last", np.array(slots - 1, np.int64)),
        const("stage.slots", np.arange(slots, dtype=np.int64)),
        const("stage.one", np.ones((1, 1), dtype)),
        const("stage.ax1", np.array([1], np.int64)),
        const("stage.own", np.ones((1, width), np.int64)),
        helper.make_node("Cast", [PAST_SEQ_LEN], ["stage.psl"], to=TensorProto.INT64),
        helper.make_node("Sub", ["stage.psl", "stage.back"], ["stage.start"]),
        helper.make_node("Add", ["stage.start", "stage.offsets"], ["stage.at"]),
        helper.make_node("Min", ["stage.at", "stage.last"], [POSITIONS]),
        helper.make_node("Unsqueeze", ["stage.slots", "stage.ax1"], ["stage.col"]),
        helper.make_node("Equal", ["stage.col", "stage.at"], ["stage.eq"]),
        helper.make_node("Cast", ["stage.eq"], ["stage.hot"],
                         to=helper.np_dtype_to_tensor_dtype(np.dtype(dtype))),
        helper.make_node("ReduceSum", ["stage.hot", "stage.ax1"], ["stage.taken"], keepdims=1),
        helper.make_node("Sub", ["stage.one", "stage.taken"], ["stage.kept"]),
        helper.make_node("Less", ["stage.slots", "stage.start"], ["stage.before"]),
        helper.make_node("Cast", ["stage.before"], ["stage.mask_slots"], to=TensorProto.INT64),
        helper.make_node("Concat", ["stage.mask_slots", "stage.own"], [MASK], axis=1),
    ]


def slots_of(model: Any) -> int:
    """The slots of a token graph's cache buffers (its first past input's third axis)."""
    past = next(i for i in model.graph.input if CACHE.is_past(i.name))
    return past.type.tensor_type.shape.dim[2].dim_value
