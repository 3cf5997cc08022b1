"""The tuning pipeline: profile -> board -> tasks -> search -> build -> measure -> history -> deploy.

:class:`TuningPipeline` builds every MetaSchedule component from a profile and
the run's options (builder, runner, cost model, search strategy, task
scheduler, measure callbacks); :func:`run_tune` runs it. ``edgetune tune``
and every benchmark call :func:`run_tune`; a benchmark that compares one
component passes it in through :class:`Components` and keeps the rest of the
product as it is. This module is the one place that calls ``ms.tune_tasks``.

A run, in order: :meth:`~TuningPipeline.check_inputs` (bad input fails before
anything starts), the board is opened, the history opened,
:meth:`~TuningPipeline.plan_tasks`, :meth:`~TuningPipeline.make_contexts`,
the builder and runner are made, :meth:`~TuningPipeline.tune`,
:meth:`~TuningPipeline.summarize`, and end-to-end evaluation.
"""

from __future__ import annotations

import logging
import math
import os
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import tvm
import tvm.s_tir.meta_schedule as ms
import tvm_ffi

from ..common.run_dir import RunDir
from .._version import __version__
from ..artifact.baseline import RUNTIME_NAMES, BaselineResult, compare_with_baseline
from ..board.base import Board, EmbeddedBoard
from ..board.rpc_tracker import TrackerAddress
from ..builder.builder import BuildStats, WarmBuilder
from ..builder.intrinsics import load_tensor_intrinsics
from ..common.failure import is_failed
from ..errors import EdgetuneError, TuningInterrupted
from ..history import open_history
from ..history.warmstart import WarmStartReport, warm_start
from ..tasks.signature import operator_signature
from ..measure.awaiting import AwaitingRunner
from ..measure.runner import MeasureStats, TrackerRunner
from ..profile import DeviceProfile
from ..provision.board import BoardChoice, choose_board, resolve_board
from ..search import make_cost_model, make_search_strategy, make_task_scheduler
from ..search.scheduler import SLOT_SCHEDULERS
from ..search.strategy import SearchReport
from ..search.factory import auto_population
from ..search.transfer import best_similar_records, transferred_candidates
from ..tasks import LoadedModel, load_model, prepare_for_tuning
from ..tasks.graph import prepare_graph
from ..tasks.inventory import KernelInventory, kernel_inventory
from edgetune.common.choices import STOCK_SCHEDULERS

from ..schedules.use import LibraryChoice, choose_library, library_candidates
from .baseline import is_default_trace, measure_candidates, measure_defaults
from .cache import CandidateCache
from .claims import CandidateClaims, lease_for
from .callbacks import RecordAndReport
from .evaluate import evaluate_end_to_end
from .progress import ProgressSink, TaskProgress, TuneProgress, announce
from .settings import check_combined_settings, measurement_summary, suggested_settings, with_applied
from ..common.interrupts import StopRequested, StopSignal, stop_on_signals
from .summary import BoardInfo, ModelInfo, SearchInfo, Seconds, TrialCounts, TuneSummary, append_session

#: MetaSchedule's own task schedulers: they cannot be told to await each batch's measurements


@dataclass
class TuneOptions:
    """Everything ``edgetune tune`` needs; CLI flags override the profile."""

    profile: DeviceProfile
    model: str | None
    out_dir: Path
    tracker: str | None = None  # "host:port"; None starts the loopback board
    key: str | None = None  # defaults to the profile's rpc.key
    db: str | None = None  # defaults to the run directory's history.db
    trials: int | None = None  # defaults to the profile's tuning.trials
    evaluate: bool = True  # compile and measure end to end after tuning
    # "off", "same", "auto" or "similar": cost model trained on history first (see history/warmstart.py)
    warm_start: str = "same"
    suggested: bool = False  # each task gets its type's early-stop and sampling settings from the history
    scheduler: str | None = None  # task scheduler; defaults to the profile's tuning.task_scheduler
    board: Board | None = None  # where to measure; defaults to the tracker, or the embedded board
    board_name: str | None = None  # a provisioned board of the inventory (--board): looked after over SSH
    inventory: str | None = None  # the inventory file of board_name (default: $EDGETUNE_INVENTORY)
    where: BoardChoice | None = None  # the above, resolved once (api.tune_options); None: resolved by the run
    task_names: Sequence[str] | None = None  # tune only these of the model's tasks (all by default)


