"""`modelplan import` of winml-cli `eval` sections: eval=task with the dataset's path, subset,
split, samples, shuffle, seed and columns_mapping as eval.* keys (round trip through the written
config and the plan), winml-cli keys with no modelplan meaning dropped with a reason, and a
dataset this machine does not have reported by the import and by the plan. Planner only."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from planner.recipes.convert import convert
from planner.recipes.layout import recipe_file
from tests.conftest import run_cli
from tests.recipe_models import corpus_dir
from tests.unit.test_import import RECIPE, config, no_datasets, write

NAME = "acme_tiny-bert-text-classification-w8a16"
REL = "acme_tiny-bert/text-classification_w8a16_config.json"


def with_eval(ev: Any) -> dict[str, Any]:
    recipe = copy.deepcopy(RECIPE)
    recipe["eval"] = ev
    return recipe


@pytest.fixture(autouse=True)
def empty_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """No dataset is cached on this machine, in this process and in the CLI's."""
    env = no_datasets(tmp_path)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


def imported(root: Path, ev: Any) -> tuple[Any, Path, dict[str, Any]]:
    """Import a recipe with this eval section, in this process: the build, the config tree and
    the config as `modelplan plan` composes it."""
    from planner.recipes.writer import check, write_all

    build = convert([recipe_file(write(root, REL, with_eval(ev)), root)])
    conf = root / "conf"
    write_all([build], conf, str(conf), False)
    assert build.status == "imported", build.message
    return build, conf, check(conf, NAME)


def fields(cfg: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["field"]: f for f in cfg["origin"]["fields"]}


def test_an_eval_section_round_trips_into_eval_keys(tmp_path: Path) -> None:
    data = tmp_path / "sst2.jsonl"
    data.write_text("".join(json.dumps({"sentence": f"s{i}", "y": i % 2}) + "\n"
                            for i in range(4)))
    ev = {"task": "text-classification",
          "dataset": {"path": str(data), "split": "train", "samples": 3, "shuffle": True,
                      "seed": 42, "streaming": False, "revision": "abc123",
                      "build_script": "scripts/build.py", "label_mapping": {"neg": 0},
                      "columns_mapping": {"input_column": "sentence", "label_column": "y",
                                          "score_column": "s", "bbox_key": "bbox"}}}
    build, conf, cfg = imported(tmp_path, ev)
    assert build.warnings == []
    assert cfg["eval"] == {"name": "task", "kind": "task", "metric": None, "max_drop": 0.01,
                           "dataset": {"path": str(data), "name": None, "split": "train",
                                       "samples": 3, "shuffle": True, "seed": 42,
                                       "columns": {"text": "sentence", "label": "y"}}}
    got = fields(cfg)
    assert got["eval.dataset.columns_mapping.input_column"]["config"] == "eval.dataset.columns.text"
    assert got["eval.dataset.columns_mapping.label_column"]["steps"] == ["eval"]
    dropped = {k: f["note"] for k, f in got.items() if f["outcome"] == "dropped"}
    assert set(dropped) >= {"eval.dataset.revision", "eval.dataset.build_script",
                            "eval.dataset.label_mapping",
                            "eval.dataset.columns_mapping.score_column",
                            "eval.dataset.columns_mapping.bbox_key"}
    assert "modelplan runs no scripts" in dropped["eval.dataset.build_script"]
    assert dropped["eval.dataset.columns_mapping.score_column"].startswith(
        "text-classification reads text, text_pair, label, not score")
    assert got["eval.dataset.streaming"]["outcome"] == "mapped"
    plan = run_cli("plan", "--config-dir", str(conf), "--config-name", NAME,
                   "--symbolic-sources", "--store", str(tmp_path / "store"))
    assert plan.returncode == 0, plan.stderr
    assert "columns={label: y, text: sentence}" in plan.stdout
    assert f"data: local file {data}: shuffled with seed 42, first 3 rows of split train" \
        in plan.stdout


def test_a_missing_hub_dataset_is_reported_by_the_import_and_fails_the_plan(
        tmp_path: Path) -> None:
    ev = {"task": "text-classification",
          "dataset": {"path": "nyu-mll/glue", "name": "mrpc", "samples": 100}}
    recipe = write(tmp_path, REL, with_eval(ev))
    conf = tmp_path / "conf"
    result = run_cli("import", str(recipe), "-o", str(conf))
    assert result.returncode == 0, result.stderr
    warning = ("dataset nyu-mll/glue is not available offline; `modelplan plan` fails until it "
               "is saved on this machine (datasets.load_dataset('nyu-mll/glue', 'mrpc')"
               ".save_to_disk(DIR) where there is network, then eval.dataset.path=DIR), or set "
               "eval=none")
    assert f"Will not plan yet: {warning}" in result.stdout
    assert f"# Will not plan yet: {warning}" in (conf / f"{NAME}.yaml").read_text()
    assert fields(config(conf, NAME))["eval.dataset.path"]["note"] == warning
    checkpoint = tmp_path / "ckpt"  # enough of a checkpoint to plan (nothing is built)
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps(
        {"model_type": "bert", "architectures": ["BertForSequenceClassification"]}))
    (checkpoint / "model.safetensors").write_bytes(b"")
    plan = run_cli("plan", "--config-dir", str(conf), "--config-name", NAME,
                   f"model.path={checkpoint}")
    assert plan.returncode == 2
    assert plan.stderr.startswith("modelplan: error: eval.dataset.path: 'nyu-mll/glue' is "
                                  "neither a local file or folder nor a dataset in the local "
                                  "cache")
    assert "load_dataset('nyu-mll/glue', 'mrpc')" in plan.stderr
    assert len(plan.stderr.strip().splitlines()) == 1


