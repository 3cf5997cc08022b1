"""The run's components and what it has open: :class:`TuneSession`, made by :func:`open_session`.

Each component is the one passed in through :class:`~edgetune.tuning.components.Components`,
else the product's, made from the profile: the cost model, the search strategy (with its
seeds from similar records), MetaSchedule's tune contexts, the task scheduler, the
builder, the runner, the claims on a shared history and the measure callback.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import tvm.s_tir.meta_schedule as ms
from tvm.s_tir.meta_schedule import ExtractedTask, TuneContext
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate
from tvm.target import Target

from ..board.base import Board, MeasureHooks
from ..board.rpc_tracker import TrackerAddress
from ..builder.builder import WarmBuilder
from ..common.run_dir import RunDir
from ..measure.runner import TrackerRunner
from ..search import make_cost_model as _cost_model_named
from ..search import make_search_strategy as _strategy_named
from ..search import make_task_scheduler as _scheduler_named
from ..search import effort as search_effort
from ..search.effort import EffortSizer
from ..search.factory import auto_population
from ..search.spaces import with_task_spaces
from ..search.limits import TaskLimits
from ..search.lookahead import Lookahead, build_ahead_with
from ..search.strategy import AdaptiveSearch, SearchReport
from ..search.transfer import best_similar_records, cached_signature, transferred_candidates
from ..schedules.use import LibraryChoice
from ..tasks import LoadedModel
from ..tasks.flops import task_flops
from ..tasks.signature import operator_signature
from .cache import CandidateCache
from .callbacks import RecordAndReport
from .claims import CandidateClaims, lease_for
from .components import Builder, CostModel, Runner, SearchStrategy, TaskScheduler, TuningHistory
from .inputs import RunSettings
from .plan import FirstMeasurements, TaskPlan, plan_first_measurements
from .progress import TaskProgress, TuneProgress, announce
from .settings import PerType, Suggested, suggested_settings

#: candidates for a task's first batch, from similar workloads: (context, how many) -> candidates
SeedProvider = Callable[[TuneContext, int], list[MeasureCandidate]]


@dataclass(frozen=True)
class TuneSession:
    """What one run has open: where it measures, the history, each task's context, and the components.

    Made by :func:`open_session`; what the components hold is closed by the run's exit stack.
    ``progress``, ``limits`` and ``search_report`` are live state the search updates.
    """

    target: Target
    model: LoadedModel | None
    out_dir: Path
    board: Board
    address: TrackerAddress
    history: TuningHistory
    contexts: list[TuneContext]
    weights: list[float]
    progress: TuneProgress
    cost_model: CostModel
    search_report: SearchReport  # what the search did per task: its output, read by the summary
    suggested: Suggested | None  # --suggested: what the history suggested, and its message
    library: LibraryChoice | None  # the schedule library this run starts from (tuning.schedules)
    builder: Builder
    runner: Runner
    claims: CandidateClaims | None  # leases on candidates in a shared history
    scheduler_name: str
    awaits: bool  # the task scheduler awaits each batch's measurements (the embedded board)
    limits: TaskLimits  # per task, a cap on measured candidates and how many were measured before the search
    caps_enforced: bool  # the search reads ``limits`` (edgetune's adaptive search; stock MetaSchedule's does not)


def make_cost_model(run: RunSettings) -> CostModel:
    if run.components.cost_model is not None:
        return run.components.cost_model
    tuning = run.profile.tuning
    return _cost_model_named(tuning.cost_model, seed=tuning.seed, num_cores=os.cpu_count() or 1,
                             model_file=tuning.cost_model_file, meta_handoff_samples=tuning.meta_handoff_samples)


def make_search_strategy(
    run: RunSettings, plan: TaskPlan, cost_model: CostModel, report: SearchReport, limits: TaskLimits,
    per_type: PerType | None, seeds: SeedProvider | None,
) -> SearchStrategy:
    if run.components.search_strategy is not None:
        return run.components.search_strategy
    tuning = run.profile.tuning
    return _strategy_named(
        tuning.search_strategy,
        num_trials_per_iter=plan.per_iter,
        population_size=tuning.population_size,
        tuning=tuning,
        surrogate=cost_model,
        expected_trials_per_task=math.ceil(plan.remaining / max(1, len(plan.extracted))),
        limits=limits,
        seeds=seeds if tuning.transfer == "similar" else None,
        suggested=per_type,
        report=report,
    )


def make_effort_sizer(run: RunSettings, plan: TaskPlan) -> EffortSizer | None:
    """Each task class's evolutionary effort sized by its returns (``tuning.search_effort``), or None: fixed."""
    tuning = run.profile.tuning
    if tuning.search_effort != "returns" or tuning.search_strategy != "evolutionary":
        return None
    population = tuning.population_size or auto_population(plan.per_iter)
    # the population shrinks where it returns little and never grows past the batch's own: a larger sample always
    # predicts a better top (5-10% per doubling on a transformer's tasks), at twice the search's host time
    # the floor keeps the population's return measurable: it reads halves of the first sample, each at least a batch
    return EffortSizer(population, min_population=min(population, max(16, 4 * plan.per_iter)), max_population=population,
                       min_return=tuning.search_min_return, start_iterations=search_effort.START_ITERATIONS)


