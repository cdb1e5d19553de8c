"""The layers and the single sources docs/architecture.md asks for, checked on the code
itself: the planner imports no executor, the parts of planner/ and executors/ stand in a declared order
and a part imports only parts below it, executors decide by declarations (never by op name),
every trait and declaration field is read by some code, and every list has one source."""

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

# The parts of each tree, lowest first (docs/architecture.md §7 names them): a part imports
# only parts before it. The modules directly at the top of a tree (planning.py, local.py,
# execution.py) stand above every part. A listed part may not exist yet.
PARTS = {
    "planner": ("support", "config", "models", "core", "rules", "render", "review", "recipes",
                "cli"),
    "executors": ("store", "onnx", "runtime", "generation", "samples", "diagnosis", "evaluation",
                  "run", "steps", "publish", "commands", "ray"),
}

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


def imported_parts(path: Path, top: str, source: str | None = None) -> dict[str, int]:
    """{part of `top`: the first line importing it} for every import in `path` (or in
    `source`, read as if it were `path`), inside functions too, in any form
    (`import top.part.m`, `from top.part import m`, `from top import part`, relative)."""
    rel = path.relative_to(ROOT).with_suffix("").parts
    package = rel if path.name == "__init__.py" else rel[:-1]
    package = package[:-1] if package[-1:] == ("__init__",) else package
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text() if source is None else source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1],
                                 *([node.module] if node.module else [])])
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if len(parts) > 1 and parts[0] == top and (ROOT / top / parts[1]).is_dir():
                found.setdefault(parts[1], node.lineno)
    return found


def upward_imports(top: str) -> dict[str, list[str]]:
    """{module of a part: the parts above it that it imports, with the line}."""
    order = PARTS[top]
    out: dict[str, list[str]] = {}
    for path in sorted((ROOT / top).rglob("*.py")):
        rel = path.relative_to(ROOT)
        if len(rel.parts) < 3:  # a module at the top of the tree
            continue
        own = order.index(rel.parts[1]) if rel.parts[1] in order else -1
        above = [f"{part} (line {line})" for part, line in imported_parts(path, top).items()
                 if part != rel.parts[1] and (part not in order or order.index(part) > own)]
        if above:
            out[str(rel)] = above
    return out


def test_the_import_finder_sees_every_form() -> None:
    module = ROOT / "executors" / "store" / "content.py"
    assert set(imported_parts(module, "executors")) <= {"store"}
    source = ("import executors.steps.export\nfrom executors.run import wrapper\n"
              "from executors import onnx, local\nfrom .. import samples\n"
              "def f():\n    from ..evaluation.base import x\n")
    assert set(imported_parts(module, "executors", source)) == \
        {"steps", "run", "onnx", "samples", "evaluation"}


def test_every_part_imports_only_parts_below_it() -> None:
    assert upward_imports("planner") == {}
    assert upward_imports("executors") == {}


def test_every_part_is_in_the_order() -> None:
    for top, order in PARTS.items():
        present = {p.parent.name for p in (ROOT / top).glob("*/__init__.py")}
        assert present - set(order) == set(), f"add them to PARTS[{top!r}], in their place"


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


def role_name_decisions(path: Path) -> list[str]:
    """Lines of `path` that name a generating graph's role (prefill, decode, encoder, cross,
    decoder) in code: a role is read from its declaration (planner/models/roles.py), never by
    its name. Docstrings, a config attribute's name (`getattr(config, "encoder")`) and the keys
    of a dict literal (another tool's schema, e.g. genai_config.json's "decoder") aside."""
    from planner.models.roles import GENERATING

    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)}
    allowed = {id(n.args[1]) for n in ast.walk(tree)
               if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
               and n.func.id in ("getattr", "hasattr") and len(n.args) > 1}
    allowed |= {id(k) for n in ast.walk(tree) if isinstance(n, ast.Dict) for k in n.keys if k}
    return [f"{n.lineno}: {n.value!r}" for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and n.value in GENERATING
            and id(n) not in docs | allowed]


def test_executors_make_no_decision_by_role_name() -> None:
    hits = {str(p.relative_to(ROOT)): found for p in (ROOT / "executors").rglob("*.py")
            if (found := role_name_decisions(p))}
    assert hits == {}, "read the role's declaration (planner/models/roles.py: role_of, ROLES)"


def test_role_name_check_sees_a_decision(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text('"""decoder"""\nimport x\n\n\ndef f(graphs):\n'
                     '    return graphs["decoder"] if "prefill" not in graphs else '
                     'getattr(x, "encoder")\n')
    assert sorted(role_name_decisions(probe)) == ["6: 'decoder'", "6: 'prefill'"]


def test_every_generating_role_is_declared_whole() -> None:
    from planner.models.roles import CACHED_DECODER, GENERATING, ROLES, Kind, Runs, role_of

    for kind in (Kind.DECODER_ONLY, Kind.ENCODER_DECODER):
        # one graph a bundle's chain follows (a causal LM's: its pair's, or its uncached graph)
        graphs = [n for n in GENERATING if ROLES[n].kind is kind and not (
            kind is Kind.DECODER_ONLY and ROLES[n].runs is Runs.PREFIX)]
        assert sum(ROLES[g].chain for g in graphs) == 1
    uncached = [n for n, r in ROLES.items()
                if r.kind is Kind.DECODER_ONLY and r.runs is Runs.PREFIX]
    assert [ROLES[n].chain and not ROLES[n].reads_cache for n in uncached] == [True]
    prompt = [n for n, r in ROLES.items() if r.runs is Runs.PROMPT]
    token = [n for n, r in ROLES.items() if r.runs is Runs.TOKEN]
    assert [ROLES[n].prompt_stage for n in prompt] == [True] and \
        [ROLES[n].token_stage and ROLES[n].reads_cache for n in token] == [True]
    assert role_of("decoder", ["input_ids", "past_key_values.0.key"]) is CACHED_DECODER
    assert role_of("decoder", ["input_ids", "encoder_hidden_states"]) is ROLES["decoder"]
    from planner.core.ops import OPS

    steps = {s for r in (*ROLES.values(), CACHED_DECODER) for s in r.steps}
    assert steps <= set(OPS)


def test_the_architecture_page_names_the_part_order() -> None:
    """docs/architecture.md §7 names each tree's parts lowest first, as PARTS orders them."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    for tree, parts in PARTS.items():
        line = re.search(rf"^`{tree}/`: (.+?)\n\n", page, re.MULTILINE | re.DOTALL)
        assert line, f"docs/architecture.md names no part order for {tree}/"
        assert tuple(re.split(r"\s*<\s*", " ".join(line.group(1).split()))) == parts


def test_every_architecture_citation_names_a_section_the_page_has() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text()
    sections = set(re.findall(r"^## (\d+)\. ", page, re.MULTILINE))
    cited = {(str(p.relative_to(ROOT)), n) for p in [*CODE, *(ROOT / "tests").rglob("*.py")]
             for n in re.findall(r"docs/architecture\.md §(\d+)", p.read_text())}
    assert cited and {c for c in cited if c[1] not in sections} == set()
    assert not [p for p in [*CODE, *(ROOT / "tests").rglob("*.py")]
                if re.search(r"DESIGN(\.md)? §", p.read_text())], "cite docs/architecture.md"
