"""Per-module QDQ error for `modelplan diagnose`, a failed gate and the quantize repair search:
where a quantized graph departs from its fp32 graph, per module (module_error), a module's own
error, its piece run alone (own_error), and the same pieces on the target (target_error)."""
