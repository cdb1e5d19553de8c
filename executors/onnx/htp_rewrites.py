"""Graph rewrites for what QNN HTP rejects or computes wrongly, each exact on fp32 (or within
its rounding) and each measured on the HTP simulator (onnxruntime-qnn 2.7.0, ORT 1.32), and the
checks that find what is left (the `legal_for` fact's checker): any op outside the QNN EP's HTP
table (htp_ops), mask sentinels, float Wheres, float CumSums, dilated pooling.

A rewrite takes a model and returns how many places it changed (the Erf GELU fold returns the
new model too). executors/steps/legalize.py applies them in REWRITES order. The general
lowerings live beside it: einsum_lowering (any Einsum), col2im_lowering (F.fold),
index_chains (F.unfold's rank-6 chain), gathernd_lowering (GatherND on constant indices),
cumsum_lowering (a float CumSum), htp_pooling (pooling forms HTP gets wrong), htp_gemm (Gemm
forms it declines), masked_rows (a boolean-masked row assignment), htp_math (Reciprocal,
Softplus).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from executors.onnx import (
    col2im_lowering,
    cumsum_lowering,
    einsum_lowering,
    empty_tensors,
    gathernd_lowering,
    htp_gemm,
    htp_math,
    htp_pooling,
    index_chains,
    masked_rows,
    rms_norms,
)
from executors.onnx.graph_edit import (
    constants,
    drop_dead,
    drop_unread_initializers,
    elem_types,
    replace,
    shapes,
)
from executors.onnx.htp_ops import fix, lacks, scope

HUGE = -1e30           # a constant at or below this is a mask sentinel (-inf, float-min)
# Masked scores only need to vanish after softmax (e**-100 ~ 4e-44), and a small floor keeps
# the quantized range of the masked-score tensor tight. Measured on MiniLM (QDQ, CPU EP):
# floor -1e4 gives w8a8 cosine 0.49, floor -100 gives 0.83; w8a16 per-channel 0.999 either way.
FLOOR = -100.0
WEIGHTED = ("MatMul", "Gemm", "Conv", "ConvTranspose")
ELEMENTWISE = ("Add", "Sub", "Mul", "Div")


def is_sentinel(a: np.ndarray) -> bool:
    # a float64 bound: cast to float16 it would overflow (to -inf, with a RuntimeWarning)
    return a.dtype.kind == "f" and a.size > 0 and bool(np.any(a <= np.float64(HUGE)))


def _near_floor(a: np.ndarray) -> bool:
    return a.dtype.kind == "f" and a.size > 0 and bool(np.any(a <= FLOOR))


# -- the attention mask ----------------------------------------------------------------------
def mask_wheres(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    consts = constants(model)
    return [n for n in model.graph.node if n.op_type == "Where"
            and n.input[1] in consts and n.input[2] in consts
            and consts[n.input[1]].dtype.kind == "f"
            and (is_sentinel(consts[n.input[1]]) or is_sentinel(consts[n.input[2]])
                 or _near_floor(consts[n.input[1]]) or _near_floor(consts[n.input[2]]))]


def rewrite_mask_wheres(model: onnx.ModelProto) -> int:
    """Where(cond, a, b) over constant mask values -> Cast(cond) * (a - b) + b, the constants
    floored first (HTP rejects the mask Where)."""
    consts = constants(model)
    targets = mask_wheres(model)
    for where in targets:
        a = np.maximum(consts[where.input[1]], FLOOR)
        b = np.maximum(consts[where.input[2]], FLOOR)
        base = where.name or where.output[0]
        diff, offset = f"{base}/legalized_diff", f"{base}/legalized_offset"
        model.graph.initializer.extend([numpy_helper.from_array((a - b).astype(a.dtype), diff),
                                        numpy_helper.from_array(b.astype(b.dtype), offset)])
        to = helper.np_dtype_to_tensor_dtype(a.dtype)
        replace(model, where, [
            helper.make_node("Cast", [where.input[0]], [f"{base}/legalized_cond"],
                             name=f"{base}/legalized_Cast", to=to),
            helper.make_node("Mul", [f"{base}/legalized_cond", diff],
                             [f"{base}/legalized_scaled"], name=f"{base}/legalized_Mul"),
            helper.make_node("Add", [f"{base}/legalized_scaled", offset], [where.output[0]],
                             name=f"{base}/legalized_Add")])
    return len(targets)


def clamp_constants(model: onnx.ModelProto) -> int:
    """Mask sentinels (-inf, float-min) in constants -> FLOOR."""
    count = 0
    tensors = list(model.graph.initializer) + [
        n.attribute[0].t for n in model.graph.node
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"]
    for t in tensors:
        a = numpy_helper.to_array(t)
        if is_sentinel(a):
            t.CopyFrom(numpy_helper.from_array(np.maximum(a, FLOOR).astype(a.dtype), t.name))
            count += 1
    return count


def drop_isnan_guards(model: onnx.ModelProto) -> int:
    """Where(IsNaN(x), c, x) -> x: a guard against a softmax over a fully masked row, which
    cannot happen once mask constants are finite (HTP has no IsNaN)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    count = 0
    for where in [n for n in model.graph.node if n.op_type == "Where"]:
        guard = producer.get(where.input[0])
        if guard is None or guard.op_type != "IsNaN" or guard.input[0] != where.input[2]:
            continue
        replace(model, where, [helper.make_node("Identity", [where.input[2]],
                                                [where.output[0]], name=f"{where.name}/kept")])
        count += 1
    if count:
        drop_dead(model)
    return count


