"""The layers and the single sources DESIGN.md asks for, checked on the code itself: the
planner imports no executor, executors decide by declarations (never by op name), every trait
and declaration field is read by some code, and every list has one source."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import fields
from pathlib import Path

import schemas
from planner.core.ops import FUSIONS, OPS, FactName, Op, Trait
from planner.core.plan import ACTIONS
from planner.core.targets import TARGETS
from tests.conftest import ROOT

CODE = [p for d in ("planner", "executors", "hydra_plugins") for p in (ROOT / d).rglob("*.py")]


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_no_planner_module_imports_an_executor() -> None:
    leaks = {str(p.relative_to(ROOT)): sorted(m for m in imports(p) if m.split(".")[0] ==
                                               "executors")
             for p in (ROOT / "planner").rglob("*.py")}
    assert {p: m for p, m in leaks.items() if m} == {}


def test_executors_make_no_decision_by_op_name() -> None:
    by_name = re.compile(r"(\bop|\[[\"']op[\"']\])\s*(==|!=| in | not in )\s*[\(\[\{\"']")
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in (ROOT / "executors").rglob("*.py")
            for i, line in enumerate(p.read_text().splitlines(), 1) if by_name.search(line)]
    assert hits == []


def target_name_decisions(path: Path) -> list[str]:
    """Lines of `path` that decide by a target's or an EP's name: a name literal taken from the
    target table (target, EP, backend, provider; docstrings aside), any ONNX Runtime provider
    name, or a name split apart on "_" (`profile.split("_")[0]`)."""
    names = {v for t in TARGETS.values() for v in (t.name, t.ep, t.backend, t.provider) if v}
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)}
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                and (node.value in names or "ExecutionProvider" in node.value):
            hits.append(f"{node.lineno}: {node.value!r}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("split", "rsplit", "partition", "rpartition") \
                and any(isinstance(a, ast.Constant) and a.value == "_" for a in node.args):
            hits.append(f"{node.lineno}: .{node.func.attr}(\"_\")")
    return hits


def test_executors_make_no_decision_by_target_name() -> None:
    hits = {str(p.relative_to(ROOT)): found for p in (ROOT / "executors").rglob("*.py")
            if (found := target_name_decisions(p))}
    assert hits == {}, "read the target's declaration (executors/runtime/adapters.declared)"


def _source_without_ops() -> str:
    return "\n".join(p.read_text() for p in CODE if p.name != "ops.py")


def test_every_trait_and_op_field_is_read() -> None:
    text = _source_without_ops()
    unread = [t.name for t in Trait if f"Trait.{t.name}" not in text and f"T.{t.name}" not in text]
    assert unread == []
    unread_fields = [f.name for f in fields(Op) if not re.search(rf"\.{f.name}\b(?!\()", text)]
    assert unread_fields == []


def test_plan_schema_lists_exactly_the_declared_ops() -> None:
    step = schemas.load("plan")["$defs"]["step"]["properties"]
    assert step["op"]["enum"] == list(OPS)


def test_fusion_flags_have_one_source() -> None:
    from executors.runtime.ortopt import FUSED_OPS, FUSION_OPTION

    flags = schemas.load("config")["properties"]["optim"]["properties"]["flags"]["items"]["enum"]
    assert sorted(flags) == sorted(FUSIONS) == sorted(FUSION_OPTION) == sorted(FUSED_OPS)


def test_actions_and_facts_have_one_source() -> None:
    run = schemas.load("run")["properties"]["steps"]["items"]["properties"]["action"]["enum"]
    plan = schemas.load("plan")["$defs"]["step"]["properties"]["action"]["enum"]
    assert tuple(run) == tuple(plan) == ACTIONS
    from executors.run.checkers import CHECKERS
    from planner.core.facts import KINDS

    assert set(KINDS) == set(CHECKERS) == set(FactName)
    declared = {e.fact for op in OPS.values() for e in op.ensures} | \
        {r.fact for op in OPS.values() for r in op.requires}
    assert declared <= set(FactName)


def test_executors_are_found_by_entry_point() -> None:
    from planner.cli.app import executor_class, executor_names

    assert "local" in executor_names()
    assert executor_class("local").name == "local"
    meta = json.loads(json.dumps(schemas.load("config")["properties"]["executor"]))
    assert "local" in json.dumps(meta)
