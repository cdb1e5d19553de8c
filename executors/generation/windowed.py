"""onnxruntime-genai's windowed key/value cache over a bundle of fixed shapes: one graph,
`genai_model.onnx`, that genai 0.18's plain decoder runs with `sliding_window` set.

genai keeps that cache itself, in uint8, per layer a past key `[heads, 1, head width,
context - window]` and value `[heads, 1, context - window, head width]` (filled with
`pad_value` at first); the graph gives back the window's new entries only (`[heads, 1, head
width, window]`, `[heads, 1, window, head width]`), which genai appends after sliding the past
left. The prompt comes in one window of the prefill length (left-padded with the pad token,
whose positions are 0 and mask 0), then one token at a time over a past of context - 1: the
mask is `[1, context]`, the past's slots then the window. That is the bundle's own pair of
graphs: the prefill graph reads a window after `context_length` slots, genai's past of
context - window and window - 1 empty slots after it (masked), and the decode graph, whose
`context_length` slots and token are genai's context - 1 and 1, reads each token. So the graph
is an `If` on the window's length over the two graphs as they were built
(their nodes and weights, which stay in `weights/`), the past dequantized and transposed
before them and the new entries transposed and quantized after them. Every layer's entries
share the zero point 128 (genai fills the empty past with one `pad_value`); each layer's keys
and values have their own scale, from the range PyTorch's own cache reaches on the
calibration prompts (`cache_ranges`), with a margin."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from planner.models.generation import GENAI_WINDOWED_GRAPH
from planner.models.roles import CACHE, prompt_and_token

GRAPH = GENAI_WINDOWED_GRAPH
ZERO_POINT = 128      # genai's one pad_value: the empty past dequantizes to 0
LEVELS = 127          # uint8 steps on either side of the zero point (the low side has 128)
MARGIN = 1.25         # the scale covers this much more than the calibration prompts reached
WINDOW, PAST = "window", "past"  # the graph's free axes: the window's tokens, the past's slots
# genai's layout of a layer's past and present against modelplan's [1, heads, slots, width]
PERM = {CACHE.parts[0]: (1, 0, 3, 2), CACHE.parts[1]: (1, 0, 2, 3)}


def fits(bundle: dict[str, Any], folder: Path) -> str | None:
    """Why the bundle's graphs cannot be wrapped as genai's windowed graph (None: they can):
    they are its prompt and token graphs as ONNX files of plain nodes (not split in parts, not
    around host layers, not an EPContext binary's: ONNX Runtime 1.32 gives no EP an EPContext
    node inside an If's branch), and genai's context (the slots and the token) holds two
    windows."""
    import onnx

    from planner.core.targets import of_params

    if of_params(bundle["runs_on"]).compiles:  # read no graph: each is a context binary's
        return "its graphs are compiled context binaries' (EPContext nodes)"
    if bundle.get("host"):
        return "the embeddings or head run on the host (export.on_host)"
    graphs = bundle["graphs"]
    if any(g.get("parts") for g in graphs.values()):
        return "its graphs are split in parts (export.parts)"
    if bundle["context_length"] + 1 < 2 * bundle["prefill_length"]:
        return (f"genai's context ({bundle['context_length']} slots and the token) holds less "
                f"than two windows of the prefill length ({bundle['prefill_length']})")
    for entry in graphs.values():
        graph = onnx.load(str(folder / entry["model"]), load_external_data=False).graph
        if any(n.op_type == "EPContext" for n in graph.node):
            return f"{entry['model']} is a compiled context binary's graph"
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
               for n in graph.node for a in n.attribute):
            return f"{entry['model']} has nodes with subgraphs"
    return None


def cache_ranges(model: Any, prompts: list[list[int]], new_tokens: int) -> dict[str, float]:
    """The largest magnitude each past input's entries reach (`past_key_values.{i}.key`, ...)
    in PyTorch's own cache after each prompt and `new_tokens` greedy tokens."""
    from executors.generation.cache import layer_entries
    from executors.generation.decoder_only import TorchLM

    ranges: dict[str, float] = {}
    for ids in prompts:
        torch_lm = TorchLM(model)
        torch_lm.greedy(ids, new_tokens)
        for layer, part, value in layer_entries(torch_lm.cache.layers):
            name = f"{CACHE.past}.{layer}.{part}"
            ranges[name] = max(ranges.get(name, 0.0), float(value.abs().max()))
    return ranges


def scales(ranges: dict[str, float]) -> dict[str, float]:
    """Each past input's uint8 scale: its range with the margin over the zero point's steps."""
    return {name: max(top, 1e-6) * MARGIN / LEVELS for name, top in sorted(ranges.items())}


def quantize(x: np.ndarray, scale: float) -> np.ndarray:
    """What QuantizeLinear gives for uint8 at the zero point (round half to even, saturated)."""
    return np.clip(np.rint(x / scale) + ZERO_POINT, 0, 255).astype(np.uint8)


def dequantize(q: np.ndarray, scale: float) -> np.ndarray:
    return (q.astype(np.float32) - ZERO_POINT) * np.float32(scale)


def to_genai(name: str, x: np.ndarray) -> np.ndarray:
    """A cache tensor [1, heads, slots, width] in genai's layout of its part."""
    return x.transpose(PERM[name.rsplit(".", 1)[1]])


def write(folder: Path, bundle: dict[str, Any], cache_scales: dict[str, float]) -> dict[str, Any]:
    """Write `genai_model.onnx` over the bundle's graphs in `folder`; what bundle.json says of
    it: the file, the window, genai's context, the cache's dtype, zero point and scales."""
    import onnx
    from onnx import helper

    graphs = bundle["graphs"]
    prompt, token = prompt_and_token(graphs)
    models = {g: onnx.load(str(folder / graphs[g]["model"]), load_external_data=False)
              for g in (prompt, token)}
    window, context = bundle["prefill_length"], bundle["context_length"] + 1
    decode = models[token].graph
    pasts = [v for v in decode.input if CACHE.is_past(v.name)]
    missing = sorted({v.name for v in pasts} - set(cache_scales))
    if missing:
        raise ValueError(f"no cache scale for {', '.join(missing)}")
    dtype = pasts[0].type.tensor_type.elem_type  # the graphs' cache type (float or float16)
    outer_in = [_like(decode, "input_ids", [1, WINDOW]), _like(decode, "position_ids",
                                                                [1, WINDOW]),
                _like(decode, "attention_mask", [1, context])]
    inputs, outer_out, before, after, inits = _cache(pasts, cache_scales, dtype)
    outer_in += inputs
    outputs = ["logits", *(f"genai.{CACHE.present_of(v.name)}" for v in pasts)]
    branches = {g: _branch(models[g].graph, g, outputs, window if g == prompt else None)
                for g in (prompt, token)}
    nodes = [*before, helper.make_node("Shape", ["input_ids"], ["genai.shape"]),
             helper.make_node("Gather", ["genai.shape", "genai.one"], ["genai.width"], axis=0),
             helper.make_node("Equal", ["genai.width", "genai.one"], ["genai.is_token"]),
             helper.make_node("If", ["genai.is_token"], outputs, then_branch=branches[token],
                              else_branch=branches[prompt]), *after]
    logits = next(v for v in decode.output if v.name == "logits")
    outer_out.insert(0, helper.make_tensor_value_info(
        "logits", logits.type.tensor_type.elem_type, [1, WINDOW, _dims(logits)[-1]]))
    graph = helper.make_graph(nodes, "genai_windowed", outer_in, outer_out, inits)
    model = helper.make_model(graph, opset_imports=_opsets(models.values()),
                              producer_name="modelplan")
    model.ir_version = max(m.ir_version for m in models.values())
    for made in models.values():
        model.functions.extend(f for f in made.functions
                               if f.name not in {g.name for g in model.functions})
    onnx.save(model, str(folder / GRAPH))
    return {"model": GRAPH, "window": window, "context_length": context,
            "reads": [prompt, token],
            "cache": {"dtype": "uint8", "zero_point": ZERO_POINT,
                      "scales": {n: cache_scales[n] for n in sorted(cache_scales)}}}


def _cache(pasts: list[Any], cache_scales: dict[str, float], dtype: int) -> tuple[list[Any], ...]:
    """The outer graph's cache: genai's uint8 past inputs and present outputs, the nodes that
    dequantize and transpose the past before the If and quantize and transpose the new entries
    after it, and their scales and zero point."""
    from onnx import TensorProto, helper

    outer_in: list[Any] = []
    before, after, outer_out = [], [], []  # the past dequantized; the new entries quantized
    inits = [helper.make_tensor("genai.zero_point", TensorProto.UINT8, [], [ZERO_POINT]),
             helper.make_tensor("genai.one", TensorProto.INT64, [], [1])]
    for value in pasts:
        perm = PERM[value.name.rsplit(".", 1)[1]]  # its own inverse
        shape = _dims(value)
        genai_shape = [shape[p] for p in perm]
        genai_shape[perm.index(2)] = PAST  # the slots' axis
        outer_in.append(helper.make_tensor_value_info(value.name, TensorProto.UINT8, genai_shape))
        present = CACHE.present_of(value.name)
        genai_shape[genai_shape.index(PAST)] = WINDOW
        outer_out.append(helper.make_tensor_value_info(present, TensorProto.UINT8, genai_shape))
        scale = f"genai.scale.{value.name}"
        inits.append(helper.make_tensor(scale, dtype, [], [cache_scales[value.name]]))
        # transposed in uint8: ONNX Runtime's QDQ propagation, which would move a
        # DequantizeLinear over the Transpose after it, fails on the If reading it (1.32)
        before += [helper.make_node("Transpose", [value.name], [f"genai.{value.name}.t"],
                                    perm=perm),
                   helper.make_node("DequantizeLinear", [f"genai.{value.name}.t", scale,
                                                         "genai.zero_point"],
                                    [f"genai.{value.name}"])]
        after += [helper.make_node("QuantizeLinear", [f"genai.{present}", scale,
                                                      "genai.zero_point"], [f"genai.{present}.q"]),
                  helper.make_node("Transpose", [f"genai.{present}.q"], [present], perm=perm)]
    return outer_in, outer_out, before, after, inits


def _branch(graph: Any, prefix: str, outputs: list[str], window: int | None) -> Any:
    """One built graph as a branch of the If: its values renamed under `prefix` but for the
    inputs it reads from the outer graph (the ids, positions and mask, the dequantized past);
    the prompt graph (`window`: its length) reads genai's past with window - 1 empty slots
    after it and the mask with as many zeros before the window's columns; the branch gives
    back the logits and the new entries in `outputs`' order."""
    import onnx
    from onnx import helper

    names = {v.name: v.name for v in graph.input}
    names.update({v.name: f"genai.{v.name}" for v in graph.input if CACHE.is_past(v.name)})
    head, extra = [], []
    if window is not None:
        head, extra = _widened(graph, prefix, window, names)

    def renamed(name: str) -> str:
        return name if not name else names.setdefault(name, f"{prefix}/{name}")

    body = onnx.GraphProto()
    body.CopyFrom(graph)
    for k, node in enumerate(body.node):
        node.name = f"{prefix}/{node.name}" if node.name else f"{prefix}/#{k}"
        node.input[:] = [renamed(n) for n in node.input]
        node.output[:] = [renamed(n) for n in node.output]
    for tensor in body.initializer:
        tensor.name = renamed(tensor.name)
    for info in body.value_info:
        info.name = renamed(info.name)
    given = {v.name: v for v in graph.output}
    out_names = ["logits", *(o[len("genai."):] for o in outputs[1:])]
    branch_out = [helper.make_tensor_value_info(renamed(n), given[n].type.tensor_type.elem_type,
                                                None) for n in out_names]
    return helper.make_graph([*head, *body.node], prefix, [], branch_out,
                             [*body.initializer, *extra], value_info=body.value_info)


def _widened(graph: Any, prefix: str, window: int, names: dict[str, str]
             ) -> tuple[list[Any], list[Any]]:
    """The nodes and constants that give the prompt graph genai's past and mask at the
    lengths it was built for (its slots = genai's past + window - 1): each past padded with
    empty slots after it, the mask with zeros between the past's columns and the window's;
    `names` maps the graph's inputs to them."""
    from onnx import TensorProto, helper

    gap = window - 1
    mask = f"{prefix}/attention_mask"
    names["attention_mask"] = mask
    zero, cut, end, axis = (f"{prefix}/genai.{k}" for k in ("zero", "cut", "end", "axis"))
    head = [helper.make_node("Slice", ["attention_mask", zero, cut, axis], [f"{mask}.past"]),
            helper.make_node("Slice", ["attention_mask", cut, end, axis], [f"{mask}.window"]),
            helper.make_node("Concat", [f"{mask}.past", f"{prefix}/genai.gap", f"{mask}.window"],
                             [mask], axis=1)]
    for value in graph.input:
        if CACHE.is_past(value.name):
            padded = f"{prefix}/{value.name}.padded"
            head.append(helper.make_node("Pad", [names[value.name], f"{prefix}/genai.pads"],
                                         [padded], mode="constant"))
            names[value.name] = padded
    extra = [helper.make_tensor(zero, TensorProto.INT64, [1], [0]),
             helper.make_tensor(cut, TensorProto.INT64, [1], [-window]),
             helper.make_tensor(end, TensorProto.INT64, [1], [np.iinfo(np.int64).max]),
             helper.make_tensor(axis, TensorProto.INT64, [1], [1]),
             helper.make_tensor(f"{prefix}/genai.gap", TensorProto.INT64, [1, gap], [0] * gap),
             helper.make_tensor(f"{prefix}/genai.pads", TensorProto.INT64, [8],
                                [0, 0, 0, 0, 0, 0, gap, 0])]
    return head, extra


def _like(graph: Any, name: str, shape: list[Any]) -> Any:
    from onnx import helper

    value = next(v for v in graph.input if v.name == name)
    return helper.make_tensor_value_info(name, value.type.tensor_type.elem_type, shape)


def _dims(value: Any) -> list[Any]:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param
            for d in value.type.tensor_type.shape.dim]


def _opsets(models: Any) -> list[Any]:
    """The opsets both graphs import (the default domain at least 13: Gather, Equal, If, the
    per-tensor QuantizeLinear)."""
    from onnx import helper

    versions: dict[str, int] = {"": 13}
    for model in models:
        for opset in model.opset_import:
            versions[opset.domain] = max(versions.get(opset.domain, 0), opset.version)
    return [helper.make_opsetid(domain, version) for domain, version in versions.items()]
