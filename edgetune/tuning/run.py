"""The search: first measurements, warm start, the one ``ms.tune_tasks`` call, then the fastest schedules timed again.

:func:`tune` returns a :class:`TuneOutcome`, what the summary reads. This module is the one
place that calls ``ms.tune_tasks`` (tests/test_single_tune_tasks.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import tvm.s_tir.meta_schedule as ms

from edgetune.common.choices import STOCK_SCHEDULERS

from ..builder.builder import WarmBuilder
from ..common.interrupts import StopRequested, stop_on_signals
from ..common.run_dir import RunDir
from ..costmodel.warmstart import WarmStartReport, warm_start
from ..measure.awaiting import AwaitingRunner
from ..measure.pending import builds_beside_search
from ..search.default_schedule import replayed_candidate
from .callbacks import RecordAndReport
from .components import Runner, TaskScheduler
from .confirm import ConfirmedTask, mean_sec, measure_together, to_retime
from .inputs import RunSettings
from .library_phase import (
    describe_rechecked, failed_library_defaults, measure_default_schedules, measure_library_schedules,
    recheck_slow_library_schedules, search_lagging_tasks_first,
)
from .plan import FirstMeasurements, SearchPlan, TaskPlan, cap_minor_tasks, per_task_proposals, plan_search
from .progress import announce
from .session import TuneSession, make_recorder, make_task_scheduler


@dataclass(frozen=True)
class TuneOutcome:
    """What :func:`tune` did, for the summary."""

    warm: WarmStartReport = field(default_factory=WarmStartReport)
    defaults_measured: int = 0
    library_measured: int = 0
    scheduler: TaskScheduler | None = None  # the task scheduler object (built or passed in); None when the search did not run
    interrupted: bool = False
    stop_reason: str | None = None  # why the run stopped by itself (every board gone)
    confirmed: tuple[ConfirmedTask, ...] = ()  # tasks whose fastest schedules were timed again
    seconds: float = 0.0
    search: SearchPlan | None = None  # how the search was sized; None when it did not run
    #: Unix time the tuning ended: the summary's date (a report places the session's records by it, so not the time
    #: the summary was made, which can come seconds later on a busy host: the board's after-batch hook, the stats)
    ended_at: float = field(default_factory=time.time)


@dataclass
class _Tally:
    """What :func:`tune` has done so far: kept when a stop or an error ends it part way."""

    warm: WarmStartReport = field(default_factory=WarmStartReport)
    defaults_measured: int = 0
    library_measured: int = 0
    scheduler: TaskScheduler | None = None
    interrupted: bool = False
    confirmed: tuple[ConfirmedTask, ...] = ()
    search: SearchPlan | None = None


def runner_for_search(run: RunSettings, session: TuneSession) -> tuple[Runner, bool]:
    """The runner the search measures with (the caller's wrapper around the board's); whether each batch must be awaited.

    Awaited (:class:`AwaitingRunner`, wrapped by :func:`search`) on a board that shares the host's CPU under
    MetaSchedule's task schedulers, which would time a batch while the host builds the next one.
    """
    runner = run.components.wrap_runner(session.runner) if run.components.wrap_runner else session.runner
    return runner, session.awaits and session.scheduler_name in STOCK_SCHEDULERS


def tune(run: RunSettings, plan: TaskPlan, first: FirstMeasurements, session: TuneSession) -> TuneOutcome:
    """Warm start, then MetaSchedule's task scheduler over edgetune's components until the budget is spent."""
    progress, sink, stop = session.progress, run.sink, run.stop
    progress.phase = "starting build workers"
    sink.on_phase(progress)
    if isinstance(session.builder, WarmBuilder):
        session.builder.start()
    progress.phase = "tuning"
    progress.started = time.monotonic()
    sink.on_phase(progress)
    runner, awaiting = runner_for_search(run, session)
    recorder = make_recorder(run, session)
    tally = _Tally()
    started = time.monotonic()
    try:
        with stop_on_signals(stop):
            tally.defaults_measured = measure_default_schedules(run, session, recorder, first.defaults)
            minor = cap_minor_tasks(run, progress, session.limits)
            if run.options.warm_start != "off":
                progress.phase = "training the cost model on the history (warm start)"
                sink.on_phase(progress)
                tally.warm = warm_start(
                    session.cost_model, [ctx.mod for ctx in session.contexts], session.history, session.target,
                    board_id=run.key, scope=run.options.warm_start,
                )
                progress.phase = "tuning"
                sink.on_phase(progress)
            if stop.event.is_set():
                raise StopRequested("stop requested during the warm start")
            tally.library_measured = measure_library_schedules(run, first, session, recorder)
            rechecked = recheck_slow_library_schedules(run, first, session)
            if rechecked:
                announce(sink, plan.remaining, describe_rechecked([task.to_dict() for task in rechecked]))
            failed = failed_library_defaults(run, first, session)
            if failed:
                announce(sink, plan.remaining, f"the library's schedules failed to build or run for {len(failed)} task(s): "
                         "measuring their untuned defaults instead")
                first = first.with_defaults(failed)
                tally.defaults_measured += measure_default_schedules(run, session, recorder, failed)
            if first.search_budget(plan) > 0:
                session.limits.set_search_budget(first.search_budget(plan))
                search_lagging_tasks_first(run, plan, first, session)
                tally.search = plan_search(run, plan, first, minor, session.contexts, session.limits, session.caps_enforced)
                tally.scheduler = make_task_scheduler(run, session.awaits)
                search(run, plan, tally.search, session, runner, awaiting, recorder, tally.scheduler)
                if stop.event.is_set():
                    # MetaSchedule's stock schedulers catch a callback's StopRequested, end
                    # that task and return normally once every task has ended
                    tally.interrupted = True
                else:
                    tally.confirmed = confirm_fastest(run, tally.search, session)
    except BaseException:
        # whatever TVM turned our StopRequested into on its way back
        if not stop.event.is_set():
            raise
        tally.interrupted = True
    return TuneOutcome(
        warm=tally.warm, defaults_measured=tally.defaults_measured, library_measured=tally.library_measured,
        scheduler=tally.scheduler, interrupted=tally.interrupted, stop_reason=recorder.stop_reason,
        confirmed=tally.confirmed, seconds=time.monotonic() - started, search=tally.search, ended_at=time.time(),
    )


def search(
    run: RunSettings, plan: TaskPlan, sized: SearchPlan, session: TuneSession, runner: Runner, awaiting: bool,
    recorder: RecordAndReport, scheduler: TaskScheduler,
) -> None:
    """MetaSchedule's loop over every task: the one ``ms.tune_tasks`` call.

    ``awaiting``: each batch is awaited (:class:`AwaitingRunner`): no build goes on beside the search then, but
    for a batch's own, beside its task's search ahead, on a board that shares the host's CPU (a quiet lookahead).
    """
    lookahead = session.search_report.lookahead
    beside = run.components.builds_beside and (not awaiting or lookahead is not None)
    # a board that shares the host's CPU: each batch timed only once its task's search ahead is done
    with builds_beside_search(session.builder, runner, run.stop.event, beside, lookahead, quiet=session.awaits) as search_runner:
        if awaiting:
            search_runner = AwaitingRunner(search_runner)
        ms.tune_tasks(
            tasks=session.contexts,
            task_weights=session.weights,
            work_dir=str(RunDir(session.out_dir).build_logs),
            max_trials_global=sized.budget,
            max_trials_per_task=per_task_proposals(run, plan, session.caps_enforced),
            num_trials_per_iter=sized.per_iter,
            builder=session.builder,
            runner=search_runner,
            # this target's records only: another board's latencies are on another scale, and its fastest
            # records would seed this search first (warm start and transfer weigh other boards themselves)
            database=session.history.for_target(session.target),
            cost_model=session.cost_model,
            measure_callbacks=[recorder, ms.measure_callback.UpdateCostModel(), *run.components.measure_callbacks],
            task_scheduler=scheduler,
        )


def confirm_fastest(run: RunSettings, sized: SearchPlan, session: TuneSession) -> tuple[ConfirmedTask, ...]:
    """Each task's fastest schedules timed again side by side, the new times stored; the biggest tasks first.

    The model is then built from measurements that were not selected for being fast
    (the winner's curse, :mod:`edgetune.tuning.confirm`).
    """
    left, tuning, progress = sized.retime_limit, run.profile.tuning, session.progress
    if left <= 0:
        return ()
    progress.phase = "timing each task's fastest schedules again, side by side"
    run.sink.on_phase(progress)
    order = sorted(
        (task for task in progress.tasks if task.name not in sized.minor and task.best_sec is not None),
        key=lambda task: -task.weight * task.best_sec,
    )
    confirmed = []
    for task in order:
        if left < 2 or run.stop.event.is_set():
            break
        ctx = session.contexts[task.index]
        fastest = session.history.fastest_candidates(ctx.mod, session.target, tuning.confirm_best)
        wanted = min(left, to_retime([mean_sec(record) for _, record in fastest], tuning.confirm_best, tuning.confirm_margin))
        chosen = [(key, candidate) for key, record in fastest[:wanted] if (candidate := replayed_candidate(ctx, record.trace)) is not None]
        if len(chosen) < 2:
            continue
        before_key, before_sec = fastest[0][0], mean_sec(fastest[0][1])
        results = measure_together(ctx, [candidate for _, candidate in chosen], session.builder, session.runner)
        for (key, _candidate), run_secs in zip(chosen, results):
            if run_secs is not None:  # a failure this time keeps the earlier result
                session.history.retime_candidate(ctx.mod, session.target, key, run_secs)
        left -= len(chosen)
        timed = sum(run_secs is not None for run_secs in results)
        after = session.history.fastest_candidates(ctx.mod, session.target, 1)
        task.best_sec = mean_sec(after[0][1]) if after else task.best_sec
        progress.record_batch(task)
        run.sink.on_batch(progress, task)
        confirmed.append(ConfirmedTask(
            task.name, timed, before_sec * 1e6, task.best_sec * 1e6, bool(after) and after[0][0] != before_key,
        ))
    return tuple(confirmed)
