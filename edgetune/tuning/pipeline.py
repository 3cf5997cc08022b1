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

import dataclasses
import logging
import math
import os
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import tvm
import tvm.s_tir.meta_schedule as ms
import tvm_ffi

from ..common.run_dir import RunDir
from .._version import __version__
from ..board.baseline import RUNTIME_FORMATS, RUNTIME_NAMES, BaselineResult
from ..board.base import Board
from ..board.rpc_tracker import TrackerAddress
from ..builder.builder import BuildStats, WarmBuilder
from ..builder.intrinsics import load_tensor_intrinsics
from ..common.failure import is_failed
from ..errors import EdgetuneError, ModelError, TuningInterrupted
from ..history import open_history
from ..costmodel.warmstart import WarmStartReport, warm_start
from ..tasks.signature import operator_signature
from ..measure.awaiting import AwaitingRunner
from ..measure.runner import MeasureStats, TrackerRunner, timing_of
from ..profile import DeviceProfile
from ..provision.board import BoardChoice, choose_board, resolve_board
from ..search import make_cost_model, make_search_strategy, make_task_scheduler
from ..search.scheduler import SLOT_SCHEDULERS
from ..search.strategy import AdaptiveSearch, SearchReport, TaskLimits
from ..search.factory import auto_population
from ..search.default_schedule import replayed_candidate
from ..search.transfer import best_similar_records, cached_signature, transferred_candidates
from ..tasks import LoadedModel, load_model, prepare_for_tuning
from ..tasks.models import prepacks_weights
from ..tasks.graph import prepare_graph
from ..tasks.inventory import KernelInventory, kernel_inventory
from edgetune.common.choices import STOCK_SCHEDULERS

from .lagging import TaskStanding, choose_lagging, class_gflops, describe_lagging, reserve_for_lagging
from ..schedules.use import LibraryChoice, choose_library, default_unknown, library_candidates, transferred_library_candidates
from .baseline import is_default_trace, measure_candidates, measure_defaults
from .cache import CandidateCache
from .claims import CandidateClaims, lease_for
from .confirm import ConfirmedTask, mean_sec, measure_together, retime_limit, to_retime
from .callbacks import RecordAndReport
from .evaluate import evaluate_end_to_end
from .progress import ProgressSink, TaskProgress, TuneProgress, announce
from .settings import check_combined_settings, measurement_summary, suggested_settings, with_applied
from ..common.interrupts import StopRequested, StopSignal, stop_on_signals
from .summary import BoardInfo, ModelInfo, SearchInfo, Seconds, TrialCounts, TuneSummary, append_session, host_time

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
    # "off", "same", "auto" or "similar": cost model trained on history first (see costmodel/warmstart.py)
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
    """The tasks of this run and how the budget is split between them: fixed before the search starts.

    :meth:`TuningPipeline.plan_tasks` makes it; :meth:`TuningPipeline.open_session`
    adds what is measured before the search (each task's default schedule, the
    library's schedules); :meth:`TuningPipeline.tune` sets the caps of minor
    tasks in :attr:`limits` once their defaults are measured.
    """

    extracted: list[Any]
    previous: list[int]  # records already in the history, per task
    budget: int  # --trials
    remaining: int  # budget minus what the history holds
    per_iter: int  # candidates per batch
    inventory: KernelInventory | None = None  # the prepared graph's kernels by class (None: tasks passed in)
    #: per task, a cap on measured candidates (minor tasks) and how many were measured before the search
    limits: TaskLimits = field(default_factory=TaskLimits)
    #: whether the search reads :attr:`limits` (edgetune's adaptive search; stock MetaSchedule's does not)
    caps_enforced: bool = False
    defaults_to_measure: list[int] = field(default_factory=list)  # tasks whose default schedule the history lacks
    library_candidates: dict[int, list[Any]] = field(default_factory=dict)  # task index -> the library's schedules
    transferred: set[int] = field(default_factory=set)  # tasks whose library schedules are of another shape, adapted
    minor: set[str] = field(default_factory=set)  # tasks capped as minor (TuningPipeline.cap_minor_tasks)
    retime_limit: int = 0  # measurements allowed to time each task's fastest schedules again (tuning/confirm.py)

    @property
    def workloads(self) -> list[Any]:
        return [task.dispatched[0] for task in self.extracted]

    @property
    def search_budget(self) -> int:
        """What is left for the search once the default and library schedules are measured."""
        return self.remaining - len(self.defaults_to_measure) - sum(map(len, self.library_candidates.values()))


@dataclass
class TuneSession:
    """What one run has open: where it measures, the history, each task's context, and the components.

    Made by :meth:`TuningPipeline.open_session`; what the components hold is
    closed by the run's exit stack.
    """

    target: Any
    model: LoadedModel | None
    out_dir: Path
    board: Board
    address: TrackerAddress
    history: Any
    contexts: list[Any]
    weights: list[float]
    progress: TuneProgress
    cost_model: Any
    search_report: SearchReport  # what the search did per task: its output, read by the summary
    suggested: dict[str, Any] | None  # --suggested: what the history suggested, and its message
    library: LibraryChoice | None  # the schedule library this run starts from (tuning.schedules)
    builder: Any
    runner: Any
    claims: CandidateClaims | None  # leases on candidates in a shared history
    scheduler_name: str
    awaits: bool  # the task scheduler awaits each batch's measurements (the embedded board)


