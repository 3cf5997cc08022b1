"""The board-side ``run.py`` shipped with every deployment, and the ``runtime.json`` it reads.

It needs only the TVM runtime and numpy on the board (the venv that
``edgetune provision`` installs), so the model keeps running without the host.
``edgetune deploy`` also uses it to benchmark on the board, because only a
process on the board can report its own peak resident memory.
"""

from __future__ import annotations

RUN_PY = r'''#!/usr/bin/env python3
"""Run the model deployed beside this file with only the TVM runtime.

  python run.py --input x.npy --output y.npy          one inference
  python run.py --input a.npy --input b.npy ...       several inputs, in the model's order
  python run.py --input x.npy --bench --repeat 50     latency (ms) and peak RSS as JSON

Several outputs are written as one .npz (output_0, output_1, ...). It runs on
the threads the model was tuned for (runtime.json beside it) unless
TVM_NUM_THREADS says otherwise: TVM alone takes half the CPUs of an x86 board.
"""
import argparse
import json
import os
import resource
import sys
import time

import numpy as np


def _flatten(value):
    if hasattr(value, "numpy"):
        return [value.numpy()]
    out = []
    for item in value:
        out.extend(_flatten(item))
    return out


def _tuned_threads(here):
    try:
        with open(os.path.join(here, "runtime.json")) as handle:
            return int(json.load(handle).get("threads", 0))
    except (OSError, ValueError, TypeError, AttributeError):
        return 0


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description="run the deployed model with the TVM runtime")
    parser.add_argument("--model", default=os.path.join(here, "model.so"), help="default: model.so beside run.py")
    parser.add_argument("--input", action="append", required=True, metavar="NPY", help="one per model input, in order")
    parser.add_argument("--output", metavar="PATH", help=".npy (one output) or .npz (several)")
    parser.add_argument("--bench", action="store_true", help="print latency and peak RSS as JSON")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.warmup < 0:
        parser.error("--repeat must be >= 1 and --warmup >= 0")

    threads = _tuned_threads(here)
    if threads and "TVM_NUM_THREADS" not in os.environ:
        os.environ["TVM_NUM_THREADS"] = str(threads)  # read once, when TVM starts its thread pool
    import tvm
    from tvm import relax

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    device = tvm.cpu(0)
    vm = relax.VirtualMachine(tvm.runtime.load_module(args.model), device)
    inputs = [tvm.runtime.tensor(np.load(path), device=device) for path in args.input]
    outputs = _flatten(vm["main"](*inputs))
    if args.output:
        if len(outputs) == 1 and not args.output.endswith(".npz"):
            np.save(args.output, outputs[0])
        else:
            np.savez(args.output, **{"output_%d" % i: o for i, o in enumerate(outputs)})
    if not args.bench:
        return 0
    for _ in range(args.warmup):
        vm["main"](*inputs)
    seconds = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        vm["main"](*inputs)
        seconds.append(time.perf_counter() - start)
    ms = np.asarray(seconds) * 1e3
    mean = float(ms.mean())
    json.dump({
        "mean_ms": mean,
        "p50_ms": float(np.percentile(ms, 50)),
        "p90_ms": float(np.percentile(ms, 90)),
        "cv": float(ms.std() / mean) if mean else 0.0,
        "min_ms": float(ms.min()),
        "repeats": len(seconds),
        "warmup": args.warmup,
        # ru_maxrss is in KiB on Linux: the process's peak, TVM runtime included
        "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "rss_before_model_kib": rss_before,
        "tvm_version": tvm.__version__,
        "threads": int(os.environ.get("TVM_NUM_THREADS", "0") or 0),
    }, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


#: Written beside ``run.py``: the threads the model was tuned and verified on.
RUNTIME_JSON = "runtime.json"