def rewrite_float_wheres(model: onnx.ModelProto) -> int:
    """Any other float Where(c, a, b) -> Cast(c) * a + (1 - Cast(c)) * b: quantized to 16 bits
    it fails HTP graph finalization (QNN_COMMON_ERROR_MEM_ALLOC: OWL-ViT's query mask, GPT-2's
    guards). Exact while a and b are finite, which clamp_constants makes them: each term is a
    or b times 1 or 0 (b + c * (a - b) rounded a score beside a mask value of -1e5 by its
    ulp there, 0.0078: Reformer's self mask moved its logits by 0.0033)."""
    types = elem_types(model)
    count = 0
    for where in [n for n in model.graph.node if n.op_type == "Where"]:
        if types.get(where.input[1], types.get(where.input[2])) != TensorProto.FLOAT:
            continue
        base = where.name or where.output[0]
        c, a, b = where.input
        one = f"{base}/arith_one"
        model.graph.initializer.append(numpy_helper.from_array(np.array(1.0, np.float32), one))
        replace(model, where, [
            helper.make_node("Cast", [c], [f"{base}/arith_cond"], to=TensorProto.FLOAT,
                             name=f"{base}/arith_Cast"),
            helper.make_node("Sub", [one, f"{base}/arith_cond"], [f"{base}/arith_else"],
                             name=f"{base}/arith_Sub"),
            helper.make_node("Mul", [f"{base}/arith_cond", a], [f"{base}/arith_then_part"],
                             name=f"{base}/arith_Mul"),
            helper.make_node("Mul", [f"{base}/arith_else", b], [f"{base}/arith_else_part"],
                             name=f"{base}/arith_Mul_else"),
            helper.make_node("Add", [f"{base}/arith_then_part", f"{base}/arith_else_part"],
                             list(where.output), name=f"{base}/arith_Add")])
        count += 1
    return count


