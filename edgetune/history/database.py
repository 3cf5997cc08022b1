"""The tuning history: a MetaSchedule database kept in SQL.

MetaSchedule's own databases are a pair of append-only JSON files (or memory).
edgetune needs more: several boards' results in one file, resumable runs that
never re-measure a candidate, and a database that survives a crash mid-run. So
the history is a :class:`ms.database.PyDatabase` whose rows live in SQL, written
with SQLAlchemy Core only so that the same code runs on SQLite today and on
PostgreSQL later.

Every write is its own transaction: an interrupted run keeps every finished
measurement and never leaves half a record behind.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
import tvm
import tvm_ffi
from sqlalchemy.engine import Connection, Engine, Row
from sqlalchemy.exc import SQLAlchemyError
from tvm.ir import IRModule
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.database import TuningRecord, Workload
from tvm.target import Target

from edgetune._version import __version__
from edgetune.common.failure import FAILED_RUN_SECS, UNKNOWN_FAILURE, is_failed
from edgetune.common.tvm_json import load_tvm_json
from edgetune.errors import HistoryError
from edgetune.history.migrate import stored_version
from edgetune.history.schema import (
    SCHEMA_VERSION,
    TIMINGS,
    alembic_version,
    meta,
    metadata,
    records,
    revision_of,
    workloads,
)
from edgetune.history.sql import (
    canonical,
    has_schedule,
    insert_statement,
    one_line,
    sha256,
    target_json,
)
from edgetune.history.sql_engine import create_engine, parse_location
from edgetune.history.sql_queries import RecordQueries
from edgetune.history.sql_recipes import SqlRecipes
from edgetune.history.sql_claims import SqlClaims
from edgetune.history.trace_codec import record_as_json
from edgetune.history.sql_operations import SqlOperations
from edgetune.history.store import HistoryStore, StoredWorkload


# MetaSchedule calls the history through C++; registered, a HistoryError raised in
# a callback reaches the Python caller as a HistoryError, not a bare RuntimeError.
tvm_ffi.register_error(HistoryError)


_log = logging.getLogger(__name__)


@derived_object
class HistoryDatabase(ms.database.PyDatabase, RecordQueries, HistoryStore):
    """MetaSchedule database over SQL tables; see :func:`open_history`.

    Stock MetaSchedule databases ignore the target when they pick a best record,
    and so does this one, seen as a whole. One history may hold several boards'
    results, whose latencies are on different scales: :meth:`for_target` gives
    MetaSchedule a :class:`TargetView` whose ``get_top_k``,
    ``get_all_tuning_records`` and ``len()`` (and hence ``query_schedule`` and
    ``compile_relax``) see one target's records only. There is no mode to
    switch: the history never changes what it returns.

    Records timed on flushed caches and records timed warm are on two scales
    too. A handle opened with ``timing`` stores that timing with every record it
    writes and reads only records timed the same way, everywhere a target is
    given (views, best records, candidates already measured). Without it, reads
    see both and writes are stored as ``warm``, how stock MetaSchedule times.

    Storage is composed, not inherited: :attr:`claims` (:class:`SqlClaims`),
    :attr:`bulk` (:class:`SqlOperations`) and :attr:`recipes` (:class:`SqlRecipes`)
    work on the same tables through this handle's engine, and :class:`TargetView`
    wraps it for MetaSchedule.
    """

    def __init__(
        self, url_or_path: str, *, board_id: str = "", read_only: bool = False, timing: str | None = None
    ) -> None:
        if timing is not None and timing not in TIMINGS:
            raise HistoryError(f"timing must be one of {', '.join(TIMINGS)}, got {timing!r} instead")
        url, name = parse_location(url_or_path)
        self._url = url
        self._name = name
        self._board_id = board_id
        self.timing = timing
        self._read_only = read_only
        self._by_id: dict[int, StoredWorkload] = {}
        self._by_shash: dict[str, list[StoredWorkload]] = {}
        self._by_handle: dict[int, StoredWorkload] = {}
        # rebuilding a record replays its trace, so keep them; key: row id
        self._record_cache: dict[
            int, tuple[tuple[str | None, str | None], TuningRecord | None]
        ] = {}
        self._warned_unreplayable = False
        self._block_names: dict[int, list[str]] = {}  # id(StoredWorkload) -> its blocks' names (_match)
        self._engine: Engine | None = create_engine(url, name, read_only)
        # composed, not inherited: each part reaches the tables through this handle's engine access
        self.claims = SqlClaims(self)
        self.bulk = SqlOperations(self)
        self.recipes = SqlRecipes(self)  # how each tuned model's graph was prepared (tasks.recipe)
        try:
            self._open_tables()
        except HistoryError:
            self._engine.dispose()
            raise

    # ------------------------------------------------------------------ opening

    def _open_tables(self) -> None:
        """Check the schema version, or create the tables in an empty database."""
        assert self._engine is not None
        dbapi_error = self._engine.dialect.loaded_dbapi.Error
        last_error: BaseException | None = None
        # A second attempt covers another process creating the tables at the same moment.
        for _attempt in range(2):
            try:
                with self._engine.connect() as conn:
                    tables = set(sa.inspect(conn).get_table_names())
                    if "meta" in tables:
                        self._check_version(conn)
                        return
                if tables:
                    raise HistoryError(
                        f"{self._name}: a database, but not an edgetune tuning history "
                        f"(its tables: {', '.join(sorted(tables))})"
                    )
                if self._read_only:
                    raise HistoryError(f"{self._name}: empty database, no tuning history to read")
                self._create_tables()
                return
            except (SQLAlchemyError, dbapi_error) as err:
                last_error = err
        assert last_error is not None
        raise HistoryError(
            f"{self._name}: cannot open as a tuning history ({one_line(last_error)})"
        ) from None

    def _create_tables(self) -> None:
        """A new history, already at the newest Alembic revision."""
        assert self._engine is not None
        with self._engine.begin() as conn:
            metadata.create_all(conn)
            conn.execute(alembic_version.insert().values(version_num=revision_of(SCHEMA_VERSION)))
            conn.execute(
                meta.insert(),
                [
                    {"key": "schema_version", "value": str(SCHEMA_VERSION)},
                    {
                        "key": "created_at",
                        "value": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    },
                    {
                        "key": "created_by",
                        "value": f"edgetune {__version__}, tvm {tvm.__version__}",
                    },
                ],
            )

    def _check_version(self, conn: Connection) -> None:
        """Refuse a history of another schema version, naming what to do about it."""
        version = stored_version(conn, self._name)
        if version < SCHEMA_VERSION:
            raise HistoryError(
                f"{self._name}: history schema version {version}, this edgetune reads version "
                f"{SCHEMA_VERSION}; upgrade it with: edgetune db upgrade --db {self._name}"
            )
        if version != SCHEMA_VERSION:
            raise HistoryError(
                f"{self._name}: history schema version {version}, this edgetune reads version "
                f"{SCHEMA_VERSION}; export it with the edgetune that wrote it"
            )

    @contextmanager
    def _access(self, action: str, *, write: bool = False) -> Iterator[Engine]:
        """The engine, with driver errors turned into one-line HistoryErrors."""
        if self._engine is None:
            raise HistoryError(f"{self._name}: tuning history is closed")
        if write and self._read_only:
            raise HistoryError(f"{self._name}: opened read-only, cannot {action}")
        try:
            yield self._engine
        except SQLAlchemyError as err:
            raise HistoryError(f"{self._name}: cannot {action}: {one_line(err)}") from err

    @contextmanager
    def _write_transaction(self, action: str) -> Iterator[Connection]:
        """One transaction that holds the write lock from its first statement.

        Maintenance reads, then deletes or updates what it read; on SQLite a
        deferred transaction would let another writer slip in between, so it
        starts with ``BEGIN IMMEDIATE``. PostgreSQL's row locks and unique
        constraints cover the concurrent writers there.
        """
        with self._access(action, write=True) as engine:
            with engine.connect() as conn:
                try:
                    if conn.dialect.name == "sqlite":
                        conn.exec_driver_sql("BEGIN IMMEDIATE")
                    yield conn
                    conn.commit()
                except BaseException:
                    conn.rollback()
                    # rows attached during the transaction may not exist any more
                    self._forget_workloads()
                    raise

    def _forget_workloads(self) -> None:
        self._by_id.clear()
        self._by_shash.clear()
        self._by_handle.clear()
        self._record_cache.clear()
        self._block_names.clear()

    def _all_workloads(self, conn: Connection) -> dict[int, StoredWorkload]:
        """Every workload row, by id; rows of one workload share their entry."""
        self._load_workload_rows(conn, sa.true())
        return self._by_id

    # ---------------------------------------------------------------- workloads

    def _match(self, shash: str, mod: IRModule) -> StoredWorkload | None:
        """The stored workload equal to ``mod``, block names included.

        Structural equality ignores block names, and a trace finds its blocks by name: two models' mean
        poolings (blocks named after their input variables) were one workload, and the second model's
        records did not replay on the first one's module.
        """
        from edgetune.tasks.signature import block_names  # the tasks package imports the models: not at import

        names: list[str] | None = None
        for entry in self._by_shash.get(shash, ()):
            if tvm_ffi.structural_equal(entry.workload.mod, mod):
                if names is None:
                    names = block_names(mod)
                if id(entry) not in self._block_names:
                    self._block_names[id(entry)] = block_names(entry.workload.mod)
                if self._block_names[id(entry)] == names:
                    return entry
        return None

    def _attach(self, row_id: int, shash: str, mod: IRModule) -> StoredWorkload:
        """Record that row ``row_id`` holds ``mod``, reusing an equal known workload."""
        entry = self._match(shash, mod)
        if entry is None:
            entry = StoredWorkload(Workload(mod), shash)
            self._by_shash.setdefault(shash, []).append(entry)
            self._by_handle[entry.workload.__chandle__()] = entry
        entry.ids.append(row_id)
        entry.ids.sort()
        self._by_id[row_id] = entry
        return entry

    def _load_workload_rows(self, conn: Connection, condition: Any) -> None:
        rows = conn.execute(
            sa.select(workloads.c.id, workloads.c.shash, workloads.c.mod_json)
            .where(condition)
            .order_by(workloads.c.id)
        ).all()
        for row in rows:
            if row.id not in self._by_id:
                self._attach(row.id, row.shash, load_tvm_json(row.mod_json))

    def _find_mod(self, conn: Connection, mod: IRModule) -> StoredWorkload | None:
        shash = str(tvm_ffi.structural_hash(mod))
        entry = self._match(shash, mod)
        if entry is None:
            self._load_workload_rows(conn, workloads.c.shash == shash)
            entry = self._match(shash, mod)
        return entry

    def _find(self, conn: Connection, workload: Workload | IRModule) -> StoredWorkload | None:
        if isinstance(workload, IRModule):
            return self._find_mod(conn, workload)
        entry = self._by_handle.get(workload.__chandle__())
        return entry if entry is not None else self._find_mod(conn, workload.mod)

    def _entries(self, conn: Connection, ids: Iterable[int]) -> dict[int, StoredWorkload]:
        missing = sorted(set(ids) - self._by_id.keys())
        if missing:
            self._load_workload_rows(conn, workloads.c.id.in_(missing))
        return self._by_id

    def _commit(self, engine: Engine, workload: Workload | IRModule) -> StoredWorkload:
        with engine.connect() as conn:
            entry = self._find(conn, workload)
        if entry is not None:
            return entry
        if self._read_only:
            raise HistoryError(f"{self._name}: opened read-only, cannot add a workload")
        mod = workload if isinstance(workload, IRModule) else workload.mod
        with engine.begin() as conn:
            return self._insert_workload(conn, mod, tvm.ir.save_json(mod), time.time())

    def _insert_workload(
        self, conn: Connection, mod: IRModule, mod_json: str, created_at: float
    ) -> StoredWorkload:
        """Insert-or-select the row of exactly this serialised module.

        Another writer may insert the same module at the same moment: the unique
        (shash, mod_hash) makes one insert a no-op, and both then read the one row.
        """
        shash = str(tvm_ffi.structural_hash(mod))
        key = {"shash": shash, "mod_hash": sha256(mod_json)}
        conn.execute(
            insert_statement(conn, workloads)
            .values(**key, mod_json=mod_json, created_at=created_at)
            .on_conflict_do_nothing(index_elements=["shash", "mod_hash"])
        )
        row_id = conn.execute(
            sa.select(workloads.c.id).where(
                workloads.c.shash == shash, workloads.c.mod_hash == key["mod_hash"]
            )
        ).scalar_one()
        if row_id in self._by_id:
            return self._by_id[row_id]
        return self._attach(row_id, shash, mod)

    def has_workload(self, mod: IRModule) -> bool:
        with self._access("read workloads") as engine, engine.connect() as conn:
            return self._find_mod(conn, mod) is not None

    def commit_workload(self, mod: IRModule) -> Workload:
        # Not write=True: the stock query_* call commit_workload on known workloads,
        # which must work on a read-only history.
        with self._access("commit a workload") as engine:
            return self._commit(engine, mod).workload

    # ------------------------------------------------------------------ records

    @staticmethod
    def _record_json(row: Row) -> list[Any]:
        """TuningRecord.as_json() layout; failed records read back with the failure stub."""
        failed = row.error is not None
        run_secs = [FAILED_RUN_SECS] if failed else json.loads(row.run_secs_json or "null")
        return [
            json.loads(row.trace_json),
            run_secs,
            json.loads(row.target_json),
            json.loads(row.args_info_json),
        ]

    def _to_records(self, conn: Connection, rows: Sequence[Row]) -> list[TuningRecord]:
        """The rows' records; a row whose trace does not replay on its workload is left out (:meth:`_replayed`)."""
        return [record for _row, record in self._replayed(conn, rows)]

    def _replayed(self, conn: Connection, rows: Sequence[Row]) -> list[tuple[Row, TuningRecord]]:
        """Each row with its record, rebuilt by replaying its trace; rows whose trace does not replay left out.

        Such a row is a measurement of a module equal to its workload but for block names (two models' mean
        pooling, named after their input variables), stored under the first one before workloads compared
        names: reading it raised inside MetaSchedule and ended a 40-minute build. It says so once a handle.
        """
        entries = self._entries(conn, {row.workload_id for row in rows})
        result = []
        for row in rows:
            stamp = (row.run_secs_json, row.error)
            cached = self._record_cache.get(row.id)
            if cached is None or cached[0] != stamp:
                try:
                    record = TuningRecord.from_json(self._record_json(row), entries[row.workload_id].workload)
                except Exception as err:  # noqa: BLE001 - TVM raises its own schedule errors for a trace that fails
                    record = None
                    if not self._warned_unreplayable:
                        self._warned_unreplayable = True
                        _log.warning("%s: record %d does not replay on its workload (%s); left out, as any such record",
                                     self._name, row.id, (str(err).strip().splitlines() or [type(err).__name__])[0])
                cached = self._record_cache[row.id] = (stamp, record)
            if cached[1] is not None:
                result.append((row, cached[1]))
        return result

    def commit_served(self, record: TuningRecord) -> int:
        """Store a candidate served from the history; a row for it under any board is kept as it is."""
        trace_json, _run_secs, target_cfg, _args = record_as_json(record)
        with self._access("commit a served candidate", write=True) as engine:
            entry = self._commit(engine, record.workload)
            with engine.connect() as conn:
                existing = conn.execute(
                    sa.select(records.c.id)
                    .where(
                        records.c.workload_id.in_(entry.ids),
                        records.c.target_hash == sha256(canonical(target_cfg)),
                        records.c.candidate_hash == sha256(canonical(trace_json)),
                        *self._timed(),
                    )
                    .order_by(records.c.id)
                    .limit(1)
                ).scalar_one_or_none()
        return int(existing) if existing is not None else self._commit_record(record, None)

    def _timed(self) -> tuple[Any, ...]:
        """The condition that keeps reads to this handle's timing (none without one)."""
        return () if self.timing is None else (records.c.timing == self.timing,)

    def _prefer_timing(self, best: Callable[..., Sequence[Row]]) -> Sequence[Row]:
        """The best rows of this handle's timing; of the other timing only where a workload has none.

        Within one workload the ranking stays on one scale. A workload tuned only
        before the timing changed (an upgraded history) still compiles with its
        best schedule, and a resumed search starts from it, instead of starting
        from nothing.
        """
        rows = best(*self._timed())
        if not rows and self.timing is not None:
            rows = best()
        return rows

    def _commit_record(self, record: TuningRecord, error: str | None, board: str | None = None) -> int:
        trace_json, run_secs, target_cfg, args_info = record_as_json(record)
        failed = error is not None or is_failed(run_secs)
        trace_text = canonical(trace_json)
        update = {
            "run_secs_json": None if run_secs is None else canonical(run_secs),
            "mean_run_sec": (
                None
                if failed or not has_schedule(trace_json)
                else sum(run_secs) / len(run_secs)
            ),
            "error": (error or UNKNOWN_FAILURE) if failed else None,
            "tvm_version": tvm.__version__,
            "created_at": time.time(),
        }
        target_text = canonical(target_cfg)
        with self._access("commit a tuning record", write=True) as engine:
            entry = self._commit(engine, record.workload)
            key = {
                "target_hash": sha256(target_text),
                "candidate_hash": sha256(trace_text),
                # one row per board: two boards' results for one candidate are both kept
                "board_id": f"{self._board_id}@{board}" if board else self._board_id,
                "timing": self.timing or "warm",
            }
            with engine.begin() as conn:
                if len(entry.ids) > 1:
                    # The candidate may be stored under another row of this workload.
                    existing = conn.execute(
                        sa.select(records.c.id)
                        .where(
                            records.c.workload_id.in_(entry.ids),
                            *(records.c[name] == value for name, value in key.items()),
                        )
                        .order_by(records.c.id)
                        .limit(1)
                    ).scalar_one_or_none()
                    if existing is not None:
                        conn.execute(
                            records.update().where(records.c.id == existing).values(**update)
                        )
                        return int(existing)
                # One atomic statement: a candidate measured before (by this or
                # another writer) keeps one row, with the newest result.
                return conn.execute(
                    insert_statement(conn, records)
                    .values(
                        workload_id=entry.ids[0],
                        **key,
                        **update,
                        target_json=target_text,
                        target_kind=target_cfg["kind"] if target_cfg else "",
                        trace_json=trace_text,
                        args_info_json=canonical(args_info),
                    )
                    .on_conflict_do_update(
                        index_elements=["workload_id", "target_hash", "candidate_hash", "board_id", "timing"],
                        set_=update,
                    )
                    .returning(records.c.id)
                ).scalar_one()

    def commit_measurement(self, record: TuningRecord, *, error: str | None = None, board: str | None = None) -> int:
        """Store a measurement (failed when ``error`` is given) and the board that made it; return its record id.

        ``board`` (the RPC server's ``host:port`` the tracker chose) is stored as
        ``<board id>@<board>``: the history's board id (the device key) says which
        kind of board, the suffix which one of several under that key.
        """
        return self._commit_record(record, error, board)

    def commit_tuning_record(self, record: TuningRecord) -> None:
        """Store a measurement; run_secs None or >= 1e9 (MetaSchedule's stub) is a failure."""
        self._commit_record(record, None)

    def commit_tuning_record_with_error(self, record: TuningRecord, error: str) -> None:
        """Store a failed measurement together with why it failed."""
        self._commit_record(record, error)

    def get_top_k(self, workload: Workload, top_k: int) -> list[TuningRecord]:
        return self._top_k(workload, top_k, None)

    def get_all_tuning_records(self) -> list[TuningRecord]:
        return self._all_records(None)

    def __len__(self) -> int:
        return self._count(None)

    def for_target(self, target: Target) -> TargetView:
        """What MetaSchedule should see of this history for ``target``: its records only, ranked on one scale.

        A history shared by several boards holds one best record per board; given the whole history,
        ``compile_relax`` could apply another board's schedule and a search would start from another
        board's fastest records. A tune, the untuned/tuned builds and deploy all read through a view.
        """
        return TargetView(self, target)

    def timings(self) -> list[str]:
        """The timings (``flushed``, ``warm``) the history's records were measured with, sorted."""
        with self._access("list record timings") as engine, engine.connect() as conn:
            return sorted(conn.execute(sa.select(records.c.timing).distinct()).scalars().all())

    @property
    def url(self) -> str:
        """The database URL, password masked."""
        return self._url.render_as_string(hide_password=True)

    def close(self) -> None:
        """Release the database connections; the history cannot be used afterwards.

        Not a context manager: ``with db:`` is MetaSchedule's "use this database for
        compile_relax" scope, inherited from ``ms.database.Database``.
        """
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None


