"""A model's own name, its Hugging Face id where one can be found: the hub id of a cached
checkpoint, the `models--org--name` folder of a Hugging Face cache path, the id its model card
loads in its usage code (a packaged checkpoint's card names the model it packages), the
`_name_or_path` of its config.json; else its folder's name, or its config's name.

`_name_or_path` comes after the card: transformers writes there what the weights were loaded
from, which for a fine-tuned or packaged checkpoint is often the model it was trained from."""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

ID = r"[A-Za-z0-9][\w.-]*/[\w.-]*[A-Za-z0-9]"
HUB_FOLDER = re.compile(r"^models--([\w.-]+)--([\w.-]+)$")
# the calls a model card shows to load the model it describes
CARD_LOADS = re.compile(
    r"(?:from_pretrained|SentenceTransformer|CrossEncoder|SparseEncoder)\(\s*['\"]"
    rf"({ID})['\"]|pipeline\([^)]*?model\s*=\s*['\"]({ID})['\"]")
CARD_BYTES = 256 * 1024


def model_id(model: dict[str, Any]) -> str | None:
    """The model's Hugging Face id (`org/name`), if anything names one."""
    if model["source"] == "hub_cache" and model.get("hub_id"):
        return str(model["hub_id"])
    where = _location(model)
    if where is None:
        return None
    for part in reversed(where.parts):
        found = HUB_FOLDER.match(part)
        if found:
            return f"{found.group(1)}/{found.group(2)}"
    folder = where if where.is_dir() else where.parent
    return card_id(folder / "README.md") or _config_id(folder / "config.json")


def card_id(card: Path) -> str | None:
    """The id a model card's usage code loads most often."""
    try:
        with card.open(encoding="utf-8", errors="replace") as f:
            text = f.read(CARD_BYTES)
    except OSError:
        return None
    ids = Counter(a or b for a, b in CARD_LOADS.findall(text))
    return ids.most_common(1)[0][0] if ids else None


def _config_id(config: Path) -> str | None:
    try:
        name = json.loads(config.read_text()).get("_name_or_path")
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(name, str) and re.fullmatch(ID, name) and not os.path.isabs(name) \
            and not name.startswith("."):
        return name
    return None


def _location(model: dict[str, Any]) -> Path | None:
    from planner.models import sources

    if model["source"] in ("local", "onnx_file", "hub_cache") and model.get("path"):
        return Path(os.path.abspath(os.path.expanduser(model["path"])))
    if model["source"] == "packaged" and model.get("package"):
        try:
            return sources.packaged_dir(model["package"])
        except Exception:  # noqa: BLE001 - not installed here: no id, the plan says why
            return None
    return None


def display_name(model: dict[str, Any]) -> str:
    """What the model is called: its id, else its file's or folder's name, else the config's."""
    found = model_id(model)
    if found:
        return found
    source = model["source"]
    if source in ("local", "onnx_file") and model.get("path"):
        path = Path(os.path.abspath(os.path.expanduser(model["path"])))
        return path.stem if source == "onnx_file" else path.name
    return str(model["name"])
