"""A task's next batch searched (and built) while the board measures its last one (issue 55, point 1).

MetaSchedule's task loop keeps one batch per task in flight: before it hands
a task out again, its scheduler joins the task's measurements, and only then
does the search propose the next batch. On a board that takes longer than the
host, the host waited for the board, then the board waited for the search.
Here the runner's futures (:class:`~edgetune.measure.pending.PendingBuildRunner`)
notice when the tuning thread is about to wait for a batch still on the board,
whatever task scheduler joins it, and first have that batch's task propose
its next batch (:meth:`AdaptiveSearch.search_ahead <edgetune.search.strategy.AdaptiveSearch.search_ahead>`)
and the builder start building it (``build_ahead``); then the thread waits.
The batch is handed out once the results are in, so MetaSchedule's order
holds: every measured result is recorded and the cost model updated before
the next batch goes to the board. A board that shares the host's CPU (the
embedded board) times nothing while the host works: there the search ahead
runs while the batch builds, nothing is built ahead, and the batch is timed
only once the search is done and the tuning thread waits (the quiet runner of
:mod:`edgetune.measure.pending`); the search then overlaps the builds instead
of the timing.

What the search knows changes by one batch: the proposal ranks with the
cost model and picks elites from the history as they were before the last
batch's results. The checks that read those results (early stop, per-task
caps, the run's budget, programs measured) are made when the batch is
handed out, not when it is proposed. A proposal whose task ends first is
dropped; nothing is stored for it (its builds are only kept for reuse).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class AheadSearch:
    """One batch searched ahead: which task, when (``time.monotonic``), how many candidates, how many builds started."""

    task: str
    started: float
    ended: float
    candidates: int
    builds_started: int


class Lookahead:
    """Shared by a search strategy's per-task clones and the task scheduler: who can search ahead, and what it did.

    ``build_ahead(context, candidates) -> builds started`` starts the builds of a batch searched
    ahead (None: built when handed out). ``stop``: once set, nothing more is searched ahead.
    """

    def __init__(self, build_ahead: Callable[[Any, list[Any]], int] | None = None, stop: threading.Event | None = None) -> None:
        self.build_ahead = build_ahead
        self.stop = stop or threading.Event()
        self._searches: dict[str, Any] = {}
        self.searches: list[AheadSearch] = []
        self.seconds = 0.0  # host seconds spent searching (and submitting builds) ahead
        #: the task whose batch the search handed out last: MetaSchedule builds and runs it right after
        self.handed_out: str | None = None
        self.dropped = 0  # batches searched ahead for a task that ended before it was handed out

    def register(self, task: str, search: Any) -> None:
        """``search`` (an AdaptiveSearch clone) searches ``task``."""
        self._searches[task] = search

    def search_ahead(self, task: str) -> bool:
        """Have ``task``'s search propose its next batch now, and start building it; False: nothing was done."""
        search = self._searches.get(task)
        if search is None or self.stop.is_set():
            return False
        started = time.monotonic()
        batch = search.search_ahead()
        if batch is None:
            return False
        builds = self.build_ahead(search.context, batch) if self.build_ahead is not None and batch else 0
        ended = time.monotonic()
        self.seconds += ended - started
        self.searches.append(AheadSearch(task, started, ended, len(batch), builds))
        return True


def build_ahead_with(builder: Any) -> Callable[[Any, list[Any]], int] | None:
    """``Lookahead.build_ahead`` for ``builder`` (a WarmBuilder); None for a builder that cannot build ahead."""
    import tvm.s_tir.meta_schedule as ms

    from ..builder.builder import WarmBuilder

    if not isinstance(builder, WarmBuilder):
        return None

    def build(context: Any, candidates: list[Any]) -> int:
        return int(builder.build_ahead([ms.builder.BuilderInput(c.sch.mod, context.target) for c in candidates]))

    return build
