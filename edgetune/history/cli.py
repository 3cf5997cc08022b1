"""``edgetune db stats | dedupe | export | import | prune``: history maintenance.

Thin wrappers over :mod:`edgetune.history.maintenance`; every failure is a
:class:`~edgetune.errors.HistoryError`, which the main CLI prints as one line.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from edgetune.common.choices import DEDUPE_METHODS, TIMINGS
from edgetune.errors import HistoryError

DB_HELP = "history database: a path, sqlite:///PATH or postgresql://USER@HOST/DBNAME"

STATS_EPILOG = """\
examples:
  edgetune db stats --db edgetune-out/tiny-cnn-host/history.db
  edgetune db stats --db postgresql://tuner@db.lab/tuning
"""
DEDUPE_EPILOG = """\
examples:
  edgetune db dedupe --db history.db --by date      keep the newest measurement
  edgetune db dedupe --db history.db --by average   one record with the average run time

A configuration is a workload, a target and a trace. The history stores each
once per workload row; duplicates come from a workload stored in several rows
(e.g. serialised by another TVM version) or from imports.
"""
EXPORT_EPILOG = """\
examples:
  edgetune db export history.jsonl.gz --db edgetune-out/tiny-cnn-host/history.db
  edgetune db export team.jsonl --db postgresql://tuner@db.lab/tuning

JSON lines (gzip when FILE ends in .gz): a header with the schema version and
the edgetune/TVM versions, then every workload and record with every column.
For TVM's own JSON database format use `edgetune db export-tvm`.
"""
IMPORT_EPILOG = """\
examples:
  edgetune db import history.jsonl.gz --db postgresql://tuner@db.lab/tuning
  edgetune db import tvm-json-dir/ --db history.db   (database_*.json from export-tvm)

Idempotent: a record already in the history is skipped, or updated when the
file holds a newer measurement of it; importing a file twice adds nothing.
"""
PRUNE_EPILOG = """\
examples:
  edgetune db prune --db history.db --failed --dry-run
  edgetune db prune --db history.db --keep-top 32       per workload and target
  edgetune db prune --db history.db --older-than 90 --failed

Criteria add up: a record matching any of them is removed. Removed candidates
are measured again by a later `edgetune tune`.
"""


UPGRADE_EPILOG = """examples:
  edgetune db export --db old.db old-backup.jsonl.gz   # keep a copy first
  edgetune db upgrade --db old.db
  edgetune db upgrade --db postgresql://tuner@db-host/edgetune