def make_seed_provider(history: TuningHistory, target: Target, library: LibraryChoice | None) -> SeedProvider:
    """Candidates for a task's first batch from the best records of similar workloads in the history."""

    def seeds(context: TuneContext, limit: int) -> list[MeasureCandidate]:
        wanted = operator_signature(context.mod)
        # the fastest few of each workload of this operator, its module asked before any record is read:
        # reading the newest 2000 records replayed every trace in them, 21 s for MobileNetV2's first batches
        # on a history of eight models, 6 s now
        records = history.fastest_records(
            target, per_workload=2, keep=lambda mod: cached_signature(operator_signature, mod) == wanted
        )
        if library is not None and library.library is not None:
            # other shapes of the same operator from the library join the history's: the nearest few
            # (replaying the traces of every shape costs seconds; the batch takes the nearest first)
            nearest = library.library.nearest_workloads(context.mod, wanted)
            records += library.library.tuning_records(target, workloads=nearest[: max(4, 2 * limit)], per_workload=2)
        similar = best_similar_records(records, context.mod, operator_signature)
        # a seed the board measured already (the library's nearest shape, measured first) would only be
        # served from the history: a trial of the batch spent on nothing new
        found = transferred_candidates(context, similar, limit + 1)
        fresh = [c for c in found if not history.has_candidate(context.mod, target, c.sch.trace)]
        return fresh[:limit]

    return seeds


def make_contexts(
    run: RunSettings, extracted: tuple[ExtractedTask, ...], strategy: SearchStrategy,
) -> tuple[list[TuneContext], list[float]]:
    """MetaSchedule's TuneContexts of the plan's tasks, searched by ``strategy``, and their weights."""
    with unnamed_handlers_aside():
        contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
            list(extracted),
            work_dir=str(RunDir(run.options.out_dir).build_logs),
            strategy=strategy,
            num_threads=os.cpu_count() or 1,
            seed=run.profile.tuning.seed,
        )
    return (with_task_spaces(list(contexts), strategy, depthwise_tiling=run.profile.tuning.depthwise_tiling),
            [float(w) for w in weights])


@contextlib.contextmanager
def unnamed_handlers_aside() -> Iterator[None]:
    """MetaSchedule's per-task logger config names every handler of its logger: one without a name (pytest's
    capture, a notebook's) makes it raise, so those sit out while the contexts are made."""
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    unnamed = [h for h in ms_logger.handlers if h.get_name() is None]
    for handler in unnamed:
        ms_logger.removeHandler(handler)
    try:
        yield
    finally:
        for handler in unnamed:
            ms_logger.addHandler(handler)


def make_task_scheduler(run: RunSettings, awaits: bool) -> TaskScheduler:
    if run.components.task_scheduler is not None:
        return run.components.task_scheduler
    return _scheduler_named(
        run.scheduler_name, peak_gflops=run.profile.device.peak_gflops, seed=run.profile.tuning.seed, wait_for_results=awaits
    )


def make_builder(run: RunSettings, cache: CandidateCache, claims: CandidateClaims | None = None) -> Builder:
    if run.components.builder is not None:
        return run.components.builder
    build = run.profile.build
    return WarmBuilder(
        cross_compiler=build.cross_compiler,
        cross_compiler_flags=tuple(build.cross_compiler_flags),
        timeout_sec=build.timeout_sec,
        max_workers=build.workers,
        direct_link=build.candidate_link == "direct",
        lookup_cached=cache.lookup_mod,
        claims=claims,
    )


def make_claims(run: RunSettings, history: TuningHistory, target: Target, cache: CandidateCache) -> CandidateClaims | None:
    """Leases on candidates in the history, so tuners sharing it never measure one at once.

    Only with the product's builder: a builder passed in knows nothing of claims.
    """
    if run.components.builder is not None:
        return None
    return CandidateClaims(
        history, target, cache, lease_sec=lease_for(run.profile.measure.timeout_sec), stop=run.stop.event
    )


def make_runner(run: RunSettings, address: TrackerAddress, cache: CandidateCache, hooks: MeasureHooks | None = None) -> Runner:
    """The runner; ``hooks`` (a provisioned board) hear about each batch and each lost session."""
    if run.components.runner is not None:
        return run.components.runner
    profile = run.profile
    return TrackerRunner(
        address,
        device=profile.rpc.device,
        config=profile.measure,
        session_timeout_sec=profile.rpc.session_timeout_sec,
        lookup_cached=cache.lookup_key,
        max_boards=profile.measure.max_boards,
        hooks=hooks,
    )