def test_a_cached_hub_dataset_imports_without_a_warning(tmp_path: Path,
                                                       empty_caches: dict[str, str]) -> None:
    repo = Path(empty_caches["HF_HUB_CACHE"]) / "datasets--acme--reviews"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    (repo / "snapshots" / ("0" * 40)).mkdir(parents=True)
    (repo / "snapshots" / ("0" * 40) / "test.jsonl").write_text('{"text": "a", "label": 1}\n')
    build, _, cfg = imported(tmp_path, {"task": "text-classification",
                                        "dataset": {"path": "acme/reviews"}})
    assert build.warnings == []
    note = fields(cfg)["eval.dataset.path"]["note"]
    assert note.startswith("read from the local cache (") and "datasets--acme--reviews" in note


@pytest.mark.parametrize(("ev", "eval_name", "outcome"), [
    (None, "none", "mapped"),
    ({}, "task", "mapped"),
    ({"task": "text-classification", "dataset": None}, "task", "mapped"),
])
def test_a_null_or_empty_eval_section(tmp_path: Path, ev: Any, eval_name: str,
                                      outcome: str) -> None:
    cfg = imported(tmp_path, ev)[2]
    assert cfg["eval"]["name"] == eval_name and cfg["eval"]["dataset"]["path"] is None
    assert all(f["outcome"] == outcome for k, f in fields(cfg).items() if k.startswith("eval"))


def test_bad_dataset_values_are_dropped_with_the_reason(tmp_path: Path) -> None:
    recipe = with_eval({"task": "text-classification",
                        "dataset": {"path": "", "split": "test[:10%]", "samples": 0,
                                    "seed": -1, "shuffle": "yes", "other": 1}})
    build = convert([recipe_file(write(tmp_path, REL, recipe), tmp_path)])
    assert build.status == "imported" and build.warnings == []
    notes = {e.field: e.note for e in build.entries if e.outcome == "dropped"}
    assert notes["eval.dataset.path"].startswith("not a dataset id, path or subset name")
    assert notes["eval.dataset.split"].startswith("not a split name")
    assert notes["eval.dataset.samples"].startswith("not a whole number from 1 to 100000")
    assert notes["eval.dataset.seed"].startswith("not a whole number from 0")
    assert notes["eval.dataset.shuffle"] == "not true or false; eval.dataset.shuffle keeps " \
        "modelplan's default"
    assert notes["eval.dataset.other"] == "not a dataset setting winml-cli reads"
    bad = convert([recipe_file(write(tmp_path, REL, with_eval({"dataset": [1]})), tmp_path)])
    assert bad.status == "failed" and bad.message.startswith("eval.dataset: not a section")


CORPUS = corpus_dir()


@pytest.mark.skipif(CORPUS is None, reason="the winml-cli recipe corpus is not here")
@pytest.mark.parametrize(("rel", "columns", "dropped"), [
    ("ahotrod_electra_large_discriminator_squad2_512/question-answering_fp16_config.json",
     {"question": "question", "context": "context", "id": "id", "answers": "answers"}, []),
    ("BAAI_bge-large-en-v1.5/sentence-similarity_fp16_config.json",
     {"text": "sentence1", "text_pair": "sentence2", "score": "score"}, []),
    ("usyd-community_vitpose-base-simple/keypoint-detection_fp16_config.json",
     {"image": "image", "keypoints": "objects"},
     ["keypoints_key", "bbox_key", "area_key", "box_format"]),
])
def test_columns_mapping_becomes_the_tasks_roles(rel: str, columns: dict[str, str],
                                                 dropped: list[str]) -> None:
    assert CORPUS is not None
    build = convert([recipe_file(CORPUS / rel, CORPUS)])
    assert build.status == "imported" and build.draft is not None
    assert build.draft.choices["eval"] == "task"
    assert build.draft.get("eval.dataset.columns") == columns
    gone = [e.field.rsplit(".", 1)[-1] for e in build.entries
            if e.outcome == "dropped" and ".columns_mapping." in e.field]
    assert gone == dropped
    assert len(build.warnings) == 1 and "is not available offline" in build.warnings[0]
    assert (" builds it there" in build.warnings[0]) == (rel.startswith("usyd"))
