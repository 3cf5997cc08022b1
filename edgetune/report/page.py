"""The report page: one HTML file with inline CSS, referring to the plots beside it (``report/*.png``)."""

from __future__ import annotations

import html
import math
import time
from dataclasses import dataclass
from typing import Any, Sequence

from .._version import __version__
from ..tuning.summary import TuneSummary
from .data import RunData, Session

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 24px auto; max-width: 1120px;
       padding: 0 16px; color: #222; line-height: 1.4; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { font-size: 1.25em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
.status { font-size: 1.05em; } .badge { display: inline-block; padding: 1px 8px; border-radius: 4px; font-weight: 600; }
.ok { background: #dcf3dc; color: #145214; } .warn { background: #fff0c2; color: #6b4e00; }
table { border-collapse: collapse; margin: 8px 0; font-size: 0.92em; }
th, td { padding: 3px 10px; border-bottom: 1px solid #e4e4e4; text-align: left; vertical-align: top; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.facts th { font-weight: normal; color: #555; } td { overflow-wrap: anywhere; }
figure { margin: 12px 0; } figure img { width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; } .note { color: #6b4e00; } footer { color: #777; font-size: 0.85em; margin-top: 2em; }
"""


@dataclass
class Plot:
    """One figure of the page: its file (relative to the page), or why it is missing."""

    name: str  # file stem under report/
    title: str
    caption: str
    src: str | None = None  # relative path of the PNG; None: not drawn
    missing: str = ""  # why it was not drawn


def render_page(data: RunData, plots: Sequence[Plot]) -> str:
    summary = data.summary
    model = summary.model.name if summary.model else "model"
    title = f"{model} on {summary.profile or 'an unknown profile'}"
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>edgetune report: {_e(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>edgetune report: {_e(title)}</h1>",
        _status(data),
        _facts(summary),
        "<h2>Sessions</h2>",
        _sessions_table(data.sessions),
    ]
    by_name = {plot.name: plot for plot in plots}
    for name in ("latency", "baselines", "tasks"):
        if name == "baselines" and not (summary.end_to_end and summary.end_to_end.baselines):
            continue  # no baseline was asked for: nothing to say
        parts.append(_figure(by_name[name]))
        if name == "tasks":
            parts.append(_tasks_table(summary))
    parts.extend(_figure(by_name[name]) for name in ("time", "runs"))
    if data.notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f'<li class="note">{_e(n)}</li>' for n in data.notes) + "</ul>")
    parts.append(
        f"<footer>Written by edgetune {_e(__version__)} on {_e(time.strftime('%Y-%m-%d %H:%M:%S %z'))} from "
        f"{_e(str(data.run_dir))} (summary.json, sessions.jsonl, measurements.jsonl and the history); "
        "rewrite it with <code>edgetune report RUN_DIR</code>.</footer></body></html>"
    )
    return "\n".join(parts) + "\n"


def _status(data: RunData) -> str:
    summary, e2e = data.summary, data.summary.end_to_end
    if summary.interrupted:
        badge = '<span class="badge warn">interrupted</span> the last session stopped early; run the same command to resume'
    else:
        badge = '<span class="badge ok">completed</span>'
    trials = summary.trials
    bits = [f"{len(data.sessions)} session{'s' if len(data.sessions) != 1 else ''}"]
    if trials:
        bits.append(f"{trials.in_history_before + trials.this_run} trials of a budget of {trials.budget}")
    if e2e and e2e.tuned_latency and e2e.untuned_latency:
        speedup = f" (x{e2e.speedup:.2f})" if math.isfinite(e2e.speedup) else ""
        bits.append(f"end to end: untuned {e2e.untuned_ms:.3f} ms, tuned {e2e.tuned_ms:.3f} ms{speedup}, delivered: {e2e.delivered}")
        if e2e.tuned_kernels_ms:
            bits.append(
                f"inside the tuned kernels {e2e.tuned_kernels_ms:.3f} ms, outside them {e2e.outside_kernels_share:.0%} "
                "of the tuned model (dispatch, allocation, launches)"
            )
    else:
        bits.append("no end-to-end measurement in the last session (interrupted, or --no-evaluate)")
    return f'<p class="status">{badge} &middot; ' + " &middot; ".join(_e(b) for b in bits) + "</p>"


def _facts(summary: TuneSummary) -> str:
    rows = [
        ("model", f"{summary.model.name} ({summary.model.source})" if summary.model else "-"),
        ("profile", summary.profile or "-"),
        ("target", str(summary.target or "-")),
        ("board", f"{summary.board.label}, key {summary.board.key}" if summary.board else "-"),
        ("history", summary.history or "-"),
        ("search", _search_text(summary)),
        ("graph", "; ".join(summary.graph_lines()) or "-"),
        ("schedule library", "; ".join(summary.library_lines()) or "-"),
        ("host time", "; ".join(summary.host_time_lines()) or "-"),
        ("last session", f"{summary.date}, edgetune {summary.edgetune_version}, TVM {summary.tvm_version}"),
    ]
    return '<table class="facts">' + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows) + "</table>"


def _search_text(summary: TuneSummary) -> str:
    search, measurement = summary.search, summary.measurement or {}
    if search is None:
        return "-"
    text = f"{search.strategy}, cost model {search.cost_model}, {search.task_scheduler} scheduler, batches of {search.num_trials_per_iter}"
    return text + (f"; {measurement['evaluator']} evaluator" if measurement.get("evaluator") else "")


def _sessions_table(sessions: Sequence[Session]) -> str:
    head = ["session", "tuning ended", "trials this run", "tuning wall (s)", "device (s)", "untuned (ms)", "tuned (ms)", "status"]
    numeric = {2, 3, 4, 5, 6}
    rows = []
    for s in sessions:
        summary = s.summary
        if summary is None:
            rows.append([s.label, time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s.end)), str(s.trials), "-", "-", "-", "-",
                         "records with no session summary (a session stopped hard, or another run on this history)"])
            continue
        e2e, seconds = summary.end_to_end, summary.seconds
        rows.append([
            s.label, summary.date, str(summary.trials.this_run if summary.trials else s.trials),
            _num(seconds.tuning_wall if seconds else None, 1), _num(seconds.device if seconds else None, 2),
            _num(e2e.untuned_ms if e2e and e2e.untuned_latency else None, 3),
            _num(e2e.tuned_ms if e2e and e2e.tuned_latency else None, 3),
            "interrupted" if summary.interrupted else ("resumed" if s.first_trial else "completed"),
        ])
    return _table(head, rows, numeric, table_id="sessions")


def _tasks_table(summary: TuneSummary) -> str:
    head = [
        "#", "task", "kernel", "weight", "trials before", "trials this run", "best (us)", "untuned (us)", "speedup",
        "kept untuned", "library (us)", "re-timed (us)",
    ]
    numeric = {0, 3, 4, 5, 6, 7, 8, 10, 11}
    classes = summary.kernel_classes()
    rows = []
    for task in summary.tasks:
        best, default = task.best_latency_us, task.default_latency_us
        speedup = default / best if best and default else None
        rows.append([
            str(task.index), task.name, classes.get(task.name, "-"), f"{task.weight:g}", str(task.trials_before), str(task.trials_this_run),
            _num(best), _num(default), f"x{speedup:.2f}" if speedup else "-", "yes" if task.kept_default else "no",
            _num(task.library_latency_us) if task.transferred_latency_us is None else f"{_num(task.transferred_latency_us)} (other shape)",
            _retimed(task.retimed),
        ])
    caption = (
        "<p>Best and untuned latencies are each task's mean run time on the device; "
        "<em>kept untuned</em>: no tuned candidate beat the task's default code, so the delivered model keeps it; "
        "<em>kernel</em>: compute-bound (convolutions, dense layers, matmuls) or memory-bound, and what kind; "
        "<em>library</em>: the schedule library's schedule of this exact workload as measured on this board, "
        "where the task started from it (<em>other shape</em>: the library lacked the workload, and its schedule of "
        "the nearest shape of the operator, adapted, was measured first); <em>re-timed</em>: the task's fastest schedules timed again before the "
        "model was built, its best before and after (another pick marked *).</p>"
    )
    return caption + _table(head, rows, numeric, table_id="tasks")


def _retimed(retimed: dict | None) -> str:
    """A task's best before and after its fastest schedules were timed again (tuning.confirm_best)."""
    if not retimed:
        return "-"
    mark = " *" if retimed.get("pick_changed") else ""
    return f"{_num(retimed['before_us'])} -> {_num(retimed['after_us'])}{mark}"


def _table(head: list[str], rows: list[list[str]], numeric: set[int], table_id: str) -> str:
    def cls(i: int) -> str:
        return ' class="num"' if i in numeric else ""

    header = "".join(f"<th{cls(i)}>{_e(h)}</th>" for i, h in enumerate(head))
    body = "".join("<tr>" + "".join(f"<td{cls(i)}>{_e(v)}</td>" for i, v in enumerate(row)) + "</tr>" for row in rows)
    return f'<table id="{table_id}"><thead><tr>{header}</tr></thead><tbody>{body}</tbody></table>'


def _figure(plot: Plot) -> str:
    heading = f"<h2>{_e(plot.title)}</h2>"
    if plot.src is None:
        return heading + f'<p class="note">Not drawn: {_e(plot.missing)}</p>'
    return (
        heading + f'<figure><img src="{_e(plot.src)}" alt="{_e(plot.title)}">'
        f"<figcaption>{_e(plot.caption)}</figcaption></figure>"
    )


def _num(value: Any, digits: int | None = None) -> str:
    """A number for a table cell: ``digits`` decimals, or 4 significant digits; '-' when unknown."""
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "-"
    if digits is not None:
        return f"{value:.{digits}f}"
    return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)
