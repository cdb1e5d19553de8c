"""compile of a graph cut into parts, one part per step: the step compiles its own part and
carries the others as they are (hard links), so the chain's last step holds every part
compiled, and a step whose input is not cut that far fails in one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from executors.onnx import pieces
from executors.run.step_api import StepContext, StepError
from executors.steps import compile as compile_step


def cut_graph(root: Path, parts: int) -> Path:
    """A split step's output: a piece set of `parts` parts, each a model and its inputs."""
    root.mkdir()
    rows = []
    for k in range(parts):
        (root / f"part{k}").mkdir()
        (root / f"part{k}" / "model.onnx").write_bytes(f"qdq part {k}".encode())
        (root / f"part{k}" / pieces.FEEDS).write_bytes(f"inputs of part {k}".encode())
        rows.append({"dir": f"part{k}", "tag": f"/model/layers.{k}", "nodes": 1})
    pieces.write_index(root, {"format_version": 1, "parts": True, "block": "/model/layers",
                              "pieces": rows})
    return root


def context(src: Path, out: Path, part: int | None) -> StepContext:
    out.mkdir()
    params = {"target": "qnn_htp", "ep": "qnn", "backend": "htp", "embed_context": True,
              "cpu_fallback": False, "provider_options": {},
              **({"part": part} if part is not None else {})}
    return StepContext(step={"id": f"prefill.compile.{part}", "op": "compile",
                             "params": params, "inputs": {"model": "prefill.split"}},
                       inputs={"model": src}, out=out, progress=lambda _: None)


@pytest.fixture
def compiled(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """compile_model replaced by one that marks what it compiled (QNN is not needed here)."""
    done: list[str] = []

    def fake(ctx: StepContext, src_dir: Path, out_dir: Path) -> dict[str, int]:
        done.append(src_dir.name)
        (out_dir / "model.onnx").write_text(f"EPContext of {(src_dir / 'model.onnx').read_text()}")
        return {"context_nodes": 1, "nodes": 1, "validation_samples": 1}

    monkeypatch.setattr(compile_step, "compile_model", fake)
    return done


def test_a_part_step_compiles_its_part_and_carries_the_others(
        tmp_path: Path, compiled: list[str]) -> None:
    src = cut_graph(tmp_path / "split", 3)
    first = context(src, tmp_path / "c0", 0)
    got = compile_step.run(first)
    assert compiled == ["part0"] and got.metrics["part"] == 0 and got.metrics["pieces"] == 3
    assert got.metrics["context_nodes"] == 1
    second = context(first.out, tmp_path / "c1", 1)
    compile_step.run(second)
    assert compiled == ["part0", "part1"]
    out = second.out
    assert (out / "part0" / "model.onnx").read_text() == "EPContext of qdq part 0"
    assert (out / "part1" / "model.onnx").read_text() == "EPContext of qdq part 1"
    assert (out / "part2" / "model.onnx").read_text() == "qdq part 2"  # for the next step
    # carried, not copied: the same file as the input's
    assert os.path.samefile(out / "part0" / "model.onnx", first.out / "part0" / "model.onnx")
    assert os.path.samefile(out / "part2" / pieces.FEEDS, src / "part2" / pieces.FEEDS)
    assert json.loads((out / pieces.PIECES).read_text())["parts"] is True


def test_without_a_part_every_piece_is_compiled(tmp_path: Path, compiled: list[str]) -> None:
    got = compile_step.run(context(cut_graph(tmp_path / "split", 2), tmp_path / "c", None))
    assert compiled == ["part0", "part1"] and got.metrics["context_nodes"] == 2
    assert "part" not in got.metrics


@pytest.mark.parametrize("part", [2, 5])
def test_a_part_the_input_does_not_have_fails_in_one_line(
        tmp_path: Path, compiled: list[str], part: int) -> None:
    with pytest.raises(StepError) as got:
        compile_step.run(context(cut_graph(tmp_path / "split", 2), tmp_path / "c", part))
    assert "not a graph cut into more than" in str(got.value) and "\n" not in str(got.value)
    assert compiled == []


def test_a_part_of_an_uncut_graph_fails_in_one_line(tmp_path: Path, compiled: list[str]) -> None:
    whole = tmp_path / "whole"
    whole.mkdir()
    (whole / "model.onnx").write_bytes(b"qdq")
    with pytest.raises(StepError, match="re-plan the build"):
        compile_step.run(context(whole, tmp_path / "c", 0))
    assert compiled == []
