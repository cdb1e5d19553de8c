"""The weights of a TorchScript export, stored one tensor at a time.

torch's TorchScript exporter serializes a model under 2 GB whole in memory: the parameters,
their constant-folded copies, the protobuf built from them and its bytes are held at once
(4.6x a BERT-large checkpoint). Over 2 GB it writes the weights out as it goes. Inside
`held_back` it writes none at any size: the initializers it would have serialized are kept
here as the torch tensors they are, and the exported graph takes them as inputs. `store` then
makes each one an initializer again, its bytes a blob written straight from the tensor. The
graph is the one the exporter writes otherwise, node for node; only the copies are gone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from executors.store import weights

if TYPE_CHECKING:
    import onnx


@contextlib.contextmanager
def held_back() -> Iterator[dict[str, Any]]:
    """A TorchScript `torch.onnx.export` inside this block writes no initializer: the ones it
    would have written (after constant folding and de-duplication) land in the yielded dict,
    name -> tensor, and stay inputs of the graph it writes."""
    import torch

    held: dict[str, Any] = {}
    dedup = torch._C._jit_pass_onnx_deduplicate_initializers

    def hold(graph: Any, params: dict[str, Any], training: bool) -> dict[str, Any]:
        held.update(dedup(graph, params, training))
        return {}

    torch._C._jit_pass_onnx_deduplicate_initializers = hold
    try:
        yield held
    finally:
        torch._C._jit_pass_onnx_deduplicate_initializers = dedup


def store(model: onnx.ModelProto, held: dict[str, Any], out: Path) -> None:
    """Make the graph inputs of `model` that `held` names initializers in their input order, as
    the exporter would have written them, each large one a blob in `out`, in the type its input
    declares (a bf16 tensor of a graph widened to fp32 is widened as it is written:
    runtime/narrow.py); `held` is emptied as it goes, so a tensor's memory can go once it is
    stored."""
    inputs = list(model.graph.input)
    del model.graph.input[:]
    for value in inputs:
        tensor = held.pop(value.name, None)
        if tensor is None:
            model.graph.input.append(value)
            continue
        proto = model.graph.initializer.add(name=value.name,
                                            data_type=value.type.tensor_type.elem_type)
        proto.dims.extend(tensor.shape)
        weights.set_data(proto, _bytes(tensor, proto.data_type), out)


def _bytes(tensor: Any, data_type: int) -> memoryview:
    """The little-endian bytes of a torch tensor of any dtype (bf16 included), without a copy
    when it is contiguous and of `data_type`; a narrower float tensor is widened to fp32."""
    import onnx
    import torch

    if data_type == onnx.TensorProto.FLOAT and tensor.dtype in (torch.bfloat16, torch.float16):
        tensor = tensor.float()
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy())
