"""Warm start from history: measurements to reach the cold-start best latency.

Scenario (the history-database paper's, §III): a team tuned the convolutions of
``demo:tiny-cnn`` at 32x32 before; now the same network at 64x64 is tuned, so
the history holds the same operators at other shapes. For each seed:

1. history: tune the two conv tasks at 32x32 (``--history-trials`` per task)
   into a fresh SQLite history;
2. cold: tune the two conv tasks at 64x64 with a fresh cost model
   (``--cost-model``, default: the profile default, the random forest);
3. warm: the same, after ``edgetune.history.warmstart.warm_start`` trained the
   cost model on that history (``--scope``, default ``auto``: similar tasks
   only for operators without same-task history).

Metric: the model-level latency ``sum of each task's best latency so far``
after every measured candidate. Reported per seed and as medians: the cold
run's final value, and how many measurements each run needed to reach it.
Everything is measured through one loopback tracker + RPC server.

Usage::

  python benchmarks/warm_start.py                      # seeds 0 1 2
  python benchmarks/warm_start.py --cost-model xgb --scope similar
  python benchmarks/warm_start.py --write-results      # also update RESULTS.md
"""

from __future__ import annotations

import argparse
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
from edgetune.history import open_history
from edgetune.history.warmstart import warm_start
from edgetune.measure.runner import MeasureConfig, TrackerRunner
from edgetune.history.warmstart import WARM_START_SCOPES
from edgetune.profile.schema import TuningSettings
from edgetune.search import make_search_strategy
from edgetune.search.factory import make_cost_model
from edgetune.tasks import load_model, prepare_for_tuning

TARGET = tvm.target.Target({"kind": "llvm", "num-cores": 2})
MARK = "warm_start"


def conv_tasks(spec: str) -> list[tuple[str, Any]]:
    model = load_model(spec)
    tasks = ms.relax_integration.extract_tasks(prepare_for_tuning(model.mod, TARGET), TARGET)
    return [(t.task_name, t.dispatched[0]) for t in tasks if "conv2d" in t.task_name]


def tune(tasks, address, seed, trials_per_task, history, cost_model) -> list[float]:
    """Tune ``tasks``; return the model-level latency after each measured candidate."""
    best = [np.inf] * len(tasks)
    curve: list[float] = []

    @derived_object
    class Curve(ms.measure_callback.PyMeasureCallback):
        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):  # noqa: D102
            for ran in runner_results:
                if ran.error_msg is None and ran.run_secs:
                    best[task_id] = min(best[task_id], float(np.mean([float(x) for x in ran.run_secs])))
                curve.append(float(sum(best)))

    contexts = [
        ms.TuneContext(
            mod=mod, target=TARGET, space_generator="post-order-apply",
            search_strategy=make_search_strategy("evolutionary", num_trials_per_iter=8),
            task_name=name, num_threads=2, rand_state=seed,
        )
        for name, mod in tasks
    ]
    with closing(WarmBuilder(timeout_sec=60)) as builder:
        runner = TrackerRunner(address, config=MeasureConfig(evaluator="fixed", number=5, repeat=3, min_repeat_ms=20))
        try:
            ms.tune_tasks(
                tasks=contexts, task_weights=[1.0] * len(tasks), work_dir=tempfile.mkdtemp(prefix="ws-"),
                max_trials_global=trials_per_task * len(tasks), max_trials_per_task=trials_per_task,
                num_trials_per_iter=8, builder=builder, runner=runner, database=history,
                cost_model=cost_model,
                measure_callbacks=[ms.measure_callback.AddToDatabase(), ms.measure_callback.UpdateCostModel(), Curve()],
                task_scheduler="round-robin",
            )
        finally:
            runner.close()
    return curve


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
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()

    def new_model(seed: int) -> Any:
        return make_cost_model(args.cost_model, seed=seed, num_cores=2)

    import logging

    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    load_tensor_intrinsics(TARGET)
    source, target_tasks = conv_tasks("demo:tiny-cnn"), conv_tasks("demo:tiny-cnn@64")
    started = time.time()
    rows = []
    with LocalBoard(key="local") as board:
        address = board.start()
        for seed in args.seeds:
            work = Path(tempfile.mkdtemp(prefix=f"warm-start-{seed}-"))
            other_board = args.scenario == "other-board"
            recorder = open_history(str(work / "history.db"), board_id="board-b" if other_board else "local")
            tune(target_tasks if other_board else source, address, seed + 100, args.history_trials, recorder, new_model(seed + 100))
            recorder.close()
            history = open_history(str(work / "history.db"), board_id="local")
            cold = tune(target_tasks, address, seed, args.trials_per_task, open_history(str(work / "cold.db"), board_id="local"), new_model(seed))
            model = new_model(seed)
            report = warm_start(
                model, [mod for _, mod in target_tasks], history, TARGET, board_id="local",
                scope=args.scope,
            )
            warm = tune(target_tasks, address, seed, args.trials_per_task, history, model)
            goal = cold[-1]
            rows.append({
                "seed": seed, "history_records": report.total, "similar": report.similar_task,
                "other_board": report.other_board,
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
