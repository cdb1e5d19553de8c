"""winml-cli's `eval` section -> `eval=task` (the task's metric for PyTorch, the fp32 export and
the build, with a verdict): its dataset's path, subset, split, samples, shuffle and seed, and its
`columns_mapping` as task roles (planner/models/evaluation.py `roles`). A dataset that is not on
this machine is imported as written and reported: the plan fails until it is."""

from __future__ import annotations

import string
from typing import Any

from planner.errors import ConfigError
from planner.models import datasets
from planner.models import evaluation as E
from planner.recipes.draft import Context
from planner.recipes.ledger import BadField

STEPS = ("eval",)
SETTINGS = {"path": "eval.dataset.path", "name": "eval.dataset.name",
            "split": "eval.dataset.split", "samples": "eval.dataset.samples",
            "shuffle": "eval.dataset.shuffle", "seed": "eval.dataset.seed"}
DROPPED = {
    "build_script": "winml-cli runs this script to build the dataset; modelplan runs no "
                    "scripts: run it once, then eval.dataset.path reads what it built",
    "revision": "modelplan reads the copy on this machine, whatever its revision; the eval "
                "key holds that copy's content digest",
    "streaming": "modelplan reads a local copy of the dataset; nothing is streamed",
    "label_mapping": "modelplan has no label mapping: labels are compared as the dataset "
                     "stores them",
}
FIELD_KEYS = {
    "keypoints_key": "the field of each annotation that holds the keypoints",
    "bbox_key": "the field of each annotation that holds the box",
    "area_key": "the field of each annotation that holds the area",
    "box_format": "how the boxes are written (xywh, xyxy)",
}
SPLIT_CHARS = frozenset(string.ascii_letters + string.digits + "_.-")  # the config schema's
WINML_NAMES = frozenset({*E.WINML_COLUMNS, "input_column", "label_column", "annotation_column"})


def map_eval(cx: Context) -> None:
    ledger = cx.ledger
    ev = ledger.get("eval")
    if ev is None:
        if ledger.has("eval"):
            ledger.mapped("eval", None, (), "null: no task evaluation (eval=none, as "
                          "modelplan's default); verify still checks the build against the "
                          "fp32 export", value=None)
        return
    if not isinstance(ev, dict):
        raise BadField("eval", "not a section (an object with task and dataset) or null")
    if cx.task not in E.EVAL:
        ledger.dropped("eval", f"modelplan has no task metric for {cx.task or 'this task'}; "
                       "verify checks the build against the fp32 export instead")
        return
    cx.draft.choose("eval", "task", "eval")
    metrics = ", ".join(E.EVAL[cx.task].metrics)
    if not ev:
        ledger.mapped("eval", "eval", STEPS, f"an empty section: {metrics} on the shipped "
                      "inputs")
    task = ev.get("task")
    same = task in (cx.task, None)
    if "task" in ev:
        ledger.mapped("eval.task", "eval", STEPS, f"eval=task: {metrics} for PyTorch, the fp32 "
                      f"export and the {cx.target} build" + ("" if same else
                      f"; modelplan scores the model's task ({cx.task}), winml-cli's pipeline "
                      f"is {task!r}"))
    if "dataset" in ev and not same:
        ledger.dropped("eval.dataset", f"chosen for winml-cli's {task!r} pipeline; modelplan "
                       f"scores the model's task ({cx.task}) on its shipped inputs")
    elif "dataset" in ev:
        _dataset(cx, ev["dataset"])


def _dataset(cx: Context, ds: Any) -> None:
    ledger = cx.ledger
    if ds is None:
        ledger.mapped("eval.dataset", "eval.dataset.path", STEPS, "null: the shipped inputs "
                      "(no labels: agreement with PyTorch's predictions)", value=None)
        return
    if not isinstance(ds, dict):
        raise BadField("eval.dataset", "not a section (an object with path, split, samples...)")
    if not ds:
        ledger.mapped("eval.dataset", "eval.dataset.path", STEPS, "an empty section: the "
                      "shipped inputs")
    for key, value in ds.items():
        path = f"eval.dataset.{key}"
        if key in SETTINGS:
            _setting(cx, key, value, _offline(cx, ds) if key == "path" else "")
        elif key == "columns_mapping":
            _columns(cx, value)
        elif key == "streaming" and value is False:
            ledger.mapped(path, None, STEPS, "false: modelplan reads a local copy")
        elif key in DROPPED:
            ledger.dropped(path, DROPPED[key])
        else:
            ledger.dropped(path, "not a dataset setting winml-cli reads")


