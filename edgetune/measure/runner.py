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
from tvm.s_tir.meta_schedule.runner import PyRunner, PyRunnerFuture, RunnerInput, RunnerResult
from tvm.ir.utils import derived_object

from ..board.rpc_tracker import TrackerAddress, request_session
from ..builder.builder import CACHED_ARTIFACT_PREFIX
from ..common.rpc import remote_module
from ..profile.schema import MeasureSettings
from .evaluator import AdaptiveEvaluator, AdaptiveResult



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
    stopped_by_cap: int = 0  # candidates that used max_runs


@derived_object
class _Future(PyRunnerFuture):
    def __init__(self, future: concurrent.futures.Future) -> None:
        super().__init__()
        self.future = future

    def done(self) -> bool:
        return self.future.done()

    def result(self) -> RunnerResult:
        return self.future.result()


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
    """

    def __init__(
        self,
        tracker: TrackerAddress,
        device: str = "cpu",
        config: MeasureConfig | None = None,
        session_timeout_sec: float = 120.0,
        lookup_cached: Callable[[str], list[float] | None] | None = None,
    ) -> None:
        super().__init__()
        self.tracker = tracker
        self.device = device
        self.config = config or MeasureConfig()
        self.session_timeout_sec = session_timeout_sec
        self.lookup_cached = lookup_cached
        self.stats = MeasureStats()
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
            )
            if self.config.evaluator == "adaptive"
            else None
        )

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)

    # -- MetaSchedule interface -------------------------------------------
    def run(self, runner_inputs: list[RunnerInput]) -> list[_Future]:
        promises = [concurrent.futures.Future() for _ in runner_inputs]
        jobs = [
            (str(inp.artifact_path), [info.as_json() for info in inp.args_info])
            for inp in runner_inputs
        ]
        self._executor.submit(self._run_batch, jobs, promises)
        return [_Future(p) for p in promises]

    # -- measurement --------------------------------------------------------
    def _run_batch(
        self, jobs: list[tuple[str, list[Any]]], promises: list[concurrent.futures.Future]
    ) -> None:
        session = None
        try:
            for (artifact, args_info), promise in zip(jobs, promises):
                if artifact.startswith(CACHED_ARTIFACT_PREFIX):
                    promise.set_result(self._cached_result(artifact))
                    continue
                if session is None:
                    try:
                        session = self._open_session(len(jobs))
                    except Exception as error:  # tracker gone: fail this candidate as data
                        promise.set_result(self._failure("session", error))
                        continue
                try:
                    run_secs = self._measure_one(session, artifact, args_info)
                except Exception as error:
                    # The session may be broken (server killed it or crashed):
                    # drop it, the next candidate asks for a new one.
                    session = None
                    promise.set_result(self._failure("run", error))
                    continue
                promise.set_result(RunnerResult(run_secs, None))
                if self.config.cooldown_sec > 0:
                    time.sleep(self.config.cooldown_sec)
        except BaseException as error:  # never leave MetaSchedule waiting forever
            for promise in promises:
                if not promise.done():
                    promise.set_result(self._failure("runner", error))
            raise

    def _open_session(self, batch_size: int) -> Any:
        started = time.perf_counter()
        timeout = max(self.session_timeout_sec, self.config.timeout_sec * batch_size)
        session = request_session(self.tracker, session_timeout_sec=timeout)
        with self._stats_lock:
            self.stats.session_seconds += time.perf_counter() - started
        return session

    def _cached_result(self, artifact: str) -> RunnerResult:
        key = artifact[len(CACHED_ARTIFACT_PREFIX) :]
        run_secs = self.lookup_cached(key) if self.lookup_cached else None
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
        preproc = "cache_flush_cpu_non_first_arg" if self.config.enable_cpu_cache_flush else ""
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

    def _measure_one(self, session: Any, artifact: str, args_info: list[Any]) -> list[float]:
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
            self.stats.upload_seconds += uploaded - started
            self.stats.device_seconds += timed - uploaded
            if adaptive is not None:
                self.adaptive_log[artifact] = adaptive
                self.stats.runs += adaptive.runs
                if adaptive.stopped_by == "cv":
                    self.stats.stopped_by_cv += 1
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
