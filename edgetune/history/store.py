"""The public interface of a tuning history: what maintenance, suggest and warm start use.

:class:`HistoryStore` is the contract; :class:`~edgetune.history.database.HistoryDatabase`
implements it over SQL (SQLite and PostgreSQL), and ``tests/test_history_store.py``
is the conformance suite every backend must pass. Code outside ``history/database.py``
and ``history/sql_operations.py`` uses only these methods, never the tables.

Results are plain data (the dataclasses below), so a caller never holds a
connection or a SQL row. Record ids and workload row ids are stable for the
life of a history: callers may keep them between calls (suggest replays
records by id).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tvm.ir import IRModule
from tvm.s_tir.meta_schedule.database import TuningRecord, Workload
from tvm.s_tir.schedule import Trace
from tvm.target import Target

#: Record columns an export line carries (besides ``id`` and ``workload_id``),
#: and an import line must carry.
RECORD_FIELDS = (
    "target_json",
    "target_kind",
    "trace_json",
    "candidate_hash",
    "run_secs_json",
    "mean_run_sec",
    "error",
    "args_info_json",
    "board_id",
    "timing",
    "tvm_version",
    "created_at",
)
#: Workload columns an export line carries (besides ``id``).
WORKLOAD_FIELDS = ("shash", "mod_hash", "mod_json", "created_at")


@dataclass
class StoredWorkload:
    """One workload (an IRModule) and the rows that hold it.

    Several rows can hold structurally equal modules (serialised differently,
    e.g. by another TVM version); they are one workload, and ``ids`` lists them
    all, oldest first.
    """

    workload: Workload
    shash: str
    ids: list[int] = field(default_factory=list)


@dataclass
class RecordGroup:
    """Records of one workload on one target, timed one way (all of the workload's rows merged)."""

    workload: StoredWorkload
    target_json: str
    args_info_json: str
    timing: str
    workload_ids: list[int]
    count: int
    successful: int
    failed: int
    best_sec: float | None
    first: float
    last: float
    boards: list[str] = field(default_factory=list)


@dataclass
class BoardWorkloadSummary:
    """What one board (``board_id``: ``KEY@host:port``, or the key alone) measured of one workload row."""

    board_id: str
    workload_id: int
    count: int
    successful: int
    best_sec: float | None
    last: float


@dataclass
class RecordSummary:
    """A record without its trace: enough to order, group and rank measurements."""

    id: int
    workload: StoredWorkload
    target_json: str
    target_hash: str
    mean_run_sec: float | None  # None: failed, or a trace MetaSchedule must never pick
    created_at: float
    timing: str = "warm"  # flushed or warm: records of one timing are ranked together only


@dataclass
class DedupeResult:
    by: str
    configurations: int  # configurations that had duplicates
    removed: int  # rows deleted
    dry_run: bool = False


@dataclass
class PruneResult:
    failed: int = 0  # failed records selected by --failed
    older: int = 0  # records selected by --older-than
    beyond_top: int = 0  # successful records beyond the K fastest
    removed: int = 0  # distinct records removed (or that would be)
    dry_run: bool = False


@dataclass
class ImportResult:
    added: int = 0
    updated: int = 0
    skipped: int = 0
    workloads_added: int = 0


@dataclass(frozen=True)
class ClaimOwner:
    """Who holds a claim: a host, a process on it, and a random id of the run (pids are reused)."""

    host: str
    pid: int
    run: str

    @classmethod
    def this_process(cls) -> "ClaimOwner":
        import os
        import socket
        import uuid

        return cls(socket.gethostname(), os.getpid(), uuid.uuid4().hex)


@dataclass
class Claim:
    """A lease on one candidate of one target, as the history holds it now.

    ``candidate_key`` is the structural hash of the scheduled module (workload and
    schedule in one). Times are the database's clock (Unix seconds). With a
    ``record_id`` the candidate was measured and the row leases nothing any more.
    """

    target_hash: str
    candidate_key: str
    owner: ClaimOwner
    claimed_at: float
    expires_at: float
    record_id: int | None = None
    expired: bool = False  # the lease ran out (the database's clock) without a measurement

    @property
    def live(self) -> bool:
        """Held by its owner now: neither measured nor expired."""
        return self.record_id is None and not self.expired


class ClaimStore(abc.ABC):
    """Leases on candidates, so that several tuners sharing one history never measure one at once.

    A :class:`HistoryStore`'s ``claims``. Every method raises
    :class:`~edgetune.errors.HistoryError` (one line) on a storage failure.
    """

    @abc.abstractmethod
    def claim_candidate(
        self, target: Target, candidate_key: str, owner: ClaimOwner, lease_sec: float, *, take_measured: bool = False
    ) -> Claim:
        """Claim a candidate for ``lease_sec``; return the claim as it stands afterwards.

        Atomic: of several owners claiming at once exactly one gets it. An expired
        claim is taken over; a measured one (``record_id``) only with ``take_measured``.
        The result's owner says who holds it: ``owner`` when the claim was won.
        """

    @abc.abstractmethod
    def claim_of(self, target: Target, candidate_key: str) -> Claim | None:
        """The claim on a candidate now, or None."""

    @abc.abstractmethod
    def renew_claims(self, owner: ClaimOwner, lease_sec: float) -> int:
        """Extend every live claim of ``owner`` by ``lease_sec`` from now; how many."""

    @abc.abstractmethod
    def finish_claim(self, target: Target, candidate_key: str, owner: ClaimOwner, record_id: int) -> bool:
        """Mark ``owner``'s claim measured, pointing at the record of the result; False if not held."""

    @abc.abstractmethod
    def release_claim(self, target: Target, candidate_key: str, owner: ClaimOwner) -> bool:
        """Give up ``owner``'s unmeasured claim on one candidate; False if it held none."""

    @abc.abstractmethod
    def release_claims(self, owner: ClaimOwner) -> int:
        """Give up every unmeasured claim of ``owner`` (its run ends); how many."""

    @abc.abstractmethod
    def list_claims(self, *, live_only: bool = True) -> list[Claim]:
        """Claims, oldest first: the live ones, or all (measured and expired too)."""


class RecipeStore(abc.ABC):
    """Each tuned model's recipe (:class:`~edgetune.tasks.recipe.Recipe`), per model file and target: a
    :class:`HistoryStore`'s ``recipes``. The last tune of a model on a target wins."""

    @abc.abstractmethod
    def store(self, model_sha256: str, target: Target, recipe: Any) -> None:
        """Record ``recipe`` for the model on ``target``, replacing any recorded before."""

    @abc.abstractmethod
    def load(self, model_sha256: str, target: Target) -> Any:
        """The recipe recorded for the model on ``target``, or None (a history tuned before recipes were recorded)."""


class BulkStore(abc.ABC):
    """Whole-history reads (stats, suggestions, cost-model training) and maintenance writes.

    A :class:`HistoryStore`'s ``bulk``. Every method raises
    :class:`~edgetune.errors.HistoryError` (one line) on a storage failure, and
    on a write to a history opened read-only. Writes that change several rows
    (dedupe, prune, import) are one transaction each: they happen wholly or not
    at all, also when another process writes meanwhile.
    """

    # -- reading

    @abc.abstractmethod
    def workloads(self, ids: Iterable[int] | None = None) -> dict[int, StoredWorkload]:
        """Workloads by row id (all rows, or those of ``ids``); rows of one workload share one entry."""

    @abc.abstractmethod
    def record_groups(self) -> list[RecordGroup]:
        """Per workload and target: counts, best, first/last time and boards."""

    @abc.abstractmethod
    def board_summaries(self) -> list[BoardWorkloadSummary]:
        """Per board and workload row: records, successful ones, best mean run time and last time (``boards status``)."""

    @abc.abstractmethod
    def record_summaries(self, target: Target | None = None) -> list[RecordSummary]:
        """Every record (of ``target``, or all), in the order they were measured."""

    @abc.abstractmethod
    def records_by_id(self, record_ids: list[int]) -> list[TuningRecord]:
        """TuningRecords in the order of ``record_ids``; failed ones carry TVM's failure stub."""

    # -- maintenance (writes)

    @abc.abstractmethod
    def dedupe_records(self, by: str, *, dry_run: bool = False) -> DedupeResult:
        """Keep one record per (workload, target, trace): the newest (``"date"``) or their average."""

    @abc.abstractmethod
    def prune_records(
        self,
        *,
        failed: bool = False,
        created_before: float | None = None,
        keep_top: int | None = None,
        dry_run: bool = False,
    ) -> PruneResult:
        """Delete failed records, records older than a Unix time, and successful ones beyond the top K."""

    @abc.abstractmethod
    def export_rows(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Every workload row and record as plain dicts (``WORKLOAD_FIELDS``/``RECORD_FIELDS`` plus ids)."""

    @abc.abstractmethod
    def import_rows(self, lines: Iterable[tuple[str, dict[str, Any]]]) -> ImportResult:
        """Merge exported rows (``(where, row)``; ``row["type"]`` is ``workload`` or ``record``).

        Workloads are matched structurally; a record already stored is skipped,
        or updated when the line holds a newer measurement of it. ``where`` names
        the line in errors. One transaction: a bad line imports nothing.
        """


class HistoryStore(abc.ABC):
    """A tuning history's records, independent of where its rows live; composed of smaller stores.

    The store reads and commits measurements (what a tuning run needs);
    :attr:`claims` holds the leases of tuners sharing it and :attr:`bulk` the
    whole-history reads and maintenance. Every method raises
    :class:`~edgetune.errors.HistoryError` (one line) on a storage failure, and
    on a write to a history opened read-only.
    """

    #: leases on candidates (several tuners sharing one history)
    claims: ClaimStore
    #: whole-history reads and maintenance writes
    bulk: BulkStore
    #: how each tuned model's graph was prepared
    recipes: RecipeStore

    # -- identity

    @property
    @abc.abstractmethod
    def url(self) -> str:
        """Where the history lives, password masked."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections; the store cannot be used afterwards."""

    # -- reading (a tuning run)

    @abc.abstractmethod
    def successful_records(
        self, target: Target, *, limit: int = 5000, keep: Callable[[IRModule], bool] | None = None
    ) -> list[tuple[TuningRecord, str]]:
        """Successful records on ``target``, newest first, each with the board that measured it.

        ``keep``: of the workloads whose module it accepts only, asked once per workload before any record is
        read (reading a record replays its trace: a cost model warm-started from a few models' history read
        thousands it then left out).
        """

    @abc.abstractmethod
    def fastest_records(
        self, target: Target, *, per_workload: int = 2, keep: Callable[[IRModule], bool] | None = None
    ) -> list[TuningRecord]:
        """Each workload's ``per_workload`` fastest successful records on ``target``, fastest first within one.

        ``keep``: only workloads whose module it accepts, asked before any record is read (a similar
        operator's schedules for transfer: reading every record replays every trace).
        """

    @abc.abstractmethod
    def count_records(
        self, workload: Workload | IRModule | None = None, target: Target | None = None, successful_only: bool = False
    ) -> int:
        """How many records (of a workload, of a target, successful only)."""

    @abc.abstractmethod
    def has_candidate(self, workload: Workload | IRModule, target: Target, trace: Trace) -> bool:
        """Whether this exact trace was measured on ``target`` (failed or not)."""

    @abc.abstractmethod
    def best_record(self, workload: Workload | IRModule, target: Target) -> TuningRecord | None:
        """The fastest successful record of ``workload`` on ``target``."""

    # -- writing

    @abc.abstractmethod
    def commit_tuning_record(self, record: TuningRecord) -> None:
        """Store a measurement (a re-measured candidate keeps one row, with the newest result)."""

    @abc.abstractmethod
    def commit_measurement(self, record: TuningRecord, *, error: str | None = None, board: str | None = None) -> int:
        """Store a measurement, failed when ``error`` is given, and which board of several made it; its record id.

        One row per (candidate, board): two boards' results for one candidate are both kept.
        """

    @abc.abstractmethod
    def commit_served(self, record: TuningRecord) -> int:
        """Store a candidate served from the history rather than measured; its record id.

        A row for the same candidate (any board) is kept as it is; only a trace the history
        does not hold yet (a module stored under another trace) adds a row.
        """
