"""Delivered models of several benchmark rows and ONNX Runtime, timed in one process, interleaved.

On a shared, noisy host one model timed minutes apart from another swings by up to 1.9x
(benchmarks/RESULTS.md, vs_onnxruntime_fast_math); two variants of a change are only
comparable when they meet the machine in the same state. This loads the ``model.so`` each row
kept (``artifact_kept`` of ``vs_onnxruntime.py --raw`` rows, e.g. both sides of
``vs_commit.sh``) and ONNX Runtime's session of the same model, then times them round by
round, alternating the order, each round 10 calls per model; it prints per model the median
of its round medians, the spread, and the ratio to ONNX Runtime.

    python benchmarks/interleaved.py --rows old=OUT/old-transformer-bert@128.json new=OUT/new-transformer-bert@128.json \\
        --model demo:transformer-bert@128 --rounds 30 --json OUT/interleaved.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np


def load_rows(specs: list[str], model: str) -> list[tuple[str, dict[str, Any]]]:
    """``LABEL=FILE`` pairs -> (name, row) of ``model``'s rows, the name saying label, trials per task and seed."""
    picked = []
    for spec in specs:
        label, _, path = spec.partition("=")
        if not path:
            raise SystemExit(f"--rows takes LABEL=FILE, got {spec!r} instead")
        for row in json.loads(Path(path).read_text()):
            if row["model"] in (model, f"demo:{model}") and Path(row["artifact_kept"]).is_file():
                picked.append((f"{label}-{row['per_task']}pt-s{row['seed']}", row))
    if not picked:
        raise SystemExit(f"no row of {model} with a kept model.so in {specs}")
    return picked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", nargs="+", required=True, metavar="LABEL=FILE", help="vs_onnxruntime.py --raw files")
    parser.add_argument("--model", required=True, help="the rows' model, e.g. demo:transformer-bert@128")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=10, help="calls per model per round")
    parser.add_argument("--threads", type=int, default=0, help="threads of both runtimes (default: the cores available)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--skip-slower-than", type=float, default=0.0, metavar="RATIO",
        help="leave out of the rounds a model whose warm-up ran over RATIO x ONNX Runtime's (an untuned row would take "
        "the whole run); its warm-up time is printed, read its own row (default 0: time every model)",
    )
    args = parser.parse_args(argv)
    threads = args.threads or len(os.sched_getaffinity(0))
    # before TVM's thread pool starts, as the benchmark's own timing does (edgetune/board/baseline.py): left to
    # itself TVM counts physical cores, one on this 2-vCPU host, and the models ran 2x slower than in their rows
    os.environ["TVM_NUM_THREADS"] = str(threads)

    import onnxruntime as ort
    import tvm
    from tvm import relax

    from edgetune.tasks.models import load_model

    model = load_model(args.model)
    feeds = model.random_inputs(seed=0)
    inputs = [tvm.runtime.tensor(value) for value in feeds.values()]
    calls: dict[str, Callable[[], Any]] = {}
    for name, row in load_rows(args.rows, args.model):
        vm = relax.VirtualMachine(tvm.runtime.load_module(row["artifact_kept"]), tvm.cpu())
        main_fn = vm["main"]
        calls[name] = lambda f=main_fn: f(*inputs)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(model.bytes_for("onnx"), options, providers=["CPUExecutionProvider"])
    calls["onnxruntime"] = lambda: session.run(None, feeds)

    load_before = os.getloadavg()[0]
    warm: dict[str, float] = {}
    for name, call in calls.items():  # warm up
        times = []
        for _ in range(3):
            started = time.perf_counter()
            call()
            times.append(time.perf_counter() - started)
        warm[name] = float(np.median(times)) * 1e3
    skipped = {}
    if args.skip_slower_than > 0:
        limit = args.skip_slower_than * warm["onnxruntime"]
        skipped = {name: ms for name, ms in warm.items() if ms > limit}
        for name in skipped:
            del calls[name]
    medians: dict[str, list[float]] = {name: [] for name in calls}
    order = list(calls)
    for index in range(args.rounds):
        for name in order if index % 2 == 0 else order[::-1]:
            times = []
            for _ in range(args.calls):
                started = time.perf_counter()
                calls[name]()
                times.append(time.perf_counter() - started)
            medians[name].append(float(np.median(times)) * 1e3)
    load_after = os.getloadavg()[0]
    baseline = float(np.median(medians["onnxruntime"]))
    results = {}
    print(f"{args.model}: {args.rounds} rounds x {args.calls} calls, {threads} threads, load average {load_before:.2f} -> {load_after:.2f}")
    for name, values in medians.items():
        series = np.array(values)
        paired = series / np.array(medians["onnxruntime"])  # round by round: the machine's drift cancels
        results[name] = {
            "median_ms": float(np.median(series)), "q25_ms": float(np.percentile(series, 25)),
            "q75_ms": float(np.percentile(series, 75)), "ratio": float(np.median(series)) / baseline,
            "paired_ratio": float(np.median(paired)), "paired_q25": float(np.percentile(paired, 25)),
            "paired_q75": float(np.percentile(paired, 75)),
        }
        print(f"  {name:24s} median {np.median(series):8.3f} ms  q25-q75 {np.percentile(series, 25):8.3f}-"
              f"{np.percentile(series, 75):8.3f}  / ONNX Runtime {results[name]['ratio']:.2f}"
              f"  (per round {results[name]['paired_ratio']:.2f}, {results[name]['paired_q25']:.2f}-"
              f"{results[name]['paired_q75']:.2f})")
    for name, ms in skipped.items():
        print(f"  {name:24s} not timed: {ms:.1f} ms at warm-up, {ms / warm['onnxruntime']:.1f}x ONNX Runtime's (read its own row)")
    if args.json:
        args.json.write_text(json.dumps({"model": args.model, "rounds": args.rounds, "load_before": load_before,
                                         "load_after": load_after, "results": results,
                                         "not_timed_warmup_ms": skipped}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
