"""Several boards under one key: a batch spread over them, and boards that go away.

Real components: a loopback tracker with two or three real TVM RPC servers
registered under one key (``LocalBoard(servers=N)``), real MetaSchedule
candidates built by the warm builder, and a candidate that really segfaults
the server's session process.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import closing

import pytest
import tvm
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.builder import BuilderInput
from tvm.s_tir.meta_schedule.runner import RunnerInput

from edgetune.board.local import LocalBoard
from edgetune.builder.builder import WarmBuilder
from edgetune.common.failure import is_board_unavailable
from edgetune.measure.runner import MeasureConfig, TrackerRunner
from test_build_measure import HOST, candidates  # noqa: F401 - candidates is a fixture

FAST = dict(evaluator="fixed", number=1, repeat=1, min_repeat_ms=0)


def _crashing_module() -> tvm.IRModule:
    """Writes a quarter terabyte past its buffer: the session process that runs it segfaults."""
    from tvm.script import tirx as T

    @T.prim_func
    def main(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for i in range(4):
            B[T.int64(i) * T.int64(1 << 38) + T.int64(1 << 38)] = A[i]

    return tvm.IRModule({"main": main})


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    with LocalBoard(key="farm", num_threads=1, log_dir=tmp_path_factory.mktemp("farm"), servers=3) as board:
        yield board


@pytest.fixture(scope="module")
def built(candidates):  # noqa: F811 - the fixture imported above
    ctx, found = candidates
    with closing(WarmBuilder(timeout_sec=60, max_workers=2)) as builder:
        results = builder.build([BuilderInput(c.sch.mod, HOST) for c in found])
        crashing = _crashing_module()
        crash = builder.build([BuilderInput(crashing, HOST)])[0]
        assert crash.error_msg is None, crash.error_msg
        crash_args = ArgInfo.from_prim_func(crashing["main"])
        yield [(r.artifact_path, c.args_info) for r, c in zip(results, found)], (crash.artifact_path, crash_args)


def _inputs(pairs):
    return [RunnerInput(path, "cpu", args) for path, args in pairs]


def _wait_registered(board: LocalBoard, count: int, timeout: float = 60.0) -> None:
    from edgetune.board.rpc_tracker import device_counts, tracker_summary

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if device_counts(tracker_summary(board.address), board.key)[1] >= count:
            return
        time.sleep(0.2)
    raise AssertionError(f"fewer than {count} free servers after {timeout} s")


def test_a_batch_is_spread_over_every_free_board(farm, built):
    good, _crash = built
    _wait_registered(farm, 3)
    runner = TrackerRunner(farm.address, config=MeasureConfig(**FAST, cooldown_sec=0.3))
    try:
        results = [f.result() for f in runner.run(_inputs(good + good[:2]))]
    finally:
        runner.close()
    assert [r.error_msg for r in results] == [None] * 6
    assert len(runner.stats.by_board) == 3, runner.stats.by_board
    assert sum(runner.stats.by_board.values()) == 6
    assert set(runner.measured_on) == {str(path) for path, _ in good}
    assert set(runner.measured_on.values()) <= set(runner.stats.by_board)


def test_a_board_killed_mid_batch_loses_no_candidate(tmp_path, built):
    good, _crash = built
    with LocalBoard(key="dying", num_threads=1, log_dir=tmp_path, servers=2) as board:
        _wait_registered(board, 2)
        runner = TrackerRunner(board.address, config=MeasureConfig(**FAST, cooldown_sec=0.8), board_wait_sec=20)
        victim = board.server_processes[0]
        killer = threading.Timer(1.2, lambda: os.killpg(victim.pid, signal.SIGKILL))
        killer.start()
        try:
            results = [f.result() for f in runner.run(_inputs(good * 2))]
        finally:
            killer.cancel()
            runner.close()
    assert [r.error_msg for r in results] == [None] * 8, runner.stats.errors
    assert runner.stats.failed == 0
    assert runner.stats.measured == 8


def test_a_candidate_that_crashes_the_server_is_failed_and_the_rest_still_run(farm, built):
    good, crash = built
    _wait_registered(farm, 2)
    runner = TrackerRunner(farm.address, config=MeasureConfig(**FAST), board_wait_sec=30)
    try:
        results = [f.result() for f in runner.run(_inputs([good[0], crash, good[1], good[2]]))]
    finally:
        runner.close()
    assert results[1].run_secs is None
    assert "ended the RPC session 2 times" in str(results[1].error_msg)
    assert not is_board_unavailable(results[1].error_msg)
    assert [results[i].error_msg for i in (0, 2, 3)] == [None] * 3
    assert runner.stats.sessions_lost == 2


def test_no_board_at_all_leaves_candidates_unmeasured_not_failed(tmp_path, built):
    good, _crash = built
    with LocalBoard(key="gone", num_threads=1, log_dir=tmp_path, servers=1) as board:
        address = board.address
        os.killpg(board.server_processes[0].pid, signal.SIGKILL)
        time.sleep(1.0)
        runner = TrackerRunner(address, config=MeasureConfig(**FAST), board_wait_sec=3)
        try:
            results = [f.result() for f in runner.run(_inputs(good[:2]))]
        finally:
            runner.close()
    assert all(is_board_unavailable(r.error_msg) for r in results), [r.error_msg for r in results]
    assert runner.stats.unmeasured == 2 and runner.stats.failed == 0


def test_a_tracker_restarted_between_batches_loses_nothing(tmp_path, built):
    good, _crash = built
    with LocalBoard(key="restart", num_threads=1, log_dir=tmp_path, servers=2) as board:
        _wait_registered(board, 2)
        runner = TrackerRunner(board.address, config=MeasureConfig(**FAST), board_wait_sec=60)
        try:
            first = [f.result() for f in runner.run(_inputs(good))]
            board.restart_tracker()
            second = [f.result() for f in runner.run(_inputs(good))]  # waits until a server is back
        finally:
            runner.close()
    assert [r.error_msg for r in first + second] == [None] * 8, runner.stats.errors
    assert runner.stats.failed == 0 and runner.stats.unmeasured == 0


def test_a_run_whose_only_board_goes_away_stops_with_the_resume_hint(tmp_path):
    """Through the product's pipeline: what was measured is kept, nothing is stored as failed."""
    import sqlalchemy as sa

    from edgetune.board.base import TrackerBoard
    from edgetune.errors import TuningInterrupted
    from edgetune.profile import load_profile
    from edgetune.tuning import Components, TuneOptions, run_tune
    from edgetune.tuning.progress import ProgressSink

    class KillAfterFirstBatch(ProgressSink):
        def __init__(self, board: LocalBoard) -> None:
            self.board, self.batches = board, 0

        def on_batch(self, progress, task) -> None:
            self.batches += 1
            if self.batches == 1:
                os.killpg(self.board.server_processes[0].pid, signal.SIGKILL)

    profile = load_profile("host")
    with LocalBoard(key="local", num_threads=1, log_dir=tmp_path / "board", servers=1) as board:
        runner = TrackerRunner(board.address, config=profile.measure, board_wait_sec=3)
        options = TuneOptions(profile=profile, model="demo:tiny-cnn", out_dir=tmp_path / "run", trials=24,
                              evaluate=False, warm_start="off", board=TrackerBoard(board.address))
        with pytest.raises(TuningInterrupted) as excinfo:
            run_tune(options, sink=KillAfterFirstBatch(board), components=Components(runner=runner))
    message = str(excinfo.value)
    assert message.startswith("stopped: no board measured this candidate") and "run the same command again to resume" in message
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'run' / 'history.db'}")
    with engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT COUNT(*) FROM records")).scalar_one()
        unavailable = conn.execute(sa.text("SELECT COUNT(*) FROM records WHERE error LIKE '%no board%'")).scalar_one()
    engine.dispose()
    assert stored >= 1 and unavailable == 0
    assert (tmp_path / "run" / "summary.json").is_file()


def test_the_loopback_board_serves_on_after_a_candidate_kills_its_session(tmp_path, built):
    """One server, the embedded board: TVM's own server stopped serving after a session's process died."""
    good, crash = built
    with LocalBoard(key="alone", num_threads=1, log_dir=tmp_path, servers=1) as board:
        _wait_registered(board, 1)
        runner = TrackerRunner(board.address, config=MeasureConfig(**FAST), board_wait_sec=30)
        try:
            results = [f.result() for f in runner.run(_inputs([crash, good[0], good[1]]))]
        finally:
            runner.close()
        assert results[0].run_secs is None and not is_board_unavailable(results[0].error_msg)
        assert [r.error_msg for r in results[1:]] == [None, None], runner.stats.errors
        assert all(r.run_secs for r in results[1:])
        _wait_registered(board, 1)  # still registered, the same process
        assert board.server_processes[0].poll() is None
    log = (tmp_path / "server.log").read_text()
    assert "ended with its process" in log and "serving the next one" in log
