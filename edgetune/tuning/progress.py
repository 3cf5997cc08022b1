"""What a running tune looks like from outside: per-task progress, the model estimate curve, and the sink that shows it."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from .summary import Json, TaskResult, TuneSummary


@dataclass
class TaskProgress:
    """One tuning task as the progress display and the summary see it."""

    index: int
    name: str
    weight: float
    flops: float
    previous_trials: int = 0  # already in the history when the run started
    trials: int = 0  # measured (or served from history) in this run
    failed: int = 0
    unmeasured: int = 0  # given back because no board answered (not stored; measured again on resume)
    best_sec: float | None = None
    default_sec: float | None = None  # the untuned (default) schedule's latency, see tuning.baseline

    @property
    def best_gflops(self) -> float | None:
        if not self.best_sec or not self.flops:
            return None
        return self.flops / self.best_sec / 1e9

    def to_result(
        self, kept_default: bool, cap: int | None, workload_hash: str = "", library_us: float | None = None,
        retimed: Json | None = None, transferred_us: float | None = None,
    ) -> TaskResult:
        """The task as the summary keeps it (microseconds); :meth:`TuneProgress.from_summary` reads it back."""
        return TaskResult(
            index=self.index,
            name=self.name,
            weight=self.weight,
            flops=self.flops,
            trials_before=self.previous_trials,
            trials_this_run=self.trials,
            failed_this_run=self.failed,
            best_latency_us=None if self.best_sec is None else self.best_sec * 1e6,
            best_gflops=self.best_gflops,
            default_latency_us=None if self.default_sec is None else self.default_sec * 1e6,
            kept_default=kept_default,
            trial_cap=cap,
            workload_hash=workload_hash,
            library_latency_us=library_us,
            retimed=retimed,
            transferred_latency_us=transferred_us,
        )


@dataclass
class CurvePoint:
    """The model after one batch: when, how many trials, which task, and the estimated latency."""

    seconds: float  # since tuning started
    trials: int  # of this run so far
    task: int  # index of the task whose batch this was
    estimate_sec: float | None  # sum over tasks of weight x best; None until every task has one

    def to_dict(self) -> Json:
        return {"seconds": round(self.seconds, 3), "trials": self.trials, "task": self.task, "estimate_sec": self.estimate_sec}


@dataclass
class TuneProgress:
    """Shared state between the tuning thread's callbacks and the display."""

    budget: int
    tasks: list[TaskProgress]
    started: float = field(default_factory=time.monotonic)
    done: int = 0
    phase: str = "starting"
    curve: list[CurvePoint] = field(default_factory=list)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def model_estimate_sec(self) -> float | None:
        """Sum of weight x best latency over tasks; None while a task has no valid measurement."""
        total = 0.0
        for task in self.tasks:
            if task.best_sec is None or not math.isfinite(task.best_sec):
                return None
            total += task.weight * task.best_sec
        return total

    @classmethod
    def from_summary(cls, summary: TuneSummary) -> TuneProgress:
        """A finished run's progress, read back from its summary (the final task table)."""
        tasks = [
            TaskProgress(
                index=item.index,
                name=item.name,
                weight=item.weight,
                flops=item.flops,
                previous_trials=item.trials_before,
                trials=item.trials_this_run,
                failed=item.failed_this_run,
                best_sec=None if item.best_latency_us is None else item.best_latency_us / 1e6,
                default_sec=None if item.default_latency_us is None else item.default_latency_us / 1e6,
            )
            for item in summary.tasks
        ]
        progress = cls(budget=summary.trials.budget, tasks=tasks)
        progress.phase = "done"
        return progress

    def record_batch(self, task: TaskProgress) -> None:
        self.curve.append(CurvePoint(self.elapsed, self.done, task.index, self.model_estimate_sec()))


class ProgressSink:
    """Receives progress; the CLI renders it. Hooks are called in this order:
    ``on_phase`` (any time), ``on_batch`` after every measured batch."""

    def on_phase(self, progress: TuneProgress) -> None:  # pragma: no cover - interface
        pass

    def on_batch(self, progress: TuneProgress, task: TaskProgress) -> None:  # pragma: no cover
        pass


def announce(sink: ProgressSink, budget: int, phase: str) -> None:
    """Show a phase before the tasks (and so the run's progress record) exist."""
    progress = TuneProgress(budget=budget, tasks=[])
    progress.phase = phase
    sink.on_phase(progress)