# -- ops HTP has not ---------------------------------------------------------------------------
def fuse_erf_gelu(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """x * 0.5 * (1 + erf(x / sqrt 2)) -> one Gelu node (HTP has no Erf)."""
    from onnxruntime.transformers.fusion_gelu import FusionGelu
    from onnxruntime.transformers.onnx_model import OnnxModel

    before = sum(n.op_type == "Erf" for n in model.graph.node)
    if not before:
        return model, 0
    wrapped = OnnxModel(model)
    FusionGelu(wrapped).apply()
    wrapped.prune_graph(allow_remove_graph_inputs=False)  # an unread input stays: it is fed
    wrapped.topological_sort()
    return wrapped.model, before - sum(n.op_type == "Erf" for n in wrapped.model.graph.node)


def einsum_to_matmul(model: onnx.ModelProto) -> int:
    """A two-operand Einsum that is a batched matrix product ('...ij,...jk->...ik' up to which
    operand is transposed) -> MatMul, with a Transpose of the last two axes where needed
    (HTP rejects Einsum: OWL-ViT's class head)."""
    ranks = {k: len(v) for k, v in shapes(model).items()}
    count = 0
    for node in [n for n in model.graph.node if n.op_type == "Einsum" and len(n.input) == 2]:
        eq = next(a.s.decode() for a in node.attribute if a.name == "equation").replace(" ", "")
        lhs, res = eq.split("->")
        a, b = (s.replace("...", "") for s in lhs.split(","))
        r = res.replace("...", "")
        rank = ranks.get(node.input[0])
        if rank is None or rank != ranks.get(node.input[1]) or min(len(a), len(b), len(r)) < 2 \
                or not a[:-2] == b[:-2] == r[:-2]:
            continue
        (i, j), (k, l_), (x, y) = a[-2:], b[-2:], r[-2:]
        perm = [*range(rank - 2), rank - 1, rank - 2]
        base = node.name or node.output[0]
        ins, pre = list(node.input), []
        if (x, y) == (i, l_) and j == k:
            pass
        elif (x, y) == (i, k) and j == l_:
            pre.append(helper.make_node("Transpose", [ins[1]], [f"{base}/bT"], perm=perm,
                                        name=f"{base}/bT"))
            ins[1] = f"{base}/bT"
        elif (x, y) == (j, l_) and i == k:
            pre.append(helper.make_node("Transpose", [ins[0]], [f"{base}/aT"], perm=perm,
                                        name=f"{base}/aT"))
            ins[0] = f"{base}/aT"
        else:
            continue
        replace(model, node, [*pre, helper.make_node("MatMul", ins, list(node.output),
                                                       name=f"{base}/MatMul")])
        count += 1
    return count


# -- what the quantizer and HTP get wrong together ------------------------------------------
def unshare_weights(model: onnx.ModelProto) -> int:
    """An initializer feeding a MatMul/Gemm/Conv weight or bias and other nodes too gets one
    copy per consumer. TorchScript merges equal constants (all-zero biases of one size); the
    QDQ quantizer then quantizes the shared tensor once as an activation, the weighted op's
    Q/DQ group breaks, and HTP rejects the left-over DequantizeLinear."""
    inits = {i.name: i for i in model.graph.initializer}
    users: dict[str, list[tuple[onnx.NodeProto, int]]] = defaultdict(list)
    for node in model.graph.node:
        for k, name in enumerate(node.input):
            if name in inits:
                users[name].append((node, k))
    count = 0
    for name, uses in users.items():
        if len(uses) < 2 or not any(n.op_type in WEIGHTED and k >= 1 for n, k in uses):
            continue
        for j, (node, k) in enumerate(uses[1:], 1):
            copy = onnx.TensorProto()
            copy.CopyFrom(inits[name])
            copy.name = f"{name}/copy{j}"
            model.graph.initializer.append(copy)
            node.input[k] = copy.name
            count += 1
    return count


def tile_batch_constants(model: onnx.ModelProto) -> int:
    """An elementwise op between a batch>1 activation and a constant of batch 1 gets the
    constant tiled to the batch: HTP computes Gather + Add([1,S,d] position table) +
    LayerNormalization wrongly for batch index >= 1 (CLIP, OWL text towers), silently."""
    dims = shapes(model)
    inits = {i.name: i for i in model.graph.initializer}
    count = 0
    for node in model.graph.node:
        if node.op_type not in ELEMENTWISE or len(node.input) != 2:
            continue
        for k in (0, 1):
            const, other = node.input[k], node.input[1 - k]
            theirs, ours = dims.get(other), list(inits[const].dims) if const in inits else None
            if not ours or not theirs or None in theirs or len(ours) != len(theirs) \
                    or len(ours) < 2 or ours[0] != 1 or theirs[0] <= 1:
                continue
            name = f"{const}/tiled{theirs[0]}"
            if name not in inits:
                tiled = np.repeat(numpy_helper.to_array(inits[const]), theirs[0], axis=0)
                model.graph.initializer.append(numpy_helper.from_array(tiled, name))
                inits[name] = model.graph.initializer[-1]
            node.input[k] = name
            count += 1
    return count


def unit_muls(model: onnx.ModelProto) -> int:
    """Mul(c, x) by a constant of ones that does not widen x -> Identity (exact): an untrained
    norm's weight (every tiny random checkpoint's). HTP computed Hunyuan's query norm's
    Mul(ones[32], x[1,2,8,32]) as something else, silently (cosine -0.28; its constant all at
    the top code of its 16-bit range)."""
    consts = constants(model)
    known = shapes(model)
    count, ones = 0, []
    for node in [n for n in model.graph.node if n.op_type == "Mul" and len(n.input) == 2]:
        for c, x in ((0, 1), (1, 0)):
            value = consts.get(node.input[c])
            out, other = known.get(node.output[0]), known.get(node.input[x])
            if value is None or node.input[x] in consts or not out or out != other \
                    or None in out or value.size == 0 or not np.all(value == 1):
                continue
            replace(model, node, [helper.make_node("Identity", [node.input[x]],
                                                   list(node.output), name=node.name)])
            count += 1
            ones.append(node.input[c])
            break
    if count:
        drop_dead(model)  # a Constant node of ones nothing reads now
        drop_unread_initializers(model, ones)
    return count


def constant_first_muls(model: onnx.ModelProto) -> int:
    """Mul(x, c) over a constant c of more than one value becomes Mul(c, x) (exact: the
    product commutes). HTP computes the QDQ Mul with the per-channel constant second wrongly
    in some graphs, silently: a PoolFormer's GroupNorm scale, x[1,512,7,7] * c[512,1,1], read
    cosine 0.06 against the CPU EP on the same QDQ graph, 1.0 with the operands swapped
    (onnxruntime-qnn 2.7.0; a piece holding only that Mul computes it right either way)."""
    sizes = {i.name: int(np.prod(i.dims)) for i in model.graph.initializer}
    sizes.update({n.output[0]: int(np.prod(n.attribute[0].t.dims)) for n in model.graph.node
                  if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"})
    count = 0
    for node in model.graph.node:
        if node.op_type == "Mul" and len(node.input) == 2 and node.input[0] not in sizes \
                and sizes.get(node.input[1], 0) > 1:
            node.input[0], node.input[1] = node.input[1], node.input[0]
            count += 1
    return count


Rewrite = Callable[[onnx.ModelProto], Any]
# In order: mask Wheres use the raw constants, then constants are floored, then guards and
# other Wheres become arithmetic on finite values, then op replacements, then what the
# quantizer needs (unshared weights), what HTP needs for batches, for a Mul's operands and a Sub's.
REWRITES: tuple[tuple[str, Rewrite], ...] = (
    ("mask_wheres", rewrite_mask_wheres), ("clamp_constants", clamp_constants),
    ("isnan_guards", drop_isnan_guards), ("masked_rows", masked_rows.masked_rows_as_wheres),
    ("float_wheres", rewrite_float_wheres),
    ("erf_gelu", fuse_erf_gelu), ("rms_norms", rms_norms.fuse_rms_norms),
    ("norms", htp_math.decompose_norms),
    ("reciprocals", htp_math.reciprocals_as_divs), ("softplus", htp_math.softplus_composed),
    ("log_sigmoids", htp_math.log_sigmoids_composed), ("logsumexp", htp_math.logsumexps_composed),
    ("outer_products", htp_math.outer_products_as_matmuls),
    ("broadcast_first_muls", htp_math.broadcast_first_muls),
    ("einsum", einsum_to_matmul), ("einsum_general", einsum_lowering.lower_einsums),
    ("col2im", col2im_lowering.lower_col2ims), ("index_chains", index_chains.fold_index_chains),
    ("gathernd", gathernd_lowering.lower_gathernds), ("cumsum", cumsum_lowering.lower_cumsums),
    ("max_pool_pads", htp_pooling.pad_max_pools),
    ("empty_concat_inputs", empty_tensors.drop_empty_concat_inputs),
    ("covering_average_pools", htp_pooling.global_average_pools),
    ("gemms", htp_gemm.gemms_htp_takes),
    ("unshare_weights", unshare_weights),
    ("batch_constants", tile_batch_constants), ("unit_muls", unit_muls),
    ("constant_first_muls", constant_first_muls),
    ("constant_subs", htp_math.constant_subs_as_adds),
)


def violations(model: onnx.ModelProto) -> list[str]:
    """What HTP rejects in `model`, one line each naming the node (and its module) or tensor:
    any op outside the QNN EP's HTP table (htp_ops), mask sentinels, float Wheres."""
    found = [f"{n.op_type} node {n.name!r} in {scope(n.name)} (HTP has no {n.op_type})"
             for n in model.graph.node if lacks(n.op_type)]
    found += [f"mask constant {name!r} at or below {HUGE:g}"
              for name, a in constants(model).items() if is_sentinel(a)]
    found += htp_pooling.declined(model)
    found += [f"empty tensor {name!r} concatenated" for name in
              empty_tensors.empty_concat_inputs(model)]
    types = elem_types(model)
    found += [f"float Where {n.name!r}" for n in model.graph.node if n.op_type == "Where"
              and types.get(n.input[1], types.get(n.input[2])) == TensorProto.FLOAT]
    found += [f"float CumSum {n.name!r} (HTP declines it; legalize lowers it on static shapes)"
              for n in model.graph.node if n.op_type == "CumSum"
              and types.get(n.input[0]) in cumsum_lowering.FLOATS]
    return found


def remedy(model: onnx.ModelProto) -> str:
    """How to fix the first thing violations() names."""
    left = next((n for n in model.graph.node if lacks(n.op_type)), None)
    if left is None:
        if empty_tensors.empty_concat_inputs(model):
            return "legalize could not drop an empty Concat input (all of the Concat's " \
                   "inputs are empty); set target.cpu_fallback=true to run it on the CPU"
        if htp_pooling.declined(model):
            return "HTP has no dilated pooling: replace the module's dilation, or set " \
                   "target.cpu_fallback=true to run it on the CPU"
        if any(n.op_type == "CumSum" for n in model.graph.node):
            return "a CumSum over a shape the graph does not fix: export with fixed shapes, " \
                   "or set target.cpu_fallback=true to run it on the CPU"
        return "report this model; legalize does not know this pattern"
    if left.op_type == "Einsum":
        return f"legalize could not lower it: {einsum_lowering.refusal(model, left)}"
    return fix(left.op_type)
