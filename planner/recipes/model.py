"""`loader` (and the model id) -> `model.*`: the hub id from the folder name or
`quant.model_id`, the task, the class and whether custom code is trusted. The model itself is
read from the Hugging Face cache, or from a local copy with `model.path=DIR`."""

from __future__ import annotations

import re

from planner.models import tasks as T
from planner.recipes import winml
from planner.recipes.draft import Context
from planner.recipes.layout import RecipeFile, model_id_from_folder
from planner.recipes.ledger import BadField, Unsupported

HUB_ID = r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)?$"
RESOLVE = ("resolve",)
LOADS = ("resolve", "export")


def map_model_id(cx: Context, f: RecipeFile, given: str | None) -> None:
    """model.hub_id: --model-id, else quant.model_id, else the folder name (org_name)."""
    ledger = cx.ledger
    from_folder = model_id_from_folder(f.model_dir)
    from_quant = ledger.get("quant.model_id")
    model_id = given or from_quant or from_folder
    if model_id is None:
        raise BadField("quant.model_id", f"no model id: the folder {f.model_dir!r} is not named "
                       "org_name and the recipe has no quant.model_id; pass --model-id ORG/NAME")
    if not isinstance(model_id, str) or not re.match(HUB_ID, model_id):
        raise BadField("quant.model_id", f"{model_id!r} is not a Hugging Face model id "
                       "(org/name); pass --model-id ORG/NAME")
    if from_quant is not None and from_quant != model_id:
        ledger.dropped("quant.model_id", f"--model-id {given} is used instead")
    elif from_quant is not None:
        folder = "" if from_folder in (None, model_id) else f" (the folder says {from_folder})"
        ledger.mapped("quant.model_id", "model.hub_id", RESOLVE, f"the model id{folder}")
    source = "(--model-id)" if given else "quant.model_id" if model_id == from_quant \
        else "(model folder)"
    if source != "quant.model_id":
        ledger.mapped(source, "model.hub_id", RESOLVE, "the model id", value=given or f.model_dir)
    cx.draft.choose("model", "hub_cache", "the model id")
    cx.draft.set("model.hub_id", model_id, source)


def map_loader(cx: Context) -> None:
    ledger, draft = cx.ledger, cx.draft
    loader = ledger.get("loader") or {}
    if not isinstance(loader, dict):
        raise BadField("loader", "not a section (an object with task, model_class, ...)")
    cx.model_type = _model_type(cx, loader.get("model_type") or ledger.get("quant.model_type"))
    _task(cx, loader.get("task"))
    _model_class(cx, loader.get("model_class"))
    trust = loader.get("trust_remote_code")
    if trust is not None:
        if not isinstance(trust, bool):
            raise BadField("loader.trust_remote_code", f"{trust!r} is not true or false")
        draft.set("model.trust_remote_code", trust, "loader.trust_remote_code")
        ledger.mapped("loader.trust_remote_code", "model.trust_remote_code", LOADS)
    for key, why in (("module_path", ("modelplan exports whole models (or an encoder-decoder's "
                                       "two graphs), not one submodule")),
                     ("user_script", ("modelplan loads transformers classes and runs no user "
                                      "scripts"))):
        if loader.get(key):
            raise Unsupported(f"loader.{key}", why)
        if key in loader:
            ledger.mapped(f"loader.{key}", None, LOADS, "not set: the whole model, as modelplan "
                          "loads it")


def _model_type(cx: Context, name: object) -> str:
    field = "loader.model_type" if cx.ledger.get("loader.model_type") else "quant.model_type"
    if name is None:
        return ""
    if not isinstance(name, str):
        raise BadField(field, f"{name!r} is not a model type name")
    if name in winml.OWN_MODELS:
        raise Unsupported(field, f"{name!r} is {winml.OWN_MODELS[name]}")
    base, tower = winml.TYPE_ALIASES.get(name, (name, ""))
    mt = T.MODEL_TYPES.get(base)
    if mt is None:
        note = (f"{base!r} is not in modelplan's catalogue (planner/models/tasks.py): it plans only if "
                "its config.json shows text, image or audio inputs modelplan derives")
    else:
        note = f"modelplan reads the type from config.json ({base}: {mt.modality})"
        note += f"; the {tower}" if tower else ""
    if field == "loader.model_type":
        cx.ledger.mapped(field, None, LOADS, note)
    return base


