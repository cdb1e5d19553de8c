"""One build's recipe files -> a draft modelplan config and the report of every field.

A single recipe is one build; an encoder recipe and a decoder recipe of one model are one build
too (one config, whose plan exports both graphs). Settings both files give must agree; where the
decoder's differ, the encoder's are used and the decoder's fields are reported as dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from planner.core.ops import bits
from planner.recipes.draft import Context, Draft
from planner.recipes.evaluation import map_eval
from planner.recipes.export import map_export
from planner.recipes.layout import RecipeFile, config_name
from planner.recipes.ledger import DROPPED, BadField, Entry, Ledger, Unsupported
from planner.recipes.model import map_loader, map_model_id
from planner.recipes.optim import choose_optim, map_extras, map_optim
from planner.recipes.quant import kind_of, map_quant
from planner.recipes.target import map_compile, resolve_target

LEFTOVER = "modelplan has no setting for it"
IMPORTED, UNSUPPORTED, FAILED = "imported", "unsupported", "failed"


@dataclass
class Build:
    """What an import made of one build (or why it could not)."""

    files: list[RecipeFile]
    status: str = IMPORTED
    message: str = ""                # unsupported or failed: `field: why`
    name: str = ""                   # the primary config's name
    row: dict[str, str] = field(default_factory=dict)  # model id, type, task, target, precision
    draft: Draft | None = None
    entries: list[Entry] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # imported, but will not plan until...

    @property
    def shown(self) -> str:
        return " + ".join(f.shown for f in self.files)


def convert(files: list[RecipeFile], target: str | None = None,
            model_id: str | None = None) -> Build:
    """Map one build's recipe files; a recipe modelplan cannot build is a Build with status
    unsupported or failed and a one-line `field: why`."""
    build = Build(files)
    pair = len(files) > 1 or files[0].role in ("encoder", "decoder")
    contexts: list[Context] = []
    for f in files:
        role = f.role if pair else None
        cx = Context(Ledger({}), Draft(), role)
        contexts.append(cx)
        try:
            cx.ledger = Ledger(f.read(), f"{role}:" if role and len(files) > 1 else "")
            _map(cx, f, target, model_id)
        except (Unsupported, BadField) as exc:
            build.status = UNSUPPORTED if isinstance(exc, Unsupported) else FAILED
            where = f"{f.shown}: " if len(files) > 1 else ""
            build.message = where + exc.lines[0]
            build.row = _row(cx, f, f.precision or "")
            return build
    draft, entries = _merge(contexts)
    first = contexts[0]
    build.row = _row(first, files[0])
    build.name = config_name(str(draft.get("model.hub_id")), files)
    hub_name = str(draft.get("model.hub_id")).rpartition("/")[2]
    role = files[0].role if not pair and files[0].role else ""
    draft.set("model.name", "-".join(p for p in (hub_name, first.task, role) if p),
              "the model id and task")
    build.draft, build.entries = draft, entries
    build.warnings = list(dict.fromkeys(w for cx in contexts for w in cx.warnings))
    return build


def _map(cx: Context, f: RecipeFile, target: str | None, model_id: str | None) -> None:
    cx.kind = kind_of(cx.ledger.get("quant"))
    map_model_id(cx, f, model_id)
    map_loader(cx)
    resolve_target(cx, f, target)
    map_quant(cx, f.precision)
    map_compile(cx)
    map_export(cx)
    map_optim(cx)
    map_eval(cx)
    map_extras(cx)
    cx.ledger.leftovers(LEFTOVER)


def _row(cx: Context, f: RecipeFile, given: str | None = None) -> dict[str, str]:
    """The table row; `given`: the precision the file name says, for a build that stopped."""
    recipe = cx.ledger.recipe if isinstance(cx.ledger.recipe, dict) else {}
    quant = recipe.get("quant")
    loader = recipe.get("loader") if isinstance(recipe.get("loader"), dict) else {}
    return {"model_id": str(cx.draft.get("model.hub_id") or ""),
            "model_type": cx.model_type or str(loader.get("model_type", "")),
            "task": cx.task or str(loader.get("task", "")),
            "target": cx.target or (f"{f.ep}/{f.device}" if f.ep else ""),
            "precision": given if given is not None else precision(cx.kind, quant)}


def precision(kind: str, quant: Any) -> str:
    if kind == "none":
        return "fp32"
    if kind == "fp16":
        return "fp16"
    w, a = (quant.get(k, "uint8") for k in ("weight_type", "activation_type"))
    return f"w{bits(w)}a{bits(a)}" + ("_pc" if quant.get("per_channel") else "")


def _merge(contexts: list[Context]) -> tuple[Draft, list[Entry]]:
    """One draft from the files of a build: the first file's settings, the others' where they
    add to them; a conflicting later field is reported as dropped."""
    first = contexts[0]
    draft, entries = first.draft, list(first.ledger.entries)
    for cx in contexts[1:]:
        conflicts = {}
        for group, option in cx.draft.choices.items():
            if group == "optim":
                continue
            if draft.choices.get(group, option) != option:
                conflicts[group] = draft.choices[group]
        for path, value in _leaves(cx.draft.values):
            if path.startswith("optim."):
                continue
            have = draft.get(path, ...)
            if have is ...:
                draft.set(path, value, cx.draft.sources.get(path, [""])[0])
            elif have != value:
                conflicts[path] = have
        entries += [_against(e, conflicts, first.role) for e in cx.ledger.entries]
        choose_optim(draft, [*draft.fusions, *cx.draft.fusions])
    return draft, entries


def _against(e: Entry, conflicts: dict[str, Any], first: str | None) -> Entry:
    hit = next((p for p in conflicts if e.config and (e.config == p or e.config.startswith(
        p + ".") or p.startswith(e.config + "."))), None)
    if hit is None or e.outcome == DROPPED:
        return e
    return Entry(e.field, e.value, DROPPED, None, (), f"the {first} recipe sets {hit}="
                 f"{conflicts[hit]!r}, and one config builds both graphs")


def _leaves(node: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for k, v in node.items():
        if isinstance(v, dict) and v:
            out += _leaves(v, f"{prefix}{k}.")
        else:
            out.append((f"{prefix}{k}", v))
    return out
