"""What a target rejects in a graph: the checker of the legal_for fact, and legalize's check
that nothing is left after its rewrites."""

from __future__ import annotations

import onnx

from executors.onnx import htp_rewrites

HTP_TARGETS = ("qnn_htp",)  # targets whose backend needs executors/onnx/htp_rewrites.py


def violations(model: onnx.ModelProto, target: str) -> list[str]:
    """What `target` rejects in `model`, one line each naming the node or constant."""
    return htp_rewrites.violations(model) if target in HTP_TARGETS else []
