"""Keys carry the versions of the tools each step uses, and only those: an onnxruntime-qnn
upgrade changes compile's key and the keys downstream of it, an ONNX Runtime upgrade those of
the steps that run ORT and theirs, and neither touches export; the plan diff names the version."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from planner.core import keys
from planner.core.ops import OPS
from planner.planning import plan_from_overrides
from planner.review.diff import diff, render_md, render_text

HTP = ("model=tiny_bert", "target=qnn_htp", "verify.samples=2", "perf.iterations=3")


def plan_with(monkeypatch: pytest.MonkeyPatch, store: Path,
              bumped: dict[str, str] | None = None) -> dict[str, Any]:
    """The plan with the installed versions as they are, or with `bumped` ones."""
    real = keys.installed_versions()
    with monkeypatch.context() as m:
        m.setattr(keys, "installed_versions",
                  lambda: {**real, **{keys._normalize(k): v for k, v in (bumped or {}).items()}})
        return plan_from_overrides(list(HTP), store=str(store)).to_json()


def downstream(ir: dict[str, Any], roots: set[str]) -> set[str]:
    """`roots` and every step that reads one of them, transitively."""
    found = set(roots)
    for s in ir["steps"]:  # steps are in run order
        if set(s["inputs"].values()) & found:
            found.add(s["id"])
    return found


def changed_keys(a: dict[str, Any], b: dict[str, Any]) -> set[str]:
    ka = {s["id"]: s["key"] for s in a["steps"]}
    return {s["id"] for s in b["steps"] if ka[s["id"]] != s["key"]}


@pytest.mark.parametrize("tool", ["onnxruntime-qnn", "onnxruntime"])
def test_a_tool_upgrade_changes_the_keys_of_the_steps_that_use_it_and_theirs_only(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tool: str) -> None:
    before = plan_with(monkeypatch, tmp_path)
    after = plan_with(monkeypatch, tmp_path, {tool: "99.0.0"})
    users = {s["id"] for s in before["steps"] if tool in OPS[s["op"]].tools}
    assert changed_keys(before, after) == downstream(before, users)
    assert {"resolve", "export"}.isdisjoint(changed_keys(before, after))
    if tool == "onnxruntime-qnn":
        assert changed_keys(before, after) == downstream(before, {"compile"})
    else:
        assert {"normalize", "quantize", "compile"} <= changed_keys(before, after)
    assert after["tools"][tool] == "99.0.0" and before["tools"][tool] != "99.0.0"


def test_the_diff_names_the_version_change_as_the_reason(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    before = plan_with(monkeypatch, tmp_path)
    after = plan_with(monkeypatch, tmp_path, {"onnxruntime-qnn": "99.0.0"})
    was = before["tools"]["onnxruntime-qnn"]
    d = diff(before, after)
    assert d["tools"] == [{"name": "onnxruntime-qnn", "old": was, "new": "99.0.0"}]
    changes = {s["id"]: s["changes"] for s in d["changed"]}
    assert changes["compile"] == [f"onnxruntime-qnn: {was} -> 99.0.0 (a tool it uses)"]
    assert "input compile changed" in changes["perf"]
    assert set(d["unchanged"]) >= {"resolve", "export", "normalize", "quantize"}
    text = render_text(d)
    assert f"Tools:\n  onnxruntime-qnn: {was} -> 99.0.0" in text
    assert f"| `onnxruntime-qnn` | `{was}` | `99.0.0` |" in render_md(d)


def test_export_uses_no_onnx_runtime() -> None:
    """Export checks its graph on ORT, but what it writes does not depend on ORT's version."""
    assert "onnxruntime" not in OPS["export"].tools
    assert "onnxruntime-qnn" not in OPS["quantize"].tools


def test_a_cpu_build_does_not_use_the_qnn_ep(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    """verify, eval and perf declare every EP's package; a step keeps its own target's only."""
    overrides = ["model=tiny_bert", "target=cpu", "eval=task"]
    before = plan_from_overrides(overrides, store=str(tmp_path)).to_json()
    real = keys.installed_versions()
    monkeypatch.setattr(keys, "installed_versions",
                        lambda: {**real, "onnxruntime_qnn": "99.0.0"})
    after = plan_from_overrides(overrides, store=str(tmp_path)).to_json()
    assert changed_keys(before, after) == set()
    assert "onnxruntime-qnn" not in after["tools"]
    assert all("onnxruntime-qnn" not in s["tools"] for s in after["steps"])
    eval_tools = next(s["tools"] for s in after["steps"] if s["op"] == "eval")
    assert "onnxruntime" in eval_tools and "datasets" in eval_tools
