"""Never worse than no tuning: every task's default (untuned) schedule is a measured candidate.

The untuned build compiles each fused function as Relax lowered it. That
schedule is one candidate per task, measured like any other before the search
starts and stored in the history with a trace that changes nothing (it only
looks up blocks, which makes it a valid record). When no tuned candidate beats
it, it is the task's best record, so ``compile_relax`` applies it and the task
keeps its default code; the summary names those tasks.
"""

from __future__ import annotations

from typing import Any

import tvm.s_tir.meta_schedule as ms
from tvm.s_tir import Schedule

#: the only instructions of a default-schedule trace: block lookups, which change nothing
_LOOKUPS = frozenset({"GetSBlock", "GetChildBlocks"})


def default_schedule(workload_mod: Any) -> Schedule:
    """A schedule of ``workload_mod`` whose trace looks up its blocks and changes nothing."""
    sch = Schedule(workload_mod)
    sch.get_child_blocks(sch.get_sblock("root"))
    return sch


def is_default_trace(trace: Any) -> bool:
    """True for the traces :func:`default_schedule` makes (the untuned code)."""
    kinds = [str(inst.kind.name) for inst in trace.insts]
    return bool(kinds) and all(kind in _LOOKUPS for kind in kinds)


def measure_defaults(contexts: list[Any], wanted: list[int], builder: Any, runner: Any) -> dict[int, tuple[Any, Any, Any]]:
    """Build and measure the default schedule of ``contexts[i]`` for each ``i`` in ``wanted``, as one batch.

    Returns ``{task index: (candidate, builder result, runner result)}`` for
    the measure callbacks; a failed build comes back with its error, unmeasured.
    """
    candidates, built = [], []
    for i in wanted:
        mod = contexts[i].mod
        candidates.append(ms.MeasureCandidate(default_schedule(mod), ms.arg_info.ArgInfo.from_entry_func(mod, remove_preproc=True)))
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
