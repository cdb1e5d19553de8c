"""The runtime manifest of a deliverable and `modelplan check`: the versions a compiled model
needs, said before it is loaded; each graph loaded in a child process; and a plan after a tool
upgrade that rebuilds only the steps that use the tool, and what follows them."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from planner.cli.main import main
from planner.core import keys
from tests.conftest import run_cli
from tests.integration.conftest import minilm_store, run_json

TINY_HTP = ("model=tiny_bert", "target=qnn_htp", "verify.samples=1", "perf=none")
TINY_LLM = ("model=tiny_random", "model.random_init.model_type=llama",
            "export.shapes.prefill_length=8", "export.shapes.context_length=32",
            "target=qnn_htp", "verify=none", "perf=none")
LOADED = re.compile(r"^ok    (\S+)  loaded on QNNExecutionProvider in (\d+\.\d\d) s$", re.MULTILINE)


def build(tmp: Path, *args: str) -> dict[str, Any]:
    code, record, err = run_json(*args, store=tmp / "store", outputs=tmp / "outputs")
    assert code == 0, err
    return {"record": record, "store": tmp / "store",
            "folder": Path(record["outputs_dir"])}


@pytest.fixture(scope="module")
def htp(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return build(tmp_path_factory.mktemp("htp"), *TINY_HTP)


def test_the_deliverable_says_what_it_needs_to_load(htp: dict[str, Any]) -> None:
    folder = htp["folder"]
    found = json.loads((folder / "runtime.json").read_text())
    assert found == htp["record"]["runtime"]
    here = keys.tool_versions(["onnxruntime", "onnxruntime-qnn"])
    assert found["packages"] == here and found["provider"] == "QNNExecutionProvider"
    assert re.fullmatch(r"\d+\.\d+\.\d+", found["sdk"]["version"])
    assert found["sdk"]["build"].startswith(f"v{found['sdk']['version']}.")
    graph = found["graphs"]["model.onnx"]
    assert graph["kind"] == "epcontext" and graph["soc_model"] == 60
    assert found["provider_options"]["soc_model"] == 60
    assert found["rebuild"].startswith("modelplan run model=tiny_bert ")
    card = (folder / "README.md").read_text()
    assert "## Runtime" in card and f"QNN SDK {found['sdk']['version']}" in card


def test_check_loads_each_graph_in_a_child_and_says_ok(htp: dict[str, Any]) -> None:
    done = run_cli("check", str(htp["folder"]))
    assert done.returncode == 0, done.stderr
    assert [m[0] for m in LOADED.findall(done.stdout)] == ["model.onnx"]
    assert "Check ok: 1 of 1 graph(s) load with onnxruntime " in done.stdout
    done = run_cli("check", str(htp["folder"]), "--json")
    found = json.loads(done.stdout)
    assert done.returncode == 0 and found["runtime"] == htp["record"]["runtime"]
    assert [(r["graph"], r["ok"]) for r in found["loads"]] == [("model.onnx", True)]
    assert 0 < found["loads"][0]["load_s"] < 60


def test_check_names_both_sdk_versions_and_the_rebuild_command(htp: dict[str, Any],
                                                               tmp_path: Path) -> None:
    folder = tmp_path / "edited"
    shutil.copytree(htp["folder"], folder)
    found = json.loads((folder / "runtime.json").read_text())
    here = found["sdk"]["version"]
    found["sdk"]["version"] = "2.40.0"
    (folder / "runtime.json").write_text(json.dumps(found))
    done = run_cli("check", str(folder))
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("modelplan: error: ")
    assert "built for QNN SDK 2.40.0" in lines[0] and f"has QNN SDK {here}" in lines[0]
    assert f"`{found['rebuild']} --outputs {tmp_path} --name edited`" in lines[0]


@pytest.mark.parametrize("case", ["missing", "not a deliverable", "a file", "not json",
                                  "malformed", "unknown target", "graph missing"])
def test_check_says_in_one_line_what_is_wrong_with_its_input(htp: dict[str, Any],
                                                             tmp_path: Path, case: str) -> None:
    folder = tmp_path / "folder"
    shutil.copytree(htp["folder"], folder)
    manifest = folder / "runtime.json"
    found = json.loads(manifest.read_text())
    if case == "missing":
        shutil.rmtree(folder)
    elif case == "not a deliverable":
        manifest.unlink()
    elif case == "a file":
        folder = folder / "model.onnx"
    elif case == "not json":
        manifest.write_text("{")
    elif case == "malformed":
        manifest.write_text(json.dumps({**found, "packages": ["onnxruntime"]}))
    elif case == "unknown target":
        manifest.write_text(json.dumps({**found, "target": "npu9"}))
    else:
        (folder / "model.onnx").unlink()
    done = run_cli("check", str(folder))
    assert done.returncode == 2, done.stdout
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("modelplan: error: ")
    assert "Traceback" not in done.stderr


def planned(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], store: Path,
            out: Path, bumped: dict[str, str]) -> dict[str, str]:
    """`modelplan plan` (saved to `out`) with the installed versions `bumped`: each step's
    action."""
    real = keys.installed_versions()
    with monkeypatch.context() as m:
        m.setattr(keys, "installed_versions",
                  lambda: {**real, **{keys._normalize(k): v for k, v in bumped.items()}})
        assert main(["plan", *TINY_HTP, "--store", str(store), "-o", str(out)]) == 0
    capsys.readouterr()
    return {s["id"]: s["action"] for s in json.loads(out.read_text())["steps"]}


@pytest.mark.parametrize(("tool", "runs"), [
    ("onnxruntime-qnn", {"compile", "verify"}),
    ("onnxruntime", {"normalize", "legalize", "quantize", "tag", "compile", "verify"}),
])
def test_after_an_upgrade_the_plan_runs_the_steps_that_use_it_and_what_follows(
        htp: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], tmp_path: Path, tool: str, runs: set[str]) -> None:
    now = planned(monkeypatch, capsys, htp["store"], tmp_path / "now.json", {})
    assert {a for a in now.values()} <= {"cached", "elided"}
    bumped = planned(monkeypatch, capsys, htp["store"], tmp_path / "bumped.json",
                     {tool: "99.0.0"})
    assert {i for i, a in bumped.items() if a == "run"} == runs
    assert bumped["export"] == bumped["resolve"] == "cached"
    assert main(["diff", str(tmp_path / "now.json"), str(tmp_path / "bumped.json")]) == 0
    text = capsys.readouterr().out
    was = keys.tool_version(tool)
    assert f"Tools:\n  {tool}: {was} -> 99.0.0" in text
    first = "compile" if tool == "onnxruntime-qnn" else "normalize"  # the first that uses it
    block = text.split(f"  ~ {first}", 1)[1].split("  ~ ", 1)[0]
    assert f"{tool}: {was} -> 99.0.0 (a tool it uses)" in block


def test_check_on_a_tiny_llm_bundle(tmp_path: Path) -> None:
    folder = build(tmp_path, *TINY_LLM)["folder"]
    done = run_cli("check", str(folder))
    assert done.returncode == 0, done.stderr
    assert sorted(m[0] for m in LOADED.findall(done.stdout)) == [
        "decode_model.onnx", "prefill_model.onnx",  # and onnxruntime-genai's compiled stages
        "prompt_stage_ctx.onnx", "token_stage_ctx.onnx"]
    assert "skip  device/" in done.stdout  # the shared set for the device is not loaded here
    # the device's shared set, loaded one graph at a time: the HTP simulator's backend crashes
    # on it (measured with onnxruntime-qnn 2.7.0; the bundle says it does not load here)
    assert not json.loads((folder / "bundle.json").read_text())["shared_context"]["loads_here"]
    crashing = tmp_path / "crashing"
    shutil.copytree(folder, crashing)
    found = json.loads((crashing / "runtime.json").read_text())
    for graph in found["graphs"].values():
        graph["runs_on"] = "target"
    (crashing / "runtime.json").write_text(json.dumps(found))
    done = run_cli("check", str(crashing))
    assert done.returncode == 1, done.stderr
    assert re.findall(r"^FAIL  (\S+)  on QNNExecutionProvider: the loading process crashed with "
                      r"SIGSEGV$", done.stdout, re.MULTILINE) == ["device/decode_ctx.onnx",
                                                                   "device/prefill_ctx.onnx"]
    assert len(LOADED.findall(done.stdout)) == 4 and "Check failed: 4 of 6" in done.stdout
    edited = tmp_path / "edited"
    shutil.copytree(folder, edited)
    found = json.loads((edited / "runtime.json").read_text())
    found["packages"]["onnxruntime-qnn"] = "2.0.0"
    (edited / "runtime.json").write_text(json.dumps(found))
    here = keys.tool_version("onnxruntime-qnn")
    for command in (["check", str(edited)], ["generate", str(edited), "Once upon a time"]):
        done = run_cli(*command)  # generate compares before it opens a session
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
        assert f"built for onnxruntime-qnn 2.0.0; this environment has onnxruntime-qnn {here}" \
            in done.stderr and "modelplan run model=tiny_random" in done.stderr


@pytest.mark.slow
def test_check_on_the_default_minilm_build(tmp_path: Path,
                                           tmp_path_factory: pytest.TempPathFactory) -> None:
    # the README's `make run` build (verify plays no part in what check loads), in the store
    # the session's MiniLM builds share
    code, record, err = run_json("verify=none", "perf=none", store=minilm_store(tmp_path_factory),
                                 outputs=tmp_path / "outputs")
    assert code == 0, err
    folder = Path(record["outputs_dir"])
    done = run_cli("check", str(folder))
    assert done.returncode == 0, done.stderr
    assert [m[0] for m in LOADED.findall(done.stdout)] == ["model.onnx"]
