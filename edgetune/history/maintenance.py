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
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

import tvm

from edgetune._version import __version__
from edgetune.common.choices import DEDUPE_METHODS
from edgetune.errors import HistoryError
from edgetune.history.sql_queries import TUNING_RECORD_FILE, WORKLOAD_FILE
from edgetune.history.schema import SCHEMA_VERSION
from edgetune.history.store import (
    DedupeResult,
    HistoryStore,
    ImportResult,
    PruneResult,
)
from edgetune.tasks.signature import block_names

#: ``format`` field of an export's header line.
EXPORT_FORMAT = "edgetune-history"


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


# ------------------------------------------------------------------------- stats


@dataclass
class GroupStats:
    """Records of one task (workload and its arguments) on one target, timed one way."""

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


def history_stats(db: HistoryStore) -> list[GroupStats]:
    """Records grouped by workload (all its rows), target and timing, largest groups first."""
    result = [
        GroupStats(
            task=_task_name(group.workload.workload.mod),
            args=_args_label(group.args_info_json),
            target=f"{_target_label(group.target_json)}, {group.timing}",
            workload_ids=group.workload_ids,
            count=group.count,
            successful=group.successful,
            failed=group.failed,
            best_sec=group.best_sec,
            first=group.first,
            last=group.last,
            boards=group.boards,
        )
        for group in db.bulk.record_groups()
    ]
    result.sort(key=lambda g: (g.task, g.args, g.target, g.workload_ids))
    return result


# ------------------------------------------------------------------------ dedupe


def dedupe(db: HistoryStore, by: str = "date", *, dry_run: bool = False) -> DedupeResult:
    """Keep one record per configuration (workload, target, trace).

    ``by="date"`` keeps the newest measurement; ``by="average"`` keeps the newest
    row but replaces its result by the average run time of the successful
    duplicates (``run_secs`` becomes ``[average]``), as the paper's history does.
    """
    if by not in DEDUPE_METHODS:
        raise HistoryError(f"dedupe by '{by}': use 'date' or 'average'")
    return db.bulk.dedupe_records(by, dry_run=dry_run)


# ------------------------------------------------------------------------- prune


def prune(
    db: HistoryStore,
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
    cutoff = None if older_than_days is None else time.time() - older_than_days * 86400.0
    return db.bulk.prune_records(failed=failed, created_before=cutoff, keep_top=keep_top, dry_run=dry_run)


# ------------------------------------------------------------------ export/import


def _open_text(path: Path, mode: str, compressed: bool = False) -> IO[str]:
    """A text file; reading detects gzip by its magic bytes."""
    if mode == "r":
        with open(path, "rb") as raw:
            compressed = raw.read(2) == b"\x1f\x8b"
    if compressed:
        return gzip.open(path, mode + "t", encoding="utf-8")
    return open(path, mode, encoding="utf-8")


def export_history(db: HistoryStore, path: str | os.PathLike[str]) -> tuple[int, int]:
    """Write every workload row and record to ``path``; returns (workloads, records).

    JSON lines (gzip when the name ends in ``.gz``), written to a temporary file
    and renamed, so an interrupted export never leaves half a file.
    """
    path = Path(path)
    workload_rows, record_rows = db.bulk.export_rows()
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
                out.write(json.dumps({"type": "workload", **row}, sort_keys=True) + "\n")
            for row in record_rows:
                out.write(json.dumps({"type": "record", **row}, sort_keys=True) + "\n")
        os.replace(staging, path)
    except OSError as err:
        raise HistoryError(f"{path}: cannot write the export: {err}") from None
    return len(workload_rows), len(record_rows)


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
            # version 4 lines lack only the timing, which import reads as "warm"
            if version not in (4, SCHEMA_VERSION):
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


def import_history(db: HistoryStore, path: str | os.PathLike[str]) -> ImportResult:
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
    return db.bulk.import_rows((f"{path}:{number}", obj) for number, obj in _read_export(path))


def _import_tvm_json(db: HistoryStore, directory: Path) -> ImportResult:
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
