"""edgetune's tuned model against ONNX Runtime on the same CPU (issue 13).

For each model (built in code with random weights, no downloads) and seed, the
model is tuned through ``edgetune.tuning.run_tune``, exactly what
``edgetune tune --profile host --model demo:NAME`` runs (embedded loopback
board, the profile's default components), at an increasing budget of measured
trials per task: the run at 16 per task resumes the history of the run at 8,
and so on, so the points are one tuning curve. After each point the delivered
``model.so`` is loaded in this process beside an ONNX Runtime session of the
same ONNX file (``intra_op_num_threads`` = the profile's threads =
``TVM_NUM_THREADS``), both are timed in interleaved rounds (each round: TVM's
``time_evaluator`` over ``--number`` calls, then ONNX Runtime over as many
calls), and the medians over rounds are compared. Outputs are compared on one
fixed input: max |tvm - ort| / max |ort| must stay below 1e-4.

Usage::

  python benchmarks/vs_onnxruntime.py                                   # 4 models, 8 16 32 per task, seed 0
  python benchmarks/vs_onnxruntime.py --models transformer --per-task 8 --seeds 0 1
  python benchmarks/vs_onnxruntime.py --write-results                   # also update RESULTS.md
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

MARK = "vs_onnxruntime"
MODELS = ("resnet18", "mobilenetv2", "squeezenet", "transformer")


def time_interleaved(artifact: Path, onnx_bytes: bytes, inputs: dict[str, Any], threads: int, rounds: int, number: int) -> dict[str, Any]:
    """Median latency (ms) of the tuned module and of ONNX Runtime, timed in alternating rounds."""
    import numpy as np
    import onnxruntime as ort
    import tvm
    from tvm import relax

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(onnx_bytes, options, providers=["CPUExecutionProvider"])
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(artifact)), tvm.cpu())
    args = [tvm.runtime.tensor(value) for value in inputs.values()]
    out = vm["main"](*args)
    ours = (out if hasattr(out, "numpy") else out[0]).numpy()
    theirs = session.run(None, inputs)[0]
    rel = float(np.abs(ours - theirs).max() / max(np.abs(theirs).max(), 1e-30))
    timer = vm.time_evaluator("main", tvm.cpu(), number=number, repeat=1)
    for _ in range(2):  # warm-up: thread pools, caches
        timer(*args)
        session.run(None, inputs)
    tvm_ms, ort_ms = [], []
    for _ in range(rounds):
        tvm_ms.append(timer(*args).mean * 1e3)
        started = time.perf_counter()
        for _ in range(number):
            session.run(None, inputs)
        ort_ms.append((time.perf_counter() - started) / number * 1e3)
    return {
        "tvm_ms": statistics.median(tvm_ms), "ort_ms": statistics.median(ort_ms),
        "tvm_spread_ms": [min(tvm_ms), max(tvm_ms)], "ort_spread_ms": [min(ort_ms), max(ort_ms)],
        "max_rel_diff": rel,
    }


def run_model(name: str, seed: int, per_task: list[int], args: argparse.Namespace) -> list[dict[str, Any]]:
    from edgetune.profile import load_profile
    from edgetune.tasks import load_model
    from edgetune.tuning import TuneOptions, TuningPipeline, run_tune

    spec = f"demo:{name}" + (f"@{args.res}" if args.res and name != "transformer" else "")
    profile = load_profile(args.profile)
    overrides = {"seed": seed, **({"cost_model": args.cost_model} if args.cost_model else {})}
    profile = profile.with_overrides(tuning=overrides)
    model = load_model(spec)
    inputs = {s.name: model.random_inputs(seed=0)[s.name] for s in model.inputs}
    out_dir = args.out / f"{name}-seed{seed}"
    options = TuneOptions(profile=profile, model=spec, out_dir=out_dir)
    n_tasks = len(TuningPipeline(options).extract_tasks(profile.tvm_target(), model))
    rows = []
    for per in per_task:
        options = TuneOptions(profile=profile, model=spec, out_dir=out_dir, trials=per * n_tasks)
        started = time.monotonic()
        summary = run_tune(options)
        wall = time.monotonic() - started
        timing = time_interleaved(summary.artifact, model.onnx_bytes, inputs, profile.device.num_threads, args.rounds, args.number)
        rows.append({
            "model": spec, "seed": seed, "per_task": per, "tasks": n_tasks,
            "trials": summary.trials.in_history_before + summary.trials.this_run,
            "tune_wall_s": wall, "device_s": summary.seconds.device,
            "untuned_ms": summary.end_to_end.untuned_ms, "tuned_ms_on_board": summary.end_to_end.tuned_ms,
            "kept_default": [t.name for t in summary.tasks if getattr(t, "kept_default", False)],
            **timing, "ratio": timing["tvm_ms"] / timing["ort_ms"],
        })
        print(json.dumps(rows[-1]), flush=True)
    return rows


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def report(rows: list[dict[str, Any]], args: argparse.Namespace, load: tuple[float, float]) -> str:
    per_task = sorted({r["per_task"] for r in rows})
    seeds = sorted({r["seed"] for r in rows})
    lines = [
        "## edgetune vs ONNX Runtime on the same CPU (issue 13)",
        "",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Machine: {os.cpu_count()} CPUs, "
        f"{platform.platform()}, Python {platform.python_version()}; load average {load[0]:.2f} at start, {load[1]:.2f} at end.",
        "",
        f"Reproduce: `python benchmarks/vs_onnxruntime.py --models {' '.join(args.models)} --per-task "
        f"{' '.join(map(str, args.per_task))} --seeds {' '.join(map(str, args.seeds))}"
        + (f" --res {args.res}" if args.res else "") + (f" --cost-model {args.cost_model}" if args.cost_model else "")
        + " --write-results`",
        "",
        f"Each model tuned by `run_tune` with profile `{args.profile}` (what `edgetune tune` runs), budgets resumed "
        "one from the other; then the delivered `model.so` and ONNX Runtime timed in one process, same threads, "
        f"{args.rounds} interleaved rounds of {args.number} calls; latency = median of rounds. Ratio = edgetune / ONNX Runtime "
        "(below 1: edgetune faster). Max rel diff = max |tvm - ort| / max |ort| on one input.",
        "",
        "| model | trials/task | trials | tuning wall (s) | untuned (ms) | edgetune (ms) | ONNX Runtime (ms) | ratio | max rel diff | tasks kept default |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} (seed {r['seed']}) | {r['per_task']} | {r['trials']} | {r['tune_wall_s']:.0f} | {r['untuned_ms']:.3f} | "
            f"{r['tvm_ms']:.3f} | {r['ort_ms']:.3f} | {r['ratio']:.2f} | {r['max_rel_diff']:.1e} | {len(r['kept_default'])} |"
        )
    lines += ["", "Geometric mean of the ratio over models (median over seeds):", "", "| trials/task | geomean ratio | worst model |", "|---|---|---|"]
    for per in per_task:
        by_seed = []
        worst = None
        for seed in seeds:
            ratios = {r["model"]: r["ratio"] for r in rows if r["per_task"] == per and r["seed"] == seed}
            if ratios:
                by_seed.append(geomean(list(ratios.values())))
                name, value = max(ratios.items(), key=lambda kv: kv[1])
                worst = (name, value) if worst is None or value > worst[1] else worst
        if by_seed:
            lines.append(f"| {per} | {statistics.median(by_seed):.2f} [{min(by_seed):.2f}-{max(by_seed):.2f}] | {worst[0]} {worst[1]:.2f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--per-task", type=int, nargs="+", default=[8, 16, 32], help="measured trials per task, ascending")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--res", type=int, default=None, help="input resolution of the CNNs (default: each demo's 224)")
    parser.add_argument("--profile", default="host")
    parser.add_argument("--cost-model", default=None, help="override the profile's tuning.cost_model")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("edgetune-out/vs-onnxruntime"))
    parser.add_argument("--raw", type=Path, help="also write every row as JSON here")
    parser.add_argument("--from-raw", type=Path, help="report the rows of an earlier --raw file instead of running")
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    if args.per_task != sorted(args.per_task):
        parser.error(f"--per-task must be ascending, got {args.per_task} instead")
    if args.from_raw:
        rows = json.loads(args.from_raw.read_text())
        text = report(rows, args, (math.nan, math.nan))
    else:
        from edgetune.profile import load_profile

        os.environ.setdefault("TVM_NUM_THREADS", str(load_profile(args.profile).device.num_threads))
        load_start = os.getloadavg()[0]
        rows = []
        for seed in args.seeds:
            for name in args.models:
                rows += run_model(name, seed, args.per_task, args)
                if args.raw:
                    args.raw.write_text(json.dumps(rows, indent=1))
        text = report(rows, args, (load_start, os.getloadavg()[0]))
    print(text)
    if args.write_results:
        sys.path.insert(0, str(Path(__file__).parent))
        from _results import write_section

        write_section(text, MARK)
    return 0


if __name__ == "__main__":
    sys.exit(main())
