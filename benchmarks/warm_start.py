"""Warm start from history: measurements to reach the cold-start best latency.

Scenario (the history-database paper's, §III): a team tuned the convolutions of
``demo:tiny-cnn`` at 32x32 before; now the same network at 64x64 is tuned, so
the history holds the same operators at other shapes. For each seed:

1. history: tune the two conv tasks at 32x32 (``--history-trials`` per task)
   into a fresh SQLite history;
2. cold: tune the two conv tasks at 64x64 with a fresh cost model
   (``--cost-model``, default: the profile default, the random forest);
3. warm: the same, after ``edgetune.costmodel.warmstart.warm_start`` trained the
   cost model on that history (``--scope``, default ``auto``: similar tasks
   only for operators without same-task history).

Metric: the model-level latency ``sum of each task's best latency so far``
after every measured candidate. Reported per seed and as medians: the cold
run's final value, and how many measurements each run needed to reach it.
Everything is measured through one loopback tracker + RPC server.

Each of the three runs is edgetune's tuning pipeline (``edgetune.tuning.run_tune``,
what ``edgetune tune`` runs) on profile ``--profile`` (``host``), the model's
conv tasks only (``TuneOptions.task_names``); the compared component is the
warm start (``TuneOptions.warm_start``: ``"off"`` for the history and cold
runs, ``--scope`` for the warm run, which tunes into the history). Shared
settings, as the earlier figures: target generic ``llvm`` (2 cores), stock
evolutionary search, round-robin, batches of 8, fixed timing (number 5,
repeat 3, min_repeat_ms 20), no untuned default-schedule trial, no
transferred seeds (``tuning.transfer = "off"``: transfer from similar
workloads is another way of using the history, not this one).

Usage::

  python benchmarks/warm_start.py                      # seeds 0 1 2
  python benchmarks/warm_start.py --cost-model xgb --scope similar
  python benchmarks/warm_start.py --write-results      # also update RESULTS.md
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import tvm
import tvm.s_tir.meta_schedule as ms
from tvm.ir.utils import derived_object

from _pipeline import AS_BEFORE, STOCK_SEARCH, bench_profile, shared_board
from _results import write_section
from edgetune.history import open_history
from edgetune.costmodel.warmstart import WARM_START_SCOPES
from edgetune.profile.schema import TuningSettings
from edgetune.tuning import Components, TuneOptions, TuningPipeline, run_tune

MARK = "warm_start"
SOURCE, TARGET_MODEL = "demo:tiny-cnn", "demo:tiny-cnn@64"
BATCH = 8


@derived_object
class SumOfBests(ms.measure_callback.PyMeasureCallback):
    """The sum of the tasks' best latencies so far, after every measured candidate."""

    def __init__(self, n_tasks: int) -> None:
        super().__init__()
        self.best = [np.inf] * n_tasks
        self.curve: list[float] = []

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):  # noqa: D102
        for ran in runner_results:
            if ran.error_msg is None and ran.run_secs:
                self.best[task_id] = min(self.best[task_id], float(np.mean([float(x) for x in ran.run_secs])))
            self.curve.append(float(sum(self.best)))


def conv_tasks(spec: str, profile: Any) -> list[str]:
    """Names of the model's conv tasks, as the pipeline extracts them."""
    probe = TuningPipeline(TuneOptions(profile=profile, model=spec, out_dir=Path("unused")))
    return [task.task_name for task in probe.extract_tasks(*probe.check_inputs()) if "conv2d" in task.task_name]


def run_profile(args: argparse.Namespace, seed: int, per_task: int) -> Any:
    tuning = {
        **AS_BEFORE, **STOCK_SEARCH, "cost_model": args.cost_model, "seed": seed, "num_trials_per_iter": BATCH,
        "task_scheduler": "round-robin", "max_trials_per_task": per_task,
    }
    return bench_profile(args.profile, tuning=tuning, measure={"evaluator": "fixed", "number": 5, "repeat": 3, "min_repeat_ms": 20})


def tune(options: TuneOptions, n_tasks: int, per_task: int) -> tuple[list[float], Any]:
    """Tune ``per_task`` new trials per task; the curve after each measured candidate and the run summary.

    The pipeline counts the records a history already holds for the run's
    tasks against its budget (it resumes): those are added to ``trials``.
    """
    pipeline = TuningPipeline(options)
    target, model = pipeline.check_inputs()
    history = open_history(options.db, board_id=options.key or "")
    try:
        before = sum(pipeline.plan_tasks(history, target, model).previous)
    finally:
        history.close()
    options.trials = before + per_task * n_tasks
    curve = SumOfBests(n_tasks)
    summary = run_tune(options, components=Components(measure_callbacks=[curve]))
    return curve.curve, summary


