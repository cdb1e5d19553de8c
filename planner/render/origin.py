"""For a config imported from winml-cli recipes (`origin` in the config): which steps each recipe
field shaped, and which fields were dropped and why."""

from __future__ import annotations

from collections import Counter
from typing import Any


def fields(ir: dict[str, Any]) -> list[dict[str, Any]]:
    return list((ir["config"].get("origin") or {}).get("fields", []))


def by_field(ir: dict[str, Any]) -> list[tuple[list[str], dict[str, Any]]]:
    """(the ids of the steps it shaped, field) for every mapped field, in plan order; a field
    no step of this plan takes (one this target does not have, or none at all) comes last."""
    order = {s["id"]: i for i, s in enumerate(ir["steps"])}
    rows = []
    for f in fields(ir):
        if f["outcome"] == "mapped":
            rows.append(([s["id"] for s in ir["steps"] if s["op"] in f["steps"]], f))
    return sorted(rows, key=lambda r: order[r[0][0]] if r[0] else len(order))


def summary(ir: dict[str, Any]) -> str | None:
    """One line for the text plan, or None for a config that was not imported."""
    origin = ir["config"].get("origin")
    if not origin:
        return None
    c = Counter(f["outcome"] for f in origin["fields"])
    return (f"From winml-cli recipe {', '.join(origin['recipes'])}: {c['mapped']} fields "
            f"mapped, {c['dropped']} dropped (`plan --format md` shows them by step).")


def markdown(ir: dict[str, Any], cell: Any) -> list[str]:
    """The recipe section of a Markdown plan (empty for a config that was not imported)."""
    origin = ir["config"].get("origin")
    if not origin:
        return []
    elided = {s["id"] for s in ir["steps"] if s["action"] == "elided"}
    recipes = ", ".join(f"`{r}`" for r in origin["recipes"])
    lines = ["", f"#### From the winml-cli recipe {recipes}", "",
             "| recipe field | value | steps | config | how |", "|---|---|---|---|---|"]
    for ids, f in by_field(ir):
        steps = ", ".join(f"~~`{i}`~~" if i in elided else f"`{i}`" for i in ids) or "—"
        lines.append(f"| `{f['field']}` | `{cell(f['value'])}` | {steps} | "
                     f"{cell(f['config'] or '')} | {cell(f['note'])} |")
    dropped = [f for f in origin["fields"] if f["outcome"] == "dropped"]
    if dropped:
        lines += ["", f"<details><summary>Recipe fields not applied ({len(dropped)})</summary>",
                  "", "| recipe field | value | why |", "|---|---|---|"]
        lines += [f"| `{f['field']}` | `{cell(f['value'])}` | {cell(f['note'])} |"
                  for f in dropped]
        lines += ["", "</details>"]
    return lines