def _valid(key: str, value: Any) -> str | None:
    """Why a dataset setting's value cannot be used (None: it can)."""
    if key in ("path", "name"):
        ok = value is None and key == "name" or isinstance(value, str) and value != ""
        return None if ok else "not a dataset id, path or subset name"
    if key == "split":
        ok = value is None or isinstance(value, str) and value != "" and \
            set(value) <= SPLIT_CHARS
        return None if ok else "not a split name (letters, digits, _ . -)"
    if key == "shuffle":
        return None if isinstance(value, bool) else "not true or false"
    top = 100000 if key == "samples" else 2**32 - 1
    ok = isinstance(value, int) and not isinstance(value, bool) and \
        (1 if key == "samples" else 0) <= value <= top
    return None if ok else f"not a whole number from {1 if key == 'samples' else 0} to {top}"


def _setting(cx: Context, key: str, value: Any, note: str) -> None:
    path, config = f"eval.dataset.{key}", SETTINGS[key]
    why = _valid(key, value)
    if why is not None:
        cx.ledger.dropped(path, f"{why}; {config} keeps modelplan's default")
        return
    cx.draft.set(config, value, path)
    cx.ledger.mapped(path, config, STEPS, note)


def _columns(cx: Context, mapping: Any) -> None:
    """columns_mapping -> eval.dataset.columns, by the role each name has for the task."""
    ledger, prefix = cx.ledger, "eval.dataset.columns_mapping"
    if not isinstance(mapping, dict) or not mapping:
        ledger.dropped(prefix, "not a mapping of winml-cli column names to columns")
        return
    taken: dict[str, str] = {}
    for name, column in mapping.items():
        path = f"{prefix}.{name}"
        if name in FIELD_KEYS:
            ledger.dropped(path, f"{FIELD_KEYS[name]}: modelplan has no setting for it (its "
                           f"{cx.task} metric reads the annotation's own fields)")
            continue
        if name not in WINML_NAMES:
            ledger.dropped(path, "not a columns_mapping name winml-cli reads")
            continue
        if not isinstance(column, str) or not column:
            ledger.dropped(path, "not a column name")
            continue
        try:
            role = next(iter(E.roles(cx.task, {name: column})))
        except ConfigError as exc:
            why = exc.lines[0].partition(": ")[2].partition("; ")[0]
            ledger.dropped(path, f"{why}: modelplan scores the model's own task")
            continue
        if role in taken:
            ledger.dropped(path, f"{taken[role]} already maps the {role} role")
            continue
        taken[role] = path
        cx.draft.set(f"eval.dataset.columns.{role}", column, path)
        ledger.mapped(path, f"eval.dataset.columns.{role}", STEPS, f"the {role} role")


def _offline(cx: Context, ds: dict[str, Any]) -> str:
    """What planning would say, said now: a dataset this machine does not have fails the
    plan (a warning of the build, and the path's note); blank when it is here."""
    path = ds["path"]
    if _valid("path", path) is not None:
        return ""
    try:
        kind, where = datasets.locate(path)
    except ConfigError:
        pass
    else:
        return f"read from the local cache ({where})" if kind == "hub_cache" else ""
    name = ds.get("name") if isinstance(ds.get("name"), str) else None
    if isinstance(ds.get("build_script"), str):
        fix = f"winml-cli's {ds['build_script']} builds it there"
    elif datasets.looks_like_id(path):
        args = f"{path!r}" + (f", {name!r}" if name else "")
        fix = (f"it is saved on this machine (datasets.load_dataset({args}).save_to_disk(DIR) "
               "where there is network, then eval.dataset.path=DIR)")
    else:
        fix = "it is there"
    warning = (f"dataset {path} is not available offline; `modelplan plan` fails until {fix}, "
               "or set eval=none")
    cx.warnings.append(warning)
    return warning