def reach(curve: list[float], goal: float) -> int | None:
    """1-based number of measurements after which ``curve`` is at or below ``goal``."""
    for index, value in enumerate(curve, start=1):
        if value <= goal * (1 + 1e-9):
            return index
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--trials-per-task", type=int, default=32)
    parser.add_argument("--history-trials", type=int, default=64, help="per task, at 32x32")
    parser.add_argument(
        "--scenario",
        choices=("similar", "other-board"),
        default="similar",
        help="history of the same operators at 32x32 ('similar'), or of the same 64x64 tasks measured on "
        "another board of the same target ('other-board', down-weighted to half)",
    )
    parser.add_argument(
        "--cost-model", default=TuningSettings().cost_model, choices=("xgb", "rf"),
        help="cost model of all three runs (default: the profile default, %(default)s)",
    )
    parser.add_argument(
        "--scope", default="auto", choices=WARM_START_SCOPES,
        help="warm_start scope of the warm run (default %(default)s; with the 'similar' scenario's history, "
        "which holds no same-task records, 'auto' and 'similar' train on the same records)",
    )
    parser.add_argument("--profile", default="host", help="device profile of the runs (default host)")
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()

    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    base = run_profile(args, 0, args.trials_per_task)
    source_tasks, target_tasks = conv_tasks(SOURCE, base), conv_tasks(TARGET_MODEL, base)
    other_board = args.scenario == "other-board"
    started = time.time()
    rows = []
    with shared_board(base) as board:
        for seed in args.seeds:
            work = Path(tempfile.mkdtemp(prefix=f"warm-start-{seed}-"))

            def options(name: str, spec: str, seed: int, per_task: int, db: str, **kw: Any) -> TuneOptions:
                tasks = target_tasks if spec == TARGET_MODEL else source_tasks
                return TuneOptions(profile=run_profile(args, seed, per_task), model=spec, task_names=tasks, out_dir=work / name,
                                   db=str(work / db), evaluate=False, board=board, **kw)

            # 1. the history: other shapes, or the same tasks on another board
            history = options("history", TARGET_MODEL if other_board else SOURCE, seed + 100, args.history_trials, "history.db",
                              warm_start="off", key="board-b" if other_board else None)
            tune(history, len(history.task_names), args.history_trials)
            # 2. cold: a fresh history, no warm start; 3. warm: into the history, the cost model trained on it first
            cold, _ = tune(options("cold", TARGET_MODEL, seed, args.trials_per_task, "cold.db", warm_start="off"),
                           len(target_tasks), args.trials_per_task)
            warm, summary = tune(options("warm", TARGET_MODEL, seed, args.trials_per_task, "history.db", warm_start=args.scope),
                                 len(target_tasks), args.trials_per_task)
            used = summary.warm_start
            goal = cold[-1]
            rows.append({
                "seed": seed, "history_records": used["same_task"] + used["similar_task"] + used["other_board"],
                "similar": used["similar_task"], "other_board": used["other_board"],
                "cold_best_ms": goal * 1e3, "warm_best_ms": warm[-1] * 1e3,
                "cold_to_goal": reach(cold, goal), "warm_to_goal": reach(warm, goal), "budget": len(cold),
            })
            print(f"seed {seed}: {rows[-1]} ({time.time() - started:.0f} s)", flush=True)
    text = report_text(rows, args)
    print(text)
    if args.write_results:
        write_section(text, f"{MARK}_{args.scenario.replace('-', '_')}")
    return 0


def report_text(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    def med(key: str) -> float | None:
        values = [r[key] for r in rows if r[key] is not None]
        return statistics.median(values) if values else None

    if args.scenario == "other-board":
        history_text = (
            "History: the same two conv tasks at 64x64, tuned with another seed and stored as measured on another "
            "board (`board-b`) of the same target; the warm run (board `local`) trains the cost model on half of "
            f"those records (`scope=\"{args.scope}\"`, other boards down-weighted) and MetaSchedule's evolutionary search "
            "also starts from the history's best programs of the same workloads (its stock use of the database)."
        )
    else:
        history_text = (
            "History: the two conv tasks of `demo:tiny-cnn` at 32x32 (same operators, other shapes), "
            f"`scope=\"{args.scope}\"`"
            + (" (so the warm run uses none of it)." if args.scope == "same" else " (no same-task history, so the similar tasks are used).")
        )
    lines = [
        f"## Warm start from history ({args.scenario}): measurements to reach the cold-start best",
        "",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Machine: {os.cpu_count()} CPUs, "
        f"{platform.platform()}, TVM {tvm.__version__}. Load average at the end: {os.getloadavg()[0]:.2f}.",
        "",
        f"Reproduce: `python benchmarks/warm_start.py --scenario {args.scenario} --cost-model {args.cost_model} "
        f"--scope {args.scope} --write-results` "
        f"(seeds {' '.join(map(str, args.seeds))}, {args.trials_per_task} trials per task, history of "
        f"{args.history_trials} trials per task).",
        "",
        history_text + f" Cost model of every run: `{args.cost_model}`. Tuned: the two conv tasks at 64x64, evolutionary search (population 64), batches of 8, "
        "round-robin, loopback board. Metric: sum of the two tasks' best latencies after each measurement; "
        "goal = the cold run's final value.",
        "",
        "| seed | history records used | cold: final (ms) | warm: final (ms) | cold: measurements to goal | warm: measurements to goal |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['seed']} | {r['history_records']} | {r['cold_best_ms']:.4f} | {r['warm_best_ms']:.4f} | "
            f"{r['cold_to_goal']} of {r['budget']} | {r['warm_to_goal'] if r['warm_to_goal'] is not None else 'not reached'} |"
        )
    def steps(key: str) -> float:
        # a seed that never reached the goal counts as worse than any that did (not left out)
        return statistics.median([math.inf if r[key] is None else r[key] for r in rows])

    cold_m, warm_m = steps("cold_to_goal"), steps("warm_to_goal")
    reached = sum(r["warm_to_goal"] is not None for r in rows)
    shown = "not reached (beyond the budget)" if math.isinf(warm_m) else f"{warm_m:g}"
    lines += [
        "",
        f"Median measurements to the cold-start best (a seed that did not reach it counts as beyond the budget): "
        f"cold {cold_m:g}, warm {shown} (warm reached it in {reached} of {len(rows)} seeds)"
        + (
            (f"; {100 * (1 - warm_m / cold_m):.0f}% fewer." if warm_m <= cold_m else f"; {100 * (warm_m / cold_m - 1):.0f}% more.")
            if math.isfinite(warm_m) and cold_m
            else "; worse."
        ),
        f"Median final latency: cold {med('cold_best_ms'):.4f} ms, warm {med('warm_best_ms'):.4f} ms.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