@dataclass
class TuneOutcome:
    """What :meth:`TuningPipeline.tune` did, for the summary."""

    warm: WarmStartReport = field(default_factory=WarmStartReport)
    defaults_measured: int = 0
    library_measured: int = 0
    scheduler: Any = None  # the task scheduler object (built or passed in); None when the search did not run
    interrupted: bool = False
    stop_reason: str | None = None  # why the run stopped by itself (every board gone)
    confirmed: list[ConfirmedTask] = field(default_factory=list)  # tasks whose fastest schedules were timed again
    seconds: float = 0.0


class TuningPipeline:
    """Builds every MetaSchedule component for one run from the profile and options; :meth:`run` runs it.

    The run's stages hand typed records on: :meth:`check_inputs` -> :meth:`plan_tasks`
    (a :class:`TaskPlan`) -> :meth:`open_session` (a :class:`TuneSession`) ->
    :meth:`tune` (a :class:`TuneOutcome`) -> :meth:`summarize` (a :class:`TuneSummary`).
    """

    def __init__(self, options: TuneOptions, sink: ProgressSink | None = None, components: Components | None = None) -> None:
        self.options = options
        self.profile = options.profile
        self.sink = sink or ProgressSink()
        self.components = components or Components()
        self.trials = options.trials if options.trials is not None else self.profile.tuning.trials
        self.key = options.key or self.profile.rpc.key
        self.stop = StopSignal()
        self._progress: TuneProgress | None = None  # the run's, once it exists (for board messages)
        self._library: LibraryChoice | None = None  # tuning.schedules, once loaded

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
            model = prepare_graph(model, tuning.conv_layout, tuning.graph_optimization, target, integer=tuning.integer)
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
        prepack = prepacks_weights(self.profile.tuning.prepack_weights, target)
        prepared = prepare_for_tuning(model.mod, target, prepack)
        extracted = [
            task
            for task in ms.relax_integration.extract_tasks(prepared, target)
            if not task.mod.attrs.get("tirx.is_scheduled", False)  # nothing to tune
        ]
        if prepack:
            extracted = self.unmark_library_tasks(extracted, target)
        if self.options.task_names is not None:
            wanted = list(self.options.task_names)
            names = [task.task_name for task in extracted]
            missing = [name for name in wanted if name not in names]
            if missing:
                raise EdgetuneError(f"task names must be among the model's tasks {names}, got {missing} instead")
            extracted = [task for task in extracted if task.task_name in wanted]
        return extracted, kernel_inventory(prepared, extracted, model.graph.unblocked if model.graph else ())

    def unmark_library_tasks(self, extracted: list[Any], target: Any) -> list[Any]:
        """With ``tuning.prepack_weights``: tasks whose workload the schedule library holds keep their weights as imported.

        Its schedules were tuned that way; replayed with the weights rewritten some MobileNetV2
        convolutions ran 2-7x slower (benchmarks/RESULTS.md, vs_onnxruntime_prepack). The
        build finds these tasks' records under the unmarked workload
        (:func:`edgetune.artifact.compile.prepacked_module`).
        """
        from ..tasks.models import LAYOUT_FREE, comparable_workload

        library = self.choose_library(target, None).library
        if library is None:
            return extracted
        kept = []
        for task in extracted:
            mod = task.dispatched[0]
            if LAYOUT_FREE in (mod["main"].attrs or {}) and library.find(mod) is not None:
                plain = comparable_workload(mod)
                task = ms.ExtractedTask(task.task_name, plain, target, [plain], int(task.weight))
            kept.append(task)
        return kept

    def plan_tasks(self, history: Any, target: Any, model: LoadedModel | None) -> TaskPlan:
        extracted, inventory = self._extract(target, model)
        previous = [history.count_records(workload=task.dispatched[0], target=target) for task in extracted]
        remaining = max(0, self.trials - sum(previous))
        # A budget smaller than one batch per task would starve the tasks
        # picked last (often the biggest convolutions): shrink the batches.
        per_iter = min(self.profile.tuning.num_trials_per_iter, max(1, remaining // max(1, len(extracted))))
        plan = TaskPlan(extracted, previous, self.trials, remaining, per_iter, inventory)
        per_task = self.profile.tuning.max_trials_per_task
        if per_task:
            # a per-task budget counts measured trials, what the history holds: a resumed run (a schedule
            # library's build) gives a task only what its budget has left, not the whole budget again. The
            # search's own per-task limit counts proposed candidates, of which K-means sampling measures
            # some, so it is not the budget (a resumed build used to deepen every task it resumed)
            for task, held in zip(extracted, previous):
                plan.limits.set_cap(task.task_name, max(0, per_task - held))
        return plan

    # -- search -----------------------------------------------------------------
    def per_task_proposals(self, plan: TaskPlan) -> int:
        """MetaSchedule's per-task limit: proposed candidates, not measured ones.

        With edgetune's search, ``tuning.max_trials_per_task`` is a cap on measured trials
        (:meth:`plan_tasks`), so the proposals are bounded only by the run; stock
        MetaSchedule's search measures what it proposes and takes the budget itself.
        """
        per_task = self.profile.tuning.max_trials_per_task
        if per_task and not plan.caps_enforced:
            return per_task
        return plan.remaining

    def make_cost_model(self) -> Any:
        if self.components.cost_model is not None:
            return self.components.cost_model
        tuning = self.profile.tuning
        return make_cost_model(tuning.cost_model, seed=tuning.seed, num_cores=os.cpu_count() or 1,
                               model_file=tuning.cost_model_file, meta_handoff_samples=tuning.meta_handoff_samples)

    def make_search_strategy(
        self, plan: TaskPlan, cost_model: Any, report: SearchReport, per_type: dict[tuple[str, ...], dict[str, Any]] | None,
        seeds: Callable[[Any, int], list[Any]] | None,
    ) -> Any:
        if self.components.search_strategy is not None:
            return self.components.search_strategy
        tuning = self.profile.tuning
        return make_search_strategy(
            tuning.search_strategy,
            num_trials_per_iter=plan.per_iter,
            population_size=tuning.population_size,
            tuning=tuning,
            surrogate=cost_model,
            expected_trials_per_task=math.ceil(plan.remaining / max(1, len(plan.extracted))),
            limits=plan.limits,
            seeds=seeds if tuning.transfer == "similar" else None,
            suggested=per_type,
            report=report,
        )

    @staticmethod
    def make_seed_provider(history: Any, target: Any, library: LibraryChoice | None) -> Callable[[Any, int], list[Any]]:
        """Candidates for a task's first batch from the best records of similar workloads in the history."""

        def seeds(context: Any, limit: int) -> list[Any]:
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

    def make_contexts(self, plan: TaskPlan, strategy: Any) -> tuple[list[Any], list[float]]:
        """MetaSchedule's TuneContexts of the plan's tasks, searched by ``strategy``, and their weights."""
        # MetaSchedule's per-task logger config names every handler of its logger: one without a
        # name (pytest's capture, a notebook's) makes it raise, so those sit out while it runs
        ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
        unnamed = [h for h in ms_logger.handlers if h.get_name() is None]
        for handler in unnamed:
            ms_logger.removeHandler(handler)
        try:
            contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
                plan.extracted,
                work_dir=str(RunDir(self.options.out_dir).build_logs),
                strategy=strategy,
                num_threads=os.cpu_count() or 1,
                seed=self.profile.tuning.seed,
            )
        finally:
            for handler in unnamed:
                ms_logger.addHandler(handler)
        return list(contexts), [float(w) for w in weights]

    def make_task_scheduler(self, awaits: bool) -> Any:
        if self.components.task_scheduler is not None:
            return self.components.task_scheduler
        scheduler = self.options.scheduler or self.profile.tuning.task_scheduler
        return make_task_scheduler(
            scheduler, peak_gflops=self.profile.device.peak_gflops, seed=self.profile.tuning.seed, wait_for_results=awaits
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

    def make_recorder(self, session: TuneSession) -> RecordAndReport:
        """edgetune's record of every batch: MetaSchedule's first measure callback, also called for batches measured outside the search."""
        return RecordAndReport(
            session.history, session.contexts, session.progress, self.sink, self.stop.event,
            runner=session.runner, measurement_log=RunDir(session.out_dir).measurements, claims=session.claims,
        )

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
            history = open_history(
                self.options.db or str(RunDir(out_dir).history), board_id=self.key, timing=timing_of(self.profile)
            )
            stack.callback(history.close)
            # MetaSchedule's console handler takes the level its logger has right
            # now: keep its per-round tables in the log files, off the terminal.
            logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
            plan = self.plan_tasks(history, target, model)
            session = self.open_session(stack, plan, target, model, out_dir, board, address, history)
            outcome = self.tune(plan, session) if plan.remaining > 0 and session.contexts else TuneOutcome()
            if isinstance(session.runner, TrackerRunner):
                session.runner.wait_idle()
            summary = self.summarize(plan, session, outcome)
            if outcome.interrupted:
                summary.write(out_dir)
                append_session(out_dir, summary)
                reason = outcome.stop_reason
                raise TuningInterrupted(
                    ("stopped: " + reason.split(": ", 1)[-1] + "; " if reason else "interrupted: ")
                    + f"{session.progress.done} measurements of this run are kept in {history.url}; "
                    f"run the same command again to resume",
                    signum=self.stop.signum,
                )
            if isinstance(session.builder, WarmBuilder):
                session.builder.close()  # its artifacts go; its workers wait idle for this process's next run
            if self.options.evaluate:
                session.progress.phase = "compiling and measuring the whole model on the device"
                self.sink.on_phase(session.progress)
                summary.end_to_end = evaluate_end_to_end(model, self.profile, target, history, address, out_dir)
                summary.end_to_end.tuned_kernels_ms = summary.kernels_ms()
                runtimes = [name for name in self.profile.tuning.baseline.split(",") if name != "none"]
                summary.end_to_end.baselines = [
                    self.time_baseline(session, model, summary.end_to_end.artifact, runtime).to_dict() for runtime in runtimes
                ]
            summary.write(out_dir)
            append_session(out_dir, summary)
            return summary

    def open_session(
        self, stack: ExitStack, plan: TaskPlan, target: Any, model: LoadedModel | None, out_dir: Path,
        board: Board, address: TrackerAddress, history: Any,
    ) -> TuneSession:
        """Contexts, progress and the components that build and measure; adds to ``plan`` what is measured before the search."""
        library = self.choose_library(target, plan)
        cost_model = self.make_cost_model()
        report = SearchReport()
        suggested, per_type = self.read_suggested(history, target, plan)
        strategy = self.make_search_strategy(plan, cost_model, report, per_type, self.make_seed_provider(history, target, library))
        plan.caps_enforced = isinstance(strategy, AdaptiveSearch)
        contexts, weights = self.make_contexts(plan, strategy)
        progress = _progress_of(plan, contexts, weights, history, target)
        self._progress = progress
        self.plan_library_schedules(plan, contexts, library, target)
        cache = CandidateCache()
        # under two trials per task, a task starting from the library's schedule of another shape spends its one
        # trial on it, not on its untuned default (a convolution's untuned loops run 10-100x slower); with more,
        # it measures both, so a small dense layer whose untuned loops beat any tiling keeps them
        short = plan.remaining < 2 * len(contexts)
        for ctx, task in zip(contexts, progress.tasks):
            cache.add_history(history, ctx.mod, target)
            stored = cache.default_run_secs(ctx.mod)
            if stored is not None:
                task.default_sec = _mean_or_none(stored)
            elif task.index in plan.transferred and short:
                pass  # the library's schedule of the nearest shape is measured instead
            elif plan.previous[task.index] > 0 and library.library is not None:
                pass  # resumed: a task the last run started from the library (no default then) goes on from its records
            elif (task.index in plan.library_candidates and task.index not in plan.transferred
                  and not default_unknown(ctx, library.library)):
                pass  # the library's schedule is measured instead: it beat the default, or is the default
            elif self.profile.tuning.default_schedule and str(target.kind.name) == "llvm":
                # off: the search starts at once. GPU targets' untuned code is TVM's default GPU
                # schedule (dlight), not the unscheduled function, so there is no trace to measure.
                plan.defaults_to_measure.append(task.index)
        claims = self.make_claims(history, target, cache)
        if claims is not None:
            stack.callback(claims.close)  # before history.close: released on every exit
        builder = self.make_builder(cache, claims)
        if isinstance(builder, WarmBuilder):  # a builder passed in (stock MetaSchedule's) has no workers
            stack.callback(builder.close)
        runner = self.make_runner(address, cache, board.measure_hooks())
        if isinstance(runner, TrackerRunner):
            stack.callback(runner.close)
        return TuneSession(
            target=target, model=model, out_dir=out_dir, board=board, address=address, history=history,
            contexts=contexts, weights=weights, progress=progress, cost_model=cost_model, search_report=report,
            suggested=suggested, library=library, builder=builder, runner=runner, claims=claims,
            scheduler_name=self.options.scheduler or self.profile.tuning.task_scheduler,
            # The embedded board is this host's CPU: a batch timed while the next one is
            # searched and built comes out slow, so no scheduler overlaps them there
            # (edgetune's wait themselves, MetaSchedule's through AwaitingRunner).
            awaits=board.awaits_measurements,
        )

    def read_suggested(self, history: Any, target: Any, plan: TaskPlan) -> tuple[dict[str, Any] | None, Any]:
        """``--suggested``: settings per task type from the history (None, None without it)."""
        if not (self.options.suggested and plan.remaining > 0 and plan.extracted):
            return None, None
        announce(self.sink, plan.remaining, "reading suggested settings per task type from the history")
        suggested, per_type = suggested_settings(history, target, self.profile, plan.workloads, plan.per_iter)
        announce(self.sink, plan.remaining, suggested["message"])
        return suggested, per_type

    def tune(self, plan: TaskPlan, session: TuneSession) -> TuneOutcome:
        """Warm start, then MetaSchedule's task scheduler over edgetune's components until the budget is spent."""
        progress, outcome = session.progress, TuneOutcome()
        progress.phase = "starting build workers"
        self.sink.on_phase(progress)
        if isinstance(session.builder, WarmBuilder):
            session.builder.start()
        progress.phase = "tuning"
        progress.started = time.monotonic()
        self.sink.on_phase(progress)
        runner = self.components.wrap_runner(session.runner) if self.components.wrap_runner else session.runner
        if session.awaits and session.scheduler_name in STOCK_SCHEDULERS and not self.components.wrap_runner:
            # MetaSchedule's schedulers would time this batch while the host builds the next one
            runner = AwaitingRunner(runner)
        recorder = self.make_recorder(session)
        started = time.monotonic()
        try:
            with stop_on_signals(self.stop):
                outcome.defaults_measured = self.measure_default_schedules(plan, session, recorder)
                self.cap_minor_tasks(plan, progress)
                if self.options.warm_start != "off":
                    progress.phase = "training the cost model on the history (warm start)"
                    self.sink.on_phase(progress)
                    outcome.warm = warm_start(
                        session.cost_model, [ctx.mod for ctx in session.contexts], session.history, session.target,
                        board_id=self.key, scope=self.options.warm_start,
                    )
                    progress.phase = "tuning"
                    self.sink.on_phase(progress)
                if self.stop.event.is_set():
                    raise StopRequested("stop requested during the warm start")
                outcome.library_measured = self.measure_library_schedules(plan, session, recorder)
                outcome.defaults_measured += self.measure_failed_library_defaults(plan, session, recorder)
                if plan.search_budget <= 0:
                    return outcome
                self.plan_confirmation(plan)
                plan.limits.set_search_budget(plan.search_budget)
                self.search_lagging_tasks_first(plan, session)
                self.size_batches(plan, session)
                outcome.scheduler = self.make_task_scheduler(session.awaits)
                ms.tune_tasks(
                    tasks=session.contexts,
                    task_weights=session.weights,
                    work_dir=str(RunDir(session.out_dir).build_logs),
                    max_trials_global=plan.search_budget,
                    max_trials_per_task=self.per_task_proposals(plan),
                    num_trials_per_iter=plan.per_iter,
                    builder=session.builder,
                    runner=runner,
                    # this target's records only: another board's latencies are on another scale, and its fastest
                    # records would seed this search first (warm start and transfer weigh other boards themselves)
                    database=session.history.for_target(session.target),
                    cost_model=session.cost_model,
                    measure_callbacks=[recorder, ms.measure_callback.UpdateCostModel(), *self.components.measure_callbacks],
                    task_scheduler=outcome.scheduler,
                )
                if self.stop.event.is_set():
                    # MetaSchedule's stock schedulers catch a callback's StopRequested, end
                    # that task and return normally once every task has ended
                    outcome.interrupted = True
                else:
                    outcome.confirmed = self.confirm_fastest(plan, session)
        except BaseException:
            # whatever TVM turned our StopRequested into on its way back
            if not self.stop.event.is_set():
                raise
            outcome.interrupted = True
        finally:
            outcome.seconds = time.monotonic() - started
            outcome.stop_reason = recorder.stop_reason
        return outcome

    def size_batches(self, plan: TaskPlan, session: TuneSession) -> None:
        """Batches small enough that every task's first batch fits in what the search has left.

        MetaSchedule's first round gives each task one batch, in task order. Sized from the run's budget
        (:meth:`plan_tasks`), before the default and library schedules took their trials, the batches of a
        short run (2 per task: one left for the search) went to the tasks picked first, two each, and the
        last third of the tasks (SqueezeNet's costliest convolutions among them) got no search trial.
        """
        names = [str(ctx.task_name) for ctx in session.contexts]
        if plan.caps_enforced:  # a task whose cap its defaults reached takes no batch
            names = [n for n in names if (cap := plan.limits.cap(n)) is None or cap > plan.limits.measured_before(n)]
        plan.per_iter = min(plan.per_iter, max(1, plan.search_budget // max(1, len(names))))

    def cap_minor_tasks(self, plan: TaskPlan, progress: TuneProgress) -> None:
        """Budget where it pays: a task that cannot matter to the tuned model gets few trials.

        Reshapes, concatenations and small pools cannot gain much; left alone,
        each takes a full batch from the heavy convolutions in the scheduler's
        first round. "Matter" is judged against the model as it may be once
        tuned, not as it is untuned (where naive convolutions dwarf
        everything): each task is expected to reach half the profile's peak
        GFLOPS, or to stay at its untuned latency if that is lower, and a task
        whose untuned latency is under ``minor_task_share`` of that expected
        model is minor. A task whose default is not measured (it starts from
        the library's schedule) counts at half the peak. The caps go into ``plan.limits``, which the search reads;
        a minor task's cap counts its records in the history, so a resumed run
        adds nothing to a minor task that has its trials.
        """
        tuning, peak = self.profile.tuning, self.profile.device.peak_gflops
        tasks = [t for t in progress.tasks if t.default_sec is not None]
        if len(tasks) < 2:
            return

        def expected_sec(task: TaskProgress) -> float:
            if not peak or not task.flops:
                return task.default_sec
            return min(task.default_sec, task.flops / (0.5 * peak * 1e9))

        model = sum(t.weight * expected_sec(t) for t in tasks)
        if peak:  # tasks measured from the library instead of their default (compute-bound ones) count as tuned
            model += sum(t.weight * t.flops / (0.5 * peak * 1e9) for t in progress.tasks if t.default_sec is None and t.flops)
        for task in tasks:
            if model and task.weight * task.default_sec < tuning.minor_task_share * model:
                plan.limits.set_cap(task.name, max(0, tuning.minor_task_trials - task.previous_trials))
                plan.minor.add(task.name)

    def plan_confirmation(self, plan: TaskPlan) -> None:
        """How many measurements may time each task's fastest schedules again after the search (tuning/confirm.py).

        Tasks capped as minor are left out: their pick cannot move the model.
        """
        tuning = self.profile.tuning
        tasks = [task for task in plan.extracted if task.task_name not in plan.minor]
        plan.retime_limit = retime_limit(len(tasks), tuning.confirm_best, plan.search_budget)

    def confirm_fastest(self, plan: TaskPlan, session: TuneSession) -> list[ConfirmedTask]:
        """Each task's fastest schedules timed again side by side, the new times stored; the biggest tasks first.

        The model is then built from measurements that were not selected for being fast
        (the winner's curse, :mod:`edgetune.tuning.confirm`).
        """
        left, tuning, progress = plan.retime_limit, self.profile.tuning, session.progress
        if left <= 0:
            return []
        progress.phase = "timing each task's fastest schedules again, side by side"
        self.sink.on_phase(progress)
        order = sorted(
            (task for task in progress.tasks if task.name not in plan.minor and task.best_sec is not None),
            key=lambda task: -task.weight * task.best_sec,
        )
        confirmed = []
        for task in order:
            if left < 2 or self.stop.event.is_set():
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
            self.sink.on_batch(progress, task)
            confirmed.append(ConfirmedTask(
                task.name, timed, before_sec * 1e6, task.best_sec * 1e6, bool(after) and after[0][0] != before_key,
            ))
        return confirmed

    def choose_library(self, target: Any, plan: TaskPlan | None) -> LibraryChoice:
        """The schedule library (tuning.schedules), loaded once per run and said once (with ``plan``)."""
        if self._library is None:
            self._library = choose_library(self.profile.tuning.schedules, target)
        library = self._library
        if plan is not None and library.message:
            announce(self.sink, plan.remaining, library.message)
        return library

    def plan_library_schedules(self, plan: TaskPlan, contexts: list[Any], library: LibraryChoice, target: Any) -> None:
        """Per task new to the history, the library's schedules of its exact workload, measured first.

        A compute-bound task the library lacks gets the library's schedule of the nearest shape of its
        operator instead (with ``tuning.transfer`` on), measured in place of its untuned default.
        """
        if library.library is None or plan.remaining <= 0:
            return
        budget = plan.remaining
        transfer = self.profile.tuning.transfer != "off"
        for index, ctx in enumerate(contexts):
            if plan.previous[index] == 0 and budget > 0:  # a task the history holds resumes from its own records
                found = library_candidates(ctx, library.library, min(self.profile.tuning.library_schedules, budget))
                if not found and transfer:
                    found = transferred_library_candidates(ctx, library.library, target, 1)
                    if found:
                        plan.transferred.add(index)
                if found:
                    plan.library_candidates[index] = found
                    budget -= len(found)

    def search_lagging_tasks_first(self, plan: TaskPlan, session: TuneSession) -> None:
        """Search trials kept for the tasks whose library schedule runs far below its operator class (tuning/lagging.py).

        Only with edgetune's search, which reads the reservations (``plan.caps_enforced``).
        """
        tuning, library, progress = self.profile.tuning, session.library, session.progress
        if not plan.caps_enforced or library is None or library.library is None or tuning.lagging_trials <= 0:
            return
        model_sec = sum(t.weight * sec for t in progress.tasks if (sec := t.best_sec or t.default_sec))
        standings = []
        for task, ctx in zip(progress.tasks, session.contexts):
            if task.index not in plan.library_candidates or task.best_gflops is None:
                continue  # not inherited from the library, or nothing measured
            if plan.inventory is not None and plan.inventory.kernels[task.index].klass != "compute":
                continue
            standings.append(TaskStanding(task.name, task.weight * task.best_sec, task.best_gflops,
                                          class_gflops(library.library, ctx.mod)))
        lagging = choose_lagging(standings, model_sec, ratio=tuning.lagging_ratio, share=tuning.lagging_share)
        searched_first = reserve_for_lagging(lagging, plan.limits, model_sec, tuning.lagging_trials)
        library.searched_first = [task.to_dict() for task in searched_first]
        if searched_first:
            announce(self.sink, plan.remaining, describe_lagging(library.searched_first))

    def measure_library_schedules(self, plan: TaskPlan, session: TuneSession, recorder: RecordAndReport) -> int:
        """Each covered task's library schedules, measured on the board as its first trials and stored; how many."""
        if not plan.library_candidates:
            return 0
        progress, library = session.progress, session.library
        assert library is not None
        progress.phase = f"measuring the schedule library's schedules of {len(plan.library_candidates)} tasks"
        self.sink.on_phase(progress)
        for rank in range(max(map(len, plan.library_candidates.values()))):  # one batch per rank: the best first
            by_task = {i: found[rank] for i, found in plan.library_candidates.items() if rank < len(found)}
            measured = measure_candidates(session.contexts, by_task, session.builder, session.runner)
            with _record_all_then_stop() as record:
                for index, (candidate, built, ran) in measured.items():
                    name = progress.tasks[index].name
                    plan.limits.add_measured_before(name)
                    if built.error_msg is None and ran.error_msg is None and ran.run_secs and not is_failed(ran.run_secs):
                        latency_us = float(np.mean([float(x) for x in ran.run_secs])) * 1e6
                        kept = library.transferred if index in plan.transferred else library.exact
                        kept[name] = min(latency_us, kept.get(name, latency_us))
                    record(recorder, index, [candidate], [built], [ran])
        progress.phase = "tuning"
        self.sink.on_phase(progress)
        return sum(map(len, plan.library_candidates.values()))

    def measure_failed_library_defaults(self, plan: TaskPlan, session: TuneSession, recorder: RecordAndReport) -> int:
        """The untuned default of each task whose library schedules all failed to build or run; how many.

        They took the place of the default (a schedule of another shape under two trials per task, or the
        exact workload's where the library says it beats the default): without a record the model would get
        the untuned code, unmeasured and not reported as kept. Its trial comes from the search's where it has
        any, else it is one trial over the budget per such task.
        """
        progress, library = session.progress, session.library
        failed = [
            i for i in sorted(plan.library_candidates)
            if progress.tasks[i].name not in library.transferred and progress.tasks[i].name not in library.exact
            and i not in plan.defaults_to_measure and progress.tasks[i].default_sec is None
        ]
        if not failed or not self.profile.tuning.default_schedule or str(session.target.kind.name) != "llvm":
            return 0
        announce(self.sink, plan.remaining, f"the library's schedules failed to build or run for {len(failed)} task(s): "
                 "measuring their untuned defaults instead")
        plan.defaults_to_measure.extend(failed)
        return self.measure_default_schedules(plan, session, recorder, failed)

    def measure_default_schedules(
        self, plan: TaskPlan, session: TuneSession, recorder: RecordAndReport, indices: list[int] | None = None,
    ) -> int:
        """Each task's untuned code, measured once and stored: the search must beat it to replace it; how many.

        ``indices``: these tasks only (default: all of ``plan.defaults_to_measure``).
        """
        indices = plan.defaults_to_measure if indices is None else indices
        if not indices:
            return 0
        progress = session.progress
        progress.phase = "measuring each task's default schedule (the untuned baseline)"
        self.sink.on_phase(progress)
        measured = measure_defaults(session.contexts, indices, session.builder, session.runner)
        with _record_all_then_stop() as record:
            for index, (candidate, built, ran) in measured.items():
                plan.limits.add_measured_before(progress.tasks[index].name)
                ok = built.error_msg is None and ran.error_msg is None and ran.run_secs
                progress.tasks[index].default_sec = _mean_or_none([float(x) for x in ran.run_secs]) if ok else None
                record(recorder, index, [candidate], [built], [ran])
        progress.phase = "tuning"
        self.sink.on_phase(progress)
        return len(measured)

    def time_baseline(self, session: TuneSession, model: LoadedModel, artifact: str, runtime: str) -> BaselineResult:
        """One runtime of tuning.baseline: the same model file beside ``model.so``, on the board; never fails the tune."""
        session.progress.phase = f"timing {RUNTIME_NAMES.get(runtime, runtime)} beside the tuned model on {session.board.label}"
        self.sink.on_phase(session.progress)
        try:
            model_bytes = model.bytes_for(RUNTIME_FORMATS[runtime])
        except ModelError as error:
            return BaselineResult(runtime, error=str(error))
        return session.board.time_baseline(
            runtime, artifact, model_bytes, model.random_inputs(seed=0), self.profile.device.num_threads,
            given_as=model.format,
        )

    def summarize(self, plan: TaskPlan, session: TuneSession, outcome: TuneOutcome) -> TuneSummary:
        tuning, progress = self.profile.tuning, session.progress
        # components passed in (stock MetaSchedule's) keep no stats: zeros
        builder_stats = session.builder.stats if isinstance(session.builder, WarmBuilder) else BuildStats()
        runner_stats = session.runner.stats if isinstance(session.runner, TrackerRunner) else MeasureStats()
        evolutionary = tuning.search_strategy == "evolutionary"
        report, library = session.search_report, session.library
        retimed = {task.name: task.to_dict() for task in outcome.confirmed}
        return TuneSummary(
            edgetune_version=__version__,
            tvm_version=tvm.__version__,
            date=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            model=_model_info(session.model, self.components.tasks),
            profile=self.profile.name,
            target=session.target.export(),
            board=BoardInfo(session.board.label, f"{session.address.host}:{session.address.port}", self.key),
            history=session.history.url,
            trials=TrialCounts(
                budget=plan.budget,
                in_history_before=sum(plan.previous),
                this_run=progress.done,
                served_from_history=builder_stats.cached,
                measured_on_device=runner_stats.measured - sum(task.retimed for task in outcome.confirmed),  # trials only
                failed=sum(t.failed for t in progress.tasks),
                build_timeouts=builder_stats.timed_out,
                default_schedules=outcome.defaults_measured,
                library_schedules=outcome.library_measured,
                waited_for_others=session.claims.waited if session.claims is not None else 0,
                retimed=sum(task.retimed for task in outcome.confirmed),
            ),
            seconds=Seconds(
                tuning_wall=outcome.seconds,
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
                task_scheduler=session.scheduler_name,
                scheduler_awaits_measurements=session.awaits,
                scheduler_decision_seconds=(
                    outcome.scheduler.decision_seconds_ if isinstance(outcome.scheduler, SLOT_SCHEDULERS) else None
                ),
            ),
            measurement=measurement_summary(self.profile, session.runner, session.board),
            measurement_reduction={
                "sampler": tuning.sampler,
                "early_stop": tuning.early_stop,
                "exploration": tuning.exploration,
                **report.to_dict(),
            }
            if report.tasks
            else None,
            warm_start={"scope": self.options.warm_start, **outcome.warm.to_dict()},
            suggested=with_applied(session.suggested, report, session.contexts),
            interrupted=outcome.interrupted,
            tasks=[
                t.to_result(_kept_default(session, i), plan.limits.cap(t.name), str(tvm_ffi.structural_hash(session.contexts[i].mod)),
                             library.exact.get(t.name) if library is not None else None, retimed.get(t.name),
                             library.transferred.get(t.name) if library is not None else None)
                for i, t in enumerate(progress.tasks)
            ],
            curve=[point.to_dict() for point in progress.curve],
            graph=_graph_info(session.model, plan.inventory),
            schedules=library.to_dict() if library is not None else None,
            host_time=dataclasses.asdict(host_time(
                outcome.seconds, report.seconds, session.cost_model, builder_stats.build_seconds,
                runner_stats.device_seconds + runner_stats.upload_seconds + runner_stats.session_seconds,
                runner_stats.measured,
            )),
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


@contextmanager
def _record_all_then_stop() -> Iterator[Callable[..., None]]:
    """Record every result of a batch measured outside the scheduler, then stop if a stop was asked for.

    The recorder raises :class:`StopRequested` after the first task's record once a stop (Ctrl-C, a build's time
    limit) is set; the rest of the batch, measured on the board already, would be lost.
    """
    stop: list[StopRequested] = []

    def record(recorder: RecordAndReport, *args: Any) -> None:
        try:
            recorder.record(*args)
        except StopRequested as requested:
            stop.append(requested)

    yield record
    if stop:
        raise stop[0]


def _mean_or_none(run_secs: Sequence[float] | None) -> float | None:
    return float(np.mean(run_secs)) if run_secs and not is_failed(run_secs) else None


def _kept_default(session: TuneSession, index: int) -> bool:
    """True when the task's best record is its default schedule: no tuned candidate beat the untuned code."""
    best = session.history.best_record(session.contexts[index].mod, session.target)
    return best is not None and is_default_trace(best.trace)


def _progress_of(plan: TaskPlan, contexts: list[Any], weights: list[float], history: Any, target: Any) -> TuneProgress:
    """The run's progress record: each task with its weight, FLOPs, history and best so far."""
    tasks = [
        TaskProgress(index=i, name=ctx.task_name, weight=w, flops=_task_flops(ctx.mod), previous_trials=n)
        for i, (ctx, w, n) in enumerate(zip(contexts, weights, plan.previous))
    ]
    for ctx, task in zip(contexts, tasks):
        best = history.best_record(ctx.mod, target)
        if best is not None:
            task.best_sec = float(np.mean([float(x) for x in best.run_secs]))
    return TuneProgress(budget=plan.remaining, tasks=tasks)


def _graph_info(model: LoadedModel | None, inventory: KernelInventory | None) -> dict[str, Any] | None:
    if model is None or model.graph is None:
        return None
    return {**model.graph.to_dict(), "kernels": inventory.to_dict() if inventory is not None else None}


def _model_info(model: LoadedModel | None, tasks: Sequence[tuple[str, Any, int]] | None) -> ModelInfo:
    if model is not None:
        return ModelInfo(model.source, model.name, model.sha256)
    names = ",".join(name for name, _mod, _weight in tasks or ())
    return ModelInfo("tasks", names, "")