def _task(cx: Context, task: object) -> None:
    ledger, draft = cx.ledger, cx.draft
    mt = T.MODEL_TYPES.get(cx.model_type)
    if cx.pair:
        if mt is None or mt.modality not in T.GRAPHS:
            raise Unsupported("loader.model_type", f"{cx.model_type or 'no model type'!r} is "
                              "not an encoder-decoder model modelplan builds, yet the recipe is "
                              f"its {cx.role} graph")
        cx.task = mt.tasks[0]
        draft.set("model.task", cx.task, "loader.model_type")
        if task is not None:
            ledger.mapped("loader.task", "model.task", LOADS, f"the {cx.role} graph of this "
                          f"{cx.task} model (modelplan builds both graphs from one config)")
        _quant_task(cx, task)
        return
    if task is None:
        raise BadField("loader.task", "not set; winml-cli needs it for a Hugging Face build "
                       f"(one of: {', '.join(T.TASKS)})")
    if not isinstance(task, str) or task not in T.TASKS:
        raise Unsupported("loader.task", f"{task!r} is not a task modelplan builds (one of: "
                          f"{', '.join(T.TASKS)})")
    if mt is not None and task not in mt.tasks:
        raise Unsupported("loader.task", f"{task!r} is not a task modelplan builds for model "
                          f"type {cx.model_type!r} (it builds: {', '.join(mt.tasks)})")
    cx.task = str(task)
    draft.set("model.task", cx.task, "loader.task")
    ledger.mapped("loader.task", "model.task", LOADS)
    _quant_task(cx, task)


def _quant_task(cx: Context, task: object) -> None:
    quant_task = cx.ledger.get("quant.task")
    if quant_task is None:
        return
    if quant_task == task:
        cx.ledger.mapped("quant.task", None, ("quantize",), "the model's task, which "
                         "calibration samples follow")
    else:
        cx.ledger.dropped("quant.task", f"differs from loader.task {task!r}; modelplan "
                          "calibrates with samples for the model's task")


def _model_class(cx: Context, cls: object) -> None:
    ledger, draft = cx.ledger, cx.draft
    if cls is None:
        if ledger.has("loader.model_class"):
            ledger.mapped("loader.model_class", None, LOADS, "the task's class")
        return
    if not isinstance(cls, str):
        raise BadField("loader.model_class", f"{cls!r} is not a class name")
    if cls in winml.OWN_CLASSES:
        raise Unsupported("loader.model_class", f"{cls!r} is {winml.OWN_CLASSES[cls]}")
    role = winml.wrapper_role(cls)
    if role is not None:
        if role != cx.role:
            raise Unsupported("loader.model_class", f"{cls!r} is winml-cli's wrapper for the "
                              f"{role} graph of an encoder-decoder model, but no {role} recipe "
                              "file sits beside it (name them *_config_encoder.json and "
                              "*_config_decoder.json)")
        draft.set("model.model_class", None, "loader.model_class")
        ledger.mapped("loader.model_class", "model.model_class", LOADS,
                      f"winml-cli's wrapper for the {role} graph; modelplan exports it from the "
                      f"model's own class ({T.TASKS[cx.task].auto_class})")
        return
    auto = T.TASKS[cx.task].auto_class
    if cls == auto:
        draft.set("model.model_class", None, "loader.model_class")
        ledger.mapped("loader.model_class", "model.model_class", LOADS,
                      "the task's Auto class, which modelplan uses when model_class is null")
        return
    draft.set("model.model_class", cls, "loader.model_class")
    ledger.mapped("loader.model_class", "model.model_class", LOADS)
