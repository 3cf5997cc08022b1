"""Model-level task scheduling: model latency over wall-clock time, gradient vs round-robin vs UCB.

Scenario (DynaTune, ICLR 2021, §5): a deployment engineer tunes a whole
network and cares about the *model's* latency as tuning goes on. For each seed
and each scheduler (``gradient``: MetaSchedule's default, ``round-robin``, and
edgetune's ``ucb``), the same architecture is tuned with the same total budget
on one loopback tracker + RPC server; the order of the schedulers rotates with
the seed. Every run is edgetune's tuning pipeline (``edgetune.tuning.run_tune``,
what ``edgetune tune`` runs) on profile ``--profile`` (``host``) with only
``tuning.task_scheduler`` changed between runs; the settings the earlier
figures were measured with are profile overrides shared by all: the target
(generic ``llvm``, 2 cores), stock evolutionary search (no sampling, early
stop or contextual exploration), XGBoost, fixed timing (number 5, repeat 3,
min_repeat_ms 20), batches of ``--batch``, no untuned default-schedule trial
and no transferred seeds. On the embedded board the pipeline measures every
batch before the next one is built, whichever the scheduler (see
``edgetune.measure.awaiting``).

Metric: model latency = sum over tasks of weight x best measured latency,
after every measured candidate, against seconds since tuning started (defined
once every task has a valid measurement). At the end the pipeline compiles
the model with each run's history and measures it end to end on the board.

Reported: time to reach within 5% of the best final model latency of all runs;
time for each scheduler to reach the stock (gradient) scheduler's final
latency of the same seed, and the ratio gradient/ucb (goal >= 1.5x); a PNG.

Usage::

  python benchmarks/task_scheduling.py                         # resnet18@32, seeds 0 1 2
  python benchmarks/task_scheduling.py --write-results         # also update RESULTS.md
  python benchmarks/task_scheduling.py --report-only RUNS.json --write-results
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import tvm
import tvm.s_tir.meta_schedule as ms
from tvm.ir.utils import derived_object

from _pipeline import AS_BEFORE, STOCK_SEARCH, TuningClock, bench_profile, fresh_dir, shared_board
from _results import write_section
from edgetune.tuning import Components, TuneOptions, run_tune

HERE = Path(__file__).parent
MARK = "task_scheduling"
SCHEDULERS = ("gradient", "round-robin", "ucb")
#: [measure] of every run: fixed timing, as the earlier figures
MEASURE = {"evaluator": "fixed", "number": 5, "repeat": 3, "min_repeat_ms": 20}


@derived_object
class ModelCurve(ms.measure_callback.PyMeasureCallback):
    """Model latency (sum of weight x best) after every measured candidate, and the order of the batches."""

    def __init__(self, clock: TuningClock) -> None:
        super().__init__()
        self.clock = clock
        self.best: dict[int, float] = {}
        self.points: list[tuple[float, float]] = []
        self.order: list[int] = []

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):  # noqa: D102
        tasks = self.clock.progress.tasks
        self.order.append(task_id)
        for built, ran in zip(builder_results, runner_results):
            if built.error_msg is None and ran.error_msg is None and ran.run_secs:
                mean = float(np.mean([float(x) for x in ran.run_secs]))
                self.best[task_id] = min(self.best.get(task_id, math.inf), mean)
            total = sum(t.weight * self.best.get(t.index, math.inf) for t in tasks)
            self.points.append((self.clock.elapsed(), total if math.isfinite(total) else math.nan))


def run_profile(args: argparse.Namespace, scheduler_name: str, seed: int) -> Any:
    """The profile of one run: ``--profile`` with the benchmark's settings and ``scheduler_name``."""
    tuning = {**AS_BEFORE, **STOCK_SEARCH, "cost_model": "xgb", "seed": seed, "num_trials_per_iter": args.batch}
    return bench_profile(args.profile, tuning={**tuning, "task_scheduler": scheduler_name}, measure=MEASURE)


