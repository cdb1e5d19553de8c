"""aten operators that models call and torch's TorchScript ONNX exporter does not write,
composed of ONNX operators, registered before an export (the exporter consults them only for
operators it has no symbolic of its own for)."""

from __future__ import annotations

from typing import Any

# the lowest opset each composition needs (CastLike: opset 15)
OPSET = 15


def register() -> None:
    """Register every composition below for the TorchScript exporter."""
    import torch

    torch.onnx.register_custom_op_symbolic("aten::expm1", _expm1, OPSET)
    torch.onnx.register_custom_op_symbolic("aten::rms_norm", _rms_norm, OPSET)
    torch.onnx.register_custom_op_symbolic("aten::index_add", _index_add, OPSET)
    torch.onnx.register_custom_op_symbolic("aten::cumsum", _cumsum, OPSET)
    torch.onnx.register_custom_op_symbolic("aten::as_strided", _as_strided, OPSET)
    for name, logical, bitwise in (("or", "Or", "BitwiseOr"), ("and", "And", "BitwiseAnd"),
                                   ("xor", "Xor", "BitwiseXor")):
        function = _bitwise(f"aten::bitwise_{name}", logical, bitwise)
        torch.onnx.register_custom_op_symbolic(f"aten::__{name}_", function, OPSET)
        torch.onnx.register_custom_op_symbolic(f"aten::bitwise_{name}", function, OPSET)
    torch.onnx.register_custom_op_symbolic("aten::copy", _copy, OPSET)
    torch.onnx.register_custom_op_symbolic("aten::diff", _diff, OPSET)
    torch.onnx.register_custom_op_symbolic("aten::linalg_solve_triangular", _solve_triangular,
                                           OPSET)


def _copy(g: Any, x: Any, src: Any, non_blocking: Any = None) -> Any:
    """x's values replaced by src's, broadcast to x's shape and cast to its type: what the
    exporter leaves of an in-place copy into a tensor made in the traced forward (a recurrent
    layer's state, zeros until transformers' cache copies the prompt's into it)."""
    return g.op("Expand", g.op("CastLike", src, x), g.op("Shape", x))


def _diff(g: Any, x: Any, n: Any, dim: Any, prepend: Any = None, append: Any = None) -> Any:
    """Differences of neighbours along `dim`, `n` times, after `prepend` and before `append`
    (transformers' check of position ids for packed sequences, in a decoder traced without a
    mask: Cohere ASR's); of booleans, whether neighbours differ, as torch has it."""
    import torch
    from torch.onnx import symbolic_helper as sh
    from torch.onnx._internal.torchscript_exporter import _type_utils

    axis = sh._get_const(dim, "i", "dim")
    joined = [t for t in (prepend, x, append) if t is not None and not sh._is_none(t)]
    out = g.op("Concat", *joined, axis_i=axis) if len(joined) > 1 else x
    boolean = sh._try_get_scalar_type(x) == _type_utils.JitScalarType.BOOL

    def cut(start: int, end: int) -> Any:
        return g.op("Slice", out, *(g.op("Constant", value_t=torch.tensor([v]))
                                    for v in (start, end, axis)))

    for _ in range(sh._get_const(n, "i", "n")):
        out = g.op("Xor" if boolean else "Sub", cut(1, 2**62), cut(0, -1))
    return out


