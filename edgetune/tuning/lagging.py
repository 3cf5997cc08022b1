"""No task ends at an inherited schedule that its operator class beats by far.

A schedule library's schedule is a task's first candidate, not a verdict. One
adapted from another shape can run far below what the same operator reaches at
its neighbours' shapes: torchvision's SqueezeNet 1.1 (ceil-mode pools, so
every layer a shape the library lacked) ran its 512->1000 classifier from an
adapted schedule at 30 GFLOPS, 5.7 ms of the model's 11 ms, where the library's
schedules of that operator run at 100-200 GFLOPS, and at two trials per task
nothing searched it.

The rule, once the library's schedules are measured and before the search:

* a task's *class* is its operator signature (:mod:`edgetune.tasks.signature`);
  the class reaches the median, over the library's workloads of that
  signature, of each workload's best GFLOPS (:func:`class_gflops`; at least
  :data:`MIN_CLASS_WORKLOADS` of them, else the task has no reference); a
  task whose exact workload the library holds is judged by that workload's
  own best record (its schedule was tuned for it; a small layer runs below
  its class's median at its best);
  where the library holds too few of that signature, the class is the same
  operator with any epilogue (a convolution with hard-swish is judged by the
  library's convolutions with ReLU, bias or residual add);
* a compute-bound task, whether it started from the library (its exact
  workload, another shape or another epilogue, adapted) or from its untuned
  default (nothing in the library to adapt), *lags* when its best runs under
  ``tuning.lagging_ratio`` of its class and it *weighs*: its weighted latency is
  at least ``tuning.lagging_share`` of the model's (the sum over tasks of
  weight x best, or the untuned latency where nothing better was measured);
* each lagging task, the costliest first, gets ``tuning.lagging_trials`` of the
  run's search budget kept for it alone (:meth:`~edgetune.search.strategy.TaskLimits.reserve`)
  and its per-task cap raised to fit them, whatever the per-task budget and
  whatever order the task scheduler picks tasks in; a task that ends its
  search early gives the rest back.

So every lagging task's final schedule was measured against searched
candidates; a task close to its class keeps the budget it had.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from tvm.ir import IRModule
    
    from ..schedules.library import LibrarySchedule, ScheduleLibrary
    from ..search.limits import TaskLimits
    from .summary import Json

#: fewest library workloads of a class for its median to be a reference
MIN_CLASS_WORKLOADS = 3


@dataclass(frozen=True)
class TaskStanding:
    """A task as the rule judges it: its weighted best latency, its GFLOPS and its class's."""

    name: str
    weighted_sec: float  # weight x best latency (s)
    gflops: float
    class_gflops: float | None  # None: the library holds too few workloads of its class


@dataclass(frozen=True)
class LaggingTask:
    """A task searched first: how far below its class it ran, its share of the model, the trials kept for it."""

    name: str
    gflops: float
    class_gflops: float
    share: float
    reserved: int

    def to_dict(self) -> Json:
        return asdict(self)


def class_gflops(library: ScheduleLibrary, mod: IRModule, mcpu: str = "") -> float | None:
    """What ``mod``'s operator class reaches in ``library``: the median of its workloads' best GFLOPS, or None.

    The class is the workloads of ``mod``'s operator signature; where the library holds too few, those of the
    same operator with other epilogues (:meth:`~edgetune.schedules.library.ScheduleLibrary.anchor_workloads`).

    A workload the library holds exactly is judged by its own best record instead: a 1x1 convolution on a 7x7 map
    runs below the median of its class at its best, and its library schedule is that best.

    ``mcpu``: the tuned target's CPU model. A workload's best is its records on that CPU model where it has any
    (another CPU model of the family reaches other GFLOPS: a Zen 5 record is no bar for an Intel Xeon), else its
    records on the family's others.
    """
    from ..tasks.signature import operator_signature

    exact = library.find(mod)
    if exact is not None:
        return _best_gflops(exact.schedules, mcpu)
    signature = operator_signature(mod)
    for workloads in (library.nearest_workloads(mod, signature), library.anchor_workloads(mod, signature)):
        best = [gflops for workload in workloads if (gflops := _best_gflops(workload.schedules, mcpu)) is not None]
        if len(best) >= MIN_CLASS_WORKLOADS:
            return statistics.median(best)
    return None


def _best_gflops(schedules: Sequence[LibrarySchedule], mcpu: str) -> float | None:
    """The best GFLOPS of ``schedules`` measured on ``mcpu`` where there are any, else of all; None without one."""
    every = [s for s in schedules if s.gflops]
    own = [s for s in every if mcpu and s.mcpu == mcpu]
    return max((s.gflops for s in own or every), default=None)


def choose_lagging(
    standings: Sequence[TaskStanding], model_sec: float, *, ratio: float, share: float
) -> list[TaskStanding]:
    """The tasks that lag their class by more than ``ratio`` and weigh at least ``share`` of ``model_sec``, costliest first."""
    if model_sec <= 0:
        return []
    lagging = [
        s for s in standings
        if s.class_gflops and s.gflops < ratio * s.class_gflops and s.weighted_sec >= share * model_sec
    ]
    return sorted(lagging, key=lambda s: -s.weighted_sec)


def reserve_for_lagging(
    lagging: Sequence[TaskStanding], limits: TaskLimits, model_sec: float, trials: int
) -> list[LaggingTask]:
    """Keep ``trials`` of the search budget for each lagging task, in order, while the budget lasts; raise its cap."""
    kept: list[LaggingTask] = []
    for standing in lagging:
        reserved = limits.reserve(standing.name, trials)
        if reserved <= 0:
            break
        limits.raise_cap(standing.name, limits.measured_before(standing.name) + reserved)
        kept.append(LaggingTask(standing.name, standing.gflops, float(standing.class_gflops or 0.0),
                                standing.weighted_sec / model_sec, reserved))
    return kept


def describe_lagging(searched_first: Sequence[Json]) -> str:
    """One line: which tasks ran far below their class and how many search trials each has kept."""
    parts = [
        f"{t['name']} ({t['gflops']:.0f} of its class's {t['class_gflops']:.0f} GFLOPS, {t['share']:.0%} of the model, "
        f"{t['reserved']} trials)"
        for t in searched_first
    ]
    return f"searched first, their first schedule far below their operator class: {'; '.join(parts)}"
