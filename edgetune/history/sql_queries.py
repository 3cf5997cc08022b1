"""The history's record queries a tune, the cost model and the schedule library read: counts, successful and
fastest records, candidates already measured and their re-timing.

A mixin of :class:`~edgetune.history.database.HistoryDatabase`: it reaches the
tables through the handle's ``_access``/``_timed``/``_prefer_timing`` and turns
rows into MetaSchedule records with ``_to_records``/``_replayed``. Every query
keeps the handle's timing (see the class's docstring).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Row
from tvm.ir import IRModule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.database import TuningRecord, Workload
from tvm.s_tir.schedule import Trace
from tvm.target import Target

from edgetune.common.failure import FAILED_RUN_SECS, is_failed
from edgetune.errors import HistoryError
from edgetune.history.schema import records, workloads
from edgetune.history.sql import RECORD_COLUMNS, canonical, sha256, target_json
from edgetune.history.trace_codec import record_as_json

#: File names MetaSchedule's JSONDatabase uses inside a work_dir.
WORKLOAD_FILE = "database_workload.json"
TUNING_RECORD_FILE = "database_tuning_record.json"


class RecordQueries:
    """Read (and re-time) the records of a :class:`~edgetune.history.database.HistoryDatabase`."""

    def count_records(
        self,
        workload: Workload | IRModule | None = None,
        target: Target | None = None,
        successful_only: bool = False,
    ) -> int:
        """Number of records of this handle's timing, optionally of one workload/target."""
        stmt = sa.select(sa.func.count()).select_from(records).where(*self._timed())
        if target is not None:
            stmt = stmt.where(records.c.target_hash == sha256(target_json(target)))
        if successful_only:
            stmt = stmt.where(records.c.mean_run_sec.is_not(None))
        with self._access("count tuning records") as engine, engine.connect() as conn:
            if workload is not None:
                entry = self._find(conn, workload)
                if entry is None:
                    return 0
                stmt = stmt.where(records.c.workload_id.in_(entry.ids))
            return int(conn.execute(stmt).scalar_one())

    def successful_records(
        self, target: Target, *, limit: int = 5000, keep: Callable[[IRModule], bool] | None = None
    ) -> list[tuple[TuningRecord, str]]:
        """Successful records measured on ``target``, newest first, with their board id.

        What a cost model can be trained on before tuning (see
        :mod:`edgetune.costmodel.warmstart`); ignores the target filter.
        """
        where = (
            records.c.target_hash == sha256(target_json(target)),
            records.c.mean_run_sec.is_not(None),
            *self._timed(),
        )
        with self._access("read tuning records") as engine, engine.connect() as conn:
            if keep is not None:
                ids = {int(i) for i in conn.execute(sa.select(records.c.workload_id).where(*where).distinct()).scalars()}
                entries = self._entries(conn, ids)
                verdicts: dict[int, bool] = {}
                for entry in {id(e): e for e in entries.values()}.values():
                    verdicts[id(entry)] = bool(keep(entry.workload.mod))
                kept = sorted(i for i in ids if verdicts[id(entries[i])])
                if not kept:
                    return []
                if len(kept) < len(ids):
                    where = (*where, records.c.workload_id.in_(kept))
            stmt = (
                sa.select(*RECORD_COLUMNS, records.c.board_id)
                .where(*where)
                .order_by(records.c.created_at.desc(), records.c.id.desc())
                .limit(limit)
            )
            rows = conn.execute(stmt).all()
            return [(record, str(row.board_id)) for row, record in self._replayed(conn, rows)]

    def fastest_records(
        self, target: Target, *, per_workload: int = 2, keep: Callable[[IRModule], bool] | None = None
    ) -> list[TuningRecord]:
        ranked = (
            sa.select(
                *RECORD_COLUMNS,
                sa.func.row_number()
                .over(partition_by=records.c.workload_id, order_by=(records.c.mean_run_sec, records.c.id))
                .label("rank"),
                records.c.mean_run_sec,
            )
            .where(
                records.c.target_hash == sha256(target_json(target)),
                records.c.mean_run_sec.is_not(None),
                *self._timed(),
            )
            .subquery()
        )
        stmt = sa.select(ranked).where(ranked.c.rank <= per_workload).order_by(ranked.c.workload_id, ranked.c.rank)
        with self._access("read tuning records") as engine, engine.connect() as conn:
            rows = conn.execute(stmt).all()
            entries = self._entries(conn, {row.workload_id for row in rows})
            by_entry: dict[int, list[Row]] = {}
            verdicts: dict[int, bool] = {}
            for row in rows:
                entry = entries[row.workload_id]
                key = id(entry)
                if key not in verdicts:
                    verdicts[key] = keep is None or bool(keep(entry.workload.mod))
                if verdicts[key]:
                    by_entry.setdefault(key, []).append(row)
            # one workload stored under several rows (equal modules serialised apart) keeps its fastest overall
            kept = [row for group in by_entry.values()
                    for row in sorted(group, key=lambda r: (r.mean_run_sec, r.id))[:per_workload]]
            return self._to_records(conn, kept)

    def _candidate(
        self, workload: Workload | IRModule, target: Target, trace: Trace
    ) -> Row | None:
        with self._access("read tuning records") as engine, engine.connect() as conn:
            entry = self._find(conn, workload)
            if entry is None:
                return None
            # Serialise exactly as a committed record would be, so the hashes agree.
            trace_json, _, target_cfg, _ = record_as_json(TuningRecord(trace, entry.workload, None, target))
            return conn.execute(
                sa.select(records.c.run_secs_json, records.c.error)
                .where(
                    records.c.workload_id.in_(entry.ids),
                    records.c.target_hash == sha256(canonical(target_cfg)),
                    records.c.candidate_hash == sha256(canonical(trace_json)),
                    *self._timed(),
                )
                .order_by(records.c.id)
                .limit(1)
            ).first()

    def has_candidate(
        self, workload: Workload | IRModule, target: Target, trace: Trace
    ) -> bool:
        """Whether this exact trace was already measured on ``target`` (failed or not)."""
        return self._candidate(workload, target, trace) is not None

    def lookup_run_secs(
        self, workload: Workload | IRModule, target: Target, trace: Trace
    ) -> list[float] | None:
        """Stored run times of a measured candidate, ``[1e10]`` if it failed, None if unknown.

        A resumed run hands these back to MetaSchedule instead of measuring again.
        """
        row = self._candidate(workload, target, trace)
        if row is None:
            return None
        if row.error is not None:
            return [FAILED_RUN_SECS]
        return [float(sec) for sec in json.loads(row.run_secs_json)]

    def best_record(
        self, workload: Workload | IRModule, target: Target
    ) -> TuningRecord | None:
        """The fastest successful record of ``workload`` on ``target``, of this handle's timing if it has one."""
        with self._access("read tuning records") as engine, engine.connect() as conn:
            entry = self._find(conn, workload)
            if entry is None:
                return None

            def best(*timed: Any) -> Sequence[Row]:
                return conn.execute(
                    sa.select(*RECORD_COLUMNS)
                    .where(
                        records.c.workload_id.in_(entry.ids),
                        records.c.target_hash == sha256(target_json(target)),
                        records.c.mean_run_sec.is_not(None),
                        *timed,
                    )
                    .order_by(records.c.mean_run_sec, records.c.id)
                    .limit(4)  # the first that replays (_replayed)
                ).all()

            found = self._to_records(conn, self._prefer_timing(best))
            return found[0] if found else None

    def fastest_candidates(
        self, workload: Workload | IRModule, target: Target, count: int
    ) -> list[tuple[str, TuningRecord]]:
        """The ``count`` fastest distinct candidates of ``workload`` on ``target``, the fastest first, each with its hash.

        A candidate measured by two boards of one kind (two rows) is one entry, at its
        fastest row: the hash is what :meth:`retime_candidate` takes.
        """
        if count <= 0:
            return []
        with self._access("read tuning records") as engine, engine.connect() as conn:
            entry = self._find(conn, workload)
            if entry is None:
                return []

            def best(*timed: Any) -> Sequence[Row]:
                return conn.execute(
                    sa.select(*RECORD_COLUMNS, records.c.candidate_hash)
                    .where(
                        records.c.workload_id.in_(entry.ids),
                        records.c.target_hash == sha256(target_json(target)),
                        records.c.mean_run_sec.is_not(None),
                        *timed,
                    )
                    .order_by(records.c.mean_run_sec, records.c.id)
                    .limit(count * 8)  # a candidate on several boards has several rows
                ).all()

            kept: dict[str, Row] = {}
            for row in self._prefer_timing(best):
                if row.candidate_hash not in kept and len(kept) < count:
                    kept[row.candidate_hash] = row
            return [(row.candidate_hash, record) for row, record in self._replayed(conn, list(kept.values()))]

    def retime_candidate(
        self, workload: Workload | IRModule, target: Target, candidate_hash: str, run_secs: Sequence[float]
    ) -> int:
        """A candidate timed again: ``run_secs`` replace its run times on every board of this handle's kind; how many rows.

        The history keeps a candidate's newest result. Its rows under this board id
        (each ``<board id>@<server>`` that measured it, a run's loopback server among
        them) all take the new times, so an older, luckier row of the same candidate
        cannot stay the fastest (:mod:`edgetune.tuning.confirm`).
        """
        secs = [float(x) for x in run_secs]
        if not secs or is_failed(secs):
            raise HistoryError(f"run_secs must be a successful measurement, got {secs!r} instead")
        board = self._board_id
        with self._access("re-time a candidate", write=True) as engine, engine.begin() as conn:
            entry = self._find(conn, workload)
            if entry is None:
                return 0
            updated = conn.execute(
                records.update()
                .where(
                    records.c.workload_id.in_(entry.ids),
                    records.c.target_hash == sha256(target_json(target)),
                    records.c.candidate_hash == candidate_hash,
                    records.c.timing == (self.timing or "warm"),
                    records.c.error.is_(None),
                    sa.or_(records.c.board_id == board, records.c.board_id.startswith(board + "@", autoescape=True)),
                )
                .values(run_secs_json=canonical(secs), mean_run_sec=sum(secs) / len(secs), created_at=time.time())
            )
            return int(updated.rowcount or 0)

    def _top_k(self, workload: Workload, top_k: int, target_hash: str | None) -> list[TuningRecord]:
        if top_k < 0:
            raise ValueError(f"top_k must be non-negative, got {top_k}")
        with self._access("read tuning records") as engine, engine.connect() as conn:
            entry = self._find(conn, workload)
            if entry is None or top_k == 0:
                return []

            def best(*timed: Any) -> Sequence[Row]:
                return conn.execute(
                    _for_target(
                        sa.select(*RECORD_COLUMNS).where(
                            records.c.workload_id.in_(entry.ids), records.c.mean_run_sec.is_not(None), *timed
                        ),
                        target_hash,
                    )
                    .order_by(records.c.mean_run_sec, records.c.id)
                    .limit(top_k)
                ).all()

            return self._to_records(conn, self._prefer_timing(best))

    def _all_records(self, target_hash: str | None) -> list[TuningRecord]:
        with self._access("read tuning records") as engine, engine.connect() as conn:
            rows = conn.execute(
                _for_target(sa.select(*RECORD_COLUMNS).where(*self._timed()), target_hash).order_by(records.c.id)
            ).all()
            return self._to_records(conn, rows)

    def _count(self, target_hash: str | None) -> int:
        with self._access("count tuning records") as engine, engine.connect() as conn:
            stmt = _for_target(sa.select(sa.func.count()).select_from(records).where(*self._timed()), target_hash)
            return int(conn.execute(stmt).scalar_one())

    # ------------------------------------------------------------ edgetune API

    def export_json(self, directory: str | os.PathLike[str]) -> tuple[Path, Path]:
        """Write MetaSchedule JSONDatabase files (workloads, records) into ``directory``.

        The files are written by TVM's own JSONDatabase, so stock MetaSchedule reads
        them back exactly. Every workload and every record of this handle's timing
        (all of them without one) is exported; TVM's format has no timing, so a
        history holding both should be exported one timing at a time. Existing files
        of the same names are replaced.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        with self._access("export tuning records") as engine, engine.connect() as conn:
            ids = conn.execute(sa.select(workloads.c.id)).scalars().all()
            entries = self._entries(conn, ids)
            rows = conn.execute(
                sa.select(*RECORD_COLUMNS).where(*self._timed()).order_by(records.c.id)
            ).all()
            tuning_records = self._to_records(conn, rows)
        staging = Path(tempfile.mkdtemp(prefix=".edgetune-export-", dir=directory))
        try:
            json_db = ms.database.JSONDatabase(
                path_workload=str(staging / WORKLOAD_FILE),
                path_tuning_record=str(staging / TUNING_RECORD_FILE),
                allow_missing=True,
            )
            unique = {id(entry): entry for entry in entries.values()}.values()
            for entry in sorted(unique, key=lambda entry: entry.ids[0]):
                json_db.commit_workload(entry.workload.mod)
            for record in tuning_records:
                json_db.commit_tuning_record(record)
            result = (directory / WORKLOAD_FILE, directory / TUNING_RECORD_FILE)
            os.replace(staging / WORKLOAD_FILE, result[0])
            os.replace(staging / TUNING_RECORD_FILE, result[1])
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return result


def _for_target(stmt: sa.Select, target_hash: str | None) -> sa.Select:
    return stmt if target_hash is None else stmt.where(records.c.target_hash == target_hash)
