"""The layout docs/architecture.md §7 draws, checked on the code itself: no import cycle
between modules (imports inside functions count), at most a dozen modules at the top of planner/ and
executors/ (the rest in parts that say what they are), no module over 400 lines and no
function over 60, a docstring for every part, and executor plugins that do not subclass
each other (they share the one scheduler through runners instead)."""

from __future__ import annotations

import ast
from importlib.metadata import entry_points
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = ("planner", "executors", "schemas", "hydra_plugins")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for d in PACKAGES for p in (ROOT / d).rglob("*.py")}


def edges(known: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the project modules it imports (a `from pkg import mod` names the module)."""
    out: dict[str, set[str]] = {}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name in known}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    found.add(sub if sub in known else base)
        out[name] = {m for m in found if m in known and m != name}
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root, imported in graph.items():
        if root in index:
            continue
        work = [(root, iter(sorted(imported)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle() -> None:
    assert cycles(edges(modules())) == []


def test_at_most_a_dozen_modules_at_the_top_of_planner_and_executors() -> None:
    for top in ("planner", "executors"):
        flat = sorted(p.name for p in (ROOT / top).glob("*.py") if p.name != "__init__.py")
        assert len(flat) <= 12, (top, flat)


def test_no_module_over_400_lines_and_no_function_over_60() -> None:
    long_modules, long_functions = [], []
    for name, path in modules().items():
        source = path.read_text()
        if len(source.splitlines()) > 400:
            long_modules.append(name)
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and \
                    node.end_lineno - node.lineno + 1 > 60:
                long_functions.append(f"{name}.{node.name}")
    assert long_modules == [] and long_functions == []


def test_every_part_says_what_it_is() -> None:
    parts = [p for top in ("planner", "executors") for p in (ROOT / top).rglob("__init__.py")]
    undocumented = [str(p.relative_to(ROOT)) for p in parts
                    if ast.get_docstring(ast.parse(p.read_text())) is None]
    assert undocumented == []


def test_executor_plugins_do_not_subclass_each_other() -> None:
    plugins = {ep.name: ep.load() for ep in entry_points(group="modelplan.executors")}
    assert {"local", "ray"} <= set(plugins)
    for name, cls in plugins.items():
        others = [o for o in plugins.values() if o is not cls]
        assert not any(issubclass(cls, o) for o in others), name


def test_lowering_stays_small() -> None:
    """lower.py lowers a config; what a generating model's roles add is in its own module."""
    assert len((ROOT / "planner" / "core" / "lower.py").read_text().splitlines()) < 300
