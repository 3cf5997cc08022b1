"""Per-task caps on measured candidates and the run's shared search budget, read by the search."""

from __future__ import annotations


class TaskLimits:
    """Per task: a cap on measured candidates, and how many were measured before its search.

    The tuning loop owns it (:class:`~edgetune.tuning.session.TuneSession`, from the plan's caps) and
    fixes it before the first batch, once each task's default schedule and
    library schedules are measured; the search only reads it. A task worth
    little of the model's latency gets a cap, so it does not take slots from
    the heavy ones; a cap counts the candidates measured before the search too.
    The run's search budget is shared by every task: a last batch is cut to
    what is left, so ``--trials`` is a limit that no batch overshoots
    (MetaSchedule's loop counts whole batches). The search takes from it.
    """

    def __init__(self) -> None:
        self._caps: dict[str, int] = {}
        self._before: dict[str, int] = {}
        self._search_left: int | None = None  # None: no run-wide limit
        self._reserved: dict[str, int] = {}  # task -> search trials only it may take (tasks searched first)

    def set_search_budget(self, trials: int) -> None:
        """The candidates the search of all tasks together may measure this run."""
        self._search_left = max(0, int(trials))

    @property
    def search_left(self) -> int | None:
        return self._search_left

    def reserve(self, task: str, trials: int) -> int:
        """Keep up to ``trials`` of the run's search budget for ``task`` alone; how many were kept.

        Other tasks cannot take them, whatever order the task scheduler picks tasks in: a task that must be
        searched gets its trials even when the budget is one or two per task.
        """
        if self._search_left is None:
            return 0
        free = self._search_left - sum(self._reserved.values())
        kept = max(0, min(int(trials), free))
        if kept:
            self._reserved[task] = self._reserved.get(task, 0) + kept
        return kept

    def reserved(self, task: str) -> int:
        return self._reserved.get(task, 0)

    def release(self, task: str) -> None:
        """What was kept for ``task`` goes back to every task (its search ended before it used it)."""
        self._reserved.pop(task, None)

    def take(self, wanted: int, task: str | None = None) -> int:
        """Grant up to ``wanted`` candidates of the run's search budget (all of them without one).

        ``task`` draws on its own reservation first; what other tasks reserved is not granted.
        """
        if self._search_left is None:
            return wanted
        own = self._reserved.get(task, 0) if task is not None else 0
        free = self._search_left - (sum(self._reserved.values()) - own)
        granted = max(0, min(wanted, free))
        self._search_left -= granted
        if own:
            self._reserved[task] = own - min(own, granted)
        return granted

    def available(self, task: str | None = None) -> int | None:
        """What :meth:`take` could grant ``task`` now (None: no run-wide limit); takes nothing."""
        if self._search_left is None:
            return None
        own = self._reserved.get(task, 0) if task is not None else 0
        return max(0, self._search_left - (sum(self._reserved.values()) - own))

    def set_cap(self, task: str, trials: int) -> None:
        """At most ``trials`` measured by the search (and before it) this run; the lowest cap set wins."""
        current = self._caps.get(task)
        self._caps[task] = int(trials) if current is None else min(current, int(trials))

    def raise_cap(self, task: str, trials: int) -> None:
        """A cap of at least ``trials`` for a task that must be searched (a task without a cap keeps none)."""
        current = self._caps.get(task)
        if current is not None and current < int(trials):
            self._caps[task] = int(trials)

    def add_measured_before(self, task: str, count: int = 1) -> None:
        self._before[task] = self._before.get(task, 0) + count

    def cap(self, task: str) -> int | None:
        return self._caps.get(task)

    def measured_before(self, task: str) -> int:
        return self._before.get(task, 0)
