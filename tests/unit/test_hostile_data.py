"""Property: hostile eval data files (random bytes, broken JSON, ragged CSV, nulls, labels of
any kind, huge and empty cells) and hostile counts on the commands that take them never make
`modelplan plan` or the counting commands end in a traceback or an exit status other than 0 or
2, never quote a value of the data in an error line, and write nothing outside the store they
are given. The CLI runs in this process (its `main`), so a few hundred examples take seconds."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.cli.main import main

CLASSIFIER = ["model=tiny_random", "model.random_init.model_type=bert",
              "model.task=text-classification", "target=cpu", "eval=task"]
MARK = "QQSECRETQQ"  # every text cell carries it: no error line may show it
cells = st.one_of(st.none(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                  st.booleans(), st.text(max_size=20).map(lambda t: MARK + t),
                  st.lists(st.integers(-3, 5), max_size=3), st.just(""))
columns = st.sampled_from(["text", "label", "sentence", "class", "other", ""])
rows = st.lists(st.dictionaries(columns, cells, max_size=4), max_size=6)


def jsonl(records: list[dict]) -> bytes:
    return "\n".join(json.dumps(r) for r in records).encode()


def csv_text(records: list[dict]) -> bytes:
    names = sorted({k for r in records for k in r})
    lines = [",".join(names)] + [",".join(str(r.get(n, "")).replace(",", ";") for n in names)
                                 for r in records]
    return "\n".join(lines).encode()


files = st.one_of(
    st.tuples(st.just(".jsonl"), rows.map(jsonl)),
    st.tuples(st.just(".json"), rows.map(lambda r: json.dumps(r).encode())),
    st.tuples(st.just(".csv"), rows.map(csv_text)),
    st.tuples(st.sampled_from([".jsonl", ".csv", ".json", ".tsv", ".parquet"]),
              st.binary(max_size=200)),
    st.tuples(st.sampled_from([".jsonl", ".json"]),
              st.text(max_size=80).map(lambda t: ("{" + t).encode())),
)


def exit_status(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return code, err


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(file=files)
def test_hostile_eval_data_is_planned_or_refused_in_one_line(
        file: tuple[str, bytes], tmp_path_factory: pytest.TempPathFactory,
        capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path_factory.mktemp("data")
    data = work / f"rows{file[0]}"
    data.write_bytes(file[1])
    code, err = exit_status(["plan", *CLASSIFIER, f"eval.dataset.path={data}",
                             f"store.path={work / 'store'}"], capsys)
    assert code in (0, 2), err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 0 or len(lines) == 1, err
    assert MARK not in err
    assert {p.name for p in work.iterdir()} <= {data.name, "store"}


POSITIVE = ("--samples", "--target-samples")   # 1 or more
COUNTS = ("--top", "--target-pieces")           # 0 or more
unusable = st.one_of(
    st.tuples(st.sampled_from(POSITIVE), st.integers(-10**9, 0).map(str)),
    st.tuples(st.sampled_from(COUNTS), st.integers(-10**9, -1).map(str)),
    st.tuples(st.sampled_from(POSITIVE + COUNTS),
              st.sampled_from(["1e9", "nan", "inf", "", "x", "1.5", "0x10", "--", "٣"])))


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(arg=unusable)
def test_hostile_diagnose_counts_are_refused_as_parsed(
        arg: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    """A count diagnose cannot use is refused as it is parsed, before any plan or build."""
    code, err = exit_status(["diagnose", "model=tiny_bert", f"{arg[0]}={arg[1]}"], capsys)
    assert code == 2 and (f"argument {arg[0]}" in err or f"diagnose {arg[0]}" in err), err