An up-to-date history is left as it is. A history written by a newer edgetune
is refused: upgrade edgetune instead.
"""


def db_action(db_sub: Any) -> "_Action":
    """A factory of ``edgetune db ACTION`` subparsers, for the actions here and the ones other packages add."""

    def action(name: str, help_: str, description: str, epilog: str) -> argparse.ArgumentParser:
        return db_sub.add_parser(
            name,
            help=help_,
            description=description,
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    return action


def add_db_commands(db_sub: Any) -> None:
    """Add the maintenance actions to the ``edgetune db`` subparsers (``db suggest`` is search's: search/cli.py)."""
    action = db_action(db_sub)
    _add_record_commands(action)
    _add_transfer_commands(action, db_sub)


_Action = Callable[[str, str, str, str], argparse.ArgumentParser]


def _add_record_commands(action: _Action) -> None:
    """``stats``, ``dedupe`` and ``prune``: look at and clean the records."""
    stats = action(
        "stats",
        "records per task and target: counts, best latency, dates",
        "Show the history's records grouped by task (workload and its arguments) and target: "
        "how many, how many succeeded and failed, the best mean latency, first and last date.",
        STATS_EPILOG,
    )
    stats.add_argument("--db", required=True, metavar="URL", help=DB_HELP)
    stats.set_defaults(func=_run_stats)

    dedupe = action(
        "dedupe",
        "merge repeated measurements of one configuration",
        "Keep one record per configuration (workload, target, trace): the newest one "
        "(--by date) or one with the average run time of the duplicates (--by average).",
        DEDUPE_EPILOG,
    )
    dedupe.add_argument("--db", required=True, metavar="URL", help=DB_HELP)
    dedupe.add_argument("--by", choices=DEDUPE_METHODS, default="date", help="which result survives (default: date)")
    dedupe.add_argument("--dry-run", action="store_true", help="count, do not change anything")
    dedupe.set_defaults(func=_run_dedupe)

    prune = action(
        "prune",
        "delete failed, old, or slow records",
        "Delete records: failed ones (--failed), ones older than DAYS (--older-than), and "
        "successful ones beyond the K fastest of each workload and target (--keep-top).",
        PRUNE_EPILOG,
    )
    prune.add_argument("--db", required=True, metavar="URL", help=DB_HELP)
    prune.add_argument("--keep-top", type=int, metavar="K", help="keep the K fastest successful records per workload and target")
    prune.add_argument("--failed", action="store_true", help="delete failed measurements")
    prune.add_argument("--older-than", type=float, metavar="DAYS", help="delete records measured more than DAYS days ago")
    prune.add_argument("--dry-run", action="store_true", help="count, do not delete")
    prune.set_defaults(func=_run_prune)


def _add_transfer_commands(action: _Action, db_sub: Any) -> None:
    """``export``, ``import``, ``export-tvm`` and ``upgrade``: move a history and bring it up to date."""
    export = action(
        "export",
        "write the whole history to a portable file",
        "Write every workload and record, every column, to FILE (JSON lines; gzip if FILE "
        "ends in .gz), to move a history between machines or into PostgreSQL.",
        EXPORT_EPILOG,
    )
    export.add_argument("file", metavar="FILE")
    export.add_argument("--db", required=True, metavar="URL", help=DB_HELP)
    export.set_defaults(func=_run_export)

    imp = action(
        "import",
        "merge an exported file (or a TVM JSON database) into the history",
        "Merge FILE, written by `edgetune db export`, or a directory with TVM's "
        "database_workload.json and database_tuning_record.json, into the history "
        "(created if needed).",
        IMPORT_EPILOG,
    )
    imp.add_argument("file", metavar="FILE")
    imp.add_argument("--db", required=True, metavar="URL", help=DB_HELP)
    imp.set_defaults(func=_run_import)

    upgrade = action(
        "upgrade",
        "bring an older history to this edgetune's schema version",
        "Apply the history's schema migrations (Alembic revisions shipped with edgetune), "
        "one transaction; opening a history never changes its schema, an older one is refused "
        "with a message naming this command.",
        UPGRADE_EPILOG,
    )
    upgrade.add_argument("--db", required=True, metavar="URL", help=DB_HELP)
    upgrade.set_defaults(func=_run_upgrade)

    export_tvm = db_sub.add_parser(
        "export-tvm",
        help="write the history in TVM's JSON database format",
        description="Write database_workload.json and database_tuning_record.json, readable by "
        "stock MetaSchedule (ms.database.JSONDatabase), into DIR.",
    )
    export_tvm.add_argument("dir", metavar="DIR")
    export_tvm.add_argument("--db", required=True, metavar="URL", help=DB_HELP)
    export_tvm.add_argument(
        "--timing",
        choices=TIMINGS,
        default=None,
        help="export only the records timed this way (flushed caches or warm); TVM's format cannot tell them "
        "apart, so a history holding both needs it (default: the history's only timing)",
    )
    export_tvm.set_defaults(func=_run_export_tvm)


def _run_export_tvm(args: argparse.Namespace) -> int:
    history = _open(args.db, read_only=True)
    try:
        timing = args.timing
        if timing is None:
            held = history.timings()
            if len(held) > 1:
                raise HistoryError(
                    f"history '{history.url}' holds records timed {' and '.join(held)}, which TVM's format cannot tell "
                    "apart: pick one with --timing"
                )
            timing = held[0] if held else None
        if timing is not None:
            history.close()
            history = _open(args.db, read_only=True, timing=timing)
        workload_file, record_file = history.export_json(args.dir)
        label = f", timed {timing}" if timing else ""
        print(f"wrote {workload_file} and {record_file} ({history.count_records()} records{label})")
    finally:
        history.close()
    return 0


def _open(location: str, *, read_only: bool = False, create: bool = False, timing: str | None = None):
    from edgetune.history import open_history

    if not create and "://" not in location and not Path(location).expanduser().exists():
        raise HistoryError(f"history database '{location}' not found")
    return open_history(location, read_only=read_only, timing=timing)


def _date(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, timezone.utc).strftime("%Y-%m-%d %H:%M")


def _latency(sec: float | None) -> str:
    if sec is None:
        return "-"
    if sec >= 1.0:
        return f"{sec:.3f} s"
    if sec >= 1e-3:
        return f"{sec * 1e3:.3f} ms"
    return f"{sec * 1e6:.1f} us" if sec >= 1e-5 else f"{sec * 1e6:.3f} us"  # not "0.0 us" for a 31 ns kernel


def _console():
    """stdout: the terminal's width (or $COLUMNS); 200 columns into a pipe or file, so logs keep whole rows."""
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 200, highlight=False)


def _print_fitting(console: Any, wide: Any, narrow: Any) -> None:
    """The wide table when it fits the console at its natural width, else the narrow one (``narrow()`` builds it).

    Below that width rich would squeeze every column, cutting names with an
    ellipsis and dates mid-way; the narrow tables stack fields instead.
    """
    from rich.measure import Measurement

    natural = Measurement.get(console, console.options.update_width(10_000), wide).maximum
    console.print(wide if natural <= console.width else narrow())