@dataclass
class Components:
    """Components a caller passes in instead of the ones the profile builds; None keeps the product's.

    A benchmark that compares one component sets that one; everything else
    (history, callbacks, progress, summary) stays the product's.
    """

    builder: Any = None  # a MetaSchedule Builder
    runner: Any = None  # a MetaSchedule Runner
    wrap_runner: Callable[[Any], Any] | None = None  # wraps the runner in use (built or passed in)
    cost_model: Any = None
    search_strategy: Any = None
    task_scheduler: Any = None
    measure_callbacks: Sequence[Any] = ()  # run after edgetune's own
    # (name, PrimFunc module, weight) tuned instead of the model's tasks; needs evaluate=False
    tasks: Sequence[tuple[str, Any, int]] | None = None
    load_intrinsics: bool = True  # register the target family's tensor intrinsics before the contexts


@dataclass
class TaskPlan:
    """The tasks of this run and how the budget is split between them."""

    extracted: list[Any]
    previous: list[int]  # records already in the history, per task
    budget: int  # --trials
    remaining: int  # budget minus what the history holds
    per_iter: int  # candidates per batch
    inventory: KernelInventory | None = None  # the prepared graph's kernels by class (None: tasks passed in)

    @property
    def workloads(self) -> list[Any]:
        return [task.dispatched[0] for task in self.extracted]


@dataclass
class _Run:
    """What one run has made so far, handed from stage to stage."""

    target: Any
    model: LoadedModel | None
    out_dir: Path
    board: Board
    address: TrackerAddress
    history: Any
    plan: TaskPlan
    contexts: list[Any] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)
    progress: TuneProgress | None = None
    cost_model: Any = None
    search_report: SearchReport = field(default_factory=SearchReport)
    suggested: dict[str, Any] | None = None
    builder: Any = None
    runner: Any = None
    scheduler_name: str = ""
    scheduler: Any = None  # the task scheduler object of this run (built or passed in)
    awaits: bool | None = None
    warm: WarmStartReport = field(default_factory=WarmStartReport)
    defaults_to_measure: list[int] = field(default_factory=list)  # tasks whose default schedule the history lacks
    library: LibraryChoice | None = None  # the schedule library this run starts from (tuning.schedules)
    library_candidates: dict[int, list[Any]] = field(default_factory=dict)  # task index -> the library's schedules to measure first
    defaults_measured: int = 0
    measured_outside: dict[str, int] = field(default_factory=dict)  # per task, measured before the search (its default)
    task_caps: dict[str, int] = field(default_factory=dict)  # minor tasks: at most this many measured (shared with the strategy)
    record: RecordAndReport | None = None  # stores every batch (searched or measured before the search)
    callbacks: list[Any] = field(default_factory=list)  # MetaSchedule's measure callbacks: record first
    claims: CandidateClaims | None = None  # leases on candidates in a shared history
    interrupted: bool = False
    tune_seconds: float = 0.0


