"""diagnose's counts are checked as it parses them: a sample count of 1 or more, a table length
and a piece count of 0 or more (0: all rows, no pieces), whole numbers; one error line, exit 2,
nothing run."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli


@pytest.mark.parametrize(("args", "said"), [
    (("--samples", "-1"), "--samples: must be 1 or more, got -1"),
    (("--samples", "0"), "--samples: must be 1 or more, got 0"),
    (("--samples", "many"), "--samples: must be a whole number"),
    (("--top", "-3"), "--top: must be 0 or more, got -3"),
    (("--target-pieces", "-1"), "--target-pieces: must be 0 or more"),
    (("--target-samples", "0"), "--target-samples: must be 1 or more"),
])
def test_a_bad_count_is_refused_as_parsed(args: tuple[str, ...], said: str) -> None:
    result = run_cli("diagnose", "model=tiny_bert", *args)
    assert result.returncode == 2 and said in result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("error:") == 1
