"""The winner's curse (edgetune/tuning/confirm.py): each task's fastest schedules are timed again before the model is built."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tvm
import tvm.s_tir.meta_schedule as ms
from tvm import te
from tvm.ir.utils import derived_object

from edgetune.measure.futures import MeasuredFuture
from edgetune.tuning.confirm import retime_limit, to_retime


def test_only_candidates_near_the_fastest_are_timed_again() -> None:
    assert to_retime([1.0, 1.1, 1.14, 1.2], 3, 0.15) == 3
    assert to_retime([1.0, 1.1, 1.2, 1.3], 3, 0.15) == 2
    assert to_retime([1.0, 1.1, 1.14, 1.15], 2, 0.15) == 2  # at most count
    assert to_retime([1.0, 1.5, 1.6], 3, 0.15) == 0  # alone within the margin: nothing it could lose its place to
    assert to_retime([1.0], 3, 10.0) == 0 and to_retime([1.0, 1.0], 1, 0.15) == 0  # count 1: off


def test_short_runs_do_without_it() -> None:
    assert retime_limit(tasks=20, count=3, search_budget=700) == 60
    assert retime_limit(tasks=20, count=3, search_budget=239) == 0  # 8 per task: it would add more than a third
    assert retime_limit(tasks=20, count=0, search_budget=700) == 0
    assert retime_limit(tasks=0, count=3, search_budget=700) == 0


@derived_object
class LuckyRunner(ms.runner.PyRunner):
    """The search's runner, where the slowest candidate of its first batch measures 1000x faster than it runs.

    A noisy board's extreme case: without re-timing, the history picks it.
    """

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self.inner = inner
        self.lucky_sec: float | None = None

    def run(self, runner_inputs: list[Any]) -> list[Any]:
        results = [future.result() for future in self.inner.run(runner_inputs)]
        if self.lucky_sec is None:
            ok = [i for i, r in enumerate(results) if r.error_msg is None and r.run_secs]
            slowest = max(ok, key=lambda i: np.mean([float(x) for x in results[i].run_secs]))
            secs = [float(x) * 1e-3 for x in results[slowest].run_secs]
            results[slowest] = ms.runner.RunnerResult(secs, None)
            self.lucky_sec = float(np.mean(secs))
        return [MeasuredFuture(result) for result in results]


def _matmul(n: int = 64) -> tvm.IRModule:
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


@pytest.mark.parametrize("confirm_best", [3, 0])
def test_a_lucky_measurement_is_timed_again_and_loses_its_place(
    tmp_path: Path, loopback_board, confirm_best: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from edgetune.board.base import TrackerBoard
    from edgetune.history import open_history
    from edgetune.history.database import HistoryDatabase
    from edgetune.profile import load_profile
    from edgetune.tuning import Components, TuneOptions, run_tune

    profile = load_profile("host").with_overrides(
        rpc={"key": loopback_board.key},
        tuning={"schedules": "off", "transfer": "off", "confirm_best": confirm_best, "confirm_margin": 1e4},
    )
    lucky: list[LuckyRunner] = []

    def wrap(runner: Any) -> Any:
        lucky.append(LuckyRunner(runner))
        return lucky[-1]

    retimed: list[tuple[str, float]] = []  # (candidate hash, its new mean seconds), in the order re-timing wrote them
    retime = HistoryDatabase._cls.retime_candidate  # the Python class behind TVM's derived object

    def spy(self: Any, workload: Any, target: Any, candidate_hash: str, run_secs: Any) -> int:
        retimed.append((candidate_hash, float(np.mean([float(x) for x in run_secs]))))
        return retime(self, workload, target, candidate_hash, run_secs)

    monkeypatch.setattr(HistoryDatabase._cls, "retime_candidate", spy)
    mod = _matmul()
    options = TuneOptions(profile=profile, model=None, out_dir=tmp_path, trials=20, evaluate=False, board=TrackerBoard(loopback_board))
    summary = run_tune(options, components=Components(tasks=[("matmul", mod, 1)], wrap_runner=wrap))
    lucky_sec = lucky[0].lucky_sec
    assert lucky_sec is not None
    task = summary.tasks[0]
    history = open_history(summary.history, read_only=True)
    try:
        best = history.best_record(mod, profile.tvm_target())
        best_sec = float(np.mean([float(x) for x in best.run_secs]))
        ((best_hash, _),) = history.fastest_candidates(mod, profile.tvm_target(), 1)
    finally:
        history.close()
    assert summary.trials.this_run <= 20
    if confirm_best == 0:
        # the lucky measurement is what the model would be built from: the case re-timing exists for
        assert summary.trials.retimed == 0 and task.retimed is None
        assert best_sec == pytest.approx(lucky_sec)
        return
    assert summary.trials.retimed == 3
    assert task.retimed["candidates"] == 3
    # re-timing wrote the search's fastest first: the lucky one, which now holds a time near its real one
    assert len(retimed) == 3, retimed
    lucky_hash, lucky_retimed_sec = retimed[0]
    assert lucky_retimed_sec > 10 * lucky_sec, retimed
    # it was the slowest of its first batch, but on a noisy board it can time as the fastest when timed again, and is
    # then still delivered: the pick changed exactly when the history's best is another candidate
    assert task.retimed["pick_changed"] is (best_hash != lucky_hash), (best_sec, retimed)
    assert best_sec <= lucky_retimed_sec * (1 + 1e-9)
    assert task.retimed["before_us"] == pytest.approx(lucky_sec * 1e6, rel=1e-3)
    # the lucky candidate now holds its real time: the history's best (what the build applies) is another one
    assert best_sec > 10 * lucky_sec
    assert task.best_latency_us == pytest.approx(best_sec * 1e6) == pytest.approx(task.retimed["after_us"], rel=1e-3)
    assert any("timed the fastest schedules of 1 tasks again (3 measurements)" in line for line in summary.retimed_lines())
    # re-timing measured no new candidate: the history holds this run's trials, no more (what a resumed run counts)
    history = open_history(summary.history, read_only=True)
    try:
        assert history.count_records(mod, profile.tvm_target()) == summary.trials.this_run
    finally:
        history.close()
    # the report's task table shows the best before and after, the changed pick marked
    from edgetune.report import write_report

    page = write_report(tmp_path).read_text()
    assert "re-timed (us)" in page and " -&gt; " in page and (" *</td>" in page) is task.retimed["pick_changed"]
