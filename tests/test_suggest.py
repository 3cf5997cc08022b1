"""Per-task-type trial caps suggested from where the history found each best."""

from __future__ import annotations

import pytest
import tvm.s_tir.meta_schedule as ms

from conftest import run_cli
from edgetune.builder.intrinsics import load_tensor_intrinsics
from edgetune.history import open_history
from edgetune.search.suggest import settings_by_operator, suggest_settings
from test_warmstart import TARGET, add, candidates, matmul


def commit_run(path: str, mod, best_at: int, count: int, seed: int) -> None:
    """``count`` records in order; run time falls until ``best_at`` (1-based), then rises."""
    history = open_history(path, board_id="b")
    workload = history.commit_workload(mod)
    found = candidates(mod, count, seed)
    assert len({str(c.sch.trace) for c in found}) == count  # distinct candidates, one row each
    for i, cand in enumerate(found, start=1):
        seconds = 1e-3 * (1 + abs(i - best_at))
        history.commit_tuning_record(ms.database.TuningRecord(cand.sch.trace, workload, [seconds], TARGET, cand.args_info))
    history.close()


@pytest.fixture(scope="module")
def history_path(tmp_path_factory):
    load_tensor_intrinsics(TARGET)
    path = str(tmp_path_factory.mktemp("suggest") / "history.db")
    commit_run(path, matmul(64), best_at=9, count=16, seed=11)
    commit_run(path, matmul(32), best_at=12, count=16, seed=12)
    commit_run(path, add(64), best_at=1, count=1, seed=13)  # too few records to say anything
    return path


def test_best_positions_and_cap_follow_the_rule(history_path):
    history = open_history(history_path, read_only=True)
    (suggestion,) = suggest_settings(history, batch=4, margin=1.25, min_trials=8)
    assert suggestion.operator == ("C",)
    assert sorted(suggestion.best_found_at) == [9, 12] and suggestion.trials == [16, 16]
    # 90th percentile of (9, 12) = 11.7; x1.25 = 14.6; whole batches of 4 -> 16
    assert suggestion.max_trials_per_task == 16
    assert suggest_settings(history, batch=8, margin=2.0)[0].max_trials_per_task == 24  # 23.4 -> 24
    assert len(suggest_settings(history, min_trials=1)) == 2  # now the elementwise add counts too
    history.close()


def test_settings_per_operator_are_what_each_task_type_gets(history_path):
    history = open_history(history_path, read_only=True)
    settings = settings_by_operator(suggest_settings(history, batch=4, sampling=False))
    assert settings == {("C",): {"max_trials": 16, "kmeans_distance_ratio": None}}  # the add has too few records
    history.close()


def test_bad_settings_are_refused(history_path):
    history = open_history(history_path, read_only=True)
    with pytest.raises(ValueError, match="batch must be >= 1, got 0 instead"):
        suggest_settings(history, batch=0)
    with pytest.raises(ValueError, match="margin must be >= 1"):
        suggest_settings(history, margin=0.5)
    history.close()


def test_cli_shows_the_suggestion(history_path):
    result = run_cli("db", "suggest", "--db", history_path, "--batch", "4")
    assert result.returncode == 0, result.stderr
    assert "max_trials_per_task" in result.stdout and "16" in result.stdout
    bad = run_cli("db", "suggest", "--db", history_path, "--margin", "0.1")
    assert bad.returncode != 0 and "margin must be >= 1" in bad.stderr and "Traceback" not in bad.stderr
