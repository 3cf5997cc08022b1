"""Before the search: each task's untuned default and the schedule library's schedules, measured and stored.

What :class:`~edgetune.tuning.plan.FirstMeasurements` names is built and timed here as
batches outside MetaSchedule's loop, recorded through the run's measure callback; then the
tasks whose library schedule runs far below its operator class get search trials kept for them.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..common.failure import is_failed
from .baseline import mean_or_none, measure_candidates, measure_defaults
from .callbacks import RecordAndReport, record_all_then_stop
from .inputs import RunSettings
from .lagging import TaskStanding, choose_lagging, class_gflops, describe_lagging, reserve_for_lagging
from .plan import FirstMeasurements, TaskPlan
from .progress import announce
from .session import TuneSession


def measure_default_schedules(
    run: RunSettings, session: TuneSession, recorder: RecordAndReport, indices: Sequence[int],
) -> int:
    """Each task's untuned code (of ``indices``), measured once and stored: the search must beat it to replace it; how many."""
    if not indices:
        return 0
    progress = session.progress
    progress.phase = "measuring each task's default schedule (the untuned baseline)"
    run.sink.on_phase(progress)
    measured = measure_defaults(session.contexts, list(indices), session.builder, session.runner)
    with record_all_then_stop() as record:
        for index, (candidate, built, ran) in measured.items():
            session.limits.add_measured_before(progress.tasks[index].name)
            ok = built.error_msg is None and ran.error_msg is None and ran.run_secs
            progress.tasks[index].default_sec = mean_or_none([float(x) for x in ran.run_secs]) if ok else None
            record(recorder, index, [candidate], [built], [ran])
    progress.phase = "tuning"
    run.sink.on_phase(progress)
    return len(measured)


def measure_library_schedules(run: RunSettings, first: FirstMeasurements, session: TuneSession, recorder: RecordAndReport) -> int:
    """Each covered task's library schedules, measured on the board as its first trials and stored; how many."""
    if not first.library:
        return 0
    progress, library = session.progress, session.library
    assert library is not None
    progress.phase = f"measuring the schedule library's schedules of {len(first.library)} tasks"
    run.sink.on_phase(progress)
    for rank in range(max(map(len, first.library.values()))):  # one batch per rank: the best first
        by_task = {i: found[rank] for i, found in first.library.items() if rank < len(found)}
        measured = measure_candidates(session.contexts, by_task, session.builder, session.runner)
        with record_all_then_stop() as record:
            for index, (candidate, built, ran) in measured.items():
                name = progress.tasks[index].name
                session.limits.add_measured_before(name)
                if built.error_msg is None and ran.error_msg is None and ran.run_secs and not is_failed(ran.run_secs):
                    latency_us = float(np.mean([float(x) for x in ran.run_secs])) * 1e6
                    kept = library.transferred if index in first.transferred else library.exact
                    kept[name] = min(latency_us, kept.get(name, latency_us))
                record(recorder, index, [candidate], [built], [ran])
    progress.phase = "tuning"
    run.sink.on_phase(progress)
    return sum(map(len, first.library.values()))


def failed_library_defaults(run: RunSettings, first: FirstMeasurements, session: TuneSession) -> list[int]:
    """The tasks whose library schedules all failed to build or run, and whose untuned default must be measured now.

    They took the place of the default (a schedule of another shape under two trials per task, or the
    exact workload's where the library says it beats the default): without a record the model would get
    the untuned code, unmeasured and not reported as kept. Its trial comes from the search's where it has
    any, else it is one trial over the budget per such task.
    """
    progress, library = session.progress, session.library
    if library is None:
        return []
    failed = [
        i for i in sorted(first.library)
        if progress.tasks[i].name not in library.transferred and progress.tasks[i].name not in library.exact
        and i not in first.defaults and progress.tasks[i].default_sec is None
    ]
    if not failed or not run.profile.tuning.default_schedule or str(session.target.kind.name) != "llvm":
        return []
    return failed


def search_lagging_tasks_first(run: RunSettings, plan: TaskPlan, first: FirstMeasurements, session: TuneSession) -> None:
    """Search trials kept for the tasks whose first schedule runs far below its operator class (tuning/lagging.py).

    The first schedule is the library's (exact or adapted) or, where the library had nothing to adapt, the
    untuned default.

    Only with edgetune's search, which reads the reservations (``session.caps_enforced``).
    """
    tuning, library, progress = run.profile.tuning, session.library, session.progress
    if not session.caps_enforced or library is None or library.library is None or tuning.lagging_trials <= 0:
        return
    model_sec = sum(t.weight * sec for t in progress.tasks if (sec := t.best_sec or t.default_sec))
    standings = []
    for task, ctx in zip(progress.tasks, session.contexts):
        if task.best_gflops is None or (task.index not in first.library and task.index not in first.defaults):
            continue  # nothing measured, or a task the history holds (it resumes from its own records)
        if plan.inventory is not None and plan.inventory.kernels[task.index].klass != "compute":
            continue
        standings.append(TaskStanding(task.name, task.weight * task.best_sec, task.best_gflops,
                                      class_gflops(library.library, ctx.mod)))
    lagging = choose_lagging(standings, model_sec, ratio=tuning.lagging_ratio, share=tuning.lagging_share)
    searched_first = reserve_for_lagging(lagging, session.limits, model_sec, tuning.lagging_trials)
    library.searched_first = [task.to_dict() for task in searched_first]
    if searched_first:
        announce(run.sink, plan.remaining, describe_lagging(library.searched_first))
