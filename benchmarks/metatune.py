"""MetaTune vs rf, xgb and random on held-out tasks: best latency after 8/16/32/64 measurements.

Every run is the product's pipeline (:func:`edgetune.tuning.run_tune`) on one
embedded loopback board shared by all runs, with only ``tuning.cost_model``
changed; each (task, cost model, seed) is its own run into a fresh history
(no warm start, no transferred seeds, no untuned default trial, no early stop,
and no K-means sampling, which measures fewer candidates than a batch holds: so
every trial is a measurement and every run spends the same budget). The held-out tasks
(:func:`benchmarks._metatune_tasks.heldout_tasks`) have shapes and an operator
mix the shipped model's corpus never had.

    python benchmarks/metatune.py                         # 5 tasks x 4 models x 3 seeds x 64 (hours here)
    python benchmarks/metatune.py --tasks mlp_32x128to256 --models meta rf --seeds 0 --budget 16   # a smoke run
    python benchmarks/metatune.py --models meta rf --meta-handoff h16=16   # meta with and without the hand-over to rf
    python benchmarks/metatune.py --write-results         # also the RESULTS.md section
"""

from __future__ import annotations

import argparse
import logging
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._metatune_tasks import heldout_tasks  # noqa: E402
from benchmarks._pipeline import AS_BEFORE, BENCH_TARGET, bench_profile, shared_board  # noqa: E402
from benchmarks._results import write_section  # noqa: E402

MARK = "metatune"
MODELS = ("meta", "rf", "xgb", "random")
CHECKPOINTS = (8, 16, 32, 64)


@derived_object
class BestCurve(ms.measure_callback.PyMeasureCallback):
    """The best latency so far after every measured candidate (inf until one succeeds)."""

    def __init__(self) -> None:
        super().__init__()
        self.curve: list[float] = []

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):  # noqa: D102
        best = self.curve[-1] if self.curve else math.inf
        for ran in runner_results:
            if ran.error_msg is None and ran.run_secs:
                best = min(best, float(np.mean([float(x) for x in ran.run_secs])))
            self.curve.append(best)


def tune_one(task: tuple[str, Any, int], model: str, seed: int, budget: int, board: Any, work: Path, *,
             target: dict[str, Any] | None = BENCH_TARGET, model_file: str = "",
             tuning: dict[str, Any] | None = None) -> list[float]:
    """One run: ``budget`` measurements of ``task`` with cost model ``model``; the best-so-far curve.

    ``target`` None keeps the host profile's own (this CPU's ``mcpu``); ``model_file``
    is ``tuning.cost_model_file`` for ``meta`` (empty: the shipped model); ``tuning``
    overrides more ``[tuning]`` settings.
    """
    from edgetune.tuning import Components, TuneOptions, run_tune

    profile = bench_profile("host", target=target, tuning={
        **AS_BEFORE, "cost_model": model, "seed": seed, "early_stop": "none", "minor_task_share": 0.0,
        "num_trials_per_iter": 8, "sampler": "none", **({"cost_model_file": model_file} if model_file else {}),
        **(tuning or {}),
    })
    curve = BestCurve()
    options = TuneOptions(profile=profile, model=None, out_dir=work, db=str(work / "history.db"), trials=budget,
                          evaluate=False, warm_start="off", board=board)
    run_tune(options, components=Components(tasks=[task], measure_callbacks=[curve]))
    return curve.curve


def at(curve: list[float], n: int) -> float:
    """Best latency after ``n`` measurements (the last point when the run measured fewer)."""
    return curve[min(n, len(curve)) - 1] if curve else math.inf


def reach(curve: list[float], goal: float) -> int | None:
    """Measurements after which ``curve`` is at or below ``goal`` (None: never)."""
    return next((i for i, v in enumerate(curve, start=1) if v <= goal * (1 + 1e-9)), None)


