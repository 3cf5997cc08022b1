"""Shared fixtures: one real loopback tracker + RPC server for the whole session.

System components the tests need (a C++ compiler, the aarch64 cross toolchain)
are skipped when missing on a developer machine, but in CI (``CI=true``) a
missing component is a failure: `.ci/run` installs them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from edgetune.board.local import LocalBoard
from edgetune.board.tracker import TrackerAddress

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
REPO = Path(__file__).resolve().parent.parent
SESSION_KEY = "pytest-local"


def require_tool(name: str, debian_package: str) -> str:
    """Path of ``name``; skip without it locally, fail without it in CI."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} not found (Debian package {debian_package})"
        if IN_CI:
            pytest.fail(message + "; .ci/run should have installed it")
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def loopback_board(tmp_path_factory: pytest.TempPathFactory) -> TrackerAddress:
    """A real TVM tracker and RPC server on 127.0.0.1, shared by every test."""
    board = LocalBoard(key=SESSION_KEY, num_threads=2, log_dir=tmp_path_factory.mktemp("board"))
    address = board.start()
    yield address
    board.stop()


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the real ``edgetune`` console entry point."""
    script = Path(sys.executable).parent / "edgetune"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "edgetune.cli"]
    return subprocess.run(
        [*command, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
