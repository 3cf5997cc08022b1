"""Measurement reduction: on-device cost and final speed, stock vs edgetune's components.

Tasks (extracted from the built-in demo models): a ResNet-18 3x3 convolution,
ResNet-18's dense layer (matmul) and a MobileNetV2 depthwise convolution. Each
task is tuned alone with the same budget of proposed candidates, through one
loopback tracker + RPC server, for every configuration and seed:

  stock        XGBoost, evolutionary search (5 % fixed random share), every
               proposed candidate measured with MetaSchedule's default
               evaluator (number=3, repeat=1, min_repeat_ms=100)
  adaptive     stock + adaptive evaluator (AdaTune §4.1)
  kmeans       stock + K-means sampling (early-stop paper §II.C)
  early-stop   stock + adaptive early stop (early-stop paper §II.B)
  rf-ei        stock with a random forest ranking by expected improvement and
               contextual exploration (AdaTune §4.2)
  all          all of the above (``cost_model = "rf"``, CV threshold 10 %)
  adaptive-cv3 adaptive with a 3 % CV threshold
  all-cv3      all with a 3 % CV threshold

Every configuration is a run of edgetune's tuning pipeline
(``edgetune.tuning.run_tune``, what ``edgetune tune`` runs) on profile
``--profile`` (``host``) and the target of the earlier figures (generic
``llvm``, 2 cores), one task of the model (``TuneOptions.task_names``), a
fresh history, no warm start, and only the compared settings changed:
``tuning.cost_model``/``sampler``/``early_stop``/``exploration`` and the
``[measure]`` table (evaluator and its settings). The board is one loopback
tracker + RPC server (1 thread) shared by every run. As when the figures
were first measured, the runs measure no untuned default schedule and
transfer no seeds (``tuning.default_schedule = false``,
``tuning.transfer = "off"``). Reported per configuration: candidates
measured, device seconds (inside the remote timing calls), tuning wall clock,
and the best candidate's latency re-measured at the end with one common fixed
evaluator (number=20, repeat=5, min_repeat_ms=20), so a noisier evaluator
cannot flatter itself. Configurations are interleaved per task and seed so
machine noise hits all.

Usage::

  python benchmarks/measurement_reduction.py                   # seeds 0 1 2, 48 per task
  python benchmarks/measurement_reduction.py --write-results   # also update RESULTS.md
  python benchmarks/measurement_reduction.py --configs stock all --seeds 0
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import statistics
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import tvm.s_tir.meta_schedule as ms

from _pipeline import AS_BEFORE, bench_profile, fresh_dir, shared_board
from _results import write_section
from edgetune.builder.builder import WarmBuilder
from edgetune.common.failure import is_failed
from edgetune.history import open_history
from edgetune.measure.runner import TrackerRunner
from edgetune.profile.schema import MeasureSettings
from edgetune.tuning import TuneOptions, run_tune

MARK = "measurement_reduction"
BATCH = 8

#: (label, model, task name) - a ResNet-18 conv2d, the dense layer, a depthwise conv2d
TASKS = (
    ("resnet18 conv2d 3x3 64ch", "demo:resnet18@64", "fused_conv2d1_add1_relu1"),
    ("resnet18 dense 512x1000", "demo:resnet18@64", "fused_matmul_add9"),
    ("mobilenetv2 depthwise 3x3 96ch s2", "demo:mobilenetv2@64", "fused_conv2d4_add3_maximum2_minimum2"),
)

#: [measure] overrides of each configuration
STOCK_MEASURE = {"evaluator": "fixed", "number": 3, "repeat": 1, "min_repeat_ms": 100}
ADAPTIVE_MEASURE = {"evaluator": "adaptive", "cv_threshold": 0.10}  # the paper's threshold
ADAPTIVE_TIGHT = {"evaluator": "adaptive", "cv_threshold": 0.03}
FINAL_MEASURE = MeasureSettings(evaluator="fixed", number=20, repeat=5, min_repeat_ms=20)
OFF = {"sampler": "none", "early_stop": "none", "exploration": "fixed", "cost_model": "xgb"}
ALL = {"sampler": "kmeans", "early_stop": "adaptive", "exploration": "contextual", "cost_model": "rf"}

#: name -> ([tuning] overrides, [measure] overrides)
CONFIGS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "stock": (OFF, STOCK_MEASURE),
    "adaptive": (OFF, ADAPTIVE_MEASURE),
    "kmeans": ({**OFF, "sampler": "kmeans"}, STOCK_MEASURE),
    "early-stop": ({**OFF, "early_stop": "adaptive"}, STOCK_MEASURE),
    "rf-ei": ({**OFF, "cost_model": "rf", "exploration": "contextual"}, STOCK_MEASURE),
    "all": (ALL, ADAPTIVE_MEASURE),
    "adaptive-cv3": (OFF, ADAPTIVE_TIGHT),
    "all-cv3": (ALL, ADAPTIVE_TIGHT),
}


def config_profile(name: str, config: str, seed: int) -> Any:
    """The profile of one configuration: ``name`` with the configuration's settings, batches of ``BATCH``."""
    tuning, measure = CONFIGS[config]
    return bench_profile(
        name,
        tuning={**AS_BEFORE, **tuning, "seed": seed, "num_trials_per_iter": BATCH},
        measure=measure,
        device={"num_threads": 1},
    )


