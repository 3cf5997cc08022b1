"""The report's plots, drawn with matplotlib (``Figure`` objects, Agg: no display, no pyplot state).

Each ``*_figure`` function returns a figure, or None when the run has nothing
to show for it (the page then says why).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from matplotlib.figure import Figure

from .data import RunData, Session

TRIALS_LABEL = {"history": "trials: the history's records of the model's tasks", "summary": "trials, as the sessions counted them"}
SESSION_LINE = {"color": "0.45", "linestyle": ":", "linewidth": 1.2}
STOPPED_BY_COLORS = {"cv": "tab:blue", "ci": "tab:green", "budget": "tab:orange", "cap": "tab:red"}
TIME_PARTS = (  # (label, colour) of the stacked bars, in order
    ("device: timing candidates", "tab:blue"),
    ("upload to the device", "tab:cyan"),
    ("host: building candidates", "tab:orange"),
    ("host: search, cost model, rest", "0.65"),
)


def _new_figure(width: float, height: float) -> Figure:
    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    return figure


def _mark_sessions(ax: Any, sessions: Sequence[Session], axis: str, above: bool = True) -> None:
    """A dotted line where each session after the first starts, labelled S2, S3... above the frame (or inside it)."""
    for session in sessions[1:]:
        x = session.offset if axis == "seconds" else session.first_trial + 0.5
        _session_line(ax, x, session.label, above)


def _session_line(ax: Any, x: float, label: str, above: bool = True) -> None:
    ax.axvline(x, **SESSION_LINE)
    ax.annotate(
        label, (x, 1.0), xycoords=("data", "axes fraction"), xytext=(2, 2 if above else -2), textcoords="offset points",
        ha="left", va="bottom" if above else "top", fontsize=8, color="0.3", annotation_clip=False,
    )


def _log_if_wide(ax: Any, values: Sequence[float]) -> None:
    positive = [v for v in values if v and v > 0 and math.isfinite(v)]
    if positive and max(positive) / min(positive) > 30:
        ax.set_yscale("log")


def latency_figure(data: RunData) -> Figure | None:
    """(1) The model's estimated latency and its measured end-to-end latency, against tuning time and trials."""
    timeline = data.timeline
    points = [(s, n, e * 1e3) for s, n, e in zip(timeline.seconds, timeline.trials, timeline.estimate_sec) if e is not None]
    ends = _end_to_end_points(data.sessions)
    if not points and not ends:
        return None
    figure = _new_figure(11, 4.2)
    axes = figure.subplots(1, 2, sharey=True)
    for ax, axis, xlabel in (
        (axes[0], "seconds", "tuning wall clock (s), sessions back to back"),
        (axes[1], "trials", TRIALS_LABEL.get(timeline.source, "trials")),
    ):
        if points:
            xs = [p[0] if axis == "seconds" else p[1] for p in points]
            ax.step(xs, [p[2] for p in points], where="post", color="tab:green", linewidth=1.8,
                    label="estimate: sum of weight x best task latency")
        for kind, marker, color, line in (("untuned", "s", "0.35", "none"), ("tuned", "o", "tab:purple", "--")):
            series = [(e[axis], e[kind]) for e in ends if e[kind] is not None]
            if series:  # the untuned build is the same every session: no line suggesting a trend
                ax.plot([x for x, _ in series], [y for _, y in series], marker=marker, color=color, linestyle=line,
                        linewidth=1, markersize=7, label=f"measured end to end, {kind}")
        _mark_sessions(ax, data.sessions, axis)
        ax.set_xlabel(xlabel)
        ax.grid(True, alpha=0.3)
    values = [p[2] for p in points] + [e[k] for e in ends for k in ("tuned", "untuned") if e[k] is not None]
    _log_if_wide(axes[0], values)
    axes[0].set_ylabel("model latency (ms)")
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside lower center", ncols=3, fontsize=9, frameon=False)
    return figure


def _end_to_end_points(sessions: Sequence[Session]) -> list[dict[str, Any]]:
    """Each session's measured end-to-end latencies (ms), placed where its tuning ended."""
    points = []
    for session in sessions:
        e2e = session.summary.end_to_end if session.summary else None
        if e2e is None:
            continue
        tuned = e2e.tuned_latency.get("median_ms") if e2e.tuned_latency else None
        untuned = e2e.untuned_latency.get("median_ms") if e2e.untuned_latency else None
        points.append({
            "seconds": session.offset + session.length, "trials": session.first_trial + session.trials,
            "tuned": tuned, "untuned": untuned,
        })
    return points


