"""What the run asks of its components: MetaSchedule's ABCs, and a Protocol for the history.

The builder, runner, cost model, search strategy, task scheduler and measure
callbacks are MetaSchedule's own abstract classes (edgetune's are subclasses of
them; a benchmark passes stock ones through :class:`Components`). The history
is a :class:`TuningHistory`: only the methods the tuning loop calls, so a reader
can tell what a history must provide without reading ``history/database.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol, Sequence

from tvm.ir import IRModule
from tvm.s_tir.meta_schedule.builder import Builder
from tvm.s_tir.meta_schedule.cost_model import CostModel
from tvm.s_tir.meta_schedule.measure_callback import MeasureCallback
from tvm.s_tir.meta_schedule.runner import Runner
from tvm.s_tir.meta_schedule.search_strategy import SearchStrategy
from tvm.s_tir.meta_schedule.task_scheduler import TaskScheduler
from tvm.target import Target

if TYPE_CHECKING:
    from tvm.s_tir.meta_schedule.database import Database, TuningRecord, Workload
    from tvm.s_tir.schedule import Trace

    from ..history.store import BulkStore, ClaimStore, RecipeStore

__all__ = [
    "Builder", "Components", "CostModel", "MeasureCallback", "Runner", "SearchStrategy", "TaskScheduler", "TuningHistory",
]


class TuningHistory(Protocol):
    """The history as the tuning loop uses it (:class:`~edgetune.history.HistoryDatabase` is one).

    Warm start and ``--suggested`` read it as a :class:`~edgetune.history.HistoryStore`.
    """

    recipes: RecipeStore  # each tuned model's recipe
    claims: ClaimStore  # leases on candidates, when tuners share the history (tuning/claims.py)
    bulk: BulkStore  # records by id

    def commit_workload(self, mod: IRModule) -> Workload: ...

    def commit_measurement(self, record: TuningRecord, *, error: str | None = None, board: str | None = None) -> int: ...

    def commit_served(self, record: TuningRecord) -> int: ...

    @property
    def url(self) -> str: ...

    def close(self) -> None: ...

    def count_records(
        self, workload: Workload | IRModule | None = None, target: Target | None = None, successful_only: bool = False,
    ) -> int: ...

    def best_record(self, workload: Workload | IRModule, target: Target) -> TuningRecord | None: ...

    def fastest_records(
        self, target: Target, *, per_workload: int = 2, keep: Callable[[IRModule], bool] | None = None,
    ) -> list[TuningRecord]: ...

    def has_candidate(self, workload: Workload | IRModule, target: Target, trace: Trace) -> bool: ...

    def fastest_candidates(self, workload: Workload | IRModule, target: Target, count: int) -> list[tuple[str, TuningRecord]]: ...

    def retime_candidate(
        self, workload: Workload | IRModule, target: Target, candidate_hash: str, run_secs: Sequence[float],
    ) -> int: ...

    def for_target(self, target: Target) -> Database:
        """What MetaSchedule's search reads: this target's records only."""
        ...


@dataclass
class Components:
    """Components a caller passes in instead of the ones the profile builds; None keeps the product's.

    A benchmark that compares one component sets that one; everything else
    (history, callbacks, progress, summary) stays the product's.
    """

    builder: Builder | None = None
    runner: Runner | None = None
    wrap_runner: Callable[[Runner], Runner] | None = None  # wraps the runner in use (built or passed in)
    cost_model: CostModel | None = None
    search_strategy: SearchStrategy | None = None
    task_scheduler: TaskScheduler | None = None
    measure_callbacks: Sequence[MeasureCallback] = ()  # run after edgetune's own
    # (name, PrimFunc module, weight) tuned instead of the model's tasks; needs evaluate=False
    tasks: Sequence[tuple[str, IRModule, int]] | None = None
    load_intrinsics: bool = True  # register the target family's tensor intrinsics before the contexts
    builds_beside: bool = True  # the search goes on while a batch builds (measure/pending.py); False: it waits, as before
    search_ahead: bool = True  # a task's next batch searched while its last is measured (search/lookahead.py); False: after
