"""A local eval data file is checked when the plan is made, not after the build: it parses, has
rows, has the task's input column with no empty cell, its labels are the model's classes; the
plan says where the labels come from, or that there are none (agreement with PyTorch). Each
refusal is one line naming the file (and row or line) and a fix, and quotes no value of the
data."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.errors import ConfigError
from planner.planning import plan_from_overrides
from planner.render.text import render

CLASSIFIER = ("model=tiny_random", "model.random_init.model_type=bert",
              "model.task=text-classification", "target=cpu", "eval=task")
SECRET = "AKIA-SECRET-TOKEN-1234"


def plan(path: Path, *extra: str) -> str:
    return render(plan_from_overrides([*CLASSIFIER, f"eval.dataset.path={path}", *extra]).to_json())


@pytest.mark.parametrize(("name", "content", "said"), [
    ("labels.jsonl", f'{{"text": "{SECRET}", "label": 7}}\n', "none of the model's 2 classes"),
    ("names.jsonl", f'{{"text": "good", "label": "{SECRET}"}}\n', "none of the model's 2 classes"),
    ("null.jsonl", f'{{"text": null, "label": 1}}\n{{"text": "{SECRET}", "label": 1}}\n',
     "row 0 of"),
    ("blank_label.csv", f"text,label\n{SECRET},\n", "has no label"),
    ("empty.jsonl", "", "has no rows"),
    ("zero_rows.csv", "text,label\n", "has no rows"),
    ("header_only.tsv", "", "is empty"),
    ("broken.jsonl", f'{{"text": "{SECRET}", "label": 1}}\n{{broken\n', "line 2 is not a JSON"),
    ("array.json", f'[{{"text": "{SECRET}", "label": 1}}, 3]', "row 1 is not an object"),
    ("bad.json", '[{"text": "x", ', "is not valid JSON"),
    ("other.jsonl", f'{{"title": "{SECRET}"}}\n', "needs a text column"),
])
def test_bad_data_is_refused_at_plan_time(tmp_path: Path, name: str, content: str,
                                          said: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ConfigError, match=said) as caught:
        plan(path)
    assert SECRET not in str(caught.value) and len(str(caught.value).splitlines()) == 1


def test_binary_data_is_refused_at_plan_time(tmp_path: Path) -> None:
    path = tmp_path / "blob.jsonl"
    path.write_bytes(bytes(range(128, 256)) * 4)
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        plan(path)


def test_the_plan_says_where_the_labels_come_from(tmp_path: Path) -> None:
    labelled = tmp_path / "labelled.jsonl"
    labelled.write_text('{"sentence": "good", "class": "LABEL_1"}\n'
                        '{"sentence": "bad", "class": 0}\n')
    assert "columns label=class, text=sentence; labels from class" in plan(labelled)
    unlabelled = tmp_path / "unlabelled.csv"
    unlabelled.write_text("text\ngood\nbad\n")
    assert "no label column in the data: agreement with PyTorch's predictions" in \
        plan(unlabelled)


def test_a_mapped_column_the_file_lacks_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"text": "good", "label": 1}\n')
    with pytest.raises(ConfigError, match="eval.dataset.columns.label: .* has no column 'gold'"):
        plan(path, "+eval.dataset.columns.label=gold")


def written(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(("name", "extra", "said"), [
    ("device", (), "is not a regular file or folder"),
    ("notes", (), "holds no data files"),
    ("rows.parquet", (), "is not a Parquet file"),
    ("rows.jsonl", ("eval.dataset.name=nosuch",), "eval.dataset.name: 'nosuch' names a subset"),
])
def test_what_is_no_dataset_is_said_for_what_it_is(tmp_path: Path, name: str,
                                                   extra: tuple[str, ...], said: str) -> None:
    made = {"device": Path("/dev/null"),
            "notes": written(tmp_path / "notes" / "readme.md", b"x").parent,
            "rows.parquet": written(tmp_path / "rows.parquet", b"text,label\n"),
            "rows.jsonl": written(tmp_path / "rows.jsonl", b'{"text": "a", "label": 1}\n')}
    with pytest.raises(ConfigError, match=said):
        plan(made[name], *extra)


def test_a_subset_without_a_dataset_is_refused() -> None:
    with pytest.raises(ConfigError, match="eval.dataset.path names none"):
        plan_from_overrides([*CLASSIFIER, "eval.dataset.name=sst2"])