@derived_object
class TargetView(ms.database.PyDatabase):
    """One target's records of a :class:`HistoryDatabase`, as MetaSchedule sees them (:meth:`HistoryDatabase.for_target`).

    Reads see that target only; writes go to the history as they are.
    """

    def __init__(self, history: HistoryDatabase, target: Target) -> None:
        self.history = history
        self.target = target
        self._target_hash = sha256(target_json(target))

    def has_workload(self, mod: IRModule) -> bool:
        return self.history.has_workload(mod)

    def commit_workload(self, mod: IRModule) -> Workload:
        return self.history.commit_workload(mod)

    def commit_tuning_record(self, record: TuningRecord) -> None:
        self.history.commit_tuning_record(record)

    def get_top_k(self, workload: Workload, top_k: int) -> list[TuningRecord]:
        return self.history._top_k(workload, top_k, self._target_hash)

    def get_all_tuning_records(self) -> list[TuningRecord]:
        return self.history._all_records(self._target_hash)

    def __len__(self) -> int:
        return self.history._count(self._target_hash)


def open_history(
    url_or_path: str, *, board_id: str = "", read_only: bool = False, timing: str | None = None
) -> HistoryDatabase:
    """Open (creating if needed) a tuning history usable as a MetaSchedule database.

    ``url_or_path`` is a file path (an SQLite file), ``sqlite:///PATH`` or
    ``postgresql://...``. ``board_id`` is stored with every record this handle
    writes. ``read_only`` refuses every write, for compiling from a shared history.
    ``timing`` (``flushed`` or ``warm``, see :func:`edgetune.measure.runner.timing_of`)
    is stored with every record written, and only records timed that way are read.
    """
    return HistoryDatabase(url_or_path, board_id=board_id, read_only=read_only, timing=timing)


# The derived TVM object forwards to the class above; register it so that
# isinstance(history, HistoryStore) holds for what open_history returns.
HistoryStore.register(HistoryDatabase)
