"""What a config change does to a plan: steps added, removed and changed, with reasons."""

from __future__ import annotations

from typing import Any

ABSENT = object()  # a key one side does not have (unlike null, which it has)
PROOFS = (("inserted_by", "inserted by"), ("moved_by", "moved by"), ("proof", "elided by"))


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict) and node:
        return {k: v for key, sub in node.items() for k, v in flatten(sub, f"{prefix}{key}.").items()}
    return {prefix[:-1]: node}


def _why(step: dict[str, Any]) -> str | None:
    for field, verb in PROOFS:
        if field in step:
            return f"{verb} {step[field]['rule']}: {step[field]['conclusion']}"
    return None


def _tool_changes(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, str]]:
    """The tool versions the two plans' keys were made with that differ."""
    ta, tb = a.get("tools") or {}, b.get("tools") or {}
    return [{"name": t, "old": ta.get(t, "absent"), "new": tb.get(t, "absent")}
            for t in sorted(set(ta) | set(tb)) if ta.get(t) != tb.get(t)]


def _changes(a: dict[str, Any], b: dict[str, Any], keys_a: dict, keys_b: dict,
             tools: list[dict[str, str]] | None = None) -> list[str]:
    """Why step a became step b: params, action, the versions of the tools it uses, inputs."""
    out = []
    pa, pb = flatten(a["params"]), flatten(b["params"])
    for k in sorted(set(pa) | set(pb)):
        if pa.get(k, ABSENT) != pb.get(k, ABSENT):
            out.append(f"{k}: {_show(pa.get(k, ABSENT))} -> {_show(pb.get(k, ABSENT))}")
    if a["action"] != b["action"]:
        reason = (f" ({_why(b)})" if "proof" in b else
                  f" (no longer elided by {a['proof']['rule']})" if "proof" in a else "")
        out.append(f"action: {a['action']} -> {b['action']}{reason}")
    uses = set(a.get("tools") or ()) | set(b.get("tools") or ())
    out += [f"{t['name']}: {t['old']} -> {t['new']} (a tool it uses)" for t in tools or []
            if t["name"] in uses]
    for role in sorted(set(a["inputs"]) | set(b["inputs"])):
        sa, sb = a["inputs"].get(role), b["inputs"].get(role)
        if sa != sb:
            out.append(f"reads {role}: {sa} -> {sb}")
        elif sa is not None and keys_a.get(sa) != keys_b.get(sb):
            out.append(f"input {sa} changed")
    if not out and a["key"] != b["key"]:
        out.append("key changed: the op's version or its tool versions differ")
    if (_why(a) or "") != (_why(b) or "") and _why(b) and a["action"] == b["action"]:
        out.append(_why(b))
    return out


def _show(v: Any) -> str:
    if v is ABSENT:
        return "absent"
    if v is None:
        return "null"
    return str(v).lower() if isinstance(v, bool) else str(v)


def diff(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Compare two Plan IRs by step id."""
    sa, sb = {s["id"]: s for s in a["steps"]}, {s["id"]: s for s in b["steps"]}
    keys_a = {i: s["key"] for i, s in sa.items()}
    keys_b = {i: s["key"] for i, s in sb.items()}
    ca, cb = flatten(a["config"]), flatten(b["config"])
    config = [{"path": k, "old": ca.get(k, ABSENT), "new": cb.get(k, ABSENT)}
              for k in sorted(set(ca) | set(cb)) if ca.get(k, ABSENT) != cb.get(k, ABSENT)]
    added = [{"id": i, "op": sb[i]["op"], "why": _why(sb[i]) or "the new config asks for it"}
             for i in sb if i not in sa]
    removed = [{"id": i, "op": sa[i]["op"], "why": (f"no longer {_why(sa[i])}" if _why(sa[i])
                                                     else "the new config does not ask for it")}
               for i in sa if i not in sb]
    tools = _tool_changes(a, b)
    changed, same = [], []
    for i, new in sb.items():
        if i in sa:
            if sa[i]["key"] == new["key"] and sa[i]["action"] == new["action"]:
                same.append(i)
            else:
                changed.append({"id": i, "op": new["op"],
                                "changes": _changes(sa[i], new, keys_a, keys_b, tools)})
    for c in config:  # JSON-safe: absent becomes a string
        c["old"], c["new"] = (_show(v) if v is ABSENT else v for v in (c["old"], c["new"]))
    symbolic = {side: [x["reason"] for x in ir["symbolic_sources"]]
                for side, ir in (("old", a), ("new", b)) if ir.get("symbolic_sources")}
    return {"config": config, "tools": tools, "added": added, "removed": removed, "changed": changed,
            "unchanged": same, **({"symbolic": symbolic} if symbolic else {}),
            "summary": {"added": len(added), "removed": len(removed), "changed": len(changed),
                        "unchanged": len(same)}}


def symbolic_notes(d: dict[str, Any]) -> list[str]:
    """A line per plan whose source keys are symbolic (it was planned without weights)."""
    return [f"{side} plan has symbolic source keys ({why}): structure only"
            for side, reasons in d.get("symbolic", {}).items() for why in reasons]


def summary_line(d: dict[str, Any]) -> str:
    s = d["summary"]
    return (f"Diff: {s['added']} added, {s['removed']} removed, {s['changed']} changed, "
            f"{s['unchanged']} unchanged.")


def render_text(d: dict[str, Any]) -> str:
    lines = [f"! {n}" for n in symbolic_notes(d)] + ([""] if symbolic_notes(d) else [])
    if d["config"]:
        lines.append("Config:")
        lines += [f"  {c['path']}: {_show(c['old'])} -> {_show(c['new'])}" for c in d["config"]]
        lines.append("")
    if d.get("tools"):
        lines.append("Tools:")
        lines += [f"  {t['name']}: {t['old']} -> {t['new']}" for t in d["tools"]]
        lines.append("")
    lines += [f"  + {s['id']:<10} {s['why']}" for s in d["added"]]
    lines += [f"  - {s['id']:<10} {s['why']}" for s in d["removed"]]
    for s in d["changed"]:
        lines.append(f"  ~ {s['id']:<10} {s['changes'][0] if s['changes'] else ''}")
        lines += [f"    {'':<10} {c}" for c in s["changes"][1:]]
    lines += ["", summary_line(d)]
    return "\n".join(lines) + "\n"


def render_md(d: dict[str, Any], title: str | None = "### modelplan diff") -> str:
    def cell(t: str) -> str:
        return t.replace("|", "\\|")

    lines = [title, ""] if title else []
    lines += [ln for n in symbolic_notes(d) for ln in (f"> **Note:** {cell(n)}", "")]
    if d["config"]:
        lines += ["| config | old | new |", "|---|---|---|"]
        lines += [f"| `{c['path']}` | `{_show(c['old'])}` | `{_show(c['new'])}` |"
                  for c in d["config"]]
        lines.append("")
    if d.get("tools"):
        lines += ["| tool | old | new |", "|---|---|---|"]
        lines += [f"| `{t['name']}` | `{t['old']}` | `{t['new']}` |" for t in d["tools"]]
        lines.append("")
    lines += ["| change | step | details |", "|---|---|---|"]
    lines += [f"| added | `{s['id']}` | {cell(s['why'])} |" for s in d["added"]]
    lines += [f"| removed | `{s['id']}` | {cell(s['why'])} |" for s in d["removed"]]
    lines += [f"| changed | `{s['id']}` | {cell('; '.join(s['changes']))} |" for s in d["changed"]]
    lines += ["", f"**{summary_line(d)}**"]
    return "\n".join(lines) + "\n"
