"""The winner's curse: a task's best schedule is the fastest of many noisy measurements, so it measured luckier than it runs.

The history picks each task's schedule as the one with the lowest measured
latency. Where timings spread by ten or twenty percent (a shared host, a board
that throttles), that minimum is biased low: the pick is often a candidate timed
in a quiet moment, and a schedule a few percent faster in truth loses to it. On
this project's 2-core host one picked dense-layer schedule ran 35 % slower in
the delivered model than it had measured (benchmarks/RESULTS.md,
vs_onnxruntime_fast_math).

So before the model is built, each task's fastest few schedules that measured
within ``tuning.confirm_margin`` of its best are timed again, side by side in one
batch, and their new times replace the old ones in the history (which keeps a
candidate's newest result): the pick is then made on measurements that were not
selected for being fast, and the summary's kernel time is no longer the
optimistic minimum. Only tasks that matter to the model are re-timed, at most
``tuning.confirm_best`` measurements each; they are not trials (the history gains
no record), and a short run does without them (:func:`retime_limit`).

Off by default (``tuning.confirm_best = 0``): on this project's shared host the
re-timings were as noisy as the first timings, and 3 per task did not deliver
faster models (benchmarks/RESULTS.md, vs_onnxruntime_retime).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np
import tvm.s_tir.meta_schedule as ms

from ..builder.builder import WarmBuilder
from ..common.failure import is_failed
from .callbacks import remove_artifact

if TYPE_CHECKING:
    from tvm.s_tir.meta_schedule import TuneContext
    from tvm.s_tir.meta_schedule.builder import Builder
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.s_tir.meta_schedule.runner import Runner
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate
    
    from .summary import Json


@dataclass
class ConfirmedTask:
    """One task whose fastest schedules were timed again before the model was built."""

    name: str
    retimed: int  # candidates timed again on the board (measurements beside the run's trials)
    before_us: float  # the task's best latency as the search measured it
    after_us: float  # its best once they were timed again
    pick_changed: bool  # the delivered schedule is another candidate than the search's fastest

    def to_dict(self) -> Json:
        """As the summary keeps it per task (``TaskResult.retimed``)."""
        return {
            "candidates": self.retimed, "before_us": self.before_us, "after_us": self.after_us,
            "pick_changed": self.pick_changed,
        }


def to_retime(means: Sequence[float], count: int, margin: float) -> int:
    """How many of a task's fastest candidates (``means``, ascending) to time again.

    Those within ``margin`` of the fastest, at most ``count``; none unless at least two
    are, since a single candidate has nothing to lose its place to.
    """
    if count < 2 or len(means) < 2:
        return 0
    near = sum(1 for mean in means[:count] if mean <= means[0] * (1.0 + margin))
    return near if near >= 2 else 0


def retime_limit(tasks: int, count: int, search_budget: int) -> int:
    """Measurements allowed to time ``count`` candidates of each of ``tasks`` again after the search.

    They are not trials: each times a candidate the search already measured, so the
    history's records, the budget and a resumed run's count stay as they were. None on a
    run whose search has under ``4 * count`` trials per task: a short run (a schedule
    library's one or two trials per task) would more than double its board time.
    """
    limit = count * tasks
    return limit if count >= 2 and tasks > 0 and search_budget >= 4 * limit else 0


def measure_together(
    context: TuneContext, candidates: list[MeasureCandidate], builder: Builder, runner: Runner,
) -> list[list[float] | None]:
    """Build ``candidates`` of one task and time them in one batch, so that they meet the board in the same state.

    Each result is its run times, or None where the build or the run failed. The
    builder builds every one even if the history holds it (:meth:`WarmBuilder.fresh`).
    """
    inputs = [ms.builder.BuilderInput(c.sch.mod, context.target) for c in candidates]
    if isinstance(builder, WarmBuilder):
        with builder.fresh():
            built = builder.build(inputs)
    else:  # a builder passed in (stock MetaSchedule's) keeps no cache
        built = builder.build(inputs)
    to_run = [
        ms.runner.RunnerInput(b.artifact_path, context.target.kind.name, c.args_info)
        for c, b in zip(candidates, built)
        if b.error_msg is None
    ]
    futures = iter(runner.run(to_run)) if to_run else iter(())
    results: list[list[float] | None] = []
    for b in built:
        ran = next(futures).result() if b.error_msg is None else None
        ok = ran is not None and ran.error_msg is None and ran.run_secs and not is_failed([float(x) for x in ran.run_secs])
        results.append([float(x) for x in ran.run_secs] if ok else None)
        if b.artifact_path and b.error_msg is None:
            remove_artifact(str(b.artifact_path))
    return results


def mean_sec(record: TuningRecord) -> float:
    return float(np.mean([float(x) for x in record.run_secs]))
