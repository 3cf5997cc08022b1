"""``edgetune report RUN_DIR``: write the run's HTML report with its plots."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

REPORT_EPILOG = """\
examples:
  edgetune report edgetune-out/tiny-cnn-host
      write edgetune-out/tiny-cnn-host/report.html (plots in .../report/*.png); open it in a browser
  edgetune report runs/resnet18 --db postgresql://tuner:secret@db.lab/tuning
      read the measurements from this history instead of the one summary.json names (it masks passwords)

What the page shows:
  model latency   the tuner's estimate (sum over tasks of weight x best latency) after every
                  measurement, and the whole model measured end to end (untuned, tuned) after
                  each session, against tuning time and against trials
  per task        every measured candidate, the best so far, the untuned code
  tuning time     per session: seconds on the device versus on the host
  evaluator       the adaptive evaluator's runs per candidate (measurements.jsonl)
  tables          the sessions, and per task: trials, best and untuned latency, kept untuned

A resumed run shows every session (S1, S2... dotted lines; sessions.jsonl keeps each
session's summary); an interrupted one shows what it measured. `edgetune tune` writes
the report itself at the end of every run; this command rewrites it.
"""


def add_report_parser(sub: Any) -> None:
    """Register ``report`` on the top-level subparsers."""
    report = sub.add_parser(
        "report",
        help="write an HTML report with plots of a tune run (RUN_DIR/report.html)",
        description="Render RUN_DIR/report.html from a tune run's directory (summary.json, sessions.jsonl, "
        "measurements.jsonl) and its history database: latency curves, per-task curves, device versus host "
        "time and the evaluator's runs per candidate, as PNG plots beside the page (RUN_DIR/report/).",
        epilog=REPORT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument("run_dir", metavar="RUN_DIR", help="output directory of `edgetune tune` (its --out)")
    report.add_argument(
        "--db", metavar="URL", help="history database to read (default: the one summary.json names; "
        "a path, sqlite:///... or postgresql://... URL)"
    )
    report.set_defaults(func=run_report)


def run_report(args: argparse.Namespace) -> int:
    from . import write_report

    page = write_report(Path(args.run_dir), db=args.db)
    print(f"report: {page}")
    return 0
