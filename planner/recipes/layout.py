"""Where recipes sit and what their paths say: `<org>_<name>/[<ep>/<device>/]<task>_<precision>_
config[_<role>].json`. The folder names the model, the `<ep>/<device>` folders the target, the
file name the task, precision and (for a model built as several graphs) the graph's role."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from planner.errors import UsageError
from planner.recipes import winml
from planner.recipes.ledger import BadField

PAIR_ROLES = ("encoder", "decoder")
UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class RecipeFile:
    path: Path
    shown: str                       # the path as messages name it
    model_dir: str                   # the folder that names the model (org_name)
    ep: str | None                   # from an <ep>/<device> folder
    device: str | None
    task: str                        # from the file name
    precision: str | None
    role: str | None                 # encoder, decoder, image-encoder, ...

    @property
    def group(self) -> tuple[Path, str, str | None]:
        """Files of one build: the same folder, task and precision."""
        return self.path.parent, self.task, self.precision

    def read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise UsageError(f"{self.shown}: cannot read it ({exc.strerror or exc})") from exc
        except ValueError as exc:
            raise BadField("<file>", f"not valid JSON ({exc}); fix the file") from exc
        if not isinstance(data, dict) or not set(data) & set(winml.SECTIONS):
            raise BadField("<file>", "not a winml-cli build recipe (no loader, export, optim, "
                           "quant, compile or eval section)")
        return data


def parse_name(stem: str) -> tuple[str, str | None, str | None]:
    """(task, precision, role) from a recipe file's stem, e.g. `image-to-text_fp16_config_encoder`
    or `translation_fp16_decoder_config`."""
    group, role = stem, None
    if "_config_" in stem:
        group, role = stem.split("_config_", 1)
    elif stem.endswith("_config"):
        group = stem.removesuffix("_config")
        for p in winml.PRECISIONS:
            if f"_{p}_" in group:
                task, role = group.rsplit(f"_{p}_", 1)
                group = f"{task}_{p}"
    for p in winml.PRECISIONS:
        if group.endswith(f"_{p}"):
            return group.removesuffix(f"_{p}"), p, role or None
    return group, None, role or None


def recipe_file(path: Path, root: Path | None = None) -> RecipeFile:
    """What a recipe's path says. root: the directory an import walks (for display)."""
    path = path.resolve()
    shown = path.relative_to(root).as_posix() if root and root in path.parents else str(path)
    parent, grand = path.parent, path.parent.parent
    ep = device = None
    model_dir = parent
    if parent.name.lower() in winml.DEVICES and grand.name.lower() in winml.EP_NAMES:
        ep, device, model_dir = grand.name.lower(), parent.name.lower(), grand.parent
    task, precision, role = parse_name(path.stem)
    return RecipeFile(path, shown, model_dir.name, ep, device, task, precision, role)


def find_recipes(root: Path) -> list[RecipeFile]:
    """Every recipe under a directory: files named `*_config*.json`, sorted by path."""
    return [recipe_file(p, root) for p in sorted(root.rglob("*.json"))
            if "_config" in p.stem and not any(part.startswith(".") for part in
                                               p.relative_to(root).parts)]


def builds(files: list[RecipeFile]) -> list[list[RecipeFile]]:
    """Recipes grouped into builds: an encoder and a decoder file of one model and precision
    are one build (one modelplan config); every other file is a build of its own."""
    by_group: dict[tuple[Path, str, str | None], list[RecipeFile]] = {}
    for f in files:
        by_group.setdefault(f.group, []).append(f)
    out, seen = [], set()
    for f in files:
        if f.path in seen:
            continue
        pair = [g for g in by_group[f.group] if g.role in PAIR_ROLES]
        members = sorted(pair, key=lambda g: PAIR_ROLES.index(g.role or "")) \
            if f.role in PAIR_ROLES and len({g.role for g in pair}) == len(pair) else [f]
        seen.update(m.path for m in members)
        out.append(members)
    return out


def with_sibling(f: RecipeFile) -> list[RecipeFile]:
    """A single encoder or decoder file together with its sibling, when that exists."""
    if f.role not in PAIR_ROLES:
        return [f]
    siblings = [recipe_file(p) for p in f.path.parent.glob("*.json") if p != f.path]
    mates = [s for s in siblings if s.group == f.group and s.role in PAIR_ROLES
             and s.role != f.role]
    shown = Path(f.shown).parent
    mates = [replace(m, shown=(shown / m.path.name).as_posix()) for m in mates[:1]]
    return sorted([f, *mates], key=lambda g: PAIR_ROLES.index(g.role or ""))


def model_id_from_folder(folder: str) -> str | None:
    """`org_name` -> `org/name` (the first underscore), as winml-cli names recipe folders."""
    org, sep, name = folder.partition("_")
    return f"{org}/{name}" if sep and org and name else None


def config_name(model_id: str, files: list[RecipeFile]) -> str:
    """A primary config name: model, task, precision, role of a single graph, target folder."""
    f = files[0]
    parts = [model_id.replace("/", "_"), f.task, f.precision or ""]
    if len(files) == 1 and f.role:
        parts.append(f.role)
    if f.ep:
        parts.append(f.ep if f.device == f.ep else f"{f.ep}-{f.device}")
    return UNSAFE.sub("_", "-".join(p for p in parts if p)).lower()
