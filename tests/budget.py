"""The suite's time budget: on CI (the CI environment variable set) a pytest session whose wall
time passes the budget fails, with one line naming the wall time, the budget and the slowest
files. The budget is `[tool.modelplan.test_budget] minutes` in the rootdir's pyproject.toml.

Only the controller (the process without `workerinput`, the only process without xdist) times
the session; the workers' reports reach its `pytest_runtest_logreport`, so the files' times
cover every worker."""

from __future__ import annotations

import os
import sys
import time
import tomllib
from collections import Counter

import pytest

BUDGET_KEY = "[tool.modelplan.test_budget] minutes"
SLOWEST_FILES = 3


def budget_minutes(config: pytest.Config) -> float | None:
    """The budget in minutes from the rootdir's pyproject.toml, None where it sets none."""
    pyproject = config.rootpath / "pyproject.toml"
    if not pyproject.is_file():
        return None
    with pyproject.open("rb") as f:
        table = tomllib.load(f).get("tool", {}).get("modelplan", {}).get("test_budget", {})
    minutes = table.get("minutes")
    if minutes is None:
        return None
    if isinstance(minutes, bool) or not isinstance(minutes, int | float) or minutes <= 0:
        raise pytest.UsageError(f"{pyproject}: {BUDGET_KEY} is {minutes!r}; "
                                "set it to a positive number of minutes")
    return float(minutes)


class SuiteBudget:
    """Times one session in the controller and fails it past the budget."""

    def __init__(self, minutes: float) -> None:
        self.minutes = minutes
        self.started = time.monotonic()
        self.file_seconds: Counter[str] = Counter()

    def pytest_sessionstart(self) -> None:
        self.started = time.monotonic()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.file_seconds[report.nodeid.split("::")[0]] += report.duration

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session):
        # Outermost: the verdict comes after pytest's own summary, as its last line.
        yield
        wall = time.monotonic() - self.started
        if wall <= self.minutes * 60:
            return
        slowest = ", ".join(f"{path} {seconds:.0f} s"
                            for path, seconds in self.file_seconds.most_common(SLOWEST_FILES))
        line = (f"test budget exceeded: pytest took {wall / 60:.2f} min, the budget is "
                f"{self.minutes:g} min ({BUDGET_KEY} in pyproject.toml); slowest files: "
                f"{slowest or 'none ran'}")
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:  # -p no:terminal
            print(line, file=sys.stderr)
        else:
            reporter.write_line(line, red=True, bold=True)
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def register(config: pytest.Config) -> None:
    """Time this session against the budget when it runs on CI, in the controller."""
    if not os.environ.get("CI") or hasattr(config, "workerinput"):
        return
    minutes = budget_minutes(config)
    if minutes is not None:
        config.pluginmanager.register(SuiteBudget(minutes), "modelplan-suite-budget")
