"""Eval datasets: every local form is found and digested at plan time and read offline at run
time (JSON Lines, CSV, Parquet, a save_to_disk folder, an image folder, a cached hub dataset),
with the task's roles found by alias or mapped by eval.dataset.columns (winml-cli names too)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from executors.evaluation import data
from executors.evaluation.base import EvalDataError
from planner.errors import ConfigError
from planner.models import datasets as D
from planner.models.evaluation import EVAL, roles, verdict_metric
from planner.models.sources import DigestMemo

ROWS = [{"sentence": f"sentence number {i}", "label": i % 2} for i in range(6)]


def params(path: Path | str | None, kind: str, **kw: Any) -> dict[str, Any]:
    return {"task": "text-classification", "dataset": str(path) if path else None,
            "dataset_kind": kind, "dataset_name": None, "split": None, "samples": 4,
            "shuffle": False, "seed": 0, "columns": {}, **kw}


def write_jsonl(path: Path, rows: list[dict[str, Any]] = ROWS) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("suffix", ["jsonl", "csv", "parquet"])
def test_data_files_are_read_with_roles_found_by_alias(tmp_path: Path, suffix: str) -> None:
    import datasets

    path = tmp_path / f"rows.{suffix}"
    if suffix == "jsonl":
        write_jsonl(path)
    else:
        table = datasets.Dataset.from_list(ROWS)
        table.to_csv(str(path), index=False) if suffix == "csv" else table.to_parquet(str(path))
    kind, where = D.locate(str(path))
    assert (kind, where) == ("file", path.resolve())
    got = data.load(params(where, kind), "text")
    assert [r["text"] for r in got.rows] == [r["sentence"] for r in ROWS[:4]]
    assert [int(r["label"]) for r in got.rows] == [0, 1, 0, 1]
    assert got.labelled and "labels from label" in got.origin


def test_save_to_disk_folder_split_shuffle_and_columns(tmp_path: Path) -> None:
    import datasets

    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS),
                               "validation": datasets.Dataset.from_list(ROWS[:3])})
    dd.save_to_disk(str(tmp_path / "saved"))
    kind, where = D.locate(str(tmp_path / "saved"))
    assert kind == "saved"
    got = data.load(params(where, kind), "text")  # no test split: validation is taken
    assert len(got.rows) == 3 and "split validation" in got.origin
    shuffled = data.load(params(where, kind, split="train", shuffle=True, seed=3, samples=6,
                                columns={"text": "sentence"}), "text")
    assert sorted(r["text"] for r in shuffled.rows) == sorted(r["sentence"] for r in ROWS)
    assert [r["text"] for r in shuffled.rows] != [r["sentence"] for r in ROWS]


def test_image_folder_gives_images_and_class_labels(tmp_path: Path) -> None:
    from PIL import Image

    for cls in ("cat", "dog"):
        (tmp_path / "imgs" / cls).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(np.full((8, 8, 3), 40 * i, np.uint8)).save(
                tmp_path / "imgs" / cls / f"{i}.png")
    kind, where = D.locate(str(tmp_path / "imgs"))
    got = data.load(params(where, kind, task="image-classification"), "image")
    assert len(got.rows) == 4 and got.labelled
    assert data.image_array(got.rows[0]["image"]).shape == (8, 8, 3)
    assert {int(r["label"]) for r in got.rows} == {0, 1}


def test_a_cached_hub_dataset_is_found_offline(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    snap = tmp_path / "hub" / "datasets--org--sts" / "snapshots" / "abc123"
    (snap / "data").mkdir(parents=True)
    write_jsonl(snap / "data" / "test.jsonl")
    (tmp_path / "hub" / "datasets--org--sts" / "refs").mkdir()
    (tmp_path / "hub" / "datasets--org--sts" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "ds"))
    kind, where = D.locate("org/sts")
    assert (kind, where) == ("hub_cache", snap)
    got = data.load(params(where, kind), "text")
    assert len(got.rows) == 4 and "split test" in got.origin


def test_a_hub_id_not_cached_is_one_line_saying_how_to_make_it_available(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "ds"))
    with pytest.raises(ConfigError) as err:
        D.locate("mteb/stsbenchmark-sts")
    assert len(err.value.lines) == 1
    assert "save_to_disk" in str(err.value) and "eval.dataset.path=DIR" in str(err.value)
    symbolic = D.read({"dataset": {"path": "mteb/stsbenchmark-sts", "name": None}}, DigestMemo(None), True)
    assert symbolic.kind == "symbolic" and len(symbolic.digest) == 64


def test_digest_follows_the_content(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "rows.jsonl")
    ev = {"dataset": {"path": str(path), "name": None}}
    first = D.read(ev, DigestMemo(None)).digest
    assert D.read(ev, DigestMemo(None)).digest == first
    write_jsonl(path, ROWS[::-1])
    assert D.read(ev, DigestMemo(None)).digest != first
    assert D.read({"dataset": {"path": None, "name": None}}, DigestMemo(None)).digest == D.SHIPPED


def test_missing_columns_and_splits_are_one_line_each(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "rows.jsonl", [{"words": "x", "y": 1}])
    with pytest.raises(EvalDataError, match="needs a text column"):
        data.load(params(path, "file"), "text")
    with pytest.raises(EvalDataError, match="no column 'nope'"):
        data.load(params(path, "file", columns={"text": "nope"}), "text")
    with pytest.raises(EvalDataError, match="has no split 'test'"):
        data.load(params(path, "file", split="test"), "text")
    for bad in (tmp_path / "nothing.jsonl", tmp_path / "empty"):
        with pytest.raises(ConfigError):
            (tmp_path / "empty").mkdir(exist_ok=True)
            D.locate(str(bad))


def test_winml_column_names_map_to_roles_per_task() -> None:
    assert roles("sentence-similarity", {"input_column_1": "s1", "input_column_2": "s2",
                                         "score_column": "score"}) == \
        {"score": "score", "text": "s1", "text_pair": "s2"}
    assert roles("question-answering", {"label_column": "answers", "question_column": "q"}) == \
        {"answers": "answers", "question": "q"}
    assert roles("image-classification", {"input_column": "img"}) == {"image": "img"}
    assert roles("image-segmentation", {"annotation_column": "m"}) == {"mask": "m"}
    with pytest.raises(ConfigError, match="reads"):
        roles("image-classification", {"question": "q"})


def test_every_task_declares_a_verdict_metric() -> None:
    for task, tm in EVAL.items():
        assert verdict_metric(task, None) == tm.metrics[0]
        assert set(tm.truth) <= set(tm.roles) | {"text"}
    with pytest.raises(ConfigError, match="reports"):
        verdict_metric("fill-mask", "bleu")


def test_relative_image_paths_in_a_data_file_are_relative_to_its_folder(tmp_path: Path) -> None:
    from PIL import Image

    (tmp_path / "set" / "imgs").mkdir(parents=True)
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(tmp_path / "set" / "imgs" / "a.png")
    path = write_jsonl(tmp_path / "set" / "rows.jsonl", [{"image": "imgs/a.png", "label": 0}])
    got = data.load(params(path, "file", task="image-classification"), "image")
    assert data.image_array(got.rows[0]["image"]).shape == (4, 4, 3)


def test_every_task_modelplan_builds_has_an_evaluator_for_its_declared_metrics() -> None:
    from executors.evaluation.evaluators import BY_TASK
    from planner.models.tasks import TASKS

    assert set(EVAL) == set(TASKS) == set(BY_TASK)


def test_a_withheld_test_split_is_not_the_default(tmp_path: Path) -> None:
    """GLUE's test splits carry label -1: validation is evaluated unless a split is named."""
    import datasets

    features = datasets.Features({"sentence": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["no", "yes"])})
    hidden = [{"sentence": r["sentence"], "label": -1} for r in ROWS]
    datasets.DatasetDict({
        "test": datasets.Dataset.from_list(hidden, features=features),
        "validation": datasets.Dataset.from_list(ROWS, features=features),
    }).save_to_disk(str(tmp_path / "glue"))
    got = data.load(params(tmp_path / "glue", "saved"), "text")
    assert "split validation" in got.origin and {r["label"] for r in got.rows} == {0, 1}
    named = data.load(params(tmp_path / "glue", "saved", split="test"), "text")
    assert "split test" in named.origin


