"""Review outputs: diff (added/removed/changed), Markdown and Mermaid (valid, stable)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from planner.planning import plan_from_overrides
from planner.render import render
from planner.review.diff import diff, render_md, render_text
from tests.conftest import run_cli


def ir(tmp: Path, *overrides: str) -> dict:
    return plan_from_overrides(["model=tiny_bert", *overrides], store=str(tmp)).to_json()


def test_diff_added_removed_changed(tmp_path: Path) -> None:
    cpu = ir(tmp_path, "target=cpu", "quant=none")
    htp = ir(tmp_path, "target=qnn_htp", "quant=w8a8")
    d = diff(cpu, htp)
    assert {s["id"] for s in d["added"]} == {"fix_shapes", "legalize", "quantize", "compile"}
    legalize = next(s for s in d["added"] if s["id"] == "legalize")
    assert legalize["why"].startswith("inserted by target-legalize")
    back = diff(htp, cpu)
    assert {s["id"] for s in back["removed"]} == {"fix_shapes", "legalize", "quantize",
                                                  "compile"}
    changed = {s["id"]: s["changes"] for s in d["changed"]}
    assert "reads model: normalize -> quantize" in changed["tag"]
    assert any(c.startswith("ep: cpu -> qnn") for c in changed["perf"])


def test_diff_names_the_rule_when_an_elision_goes_away(tmp_path: Path) -> None:
    d = diff(ir(tmp_path, "optim=none"), ir(tmp_path, "optim=transformer"))
    changes = next(s for s in d["changed"] if s["id"] == "optimize")["changes"]
    assert "action: elided -> run (no longer elided by idempotent-elision)" in changes
    assert "flags: [] -> ['gelu', 'layer_norm', 'matmul_add']" in changes
    assert {"path": "optim.name", "old": "none", "new": "transformer"} in d["config"]


def test_diff_of_equal_plans_is_empty(tmp_path: Path) -> None:
    a = ir(tmp_path)
    d = diff(a, a)
    assert d["summary"] == {"added": 0, "removed": 0, "changed": 0, "unchanged": 11}
    assert render_text(d).strip() == "Diff: 0 added, 0 removed, 0 changed, 11 unchanged."


def test_diff_markdown_is_a_table(tmp_path: Path) -> None:
    md = render_md(diff(ir(tmp_path, "quant=w8a8"), ir(tmp_path, "quant=w8a16")))
    rows = [ln for ln in md.splitlines() if ln.startswith("| changed |")]
    assert rows and all(ln.count("|") >= 4 for ln in rows)
    assert md.strip().endswith("unchanged.**")


def test_diff_cli(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(ir(tmp_path, "quant=w8a8")))
    b.write_text(json.dumps(ir(tmp_path, "quant=w8a16")))
    result = run_cli("diff", str(a), str(b), "--format", "md")
    assert result.returncode == 0 and result.stdout.startswith("### modelplan diff")
    bad = run_cli("diff", str(a), str(tmp_path / "missing.json"))
    assert bad.returncode == 2 and "missing.json: cannot read it (No such file or directory)" in bad.stderr


MERMAID_NODE = re.compile(r'^    ([A-Za-z_][A-Za-z0-9_]*)\["[^"\n]+"\]$')
MERMAID_EDGE = re.compile(r"^    ([A-Za-z_][A-Za-z0-9_]*) (-->|-\.->)(\|[a-z]+\|)? ([A-Za-z_][A-Za-z0-9_]*)$")


def test_mermaid_is_valid_and_stable(tmp_path: Path) -> None:
    plan = ir(tmp_path)
    out = render(plan, "mermaid")
    assert out == render(ir(tmp_path), "mermaid")
    lines = out.splitlines()
    assert lines[0] == "flowchart TD"
    nodes = {m.group(1) for ln in lines if (m := MERMAID_NODE.match(ln))}
    edges = [m.groups() for ln in lines if (m := MERMAID_EDGE.match(ln))]
    assert nodes == {s["id"] for s in plan["steps"]}
    assert all(a in nodes and b in nodes for a, _, _, b in edges)
    other = [ln for ln in lines[1:] if not MERMAID_NODE.match(ln) and not MERMAID_EDGE.match(ln)]
    assert all(ln.startswith(("    classDef ", "    class ")) for ln in other)
    assert ("normalize", "-.->", None, "optimize") in edges  # elided: dashed
    assert "    class optimize elided" in lines


def test_mermaid_marks_cached_steps_grey(tmp_path: Path) -> None:
    plan = ir(tmp_path)
    export = next(s for s in plan["steps"] if s["id"] == "export")
    entry = tmp_path / export["key"][:2] / export["key"]
    entry.mkdir(parents=True)
    (entry / "manifest.json").write_text("{}")
    out = render(ir(tmp_path), "mermaid")
    assert "    class export cached" in out and "classDef cached fill:#ddd" in out