def tasks_figure(data: RunData, columns: int = 3) -> Figure | None:
    """(2) Per task: every measured candidate, the best so far, and the untuned code's latency."""
    tasks = [t for t in data.timeline.tasks if t.trials]
    if not tasks:
        return None
    columns = min(columns, len(tasks))
    rows = math.ceil(len(tasks) / columns)
    figure = _new_figure(11, 0.6 + 2.5 * rows)
    axes = figure.subplots(rows, columns, squeeze=False, sharex=True)
    last = max(data.timeline.trials, default=0)
    for ax, task in zip(axes.flat, tasks):
        _task_axes(ax, task, data.sessions, last)
    for ax in axes.flat[len(tasks):]:
        ax.set_visible(False)
    for ax in axes.flat:
        ax.tick_params(labelbottom=True)
    for ax in axes[-1]:
        ax.set_xlabel("trial")
    for ax in axes[:, 0]:
        ax.set_ylabel("latency (us)")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside upper center", ncols=3, fontsize=9, frameon=False)
    return figure


def _task_axes(ax: Any, task: Any, sessions: Sequence[Session], last_trial: int) -> None:
    measured = [(n, s * 1e6) for n, s in zip(task.trials, task.measured_sec) if s is not None]
    best = [(n, b * 1e6) for n, b in zip(task.trials, task.best_sec) if b is not None]
    ax.plot([n for n, _ in measured], [s for _, s in measured], "o", color="tab:blue", alpha=0.35, markersize=4,
            label="measured candidate")
    if best:
        best.append((max(last_trial, best[-1][0]), best[-1][1]))  # held until the end of the run
        ax.step([n for n, _ in best], [b for _, b in best], where="post", color="tab:green", linewidth=1.8,
                label="best so far")
    default = task.default_sec * 1e6 if task.default_sec is not None else None
    if default is not None:
        ax.axhline(default, color="0.3", linestyle="--", linewidth=1, label="untuned (default) code")
    shown = [b for _, b in best] + ([default] if default is not None else [])
    if shown:
        _set_task_limits(ax, shown, [s for _, s in measured])
    name = task.name if len(task.name) <= 34 else task.name[:31] + "..."
    ax.set_title(f"{name}  (weight {task.weight:g})", fontsize=9)
    ax.tick_params(labelsize=8)
    ax.grid(True, alpha=0.3)
    _mark_sessions(ax, sessions, "trials", above=False)


def _set_task_limits(ax: Any, shown: list[float], measured: list[float]) -> None:
    """Room for the best and the untuned latency, and for slower candidates up to 3x the highest of those."""
    high = max(shown)
    high = max(high, min(max(measured, default=high), 3 * high))
    low = min(shown)
    _log_if_wide(ax, [low, high])
    if ax.get_yscale() == "log":
        ax.set_ylim(low / 1.5, high * 1.5)
    else:
        pad = 0.1 * (high - low) or 0.1 * high or 1e-3
        ax.set_ylim(max(0.0, low - pad), high + pad)


def time_figure(data: RunData) -> Figure | None:
    """(3) Per session: where the tuning wall clock went, device versus host."""
    sessions = [s for s in data.sessions if s.summary is not None and s.summary.seconds is not None]
    if not sessions:
        return None
    figure = _new_figure(11, 1.3 + 0.55 * len(sessions))
    ax = figure.subplots()
    for row, session in enumerate(sessions):
        seconds = session.summary.seconds
        rest = max(0.0, seconds.tuning_wall - seconds.device - seconds.upload - seconds.build)
        left = 0.0
        for (label, color), width in zip(TIME_PARTS, (seconds.device, seconds.upload, seconds.build, rest)):
            ax.barh(row, width, left=left, color=color, label=label if row == 0 else None, height=0.6)
            left += width
        ax.annotate(f"{seconds.tuning_wall:.1f} s wall, {seconds.device:.1f} s on the device", (left, row),
                    xytext=(5, 0), textcoords="offset points", va="center", fontsize=8)
    ax.set_yticks(range(len(sessions)), [_session_name(s) for s in sessions], fontsize=9)
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    ax.set_xlim(0, max(_bar_end(s) for s in sessions) * 1.35 or 1.0)
    figure.legend(loc="outside upper center", ncols=4, fontsize=8, frameon=False)
    ax.grid(True, axis="x", alpha=0.3)
    return figure


def _bar_end(session: Session) -> float:
    seconds = session.summary.seconds
    return max(seconds.tuning_wall, seconds.device + seconds.upload + seconds.build)


