"""Measure built candidates on a device reached through a TVM RPC tracker.

Stock ``RPCRunner`` opens a new tracker session and a new process round trip
per candidate. ``TrackerRunner`` measures a whole batch in one session from a
background thread: upload, load, time, delete, next. MetaSchedule gets one
future per candidate, resolved as soon as that candidate is timed, and every
failure comes back as data (``RunnerResult.error_msg``).

The runner also keeps the numbers edgetune reports: device seconds (time spent
inside the device's timing calls), upload seconds and session set-up.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from tvm.s_tir.meta_schedule.runner import PyRunner, RunnerInput, RunnerResult
from tvm.ir.utils import derived_object

from ..board.base import MeasureHooks
from ..board.rpc_tracker import BoardSession, TrackerAddress, device_counts, request_board, tracker_summary
from ..common.failure import BOARD_UNAVAILABLE
from ..errors import BoardError
from ..builder.builder import CachedArtifact
from ..common.rpc import remote_module
from ..profile.schema import MeasureSettings
from .evaluator import AdaptiveEvaluator, AdaptiveResult
from .futures import PromisedFuture


def cache_flush_preproc(config: MeasureSettings, device: str) -> str:
    """TVM's evaluator pre-processing that flushes the CPU caches before each run, where it applies.

    Only a CPU device: the flush walks the arguments' memory with cache-line
    flushes, which a GPU's buffers are not. Every argument but the first (the
    input data) is flushed: weights come from memory, as inside a model.
    """
    return "cache_flush_cpu_non_first_arg" if config.enable_cpu_cache_flush and device == "cpu" else ""


def timing_of(profile: Any) -> str:
    """How a profile's candidates are timed: ``flushed`` or ``warm`` (the history's ``timing``).

    Records of one timing are never ranked against the other's: a weight-heavy
    kernel can be several times faster warm than inside a model.
    """
    return "flushed" if cache_flush_preproc(profile.measure, profile.rpc.device) else "warm"


#: the runner is configured by the profile's ``[measure]`` table as it is
MeasureConfig = MeasureSettings


@dataclass
class MeasureStats:
    """What the runner did, for progress reports and benchmarks."""

    measured: int = 0
    failed: int = 0
    cached: int = 0
    device_seconds: float = 0.0  # inside the remote timing calls
    upload_seconds: float = 0.0  # upload + remote load of artifacts
    session_seconds: float = 0.0  # tracker requests and session set-up
    errors: list[str] = field(default_factory=list)
    runs: int = 0  # single runs timed by the adaptive evaluator
    stopped_by_cv: int = 0  # candidates whose throughput CV fell below the threshold
    stopped_by_ci: int = 0  # candidates whose mean's 95 % confidence interval became narrow enough
    stopped_by_cap: int = 0  # candidates that used max_runs
    stopped_by_budget: int = 0  # candidates that spent the device-time budget (measure.budget_ms)
    by_board: dict[str, int] = field(default_factory=dict)  # candidates measured per board (host:port)
    sessions_lost: int = 0  # sessions that died under a candidate (board gone, server crashed)
    unmeasured: int = 0  # candidates given back because no board answered (not stored as failures)
    batch_wall_seconds: float = 0.0  # wall clock from a batch's start to its last result


#: a candidate that ended the session this many times is a program fault, stored as failed
CRASHES_TO_FAIL = 2


@dataclass
class _Job:
    index: int
    artifact: str
    args_info: list[Any]
    promise: concurrent.futures.Future
    lost_on: list[str] = field(default_factory=list)  # boards whose session died under it


class _BatchWork:
    """The candidates of one batch still to measure, shared by the board workers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.pending: list[_Job] = []
        self.settled = 0  # progress: candidates with a result (measured or failed), and board losses
        self.last_error: BaseException | None = None  # why a board could not be had

    def put(self, job: _Job) -> None:
        with self._lock:
            self.pending.append(job)

    def put_back(self, job: _Job, error: BaseException, progress: bool = False) -> None:
        """``job`` goes back to the batch; ``progress``: it was tried (its board was lost), not just not started."""
        with self._lock:
            self.pending.insert(0, job)
            self.last_error = error
            self.settled += int(progress)

    def take(self) -> _Job | None:
        with self._lock:
            return self.pending.pop(0) if self.pending else None

    def settle(self, job: _Job, result: RunnerResult) -> None:
        job.promise.set_result(result)
        with self._lock:
            self.settled += 1

    def drain(self) -> list[_Job]:
        with self._lock:
            jobs, self.pending = self.pending, []
            return jobs


