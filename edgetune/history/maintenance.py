"""Maintenance of a tuning history: statistics, dedupe, export/import, prune.

The history groups records as the paper's history database does (§III): by task
(the workload, i.e. the operator and its arguments) and target. A configuration
(workload, target, trace) measured more than once is a duplicate; within one
workload row the unique constraint forbids that, but a workload can have several
rows (structurally equal modules serialised differently, e.g. by another TVM
version), and a candidate may then be stored under each. :func:`dedupe` keeps
the newest measurement ("by date") or replaces them with one record of their
average run time ("by average").

The portable export is JSON lines, gzip-compressed when the file name ends in
``.gz``: a header (format, schema version, edgetune and TVM versions) and then
one line per workload row and per record, every column included.
"""

from __future__ import annotations

import gzip
import json
import os
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

import sqlalchemy as sa
import tvm
from sqlalchemy.engine import Connection

from edgetune import __version__
from edgetune.common.failure import is_failed
from edgetune.tasks.signature import block_names
from edgetune.errors import HistoryError
from edgetune.history.database import (
    TUNING_RECORD_FILE,
    WORKLOAD_FILE,
    HistoryDatabase,
    _has_schedule,
    _insert,
    _sha256,
    _Workload,
)
from edgetune.history.schema import SCHEMA_VERSION, records, workloads

#: ``format`` field of an export's header line.
EXPORT_FORMAT = "edgetune-history"
#: Record columns written to (and read from) an export, besides ``id``.
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
    "tvm_version",
    "created_at",
)
WORKLOAD_FIELDS = ("shash", "mod_hash", "mod_json", "created_at")
#: Columns an import replaces when the file holds a newer measurement: all
#: but those identifying the candidate (target, trace).
_RESULT_FIELDS = tuple(
    f for f in RECORD_FIELDS if f not in ("target_json", "target_kind", "trace_json", "candidate_hash")
)
_DELETE_CHUNK = 500


# ----------------------------------------------------------------------- helpers


def _task_name(mod: tvm.IRModule) -> str:
    """A readable name for a workload: its function's symbol, else its blocks."""
    names = []
    for gvar, func in mod.functions.items():
        attrs = getattr(func, "attrs", None)
        symbol = None
        try:
            if attrs is not None and "global_symbol" in attrs:
                symbol = str(attrs["global_symbol"])
        except Exception:  # noqa: BLE001 - a label only
            symbol = None
        name = symbol or gvar.name_hint
        if name == "main":
            blocks = block_names(mod)
            if blocks:
                name = "+".join(blocks[:3]) + ("+..." if len(blocks) > 3 else "")
        names.append(name)
    return ", ".join(sorted(names)) or "?"


def _args_label(args_info_json: str) -> str:
    """``float32[16,16], float32[16,16]`` from TuningRecord args_info JSON."""
    try:
        parts = []
        for info in json.loads(args_info_json):
            if info and info[0] == "TENSOR":
                parts.append(f"{info[1]}[{','.join(str(d) for d in info[2])}]")
            else:
                parts.append(str(info))
        return ", ".join(parts)
    except (ValueError, TypeError, IndexError):
        return "?"


def _target_label(target_json: str) -> str:
    """``llvm aarch64-linux-gnu cortex-a72`` from a target's canonical JSON."""
    try:
        config = json.loads(target_json)
    except ValueError:
        return "?"
    if not isinstance(config, dict):
        return str(config)
    words = [str(config.get("kind", "?"))]
    for key in ("mtriple", "mcpu", "model", "arch", "device"):
        value = config.get(key)
        if value:
            words.append(str(value))
    return " ".join(words)


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


# ------------------------------------------------------------------------- stats


@dataclass
class GroupStats:
    """Records of one task (workload and its arguments) on one target."""

    task: str
    args: str
    target: str
    workload_ids: list[int]
    count: int
    successful: int
    failed: int
    best_sec: float | None
    first: float
    last: float
    boards: list[str] = field(default_factory=list)


