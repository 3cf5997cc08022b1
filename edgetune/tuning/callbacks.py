"""Measure callbacks: commit every result to the history (errors included) and report progress."""

from __future__ import annotations

import json
import math
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import numpy as np
import tvm.s_tir.meta_schedule as ms
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

from ..builder.builder import CachedArtifact
from ..builder.builds import release_artifact, resolved_path
from ..measure.runner import TrackerRunner
from ..common.failure import FAILED_RUN_SECS, is_board_unavailable, is_claimed_elsewhere, is_stopped_before_board
from .progress import ProgressSink, TaskProgress, TuneProgress
from ..common.interrupts import StopRequested

if TYPE_CHECKING:
    from typing import Sequence
    
    from tvm.s_tir.meta_schedule import TuneContext
    from tvm.s_tir.meta_schedule.builder import BuilderResult
    from tvm.s_tir.meta_schedule.runner import Runner, RunnerResult
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate
    from tvm.s_tir.meta_schedule.task_scheduler import TaskScheduler
    
    from .claims import CandidateClaims
    from .components import TuningHistory


@derived_object
class RecordAndReport(PyMeasureCallback):
    """Commit every result (with its error text) and report progress.

    Replaces the stock ``AddToDatabase`` + ``RemoveBuildArtifact`` pair so that
    failures are stored with their message, not only as MetaSchedule's 1e10
    sentinel. Also where a requested stop (Ctrl-C, ``kill``) takes effect: after the
    batch's records are safely committed.
    """

    def __init__(
        self,
        history: TuningHistory,
        contexts: list[TuneContext],
        progress: TuneProgress,
        sink: ProgressSink,
        stop: threading.Event,
        runner: Runner | None = None,
        measurement_log: Path | None = None,
        claims: CandidateClaims | None = None,
    ) -> None:
        super().__init__()
        self.history = history
        self.contexts = contexts
        self.progress = progress
        self.sink = sink
        self.stop = stop
        self.runner = runner
        self.measurement_log = measurement_log
        #: this run's claims (tuning.claims): finished once a result is committed
        self.claims = claims
        #: why the run stopped by itself (every board gone), for the resume message
        self.stop_reason: str | None = None

    def apply(
        self, task_scheduler: TaskScheduler, task_id: int, measure_candidates: Sequence[MeasureCandidate],
        builder_results: Sequence[BuilderResult], runner_results: Sequence[RunnerResult],
    ) -> None:
        self.record(task_id, measure_candidates, builder_results, runner_results)

    def record(
        self, task_id: int, measure_candidates: Sequence[MeasureCandidate], builder_results: Sequence[BuilderResult],
        runner_results: Sequence[RunnerResult],
    ) -> None:
        """Commit one batch of task ``task_id``; also called directly for batches measured outside the scheduler."""
        ctx = self.contexts[task_id]
        task = self.progress.tasks[task_id]
        workload = self.history.commit_workload(ctx.mod)
        measured_on = self.runner.measured_on if isinstance(self.runner, TrackerRunner) else {}
        missing = unavailable = 0
        for candidate, built, ran in zip(measure_candidates, builder_results, runner_results):
            error = built.error_msg or ran.error_msg
            artifact = resolved_path(built.artifact_path)  # a build the runner waited for: its real path
            if is_board_unavailable(error) or is_claimed_elsewhere(error) or is_stopped_before_board(error):
                # the board was missing (or another tuner measures it), not the program: not stored
                task.unmeasured += 1
                missing += 1
                if is_board_unavailable(error):
                    unavailable += 1
                    self.stop_reason = str(error)
                if self.claims is not None:
                    self.claims.release(candidate.sch.mod)
                self._drop_artifact(artifact)
                continue
            run_secs = None if error else [float(x) for x in ran.run_secs]
            board = measured_on.pop(str(artifact), None) if artifact else None
            record = ms.database.TuningRecord(
                candidate.sch.trace,
                workload,
                run_secs if run_secs is not None else [FAILED_RUN_SECS],
                ctx.target,
                candidate.args_info,
            )
            if CachedArtifact.parse(artifact) is not None and not error:
                # served from the history: its row stays as the board that measured it left it
                record_id = self.history.commit_served(record)
            else:
                record_id = self.history.commit_measurement(record, error=str(error) if error else None, board=board)
            if self.claims is not None:
                self.claims.finish(candidate.sch.mod, record_id)
            if error:
                task.failed += 1
            else:
                mean = float(np.mean(run_secs))
                if task.best_sec is None or mean < task.best_sec:
                    task.best_sec = mean
            task.trials += 1
            self.progress.done += 1
            if artifact and CachedArtifact.parse(artifact) is None:
                self._log_measurement(task, str(artifact), run_secs, board)
            self._drop_artifact(artifact)
        self.progress.record_batch(task)
        self.sink.on_batch(self.progress, task)
        if unavailable and missing == len(runner_results):
            # no board answered for a whole batch: stop with the resume hint rather than
            # spend the budget on candidates nobody measures
            self.stop.set()
        if self.stop.is_set():
            raise StopRequested("stop requested")

    @staticmethod
    def _drop_artifact(artifact: str | None) -> None:
        if artifact and CachedArtifact.parse(artifact) is None:
            remove_artifact(str(artifact))

    def _log_measurement(self, task: TaskProgress, artifact: str, run_secs: list[float] | None, board: str | None = None) -> None:
        """Append how the adaptive evaluator measured this candidate (runs used, final CV)."""
        log = self.runner.adaptive_log if isinstance(self.runner, TrackerRunner) else None
        adaptive = log.pop(artifact, None) if log is not None else None
        if adaptive is None or self.measurement_log is None:
            return
        line = {
            "task": task.name,
            "runs": adaptive.runs,
            "micro_batches": adaptive.micro_batches,
            "cv": round(adaptive.cv, 5) if math.isfinite(adaptive.cv) else None,
            "stopped_by": adaptive.stopped_by,
            "mean_us": round(adaptive.mean_sec * 1e6, 3),
            "recorded": run_secs is not None,
            "board": board,
            "time": round(time.time(), 3),  # Unix time: which session timed it (edgetune report)
        }
        with open(self.measurement_log, "a") as handle:
            handle.write(json.dumps(line) + "\n")


@contextmanager
def record_all_then_stop() -> Iterator[Callable[..., None]]:
    """Record every result of a batch measured outside the scheduler, then stop if a stop was asked for.

    The recorder raises :class:`StopRequested` after the first task's record once a stop (Ctrl-C, a build's time
    limit) is set; the rest of the batch, measured on the board already, would be lost.
    """
    stop: list[StopRequested] = []

    def record(recorder: RecordAndReport, *args: object) -> None:
        try:
            recorder.record(*args)
        except StopRequested as requested:
            stop.append(requested)

    yield record
    if stop:
        raise stop[0]


def remove_artifact(path: str) -> None:
    """Done with a built candidate: deleted with its directory, unless the process keeps it for reuse (builder.builds)."""
    if release_artifact(path):
        return
    path = str(resolved_path(path))
    try:
        os.unlink(path)
        os.rmdir(os.path.dirname(path))
    except OSError:
        pass