@derived_object
class TrackerRunner(PyRunner):
    """A MetaSchedule runner measuring batches through one RPC session each.

    Parameters
    ----------
    tracker:
        Where the tracker listens, and the device key to request.
    device:
        TVM device type on the board: ``cpu``, ``cuda``, ``opencl``...
    config:
        Timing settings.
    session_timeout_sec:
        Upper bound of one session; the server drops a session older than this.
    lookup_cached:
        ``f(key) -> run_secs | None`` for artifacts the builder marked as cached.
    max_boards:
        Boards one batch is spread over (0: every free board under the key).
    board_wait_sec:
        How long to wait for a board when every session was lost; then the
        rest of the batch is given back unmeasured.
    hooks:
        A :class:`MeasureHooks` told about each batch and each lost session.
    """

    def __init__(
        self,
        tracker: TrackerAddress,
        device: str = "cpu",
        config: MeasureConfig | None = None,
        session_timeout_sec: float = 120.0,
        lookup_cached: Callable[[str], list[float] | None] | None = None,
        max_boards: int = 0,
        board_wait_sec: float = 60.0,
        hooks: MeasureHooks | None = None,
    ) -> None:
        super().__init__()
        self.tracker = tracker
        self.device = device
        self.config = config or MeasureConfig()
        self.session_timeout_sec = session_timeout_sec
        self.lookup_cached = lookup_cached
        self.max_boards = max_boards
        self.board_wait_sec = board_wait_sec
        self.hooks = hooks
        self.stats = MeasureStats()
        #: artifact path -> board (host:port) that measured it (popped by the measure callback)
        self.measured_on: dict[str, str] = {}
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="edgetune-measure"
        )
        self._stats_lock = threading.Lock()
        #: artifact path -> how the adaptive evaluator measured it (popped by the measure callback)
        self.adaptive_log: dict[str, AdaptiveResult] = {}
        self.evaluator = (
            AdaptiveEvaluator(
                micro_batch=self.config.micro_batch,
                max_runs=self.config.max_runs,
                cv_threshold=self.config.cv_threshold,
                min_runs=self.config.min_runs,
                micro_batch_ms=self.config.micro_batch_ms,
                budget_ms=self.config.budget_ms,
                stop_rule=self.config.stop_rule,
                ci_threshold=self.config.ci_threshold,
            )
            if self.config.evaluator == "adaptive"
            else None
        )

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)

    def wait_idle(self, timeout_sec: float | None = None) -> None:
        """Return once the batch in flight is done, its after-batch hook included: the stats are then final.

        MetaSchedule has every result of a batch before the runner's thread has
        finished with it (the hook reads the board's heat after the last one).
        """
        try:
            self._executor.submit(lambda: None).result(timeout_sec if timeout_sec is not None else self.session_timeout_sec)
        except (RuntimeError, concurrent.futures.TimeoutError):
            pass  # shut down already, or a batch that outlives a session: report what there is

    # -- MetaSchedule interface -------------------------------------------
    def run(self, runner_inputs: list[RunnerInput]) -> list[PromisedFuture]:
        promises = [concurrent.futures.Future() for _ in runner_inputs]
        jobs = [
            (str(inp.artifact_path), [info.as_json() for info in inp.args_info])
            for inp in runner_inputs
        ]
        self._executor.submit(self._run_batch, jobs, promises)
        return [PromisedFuture(p) for p in promises]

    # -- measurement --------------------------------------------------------
    def _run_batch(
        self, jobs: list[tuple[str, list[Any]]], promises: list[concurrent.futures.Future]
    ) -> None:
        """Measure a batch, spread over every free board under the key (one session each).

        Rounds of board workers run until every candidate is settled; a candidate
        whose board went away goes back to the batch. A round that settles
        nothing (no board answered within ``board_wait_sec``) gives the rest
        back unmeasured.
        """
        started = time.perf_counter()
        try:
            work = _BatchWork()
            for index, (artifact, args_info) in enumerate(jobs):
                cached = CachedArtifact.parse(artifact)
                if cached is not None:
                    promises[index].set_result(self._cached_result(cached))
                else:
                    work.put(_Job(index, artifact, args_info, promises[index]))
            to_measure = len(work.pending)
            if to_measure:
                self._hook("before_batch")
            while work.pending:
                settled = work.settled
                workers = [
                    threading.Thread(target=self._board_worker, args=(work, len(jobs)), name=f"edgetune-board-{i}", daemon=True)
                    for i in range(self._boards_for(len(work.pending)))
                ]
                for worker in workers:
                    worker.start()
                for worker in workers:
                    worker.join()
                if work.pending and work.settled == settled:
                    self._give_up(work.drain(), work.last_error)
            # a lost session's error holds, in its traceback, a worker's frame and so the session that
            # worker opened next: dropped now, that session ends now and its board is free for the next batch
            work.last_error = None
            if to_measure:
                self._hook("after_batch")
            with self._stats_lock:
                self.stats.batch_wall_seconds += time.perf_counter() - started
        except BaseException as error:  # never leave MetaSchedule waiting forever
            for promise in promises:
                if not promise.done():
                    promise.set_result(self._failure("runner", error))
            raise

    def _boards_for(self, candidates: int) -> int:
        """How many boards measure this batch: the free ones under the key, at most ``max_boards``."""
        try:
            _registered, free = device_counts(tracker_summary(self.tracker, timeout_sec=5.0), self.tracker.key)
        except BoardError:
            free = 1  # the session request will say what is wrong
        limit = self.max_boards or free
        return max(1, min(candidates, free, limit))

    def _board_worker(self, work: "_BatchWork", batch_size: int) -> None:
        """Take candidates off the batch and measure each wholly on this worker's board."""
        board: BoardSession | None = None
        measured_here = False
        while (job := work.take()) is not None:
            if measured_here and self.config.cooldown_sec > 0:
                # a pause between two measurements on this board; after its last one of the
                # batch the host's search and build for the next batch leave it idle anyway
                time.sleep(self.config.cooldown_sec)
            if board is None:
                try:
                    board = self._open_board(batch_size)
                except Exception as error:  # noqa: BLE001 - reported if no board answers at all
                    work.put_back(job, error)
                    return
            measured_here = True
            try:
                run_secs = self._measure_one(board, job.artifact, job.args_info)
            except Exception as error:
                if self._alive(board):
                    work.settle(job, self._failure("run", error))
                    continue
                self._board_lost(work, job, board, error)
                board = None
                continue
            work.settle(job, RunnerResult(run_secs, None))

    def _board_lost(self, work: "_BatchWork", job: "_Job", board: BoardSession, error: BaseException) -> None:
        """The session died under ``job``: measure it again elsewhere, unless it ended a session before."""
        job.lost_on.append(board.board)
        with self._stats_lock:
            self.stats.sessions_lost += 1
        self._hook("session_lost", board.board)
        if len(job.lost_on) < CRASHES_TO_FAIL:
            work.put_back(job, error, progress=True)
            return
        message = (
            f"the candidate ended the RPC session {len(job.lost_on)} times "
            f"(boards {', '.join(job.lost_on)}): {type(error).__name__}: {error}"
        )
        work.settle(job, self._failure("run", RuntimeError(message)))

    def _hook(self, name: str, *args: Any) -> None:
        if self.hooks is None:
            return
        try:
            getattr(self.hooks, name)(*args)
        except Exception as error:  # noqa: BLE001 - a hook is advice, never a failed batch
            with self._stats_lock:
                self.stats.errors.append(f"TrackerRunner ({name}): {type(error).__name__}: {error}".splitlines()[0])

    def _give_up(self, jobs: list["_Job"], error: BaseException | None) -> None:
        """No board answered: these candidates are left unmeasured (not program failures)."""
        reason = f"{type(error).__name__}: {(str(error).splitlines() or [''])[0]}" if error else "no board"
        message = f"{BOARD_UNAVAILABLE}: {reason}"
        for job in jobs:
            with self._stats_lock:
                self.stats.unmeasured += 1
                self.stats.errors.append(message)
            job.promise.set_result(RunnerResult(None, message))

    def _alive(self, board: BoardSession) -> bool:
        """Whether the session still answers (a remote error) or died with the candidate (a lost board)."""
        try:
            # a remote call every runtime answers (Device.exist is answered locally)
            return board.session.get_function("runtime.RPCTimeEvaluator") is not None
        except Exception:  # noqa: BLE001 - any failure means the session is gone
            return False

    def _open_board(self, batch_size: int) -> BoardSession:
        started = time.perf_counter()
        timeout = max(self.session_timeout_sec, self.config.timeout_sec * batch_size)
        board = request_board(self.tracker, session_timeout_sec=timeout, wait_sec=self.board_wait_sec)
        with self._stats_lock:
            self.stats.session_seconds += time.perf_counter() - started
        return board

    def _cached_result(self, cached: CachedArtifact) -> RunnerResult:
        run_secs = self.lookup_cached(cached.key) if self.lookup_cached else None
        with self._stats_lock:
            self.stats.cached += 1
        if run_secs is None:
            return RunnerResult(None, "edgetune: cached result vanished from the history database")
        return RunnerResult(run_secs, None)

    def _failure(self, stage: str, error: BaseException) -> RunnerResult:
        message = f"TrackerRunner ({stage}): {type(error).__name__}: {error}"
        with self._stats_lock:
            self.stats.failed += 1
            self.stats.errors.append(message.splitlines()[0])
        return RunnerResult(None, message)

    def _time(self, rt_mod: Any, device: Any, args: list[Any]) -> tuple[list[float], AdaptiveResult | None]:
        """Run times of the loaded candidate: the fixed evaluator's, or the adaptive one's mean."""
        preproc = cache_flush_preproc(self.config, self.device)
        if self.evaluator is None:
            evaluator = rt_mod.time_evaluator(
                rt_mod.entry_name,
                device,
                number=self.config.number,
                repeat=self.config.repeat,
                min_repeat_ms=self.config.min_repeat_ms,
                f_preproc=preproc,
            )
            device.sync()
            return [float(c) for c in evaluator(*args).results], None
        # one remote call per micro-batch: `repeat` single runs, each timed separately
        timers: dict[int, Any] = {}

        def time_runs(count: int) -> list[float]:
            if count not in timers:
                timers[count] = rt_mod.time_evaluator(rt_mod.entry_name, device, number=1, repeat=count, min_repeat_ms=0, f_preproc=preproc)
            return [float(c) for c in timers[count](*args).results]

        device.sync()
        adaptive = self.evaluator.measure(time_runs)
        return [adaptive.mean_sec], adaptive

    def _measure_one(self, board: BoardSession, artifact: str, args_info: list[Any]) -> list[float]:
        session = board.session
        started = time.perf_counter()
        remote_name = f"edgetune-{os.getpid()}-{threading.get_ident()}-{os.path.basename(os.path.dirname(artifact))}.so"
        with remote_module(session, artifact, remote_name) as rt_mod:
            device = session.device(self.device, 0)
            args = allocate_arguments(session, device, args_info)
            uploaded = time.perf_counter()
            costs, adaptive = self._time(rt_mod, device, args)
            timed = time.perf_counter()
        with self._stats_lock:
            self.stats.measured += 1
            self.stats.by_board[board.board] = self.stats.by_board.get(board.board, 0) + 1
            self.measured_on[artifact] = board.board
            self.stats.upload_seconds += uploaded - started
            self.stats.device_seconds += timed - uploaded
            if adaptive is not None:
                self.adaptive_log[artifact] = adaptive
                self.stats.runs += adaptive.runs
                if adaptive.stopped_by == "cv":
                    self.stats.stopped_by_cv += 1
                elif adaptive.stopped_by == "ci":
                    self.stats.stopped_by_ci += 1
                elif adaptive.stopped_by == "budget":
                    self.stats.stopped_by_budget += 1
                else:
                    self.stats.stopped_by_cap += 1
        return costs


def allocate_arguments(session: Any, device: Any, args_info: list[Any]) -> list[Any]:
    """Random-filled tensors on the device for a candidate's arguments.

    Uses the server's ``random_fill_for_measure`` when it has one (no bulk
    transfer); otherwise copies host-generated data over.
    """
    import tvm

    try:
        random_fill = session.get_function("tvm.contrib.random.random_fill_for_measure")
    except (AttributeError, tvm.TVMError, RuntimeError):
        random_fill = None
    rng = np.random.default_rng(0)
    args = []
    for info in args_info:
        kind, dtype, shape = info[0], info[1], info[2]
        if kind != "TENSOR":
            raise TypeError(f"unsupported argument kind {kind!r}")
        if random_fill is not None:
            tensor = tvm.runtime.empty(tuple(shape), dtype=dtype, device=device)
            random_fill(tensor)
        else:
            data = rng.uniform(-1, 1, size=tuple(shape)).astype(dtype)
            tensor = tvm.runtime.tensor(data, device=device)
        args.append(tensor)
    return args
