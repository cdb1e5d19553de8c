"""Col2Im (torch's F.fold, exported from opset 18) on static shapes, for a target without it
(the QNN EP has no Col2Im builder). It is a linear map from [N, C*K, L] blocks to an
[N, C, *image] map (K elements per block, L blocks), exactly:

* blocks that tile the image (stride = block, no pads, no dilation: MobileViTV2's folding) are a
  permutation: Reshape to [N*C, *block, *grid], Transpose to interleave each grid axis with its
  block axis, Reshape to the image (rank 5 for a 2-D image);
* any other fold sums overlapping blocks: a MatMul of the [N, C, K*L] values by a constant
  0/1 scatter matrix [K*L, prod(image)] (one 1 per block element inside the image).
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx
from onnx import helper

from executors.onnx.graph_edit import (
    Emitter,
    constants,
    drop_unread_initializers,
    replace,
    static_shapes,
)


def _attrs(node: onnx.NodeProto, rank: int) -> tuple[list[int], list[int], list[int]]:
    got = {a.name: list(helper.get_attribute_value(a)) for a in node.attribute}
    return (got.get("dilations", [1] * rank), got.get("pads", [0] * 2 * rank),
            got.get("strides", [1] * rank))


def _scatter(image: list[int], block: list[int], dilations: list[int], pads: list[int],
             strides: list[int]) -> np.ndarray:
    """[K*L, prod(image)]: row k*L + l has a 1 where element k of block l lands in the image."""
    rank = len(image)
    grid = [(image[a] + pads[a] + pads[a + rank] - dilations[a] * (block[a] - 1) - 1)
            // strides[a] + 1 for a in range(rank)]
    n_blocks = int(np.prod(grid))
    out = np.zeros((int(np.prod(block)) * n_blocks, int(np.prod(image))), np.float32)
    for k, offset in enumerate(itertools.product(*map(range, block))):
        for l_, cell in enumerate(itertools.product(*map(range, grid))):
            at = [cell[a] * strides[a] - pads[a] + offset[a] * dilations[a] for a in range(rank)]
            if all(0 <= at[a] < image[a] for a in range(rank)):
                out[k * n_blocks + l_, int(np.ravel_multi_index(at, image))] = 1.0
    return out


def lower(em: Emitter, node: onnx.NodeProto, in_shape: list[int], image: list[int],
          block: list[int]) -> None:
    rank = len(image)
    dilations, pads, strides = _attrs(node, rank)
    n, ck, n_blocks = in_shape
    k = int(np.prod(block))
    c = ck // k
    x, out = node.input[0], node.output[0]
    tiles = strides == block and not any(pads) and all(d == 1 for d in dilations) \
        and all(i % b == 0 for i, b in zip(image, block, strict=True))
    if tiles:
        grid = [i // b for i, b in zip(image, block, strict=True)]
        blocks = em.reshape(x, [n * c, *block, *grid])
        perm = [0, *itertools.chain.from_iterable((1 + rank + a, 1 + a) for a in range(rank))]
        em.reshape(em.transpose(blocks, perm), [n, c, *image], out)
        return
    scatter = em.const(_scatter(image, block, dilations, pads, strides), "scatter")
    flat = em.reshape(x, [n, c, k * n_blocks])
    em.reshape(em.node("MatMul", [flat, scatter]), [n, c, *image], out)


def lower_col2ims(model: onnx.ModelProto) -> int:
    """Every Col2Im with static input shape and constant image and block shapes -> the nodes
    `lower` emits; any other is left for the target's checker to name."""
    found = [n for n in model.graph.node if n.op_type == "Col2Im"]
    if not found:
        return 0
    known = static_shapes(model, [n.input[0] for n in found])
    consts = constants(model)
    count = 0
    for node in found:
        in_shape = known.get(node.input[0])
        image, block = consts.get(node.input[1]), consts.get(node.input[2])
        if not in_shape or None in in_shape or image is None or block is None:
            continue
        em = Emitter(model, node.name or node.output[0])
        lower(em, node, in_shape, [int(v) for v in image], [int(v) for v in block])
        replace(model, node, em.nodes)
        drop_unread_initializers(model, list(node.input[1:]))
        count += 1
    return count
