"""Draw the report's plots into PNG files (matplotlib, Agg) and say which could not be drawn and why."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ..errors import ReportError
from .data import RunData
from .page import Plot

DPI = 100

CAPTIONS = {
    "latency": (
        "Model latency",
        "Green: the latency the tuner expects from its kernels (sum over tasks of weight x best measured latency), "
        "after every measurement. Markers: the whole model compiled and measured end to end on the device at the end "
        "of each session, untuned and tuned; that includes what the kernel estimate leaves out (data movement "
        "between kernels, runtime overhead). Dotted lines: where a resumed session starts (S2, S3...); on the "
        "time axis the sessions are laid back to back, the time between them left out. The trial axis counts the "
        "history's records of the model's tasks: a candidate measured twice keeps one record, so it can end below "
        "the trials the sessions report.",
    ),
    "tasks": (
        "Per-task best latency",
        "One panel per task on the run's trial axis: each measured candidate (dots; failed ones are left out), the "
        "best so far (green) and the task's untuned code (dashed). Log scale where the latencies span more than 30x; "
        "candidates slower than 3x the panel's highest line are cut off.",
    ),
    "time": (
        "Tuning time: device versus host",
        "Where each session's tuning wall clock went: timing candidates on the device, uploading them, building them "
        "on the host, and the rest on the host (search, cost model, scheduling). On a board that does not share the "
        "host's CPU, timing overlaps the next batch's search and build, so the parts can add up to more than the "
        "wall clock.",
    ),
    "baselines": (
        "Against what you would run instead",
        "The whole model untuned (as measured on the board after the tune), in each baseline runtime "
        "(tuning.baseline) and tuned, the last two timed in one process on the same input and threads, each "
        "alone in blocks after a pause, the rounds alternating (medians; edgetune/board/baseline.py). Lower is better.",
    ),
    "runs": (
        "Evaluator: runs per candidate",
        "How many timed runs the adaptive evaluator spent on each candidate: it stops once the throughput's "
        "coefficient of variation is below its threshold (blue) or at the run cap (red, dashed line).",
    ),
}


def draw_plots(data: RunData, plots_dir: Path) -> list[Plot]:
    """Every plot of the page, drawn into ``plots_dir`` (a stale file of one not drawn this time is removed)."""
    try:
        from . import plots as figures
    except ImportError as error:
        raise ReportError(f"the report needs matplotlib ({error}): pip install 'matplotlib>=3.8'") from None
    makers: dict[str, Callable[[RunData], Any]] = {
        "latency": figures.latency_figure,
        "tasks": figures.tasks_figure,
        "time": figures.time_figure,
        "runs": figures.runs_figure,
        "baselines": figures.baselines_figure,
    }
    plots = []
    for name, make in makers.items():
        title, caption = CAPTIONS[name]
        plot = Plot(name, title, caption)
        path = plots_dir / f"{name}.png"
        figure = make(data)
        if figure is None:
            plot.missing = _why_missing(name, data)
            path.unlink(missing_ok=True)
        else:
            figure.savefig(path, dpi=DPI)
            plot.src = f"{plots_dir.name}/{path.name}"
        plots.append(plot)
    return plots


def _why_missing(name: str, data: RunData) -> str:
    if name == "latency":
        return "no measurement of every task yet, and no end-to-end measurement"
    if name == "tasks":
        if data.timeline.source != "history":
            return "the history could not be read (see the notes below)"
        return "the history holds no measurement of this model's tasks"
    if name == "time":
        return "no session summary records its timings"
    if name == "baselines":
        e2e = data.summary.end_to_end
        asked = e2e.baselines if e2e else []
        if not asked:
            return "no baseline runtime was asked for (--baseline onnxruntime or litert)"
        return "no baseline could run: " + "; ".join(f"{b.get('runtime')}: {b.get('error')}" for b in asked)
    measurement = data.summary.measurement or {}
    if measurement.get("evaluator") == "fixed":
        return (
            f"the fixed evaluator timed every candidate the same way (number {measurement.get('number')}, repeat "
            f"{measurement.get('repeat')}), so there is no per-candidate log; the adaptive evaluator writes measurements.jsonl"
        )
    return "measurements.jsonl is missing or empty"
