"""The dynamo exporter's graph optimizer (onnxscript's) with its no-op rules made exact.

onnxscript's rules that replace `x + 0`, `x - 0`, `x * 1` and `x / 1` by `x` match a constant
within 1e-8 absolute and 1e-5 relative of 0 or 1, so an RMSNorm's `variance + 1e-8` (Helium's
`rms_norm_eps`) is dropped as an Add of zero: the exported norm divides by the bare root of the
mean square, and a row of zeros (a padding token's embedding) becomes inf, then NaN in every
later position that attends to it (measured: a bf16 Helium's bundle generated token 0 only).
Inside `exact()`, the export's optimizer applies these rules to exact zeros and ones alone; its
other rules are as they were.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

EXACT = 0.0  # the tolerance the replacement rules match their constant with


def _rules() -> tuple[Any, Any, list[Any]]:
    """onnxscript's rewriter module, its no-op rule set, and the exact replacements of its
    arithmetic rules (the Dropout rules are exact already)."""
    from onnxscript import rewriter
    from onnxscript.rewriter import pattern
    from onnxscript.rewriter.rules import common

    def add_0(op: Any, x: Any) -> Any:
        return op.Add(x, pattern.Constant(0, EXACT, EXACT))

    def sub_0(op: Any, x: Any) -> Any:
        return op.Sub(x, pattern.Constant(0, EXACT, EXACT))

    def mul_by_1(op: Any, x: Any) -> Any:
        return op.Mul(x, pattern.Constant(1, EXACT, EXACT))

    def div_by_1(op: Any, x: Any) -> Any:
        return op.Div(x, pattern.Constant(1, EXACT, EXACT))

    def identity(op: Any, x: Any, **_: Any) -> Any:
        return op.Identity(x)

    exact = [*pattern.RewriteRule(add_0, identity).commute(),
             *pattern.RewriteRule(mul_by_1, identity).commute(),
             pattern.RewriteRule(sub_0, identity), pattern.RewriteRule(div_by_1, identity)]
    kept = (common.dropout_zero_rule, common.dropout_inference_rule)
    no_op = [r for r in rewriter._no_op.rules.rules if not any(r is k for k in kept)]
    return rewriter, no_op, exact


def _found() -> tuple[Any, list[Any], list[Any]] | None:
    """`_rules()`, or None where onnxscript is laid out otherwise (another version): the
    export then runs with its optimizer's rules as they are."""
    try:
        found = _rules()
    except (ImportError, AttributeError):
        return None
    return found if isinstance(getattr(found[0], "_DEFAULT_REWRITE_RULES", None), tuple) \
        else None


@contextlib.contextmanager
def exact() -> Iterator[None]:
    """While inside, the default rules onnxscript's optimizer applies (the dynamo exporter's
    `optimize`) match `+ 0`, `- 0`, `* 1` and `/ 1` exactly."""
    found = _found()
    if found is None:
        yield
        return
    rewriter, no_op, replacements = found
    before = rewriter._DEFAULT_REWRITE_RULES
    kept = tuple(r for r in before if not any(r is n for n in no_op))
    rewriter._DEFAULT_REWRITE_RULES = (*replacements, *kept)
    try:
        yield
    finally:
        rewriter._DEFAULT_REWRITE_RULES = before
