"""The run's plan: its tasks and budget, what is measured before the search, and how the search is sized.

Each stage returns a new frozen record; none writes into an earlier one:
:func:`plan_tasks` -> :class:`TaskPlan` (fixed before anything is measured),
:func:`plan_first_measurements` -> :class:`FirstMeasurements` (each task's
default schedule, the library's schedules), :func:`plan_search` ->
:class:`SearchPlan` (the search's budget, batch size and retiming, once the
first measurements are in). The per-task caps the search reads are live state
(:class:`~edgetune.search.limits.TaskLimits`, in the run's session), not the plan.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping

import tvm.s_tir.meta_schedule as ms
from tvm.s_tir.meta_schedule import ExtractedTask, TuneContext
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate
from tvm.ir import IRModule
from tvm.target import Target

from ..builder.intrinsics import load_tensor_intrinsics
from ..errors import EdgetuneError
from ..schedules.use import LibraryChoice, default_unknown, library_candidates, transferred_library_candidates
from ..search.limits import TaskLimits
from ..tasks import LoadedModel, prepare_for_tuning
from ..tasks.inventory import KernelInventory, kernel_inventory
from .baseline import mean_or_none
from .cache import CandidateCache
from .components import TuningHistory
from .confirm import retime_limit
from .inputs import RunSettings
from .progress import TaskProgress, TuneProgress


@dataclass(frozen=True)
class TaskPlan:
    """The tasks of this run and how the budget is split between them: fixed before the search starts."""

    extracted: tuple[ExtractedTask, ...]
    previous: tuple[int, ...]  # records already in the history, per task
    budget: int  # --trials
    remaining: int  # budget minus what the history holds
    per_iter: int  # candidates per batch, before the search is sized (:class:`SearchPlan`)
    inventory: KernelInventory | None = None  # the prepared graph's kernels by class (None: tasks passed in)
    #: task name -> its cap on measured trials (``tuning.max_trials_per_task`` less what the history holds)
    caps: Mapping[str, int] = field(default_factory=dict)

    @property
    def workloads(self) -> list[IRModule]:
        return [task.dispatched[0] for task in self.extracted]

    def new_limits(self) -> TaskLimits:
        """The live per-task limits the search reads, starting from this plan's caps."""
        limits = TaskLimits()
        for name, cap in self.caps.items():
            limits.set_cap(name, cap)
        return limits


@dataclass(frozen=True)
class FirstMeasurements:
    """What is measured before the search: each task's untuned default and the schedule library's schedules."""

    defaults: tuple[int, ...] = ()  # tasks whose default schedule the history lacks
    library: Mapping[int, tuple[MeasureCandidate, ...]] = field(default_factory=dict)  # task index -> the library's schedules
    transferred: frozenset[int] = frozenset()  # tasks whose library schedules are of another shape, adapted

    def with_defaults(self, indices: list[int]) -> FirstMeasurements:
        """This record with the defaults of ``indices`` measured too (their library schedules all failed)."""
        return dataclasses.replace(self, defaults=self.defaults + tuple(indices))

    def search_budget(self, plan: TaskPlan) -> int:
        """What is left for the search once the default and library schedules are measured."""
        return plan.remaining - len(self.defaults) - sum(map(len, self.library.values()))


@dataclass(frozen=True)
class SearchPlan:
    """The search, sized once the first measurements are in."""

    budget: int  # trials the search may measure
    per_iter: int  # candidates per batch: every task's first batch fits in ``budget``
    minor: frozenset[str]  # tasks capped as minor (:func:`cap_minor_tasks`)
    retime_limit: int  # measurements allowed to time each task's fastest schedules again (tuning/confirm.py)


def extract_tasks(run: RunSettings, target: Target, model: LoadedModel | None) -> tuple[list[ExtractedTask], KernelInventory | None]:
    """The model's tunable tasks (or the ones passed in), and the inventory of the prepared graph's kernels (None for tasks passed in)."""
    components = run.components
    if components.load_intrinsics:
        load_tensor_intrinsics(target)
    if components.tasks is not None:
        return [ms.ExtractedTask(name, mod, target, [mod], int(weight)) for name, mod, weight in components.tasks], None
    assert model is not None
    prepack = model.recipe.prepack_weights
    prepared = prepare_for_tuning(model.mod, target, prepack)
    extracted = [
        task
        for task in ms.relax_integration.extract_tasks(prepared, target)
        if not task.mod.attrs.get("tirx.is_scheduled", False)  # nothing to tune
    ]
    if prepack:
        extracted = unmark_library_tasks(extracted, target, run.library(target))
    if run.options.task_names is not None:
        wanted = list(run.options.task_names)
        names = [task.task_name for task in extracted]
        missing = [name for name in wanted if name not in names]
        if missing:
            raise EdgetuneError(f"task names must be among the model's tasks {names}, got {missing} instead")
        extracted = [task for task in extracted if task.task_name in wanted]
    return extracted, kernel_inventory(prepared, extracted, model.graph.unblocked if model.graph else ())


