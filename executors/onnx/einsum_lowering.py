"""Einsum, any equation, as Transpose/Reshape/MatMul/ReduceSum/Mul on static shapes: for a
target that has no Einsum (or, like the QNN EP's HTP builder, only a few equations of it).

An equation is read into one letter per axis (an ellipsis becomes letters of its own, aligned
from the right as numpy broadcasts them). Then, exactly on fp32:
* an axis of size 1 facing a larger one in another operand (broadcasting) is squeezed out;
* a letter repeated within one operand (a diagonal, `ii->i`) is a product with a constant 0/1
  identity mask and a sum over the repeated axis;
* a letter no later operand and not the output reads is summed in its operand (ReduceSum);
* two operands meet as one MatMul over [shared kept letters..., left, contracted] x
  [shared kept..., contracted, right] (their batch, contracted and free letters each flattened
  by a Reshape), or as one broadcast Mul when they share no contracted letter (outer and
  elementwise products); more operands are contracted pairwise, left to right;
* the result is transposed to the output's letter order.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from executors.onnx.graph_edit import (
    Emitter,
    drop_unread_initializers,
    elem_types,
    replace,
    static_shapes,
)


class Refused(ValueError):
    """An Einsum this lowering cannot express; the message says why."""


@dataclass
class Operand:
    name: str
    letters: str
    sizes: list[int]


def parse(equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """(one letter string per operand, the output's letters), ellipses spelled out as letters
    the equation does not use, numpy's implicit output when there is no `->`."""
    eq = equation.replace(" ", "")
    lhs, _, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise Refused(f"equation {equation!r} has {len(terms)} operands, the node "
                      f"{len(ranks)} inputs")
    spare = [c for c in string.ascii_letters if c not in eq]
    width = max([r - len(t.replace("...", "")) for t, r in zip(terms, ranks, strict=True)
                 if "..." in t] + [0])
    ellipsis = "".join(spare[:width])
    spelled = []
    for term, rank in zip(terms, ranks, strict=True):
        own = rank - len(term.replace("...", ""))
        term = term.replace("...", ellipsis[width - own:] if own else "")
        if len(term) != rank:
            raise Refused(f"equation {equation!r}: term of {len(term)} letters for an input "
                          f"of rank {rank}")
        spelled.append(term)
    if len(set(out.replace("...", ""))) != len(out.replace("...", "")):
        raise Refused(f"equation {equation!r} repeats a letter in its output")
    if "->" not in eq:
        once = sorted(c for c in set("".join(spelled)) if "".join(spelled).count(c) == 1
                      and c not in ellipsis)
        return spelled, ellipsis + "".join(once)
    return spelled, out.replace("...", ellipsis)


def lower(em: Emitter, equation: str, inputs: list[str], in_shapes: list[list[int]],
          output: str, np_type: type) -> None:
    """Emit into `em` the nodes computing `output` = einsum(equation, *inputs)."""
    terms, out = parse(equation, [len(s) for s in in_shapes])
    largest: dict[str, int] = {}
    for term, shape in zip(terms, in_shapes, strict=True):
        for c, n in zip(term, shape, strict=True):
            largest[c] = max(largest.get(c, 1), n)
    ops = [_squeeze_broadcast(em, Operand(x, t, list(s)), largest)
           for x, t, s in zip(inputs, terms, in_shapes, strict=True)]
    ops = [_diagonals(em, op, np_type) for op in ops]
    acc = _sum_unread(em, ops[0], out + "".join(o.letters for o in ops[1:]))
    for k, nxt in enumerate(ops[1:], 2):
        later = out + "".join(o.letters for o in ops[k:])
        nxt = _sum_unread(em, nxt, later + acc.letters)
        acc = _sum_unread(em, acc, later + nxt.letters)
        acc = _contract(em, acc, nxt, later)
    acc = _sum_unread(em, acc, out)
    missing = [c for c in out if c not in acc.letters]
    if missing:
        raise Refused(f"equation {equation!r}: output letter {missing[0]!r} is in no operand")
    final = em.transpose(acc.name, [acc.letters.index(c) for c in out])
    if em.nodes and em.nodes[-1].output[0] == final:
        em.nodes[-1].output[0] = output
    else:
        em.node("Identity", [final], output)


def _squeeze_broadcast(em: Emitter, op: Operand, largest: dict[str, int]) -> Operand:
    keep = [i for i, c in enumerate(op.letters) if not (op.sizes[i] == 1 and largest[c] > 1)]
    if len(keep) == len(op.letters):
        return op
    sizes = [op.sizes[i] for i in keep]
    return Operand(em.reshape(op.name, sizes), "".join(op.letters[i] for i in keep), sizes)


def _diagonals(em: Emitter, op: Operand, np_type: type) -> Operand:
    while len(set(op.letters)) < len(op.letters):
        c = next(c for c in op.letters if op.letters.count(c) > 1)
        p = op.letters.index(c)
        q = op.letters.index(c, p + 1)
        n = op.sizes[p]
        mask_shape = [1] * len(op.letters)
        mask_shape[p] = mask_shape[q] = n
        mask = em.const(np.eye(n, dtype=np_type).reshape(mask_shape), "diagonal")
        picked = em.node("Mul", [op.name, mask])
        op = Operand(em.reduce_sum(picked, [q]), op.letters[:q] + op.letters[q + 1:],
                     op.sizes[:q] + op.sizes[q + 1:])
    return op


def _sum_unread(em: Emitter, op: Operand, read: str) -> Operand:
    axes = [i for i, c in enumerate(op.letters) if c not in read]
    if not axes:
        return op
    kept = [i for i in range(len(op.letters)) if i not in axes]
    return Operand(em.reduce_sum(op.name, axes), "".join(op.letters[i] for i in kept),
                   [op.sizes[i] for i in kept])


def _arrange(em: Emitter, op: Operand, order: str, shape: list[int]) -> str:
    x = em.transpose(op.name, [op.letters.index(c) for c in order])
    sizes = [op.sizes[op.letters.index(c)] for c in order]
    return x if sizes == shape else em.reshape(x, shape)


def _contract(em: Emitter, a: Operand, b: Operand, later: str) -> Operand:
    size = dict(zip(a.letters + b.letters, a.sizes + b.sizes, strict=True))
    batch = "".join(c for c in a.letters if c in b.letters and c in later)
    summed = "".join(c for c in a.letters if c in b.letters and c not in later)
    left = "".join(c for c in a.letters if c not in b.letters)
    right = "".join(c for c in b.letters if c not in a.letters)
    bs = [size[c] for c in batch]
    if not summed:  # an outer or elementwise product: one broadcast Mul
        x = _arrange(em, a, batch + left, bs + [size[c] for c in left] + [1] * len(right))
        y = _arrange(em, b, batch + right, bs + [1] * len(left) + [size[c] for c in right])
        letters = batch + left + right
        return Operand(em.node("Mul", [x, y]), letters, [size[c] for c in letters])
    n_left = int(np.prod([size[c] for c in left]))
    n_sum = int(np.prod([size[c] for c in summed]))
    n_right = int(np.prod([size[c] for c in right]))
    x = _arrange(em, a, batch + left + summed, [*bs, n_left, n_sum])
    y = _arrange(em, b, batch + summed + right, [*bs, n_sum, n_right])
    product = em.node("MatMul", [x, y])
    letters = batch + left + right
    sizes = [size[c] for c in letters]
    if sizes != [*bs, n_left, n_right]:
        product = em.reshape(product, sizes)
    return Operand(product, letters, sizes)


def lower_einsums(model: onnx.ModelProto) -> int:
    """Every Einsum whose inputs have static shapes -> the nodes `lower` emits; an Einsum it
    cannot express is left in place (the target's checker then names it)."""
    found = [n for n in model.graph.node if n.op_type == "Einsum"]
    if not found:
        return 0
    known = static_shapes(model, [i for n in found for i in n.input])
    types = elem_types(model)
    count = 0
    for node in found:
        in_shapes = [known.get(i) for i in node.input]
        if any(s is None or None in s for s in in_shapes):
            continue
        equation = next(a.s.decode() for a in node.attribute if a.name == "equation")
        em = Emitter(model, node.name or node.output[0])
        np_type = helper.tensor_dtype_to_np_dtype(types.get(node.input[0], 1))
        try:
            lower(em, equation, list(node.input), in_shapes, node.output[0], np_type)
        except Refused:
            continue
        replace(model, node, em.nodes)
        drop_unread_initializers(model, list(node.input))
        count += 1
    return count


def refusal(model: onnx.ModelProto, node: onnx.NodeProto) -> str:
    """Why `lower_einsums` left `node`: its shapes are not static, or the equation's reason."""
    known = static_shapes(model, list(node.input))
    in_shapes = [known.get(i) for i in node.input]
    if any(s is None or None in s for s in in_shapes):
        return "its input shapes are not static; export with fixed shapes"
    equation = next(a.s.decode() for a in node.attribute if a.name == "equation")
    try:
        parse(equation, [len(s) for s in in_shapes])
    except Refused as exc:
        return str(exc)
    return f"equation {equation!r} was not lowered"
