"""Where a run's results go: `outputs/<model>-<quant>-<target>/`, the model named after itself
(its Hugging Face id where one is found, else its checkpoint folder or ONNX file's stem; a
random-weights model by its config's name), and never over another model's deliverable unless
asked (`--overwrite`)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from planner.config.storepath import NAME_MAX
from planner.core.ops import OPS, Trait
from planner.errors import UsageError
from planner.models.identity import display_name

RUN_RECORD = "run.json"
FAILED_RECORD = "run.failed.json"  # a failed run's record, beside a good deliverable it kept


def failed_beside(out_dir: Path) -> Path:
    """Where a failed run with no earlier deliverable to keep saves its record: a file beside
    the outputs folder (`<name>.run.failed.json`), so no folder looks like a result."""
    return out_dir.parent / f"{out_dir.name}.{FAILED_RECORD}"


def record_file(record: dict[str, Any]) -> str:
    """The file a run's record was saved as: its outputs folder's run.json; a failed run's
    run.failed.json, in the folder beside the deliverable it kept, else beside the folder."""
    folder = record.get("outputs_dir")
    if not folder:
        return "RUN.json"
    if record["status"] == "ok":
        return str(Path(folder) / RUN_RECORD)
    beside = failed_beside(Path(folder))
    return str(beside if beside.is_file() else Path(folder) / FAILED_RECORD)


def model_name(model: dict[str, Any]) -> str:
    """The model's own name (planner/models/identity.py), as a folder name: `org--name`."""
    raw = display_name(model).replace("/", "--")
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", raw).strip("._-")[:80]
    return name or "model"


def run_name(config: dict[str, Any]) -> str:
    """A stable name for a config's outputs: model-quant-target."""
    return "-".join([model_name(config["model"]), *(str(config[g]["name"])
                                                      for g in ("quant", "target"))])


def check_name(name: str) -> None:
    if not name.strip() or "/" in name or name in (".", "..") or name.startswith(".") or \
            any(ord(c) < 32 or ord(c) == 127 for c in name) or len(name.encode()) > NAME_MAX:
        raise UsageError(f"--name {name[:60]!r}: a run name is one folder name under --outputs, "
                         f"plain (not empty, no '/' or control characters such as a "
                         f"newline, not starting with '.', at most {NAME_MAX} bytes)")


def source_key(steps: list[dict[str, Any]]) -> str | None:
    """The key of the step that produces the model: what makes it this model."""
    return next((s["key"] for s in steps if s.get("op") in OPS
                 and OPS[s["op"]].has(Trait.SOURCE)), None)


def check_destination(out_dir: Path, ir: dict[str, Any], overwrite: bool) -> None:
    """Refuse to publish over a folder that holds another model's deliverable (or files
    modelplan did not write), unless `overwrite`."""
    if overwrite or not out_dir.is_dir() or not any(out_dir.iterdir()):
        return
    fix = "pass --name NAME to publish under another folder, or --overwrite to replace it"
    try:
        previous = json.loads((out_dir / RUN_RECORD).read_text())
        steps, published = previous["steps"], previous.get("published") or {}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{out_dir}: holds files that no modelplan run wrote there; {fix}") \
            from exc
    if published and source_key(steps) != source_key(ir["steps"]):
        given = " ".join(previous.get("overrides") or []) or "the default config"
        raise UsageError(f"{out_dir}: holds the deliverable of another model (run "
                         f"{previous.get('run_id', '?')}: {given}); publishing this run there "
                         f"would replace it; {fix}")
