"""A plan.json from someone else: `apply` runs nothing but what its own config plans here,
inside the paths the user allows, and never remote code unless asked on the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planner.core.keys import content_key
from planner.core.planfile import Trust, load_plan
from planner.errors import PlanFileError
from tests.conftest import run_cli
from tests.unit.test_bad_input import one_error


def saved(tmp_path: Path, *overrides: str, name: str = "plan.json") -> Path:
    path = tmp_path / name
    result = run_cli("plan", *overrides, "--format", "json", "-o", str(path), "--store",
                     str(tmp_path / "store"))
    assert result.returncode == 0, result.stderr
    return path


def rekeyed(ir: dict[str, Any]) -> dict[str, Any]:
    """Keys recomputed after an edit, as whoever edits a plan on purpose would do."""
    keys: dict[str, str] = {}
    for s in ir["steps"]:
        inputs = {role: keys[src] for role, src in s["inputs"].items()}
        s["key"] = keys[s["id"]] = content_key(s["op"], s["params"], inputs, ir["tools"])
    return ir


def apply(plan: Path, tmp_path: Path, *extra: str) -> Any:
    return run_cli("apply", str(plan), "--store", str(tmp_path / "store"), "--outputs",
                   str(tmp_path / "out"), *extra)


def checkpoint(path: Path, **config: Any) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "bert", "vocab_size": 100,
                                                  "architectures": ["BertModel"], **config}))
    (path / "model.safetensors").write_bytes(b"\0")
    return path


def test_smuggled_params_and_elisions_are_refused(tmp_path: Path) -> None:
    plan = saved(tmp_path, "model=tiny_bert")
    ir = json.loads(plan.read_text())
    compile_step = next(s for s in ir["steps"] if s["op"] == "compile")
    compile_step["params"]["provider_options"] = {"backend_path": "/tmp/evil.so"}
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(rekeyed(ir)))
    one_error(apply(edited, tmp_path), "step compile is not what the plan's config plans here "
              "(params.provider_options differs)")
    ir = json.loads(plan.read_text())
    legalize = next(s for s in ir["steps"] if s["op"] == "legalize")
    legalize.update(action="elided", proof={"rule": "idempotent-elision", "premises": [],
                                            "conclusion": "trust me"})
    edited.write_text(json.dumps(ir))
    one_error(apply(edited, tmp_path), "step legalize is not what the plan's config plans here "
              "(marked elided)")


def test_paths_outside_the_allowed_roots_are_refused(tmp_path: Path) -> None:
    elsewhere = checkpoint(tmp_path / "elsewhere" / "ckpt")
    plan = saved(tmp_path, "model=local_hf", f"model.path={elsewhere}")
    one_error(apply(plan, tmp_path), f"model.path {elsewhere} is outside the paths this run "
              "may use")
    roots = (tmp_path / "store", tmp_path / "out")
    with pytest.raises(PlanFileError, match="outside the paths"):
        load_plan(plan, Trust(roots, tmp_path / "store"))
    assert load_plan(plan, Trust((*roots, elsewhere.parent), tmp_path / "store"))
    own_store = saved(tmp_path, "model=tiny_bert", name="own-store.json")
    result = run_cli("apply", str(own_store), "--outputs", str(tmp_path / "out"))
    one_error(result, f"store.path {tmp_path / 'store'} is outside the paths")
    assert "--store DIR" in result.stderr


def test_a_dataset_outside_the_allowed_roots_is_refused_before_it_is_read(
        tmp_path: Path) -> None:
    """Allowing the model's folder does not allow another file the plan names: the dataset is
    refused before anything reads it, and none of its values reach the error or a record."""
    secret = tmp_path / "elsewhere" / "labels.jsonl"
    secret.parent.mkdir()
    secret.write_text('{"text": "AKIA-SECRET-TOKEN-1234", "label": "a"}\n')
    ckpt = checkpoint(tmp_path / "models" / "ckpt", id2label={"0": "a", "1": "b"},
                      architectures=["BertForSequenceClassification"])
    plan = saved(tmp_path, "model=local_hf", f"model.path={ckpt}", "eval=task",
                 f"eval.dataset.path={secret}", "target=cpu", "quant=none")
    result = apply(plan, tmp_path, "--allow-path", str(ckpt.parent))
    one_error(result, f"eval.dataset.path {secret} is outside the paths this run may use")
    assert "AKIA" not in result.stderr + result.stdout
    assert not [p for p in tmp_path.rglob("*.json") if "AKIA" in p.read_text()]
    roots = (tmp_path / "store", tmp_path / "out", ckpt.parent, secret.parent)
    assert load_plan(plan, Trust(roots, tmp_path / "store"))


def test_remote_code_needs_the_command_line_flag(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path / "store" / "ckpt")
    plan = saved(tmp_path, "model=local_hf", f"model.path={ckpt}", "model.trust_remote_code=true")
    one_error(apply(plan, tmp_path), "--trust-remote-code")
    roots = (tmp_path / "store", tmp_path / "out")
    assert load_plan(plan, Trust(roots, tmp_path / "store", trust_remote_code=True))


@pytest.mark.parametrize("text,needle", [
    ("[" * 100_000 + "]" * 100_000, "JSON nested 100000 levels deep"),
    ('{"a": "' + "x" * (5 << 20) + '"}', "more than a plan can be (4 MB)"),
    ('{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}', "not a valid plan"),
])
def test_oversized_or_deeply_nested_json_is_refused(text: str, needle: str,
                                                    tmp_path: Path) -> None:
    path = tmp_path / "hostile.json"
    path.write_text(text)
    one_error(apply(path, tmp_path), needle)
    one_error(run_cli("diff", str(path), str(path)), needle)