def tune_one(config: str, spec: str, task: str, seed: int, args: argparse.Namespace, board: Any, builder: WarmBuilder) -> dict[str, Any]:
    """One task tuned by the pipeline with ``config``'s settings; its counts and re-measured best."""
    profile = config_profile(args.profile, config, seed)
    options = TuneOptions(
        profile=profile, model=spec, task_names=[task], out_dir=fresh_dir(f"mr-{config}-"), trials=args.budget,
        evaluate=False, warm_start="off", board=board,
    )
    summary = run_tune(options)
    trials = summary.trials
    reduction = (summary.measurement_reduction or {}).get("tasks") or []
    return {
        "config": config, "seed": seed, "measured": trials.measured_on_device, "failed": trials.failed,
        "device_s": summary.seconds.device, "wall_s": summary.seconds.tuning_wall,
        "best_us": remeasure_best(summary.history, profile, board, builder),
        "runs_per_candidate": summary.measurement.get("mean_runs_per_candidate"),
        "proposed": reduction[0]["proposed"] if reduction else trials.measured_on_device + trials.failed,
        "stopped_early": bool(reduction and reduction[0]["stopped_early"]),
    }


def remeasure_best(history_url: str, profile: Any, board: Any, builder: WarmBuilder) -> float | None:
    """The run's best record's latency (us) re-measured with FINAL_MEASURE (its history holds one task)."""
    from tvm.s_tir import Schedule

    history = open_history(history_url, read_only=True)
    try:
        records = [r for r in history.get_all_tuning_records() if r.run_secs and not is_failed([float(x) for x in r.run_secs])]
    finally:
        history.close()
    if not records:
        return None
    best = min(records, key=lambda r: float(np.mean([float(x) for x in r.run_secs])))
    sch = Schedule(best.workload.mod)
    best.trace.apply_to_schedule(sch, remove_postproc=False)
    (built,) = builder.build([ms.builder.BuilderInput(sch.mod, profile.tvm_target())])
    if built.error_msg:
        return None
    runner = TrackerRunner(board.open(), config=FINAL_MEASURE)
    try:
        args = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
        (future,) = runner.run([ms.runner.RunnerInput(built.artifact_path, "llvm", args)])
        result = future.result()
    finally:
        runner.close()
    if result.error_msg or not result.run_secs:
        return None
    return float(np.median([float(x) for x in result.run_secs])) * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=48, help="proposed candidates per task")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--profile", default="host", help="device profile the configurations change (default host)")
    parser.add_argument("--raw", type=Path, help="also write every row as JSON here")
    parser.add_argument("--from-raw", type=Path, help="report the rows of an earlier --raw file instead of running")
    parser.add_argument("--write-results", action="store_true")
    parser.add_argument("--section", default=MARK, help="RESULTS.md section to (re)write")
    parser.add_argument("--title", default="Measurement reduction (issue 3)", help="heading of that section")
    args = parser.parse_args()
    if args.from_raw:
        rows = json.loads(args.from_raw.read_text())
        args.seeds = sorted({r["seed"] for r in rows})
        return _report(rows, args, float(rows[-1].get("elapsed_s", 0.0)))
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    rows: list[dict[str, Any]] = []
    started = time.time()
    with shared_board(config_profile(args.profile, "stock", 0)) as board, closing(WarmBuilder(timeout_sec=60)) as builder:
        builder.start()
        for seed in args.seeds:
            for label, spec, task in TASKS:
                for config in args.configs:
                    row = {"task": label, **tune_one(config, spec, task, seed, args, board, builder)}
                    row["elapsed_s"] = time.time() - started
                    rows.append(row)
                    print(json.dumps(row), f"({time.time() - started:.0f} s)", flush=True)
                    if args.raw:
                        args.raw.write_text(json.dumps(rows, indent=1))
    return _report(rows, args, time.time() - started)


