"""modelplan's planner: compose a config, lower it to steps, prove steps away, key and render.

Pure Python: imports neither torch, onnxruntime, onnx nor transformers.
"""

from __future__ import annotations

__version__ = "0.1.0"