def tune_once(args: argparse.Namespace, board: Any, scheduler_name: str, seed: int) -> dict[str, Any]:
    """One tuning run of the pipeline; returns its curve, allocation and end-to-end latency."""
    clock = TuningClock()
    curve = ModelCurve(clock)
    options = TuneOptions(
        profile=run_profile(args, scheduler_name, seed), model=args.model, out_dir=fresh_dir(f"sched-{scheduler_name}-{seed}-"),
        trials=args.trials, warm_start="off", board=board,
    )
    started = time.monotonic()
    summary = run_tune(options, sink=clock, components=Components(measure_callbacks=[curve]))
    seconds = time.monotonic() - started
    e2e = summary.end_to_end
    return {
        "scheduler": scheduler_name, "seed": seed, "trials": args.trials, "batch": args.batch, "wall_s": summary.seconds.tuning_wall,
        "curve": curve.points, "order": curve.order, "trials_per_task": [t.trials_this_run for t in summary.tasks],
        "task_names": [t.name for t in summary.tasks], "weights": [t.weight for t in summary.tasks],
        "final_model_ms": curve.points[-1][1] * 1e3 if curve.points else None,
        "e2e_median_ms": e2e.tuned_ms, "e2e_delivered": e2e.delivered, "e2e_seconds": seconds - summary.seconds.tuning_wall,
        "decision_seconds": summary.search.scheduler_decision_seconds,
    }


def time_to(curve: list[tuple[float, float]], goal_s: float) -> float | None:
    """First time (s) the model latency is at or below ``goal_s`` (seconds)."""
    for t, v in curve:
        if not math.isnan(v) and v <= goal_s * (1 + 1e-9):
            return t
    return None


def analyse(runs: list[dict[str, Any]]) -> dict[str, Any]:
    best_final = min(r["curve"][-1][1] for r in runs)
    for r in runs:
        r["t_within_5pct"] = time_to(r["curve"], 1.05 * best_final)
    seeds = sorted({r["seed"] for r in runs})
    per_seed = []
    for seed in seeds:
        by = {r["scheduler"]: r for r in runs if r["seed"] == seed}
        if "gradient" not in by:
            continue
        goal = by["gradient"]["curve"][-1][1]
        row = {"seed": seed, "goal_ms": goal * 1e3}
        for name, r in by.items():
            row[f"t_{name}"] = time_to(r["curve"], goal)
        for name in by:
            if name != "gradient" and row.get(f"t_{name}") and row.get("t_gradient"):
                row[f"ratio_{name}"] = row["t_gradient"] / row[f"t_{name}"]
        per_seed.append(row)
    return {"best_final_ms": best_final * 1e3, "per_seed": per_seed}


def plot(runs: list[dict[str, Any]], path: Path, spec: str) -> None:
    try:
        import matplotlib
    except ImportError:
        print(f"matplotlib is not installed (pip install -e '.[bench]'): no plot written to {path}", file=sys.stderr)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"gradient": "tab:blue", "round-robin": "tab:grey", "ucb": "tab:red"}
    fig, ax = plt.subplots(figsize=(8, 5))
    for r in runs:
        t = [p[0] for p in r["curve"] if not math.isnan(p[1])]
        v = [p[1] * 1e3 for p in r["curve"] if not math.isnan(p[1])]
        label = r["scheduler"] if r["seed"] == min(x["seed"] for x in runs) else None
        ax.plot(t, v, color=colours.get(r["scheduler"], "k"), alpha=0.8, lw=1.2, label=label, drawstyle="steps-post")
    best = min(r["curve"][-1][1] for r in runs) * 1e3
    ax.axhline(1.05 * best, color="k", ls=":", lw=1, label="best final + 5%")
    ax.set_yscale("log")
    ax.set_xlabel("tuning wall clock (s)")
    ax.set_ylabel("model latency: sum of weighted task bests (ms)")
    ax.set_title(f"{spec} on the loopback board: one line per seed")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def fmt(x: float | None, digits: int = 0) -> str:
    return "not reached" if x is None else f"{x:.{digits}f}"


