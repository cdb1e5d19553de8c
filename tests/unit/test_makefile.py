"""The Makefile's two commands on a fresh machine: an install that prints no setuptools
deprecation banner (the 'compat' editable mode is transitional), and `make test` that builds
the docs site strictly before it runs the tests."""

from __future__ import annotations

import re

from tests.conftest import ROOT

MAKEFILE = (ROOT / "Makefile").read_text()


def recipe(target: str) -> list[str]:
    body = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", MAKEFILE, re.MULTILINE)
    assert body, f"the Makefile has no {target} target"
    return [line.strip() for line in body.group(1).splitlines()]


def test_installs_use_the_default_editable_mode() -> None:
    installs = [ln for ln in MAKEFILE.splitlines() if "pip install" in ln and " -e " in ln]
    assert installs and not [ln for ln in installs if "editable_mode" in ln], installs


def test_make_test_builds_the_docs_strictly_before_the_tests() -> None:
    steps = recipe("test")
    docs = next(i for i, s in enumerate(steps) if "mkdocs build --strict" in s)
    tests = next(i for i, s in enumerate(steps) if "pytest" in s)
    assert docs < tests


def test_make_test_lists_the_slowest_tests() -> None:
    [pytest_line] = [s for s in recipe("test") if "pytest" in s]
    assert "--durations=25" in pytest_line.split(), pytest_line
