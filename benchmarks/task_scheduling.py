"""Model-level task scheduling: model latency over wall-clock time, gradient vs round-robin vs UCB.

Scenario (DynaTune, ICLR 2021, §5): a deployment engineer tunes a whole
network and cares about the *model's* latency as tuning goes on. For each seed
and each scheduler (``gradient``: MetaSchedule's default, ``round-robin``, and
edgetune's ``ucb``), the same architecture is tuned with the same total budget
on one loopback tracker + RPC server; the order of the schedulers rotates with
the seed. Everything else is edgetune's tuning stack as ``edgetune tune`` uses
it (WarmBuilder, TrackerRunner with fixed timing, evolutionary search sized to
the batch, XGBoost cost model, SQLite history).

Metric: model latency = sum over tasks of weight x best measured latency,
after every measured candidate, against seconds since tuning started (defined
once every task has a valid measurement). At the end the model is compiled
with each run's history and its end-to-end latency measured on the board.

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
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import tvm
import tvm.s_tir.meta_schedule as ms
from tvm.ir.utils import derived_object

from _results import write_section
from edgetune.board.local import LocalBoard
from edgetune.builder.builder import WarmBuilder
from edgetune.builder.intrinsics import load_tensor_intrinsics
from edgetune.deploy.compile import compile_model, export_model, run_on_board
from edgetune.history import open_history
from edgetune.measure.runner import MeasureConfig, TrackerRunner
from edgetune.profile import load_profile
from edgetune.search import make_cost_model, make_search_strategy, make_task_scheduler
from edgetune.tasks import load_model, prepare_for_tuning

TARGET = tvm.target.Target({"kind": "llvm", "num-cores": 2})
HERE = Path(__file__).parent
MARK = "task_scheduling"
SCHEDULERS = ("gradient", "round-robin", "ucb")


@derived_object
class _Measured(ms.runner.PyRunnerFuture):
    def __init__(self, result: Any) -> None:
        super().__init__()
        self.value = result

    def done(self) -> bool:
        return True

    def result(self) -> Any:
        return self.value


@derived_object
class AwaitingRunner(ms.runner.PyRunner):
    """Measures a batch before handing it back, so no scheduler times a batch while the host builds the next.

    On the loopback board the "device" is this host's CPU. MetaSchedule's
    round-robin always overlaps the next batch's search and build with the
    last batch's timing, its gradient rule whenever it picks another task, and
    edgetune's UCB waits on the embedded board: left alone, each scheduler's
    latencies would be timed under a different load (the earlier runs of this
    benchmark: gradient's final sums were 1.2-1.6x this one's, seed for seed).
    """

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self.inner = inner

    def run(self, runner_inputs: list[Any]) -> list[Any]:
        return [_Measured(future.result()) for future in self.inner.run(runner_inputs)]


def extract(spec: str) -> tuple[Any, list[Any]]:
    model = load_model(spec)
    tasks = [
        t
        for t in ms.relax_integration.extract_tasks(prepare_for_tuning(model.mod, TARGET), TARGET)
        if not t.mod.attrs.get("tirx.is_scheduled", False)
    ]
    return model, tasks


def tune_once(model, extracted, address, scheduler_name: str, seed: int, trials: int, batch: int, work: Path) -> dict[str, Any]:
    """One tuning run; returns its curve, allocation and end-to-end latency."""
    contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
        extracted, work_dir=str(work / "logs"), strategy=make_search_strategy("evolutionary", num_trials_per_iter=batch),
        num_threads=2, seed=seed,
    )
    weights = [float(w) for w in weights]
    n = len(contexts)
    best = [math.inf] * n
    trials_per_task = [0] * n
    curve: list[tuple[float, float]] = []
    order: list[int] = []
    started = [0.0]

    @derived_object
    class Curve(ms.measure_callback.PyMeasureCallback):
        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):  # noqa: D102
            order.append(task_id)
            for built, ran in zip(builder_results, runner_results):
                trials_per_task[task_id] += 1
                if built.error_msg is None and ran.error_msg is None and ran.run_secs:
                    best[task_id] = min(best[task_id], float(np.mean([float(x) for x in ran.run_secs])))
                total = sum(w * b for w, b in zip(weights, best))
                curve.append((time.monotonic() - started[0], total if math.isfinite(total) else math.nan))

    history = open_history(str(work / "history.db"), board_id="local")
    # as `edgetune tune` on the embedded board: edgetune's schedulers await each batch (the board is this host's CPU)
    scheduler = make_task_scheduler(scheduler_name, seed=seed, wait_for_results=True)
    with closing(WarmBuilder(timeout_sec=60)) as builder:
        runner = TrackerRunner(address, config=MeasureConfig(number=5, repeat=3, min_repeat_ms=20, evaluator="fixed"))
        builder.start()
        try:
            started[0] = time.monotonic()
            ms.tune_tasks(
                tasks=contexts, task_weights=weights, work_dir=str(work / "logs"),
                max_trials_global=trials, max_trials_per_task=trials, num_trials_per_iter=batch,
                builder=builder, runner=AwaitingRunner(runner), database=history,
                cost_model=make_cost_model("xgb", seed=seed, num_cores=2),
                measure_callbacks=[ms.measure_callback.AddToDatabase(), ms.measure_callback.UpdateCostModel(), Curve()],
                task_scheduler=scheduler,
            )
            wall = time.monotonic() - started[0]
        finally:
            runner.close()
    decision = getattr(scheduler, "decision_seconds_", None) if scheduler_name not in ("gradient", "round-robin") else None
    e2e_started = time.monotonic()
    profile = load_profile("host")
    artifact = export_model(compile_model(model.mod, TARGET, history), work / "model.so", profile)
    inputs = [model.random_inputs(seed=0)[spec.name] for spec in model.inputs]
    run = run_on_board(address, "cpu", artifact, inputs, number=10, repeat=5, min_repeat_ms=50)
    history.close()
    return {
        "scheduler": scheduler_name, "seed": seed, "trials": trials, "batch": batch, "wall_s": wall,
        "curve": curve, "order": order, "trials_per_task": trials_per_task,
        "task_names": [c.task_name for c in contexts], "weights": weights,
        "final_model_ms": curve[-1][1] * 1e3 if curve else None,
        "e2e_median_ms": run.latency.median_ms, "e2e_seconds": time.monotonic() - e2e_started,
        "decision_seconds": decision,
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
    import matplotlib

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
        f"--trials {meta['trials']} --batch {meta['batch']} --seeds {' '.join(map(str, meta['seeds']))} --write-results`",
        "",
        f"Setup: `{meta['model']}` ({tasks} tuning tasks, weights = occurrences), target `{{\"kind\": \"llvm\", \"num-cores\": 2}}`, "
        f"{meta['trials']} trials per run in batches of {meta['batch']} (a slot = one batch), evolutionary search (population 64), "
        "XGBoost cost model, WarmBuilder, TrackerRunner with fixed timing (number 5, repeat 3, min_repeat_ms 20), "
        "one loopback `LocalBoard`; per seed the three schedulers run in rotated order. UCB: edgetune defaults "
        "(exploration bonus scaled by each task's share of the model latency, C = 1e-3; Laplace posterior, cost-aware slots, peak GFLOPS unknown"
        + ("; each batch awaited before the next is built, as `edgetune tune` does on the embedded board). " if meta.get("ucb_awaits") else
           "; batches overlapped: the next batch searched and built while the last one was timed). ")
        + ("Every scheduler's batches are measured before the runner returns (AwaitingRunner), so no candidate is timed while the host builds the next batch. "
           if meta.get("runner_awaits") else
           "MetaSchedule's round-robin always times a batch while it builds the next, its gradient rule whenever it picks another task. ")
        + "Model latency = sum of weight x best mean latency of each task (defined once every task has a valid "
        "measurement); end to end = the model compiled with the run's history, median of 5 x 10 runs on the board.",
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
    for name in ("round-robin", "ucb"):
        ratios = [row[f"ratio_{name}"] for row in a["per_seed"] if row.get(f"ratio_{name}")]
        reached = sum(1 for row in a["per_seed"] if row.get(f"t_{name}") is not None)
        lines.append(
            f"- {name}: time to reach the gradient scheduler's final latency, gradient's time / {name}'s time: "
            f"median [min – max] {spread(ratios)} (reached in {reached} of {len(a['per_seed'])} seeds)."
        )
    for name in SCHEDULERS:
        t5 = [r["t_within_5pct"] for r in runs if r["scheduler"] == name]
        got = [t for t in t5 if t is not None]
        lines.append(
            f"- {name}: time to within 5% of the best final: median {fmt(statistics.median(got) if got else None)} s "
            f"(reached in {len(got)} of {len(t5)} runs); final model latency median "
            f"{statistics.median([r['final_model_ms'] for r in runs if r['scheduler'] == name]):.3f} ms, end to end median "
            f"{statistics.median([r['e2e_median_ms'] for r in runs if r['scheduler'] == name]):.3f} ms."
        )
    lines += ["", "![model latency over time](task_scheduling.png)", ""]
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
                "load_start": os.getloadavg()[0], "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        began = time.time()
        load_tensor_intrinsics(TARGET)
        model, extracted = extract(args.model)
        runs = []
        with LocalBoard(key="local", num_threads=2) as board:
            address = board.start()
            for index, seed in enumerate(args.seeds):
                names = args.schedulers[index % len(args.schedulers):] + args.schedulers[: index % len(args.schedulers)]
                for name in names:
                    work = Path(tempfile.mkdtemp(prefix=f"sched-{name}-{seed}-"))
                    run = tune_once(model, extracted, address, name, seed, args.trials, args.batch, work)
                    runs.append(run)
                    print(f"seed {seed} {name}: final {run['final_model_ms']:.3f} ms, e2e {run['e2e_median_ms']:.3f} ms, "
                          f"wall {run['wall_s']:.0f} s ({time.time() - began:.0f} s total)", flush=True)
                    meta.update(load_end=os.getloadavg()[0], minutes=(time.time() - began) / 60)
                    Path(args.runs_json).write_text(json.dumps({"runs": runs, "meta": meta}))
    if args.interpretation:
        meta["interpretation"] = args.interpretation
    plot(runs, HERE / "task_scheduling.png", meta["model"])
    text = report_text(runs, meta)
    print(text)
    if args.write_results:
        write_section(text, MARK)
    return 0


if __name__ == "__main__":
    sys.exit(main())
