"""The suite's own scheduling: the heaviest test files first (tests/durations.json, conftest.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import conftest

TESTS = Path(__file__).resolve().parent


def test_the_heaviest_files_come_first_each_files_tests_in_their_order(monkeypatch):
    monkeypatch.setattr(conftest, "FILE_SECONDS", {"tests/test_b.py": 300.0, "tests/test_c.py": 10.0,
                                                   "tests/test_d.py": 50.0})
    names = ["tests/test_a.py::one", "tests/test_b.py::one", "tests/test_b.py::two", "tests/test_c.py::one",
             "tests/test_d.py::two", "tests/test_d.py::one", "tests/test_a.py::two"]
    items = [SimpleNamespace(nodeid=name) for name in names]
    conftest.pytest_collection_modifyitems(None, items)
    # test_a.py is not known yet: it counts as the median file (50 s), after test_d.py by name
    assert [item.nodeid for item in items] == [
        "tests/test_b.py::one", "tests/test_b.py::two", "tests/test_a.py::one", "tests/test_a.py::two",
        "tests/test_d.py::two", "tests/test_d.py::one", "tests/test_c.py::one"]


def test_the_recorded_durations_name_test_files_that_exist():
    missing = [name for name in conftest.FILE_SECONDS if not (TESTS.parent / name).is_file()]
    assert not missing, f"tests/durations.json names files that are gone (python tests/harness/file_durations.py LOG): {missing}"
