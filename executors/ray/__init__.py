"""The Ray executor plugin (`executor=ray`); Ray itself is imported only when a run starts."""

from executors.ray.executor import RayExecutor

__all__ = ["RayExecutor"]
