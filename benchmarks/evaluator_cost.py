"""Evaluator cost on whole real models: stock MetaSchedule's timing vs edgetune's adaptive one (issue 17).

Part 1 (the product): each model is tuned through ``edgetune.tuning.run_tune``
(what ``edgetune tune`` runs) with the same budget per seed, in three
configurations differing only in profile settings:

  stock        the product's search; evaluator "fixed", number=3, repeat=1,
               min_repeat_ms=100 (MetaSchedule's default RPC evaluator)
  adaptive     the profile as shipped: adaptive evaluator (stop rule,
               time-bounded micro-batches, device-time budget ``budget_ms``)
  stock-stack  MetaSchedule's search as well (XGBoost, no K-means sampling,
               no early stop, fixed random share) with its evaluator

Reported: device seconds (time inside the remote timing calls, from the
runner), per measured candidate and per run, and the delivered model's
latency: the tuned model built and timed end to end on the board by one
common evaluator, so no evaluator can flatter its own candidates. Goals
(issue 17): adaptive at or below stock's device seconds per candidate on every
model; the whole stack at least 50 % below stock-stack's device seconds; the
delivered latency within the seeds' spread.

Part 2 (ranking, a component check): the candidates the adaptive run measured
for the model's workload with the most records are re-measured on one board by
stock, adaptive and stock again; Spearman's rho of stock vs adaptive is
compared with stock vs stock-again (the agreement the board's noise allows).

Usage::

  python benchmarks/evaluator_cost.py --models resnet18 mobilenetv2 squeezenet --seeds 0 1 2
  python benchmarks/evaluator_cost.py --models squeezenet --seeds 0 --trials 48 --res 64 --write-results
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from _results import write_section

MARK = "evaluator_cost"
STOCK = dict(evaluator="fixed", number=3, repeat=1, min_repeat_ms=100)
#: MetaSchedule's own search: XGBoost, no sampling, no early stop, a fixed random share
STOCK_SEARCH = dict(cost_model="xgb", sampler="none", early_stop="none", exploration="fixed")
#: name -> ([tuning] overrides, [measure] overrides) of the profile
CONFIGS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "stock": ({}, STOCK),
    "adaptive": ({}, {}),
    "stock-stack": (STOCK_SEARCH, STOCK),
}


def _profile(args: argparse.Namespace, seed: int, config: str) -> Any:
    from edgetune.profile import load_profile

    profile = load_profile(args.profile)
    tuning, measure = CONFIGS[config]
    return dataclasses.replace(
        profile, measure=dataclasses.replace(profile.measure, **measure), tuning=dataclasses.replace(profile.tuning, seed=seed, **tuning)
    )


def tune(model: str, seed: int, config: str, board: Any, args: argparse.Namespace) -> dict[str, Any]:
    from edgetune.tuning import TuneOptions, run_tune

    out = Path(tempfile.mkdtemp(prefix=f"evalcost-{config}-{seed}-"))
    spec = f"demo:{model}@{args.res}"
    summary = run_tune(
        TuneOptions(profile=_profile(args, seed, config), model=spec, out_dir=out, trials=args.trials,
                    evaluate=args.end_to_end and not args.task, warm_start="off", board=board,
                    task_names=[args.task] if args.task else None)
    )
    e2e = summary.end_to_end
    measured = summary.trials.measured_on_device
    estimate = sum(t.weight * t.best_latency_us for t in summary.tasks if t.best_latency_us is not None)
    return {
        "model": model, "seed": seed, "config": config, "measured": measured,
        "device_s": summary.seconds.device, "device_per_candidate_ms": summary.seconds.device / measured * 1e3 if measured else None,
        "estimate_ms": estimate / 1e3, "history": summary.history, "out": str(out),
        "model_ms": e2e.tuned_ms if e2e and e2e.tuned_latency else None,  # the delivered model, timed end to end
        "runs_per_candidate": (summary.measurement or {}).get("mean_runs_per_candidate"),
        "stopped_by": {k: (summary.measurement or {}).get(f"stopped_by_{k}", 0) for k in ("cv", "ci", "budget", "cap")},
    }


def rebuild_candidates(history_url: str, limit: int) -> tuple[Any, list[str], Any]:
    """The first ``limit`` successful candidates of the workload with the most records, built again."""
    from collections import Counter

    import tvm
    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    from edgetune.builder.builder import WarmBuilder
    from edgetune.history import open_history

    history = open_history(history_url, read_only=True)
    try:
        summaries = [s for s in history.bulk.record_summaries() if s.mean_run_sec is not None]
        busiest = Counter(id(s.workload) for s in summaries).most_common(1)[0][0]
        chosen = [s.id for s in summaries if id(s.workload) == busiest][:limit]
        records = history.bulk.records_by_id(chosen)
    finally:
        history.close()
    builder = WarmBuilder(timeout_sec=60)
    inputs = []
    for record in records:
        sch = Schedule(record.workload.mod)
        record.trace.apply_to_schedule(sch, remove_postproc=False)
        inputs.append(BuilderInput(sch.mod, tvm.target.Target(record.target)))
    built = builder.build(inputs)
    return builder, [str(b.artifact_path) for b in built if not b.error_msg], records[0].args_info


def ranking(row: dict[str, Any], args: argparse.Namespace, address: Any) -> dict[str, Any]:
    """Re-measure one task's candidates with both evaluators; compare the two orders."""
    from scipy.stats import spearmanr

    from tvm.s_tir.meta_schedule.runner import RunnerInput

    from edgetune.measure.runner import TrackerRunner

    builder, artifacts, args_info = rebuild_candidates(row["history"], args.rank_candidates)
    results = {}
    try:
        # stock twice: how far two stock passes agree is the ceiling set by the board's noise
        for name, config in (("stock", "stock"), ("adaptive", "adaptive"), ("stock again", "stock")):
            runner = TrackerRunner(address, config=_profile(args, row["seed"], config).measure)
            try:
                outcome = [f.result() for f in runner.run([RunnerInput(path, "cpu", args_info) for path in artifacts])]
            finally:
                runner.close()
            results[name] = [float(np.mean(r.run_secs)) if r.run_secs else np.nan for r in outcome]
    finally:
        builder.close()
    stock, adaptive, again = (np.array(results[name]) for name in ("stock", "adaptive", "stock again"))
    ok = ~(np.isnan(stock) | np.isnan(adaptive) | np.isnan(again))

    def rho(a: np.ndarray, b: np.ndarray) -> float:
        return float(spearmanr(a[ok], b[ok]).statistic) if ok.sum() > 2 else float("nan")

    # the workload re-measured is the one with the most records (rebuild_candidates)
    return {"model": row["model"], "task": "workload with the most records", "candidates": int(ok.sum()),
            "rho": rho(stock, adaptive), "rho_stock_again": rho(stock, again),
            "same_best": bool(np.nanargmin(np.where(ok, stock, np.nan)) == np.nanargmin(np.where(ok, adaptive, np.nan))),
            "same_best_stock_again": bool(np.nanargmin(np.where(ok, stock, np.nan)) == np.nanargmin(np.where(ok, again, np.nan)))}