def _session_name(session: Session) -> str:
    return f"{session.label}{' (interrupted)' if session.summary and session.summary.interrupted else ''}"


def runs_figure(data: RunData) -> Figure | None:
    """(4) The adaptive evaluator's runs per candidate: each candidate in order, and their histogram."""
    lines = data.measurements
    if not lines:
        return None
    figure = _new_figure(11, 3.8)
    ax, hist = figure.subplots(1, 2, width_ratios=(2.2, 1))
    runs = [int(line["runs"]) for line in lines]
    kinds = [str(line.get("stopped_by")) for line in lines]
    known = list(STOPPED_BY_COLORS)
    order = sorted(set(kinds), key=lambda k: (known.index(k) if k in known else len(known), k))
    for kind in order:
        picked = [(i, r) for i, (r, k) in enumerate(zip(runs, kinds), start=1) if k == kind]
        ax.plot([i for i, _ in picked], [r for _, r in picked], "o", markersize=4, color=STOPPED_BY_COLORS.get(kind, "0.5"),
                label=_stopped_by_label(kind))
    cap = data.summary.measurement.get("max_runs")
    if cap:
        ax.axhline(cap, color="tab:red", linestyle="--", linewidth=1, alpha=0.6, label=f"run cap (measure.max_runs = {cap})")
    _mark_measurement_sessions(ax, lines)
    ax.set_xlabel("candidate (in the order timed)")
    ax.set_ylabel("runs")
    ax.grid(True, alpha=0.3)
    figure.legend(loc="outside upper center", ncols=3, fontsize=9, frameon=False)
    bins = max(5, min(25, len(set(runs))))
    hist.hist([[r for r, k in zip(runs, kinds) if k == kind] for kind in order], bins=bins, stacked=True,
              color=[STOPPED_BY_COLORS.get(kind, "0.5") for kind in order])
    hist.set_xlabel("runs per candidate")
    hist.set_ylabel("candidates")
    hist.grid(True, alpha=0.3)
    return figure


def _stopped_by_label(kind: str) -> str:
    labels = {
        "cv": "stopped: throughput CV low enough",
        "ci": "stopped: mean known closely enough (95% CI, measure.ci_threshold)",
        "budget": "stopped: device-time budget spent (measure.budget_ms)",
        "cap": "stopped: run cap reached",
    }
    return labels.get(kind, f"stopped: {kind}")


def _mark_measurement_sessions(ax: Any, lines: list[dict[str, Any]]) -> None:
    """Where the candidates of a later session start (lines without a time belong to none)."""
    previous = None
    for index, line in enumerate(lines, start=1):
        session = line.get("session")
        if session is not None and previous is not None and session != previous:
            _session_line(ax, index - 0.5, f"S{session}")
        previous = session if session is not None else previous


def baselines_figure(data: RunData) -> Figure | None:
    """(5) The delivered model against what the user would run instead: untuned, each baseline runtime, tuned."""
    e2e = data.summary.end_to_end
    timed = [b for b in (e2e.baselines if e2e else []) if b.get("baseline_ms") and b.get("tuned_ms")]
    if e2e is None or not timed:
        return None
    from ..board.baseline import RUNTIME_NAMES

    bars: list[tuple[str, float, str]] = []
    if e2e.untuned_latency:
        bars.append(("untuned\n(on the board)", e2e.untuned_ms, "0.65"))
    for baseline in timed:
        bars.append((RUNTIME_NAMES.get(baseline["runtime"], baseline["runtime"]) + "\n(alone, in blocks)", baseline["baseline_ms"], "tab:orange"))
    # the tuned model as timed beside each baseline: one bar per comparison when there are several
    for baseline in timed:
        label = "tuned\n(beside " + RUNTIME_NAMES.get(baseline["runtime"], baseline["runtime"]) + ")" if len(timed) > 1 else "tuned\n(alone, in blocks)"
        bars.append((label, baseline["tuned_ms"], "tab:green"))
    figure = _new_figure(max(5.0, 1.6 * len(bars)), 3.6)
    ax = figure.add_subplot()
    positions = range(len(bars))
    ax.bar(positions, [value for _label, value, _c in bars], color=[c for _label, _v, c in bars])
    for x, (_label, value, _c) in zip(positions, bars):
        ax.annotate(f"{value:.3g} ms", (x, value), xytext=(0, 2), textcoords="offset points", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(positions), [label for label, _v, _c in bars], fontsize=8)
    ax.set_ylabel("latency (ms), lower is better")
    _log_if_wide(ax, [value for _label, value, _c in bars])
    return figure

