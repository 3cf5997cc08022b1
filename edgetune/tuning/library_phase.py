"""Before the search: each task's untuned default and the schedule library's schedules, measured and stored.

What :class:`~edgetune.tuning.plan.FirstMeasurements` names is built and timed here as
batches outside MetaSchedule's loop, recorded through the run's measure callback; then the
tasks whose library schedule runs far below its operator class get search trials kept for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..common.failure import is_failed
from ..history.trace_codec import candidate_hash
from ..schedules.library import target_cpu
from .baseline import mean_or_none, measure_candidates, measure_defaults
from .callbacks import RecordAndReport, record_all_then_stop
from .confirm import measure_together
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


@dataclass(frozen=True)
class RecheckedTask:
    """A task whose exact library schedule measured far slower than the library recorded, measured once more."""

    name: str
    recorded_us: float  # the library's best record of the workload (on the machine that built it)
    first_us: float  # as this board first measured it
    again_us: float | None  # its library schedules timed again: the best of them (None: all failed; the first times stand)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "recorded_us": self.recorded_us, "first_us": self.first_us, "again_us": self.again_us}


def slow_against_record(measured: Mapping[str, tuple[float, float]], limit: float) -> list[str]:
    """The tasks whose library schedule measured over ``limit`` times its record, at this board's pace; the slowest first.

    ``measured``: task name -> (latency as measured here, the library's record), in us. The library was
    recorded on another machine of the family, so a board that runs every schedule 1.3x slower is not
    suspect: the board's pace is the median of measured / recorded over the tasks (1 under three tasks),
    and a task is slow when its own ratio exceeds ``limit`` times that pace (and ``limit`` times its record).
    """
    if limit <= 0:
        return []
    ratios = {name: first / recorded for name, (first, recorded) in measured.items() if recorded > 0 and first > 0}
    pace = float(np.median(list(ratios.values()))) if len(ratios) >= 3 else 1.0
    threshold = limit * max(pace, 1.0)
    return sorted((name for name, ratio in ratios.items() if ratio > threshold), key=lambda name: -ratios[name])


def recheck_slow_library_schedules(run: RunSettings, first: FirstMeasurements, session: TuneSession) -> list[RecheckedTask]:
    """Exact library schedules that measured far slower than their record, built and timed once more; the new time kept.

    At one or two trials per task, the library schedule's one measurement decides what a user gets. It
    came out 2x slow once, stable within the measurement (SqueezeNet 1.0's largest layer: 1,961 us against
    a record of 1,029; 1,023 us in the next tune). So a schedule over ``tuning.library_recheck`` times its
    record, at the board's pace (:func:`slow_against_record`), is measured again; the history keeps the
    faster of its two times (a busy host only ever adds time: under CI load a second time came out slower
    than the first), so a slow first measurement neither sends the task to the search as lagging nor
    loses the schedule to a slower one. These are not trials.
    """
    library, progress = session.library, session.progress
    limit = run.profile.tuning.library_recheck
    if library is None or library.library is None or limit <= 0 or not library.exact:
        return []
    exact_tasks = {progress.tasks[i].name: i for i in first.library if i not in first.transferred}
    standing: dict[str, tuple[float, float]] = {}
    for name, index in exact_tasks.items():
        entry = library.library.find(session.contexts[index].mod)
        if name in library.exact and entry is not None and entry.schedules:
            # the records of the schedules the task measured: its CPU model's best few first (library_candidates)
            measured = entry.schedules_for(session.target)[:max(1, run.profile.tuning.library_schedules)]
            standing[name] = (library.exact[name], min(s.latency_us for s in measured))
    slow = slow_against_record(standing, limit)
    if not slow:
        return []
    progress.phase = f"measuring again {len(slow)} library schedule(s) that ran over {limit:g}x their record"
    run.sink.on_phase(progress)
    rechecked = []
    for name in slow:
        if run.stop.event.is_set():
            break
        index = exact_tasks[name]
        ctx, task = session.contexts[index], progress.tasks[index]
        # every library schedule the task measured (its best tuning.library_schedules), timed again side by side
        keys = {candidate_hash(c.sch.trace): c for c in first.library[index]}
        before = {k: _mean_us(record) for k, record in
                  session.history.fastest_candidates(ctx.mod, session.target, len(keys) + 2) if k in keys}
        results = measure_together(ctx, list(keys.values()), session.builder, session.runner)
        again = None
        for key, run_secs in zip(keys, results):
            # a failure this time keeps the earlier result, and so does a slower time: noise only ever adds time
            if run_secs is not None and (key not in before or _mean_secs(run_secs) * 1e6 < before[key]):
                session.history.retime_candidate(ctx.mod, session.target, key, run_secs)
        after = session.history.fastest_candidates(ctx.mod, session.target, len(keys) + 2)
        timed = [_mean_us(record) for k, record in after if k in keys]
        if any(run_secs is not None for run_secs in results) and timed:
            again = min(timed)
            library.exact[name] = again  # the library's schedules as measured here now
            task.best_sec = _mean_us(after[0][1]) / 1e6
            progress.record_batch(task)
            run.sink.on_batch(progress, task)
        first_us, recorded_us = standing[name]
        rechecked.append(RecheckedTask(name, recorded_us, first_us, again))
    library.rechecked = [task.to_dict() for task in rechecked]
    progress.phase = "tuning"
    run.sink.on_phase(progress)
    return rechecked


def _mean_us(record: Any) -> float:
    return _mean_secs(record.run_secs) * 1e6


def _mean_secs(run_secs: Sequence[Any]) -> float:
    return float(np.mean([float(x) for x in run_secs]))


def describe_rechecked(rechecked: Sequence[Mapping[str, Any]]) -> str:
    """One line: the library schedules measured again and what the second measurement said."""
    parts = [
        f"{t['name']} (record {t['recorded_us']:.0f} us, first {t['first_us']:.0f}, "
        f"again {'failed' if t['again_us'] is None else format(t['again_us'], '.0f')})"
        for t in rechecked
    ]
    return f"measured again, far slower than the library's record: {'; '.join(parts)}"


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
                                      class_gflops(library.library, ctx.mod, target_cpu(session.target))))
    lagging = choose_lagging(standings, model_sec, ratio=tuning.lagging_ratio, share=tuning.lagging_share)
    searched_first = reserve_for_lagging(lagging, session.limits, model_sec, tuning.lagging_trials)
    library.searched_first = [task.to_dict() for task in searched_first]
    if searched_first:
        announce(run.sink, plan.remaining, describe_lagging(library.searched_first))
