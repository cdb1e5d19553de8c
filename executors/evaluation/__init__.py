"""Task evaluation (the `eval` op): dataset rows read offline (data.py), each task's
preprocessing, predictions and metrics (one module per task family, registered in evaluators.py),
and the three-way run — PyTorch, the fp32 export on CPU, the deliverable on its target —
with a verdict (runner.py)."""