def report(rows: list[dict[str, Any]], models: list[str], checkpoints: list[int]) -> str:
    """Geometric mean over tasks and seeds of each model's best latency relative to rf's at the same budget."""
    lines = ["| cost model | " + " | ".join(f"after {n}" for n in checkpoints) + " | to reach rf's final best |",
             "|---|" + "---|" * (len(checkpoints) + 1)]
    by_run = {(r["task"], r["seed"], r["model"]): r["curve"] for r in rows}
    runs = sorted({(r["task"], r["seed"]) for r in rows})
    for model in models:
        cells = []
        for n in checkpoints:
            ratios = [at(by_run[(t, s, model)], n) / at(by_run[(t, s, "rf")], n) for t, s in runs
                      if (t, s, model) in by_run and (t, s, "rf") in by_run]
            cells.append(f"{math.exp(statistics.fmean(math.log(x) for x in ratios)):.3f}" if ratios else "-")
        reached = [reach(by_run[(t, s, model)], by_run[(t, s, "rf")][-1]) for t, s in runs
                   if (t, s, model) in by_run and (t, s, "rf") in by_run]
        got = [x for x in reached if x is not None]
        cells.append(f"median {statistics.median(got):.0f} ({len(got)}/{len(reached)} reached)" if got else "never")
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", help="held-out task names (default: all)")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=64, help="measurements per run (default 64)")
    parser.add_argument("--model-file", action="append", default=[], metavar="NAME=FILE",
                        help="also run `meta` from this model file, reported as NAME (repeatable): compares "
                        "starts, e.g. one meta-trained and one only pre-trained, against the same rf runs")
    parser.add_argument("--meta-handoff", action="append", default=[], metavar="NAME=N",
                        help="also run `meta` with tuning.meta_handoff_samples = N, reported as NAME (repeatable; "
                        "N = 0: MetaTune alone, without handing over to the random forest)")
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    if "rf" not in args.models:
        parser.error("rf is the reference: keep it in --models")
    variants: dict[str, dict[str, Any]] = {}
    for flag, key, specs in (("--model-file", "cost_model_file", args.model_file),
                             ("--meta-handoff", "meta_handoff_samples", args.meta_handoff)):
        for spec in specs:
            name, _, value = spec.partition("=")
            if not value or name in MODELS or name in variants or (key == "meta_handoff_samples" and not value.isdigit()):
                parser.error(f"{flag} must be NAME={'FILE' if key == 'cost_model_file' else 'N'} with a new NAME "
                             f"not one of {', '.join(MODELS)}, got {spec!r} instead")
            variants[name] = {key: int(value) if key == "meta_handoff_samples" else value}
    models = [*args.models, *variants]
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    tasks = [t for t in heldout_tasks() if not args.tasks or t[0] in args.tasks]
    checkpoints = [n for n in CHECKPOINTS if n <= args.budget] or [args.budget]
    rows, started = [], time.time()
    with shared_board(bench_profile("host", target=BENCH_TARGET)) as board:
        for task in tasks:
            for seed in args.seeds:
                for model in models:
                    work = Path(tempfile.mkdtemp(prefix=f"metatune-{model}-{seed}-"))
                    cost_model = "meta" if model in variants else model
                    curve = tune_one(task, cost_model, seed, args.budget, board, work, tuning=variants.get(model))
                    rows.append({"task": task[0], "seed": seed, "model": model, "curve": curve})
                    print(f"{task[0]} seed {seed} {model}: {len(curve)} measured, best "
                          + ", ".join(f"@{n} {at(curve, n) * 1e6:.1f} us" for n in checkpoints)
                          + f" ({time.time() - started:.0f} s)", flush=True)
    text = ("## MetaTune (issue 14): held-out tasks, best latency vs measurements\n\n"
            f"`python benchmarks/metatune.py {' '.join(sys.argv[1:])}`. Held-out tasks: {', '.join(t[0] for t in tasks)}; seeds {args.seeds}; {args.budget} measurements per run; "
            f"{time.time() - started:.0f} s in all.\n\nBest latency relative to `rf` at the same number of "
            "measurements (geometric mean over tasks and seeds; < 1 is better):\n\n" + report(rows, models, checkpoints))
    print(text)
    if args.write_results:
        write_section(text, MARK)
    return 0


if __name__ == "__main__":
    sys.exit(main())
