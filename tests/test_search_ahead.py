"""Search overlapped with measurement (issue 55, point 1): a task's next batch is searched and built while the board times its last.

A board that takes a fixed time per measurement (a runner wrapper that sleeps) stands in for a real board
slower than the host; the tune is the product's pipeline (``run_tune``) on the loopback tracker.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import tvm
import tvm.s_tir.meta_schedule as ms
from tvm import te
from tvm.ir.utils import derived_object

from edgetune.builder.builder import WarmBuilder
from edgetune.errors import TuningInterrupted
from edgetune.measure.futures import PromisedFuture
from edgetune.search.lookahead import Lookahead

SECONDS_PER_CANDIDATE = 0.4


@derived_object
class SlowBoard(ms.runner.PyRunner):
    """The wrapped runner, as a board that takes ``SECONDS_PER_CANDIDATE`` per measurement; records when each batch ran."""

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self.inner = inner
        self.batches: list[tuple[float, float, int]] = []  # (start, end, candidates), time.monotonic
        self.delivered = 0  # results handed back
        self._lock = threading.Lock()

    def run(self, runner_inputs: list[Any]) -> list[Any]:
        promises = [concurrent.futures.Future() for _ in runner_inputs]
        threading.Thread(target=self._measure, args=(list(runner_inputs), promises), daemon=True).start()
        return [PromisedFuture(p) for p in promises]

    def _measure(self, inputs: list[Any], promises: list[concurrent.futures.Future]) -> None:
        with self._lock:  # one board: batches one after the other
            started = time.monotonic()
            time.sleep(SECONDS_PER_CANDIDATE * len(inputs))
            results = [f.result() for f in self.inner.run(inputs)]
            self.batches.append((started, time.monotonic(), len(inputs)))
            self.delivered += len(results)
        for promise, result in zip(promises, results):
            promise.set_result(result)


def _matmul(n: int) -> tvm.IRModule:
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def _options(tmp_path: Path, loopback_board: Any, trials: int, **tuning: Any) -> Any:
    from edgetune.board.base import TrackerBoard
    from edgetune.profile import load_profile
    from edgetune.tuning import TuneOptions

    profile = load_profile("host").with_overrides(
        rpc={"key": loopback_board.key},
        measure={"number": 1, "repeat": 1, "min_repeat_ms": 0},
        tuning={"schedules": "off", "transfer": "off", "confirm_best": 0, "num_trials_per_iter": 4,
                "early_stop": "none", "default_schedule": False, **tuning},
    )
    return TuneOptions(profile=profile, model=None, out_dir=tmp_path, trials=trials, evaluate=False,
                       board=TrackerBoard(loopback_board))


def _spy_on_searches_ahead(monkeypatch: pytest.MonkeyPatch, after: Any = None) -> list[tuple[Any, Any]]:
    """Every search ahead that did something, as (its record, the strategy's proposal); ``after(lookahead)`` runs after each."""
    seen: list[tuple[Any, Any]] = []
    original = Lookahead.search_ahead

    def spy(self: Lookahead, task: str) -> bool:
        done = original(self, task)
        if done:
            seen.append((self.searches[-1], self._searches[task]._ahead))
            if after is not None:
                after(self)
        return done

    monkeypatch.setattr(Lookahead, "search_ahead", spy)
    return seen


def test_the_next_batch_is_searched_and_built_while_the_board_times_the_last(tmp_path, loopback_board, monkeypatch) -> None:
    from edgetune.tuning import Components, run_tune

    searched = _spy_on_searches_ahead(monkeypatch)
    boards: list[SlowBoard] = []

    def wrap(runner: Any) -> Any:
        boards.append(SlowBoard(runner))
        return boards[-1]

    with closing(WarmBuilder(timeout_sec=60, max_workers=1)) as builder:
        # every batch is measured whole (no sampling), and the task may measure 12 of the run's 16
        options = _options(tmp_path, loopback_board, 16, sampler="none", max_trials_per_task=12)
        summary = run_tune(options, components=Components(
            tasks=[("mm", _matmul(48), 1)], wrap_runner=wrap, builder=builder))
    (board,) = boards
    assert searched, (board.batches, searched)
    # a search ahead ran while the board was timing a batch: it began before that batch's measurement ended
    overlapping = [
        (ahead, start, end) for ahead, _proposal in searched for start, end, _n in board.batches
        if ahead.started < end and ahead.ended > start
    ]
    assert overlapping, (searched, board.batches)
    # nothing is searched ahead once the batch on the board reaches the task's cap: one per batch but the last
    assert len(board.batches) == 3 and len(searched) <= 2, (searched, board.batches)
    # and its builds were started then, and served when the batch was handed out (each module built once)
    assert any(ahead.builds_started for ahead, _ in searched) and builder.stats.ahead >= 1
    assert builder.stats.reused >= 1
    assert builder.stats.built + builder.stats.failed + builder.stats.timed_out <= builder.stats.ahead + summary.trials.this_run
    # every result the board gave back is recorded; the search's time ahead is in the host time
    assert summary.trials.this_run == board.delivered
    assert summary.host_time["ahead"] > 0


@pytest.mark.parametrize("scheduler", ["gradient", "ucb"])
def test_on_a_board_that_shares_the_host_cpu_the_next_batch_is_searched_while_the_last_builds_never_while_it_is_timed(
    tmp_path, loopback_board, monkeypatch, scheduler
) -> None:
    """The embedded board is this host's CPU: a timing taken while the host searches or builds comes out slow. There a
    task's next batch is searched beside its last batch's builds, nothing is built ahead, and the batch is timed only
    once the search is done: under MetaSchedule's scheduler (the default, each batch awaited by AwaitingRunner) and
    edgetune's (which awaits each batch itself there)."""
    import dataclasses

    import edgetune.measure.pending as pending
    from edgetune.board.base import EmbeddedBoard
    from edgetune.tuning import Components, run_tune

    searched = _spy_on_searches_ahead(monkeypatch)
    spied = Lookahead.search_ahead
    searching: list[tuple[float, float]] = []  # each search ahead, made slower than the batch's builds

    def slow_search_ahead(self: Lookahead, task: str) -> bool:
        started = time.monotonic()
        time.sleep(0.5)  # the board must wait for the search even when the builds are done first
        try:
            return spied(self, task)
        finally:
            searching.append((started, time.monotonic()))

    monkeypatch.setattr(Lookahead, "search_ahead", slow_search_ahead)
    building: list[tuple[float, float]] = []  # when the runner waited for a candidate's build, and until when
    real_resolve = pending.resolve

    def timed_resolve(artifact_path: Any) -> Any:
        started = time.monotonic()
        try:
            return real_resolve(artifact_path)
        finally:
            building.append((started, time.monotonic()))

    monkeypatch.setattr(pending, "resolve", timed_resolve)
    boards: list[SlowBoard] = []

    def wrap(runner: Any) -> Any:
        boards.append(SlowBoard(runner))
        return boards[-1]

    with closing(WarmBuilder(timeout_sec=60, max_workers=1)) as builder:
        options = _options(tmp_path, loopback_board, 16, sampler="none", max_trials_per_task=12, task_scheduler=scheduler)
        options = dataclasses.replace(options, board=EmbeddedBoard(key="quiet-board", num_threads=1))
        summary = run_tune(options, components=Components(
            tasks=[("mm", _matmul(48), 1)], wrap_runner=wrap, builder=builder))
    (board,) = boards
    assert summary.search.scheduler_awaits_measurements  # the embedded board's: edgetune's scheduler waits for each batch
    assert searched, (board.batches, searched)
    # no search ahead while a batch was timed
    assert not [
        (began, ended, start, end) for began, ended in searching for start, end, _n in board.batches
        if began < end and ended > start
    ], (searching, board.batches)
    # but beside a batch's builds: a search ahead began before the runner had the batch built
    assert any(began < built for began, _ended in searching for _start, built in building), (searching, building)
    # nothing was built ahead (those builds would run beside a timing); every result is recorded
    assert builder.stats.ahead == 0 and not any(ahead.builds_started for ahead, _ in searched)
    assert summary.trials.this_run == board.delivered
    assert summary.host_time["ahead"] > 0


def test_a_stop_during_an_overlapped_batch_keeps_every_measurement_and_stores_none_of_the_next(
    tmp_path, loopback_board, monkeypatch
) -> None:
    from edgetune.history import open_history
    from edgetune.tuning import CandidateCache, Components, TuningPipeline

    pipelines: list[TuningPipeline] = []

    def stop_once_the_next_batch_is_searched(lookahead: Lookahead) -> None:
        if len(searched) == 2:  # the second overlapped batch: searched, its builds under way
            pipelines[0].stop.event.set()

    searched = _spy_on_searches_ahead(monkeypatch, after=stop_once_the_next_batch_is_searched)
    boards: list[SlowBoard] = []

    def wrap(runner: Any) -> Any:
        boards.append(SlowBoard(runner))
        return boards[-1]

    mod = _matmul(40)
    options = _options(tmp_path, loopback_board, 40)
    pipelines.append(TuningPipeline(options, None, Components(tasks=[("mm", mod, 1)], wrap_runner=wrap)))
    with pytest.raises(TuningInterrupted):
        pipelines[0].run()
    (board,) = boards
    assert len(searched) == 2
    half_built = searched[-1][1].batch
    assert half_built
    history = open_history(str(tmp_path / "history.db"), read_only=True)
    try:
        target = options.profile.tvm_target()
        cache = CandidateCache()
        stored = cache.add_history(history, mod, target)
        # every measurement the board gave back is in the history, the batch in flight at the stop included
        assert stored == board.delivered and stored >= 2 * 1
        # the batch searched ahead (and being built) when the stop came: none of it stored
        assert all(cache.lookup_mod(candidate.sch.mod) is None for candidate in half_built)
    finally:
        history.close()
