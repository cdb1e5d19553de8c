"""The local Hugging Face caches a checkpoint or a dataset is found in (read only: the planner
never downloads), at the roots huggingface_hub and datasets use."""

from __future__ import annotations

import os
from pathlib import Path


def hf_home() -> Path:
    return Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))


def hub_cache() -> Path:
    """The hub cache: `models--org--name` and `datasets--org--name` snapshots."""
    return Path(os.environ.get("HF_HUB_CACHE") or hf_home() / "hub")


def datasets_cache() -> Path:
    """The datasets library's own cache (Arrow files of datasets it has built)."""
    return Path(os.environ.get("HF_DATASETS_CACHE") or hf_home() / "datasets")
