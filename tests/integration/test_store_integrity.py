"""Store entries are verified on use: a corrupt or incomplete entry is moved aside and rebuilt,
never read or published; an untouched one costs a stat per file."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from executors.store.content import file_stamp
from planner.support.digests import file_sha256
from tests.integration.conftest import CPU_RUN, run_json, step, store_copy


def entry_of(record: dict[str, Any], step_id: str) -> Path:
    return Path(next(iter(step(record, step_id)["outputs"].values()))).parent


def manifest(entry: Path) -> dict[str, Any]:
    return json.loads((entry / "manifest.json").read_text())


def copy_store(cpu_run: dict[str, Any], tmp_path: Path) -> Path:
    return store_copy(cpu_run, tmp_path / "store")  # new inodes: every file is re-hashed once


def test_a_corrupt_deliverable_is_moved_aside_rebuilt_and_never_published(
        cpu_run: dict[str, Any], tmp_path: Path) -> None:
    store = copy_store(cpu_run, tmp_path)
    code, first, err = run_json(*CPU_RUN, store=store, outputs=tmp_path / "a")
    assert code == 0, err
    tag = entry_of(first, "tag")
    good = manifest(tag)["files"]["model.onnx"]
    assert manifest(tag)["verified"]["model.onnx"] == file_stamp(tag / "model.onnx")
    with (tag / "model.onnx").open("r+b") as fh:  # one bit flipped, same size
        fh.seek(os.path.getsize(tag / "model.onnx") // 2)
        byte = fh.read(1)[0]
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte ^ 0x01]))
    code, record, err = run_json(*CPU_RUN, store=store, outputs=tmp_path / "b")
    assert code == 0, err
    rebuilt = step(record, "tag")
    assert rebuilt["action"] == "run" and rebuilt["planned_action"] == "cached"
    assert rebuilt["quarantined"]["problems"] == ["model.onnx: content does not match its digest"]
    assert f"tag        corrupt in the store (model.onnx: content does not match its digest); " \
           f"moved to {rebuilt['quarantined']['moved_to']}; rebuilding" in err
    moved = Path(rebuilt["quarantined"]["moved_to"])
    assert moved.parent == store / "quarantine" and file_sha256(moved / "model.onnx") != good
    assert "content does not match" in (moved / "quarantined.txt").read_text()
    assert file_sha256(Path(record["published"]["model.onnx"])) == good
    assert file_sha256(tag / "model.onnx") == good  # the entry is whole again


def test_an_incomplete_entry_is_rebuilt_and_a_touched_one_only_rehashed(
        cpu_run: dict[str, Any], tmp_path: Path) -> None:
    store = copy_store(cpu_run, tmp_path)
    export = entry_of(cpu_run["record"], "export")
    export = store / export.relative_to(cpu_run["store"])
    (export / "manifest.json").unlink()
    normalize = store / entry_of(cpu_run["record"], "normalize").relative_to(cpu_run["store"])
    os.utime(normalize / "model.onnx")  # a new mtime, the same content
    code, record, err = run_json(*CPU_RUN, store=store, outputs=tmp_path / "a")
    assert code == 0, err
    assert step(record, "export")["action"] == "run"
    assert step(record, "export")["quarantined"]["problems"] == [
        "manifest.json: missing or unreadable (an incomplete entry)"]
    assert (export / "manifest.json").is_file()
    assert step(record, "normalize")["action"] == "cached"  # re-hashed, matched, re-stamped
    assert step(record, "normalize")["quarantined"] is None
    assert manifest(normalize)["verified"]["model.onnx"] == file_stamp(normalize / "model.onnx")


def test_an_elision_is_observed_once_per_input_content(cpu_run: dict[str, Any],
                                                       tmp_path: Path) -> None:
    store = copy_store(cpu_run, tmp_path)
    shutil.rmtree(store / "proofs", ignore_errors=True)
    details = []
    for name in ("a", "b"):
        code, record, err = run_json(*CPU_RUN, store=store, outputs=tmp_path / name)
        assert code == 0, err
        details.append(step(record, "optimize")["proof_check"]["detail"])
    assert details == ["premises hold on the real input",
                       "premises hold on the real input (observed on this content before)"]
    assert len(list((store / "proofs").glob("*.json"))) == 1
