"""The tree passes the lint configured in pyproject.toml ([tool.ruff])."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import IN_CI, REPO


def test_ruff_finds_nothing() -> None:
    try:
        import ruff  # noqa: F401
    except ImportError:
        if IN_CI:
            pytest.fail("ruff is not installed; it is in the test extra (pip install -e '.[test]')")
        pytest.skip("ruff not installed (pip install -e '.[test]')")
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "edgetune", "tests", "benchmarks"], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
