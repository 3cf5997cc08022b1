"""Never worse than no tuning: every task's default (untuned) schedule is a measured candidate.

The untuned build compiles each fused function as Relax lowered it. That
schedule (:func:`~edgetune.search.default_schedule.default_schedule`) is one
candidate per task, measured like any other before the search starts and
stored in the history. When no tuned candidate beats it, it is the task's
best record, so ``compile_relax`` applies it and the task keeps its default
code; the summary names those tasks.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import tvm.s_tir.meta_schedule as ms
from tvm.s_tir.meta_schedule import TuneContext
from tvm.s_tir.meta_schedule.builder import Builder, BuilderResult
from tvm.s_tir.meta_schedule.runner import Runner, RunnerResult
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

from ..common.failure import is_failed
from ..search.default_schedule import default_schedule, is_default_trace

__all__ = ["default_schedule", "is_default_trace", "mean_or_none", "measure_candidates", "measure_defaults"]

#: per task index: the candidate, its build and its run, as the measure callbacks take them
Measured = dict[int, tuple[MeasureCandidate, BuilderResult, RunnerResult]]


def mean_or_none(run_secs: Sequence[float] | None) -> float | None:
    """The mean run time; None for no run or a failed one."""
    return float(np.mean(run_secs)) if run_secs and not is_failed(run_secs) else None


def measure_defaults(contexts: list[TuneContext], wanted: list[int], builder: Builder, runner: Runner) -> Measured:
    """Build and measure the default schedule of ``contexts[i]`` for each ``i`` in ``wanted``, as one batch.

    Returns ``{task index: (candidate, builder result, runner result)}`` for
    the measure callbacks; a failed build comes back with its error, unmeasured.
    """
    candidates = {}
    for i in wanted:
        mod = contexts[i].mod
        candidates[i] = ms.MeasureCandidate(default_schedule(mod), ms.arg_info.ArgInfo.from_entry_func(mod, remove_preproc=True))
    return measure_candidates(contexts, candidates, builder, runner)


def measure_candidates(
    contexts: list[TuneContext], by_task: Mapping[int, MeasureCandidate], builder: Builder, runner: Runner,
) -> Measured:
    """Build and measure one candidate per task (``{task index: MeasureCandidate}``) as one batch, before the search."""
    wanted, candidates = list(by_task), list(by_task.values())
    built = builder.build([ms.builder.BuilderInput(c.sch.mod, contexts[i].target) for i, c in zip(wanted, candidates)])
    to_run = [
        ms.runner.RunnerInput(b.artifact_path, contexts[i].target.kind.name, c.args_info)
        for i, c, b in zip(wanted, candidates, built)
        if b.error_msg is None
    ]
    futures = iter(runner.run(to_run)) if to_run else iter(())
    results = {}
    for i, candidate, b in zip(wanted, candidates, built):
        ran = next(futures).result() if b.error_msg is None else ms.runner.RunnerResult(None, b.error_msg)
        results[i] = (candidate, b, ran)
    return results
