"""The terminal display of a tune (`edgetune tune`): the live task table, then the final summary lines.

The progress model it renders is edgetune.tuning.progress; this module only draws it.
On a terminal the display refreshes in place; otherwise (CI logs, pipes) one
line is printed per measured batch so logs stay readable.
"""

from __future__ import annotations

from pathlib import Path

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from .tuning import SUMMARY_NAME, ProgressSink, TaskProgress, TuneProgress, TuneSummary


def _fmt_us(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    micros = seconds * 1e6
    return f"{micros:,.3f}" if micros < 10 else f"{micros:,.1f}"


def _fmt_num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _task_table(progress: TuneProgress) -> Table:
    # Fits 80 columns with task names of up to ~35 characters: no vertical rules, the "failed"
    # column only once a candidate failed, and a longer name folds rather than ending in "…".
    failures = any(task.failed for task in progress.tasks)
    table = Table(title=f"edgetune: {progress.phase}", expand=False, box=box.SIMPLE_HEAD)
    table.add_column("#", justify="right")
    table.add_column("task", overflow="fold")
    table.add_column("weight", justify="right")
    table.add_column("trials", justify="right")
    if failures:
        table.add_column("failed", justify="right")
    table.add_column("best (us)", justify="right")
    table.add_column("GFLOPS", justify="right")
    for task in progress.tasks:
        trials = f"{task.previous_trials}+{task.trials}" if task.previous_trials else str(task.trials)
        failed = [str(task.failed) if task.failed else ""] if failures else []
        table.add_row(
            str(task.index), task.name, f"{task.weight:g}", trials, *failed, _fmt_us(task.best_sec), _fmt_num(task.best_gflops)
        )
    return table


def _overall(progress: TuneProgress) -> str:
    done, budget = progress.done, progress.budget
    rate = progress.elapsed / done if done else None
    eta = "" if not rate or done >= budget else f", about {rate * (budget - done):.0f} s left"
    weighted = sum(t.best_sec * t.weight for t in progress.tasks if t.best_sec)
    model = f"; sum of weighted best task latencies {weighted * 1e3:.3f} ms" if weighted else ""
    return f"overall: {done}/{budget} trials in {progress.elapsed:.0f} s{eta}{model}"


class RichProgress(ProgressSink):
    """A :class:`~edgetune.tuning.ProgressSink` rendering to the terminal."""

    def __init__(self, quiet: bool = False, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True, soft_wrap=True)
        self.quiet = quiet
        self._live: Live | None = None

    def __enter__(self) -> "RichProgress":
        if not self.quiet and self.console.is_terminal:
            self._live = Live(console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None

    def _render(self, progress: TuneProgress) -> None:
        if self._live is not None:
            self._live.update(Group(_task_table(progress), _overall(progress)))

    def on_phase(self, progress: TuneProgress) -> None:
        if self.quiet:
            return
        if self._live is not None:
            self._render(progress)
        else:
            self.console.print(f"edgetune: {progress.phase}")

    def on_batch(self, progress: TuneProgress, task: TaskProgress) -> None:
        if self.quiet:
            return
        if self._live is not None:
            self._render(progress)
        else:
            self.console.print(
                f"[task {task.index + 1}/{len(progress.tasks)}] {task.name}: {task.trials} trials, "
                f"best {_fmt_us(task.best_sec)} us, {_fmt_num(task.best_gflops)} GFLOPS | {_overall(progress)}",
                highlight=False,
            )

    def print_summary(self, summary: TuneSummary, out_dir: Path) -> None:  # noqa: C901 - a flat list of report lines
        """The final report, printed whether or not progress was shown."""
        console = Console(soft_wrap=True)  # results go to stdout
        if not self.quiet and self._live is None and summary.tasks:
            console.print(_task_table(TuneProgress.from_summary(summary)))
        trials, seconds = summary.trials, summary.seconds
        console.print(
            f"trials: {trials.this_run} this run ({trials.measured_on_device} measured on the device, "
            f"{trials.served_from_history} from history"
            + (f" ({trials.waited_for_others} measured by another process meanwhile)" if trials.waited_for_others else "")
            + f", {trials.failed} failed), "
            f"{trials.in_history_before} in history before; device time {seconds.device:.1f} s, "
            f"tuning wall clock {seconds.tuning_wall:.1f} s",
            highlight=False,
        )
        for line in summary.graph_lines() + summary.library_lines() + summary.retimed_lines() + summary.host_time_lines():
            console.print(line, highlight=False)
        for line in _savings_lines(summary):
            console.print(line, highlight=False)
        for line in _board_lines(summary.measurement):
            console.print(line, highlight=False)
        warm = summary.warm_start
        if warm and (warm["same_task"] or warm["similar_task"] or warm["other_board"]):
            console.print(
                f"warm start: cost model trained on {warm['same_task'] + warm['similar_task'] + warm['other_board']} "
                f"history records ({warm['same_task']} same task, {warm['similar_task']} same operator at other "
                f"shapes, {warm['other_board']} from other boards)",
                highlight=False,
            )
        if summary.tasks_kept_default:
            console.print(
                f"kept the default (untuned) schedule of {len(summary.tasks_kept_default)} of {len(summary.tasks)} tasks, "
                f"where no tuned candidate beat it: {', '.join(summary.tasks_kept_default)}",
                highlight=False,
            )
        suggested = summary.suggested
        if suggested and suggested.get("message"):
            console.print(suggested["message"], highlight=False)
        e2e = summary.end_to_end
        if e2e:
            console.print(
                f"end to end on the device: untuned {e2e.untuned_ms:.3f} ms, "
                f"tuned {e2e.tuned_ms:.3f} ms (x{e2e.speedup:.2f}); "
                f"outputs match (max abs diff {e2e.max_abs_diff:.2g})",
                highlight=False,
            )
            if e2e.tuned_kernels_ms:
                console.print(
                    f"inside the tuned kernels: {e2e.tuned_kernels_ms:.3f} ms (sum over tasks of weight x best latency); "
                    f"outside them (dispatch, allocation, launches): {e2e.outside_kernels_share:.0%} of the tuned model",
                    highlight=False,
                )
            if e2e.delivered == "untuned":
                console.print(
                    "the tuned build measured slower than the untuned one twice: model.so is the untuned build", highlight=False
                )
            console.print(f"artifact: {e2e.artifact}", highlight=False)
        console.print(f"summary: {out_dir / SUMMARY_NAME}; history: {summary.history}", highlight=False)


def baseline_lines(summary: TuneSummary) -> list[str]:
    """``tuned 2.1 ms; ONNX Runtime 3.4 ms on this board: 1.6x faster`` per baseline (tuning.baseline), or why not."""
    import dataclasses

    from .board.baseline import BaselineResult

    names = {f.name for f in dataclasses.fields(BaselineResult)}
    results = [BaselineResult(**{k: v for k, v in item.items() if k in names})
               for item in (summary.end_to_end.baselines if summary.end_to_end else [])]
    return [result.line() for result in results]


def _savings_lines(summary: TuneSummary) -> list[str]:
    """What the measurement-reducing components saved, one line each."""
    lines = []
    measurement = summary.measurement or {}
    if measurement.get("evaluator") == "adaptive" and measurement.get("candidates"):
        lines.append(
            f"adaptive evaluator: {measurement['mean_runs_per_candidate']:.0f} runs per candidate on average "
            f"({measurement['stopped_by_cv']} stable below {measurement['cv_threshold']:.0%} CV, "
            f"{measurement.get('stopped_by_ci', 0)} with the mean known within "
            f"{measurement.get('ci_threshold', 0):.0%} (95% CI), "
            f"{measurement.get('stopped_by_budget', 0)} at the {measurement.get('budget_ms', 0):g} ms device-time budget, "
            f"{measurement['stopped_by_cap']} at the {measurement['max_runs']}-run cap); per-candidate log: "
            f"{measurement['log']}"
        )
    reduction = summary.measurement_reduction
    if reduction and reduction.get("proposed"):
        parts = []
        if reduction["sampler"] != "none":
            parts.append(
                f"K-means sampling measured {reduction['measured']} of {reduction['proposed']} proposed candidates "
                f"({reduction['removed_by_sampling']:.0%} removed)"
            )
        if reduction["early_stop"] != "none":
            parts.append(
                f"{reduction['early_stop']} early stop ended {reduction['tasks_stopped_early']} of "
                f"{len(reduction['tasks'])} tasks before their budget"
            )
        if parts:
            lines.append("; ".join(parts))
    return lines


def _board_lines(measurement: dict) -> list[str]:
    """Which board measured how many candidates, when more than one did or one went away."""
    by_board = measurement.get("by_board") or {}
    lost, unmeasured = measurement.get("sessions_lost", 0), measurement.get("unmeasured", 0)
    lines = []
    if len(by_board) > 1 or lost:
        each = ", ".join(f"{board} {count}" for board, count in sorted(by_board.items()))
        lines.append(f"measured on {len(by_board)} boards: {each}" + (f"; {lost} sessions lost and their candidates measured again" if lost else ""))
    if unmeasured:
        lines.append(f"{unmeasured} candidates were not measured (no board answered); they are not stored, a resumed run measures them")
    return lines
