"""Which tests share an xdist worker (tests/xdist_groups.py), on small pytest sessions of their
own with two workers and `--dist loadgroup`, as `make test` runs: a module-scoped fixture is
made once however its module's tests are handed out, and a test's own group mark is kept."""

from __future__ import annotations

import os

import pytest

from tests.conftest import ROOT

pytest_plugins = ["pytester"]

# Each fixture appends a line per making; the tests say which worker ran them.
SHARED = """import os
import pytest


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    with open(os.environ["MADE_LOG"], "a") as log:
        log.write(__name__ + "\\n")
    return True


def test_a(made):
    assert made


def test_b(made):
    assert made


def test_c(made):
    assert made


def test_alone():
    assert True
"""
OWN_GROUP = """import pytest


@pytest.fixture(scope="module")
def made():
    return True


@pytest.mark.xdist_group("elsewhere")
def test_named(made):
    assert made
"""


@pytest.fixture
def two_workers(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    """Run a session of the files written in `pytester` on two loadgroup workers; (result,
    the modules whose fixture was made, one line per making)."""
    pytester.makeconftest("import pytest\nfrom tests import xdist_groups\n\n\n"
                          "@pytest.hookimpl(trylast=True)\n"
                          "def pytest_collection_modifyitems(config, items):\n"
                          "    xdist_groups.assign(config, items)\n")
    log = pytester.path / "made.log"
    monkeypatch.setenv("MADE_LOG", str(log))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")

    def run() -> tuple[pytest.RunResult, list[str]]:
        result = pytester.runpytest_subprocess("-p", "xdist", "-n", "2", "--dist", "loadgroup",
                                               "-v")
        return result, log.read_text().splitlines() if log.is_file() else []
    return run


def test_a_module_fixture_is_made_once_on_two_workers(pytester: pytest.Pytester,
                                                      two_workers) -> None:
    pytester.makepyfile(test_shared=SHARED)
    result, made = two_workers()
    result.assert_outcomes(passed=4)
    assert made == ["test_shared"]  # ungrouped, tests a and c and test b went to both workers
    workers = {line.split()[0] for line in result.outlines
               if "test_shared.py::test_" in line and "PASSED" in line and "alone" not in line}
    assert len(workers) == 1, result.outlines
    # which worker finishes first varies: each line is looked for in the whole output
    result.stdout.fnmatch_lines(["*PASSED test_shared.py::test_a@test_shared*"])
    result.stdout.fnmatch_lines(["*PASSED test_shared.py::test_alone *"])


def test_a_group_the_test_names_is_kept(pytester: pytest.Pytester, two_workers) -> None:
    pytester.makepyfile(test_own=OWN_GROUP)
    result, _ = two_workers()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_own.py::test_named@elsewhere *"])