def make_recorder(run: RunSettings, session: TuneSession) -> RecordAndReport:
    """edgetune's record of every batch: MetaSchedule's first measure callback, also called for batches measured outside the search."""
    return RecordAndReport(
        session.history, session.contexts, session.progress, run.sink, run.stop.event,
        runner=session.runner, measurement_log=RunDir(session.out_dir).measurements, claims=session.claims,
    )


def read_suggested(run: RunSettings, history: TuningHistory, target: Target, plan: TaskPlan) -> tuple[Suggested | None, PerType | None]:
    """``--suggested``: settings per task type from the history (None, None without it)."""
    if not (run.options.suggested and plan.remaining > 0 and plan.extracted):
        return None, None
    announce(run.sink, plan.remaining, "reading suggested settings per task type from the history")
    suggested, per_type = suggested_settings(history, target, run.profile, plan.workloads, plan.per_iter)
    announce(run.sink, plan.remaining, suggested["message"])
    return suggested, per_type


def progress_of(plan: TaskPlan, contexts: list[TuneContext], weights: list[float], history: TuningHistory, target: Target) -> TuneProgress:
    """The run's progress record: each task with its weight, FLOPs, history and best so far."""
    tasks = [
        TaskProgress(index=i, name=ctx.task_name, weight=w, flops=task_flops(ctx.mod), previous_trials=n)
        for i, (ctx, w, n) in enumerate(zip(contexts, weights, plan.previous))
    ]
    for ctx, task in zip(contexts, tasks):
        best = history.best_record(ctx.mod, target)
        if best is not None:
            task.best_sec = float(np.mean([float(x) for x in best.run_secs]))
    return TuneProgress(budget=plan.remaining, tasks=tasks)


def open_session(
    run: RunSettings, stack: ExitStack, plan: TaskPlan, target: Target, model: LoadedModel | None, out_dir: Path,
    board: Board, address: TrackerAddress, history: TuningHistory, on_progress: Callable[[TuneProgress], None],
) -> tuple[TuneSession, FirstMeasurements]:
    """Contexts, progress and the components that build and measure; and what is measured before the search.

    ``on_progress`` is told the run's progress record as soon as it exists (board messages go there).
    """
    library = run.library(target)
    if library.message:
        announce(run.sink, plan.remaining, library.message)
    cost_model = make_cost_model(run)
    # a board that shares the host's CPU times nothing while the host works: there a task's next batch is searched
    # while its last one builds, and the batch is timed once that search is done (measure/pending.py, quiet), each
    # batch awaited (MetaSchedule's schedulers through AwaitingRunner, edgetune's by themselves); a task scheduler
    # passed in might search and build on while a batch is timed
    ahead = run.components.search_ahead and (not board.awaits_measurements or run.components.task_scheduler is None)
    report = SearchReport(Lookahead(stop=run.stop.event) if ahead else None, effort=make_effort_sizer(run, plan))
    suggested, per_type = read_suggested(run, history, target, plan)
    limits = plan.new_limits()
    strategy = make_search_strategy(run, plan, cost_model, report, limits, per_type, make_seed_provider(history, target, library))
    contexts, weights = make_contexts(run, plan.extracted, strategy)
    progress = progress_of(plan, contexts, weights, history, target)
    on_progress(progress)
    cache = CandidateCache()
    first = plan_first_measurements(run, plan, contexts, progress, library, history, target, cache)
    claims = make_claims(run, history, target, cache)
    if claims is not None:
        stack.callback(claims.close)  # before history.close: released on every exit
    builder = make_builder(run, cache, claims)
    if isinstance(builder, WarmBuilder):  # a builder passed in (stock MetaSchedule's) has no workers
        stack.callback(builder.close)
    if report.lookahead is not None and not board.awaits_measurements:  # builds ahead would run beside a timing
        report.lookahead.build_ahead = build_ahead_with(builder)
    runner = make_runner(run, address, cache, board.measure_hooks())
    if isinstance(runner, TrackerRunner):
        stack.callback(runner.close)
    session = TuneSession(
        target=target, model=model, out_dir=out_dir, board=board, address=address, history=history,
        contexts=contexts, weights=weights, progress=progress, cost_model=cost_model, search_report=report,
        suggested=suggested, library=library, builder=builder, runner=runner, claims=claims,
        scheduler_name=run.scheduler_name,
        # The embedded board is this host's CPU: a batch timed while the next one is
        # searched and built comes out slow, so no scheduler overlaps them there
        # (edgetune's wait themselves, MetaSchedule's through AwaitingRunner).
        awaits=board.awaits_measurements,
        limits=limits,
        caps_enforced=isinstance(strategy, AdaptiveSearch),
    )
    return session, first
