"""``edgetune report``: an HTML page with plots of a tune run (``RUN_DIR/report.html`` and ``RUN_DIR/report/*.png``).

:func:`write_report` renders it from what the run directory holds (see
:mod:`.data` for the sources); ``edgetune tune`` calls :func:`report_after_tune`
at the end of every run, interrupted ones included, and a report that cannot
be written is a one-line warning there, never a failed tune.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..common.run_dir import RunDir
from ..errors import ReportError

REPORT_NAME = RunDir.REPORT
PLOTS_DIR = RunDir.PLOTS
_SUMMARY_FILE = RunDir.SUMMARY


def check_run_dir(run_dir: Path) -> Path:
    """``run_dir/summary.json``; :class:`ReportError` (one line) when ``run_dir`` is not a tune run's directory."""
    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise ReportError(f"run directory '{run_dir}' not found")
    if not run_dir.is_dir():
        raise ReportError(f"'{run_dir}' is not a directory; give the --out directory of `edgetune tune`")
    path = run_dir / _SUMMARY_FILE
    if not path.is_file():
        raise ReportError(f"'{run_dir}' is not an edgetune run directory: it has no {_SUMMARY_FILE} (written by `edgetune tune --out DIR`)")
    return path


def write_report(run_dir: Path, db: str | None = None) -> Path:
    """Render ``run_dir/report.html`` and its plots; return the page's path.

    ``db`` overrides the history named in summary.json (e.g. a PostgreSQL URL
    with its password, which summary.json masks). Raises :class:`ReportError`
    when ``run_dir`` is not a run directory or the report cannot be written.
    """
    check_run_dir(run_dir)
    from .data import load_run
    from .page import render_page
    from .render import draw_plots

    data = load_run(Path(run_dir), db)
    plots_dir = data.run_dir / PLOTS_DIR
    try:
        plots_dir.mkdir(exist_ok=True)
        plots = draw_plots(data, plots_dir)
        page = data.run_dir / REPORT_NAME
        tmp = page.with_suffix(".html.tmp")
        tmp.write_text(render_page(data, plots), encoding="utf-8")
        os.replace(tmp, page)
    except OSError as error:
        raise ReportError(f"cannot write the report in {data.run_dir}: {error}") from None
    return page


def report_after_tune(out_dir: Path) -> Path | None:
    """The report at the end of ``edgetune tune``: its path, or None after a one-line warning on stderr."""
    try:
        return write_report(out_dir)
    except Exception as error:  # the tune's results are written already: a report must not fail it
        if os.environ.get("EDGETUNE_DEBUG"):
            raise
        text = " ".join(line.strip() for line in str(error).splitlines() if line.strip()) or type(error).__name__
        print(f"edgetune: warning: report not written ({text}); retry with `edgetune report {out_dir}`", file=sys.stderr)
        return None


__all__ = ["PLOTS_DIR", "REPORT_NAME", "ReportError", "check_run_dir", "report_after_tune", "write_report"]
