"""Never worse than no tuning: every task's default (untuned) schedule is a measured candidate.

The untuned build compiles each fused function as Relax lowered it. That
schedule (:func:`~edgetune.search.default_schedule.default_schedule`) is one
candidate per task, measured like any other before the search starts and
stored in the history. When no tuned candidate beats it, it is the task's
best record, so ``compile_relax`` applies it and the task keeps its default
code; the summary names those tasks.
"""

from __future__ import annotations

from typing import Any

import tvm.s_tir.meta_schedule as ms

from ..search.default_schedule import default_schedule, is_default_trace

__all__ = ["default_schedule", "is_default_trace", "measure_candidates", "measure_defaults"]


def measure_defaults(contexts: list[Any], wanted: list[int], builder: Any, runner: Any) -> dict[int, tuple[Any, Any, Any]]:
    """Build and measure the default schedule of ``contexts[i]`` for each ``i`` in ``wanted``, as one batch.

    Returns ``{task index: (candidate, builder result, runner result)}`` for
    the measure callbacks; a failed build comes back with its error, unmeasured.
    """
    candidates = {}
    for i in wanted:
        mod = contexts[i].mod
        candidates[i] = ms.MeasureCandidate(default_schedule(mod), ms.arg_info.ArgInfo.from_entry_func(mod, remove_preproc=True))
    return measure_candidates(contexts, candidates, builder, runner)


def measure_candidates(contexts: list[Any], by_task: dict[int, Any], builder: Any, runner: Any) -> dict[int, tuple[Any, Any, Any]]:
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