def _spread(values: list[float]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    return f"{statistics.median(values):.3g} [{min(values):.3g}-{max(values):.3g}]"


def _stopped(rows: list[dict[str, Any]]) -> str:
    return "/".join(str(sum(r.get("stopped_by", {}).get(k, 0) for r in rows)) for k in ("cv", "ci", "budget", "cap"))


def _ratios(rows: list[dict[str, Any]], model: str, config: str, key: str, base: str) -> list[float]:
    """Per seed: ``config``'s ``key`` over ``base``'s."""
    out = []
    for r in rows:
        if r["model"] != model or r["config"] != config:
            continue
        b = next((b for b in rows if b["model"] == model and b["seed"] == r["seed"] and b["config"] == base), None)
        if b and r.get(key) and b.get(key):
            out.append(r[key] / b[key])
    return out


def report_text(rows: list[dict[str, Any]], ranks: list[dict[str, Any]], args: argparse.Namespace, seconds: float) -> str:
    configs = [c for c in CONFIGS if any(r["config"] == c for r in rows)]
    lines = [
        "## Evaluator cost on whole models: stock vs adaptive (issue 17)",
        "",
        f"Reproduce: `python benchmarks/evaluator_cost.py --models {' '.join(args.models)} --seeds "
        f"{' '.join(map(str, args.seeds))} --trials {args.trials} --res {args.res} --configs {' '.join(configs)}"
        f"{' --rank-candidates ' + str(args.rank_candidates) if args.rank_candidates else ''} --write-results` "
        f"({platform.machine()}, {seconds / 60:.0f} min in one run).",
        "",
        f"Each model tuned by `run_tune` (what `edgetune tune` runs) with profile `{args.profile}`, {args.trials} trials, "
        "loopback board, no warm start. `stock`: the product's search with MetaSchedule's evaluator "
        "(fixed, number=3, repeat=1, min_repeat_ms=100); `adaptive`: the profile as shipped (adaptive evaluator, "
        "stop rule, budget); `stock-stack`: MetaSchedule's search too (XGBoost, no K-means, no early stop, fixed "
        "random share) with its evaluator. Device s: time inside the remote timing calls, whole run. Delivered model "
        "ms: the tuned model built and timed end to end on the board by one common evaluator. Median [min-max] over "
        "seeds; ratios per seed, then the median.",
        "",
        "| model | config | measured | device s | device ms / candidate | vs stock (per candidate) | vs stock-stack (device s) "
        "| runs / candidate | stopped by cv/ci/budget/cap (all seeds) | delivered model ms | vs stock-stack (model ms) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for model in args.models:
        for config in configs:
            mine = [r for r in rows if r["model"] == model and r["config"] == config]
            lines.append(
                f"| {model} | {config} | {_spread([r['measured'] for r in mine])} | {_spread([r['device_s'] for r in mine])} "
                f"| {_spread([r['device_per_candidate_ms'] for r in mine])} "
                f"| {_spread(_ratios(rows, model, config, 'device_per_candidate_ms', 'stock'))} "
                f"| {_spread(_ratios(rows, model, config, 'device_s', 'stock-stack'))} "
                f"| {_spread([r['runs_per_candidate'] for r in mine])} "
                f"| {_stopped(mine) if config == 'adaptive' else ''} "
                f"| {_spread([r.get('model_ms') for r in mine])} "
                f"| {_spread(_ratios(rows, model, config, 'model_ms', 'stock-stack'))} |"
            )
    if ranks:
        lines += ["", "Ranking check: the adaptive run's candidates of the workload with the most records (first seed), "
                  "re-measured on one board by stock, adaptive, then stock again. Stock vs stock-again is the agreement "
                  "the board's noise allows; the ranking is unchanged when stock vs adaptive reaches it.", "",
                  "| model | candidates | rho stock vs adaptive | rho stock vs stock again | same fastest (adaptive / stock again) |",
                  "|---|---|---|---|---|"]
        lines += [f"| {r['model']} | {r['candidates']} | {r['rho']:.3f} | {r['rho_stock_again']:.3f} "
                  f"| {r['same_best']} / {r['same_best_stock_again']} |" for r in ranks]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "mobilenetv2", "squeezenet"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--res", type=int, default=64)
    parser.add_argument("--profile", default="host")
    parser.add_argument("--rank-candidates", type=int, default=0, help="also run the ranking check on this many candidates (0: skip)")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--no-end-to-end", dest="end_to_end", action="store_false",
                        help="skip timing each delivered model end to end (faster; only the tasks' estimate is reported)")
    parser.add_argument("--rows", help="also write every tuned run's row to this JSON file as it finishes")
    parser.add_argument("--write-results", action="store_true")
    parser.add_argument("--task", help="tune only this task of each model (e.g. for a ranking check with many candidates of one workload)")
    parser.add_argument("--from-rows", help="report the rows of an earlier --rows file instead of tuning (no ranking check)")
    parser.add_argument("--rank-from-rows", help="only the ranking check, on the histories of an earlier --rows file")
    args = parser.parse_args()
    if args.from_rows:
        rows = json.loads(Path(args.from_rows).read_text())
        print(report_text(rows, [], args, 0.0))
        return 0
    from edgetune.board.base import EmbeddedBoard

    if args.rank_from_rows:
        rows = json.loads(Path(args.rank_from_rows).read_text())
        board = EmbeddedBoard(key="local", num_threads=0)
        address = board.open()
        try:
            for model in args.models:
                row = next((r for r in rows if r["model"] == model and r["config"] == "adaptive"), None)
                if row is not None:
                    rank = ranking(row, args, address)
                    print(json.dumps(rank), flush=True)
        finally:
            board.close()
        return 0

    started = time.monotonic()
    rows, ranks = [], []
    board = EmbeddedBoard(key="local", num_threads=0)
    address = board.open()
    try:
        from edgetune.board.base import TrackerBoard

        shared = TrackerBoard(address)
        for seed in args.seeds:
            for model in args.models:
                for config in args.configs:  # interleaved: machine noise hits all
                    row = tune(model, seed, config, shared, args)
                    print(row, file=sys.stderr, flush=True)
                    rows.append(row)
                    if args.rows:  # a long run's rows survive an interruption
                        Path(args.rows).write_text(json.dumps(rows, indent=1))
        if args.rank_candidates:
            for model in args.models:
                row = next(r for r in rows if r["model"] == model and r["config"] == "adaptive")
                ranks.append(ranking(row, args, address))
    finally:
        board.close()
    text = report_text(rows, ranks, args, time.monotonic() - started)
    print(text)
    if args.write_results:
        write_section(text, MARK)
    return 0


if __name__ == "__main__":
    sys.exit(main())