def _solve_triangular(g: Any, a: Any, b: Any, upper: Any, left: Any = None,
                      unitriangular: Any = None) -> Any:
    """X with A X = B (X A = B where not `left`) for a triangular A of a size the trace fixes
    (the chunked delta rule of Qwen3-Next's and Qwen3.5's linear attention, OLMo hybrid's):
    A = D U with D its diagonal and U unit triangular, X = U^-1 D^-1 B, and U^-1 built by
    doubling blocks: P, the inverse of U's diagonal blocks of size s, becomes that of size 2s
    as P - P C P, C the part of U joining each pair ([[A, 0], [C, B]]^-1 has -B^-1 C A^-1
    there). Every P is a true inverse's block, so nothing grows and cancels (a Neumann product
    of powers of U - I does, in float32)."""
    import torch
    from torch.onnx import errors
    from torch.onnx import symbolic_helper as sh

    sizes = sh._get_tensor_sizes(a) or []
    n = _square_size(a, sizes)
    is_upper = bool(sh._get_const(upper, "b", "upper"))
    if left is not None and not sh._is_none(left) and not sh._get_const(left, "b", "left"):
        # X A = B  <=>  A^T X^T = B^T, A^T triangular the other way
        ranks = [sh._get_tensor_rank(t) for t in (a, b)]
        if None in ranks:
            raise errors.SymbolicValueError("linalg_solve_triangular(left=False) of tensors "
                                            "whose ranks the trace does not fix", b)
        t = _solve_triangular(g, g.op("Transpose", a, perm_i=_last_two_swapped(ranks[0])),
                              g.op("Transpose", b, perm_i=_last_two_swapped(ranks[1])),
                              g.op("Constant", value_t=torch.tensor(not is_upper)), None,
                              unitriangular)
        out_rank = max(ranks)
        return g.op("Transpose", t, perm_i=_last_two_swapped(out_rank))

    def const(value: torch.Tensor) -> Any:
        return g.op("CastLike", g.op("Constant", value_t=value), a)

    unit = unitriangular is not None and not sh._is_none(unitriangular) and \
        bool(sh._get_const(unitriangular, "b", "unitriangular"))
    u, x = a, b
    if not unit:  # rows divided by the diagonal: A = D U
        diag = g.op("ReduceSum", g.op("Mul", a, const(torch.eye(n))),
                    g.op("Constant", value_t=torch.tensor([-1])), keepdims_i=1)
        u, x = g.op("Div", a, diag), g.op("Div", b, diag)
    rows = torch.arange(n)[:, None].expand(n, n)
    inverse, size = None, 1  # blocks of one row: U's diagonal, 1, its own inverse
    while size < n:
        # the entries joining each pair of blocks of `size` within a block of twice it
        pair = (rows // (2 * size)) == (rows.T // (2 * size))
        lower = ((rows // size) % 2 == 1) & ((rows.T // size) % 2 == 0)
        c = g.op("Mul", u, const((pair & (lower.T if is_upper else lower)).to(torch.float32)))
        # from the identity, I - C (no MatMul reads a constant: HTP rejects one that does)
        inverse = g.op("Sub", const(torch.eye(n)), c) if inverse is None else g.op(
            "Sub", inverse, g.op("MatMul", inverse, g.op("MatMul", c, inverse)))
        size *= 2
    return x if inverse is None else g.op("MatMul", inverse, x)


def _square_size(a: Any, sizes: list[Any]) -> int:
    """The size of the square matrix `a` as traced: either of its last two axes its type
    fixes, or where the exporter's shape inference left both open, its row stride when its
    strides are a contiguous square's."""
    from torch.onnx import errors

    for size in (sizes[-1:] + sizes[-2:-1]) if sizes else ():
        if isinstance(size, int):
            return size
    typed = a.type()
    strides = typed.strides() if hasattr(typed, "strides") else None
    if strides and len(strides) >= 3 and strides[-1] == 1 and isinstance(strides[-2], int) \
            and strides[-3] == strides[-2] ** 2:
        return strides[-2]
    raise errors.SymbolicValueError("linalg_solve_triangular of a matrix whose size the trace "
                                    "does not fix", a)


def _last_two_swapped(rank: int) -> list[int]:
    return [*range(rank - 2), rank - 1, rank - 2]


def _expm1(g: Any, x: Any) -> Any:
    """exp(x) - 1 (xIELU's activation: Apertus)."""
    import torch

    exp = g.op("Exp", x)
    return g.op("Sub", exp, g.op("CastLike", g.op("Constant", value_t=torch.tensor(1.0)), exp))


def _rms_norm(g: Any, x: Any, normalized_shape: Any, weight: Any, eps: Any) -> Any:
    """x / sqrt(mean(x^2) + eps) * weight over the last len(normalized_shape) axes
    (torch.nn.RMSNorm: DiffLlama's); eps, where None, is the float32 machine epsilon."""
    import torch
    from torch.onnx import symbolic_helper as sh

    axes = list(range(-len(sh._get_const(normalized_shape, "is", "normalized_shape")), 0))
    eps_value = torch.finfo(torch.float32).eps if sh._is_none(eps) else \
        sh._get_const(eps, "f", "eps")
    square = g.op("Mul", x, x)
    if g.opset >= 18:  # ReduceMean's axes became an input
        mean = g.op("ReduceMean", square, g.op("Constant", value_t=torch.tensor(axes)),
                    keepdims_i=1)
    else:
        mean = g.op("ReduceMean", square, axes_i=axes, keepdims_i=1)
    eps_t = g.op("CastLike", g.op("Constant", value_t=torch.tensor(eps_value)), x)
    out = g.op("Div", x, g.op("Sqrt", g.op("Add", mean, eps_t)))
    return out if sh._is_none(weight) else g.op("Mul", out, weight)


def _cumsum(g: Any, x: Any, dim: Any, dtype: Any = None) -> Any:
    """The running sum along `dim` in `dtype`, or where none is given in torch's: int64 for bools
    and integers (a mask's cumsum: Llama 4's padding count), which ONNX's CumSum does not take
    as they are."""
    import torch
    from torch.onnx import symbolic_helper as sh
    from torch.onnx._internal.torchscript_exporter import _type_utils

    types = _type_utils.JitScalarType
    if dtype is not None and not sh._is_none(dtype):
        to = types(sh._get_const(dtype, "i", "dtype"))
    else:
        own = sh._try_get_scalar_type(x)
        to = types.INT64 if own in (types.BOOL, types.UINT8, types.INT8, types.INT16,
                                    types.INT) else None
    if to is not None:
        x = g.op("Cast", x, to_i=to.onnx_type())
    axis = g.op("Constant", value_t=torch.tensor(sh._get_const(dim, "i", "dim")))
    return g.op("CumSum", x, axis)


def _as_strided(g: Any, x: Any, sizes: Any, strides: Any, offset: Any = None) -> Any:
    """A view of x's memory with other sizes and strides (the overlapping chunks of
    Longformer-style sliding-window attention: LED's). torch's composition gathers from x read
    in its logical order, which is its memory's only when x is contiguous; a traced x that is
    a permuted view (a transpose reshaped as a view, as batch 1 makes) is first transposed into
    its memory's order, which its traced strides give."""
    from torch.onnx import errors
    from torch.onnx import symbolic_opset9 as opset9

    typed = x.type()
    own = typed.strides() if hasattr(typed, "strides") else None
    if own and None not in own:
        # memory's order: strides descending (a dim of size 1 may stand anywhere: moving it
        # changes no element's place)
        order = sorted(range(len(own)), key=lambda d: -own[d])
        shape = typed.varyingSizes() or []
        if len(shape) == len(own) and None not in shape and not _dense(shape, own, order):
            raise errors.SymbolicValueError(
                "as_strided of a tensor whose elements overlap or leave gaps in memory", x)
        if order != sorted(order):
            x = g.op("Transpose", x, perm_i=order)
    return opset9.as_strided(g, x, sizes, strides, offset)


def _dense(shape: list[int], strides: list[int], order: list[int]) -> bool:
    """Whether the elements fill their memory exactly, read in `order` (outermost first)."""
    expected = 1
    for d in reversed(order):
        if shape[d] > 1:
            if strides[d] != expected:
                return False
            expected *= shape[d]
    return True


# ScatterElements' reduction (opset 16) and ONNX's bitwise operators (opset 18)
SCATTER_ADD_OPSET = 16
BITWISE_OPSET = 18


def _index_add(g: Any, x: Any, dim: Any, index: Any, source: Any, alpha: Any = None) -> Any:
    """x with source's slices along `dim` added at `index`, repeated indices adding up (JetMoE's
    experts gather their tokens' outputs so): ScatterElements with reduction add, the index
    laid along `dim` and expanded to source's shape."""
    import torch
    from torch.onnx import errors
    from torch.onnx import symbolic_helper as sh

    if g.opset < SCATTER_ADD_OPSET:
        raise errors.UnsupportedOperatorError("aten::index_add", g.opset, SCATTER_ADD_OPSET)
    rank = sh._get_tensor_rank(x)
    if rank is None:
        raise errors.SymbolicValueError("index_add of a tensor of unknown rank", x)
    axis = sh._get_const(dim, "i", "dim") % max(rank, 1)
    shape = [1] * axis + [-1] + [1] * (rank - axis - 1)
    laid = g.op("Reshape", index, g.op("Constant", value_t=torch.tensor(shape)))
    if not (alpha is None or sh._is_none(alpha)):
        source = g.op("Mul", source, g.op("CastLike", alpha, source))
    expanded = g.op("Expand", laid, g.op("Shape", source))
    return g.op("ScatterElements", x, expanded, source, axis_i=axis, reduction_s="add")


def _bitwise(name: str, logical: str, bitwise: str) -> Any:
    """`a | b`, `a & b`, `a ^ b`: on bools the logical operator, on integers (CPM-Ant's masks
    of int and bool tensors) the bitwise one, both operands first promoted as torch does."""

    def symbolic(g: Any, a: Any, b: Any) -> Any:
        from torch.onnx import errors
        from torch.onnx import symbolic_helper as sh
        from torch.onnx._internal.torchscript_exporter import _type_utils

        tensors = [v for v in (a, b) if sh._get_tensor_rank(v)] or [a, b]
        common = sh._type_promote_from_values(*tensors)
        a, b = (sh._maybe_cast_to_type(g, v, common) for v in (a, b))
        if common == _type_utils.JitScalarType.BOOL:
            return g.op(logical, a, b)
        if g.opset < BITWISE_OPSET:
            raise errors.UnsupportedOperatorError(name, g.opset, BITWISE_OPSET)
        return g.op(bitwise, a, b)

    return symbolic


def positive_perms(graph: Any) -> int:
    """TorchScript writes a permute's dims as given, and ONNX's Transpose takes none below
    zero (the state-space scan of Mamba-2, Bamba, Falcon-H1, ...: permute(0, -2, -1, 1)): each
    counted from the end of the perm, as long as the input's rank. The Transposes fixed."""
    fixed = 0
    for node in graph.graph.node:
        if node.op_type != "Transpose":
            continue
        for attr in node.attribute:
            if attr.name == "perm" and any(p < 0 for p in attr.ints):
                perm = [p % len(attr.ints) for p in attr.ints]
                del attr.ints[:]
                attr.ints.extend(perm)
                fixed += 1
    return fixed


COL2IM_OPSET = 18


def register_col2im() -> None:
    """aten::col2im (F.fold) for TorchScript export: torch's own symbolic reads the rank of
    `output_size` from a static list, which a traced model (MobileViTV2's folding, whose output
    size is read from a tensor's shape) does not give; ONNX's Col2Im takes it as a tensor."""
    import torch
    from torch.onnx import symbolic_helper

    @symbolic_helper.parse_args("v", "v", "v", "is", "is", "is")
    def col2im(g: Any, x: Any, output_size: Any, kernel_size: Any, dilation: list[int],
               padding: list[int], stride: list[int]) -> Any:
        return g.op("Col2Im", x, output_size, kernel_size, dilations_i=dilation,
                    pads_i=[*padding, *padding], strides_i=stride)  # begins, then ends

    torch.onnx.register_custom_op_symbolic("aten::col2im", col2im, COL2IM_OPSET)
