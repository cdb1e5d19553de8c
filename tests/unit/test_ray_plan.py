"""executor=ray as the planner sees it: per-step resources in plans (from op declarations, not
op names), the config keys and their errors, and keys that do not depend on the executor."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import schemas
from planner.core import resources
from planner.core.ops import OPS, Trait
from planner.planning import plan_from_overrides
from tests.conftest import ROOT, run_cli

TINY = ("model=tiny_bert", "export.shapes.sequence_length=32")


def ray_lines(text: str) -> dict[str, str]:
    """step id -> its `ray:` line in a text plan."""
    out, current = {}, None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] in "+=-" and parts[2] in ("run", "cached", "elided"):
            current = parts[1]
        elif line.strip().startswith("ray:") and current:
            out[current] = line.strip().removeprefix("ray: ")
    return out


def test_plan_shows_what_each_step_asks_of_ray(session_store: Path) -> None:
    result = run_cli("plan", *TINY, "executor=ray", "--store", str(session_store))
    assert result.returncode == 0, result.stderr
    asks = ray_lines(result.stdout)
    ir = plan_from_overrides([*TINY, "executor=ray"], store=str(session_store)).to_json()
    assert set(asks) == {s["id"] for s in ir["steps"]}
    for s in ir["steps"]:
        op = OPS[s["op"]]
        device = op.has(Trait.NEEDS_EP) and s["params"]["ep"] != "cpu"
        assert ("qnn_htp=1" in asks[s["id"]]) == device, s["id"]
        assert asks[s["id"]].startswith("num_cpus=1")
        assert asks[s["id"]].endswith("whole node") == op.has(Trait.NOT_CACHEABLE)
    assert {s["op"] for s in ir["steps"] if "qnn_htp" in asks[s["id"]]} == {
        "compile", "verify", "perf"}
    assert "ray start --resources '{\"qnn_htp\": 1}'" in result.stdout
    assert result.stdout.rstrip().splitlines()[-1].startswith("Plan: ")


def test_cpu_target_needs_no_device_and_overrides_apply(session_store: Path) -> None:
    result = run_cli("plan", *TINY, "target=cpu", "quant=w8a8", "executor=ray",
                     "+executor.resources.export.memory=4294967296",
                     "+executor.resources.quantize={num_cpus: 2, big_ram: 1}",
                     "--store", str(session_store))
    assert result.returncode == 0, result.stderr
    asks = ray_lines(result.stdout)
    assert not any("qnn" in a for a in asks.values())
    assert asks["export"] == "num_cpus=1 memory=4.0GiB"
    assert asks["quantize"] == "num_cpus=2 big_ram=1"
    assert asks["perf"] == "num_cpus=1, whole node"
    assert "big_ram" in result.stdout.splitlines()[-2]  # where such steps can run


def test_markdown_plan_has_a_resources_column(session_store: Path) -> None:
    result = run_cli("plan", *TINY, "executor=ray", "--format", "md", "--store",
                     str(session_store))
    assert result.returncode == 0, result.stderr
    assert "| ray resources |" in result.stdout
    assert "| num_cpus=1 qnn_htp=1, whole node |" in result.stdout
    local = run_cli("plan", *TINY, "--format", "md", "--store", str(session_store))
    assert "ray" not in local.stdout


def test_keys_do_not_depend_on_the_executor(session_store: Path) -> None:
    local = plan_from_overrides(list(TINY), store=str(session_store)).to_json()
    ray = plan_from_overrides([*TINY, "executor=ray", "executor.retries=0"],
                              store=str(session_store)).to_json()
    assert [s["key"] for s in local["steps"]] == [s["key"] for s in ray["steps"]]


def test_bad_executor_settings_are_one_line_each(session_store: Path) -> None:
    result = run_cli("plan", *TINY, "executor=ray", "executor.address=nowhere",
                     "executor.retries=-1", "+executor.resources.exprt.num_cpus=1",
                     "+executor.resources.export.CPU=2", "--store", str(session_store))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 4 and all(line.startswith("modelplan: error: executor.") for line in lines)
    text = result.stderr
    assert "executor.address: 'nowhere'" in text and "HOST:PORT" in text
    assert "executor.retries: -1 is below the minimum 0" in text
    assert "did you mean 'export'" in text
    assert "num_cpus" in text.split("executor.resources.export.CPU")[1]
    assert "Traceback" not in text


def test_resource_requests_name_every_op_and_nothing_else() -> None:
    props = schemas.load("config")["properties"]["executor"]["properties"]
    assert props["resources"]["propertyNames"]["enum"] == list(OPS)


def test_requests_come_from_declarations() -> None:
    for name, op in OPS.items():
        step = {"op": name, "params": {"ep": "qnn", "backend": "htp"}}
        req = resources.request(step, {"resources": {}})
        assert ("qnn_htp" in req.custom) == op.has(Trait.NEEDS_EP)
        assert req.whole_node == op.has(Trait.NOT_CACHEABLE)
        on_cpu = resources.request({"op": name, "params": {"ep": "cpu", "backend": None}}, {})
        assert on_cpu.custom == {}


def test_no_planner_module_imports_ray() -> None:
    for path in (ROOT / "planner").rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not any(m.split(".")[0] == "ray" for m in names), path


def test_planning_for_ray_does_not_import_it(session_store: Path) -> None:
    code = ("import sys\nfrom planner.planning import plan_from_overrides\n"
            "from planner.render import render\n"
            f"render(plan_from_overrides(['executor=ray'], store={str(session_store)!r})"
            ".to_json(), 'text')\nprint(json.dumps('ray' in sys.modules))\n")
    import subprocess

    out = subprocess.run([sys.executable, "-c", "import json\n" + code], capture_output=True,
                         text=True, cwd=ROOT, check=False)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) is False


def test_a_cluster_that_is_not_there_fails_in_seconds(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = run_cli("run", *TINY, "target=cpu", "quant=none", "verify=none", "perf=none",
                     "executor=ray", f"executor.address=127.0.0.1:{port}", "--store",
                     str(tmp_path / "store"), "--outputs", str(tmp_path / "out"), timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [(
        f"modelplan: error: executor.address=127.0.0.1:{port}: no Ray cluster answers there "
        f"(Connection refused); start its head with `ray start --head --port {port}`, or set "
        "executor.address=null to start a Ray for this run")]
    assert not list((tmp_path / "store").glob("??/*"))


def test_without_ray_installed_plans_work_and_runs_say_what_to_install(tmp_path: Path) -> None:
    code = ("import sys\nsys.modules['ray'] = None\nfrom planner.cli.main import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    args = [*TINY, "target=cpu", "executor=ray", "--store", str(tmp_path / "store")]
    import subprocess

    plan = subprocess.run([sys.executable, "-c", code, "plan", *args], capture_output=True,
                          text=True, cwd=ROOT, check=False)
    assert plan.returncode == 0 and "ray: num_cpus=1" in plan.stdout
    run = subprocess.run([sys.executable, "-c", code, "run", *args, "--outputs",
                          str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT,
                         check=False)
    assert run.returncode == 2
    assert run.stderr.strip() == ("modelplan: error: executor=ray: Ray is not installed here; "
                                  "install it with pip install 'modelplan[ray]', or run with "
                                  "executor=local")
