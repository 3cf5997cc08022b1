"""The SQL side of :class:`~edgetune.history.store.HistoryStore`'s reading and maintenance methods.

A mixin of :class:`~edgetune.history.database.HistoryDatabase`, kept apart so
that ``database.py`` stays the MetaSchedule database (workloads, commits,
top-k) and this file the bulk operations that statistics, suggest, dedupe,
prune, export and import run. Policies (argument checks, labels, file formats)
live in ``maintenance.py`` and ``suggest.py``; only queries live here.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from tvm.s_tir.meta_schedule.database import TuningRecord
from tvm.target import Target

from edgetune.common.failure import is_failed
from edgetune.common.tvm_json import load_tvm_json
from edgetune.common.choices import DEDUPE_METHODS
from edgetune.errors import HistoryError
from edgetune.history.schema import records, workloads
from edgetune.history.sql import RECORD_COLUMNS, has_schedule, insert_statement, sha256, target_json
from edgetune.history.store import (
    RECORD_FIELDS,
    WORKLOAD_FIELDS,
    BoardWorkloadSummary,
    BulkStore,
    DedupeResult,
    ImportResult,
    PruneResult,
    RecordGroup,
    RecordSummary,
    StoredWorkload,
)

if TYPE_CHECKING:

    from sqlalchemy.engine import Row

#: Columns an import replaces when the file holds a newer measurement: all but
#: those identifying the candidate (target, trace).
RESULT_FIELDS = tuple(
    f for f in RECORD_FIELDS
    if f not in ("target_json", "target_kind", "trace_json", "candidate_hash", "board_id", "timing")
)
_DELETE_CHUNK = 500


def _mean(run_secs_json: str | None) -> float | None:
    """Mean of a stored run-time list; None when it is not a valid measurement."""
    try:
        secs = [float(sec) for sec in json.loads(run_secs_json or "null")]
    except (TypeError, ValueError):
        return None
    if is_failed(secs):
        return None
    return sum(secs) / len(secs)


def _delete_records(conn: Connection, ids: list[int]) -> None:
    for start in range(0, len(ids), _DELETE_CHUNK):
        chunk = ids[start : start + _DELETE_CHUNK]
        conn.execute(records.delete().where(records.c.id.in_(chunk)))


class SqlOperations(BulkStore):
    """Bulk reads and maintenance writes over the history tables.

    Composed into a :class:`~edgetune.history.database.HistoryDatabase` (its
    ``bulk``), whose engine access and workload cache (``core``) it uses.
    """

    def __init__(self, core: Any) -> None:
        self._core = core

    # ---------------------------------------------------------------- reading

    def workloads(self, ids: Iterable[int] | None = None) -> dict[int, StoredWorkload]:
        with self._core._access("read workloads") as engine, engine.connect() as conn:
            if ids is None:
                return dict(self._core._all_workloads(conn))
            wanted = set(ids)
            entries = self._core._entries(conn, wanted)
            return {row_id: entries[row_id] for row_id in wanted if row_id in entries}

    def board_summaries(self) -> list[BoardWorkloadSummary]:
        ok = sa.case((records.c.mean_run_sec.is_(None), 0), else_=1)
        stmt = sa.select(
            records.c.board_id, records.c.workload_id, sa.func.count(), sa.func.sum(ok),
            sa.func.min(records.c.mean_run_sec), sa.func.max(records.c.created_at),
        ).group_by(records.c.board_id, records.c.workload_id)
        with self._core._access("read tuning records") as engine, engine.connect() as conn:
            rows = conn.execute(stmt).all()
        return [
            BoardWorkloadSummary(str(board), int(wid), int(count), int(good or 0), None if best is None else float(best), float(last))
            for board, wid, count, good, best, last in rows
        ]

    def record_groups(self) -> list[RecordGroup]:
        ok = sa.case((records.c.mean_run_sec.is_not(None), 1), else_=0)
        bad = sa.case((records.c.error.is_not(None), 1), else_=0)
        stmt = sa.select(
            records.c.workload_id,
            records.c.target_hash,
            records.c.timing,
            sa.func.min(records.c.target_json).label("target_json"),
            sa.func.min(records.c.args_info_json).label("args_info_json"),
            sa.func.count().label("count"),
            sa.func.sum(ok).label("successful"),
            sa.func.sum(bad).label("failed"),
            sa.func.min(records.c.mean_run_sec).label("best"),
            sa.func.min(records.c.created_at).label("first"),
            sa.func.max(records.c.created_at).label("last"),
        ).group_by(records.c.workload_id, records.c.target_hash, records.c.timing)
        boards_stmt = sa.select(
            records.c.workload_id, records.c.target_hash, records.c.timing, records.c.board_id
        ).distinct()
        with self._core._access("read tuning records") as engine, engine.connect() as conn:
            rows = conn.execute(stmt).all()
            board_rows = conn.execute(boards_stmt).all()
            entries = self._core._entries(conn, {row.workload_id for row in rows})
        boards: dict[tuple[int, str, str], set[str]] = defaultdict(set)
        for row in board_rows:
            boards[(id(entries[row.workload_id]), row.target_hash, row.timing)].add(row.board_id)
        groups: dict[tuple[int, str, str], RecordGroup] = {}
        for row in rows:
            entry = entries[row.workload_id]
            key = (id(entry), row.target_hash, row.timing)
            group = groups.get(key)
            if group is None:
                groups[key] = RecordGroup(
                    workload=entry, target_json=row.target_json, args_info_json=row.args_info_json, timing=row.timing,
                    workload_ids=[row.workload_id], count=int(row.count), successful=int(row.successful or 0),
                    failed=int(row.failed or 0), best_sec=row.best, first=float(row.first), last=float(row.last),
                    boards=sorted(boards[key]),
                )
                continue
            group.workload_ids.append(row.workload_id)
            group.count += int(row.count)
            group.successful += int(row.successful or 0)
            group.failed += int(row.failed or 0)
            if row.best is not None and (group.best_sec is None or row.best < group.best_sec):
                group.best_sec = row.best
            group.first = min(group.first, float(row.first))
            group.last = max(group.last, float(row.last))
        for group in groups.values():
            group.workload_ids.sort()
        return list(groups.values())

    def record_summaries(self, target: Target | None = None) -> list[RecordSummary]:
        stmt = sa.select(
            records.c.id, records.c.workload_id, records.c.target_hash, records.c.target_json,
            records.c.mean_run_sec, records.c.created_at, records.c.timing,
        ).order_by(records.c.created_at, records.c.id)
        if target is not None:
            stmt = stmt.where(records.c.target_hash == sha256(target_json(target)))
        with self._core._access("read tuning records") as engine, engine.connect() as conn:
            rows = conn.execute(stmt).all()
            entries = self._core._entries(conn, {row.workload_id for row in rows})
        return [
            RecordSummary(
                id=row.id, workload=entries[row.workload_id], target_json=row.target_json,
                target_hash=row.target_hash, mean_run_sec=row.mean_run_sec, created_at=float(row.created_at),
                timing=row.timing,
            )
            for row in rows
        ]

    def records_by_id(self, record_ids: list[int]) -> list[TuningRecord]:
        with self._core._access("read tuning records") as engine, engine.connect() as conn:
            rows: dict[int, Row] = {}
            for start in range(0, len(record_ids), _DELETE_CHUNK):
                chunk = record_ids[start : start + _DELETE_CHUNK]
                stmt = sa.select(*RECORD_COLUMNS).where(records.c.id.in_(chunk))
                rows.update((row.id, row) for row in conn.execute(stmt).all())
            missing = [i for i in record_ids if i not in rows]
            if missing:
                raise HistoryError(f"{self._core.url}: no record with id {missing[0]}")  # type: ignore[attr-defined]
            found = self._core._to_records(conn, [rows[i] for i in record_ids])
            if len(found) != len(record_ids):
                raise HistoryError(f"{self._core.url}: a record asked for does not replay on its workload")  # type: ignore[attr-defined]
            return found

    # ----------------------------------------------------------- maintenance

    def dedupe_records(self, by: str, *, dry_run: bool = False) -> DedupeResult:
        if by not in DEDUPE_METHODS:
            raise HistoryError(f"dedupe by '{by}': use 'date' or 'average'")
        with self._core._write_transaction("dedupe tuning records") as conn:
            entries = self._core._all_workloads(conn)
            # duplicates: one candidate under several rows of a workload, or measured by several boards
            # (never across timings: a warm and a flushed time are on two scales)
            repeated = (
                sa.select(records.c.workload_id, records.c.target_hash, records.c.candidate_hash, records.c.timing)
                .group_by(records.c.workload_id, records.c.target_hash, records.c.candidate_hash, records.c.timing)
                .having(sa.func.count() > 1)
            )
            shared = {row_id for row_id, entry in entries.items() if len(entry.ids) > 1}
            rows = conn.execute(
                sa.select(
                    records.c.id, records.c.workload_id, records.c.target_hash, records.c.candidate_hash,
                    records.c.timing, records.c.created_at, records.c.run_secs_json, records.c.error,
                    records.c.trace_json,
                ).where(
                    sa.or_(
                        records.c.workload_id.in_(sorted(shared)),
                        sa.tuple_(
                            records.c.workload_id, records.c.target_hash, records.c.candidate_hash, records.c.timing
                        ).in_(repeated),
                    )
                )
            ).all()
            by_config: dict[tuple[int, str, str, str], list[Any]] = defaultdict(list)
            for row in rows:
                by_config[(id(entries[row.workload_id]), row.target_hash, row.candidate_hash, row.timing)].append(row)
            doomed: list[int] = []
            configurations = 0
            for dups in by_config.values():
                if len(dups) < 2:
                    continue
                configurations += 1
                dups.sort(key=lambda row: (row.created_at, row.id))
                doomed.extend(row.id for row in dups[:-1])
                if by == "average" and not dry_run:
                    _average_into(conn, dups[-1], dups)
            if dry_run:
                conn.rollback()
            else:
                _delete_records(conn, sorted(doomed))
            return DedupeResult(by, configurations, len(doomed), dry_run)

    def prune_records(
        self,
        *,
        failed: bool = False,
        created_before: float | None = None,
        keep_top: int | None = None,
        dry_run: bool = False,
    ) -> PruneResult:
        if keep_top is not None and keep_top < 0:
            raise HistoryError(f"keep_top must be >= 0, got {keep_top}")
        result = PruneResult(dry_run=dry_run)
        with self._core._write_transaction("prune tuning records") as conn:
            doomed: set[int] = set()
            if failed:
                ids = conn.execute(sa.select(records.c.id).where(records.c.error.is_not(None))).scalars().all()
                result.failed = len(ids)
                doomed.update(ids)
            if created_before is not None:
                ids = conn.execute(
                    sa.select(records.c.id).where(records.c.created_at < created_before)
                ).scalars().all()
                result.older = len(ids)
                doomed.update(ids)
            if keep_top is not None:
                entries = self._core._all_workloads(conn)
                rows = conn.execute(
                    sa.select(records.c.id, records.c.workload_id, records.c.target_hash, records.c.timing)
                    .where(records.c.mean_run_sec.is_not(None))
                    .order_by(records.c.mean_run_sec, records.c.id)
                ).all()
                seen: dict[tuple[int, str, str], int] = defaultdict(int)
                for row in rows:
                    key = (id(entries[row.workload_id]), row.target_hash, row.timing)
                    seen[key] += 1
                    if seen[key] > keep_top:
                        result.beyond_top += 1
                        doomed.add(row.id)
            result.removed = len(doomed)
            if dry_run:
                conn.rollback()
            else:
                _delete_records(conn, sorted(doomed))
        return result

    def export_rows(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        with self._core._access("export tuning records") as engine, engine.connect() as conn:
            workload_rows = conn.execute(
                sa.select(workloads.c.id, *(workloads.c[name] for name in WORKLOAD_FIELDS)).order_by(workloads.c.id)
            ).all()
            record_rows = conn.execute(
                sa.select(records.c.id, records.c.workload_id, *(records.c[name] for name in RECORD_FIELDS)).order_by(
                    records.c.id
                )
            ).all()
        return [row._asdict() for row in workload_rows], [row._asdict() for row in record_rows]

    def import_rows(self, lines: Iterable[tuple[str, dict[str, Any]]]) -> ImportResult:
        result = ImportResult()
        with self._core._write_transaction("import tuning records") as conn:
            known: dict[int, StoredWorkload] = {}
            for where, obj in lines:
                try:
                    if obj["type"] == "workload":
                        known[obj["id"]] = self._import_workload(conn, obj, result)
                        continue
                    entry = known.get(obj["workload_id"])
                    if entry is None:
                        raise HistoryError(
                            f"{where}: record of workload {obj['workload_id']}, "
                            "which the file does not define before it"
                        )
                    _import_record(conn, entry, obj, result)
                except HistoryError:
                    raise
                except KeyError as err:
                    raise HistoryError(f"{where}: missing field {err}") from None
                except (RuntimeError, ValueError, TypeError) as err:
                    first = (str(err).strip().splitlines() or [type(err).__name__])[0]
                    raise HistoryError(f"{where}: invalid {obj.get('type')} line: {first}") from None
        return result

    def _import_workload(self, conn: Connection, obj: dict[str, Any], result: ImportResult) -> StoredWorkload:
        mod = load_tvm_json(obj["mod_json"])
        entry = self._core._find(conn, mod)
        if entry is not None:
            return entry
        result.workloads_added += 1
        return self._core._insert_workload(conn, mod, obj["mod_json"], float(obj["created_at"]))


def _average_into(conn: Connection, keep: Any, dups: list[Any]) -> None:
    """Give ``keep`` the average run time of the successful duplicates (the paper's "by average")."""
    costs = [c for c in (_mean(row.run_secs_json) for row in dups if row.error is None) if c is not None]
    if not costs:
        return
    average = sum(costs) / len(costs)
    valid = has_schedule(json.loads(keep.trace_json))
    conn.execute(
        records.update()
        .where(records.c.id == keep.id)
        .values(run_secs_json=json.dumps([average]), mean_run_sec=average if valid else None, error=None)
    )


def _import_record(conn: Connection, entry: StoredWorkload, obj: dict[str, Any], result: ImportResult) -> None:
    # exports of schema version 4 and older have no timing: their records were timed warm
    values = {name: obj[name] if name != "timing" else obj.get("timing", "warm") for name in RECORD_FIELDS}
    values["target_hash"] = sha256(values["target_json"])
    values["candidate_hash"] = sha256(values["trace_json"])
    existing = conn.execute(
        sa.select(records.c.id, *(records.c[name] for name in RESULT_FIELDS))
        .where(
            records.c.workload_id.in_(entry.ids),
            records.c.target_hash == values["target_hash"],
            records.c.candidate_hash == values["candidate_hash"],
            records.c.board_id == values["board_id"],
            records.c.timing == values["timing"],
        )
        .order_by(records.c.created_at.desc(), records.c.id.desc())
        .limit(1)
    ).first()
    if existing is None:
        inserted = conn.execute(
            insert_statement(conn, records)
            .values(workload_id=entry.ids[0], **values)
            .on_conflict_do_nothing(
                index_elements=["workload_id", "target_hash", "candidate_hash", "board_id", "timing"]
            )
        ).rowcount
        if inserted:
            result.added += 1
        else:
            result.skipped += 1
        return
    newer = float(values["created_at"]) > float(existing.created_at)
    same = all(getattr(existing, name) == values[name] for name in RESULT_FIELDS)
    if newer and not same:
        conn.execute(
            records.update().where(records.c.id == existing.id).values(**{name: values[name] for name in RESULT_FIELDS})
        )
        result.updated += 1
    else:
        result.skipped += 1
