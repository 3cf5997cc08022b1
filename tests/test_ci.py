"""`make test` ends: a test that kills its pytest worker fails the run, it does not leave it waiting forever."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _make_test_options() -> list[str]:
    """The pytest options of the Makefile's ``test`` recipe, its variables filled in for one worker."""
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    [recipe] = re.findall(r"^test:.*\n\t\$\(BIN\)/python -m pytest (.*)$", makefile, re.M)
    recipe = recipe.replace("$(PYTEST_WORKERS)", "1").replace("$(PYTEST_ARGS)", "")
    assert "$(" not in recipe, f"a Makefile variable this test does not fill in: {recipe}"
    return recipe.split()


def test_a_worker_killed_by_its_test_fails_the_run_instead_of_hanging(tmp_path: Path) -> None:
    """pytest-xdist 3.8 replaces a crashed worker and, under ``--dist loadfile``, can then wait forever with every
    worker idle (pytest-dev/pytest-xdist#784): a CI run on a CPU without AVX-512 hung for 2 h on one SIGILL. The
    Makefile's options make the crash a failure that names the test."""
    (tmp_path / "test_one.py").write_text("def test_fine():\n    pass\n")
    (tmp_path / "test_two.py").write_text("import os, signal\n\ndef test_crash():\n    os.kill(os.getpid(), signal.SIGILL)\n"
                                          "\ndef test_after():\n    pass\n")
    (tmp_path / "test_three.py").write_text("def test_fine_too():\n    pass\n")
    command = [sys.executable, "-m", "pytest", *_make_test_options(), "-p", "no:cacheprovider", "-q",
               "-o", "addopts=", "-o", "testpaths=", str(tmp_path)]
    try:
        done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired as hung:
        raise AssertionError(f"`make test`'s pytest options hung after a worker crash: {' '.join(command)}") from hung
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "crashed while running 'test_two.py::test_crash'" in output, output