def spread(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"{statistics.median(values):.2f}x [{min(values):.2f} – {max(values):.2f}]"


def setup_text(meta: dict[str, Any], tasks: int) -> str:
    head = (
        f"Setup: `{meta['model']}` ({tasks} tuning tasks, weights = occurrences), target `{{\"kind\": \"llvm\", \"num-cores\": 2}}`, "
        f"{meta['trials']} trials per run in batches of {meta['batch']} (a slot = one batch), evolutionary search (population 64), "
    )
    model_latency = (
        "Model latency = sum of weight x best mean latency of each task (defined once every task has a valid measurement); "
    )
    if meta.get("pipeline"):
        peak = meta.get("peak_gflops")
        return (
            head + f"every run `run_tune` (what `edgetune tune` runs) on profile `{meta['profile']}`, only `tuning.task_scheduler` "
            "differing: stock search (no sampling, early stop or contextual exploration), XGBoost cost model, fixed timing "
            "(number 5, repeat 3, min_repeat_ms 20), no untuned default-schedule trial, no transferred seeds; one loopback board "
            "for all runs; per seed the schedulers run in rotated order. UCB: edgetune defaults (exploration bonus scaled by each "
            "task's share of the model latency, C = 1e-3; Laplace posterior, cost-aware slots, "
            + (f"peak {peak:g} GFLOPS" if peak else "peak GFLOPS unknown")
            + "). On the embedded board the pipeline measures every batch before the next is built, whichever the scheduler. "
            + model_latency
            + "end to end = the pipeline's evaluation: the model compiled with the run's history, median of 3 x 5 runs on the board."
        )
    return (
        head + "XGBoost cost model, WarmBuilder, TrackerRunner with fixed timing (number 5, repeat 3, min_repeat_ms 20), "
        "one loopback `LocalBoard`; per seed the three schedulers run in rotated order. UCB: edgetune defaults "
        "(exploration bonus scaled by each task's share of the model latency, C = 1e-3; Laplace posterior, cost-aware slots, peak GFLOPS unknown"
        + ("; each batch awaited before the next is built, as `edgetune tune` does on the embedded board). " if meta.get("ucb_awaits") else
           "; batches overlapped: the next batch searched and built while the last one was timed). ")
        + ("Every scheduler's batches are measured before the runner returns (AwaitingRunner), so no candidate is timed while the host builds the next batch. "
           if meta.get("runner_awaits") else
           "MetaSchedule's round-robin always times a batch while it builds the next, its gradient rule whenever it picks another task. ")
        + model_latency + "end to end = the model compiled with the run's history, median of 5 x 10 runs on the board."
    )


def report_text(runs: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    a = analyse(runs)
    tasks = len(runs[0]["task_names"])
    lines = [
        "## Model-level task scheduling: gradient vs round-robin vs UCB (DynaTune)",
        "",
        f"Date: {meta['date']}. Machine: {os.cpu_count()} CPUs, {platform.platform()}, TVM {tvm.__version__}. "
        f"Load average {meta['load_start']:.2f} at start, {meta['load_end']:.2f} at end (shared machine); whole run {meta['minutes']:.1f} min.",
        "",
        f"Reproduce: `python benchmarks/task_scheduling.py --model {meta['model']} "
        f"--trials {meta['trials']} --batch {meta['batch']} --seeds {' '.join(map(str, meta['seeds']))}"
        + (f" --schedulers {' '.join(meta['schedulers'])}" if meta.get("schedulers", list(SCHEDULERS)) != list(SCHEDULERS) else "")
        + (f" --profile {meta['profile']}" if meta.get("profile", "host") != "host" else "") + " --write-results`",
        "",
        setup_text(meta, tasks),
        "",
        "| seed | scheduler | wall (s) | final model latency (ms) | end to end (ms) | time to best final + 5% (s) | time to this seed's gradient final (s) | scheduler decisions (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    goal_times = {(row["seed"], k[2:]): v for row in a["per_seed"] for k, v in row.items() if k.startswith("t_")}
    for r in sorted(runs, key=lambda r: (r["seed"], SCHEDULERS.index(r["scheduler"]) if r["scheduler"] in SCHEDULERS else 9)):
        decisions = "-" if r["decision_seconds"] is None else f"{r['decision_seconds']:.1f}"
        lines.append(
            f"| {r['seed']} | {r['scheduler']} | {r['wall_s']:.0f} | {r['final_model_ms']:.3f} | {r['e2e_median_ms']:.3f} | "
            f"{fmt(r['t_within_5pct'])} | {fmt(goal_times.get((r['seed'], r['scheduler'])))} | {decisions} |"
        )
    lines += [
        "",
        "The same curves by measurement count (independent of the machine's load, which made the wall clock of one "
        "budget vary between runs): model latency (ms) after n measurements.",
        "",
    ]
    marks = [m for m in (80, 100, 120, 140) if m < meta["trials"]] + [meta["trials"]]
    lines += ["| seed | scheduler | " + " | ".join(f"n = {m}" for m in marks) + " | measurements to this seed's gradient final |",
              "|---|---|" + "---|" * (len(marks) + 1)]
    for r in sorted(runs, key=lambda r: (r["seed"], SCHEDULERS.index(r["scheduler"]) if r["scheduler"] in SCHEDULERS else 9)):
        cells = [f"{r['curve'][min(m, len(r['curve'])) - 1][1] * 1e3:.2f}" for m in marks]
        goal = next((x for x in runs if x["seed"] == r["seed"] and x["scheduler"] == "gradient"), None)
        n_goal = None
        if goal is not None:
            target = goal["curve"][-1][1]
            n_goal = next((i for i, (_, v) in enumerate(r["curve"], 1) if not math.isnan(v) and v <= target * (1 + 1e-9)), None)
        lines.append(f"| {r['seed']} | {r['scheduler']} | " + " | ".join(cells) + f" | {fmt(n_goal)} |")
    lines.append("")
    lines.append(f"Best final model latency over all runs: {a['best_final_ms']:.3f} ms (goal for the 5% column: {1.05 * a['best_final_ms']:.3f} ms).")
    lines.append("")
    for name in [s for s in ("round-robin", "ucb") if any(r["scheduler"] == s for r in runs)]:
        ratios = [row[f"ratio_{name}"] for row in a["per_seed"] if row.get(f"ratio_{name}")]
        reached = sum(1 for row in a["per_seed"] if row.get(f"t_{name}") is not None)
        lines.append(
            f"- {name}: time to reach the gradient scheduler's final latency, gradient's time / {name}'s time: "
            f"median [min – max] {spread(ratios)} (reached in {reached} of {len(a['per_seed'])} seeds)."
        )
    for name in [s for s in SCHEDULERS if any(r["scheduler"] == s for r in runs)]:
        t5 = [r["t_within_5pct"] for r in runs if r["scheduler"] == name]
        got = [t for t in t5 if t is not None]
        lines.append(
            f"- {name}: time to within 5% of the best final: median {fmt(statistics.median(got) if got else None)} s "
            f"(reached in {len(got)} of {len(t5)} runs); final model latency median "
            f"{statistics.median([r['final_model_ms'] for r in runs if r['scheduler'] == name]):.3f} ms, end to end median "
            f"{statistics.median([r['e2e_median_ms'] for r in runs if r['scheduler'] == name]):.3f} ms."
        )
    lines += ["", "![model latency over time](../task_scheduling.png)", ""]
    lines.append("Trials per task (median over seeds):")
    lines.append("")
    names = runs[0]["task_names"]
    header = "| task | weight | " + " | ".join(SCHEDULERS) + " |"
    lines += [header, "|---|---|" + "---|" * len(SCHEDULERS)]
    for i, name in enumerate(names):
        cells = []
        for s in SCHEDULERS:
            vals = [r["trials_per_task"][i] for r in runs if r["scheduler"] == s]
            cells.append(f"{statistics.median(vals):.0f}" if vals else "-")
        lines.append(f"| {name} | {runs[0]['weights'][i]:g} | " + " | ".join(cells) + " |")
    if meta.get("interpretation"):
        lines += ["", meta["interpretation"]]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="demo:resnet18@32")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--trials", type=int, default=304)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--schedulers", nargs="+", default=list(SCHEDULERS))
    parser.add_argument("--profile", default="host", help="device profile of every run (default host)")
    parser.add_argument("--plot", type=Path, default=HERE / "task_scheduling.png", help="where the PNG goes (default: the committed one)")
    parser.add_argument("--runs-json", default=str(HERE / "task_scheduling_runs.json"), help="where raw runs are saved")
    parser.add_argument("--report-only", metavar="RUNS_JSON", help="no tuning: report saved runs")
    parser.add_argument("--interpretation", default="", help="paragraph appended to the RESULTS.md section")
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    if args.report_only:
        saved = json.loads(Path(args.report_only).read_text())
        runs, meta = saved["runs"], saved["meta"]
    else:
        logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
        meta = {"model": args.model, "trials": args.trials, "batch": args.batch, "seeds": args.seeds, "ucb_awaits": True, "runner_awaits": True,
                "pipeline": True, "profile": args.profile, "schedulers": args.schedulers, "peak_gflops": run_profile(args, "gradient", 0).device.peak_gflops,
                "load_start": os.getloadavg()[0], "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        began = time.time()
        runs = []
        with shared_board(run_profile(args, "gradient", 0)) as board:
            for index, seed in enumerate(args.seeds):
                names = args.schedulers[index % len(args.schedulers):] + args.schedulers[: index % len(args.schedulers)]
                for name in names:
                    run = tune_once(args, board, name, seed)
                    runs.append(run)
                    print(f"seed {seed} {name}: final {run['final_model_ms']:.3f} ms, e2e {run['e2e_median_ms']:.3f} ms, "
                          f"wall {run['wall_s']:.0f} s ({time.time() - began:.0f} s total)", flush=True)
                    meta.update(load_end=os.getloadavg()[0], minutes=(time.time() - began) / 60)
                    Path(args.runs_json).write_text(json.dumps({"runs": runs, "meta": meta}))
    if args.interpretation:
        meta["interpretation"] = args.interpretation
    plot(runs, args.plot, meta["model"])
    text = report_text(runs, meta)
    print(text)
    if args.write_results:
        write_section(text, MARK)
    return 0


if __name__ == "__main__":
    sys.exit(main())