def _report(rows: list[dict[str, Any]], args: argparse.Namespace, seconds: float) -> int:
    text = report_text(rows, args, seconds)
    print(text)
    if args.write_results:
        write_section(f"## {args.title}\n\n{text}", args.section)
    return 0


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    med = statistics.median(values)
    return f"{med:.3g} [{min(values):.3g}-{max(values):.3g}]"


def report_text(rows: list[dict[str, Any]], args: argparse.Namespace, seconds: float) -> str:
    configs = [c for c in CONFIGS if any(r["config"] == c for r in rows)]
    seeds = sorted({r["seed"] for r in rows})
    tasks = list(dict.fromkeys(r["task"] for r in rows))

    def total(config: str, seed: int, key: str) -> float:
        return sum(r[key] for r in rows if r["config"] == config and r["seed"] == seed)

    def best(config: str, seed: int, task: str) -> float | None:
        for r in rows:
            if r["config"] == config and r["seed"] == seed and r["task"] == task:
                return r["best_us"]
        return None

    lines = [
        f"Reproduce: `python benchmarks/measurement_reduction.py --seeds {' '.join(map(str, seeds))} "
        f"--budget {args.budget} --configs {' '.join(configs)} --write-results` ({platform.machine()}, {len(tasks)} tasks x {len(seeds)} seeds, "
        f"batch {BATCH}, {seconds / 60:.0f} min in one run). Values: median over seeds [min-max]; "
        "ratios are per seed against stock, then the median.",
        "",
        "| config | measured (sum of tasks) | device s | wall s | measured vs stock | device s vs stock | best latency vs stock (geo-mean of tasks) |",
        "|---|---|---|---|---|---|---|",
    ]
    for config in configs:
        measured = [total(config, s, "measured") for s in seeds]
        device = [total(config, s, "device_s") for s in seeds]
        wall = [total(config, s, "wall_s") for s in seeds]
        m_ratio = [total(config, s, "measured") / max(1, total("stock", s, "measured")) for s in seeds]
        d_ratio = [total(config, s, "device_s") / max(1e-9, total("stock", s, "device_s")) for s in seeds]
        lat_ratio = []
        for s in seeds:
            ratios = [best(config, s, t) / best("stock", s, t) for t in tasks if best(config, s, t) and best("stock", s, t)]
            if ratios:
                lat_ratio.append(float(np.exp(np.mean(np.log(ratios)))))
        lines.append(
            f"| {config} | {_spread(measured)} | {_spread(device)} | {_spread(wall)} | {_spread(m_ratio)} | "
            f"{_spread(d_ratio)} | {_spread(lat_ratio)} |"
        )
    lines += ["", "Best latency per task (us, re-measured with one fixed evaluator), median [min-max] over seeds:", ""]
    lines.append("| task | " + " | ".join(configs) + " |")
    lines.append("|---|" + "---|" * len(configs))
    for task in tasks:
        cells = [_spread([b for s in seeds if (b := best(c, s, task)) is not None]) for c in configs]
        lines.append(f"| {task} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