def history_stats(db: HistoryDatabase) -> list[GroupStats]:
    """Records grouped by workload (all its rows) and target, largest groups first."""
    ok = sa.case((records.c.mean_run_sec.is_not(None), 1), else_=0)
    bad = sa.case((records.c.error.is_not(None), 1), else_=0)
    stmt = sa.select(
        records.c.workload_id,
        records.c.target_hash,
        sa.func.min(records.c.target_json).label("target_json"),
        sa.func.min(records.c.args_info_json).label("args_info_json"),
        sa.func.count().label("count"),
        sa.func.sum(ok).label("successful"),
        sa.func.sum(bad).label("failed"),
        sa.func.min(records.c.mean_run_sec).label("best"),
        sa.func.min(records.c.created_at).label("first"),
        sa.func.max(records.c.created_at).label("last"),
    ).group_by(records.c.workload_id, records.c.target_hash)
    boards_stmt = sa.select(
        records.c.workload_id, records.c.target_hash, records.c.board_id
    ).distinct()
    with db._access("read tuning records") as engine, engine.connect() as conn:
        rows = conn.execute(stmt).all()
        board_rows = conn.execute(boards_stmt).all()
        entries = db._entries(conn, {row.workload_id for row in rows})
    boards: dict[tuple[int, str], set[str]] = defaultdict(set)
    for row in board_rows:
        boards[(id(entries[row.workload_id]), row.target_hash)].add(row.board_id)
    groups: dict[tuple[int, str], GroupStats] = {}
    for row in rows:
        entry = entries[row.workload_id]
        key = (id(entry), row.target_hash)
        group = groups.get(key)
        if group is None:
            groups[key] = GroupStats(
                task=_task_name(entry.workload.mod),
                args=_args_label(row.args_info_json),
                target=_target_label(row.target_json),
                workload_ids=[row.workload_id],
                count=int(row.count),
                successful=int(row.successful or 0),
                failed=int(row.failed or 0),
                best_sec=row.best,
                first=float(row.first),
                last=float(row.last),
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
    result = list(groups.values())
    for group in result:
        group.workload_ids.sort()
    result.sort(key=lambda g: (g.task, g.args, g.target, g.workload_ids))
    return result


# ------------------------------------------------------------------------ dedupe


@dataclass
class DedupeResult:
    by: str
    configurations: int  # configurations that had duplicates
    removed: int  # rows deleted
    dry_run: bool = False


def dedupe(db: HistoryDatabase, by: str = "date", *, dry_run: bool = False) -> DedupeResult:
    """Keep one record per configuration (workload, target, trace).

    ``by="date"`` keeps the newest measurement; ``by="average"`` keeps the newest
    row but replaces its result by the average run time of the successful
    duplicates (``run_secs`` becomes ``[average]``), as the paper's history does.
    """
    if by not in ("date", "average"):
        raise HistoryError(f"dedupe by '{by}': use 'date' or 'average'")
    with db._write_transaction("dedupe tuning records") as conn:
        entries = db._all_workloads(conn)
        shared = {row_id for row_id, entry in entries.items() if len(entry.ids) > 1}
        if not shared:
            return DedupeResult(by, 0, 0, dry_run)
        rows = conn.execute(
            sa.select(
                records.c.id,
                records.c.workload_id,
                records.c.target_hash,
                records.c.candidate_hash,
                records.c.created_at,
                records.c.run_secs_json,
                records.c.error,
                records.c.trace_json,
            ).where(records.c.workload_id.in_(sorted(shared)))
        ).all()
        by_config: dict[tuple[int, str, str], list[Any]] = defaultdict(list)
        for row in rows:
            entry = entries[row.workload_id]
            by_config[(id(entry), row.target_hash, row.candidate_hash)].append(row)
        doomed: list[int] = []
        configurations = 0
        for dups in by_config.values():
            if len(dups) < 2:
                continue
            configurations += 1
            dups.sort(key=lambda row: (row.created_at, row.id))
            keep, older = dups[-1], dups[:-1]
            doomed.extend(row.id for row in older)
            if by == "average" and not dry_run:
                costs = [c for c in (_mean(row.run_secs_json) for row in dups if row.error is None) if c is not None]
                if costs:
                    average = sum(costs) / len(costs)
                    valid = _has_schedule(json.loads(keep.trace_json))
                    conn.execute(
                        records.update()
                        .where(records.c.id == keep.id)
                        .values(
                            run_secs_json=json.dumps([average]),
                            mean_run_sec=average if valid else None,
                            error=None,
                        )
                    )
        if not dry_run:
            _delete_records(conn, sorted(doomed))
        else:
            conn.rollback()
        return DedupeResult(by, configurations, len(doomed), dry_run)


# ------------------------------------------------------------------------- prune


@dataclass
class PruneResult:
    failed: int = 0  # failed records selected by --failed
    older: int = 0  # records selected by --older-than
    beyond_top: int = 0  # successful records beyond the K fastest
    removed: int = 0  # distinct records removed (or that would be)
    dry_run: bool = False


def prune(
    db: HistoryDatabase,
    *,
    keep_top: int | None = None,
    failed: bool = False,
    older_than_days: float | None = None,
    dry_run: bool = False,
) -> PruneResult:
    """Delete records: failed ones, older ones, and successful ones beyond the top K.

    The criteria add up (a record matching any of them goes). ``keep_top`` counts
    per workload and target; failed and never-valid records are not ranked, only
    ``failed`` removes failures. ``dry_run`` counts without deleting.
    """
    if keep_top is None and not failed and older_than_days is None:
        raise HistoryError("nothing to prune: give --keep-top K, --failed or --older-than DAYS")
    if keep_top is not None and keep_top < 0:
        raise HistoryError(f"--keep-top must be >= 0, got {keep_top}")
    if older_than_days is not None and older_than_days < 0:
        raise HistoryError(f"--older-than must be >= 0 days, got {older_than_days}")
    result = PruneResult(dry_run=dry_run)
    with db._write_transaction("prune tuning records") as conn:
        doomed: set[int] = set()
        if failed:
            ids = conn.execute(
                sa.select(records.c.id).where(records.c.error.is_not(None))
            ).scalars().all()
            result.failed = len(ids)
            doomed.update(ids)
        if older_than_days is not None:
            cutoff = time.time() - older_than_days * 86400.0
            ids = conn.execute(
                sa.select(records.c.id).where(records.c.created_at < cutoff)
            ).scalars().all()
            result.older = len(ids)
            doomed.update(ids)
        if keep_top is not None:
            entries = db._all_workloads(conn)
            rows = conn.execute(
                sa.select(
                    records.c.id, records.c.workload_id, records.c.target_hash
                )
                .where(records.c.mean_run_sec.is_not(None))
                .order_by(records.c.mean_run_sec, records.c.id)
            ).all()
            seen: dict[tuple[int, str], int] = defaultdict(int)
            for row in rows:
                key = (id(entries[row.workload_id]), row.target_hash)
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


# ------------------------------------------------------------------ export/import


def _open_text(path: Path, mode: str, compressed: bool = False) -> IO[str]:
    """A text file; reading detects gzip by its magic bytes."""
    if mode == "r":
        with open(path, "rb") as raw:
            compressed = raw.read(2) == b"\x1f\x8b"
    if compressed:
        return gzip.open(path, mode + "t", encoding="utf-8")
    return open(path, mode, encoding="utf-8")


def export_history(db: HistoryDatabase, path: str | os.PathLike[str]) -> tuple[int, int]:
    """Write every workload row and record to ``path``; returns (workloads, records).

    JSON lines (gzip when the name ends in ``.gz``), written to a temporary file
    and renamed, so an interrupted export never leaves half a file.
    """
    path = Path(path)
    with db._access("export tuning records") as engine, engine.connect() as conn:
        workload_rows = conn.execute(
            sa.select(workloads.c.id, *(workloads.c[name] for name in WORKLOAD_FIELDS)).order_by(
                workloads.c.id
            )
        ).all()
        record_rows = conn.execute(
            sa.select(
                records.c.id,
                records.c.workload_id,
                *(records.c[name] for name in RECORD_FIELDS),
            ).order_by(records.c.id)
        ).all()
    header = {
        "format": EXPORT_FORMAT,
        "schema_version": SCHEMA_VERSION,
        "edgetune_version": __version__,
        "tvm_version": tvm.__version__,
        "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "source": db.url,
        "workloads": len(workload_rows),
        "records": len(record_rows),
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with _open_text(staging, "w", compressed=path.name.endswith(".gz")) as out:
            out.write(json.dumps(header, sort_keys=True) + "\n")
            for row in workload_rows:
                out.write(json.dumps({"type": "workload", **row._asdict()}, sort_keys=True) + "\n")
            for row in record_rows:
                out.write(json.dumps({"type": "record", **row._asdict()}, sort_keys=True) + "\n")
        os.replace(staging, path)
    except OSError as err:
        raise HistoryError(f"{path}: cannot write the export: {err}") from None
    return len(workload_rows), len(record_rows)


@dataclass
class ImportResult:
    added: int = 0
    updated: int = 0
    skipped: int = 0
    workloads_added: int = 0


def _read_export(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) of an export, after checking its header."""
    try:
        with _open_text(path, "r") as lines:
            first = lines.readline()
            try:
                header = json.loads(first)
            except ValueError:
                header = None
            if not isinstance(header, dict) or header.get("format") != EXPORT_FORMAT:
                raise HistoryError(
                    f"{path}: not an edgetune history export (no '{EXPORT_FORMAT}' header line)"
                )
            version = header.get("schema_version")
            if version != SCHEMA_VERSION:
                raise HistoryError(
                    f"{path}: exported with history schema version {version}, this edgetune "
                    f"reads version {SCHEMA_VERSION}"
                )
            for number, line in enumerate(lines, start=2):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except ValueError as err:
                    raise HistoryError(f"{path}:{number}: not JSON ({err})") from None
                if not isinstance(obj, dict) or obj.get("type") not in ("workload", "record"):
                    raise HistoryError(f"{path}:{number}: neither a workload nor a record line")
                yield number, obj
    except (OSError, EOFError, gzip.BadGzipFile) as err:
        raise HistoryError(f"{path}: cannot read the export: {err}") from None


def import_history(db: HistoryDatabase, path: str | os.PathLike[str]) -> ImportResult:
    """Merge an export (or a TVM JSON database directory) into ``db``.

    Idempotent: a record already stored (same workload, target and trace) is
    skipped, or updated when the file holds a newer measurement of it. Workloads
    are matched structurally, so a module already in the history gets no new row.
    One transaction: a bad line imports nothing.
    """
    path = Path(path)
    if path.is_dir() or path.name in (WORKLOAD_FILE, TUNING_RECORD_FILE):
        return _import_tvm_json(db, path if path.is_dir() else path.parent)
    if not path.is_file():
        raise HistoryError(f"{path}: no such export file")
    result = ImportResult()
    with db._write_transaction("import tuning records") as conn:
        known: dict[int, _Workload] = {}
        for number, obj in _read_export(path):
            try:
                if obj["type"] == "workload":
                    known[obj["id"]] = _import_workload(db, conn, obj, result)
                else:
                    entry = known.get(obj["workload_id"])
                    if entry is None:
                        raise HistoryError(
                            f"{path}:{number}: record of workload {obj['workload_id']}, "
                            "which the file does not define before it"
                        )
                    _import_record(conn, entry, obj, result)
            except HistoryError:
                raise
            except KeyError as err:
                raise HistoryError(f"{path}:{number}: missing field {err}") from None
            except (RuntimeError, ValueError, TypeError) as err:
                first = (str(err).strip().splitlines() or [type(err).__name__])[0]
                raise HistoryError(f"{path}:{number}: invalid {obj['type']} line: {first}") from None
    return result


def _import_workload(
    db: HistoryDatabase, conn: Connection, obj: dict[str, Any], result: ImportResult
) -> _Workload:
    mod = tvm.ir.load_json(obj["mod_json"])
    entry = db._find(conn, mod)
    if entry is not None:
        return entry
    result.workloads_added += 1
    return db._insert_workload(conn, mod, obj["mod_json"], float(obj["created_at"]))


def _import_record(
    conn: Connection, entry: _Workload, obj: dict[str, Any], result: ImportResult
) -> None:
    values = {name: obj[name] for name in RECORD_FIELDS}
    values["target_hash"] = _sha256(values["target_json"])
    values["candidate_hash"] = _sha256(values["trace_json"])
    existing = conn.execute(
        sa.select(records.c.id, *(records.c[name] for name in _RESULT_FIELDS))
        .where(
            records.c.workload_id.in_(entry.ids),
            records.c.target_hash == values["target_hash"],
            records.c.candidate_hash == values["candidate_hash"],
        )
        .order_by(records.c.created_at.desc(), records.c.id.desc())
        .limit(1)
    ).first()
    if existing is None:
        inserted = conn.execute(
            _insert(conn, records)
            .values(workload_id=entry.ids[0], **values)
            .on_conflict_do_nothing(index_elements=["workload_id", "target_hash", "candidate_hash"])
        ).rowcount
        if inserted:
            result.added += 1
        else:
            result.skipped += 1
        return
    newer = float(values["created_at"]) > float(existing.created_at)
    same = all(getattr(existing, name) == values[name] for name in _RESULT_FIELDS)
    if newer and not same:
        conn.execute(
            records.update()
            .where(records.c.id == existing.id)
            .values(**{name: values[name] for name in _RESULT_FIELDS})
        )
        result.updated += 1
    else:
        result.skipped += 1


def _import_tvm_json(db: HistoryDatabase, directory: Path) -> ImportResult:
    """Import MetaSchedule JSONDatabase files (``edgetune db export-tvm`` output)."""
    from tvm.s_tir import meta_schedule as ms

    path_workload = directory / WORKLOAD_FILE
    path_record = directory / TUNING_RECORD_FILE
    for required in (path_workload, path_record):
        if not required.is_file():
            raise HistoryError(f"{required}: no such file (a TVM JSON database needs both files)")
    try:
        json_db = ms.database.JSONDatabase(
            path_workload=str(path_workload),
            path_tuning_record=str(path_record),
            allow_missing=False,
        )
        tuning_records = json_db.get_all_tuning_records()
    except (RuntimeError, ValueError, TypeError) as err:
        raise HistoryError(
            f"{directory}: not a TVM JSON database: {str(err).strip().splitlines()[0]}"
        ) from None
    result = ImportResult()
    for record in tuning_records:
        if db.has_candidate(record.workload, record.target, record.trace):
            result.skipped += 1
            continue
        db.commit_tuning_record(record)
        result.added += 1
    return result