def _when(first: float, last: float) -> str:
    """First and last date on two lines; the second without the day when it is the same day."""
    start, end = _date(first), _date(last)
    if start == end:
        return start
    return f"{start}\nto {end[11:] if end[:10] == start[:10] else end}"


def _run_stats(args: argparse.Namespace) -> int:
    from rich.table import Table

    from edgetune.history.maintenance import history_stats

    history = _open(args.db, read_only=True)
    try:
        groups = history_stats(history)
        url = history.url
    finally:
        history.close()
    console = _console()
    if not groups:
        console.print(f"{url}: no tuning records")
        return 0
    # the counts first: a long URL wraps onto its own line, never through them
    title = f"{sum(g.count for g in groups)} records, {len(groups)} task/target groups in {url}"
    table = Table(title=title)
    for name, justify in (
        ("task", "left"), ("args", "left"), ("target", "left"), ("records", "right"),
        ("ok", "right"), ("failed", "right"), ("best", "right"), ("first (UTC)", "left"),
        ("last (UTC)", "left"), ("boards", "left"),
    ):
        # arguments wrap at 45 columns (at commas), so that a wide terminal shows the wide table
        table.add_column(name, justify=justify, max_width=45 if name == "args" else None)  # type: ignore[arg-type]
    for g in groups:
        table.add_row(
            g.task, g.args, g.target, str(g.count), str(g.successful), str(g.failed),
            _latency(g.best_sec), _date(g.first), _date(g.last), ", ".join(b or "-" for b in g.boards),
        )
    _print_fitting(console, table, lambda: _narrow_stats(title, groups))
    return 0


def _narrow_stats(title: str, groups: list[Any]) -> Any:
    """``db stats`` for a narrow terminal: task, arguments and target stacked in one column, dates on two lines."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, box=box.SIMPLE_HEAD, show_lines=True, pad_edge=False)
    table.add_column("task / arguments / target, boards")
    table.add_column("records", justify="right", no_wrap=True)
    table.add_column("best", justify="right", no_wrap=True)
    table.add_column("measured (UTC)", no_wrap=True)
    for g in groups:
        boards = ", ".join(b or "-" for b in g.boards)
        cell = Text.assemble((g.task, "bold"), "\n", (g.args, "dim"), "\n", f"{g.target} · {boards}")
        records = f"{g.count}\n{g.failed} failed" if g.failed else str(g.count)
        table.add_row(cell, records, _latency(g.best_sec), _when(g.first, g.last))
    return table


def _run_dedupe(args: argparse.Namespace) -> int:
    from edgetune.history.maintenance import dedupe

    history = _open(args.db)
    try:
        result = dedupe(history, args.by, dry_run=args.dry_run)
    finally:
        history.close()
    verb = "would remove" if result.dry_run else "removed"
    how = "kept the newest" if args.by == "date" else "kept one with the average run time"
    print(
        f"{verb} {result.removed} duplicate records of {result.configurations} configurations"
        + (f" ({how})" if result.configurations and not result.dry_run else "")
    )
    return 0


def _run_upgrade(args: argparse.Namespace) -> int:
    from edgetune.history.migrate import upgrade_history

    result = upgrade_history(args.db)
    if result.changed:
        print(f"upgraded {result.history}: schema version {result.before} -> {result.after}")
    else:
        print(f"{result.history}: already at schema version {result.after}, nothing to do")
    return 0


def _run_export(args: argparse.Namespace) -> int:
    from edgetune.history.maintenance import export_history

    history = _open(args.db, read_only=True)
    try:
        n_workloads, n_records = export_history(history, args.file)
    finally:
        history.close()
    print(f"wrote {args.file}: {n_workloads} workloads, {n_records} records")
    return 0


def _run_import(args: argparse.Namespace) -> int:
    from edgetune.history.maintenance import import_history

    if not Path(args.file).exists():
        raise HistoryError(f"{args.file}: no such export file")
    history = _open(args.db, create=True)
    try:
        result = import_history(history, args.file)
    finally:
        history.close()
    print(
        f"imported {args.file}: {result.added} added, {result.updated} updated, "
        f"{result.skipped} skipped ({result.workloads_added} new workloads)"
    )
    return 0


def _run_prune(args: argparse.Namespace) -> int:
    from edgetune.history.maintenance import prune

    history = _open(args.db)
    try:
        result = prune(
            history,
            keep_top=args.keep_top,
            failed=args.failed,
            older_than_days=args.older_than,
            dry_run=args.dry_run,
        )
    finally:
        history.close()
    parts = []
    if args.failed:
        parts.append(f"{result.failed} failed")
    if args.older_than is not None:
        parts.append(f"{result.older} older than {args.older_than:g} days")
    if args.keep_top is not None:
        parts.append(f"{result.beyond_top} beyond the top {args.keep_top}")
    verb = "would remove" if result.dry_run else "removed"
    print(f"{verb} {result.removed} records ({', '.join(parts)})")
    return 0