def unmark_library_tasks(extracted: list[ExtractedTask], target: Target, choice: LibraryChoice) -> list[ExtractedTask]:
    """With ``tuning.prepack_weights``: tasks whose workload the schedule library holds keep their weights as imported.

    Its schedules were tuned that way; replayed with the weights rewritten some MobileNetV2
    convolutions ran 2-7x slower (benchmarks/RESULTS.md, vs_onnxruntime_prepack). The
    build finds these tasks' records under the unmarked workload
    (:func:`edgetune.artifact.compile.prepacked_module`).
    """
    from ..tasks.models import LAYOUT_FREE, comparable_workload

    library = choice.library
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


def plan_tasks(run: RunSettings, history: TuningHistory, target: Target, model: LoadedModel | None) -> TaskPlan:
    """The run's tasks, what the history holds of each, and the budget left."""
    extracted, inventory = extract_tasks(run, target, model)
    previous = tuple(history.count_records(workload=task.dispatched[0], target=target) for task in extracted)
    remaining = max(0, run.trials - sum(previous))
    tuning = run.profile.tuning
    # A budget smaller than one batch per task would starve the tasks
    # picked last (often the biggest convolutions): shrink the batches.
    per_iter = min(tuning.num_trials_per_iter, max(1, remaining // max(1, len(extracted))))
    per_task = tuning.max_trials_per_task
    # a per-task budget counts measured trials, what the history holds: a resumed run (a schedule
    # library's build) gives a task only what its budget has left, not the whole budget again. The
    # search's own per-task limit counts proposed candidates, of which K-means sampling measures
    # some, so it is not the budget (a resumed build used to deepen every task it resumed)
    caps = {task.task_name: max(0, per_task - held) for task, held in zip(extracted, previous)} if per_task else {}
    return TaskPlan(tuple(extracted), previous, run.trials, remaining, per_iter, inventory, caps)


def plan_library_schedules(
    run: RunSettings, plan: TaskPlan, contexts: list[TuneContext], library: LibraryChoice, target: Target,
) -> tuple[dict[int, tuple[MeasureCandidate, ...]], frozenset[int]]:
    """Per task new to the history, the library's schedules of its exact workload, measured first; and the transferred tasks.

    A compute-bound task the library lacks gets the library's schedule of the nearest shape of its
    operator instead (with ``tuning.transfer`` on), measured in place of its untuned default. With two
    trials per task or more, a memory-bound one gets it too, measured beside its default.
    """
    chosen: dict[int, tuple[MeasureCandidate, ...]] = {}
    transferred: set[int] = set()
    if library.library is None or plan.remaining <= 0:
        return chosen, frozenset()
    tuning = run.profile.tuning
    budget = plan.remaining
    transfer = tuning.transfer != "off"
    # room for a memory-bound task's untuned default and a transferred schedule: the default is always measured
    # beside it (plan_first_measurements), and a per-task budget of one has room for one of them
    roomy = plan.remaining >= 2 * len(contexts) and all(cap >= 2 for cap in plan.caps.values())
    for index, ctx in enumerate(contexts):
        if plan.previous[index] == 0 and budget > 0:  # a task the history holds resumes from its own records
            found = library_candidates(ctx, library.library, min(tuning.library_schedules, budget))
            if not found and transfer:
                found = transferred_library_candidates(ctx, library.library, target, 1, memory_bound=roomy)
                if found:
                    transferred.add(index)
            if found:
                chosen[index] = tuple(found)
                budget -= len(found)
    return chosen, frozenset(transferred)


def plan_first_measurements(
    run: RunSettings, plan: TaskPlan, contexts: list[TuneContext], progress: TuneProgress, library: LibraryChoice,
    history: TuningHistory, target: Target, cache: CandidateCache,
) -> FirstMeasurements:
    """Which tasks start from the library's schedules, and which measure their untuned default first.

    Fills ``cache`` with what the history holds of each task and sets the progress of
    tasks whose default the history holds.
    """
    chosen, transferred = plan_library_schedules(run, plan, contexts, library, target)
    defaults = []
    # under two trials per task, a task starting from the library's schedule of another shape spends its one
    # trial on it, not on its untuned default (a convolution's untuned loops run 10-100x slower); with more,
    # it measures both, so a small dense layer whose untuned loops beat any tiling keeps them
    short = plan.remaining < 2 * len(contexts)
    for ctx, task in zip(contexts, progress.tasks):
        cache.add_history(history, ctx.mod, target)
        stored = cache.default_run_secs(ctx.mod)
        if stored is not None:
            task.default_sec = mean_or_none(stored)
        elif task.index in transferred and short:
            pass  # the library's schedule of the nearest shape is measured instead
        elif plan.previous[task.index] > 0 and library.library is not None:
            pass  # resumed: a task the last run started from the library (no default then) goes on from its records
        elif task.index in chosen and task.index not in transferred and not default_unknown(ctx, library.library):
            pass  # the library's schedule is measured instead: it beat the default, or is the default
        elif run.profile.tuning.default_schedule and str(target.kind.name) == "llvm":
            # off: the search starts at once. GPU targets' untuned code is TVM's default GPU
            # schedule (dlight), not the unscheduled function, so there is no trace to measure.
            defaults.append(task.index)
    return FirstMeasurements(tuple(defaults), chosen, transferred)


def cap_minor_tasks(run: RunSettings, progress: TuneProgress, limits: TaskLimits) -> frozenset[str]:
    """Budget where it pays: a task that cannot matter to the tuned model gets few trials; the tasks capped.

    Reshapes, concatenations and small pools cannot gain much; left alone,
    each takes a full batch from the heavy convolutions in the scheduler's
    first round. "Matter" is judged against the model as it may be once
    tuned, not as it is untuned (where naive convolutions dwarf
    everything): each task is expected to reach half the profile's peak
    GFLOPS, or to stay at its untuned latency if that is lower, and a task
    whose untuned latency is under ``minor_task_share`` of that expected
    model is minor. A task whose default is not measured (it starts from
    the library's schedule) counts at half the peak. The caps go into ``limits``, which the search reads;
    a minor task's cap counts its records in the history, so a resumed run
    adds nothing to a minor task that has its trials.
    """
    tuning, peak = run.profile.tuning, run.profile.device.peak_gflops
    tasks = [t for t in progress.tasks if t.default_sec is not None]
    if len(tasks) < 2:
        return frozenset()

    def expected_sec(task: TaskProgress) -> float:
        if not peak or not task.flops:
            return task.default_sec
        return min(task.default_sec, task.flops / (0.5 * peak * 1e9))

    model = sum(t.weight * expected_sec(t) for t in tasks)
    if peak:  # tasks measured from the library instead of their default (compute-bound ones) count as tuned
        model += sum(t.weight * t.flops / (0.5 * peak * 1e9) for t in progress.tasks if t.default_sec is None and t.flops)
    minor = set()
    for task in tasks:
        if model and task.weight * task.default_sec < tuning.minor_task_share * model:
            limits.set_cap(task.name, max(0, tuning.minor_task_trials - task.previous_trials))
            minor.add(task.name)
    return frozenset(minor)


def plan_search(
    run: RunSettings, plan: TaskPlan, first: FirstMeasurements, minor: frozenset[str], contexts: list[TuneContext],
    limits: TaskLimits, caps_enforced: bool,
) -> SearchPlan:
    """The search's budget, its retiming allowance and batch size, once the first measurements are in.

    Retiming (tuning/confirm.py) leaves out tasks capped as minor: their pick cannot move the model.
    Batches are small enough that every task's first batch fits in what the search has left:
    MetaSchedule's first round gives each task one batch, in task order. Sized from the run's budget
    (:func:`plan_tasks`), before the default and library schedules took their trials, the batches of a
    short run (2 per task: one left for the search) went to the tasks picked first, two each, and the
    last third of the tasks (SqueezeNet's costliest convolutions among them) got no search trial.
    """
    budget = first.search_budget(plan)
    retime = retime_limit(sum(task.task_name not in minor for task in plan.extracted), run.profile.tuning.confirm_best, budget)
    names = [str(ctx.task_name) for ctx in contexts]
    if caps_enforced:  # a task whose cap its defaults reached takes no batch
        names = [n for n in names if (cap := limits.cap(n)) is None or cap > limits.measured_before(n)]
    per_iter = min(plan.per_iter, max(1, budget // max(1, len(names))))
    return SearchPlan(budget, per_iter, minor, retime)


def per_task_proposals(run: RunSettings, plan: TaskPlan, caps_enforced: bool) -> int:
    """MetaSchedule's per-task limit: proposed candidates, not measured ones.

    With edgetune's search, ``tuning.max_trials_per_task`` is a cap on measured trials
    (:func:`plan_tasks`), so the proposals are bounded only by the run; stock
    MetaSchedule's search measures what it proposes and takes the budget itself.
    """
    per_task = run.profile.tuning.max_trials_per_task
    if per_task and not caps_enforced:
        return per_task
    return plan.remaining