def test_class_folders_named_by_class_id_give_those_ids(tmp_path: Path) -> None:
    from PIL import Image

    from executors.evaluation.base import Context, Prepared
    from executors.evaluation.classify import Classify

    for cls in ("281", "967"):
        (tmp_path / "imgs" / cls).mkdir(parents=True)
        Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(tmp_path / "imgs" / cls / "a.png")
    kind, where = D.locate(str(tmp_path / "imgs"))
    got = data.load(params(where, kind, task="image-classification"), "image")
    cx = Context("image-classification", {}, {}, None, label_names=got.names, labelled=True)
    assert sorted(Classify().truth(Prepared([], got.rows), cx)) == [281, 967]


def test_retrieval_agreement_beside_a_score_column_compares_with_pytorch() -> None:
    from executors.evaluation.base import Context
    from executors.evaluation.similarity import Similarity

    rng = np.random.default_rng(0)
    unit = [v / np.linalg.norm(v) for v in rng.normal(size=(8, 16))]
    torch_side = [(unit[i], unit[i + 4]) for i in range(4)]
    shuffled = [(unit[(i + 1) % 4], unit[i + 4]) for i in range(4)]
    cx = Context("sentence-similarity", {}, {}, None, baseline=torch_side)
    same = Similarity().score(torch_side, [0.1, 0.5, 0.3, 0.9], cx)
    other = Similarity().score(shuffled, [0.1, 0.5, 0.3, 0.9], cx)
    assert same["retrieval_agreement"] == 1.0 and other["retrieval_agreement"] < 1.0
