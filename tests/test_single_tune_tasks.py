"""One place tunes: ``ms.tune_tasks`` is called only by the tuning pipeline (issue 15).

``edgetune tune`` and every benchmark go through
:func:`edgetune.tuning.run_tune`; a benchmark that compares one component
passes it in through :class:`edgetune.tuning.Components`. A second call site
would be a second tuning loop that drifts from the product's.
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

#: where Python lives in this repository
SOURCE_DIRS = ("edgetune", "benchmarks", "tests", "rpc_setup")
#: the one file allowed to call it
PIPELINE = Path("edgetune/tuning/run.py")


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def tune_tasks_calls(root: Path = REPO) -> list[tuple[Path, int]]:
    """(file relative to ``root``, line) of every call of a function named ``tune_tasks``."""
    found = []
    for directory in SOURCE_DIRS:
        for path in sorted((root / directory).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and _called_name(node) == "tune_tasks":
                    found.append((path.relative_to(root), node.lineno))
    return found


def test_tune_tasks_is_called_only_by_the_pipeline() -> None:
    calls = tune_tasks_calls()
    elsewhere = [f"{path}:{line}" for path, line in calls if path != PIPELINE]
    assert not elsewhere, f"ms.tune_tasks must be called only in {PIPELINE} (through run_tune), also called at {elsewhere}"
    assert len(calls) == 1, f"{PIPELINE} must call ms.tune_tasks exactly once, got {len(calls)} calls instead"


def test_the_check_sees_every_spelling(tmp_path: Path) -> None:
    """A bare name and an attribute both count; a mention that is not a call does not."""
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "a.py").write_text("from x import tune_tasks\ntune_tasks()\nms.tune_tasks(tasks=[])\nf = ms.tune_tasks\n")
    assert tune_tasks_calls(tmp_path) == [(Path("benchmarks/a.py"), 2), (Path("benchmarks/a.py"), 3)]
