"""The suite's time budget (tests/budget.py): a session on CI that takes longer than
`[tool.modelplan.test_budget] minutes` fails with one line, the wall time, the budget and the
slowest files; under the budget, or off CI, it passes. Run on small pytest sessions of their own
with a budget of a fraction of a second."""

from __future__ import annotations

import os
import tomllib

import pytest

from tests.conftest import ROOT

pytest_plugins = ["pytester"]

# 0.002 min is 0.12 s: the slow file alone sleeps longer.
TESTS = {
    "test_slow": "import time\n\ndef test_sleeps():\n    time.sleep(0.4)\n",
    "test_quick": "def test_adds():\n    assert 1 + 1 == 2\n",
}


@pytest.fixture
def session(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    """A pytest session's folder with the budget plugin, and the CI variable set."""
    pytester.makeconftest("from tests import budget\n\n\ndef pytest_configure(config):\n"
                          "    budget.register(config)\n")
    pytester.makepyfile(**TESTS)
    monkeypatch.setenv("CI", "true")
    # the sessions import tests.budget from this checkout, in this process or in a subprocess
    # (an installed copy of the project is not required to have the tests)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    # The installed plugins are not what is tested and take seconds to load and report.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")

    def with_budget(minutes: str) -> pytest.Pytester:
        pytester.makepyprojecttoml(f"[tool.modelplan.test_budget]\nminutes = {minutes}\n")
        return pytester
    return with_budget


def budget_lines(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if "test budget" in line]


def test_a_session_past_the_budget_fails_with_one_line(session) -> None:
    result = session("0.002").runpytest()
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    [line] = budget_lines(result)
    assert line.startswith("test budget exceeded: pytest took 0.0"), line
    assert "the budget is 0.002 min ([tool.modelplan.test_budget] minutes in pyproject.toml)" in line
    assert line.endswith("slowest files: test_slow.py 0 s, test_quick.py 0 s"), line


def test_a_session_under_the_budget_passes(session) -> None:
    result = session("5").runpytest()
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.OK
    assert budget_lines(result) == []


def test_off_ci_the_budget_is_not_checked(session, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI")
    result = session("0.002").runpytest()
    assert result.ret == pytest.ExitCode.OK
    assert budget_lines(result) == []


def test_a_failed_session_keeps_its_failure(session, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_broken="def test_fails():\n    assert False\n")
    result = session("0.002").runpytest()
    result.assert_outcomes(passed=2, failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert len(budget_lines(result)) == 1


def test_the_controller_counts_the_workers_files(session) -> None:
    """Under pytest-xdist the workers run the tests and the controller times the session."""
    result = session("0.002").runpytest_subprocess("-p", "xdist", "-n", "2")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    [line] = budget_lines(result)
    assert "slowest files: test_slow.py 0 s, test_quick.py 0 s" in line, line


def test_a_budget_that_is_not_a_number_is_a_usage_error(session) -> None:
    result = session('"soon"').runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([("*[[]tool.modelplan.test_budget[]] minutes is 'soon'; "
                                  "set it to a positive number of minutes")])


def test_the_project_sets_a_budget() -> None:
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["modelplan"]
    minutes = table["test_budget"]["minutes"]
    assert isinstance(minutes, int | float) and minutes > 0, minutes