class TuningPipeline:
    """Builds every MetaSchedule component for one run from the profile and options; :meth:`run` runs it."""

    def __init__(self, options: TuneOptions, sink: ProgressSink | None = None, components: Components | None = None) -> None:
        self.options = options
        self.profile = options.profile
        self.sink = sink or ProgressSink()
        self.components = components or Components()
        self.trials = options.trials if options.trials is not None else self.profile.tuning.trials
        self.key = options.key or self.profile.rpc.key
        self.stop = StopSignal()
        self._progress: TuneProgress | None = None  # the run's, once it exists (for board messages)

    # -- inputs and board ----------------------------------------------------
    def check_inputs(self) -> tuple[Any, LoadedModel | None]:
        """Profile, settings and model first: bad input fails before anything is started."""
        if self.trials < 0:
            raise EdgetuneError(f"--trials must be >= 0, got {self.trials} instead")
        if self.components.tasks is not None and self.options.evaluate:
            raise EdgetuneError("tasks passed in have no model to evaluate: set evaluate=False")
        self.profile.check_buildable()
        check_combined_settings(self.profile)
        target = self.profile.tvm_target()
        model = load_model(self.options.model) if self.components.tasks is None else None
        if model is not None:
            tuning = self.profile.tuning
            model = prepare_graph(model, tuning.conv_layout, tuning.graph_optimization)
        return target, model

    def make_board(self, out_dir: Path) -> Board:
        """The board given, else the one ``options.where`` names (resolved here when the caller did not)."""
        board = self.options.board
        if board is None:
            options = self.options
            where = options.where or (
                choose_board(options.board_name, options.inventory, options.tracker, options.key) if options.board_name
                else BoardChoice(tracker=options.tracker, key=options.key)  # as given: TVM_TRACKER_* is tune_options' job
            )
            board = resolve_board(where, self.profile, self.key, RunDir(out_dir), self.notify)
        board.check_profile(self.profile)
        return board

    def notify(self, message: str) -> None:
        """A one-line message about the board (throttling, a restarted server) on the progress display."""
        progress = self._progress
        if progress is None:
            announce(self.sink, self.trials, message)
            return
        phase, progress.phase = progress.phase, message
        try:
            self.sink.on_phase(progress)
        finally:
            progress.phase = phase

    # -- tasks ----------------------------------------------------------------
    def extract_tasks(self, target: Any, model: LoadedModel | None) -> list[Any]:
        """The model's tunable tasks (or the ones passed in), as MetaSchedule ``ExtractedTask``s."""
        return self._extract(target, model)[0]

    def _extract(self, target: Any, model: LoadedModel | None) -> tuple[list[Any], KernelInventory | None]:
        """The tasks, and the inventory of the prepared graph's kernels (None for tasks passed in)."""
        if self.components.load_intrinsics:
            load_tensor_intrinsics(target)
        if self.components.tasks is not None:
            return [ms.ExtractedTask(name, mod, target, [mod], int(weight)) for name, mod, weight in self.components.tasks], None
        assert model is not None
        prepared = prepare_for_tuning(model.mod, target)
        extracted = [
            task
            for task in ms.relax_integration.extract_tasks(prepared, target)
            if not task.mod.attrs.get("tirx.is_scheduled", False)  # nothing to tune
        ]
        if self.options.task_names is not None:
            wanted = list(self.options.task_names)
            names = [task.task_name for task in extracted]
            missing = [name for name in wanted if name not in names]
            if missing:
                raise EdgetuneError(f"task names must be among the model's tasks {names}, got {missing} instead")
            extracted = [task for task in extracted if task.task_name in wanted]
        return extracted, kernel_inventory(prepared, extracted)

    def plan_tasks(self, history: Any, target: Any, model: LoadedModel | None) -> TaskPlan:
        extracted, inventory = self._extract(target, model)
        previous = [history.count_records(workload=task.dispatched[0], target=target) for task in extracted]
        remaining = max(0, self.trials - sum(previous))
        # A budget smaller than one batch per task would starve the tasks
        # picked last (often the biggest convolutions): shrink the batches.
        per_iter = min(self.profile.tuning.num_trials_per_iter, max(1, remaining // max(1, len(extracted))))
        return TaskPlan(extracted, previous, self.trials, remaining, per_iter, inventory)

    # -- search -----------------------------------------------------------------
    def make_cost_model(self) -> Any:
        if self.components.cost_model is not None:
            return self.components.cost_model
        tuning = self.profile.tuning
        return make_cost_model(tuning.cost_model, seed=tuning.seed, num_cores=os.cpu_count() or 1,
                               model_file=tuning.cost_model_file, meta_handoff_samples=tuning.meta_handoff_samples)

    def make_search_strategy(self, run: _Run, per_type: dict[tuple[str, ...], dict[str, Any]] | None) -> Any:
        if self.components.search_strategy is not None:
            return self.components.search_strategy
        tuning, plan = self.profile.tuning, run.plan
        return make_search_strategy(
            tuning.search_strategy,
            num_trials_per_iter=plan.per_iter,
            population_size=tuning.population_size,
            tuning=tuning,
            surrogate=run.cost_model,
            expected_trials_per_task=math.ceil(plan.remaining / max(1, len(plan.extracted))),
            report=run.search_report,
            suggested=per_type,
            seeds=self.make_seed_provider(run) if tuning.transfer == "similar" else None,
            task_caps=run.task_caps,
            measured_outside=run.measured_outside,
        )

    def make_seed_provider(self, run: _Run) -> Callable[[Any, int], list[Any]]:
        """Candidates for a task's first batch from the best records of similar workloads in the history."""

        def seeds(context: Any, limit: int) -> list[Any]:
            records = [record for record, _board in run.history.successful_records(run.target, limit=2000)]
            library = run.library.library if run.library is not None else None
            if library is not None:  # other shapes of the same operator from the library join the history's
                records += library.tuning_records(run.target, signature=operator_signature(context.mod))
            similar = best_similar_records(records, context.mod, operator_signature)
            return transferred_candidates(context, similar, limit)

        return seeds

    def make_contexts(self, run: _Run) -> None:
        """TuneContexts, weights and the progress record; ``--suggested`` settings read here."""
        plan = run.plan
        per_type = None
        if self.options.suggested and plan.remaining > 0 and plan.extracted:
            announce(self.sink, plan.remaining, "reading suggested settings per task type from the history")
            run.suggested, per_type = suggested_settings(run.history, run.target, self.profile, plan.workloads, plan.per_iter)
            announce(self.sink, plan.remaining, run.suggested["message"])
        # MetaSchedule's per-task logger config names every handler of its logger: one without a
        # name (pytest's capture, a notebook's) makes it raise, so those sit out while it runs
        ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
        unnamed = [h for h in ms_logger.handlers if h.get_name() is None]
        for handler in unnamed:
            ms_logger.removeHandler(handler)
        try:
            run.contexts, weights = self._contexts(run, per_type)
        finally:
            for handler in unnamed:
                ms_logger.addHandler(handler)
        run.weights = [float(w) for w in weights]
        tasks = [
            TaskProgress(index=i, name=ctx.task_name, weight=w, flops=_task_flops(ctx.mod), previous_trials=n)
            for i, (ctx, w, n) in enumerate(zip(run.contexts, run.weights, plan.previous))
        ]
        for ctx, task in zip(run.contexts, tasks):
            best = run.history.best_record(ctx.mod, run.target)
            if best is not None:
                task.best_sec = float(np.mean([float(x) for x in best.run_secs]))
        run.progress = TuneProgress(budget=plan.remaining, tasks=tasks)
        self._progress = run.progress

    def _contexts(self, run: _Run, per_type: Any) -> tuple[list[Any], list[float]]:
        return ms.relax_integration.extracted_tasks_to_tune_contexts(
            run.plan.extracted,
            work_dir=str(RunDir(run.out_dir).build_logs),
            strategy=self.make_search_strategy(run, per_type),
            num_threads=os.cpu_count() or 1,
            seed=self.profile.tuning.seed,
        )

    def make_task_scheduler(self, run: _Run) -> Any:
        if self.components.task_scheduler is not None:
            return self.components.task_scheduler
        return make_task_scheduler(
            run.scheduler_name, peak_gflops=self.profile.device.peak_gflops, seed=self.profile.tuning.seed, wait_for_results=run.awaits
        )

    # -- build and measure ---------------------------------------------------------
    def make_builder(self, cache: CandidateCache, claims: CandidateClaims | None = None) -> Any:
        if self.components.builder is not None:
            return self.components.builder
        build = self.profile.build
        return WarmBuilder(
            cross_compiler=build.cross_compiler,
            cross_compiler_flags=tuple(build.cross_compiler_flags),
            timeout_sec=build.timeout_sec,
            max_workers=build.workers,
            lookup_cached=cache.lookup_mod,
            claims=claims,
        )

    def make_claims(self, history: Any, target: Any, cache: CandidateCache) -> CandidateClaims | None:
        """Leases on candidates in the history, so tuners sharing it never measure one at once.

        Only with the product's builder: a builder passed in knows nothing of claims.
        """
        if self.components.builder is not None:
            return None
        return CandidateClaims(
            history, target, cache, lease_sec=lease_for(self.profile.measure.timeout_sec), stop=self.stop.event
        )

    def make_runner(self, address: TrackerAddress, cache: CandidateCache, hooks: Any = None) -> Any:
        """The runner; ``hooks`` (a provisioned board) hear about each batch and each lost session."""
        runner = self.components.runner
        if runner is None:
            runner = TrackerRunner(
                address,
                device=self.profile.rpc.device,
                config=self.profile.measure,
                session_timeout_sec=self.profile.rpc.session_timeout_sec,
                lookup_cached=cache.lookup_key,
                max_boards=self.profile.measure.max_boards,
                hooks=hooks,
            )
        return runner

    def make_callbacks(self, run: _Run, measured_by: Any) -> list[Any]:
        """MetaSchedule's measure callbacks; the first, edgetune's record of every batch, is also ``run.record``."""
        run.record = RecordAndReport(
            run.history, run.contexts, run.progress, self.sink, self.stop.event,
            runner=measured_by, measurement_log=RunDir(run.out_dir).measurements, claims=run.claims,
        )
        return [run.record, ms.measure_callback.UpdateCostModel(), *self.components.measure_callbacks]

    # -- the run ----------------------------------------------------------------
    def run(self) -> TuneSummary:
        """Tune the model for the profile; return (and write) the run summary."""
        target, model = self.check_inputs()
        out_dir = Path(self.options.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        with ExitStack() as stack:
            board = self.make_board(out_dir)
            if board.awaits_measurements:
                announce(self.sink, self.trials, "starting loopback tracker and RPC server")
            address = stack.enter_context(board)
            history = open_history(self.options.db or str(RunDir(out_dir).history), board_id=self.key)
            stack.callback(history.close)
            # MetaSchedule's console handler takes the level its logger has right
            # now: keep its per-round tables in the log files, off the terminal.
            logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
            run = _Run(target, model, out_dir, board, address, history, self.plan_tasks(history, target, model))
            run.cost_model = self.make_cost_model()
            self.make_contexts(run)
            self.choose_library(run)
            cache = CandidateCache()
            for ctx, task in zip(run.contexts, run.progress.tasks):
                cache.add_history(history, ctx.mod, target)
                stored = cache.default_run_secs(ctx.mod)
                if stored is not None:
                    task.default_sec = _mean_or_none(stored)
                elif task.index in run.library_candidates:
                    pass  # the library's schedule is measured instead: it was tuned to beat the default
                elif self.profile.tuning.default_schedule and str(target.kind.name) == "llvm":
                    # off: the search starts at once. GPU targets' untuned code is TVM's default GPU
                    # schedule (dlight), not the unscheduled function, so there is no trace to measure.
                    run.defaults_to_measure.append(task.index)
            run.claims = self.make_claims(history, target, cache)
            if run.claims is not None:
                stack.callback(run.claims.close)  # before history.close: released on every exit
            run.builder = self.make_builder(cache, run.claims)
            if isinstance(run.builder, WarmBuilder):  # a builder passed in (stock MetaSchedule's) has no workers
                stack.callback(run.builder.close)
            run.runner = self.make_runner(address, cache, board.measure_hooks())
            if isinstance(run.runner, TrackerRunner):
                stack.callback(run.runner.close)
            run.scheduler_name = self.options.scheduler or self.profile.tuning.task_scheduler
            # The embedded board is this host's CPU: a batch timed while the next one is
            # searched and built comes out slow, so no scheduler overlaps them there
            # (edgetune's wait themselves, MetaSchedule's through AwaitingRunner).
            run.awaits = board.awaits_measurements
            if run.plan.remaining > 0 and run.contexts:
                self.tune(run)
            if isinstance(run.runner, TrackerRunner):
                run.runner.wait_idle()
            summary = self.summarize(run)
            if run.interrupted:
                summary.write(out_dir)
                append_session(out_dir, summary)
                reason = run.record.stop_reason if run.record is not None else None
                raise TuningInterrupted(
                    ("stopped: " + reason.split(": ", 1)[-1] + "; " if reason else "interrupted: ")
                    + f"{run.progress.done} measurements of this run are kept in {history.url}; "
                    f"run the same command again to resume",
                    signum=self.stop.signum,
                )
            if isinstance(run.builder, WarmBuilder):
                run.builder.close()  # free the workers' memory before whole-model builds
            if self.options.evaluate:
                run.progress.phase = "compiling and measuring the whole model on the device"
                self.sink.on_phase(run.progress)
                summary.end_to_end = evaluate_end_to_end(model, self.profile, target, history, address, out_dir)
                summary.end_to_end.tuned_kernels_ms = summary.kernels_ms()
                if self.profile.tuning.baseline != "none":
                    summary.end_to_end.baselines = [self.time_baseline(run, model, summary.end_to_end.artifact).to_dict()]
            summary.write(out_dir)
            append_session(out_dir, summary)
            return summary

    def tune(self, run: _Run) -> None:
        """Warm start, then MetaSchedule's task scheduler over edgetune's components until the budget is spent."""
        progress, plan = run.progress, run.plan
        progress.phase = "starting build workers"
        self.sink.on_phase(progress)
        if isinstance(run.builder, WarmBuilder):
            run.builder.start()
        progress.phase = "tuning"
        progress.started = time.monotonic()
        self.sink.on_phase(progress)
        runner = self.components.wrap_runner(run.runner) if self.components.wrap_runner else run.runner
        if run.board.awaits_measurements and run.scheduler_name in STOCK_SCHEDULERS and not self.components.wrap_runner:
            # MetaSchedule's schedulers would time this batch while the host builds the next one
            runner = AwaitingRunner(runner)
        run.callbacks = self.make_callbacks(run, run.runner)
        started = time.monotonic()
        try:
            with stop_on_signals(self.stop):
                self.measure_default_schedules(run)
                self.cap_minor_tasks(run)
                if self.options.warm_start != "off":
                    progress.phase = "training the cost model on the history (warm start)"
                    self.sink.on_phase(progress)
                    run.warm = warm_start(
                        run.cost_model, [ctx.mod for ctx in run.contexts], run.history, run.target,
                        board_id=self.key, scope=self.options.warm_start,
                    )
                    progress.phase = "tuning"
                    self.sink.on_phase(progress)
                if self.stop.event.is_set():
                    raise StopRequested("stop requested during the warm start")
                self.measure_library_schedules(run)
                search_budget = plan.remaining - len(run.defaults_to_measure) - sum(map(len, run.library_candidates.values()))
                if search_budget <= 0:
                    return
                run.scheduler = self.make_task_scheduler(run)
                ms.tune_tasks(
                    tasks=run.contexts,
                    task_weights=run.weights,
                    work_dir=str(RunDir(run.out_dir).build_logs),
                    max_trials_global=search_budget,
                    max_trials_per_task=self.profile.tuning.max_trials_per_task or plan.remaining,
                    num_trials_per_iter=plan.per_iter,
                    builder=run.builder,
                    runner=runner,
                    # this target's records only: another board's latencies are on another scale, and its fastest
                    # records would seed this search first (warm start and transfer weigh other boards themselves)
                    database=run.history.for_target(run.target),
                    cost_model=run.cost_model,
                    measure_callbacks=run.callbacks,
                    task_scheduler=run.scheduler,
                )
                if self.stop.event.is_set():
                    # MetaSchedule's stock schedulers catch a callback's StopRequested, end
                    # that task and return normally once every task has ended
                    run.interrupted = True
        except BaseException:
            # whatever TVM turned our StopRequested into on its way back
            if not self.stop.event.is_set():
                raise
            run.interrupted = True
        finally:
            run.tune_seconds = time.monotonic() - started

    def cap_minor_tasks(self, run: _Run) -> None:
        """Budget where it pays: a task that cannot matter to the tuned model gets few trials.

        Reshapes, concatenations and small pools cannot gain much; left alone,
        each takes a full batch from the heavy convolutions in the scheduler's
        first round. "Matter" is judged against the model as it may be once
        tuned, not as it is untuned (where naive convolutions dwarf
        everything): each task is expected to reach half the profile's peak
        GFLOPS, or to stay at its untuned latency if that is lower, and a task
        whose untuned latency is under ``minor_task_share`` of that expected
        model is minor.
        """
        tuning, peak = self.profile.tuning, self.profile.device.peak_gflops
        tasks = [t for t in run.progress.tasks if t.default_sec is not None]
        if len(tasks) < 2:
            return

        def expected_sec(task: TaskProgress) -> float:
            if not peak or not task.flops:
                return task.default_sec
            return min(task.default_sec, task.flops / (0.5 * peak * 1e9))

        model = sum(t.weight * expected_sec(t) for t in tasks)
        for task in tasks:
            if model and task.weight * task.default_sec < tuning.minor_task_share * model:
                run.task_caps[task.name] = tuning.minor_task_trials

    def choose_library(self, run: _Run) -> None:
        """The schedule library (tuning.schedules) and, per task new to the history, its exact-workload schedule."""
        run.library = choose_library(self.profile.tuning.schedules, run.target)
        if run.library.message:
            announce(self.sink, run.plan.remaining, run.library.message)
        library = run.library.library
        if library is None or run.plan.remaining <= 0:
            return
        budget = run.plan.remaining
        for index, ctx in enumerate(run.contexts):
            if run.plan.previous[index] == 0 and budget > 0:  # a task the history holds resumes from its own records
                found = library_candidates(ctx, library, min(self.profile.tuning.library_schedules, budget))
                if found:
                    run.library_candidates[index] = found
                    budget -= len(found)

    def measure_library_schedules(self, run: _Run) -> None:
        """Each covered task's library schedule, measured on the board as its first trial and stored."""
        if not run.library_candidates:
            return
        run.progress.phase = f"measuring the schedule library's schedules of {len(run.library_candidates)} tasks"
        self.sink.on_phase(run.progress)
        record = run.record
        for rank in range(max(map(len, run.library_candidates.values()))):  # one batch per rank: the best first
            by_task = {i: found[rank] for i, found in run.library_candidates.items() if rank < len(found)}
            measured = measure_candidates(run.contexts, by_task, run.builder, run.runner)
            for index, (candidate, built, ran) in measured.items():
                name = run.progress.tasks[index].name
                run.measured_outside[name] = run.measured_outside.get(name, 0) + 1
                if built.error_msg is None and ran.error_msg is None and ran.run_secs:
                    latency_us = float(np.mean([float(x) for x in ran.run_secs])) * 1e6
                    run.library.exact[name] = min(latency_us, run.library.exact.get(name, latency_us))
                record.record(index, [candidate], [built], [ran])
        run.progress.phase = "tuning"
        self.sink.on_phase(run.progress)

    def measure_default_schedules(self, run: _Run) -> None:
        """Each task's untuned code, measured once and stored: the search must beat it to replace it."""
        if not run.defaults_to_measure:
            return
        run.progress.phase = "measuring each task's default schedule (the untuned baseline)"
        self.sink.on_phase(run.progress)
        measured = measure_defaults(run.contexts, run.defaults_to_measure, run.builder, run.runner)
        record = run.record
        run.defaults_measured = len(measured)
        for index in measured:
            run.measured_outside[run.progress.tasks[index].name] = 1
        for index, (candidate, built, ran) in measured.items():
            ok = built.error_msg is None and ran.error_msg is None and ran.run_secs
            run.progress.tasks[index].default_sec = _mean_or_none([float(x) for x in ran.run_secs]) if ok else None
            record.record(index, [candidate], [built], [ran])
        run.progress.phase = "tuning"
        self.sink.on_phase(run.progress)

    def time_baseline(self, run: _Run, model: LoadedModel, artifact: str) -> BaselineResult:
        """tuning.baseline: the same model in that runtime beside ``model.so``, on this machine; never fails the tune."""
        runtime = self.profile.tuning.baseline
        if not isinstance(run.board, EmbeddedBoard):
            return BaselineResult(runtime, error=f"runs only on the embedded board (this machine) so far, not on {run.board.label}")
        run.progress.phase = f"timing {RUNTIME_NAMES.get(runtime, runtime)} beside the tuned model on this machine"
        self.sink.on_phase(run.progress)
        onnx = model.onnx_bytes if model.format == "onnx" else None
        return compare_with_baseline(runtime, artifact, onnx, model.random_inputs(seed=0), self.profile.device.num_threads)

    def summarize(self, run: _Run) -> TuneSummary:
        tuning, plan, progress = self.profile.tuning, run.plan, run.progress
        # components passed in (stock MetaSchedule's) keep no stats: zeros
        builder_stats = run.builder.stats if isinstance(run.builder, WarmBuilder) else BuildStats()
        runner_stats = run.runner.stats if isinstance(run.runner, TrackerRunner) else MeasureStats()
        evolutionary = tuning.search_strategy == "evolutionary"
        return TuneSummary(
            edgetune_version=__version__,
            tvm_version=tvm.__version__,
            date=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            model=_model_info(run.model, self.components.tasks),
            profile=self.profile.name,
            target=run.target.export(),
            board=BoardInfo(run.board.label, f"{run.address.host}:{run.address.port}", self.key),
            history=run.history.url,
            trials=TrialCounts(
                budget=plan.budget,
                in_history_before=sum(plan.previous),
                this_run=progress.done,
                served_from_history=builder_stats.cached,
                measured_on_device=runner_stats.measured,
                failed=sum(t.failed for t in progress.tasks),
                build_timeouts=builder_stats.timed_out,
                default_schedules=run.defaults_measured,
                waited_for_others=run.claims.waited if run.claims is not None else 0,
            ),
            seconds=Seconds(
                tuning_wall=run.tune_seconds,
                device=runner_stats.device_seconds,
                upload=runner_stats.upload_seconds,
                build=builder_stats.build_seconds,
                session=runner_stats.session_seconds,
            ),
            search=SearchInfo(
                strategy=tuning.search_strategy,
                population_size=(tuning.population_size or auto_population(plan.per_iter)) if evolutionary else None,
                num_trials_per_iter=plan.per_iter,
                cost_model=tuning.cost_model,
                task_scheduler=run.scheduler_name,
                scheduler_awaits_measurements=run.awaits,
                scheduler_decision_seconds=run.scheduler.decision_seconds_ if isinstance(run.scheduler, SLOT_SCHEDULERS) else None,
            ),
            measurement=measurement_summary(self.profile, run.runner, run.board),
            measurement_reduction={
                "sampler": tuning.sampler,
                "early_stop": tuning.early_stop,
                "exploration": tuning.exploration,
                **run.search_report.to_dict(),
            }
            if run.search_report.tasks
            else None,
            warm_start={"scope": self.options.warm_start, **run.warm.to_dict()},
            suggested=with_applied(run.suggested, run.search_report, run.contexts),
            interrupted=run.interrupted,
            tasks=[
                t.to_result(_kept_default(run, i), run.task_caps.get(t.name), str(tvm_ffi.structural_hash(run.contexts[i].mod)),
                             run.library.exact.get(t.name) if run.library is not None else None)
                for i, t in enumerate(progress.tasks)
            ],
            curve=[point.to_dict() for point in progress.curve],
            graph=_graph_info(run.model, plan.inventory),
            schedules=run.library.to_dict() if run.library is not None else None,
        )


def run_tune(options: TuneOptions, sink: ProgressSink | None = None, components: Components | None = None) -> TuneSummary:
    """Tune ``options.model`` for ``options.profile``; return the run summary (also written to ``summary.json``)."""
    return TuningPipeline(options, sink, components).run()


def _task_flops(mod: Any) -> float:
    from tvm.s_tir.analysis import estimate_tir_flops

    try:
        return float(estimate_tir_flops(mod))
    except Exception:  # some fused functions have no countable loops
        return 0.0


def _mean_or_none(run_secs: Sequence[float] | None) -> float | None:
    return float(np.mean(run_secs)) if run_secs and not is_failed(run_secs) else None


def _kept_default(run: _Run, index: int) -> bool:
    """True when the task's best record is its default schedule: no tuned candidate beat the untuned code."""
    best = run.history.best_record(run.contexts[index].mod, run.target)
    return best is not None and is_default_trace(best.trace)


def _graph_info(model: LoadedModel | None, inventory: KernelInventory | None) -> dict[str, Any] | None:
    if model is None or model.graph is None:
        return None
    return {**model.graph.to_dict(), "kernels": inventory.to_dict() if inventory is not None else None}


def _model_info(model: LoadedModel | None, tasks: Sequence[tuple[str, Any, int]] | None) -> ModelInfo:
    if model is not None:
        return ModelInfo(model.source, model.name, model.sha256)
    names = ",".join(name for name, _mod, _weight in tasks or ())
    return ModelInfo("tasks", names, "")
