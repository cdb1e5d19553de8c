"""Graph rewrites every QDQ build needs, whatever runs it: a mask sentinel (-inf, float-min)
stretches the quantized range of the masked-score tensor until every real score rounds to
one value. Measured on the packaged MiniLM, QDQ on the CPU EP: w8a16 per-channel cosine 0.62
with the sentinels, 0.999 with them floored (executors/onnx/htp_rewrites.py has the floor
and the rewrites; HTP needs more of them, this target only these)."""

from __future__ import annotations

import onnx

from executors.onnx.htp_rewrites import (
    FLOOR,
    HUGE,
    Rewrite,
    clamp_constants,
    constants,
    is_sentinel,
    rewrite_mask_wheres,
)

__all__ = ("FLOOR", "REWRITES", "remedy", "violations")

REWRITES: tuple[tuple[str, Rewrite], ...] = (
    ("mask_wheres", rewrite_mask_wheres), ("clamp_constants", clamp_constants))


def violations(model: onnx.ModelProto) -> list[str]:
    """The mask sentinels left in `model`, one line each naming the constant."""
    return [f"mask constant {name!r} at or below {HUGE:g}"
            for name, a in constants(model).items() if is_sentinel(a)]


def remedy(model: onnx.ModelProto) -> str:
    """How to fix what violations() names (the floor is applied to every constant)."""
    return "report this model; legalize does not know this pattern"
