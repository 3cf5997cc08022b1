"""The product's comparison protocol checked against each runtime timed alone in a process of its own (issue 52).

``edgetune tune --baseline`` (and ``deploy --baseline``, and every benchmark)
times the delivered ``model.so`` and ONNX Runtime in one process with
:func:`edgetune.board.baseline.compare_with_baseline`: each runtime alone in
blocks after a pause, the rounds alternating, ONNX Runtime with its default
session options. This script times the same two on the same input three ways,
in alternating rounds:

* ``blocks``: the product's protocol, as ``--baseline`` runs it;
* ``interleaved, spinning off``: the protocol before it (back to back, no
  pause, ONNX Runtime's threads told not to spin);
* ``own process``: each runtime alone in a fresh Python process that loads
  only it, its defaults, a warm-up and then the median of blocks of calls: the
  user's view.

It prints each way's medians and the tuned / ONNX Runtime ratio; the protocol
is right where its ratio is the own-process one's.

Usage (a tune's run directory and its model file)::

  python benchmarks/baseline_protocol.py --run edgetune-out/run --model model.onnx --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def alone(runtime: str, model: Path, artifact: Path, threads: int, blocks: int, calls: int) -> float:
    """In this process, which loads only ``runtime``: the median over ``blocks`` blocks of ms per call."""
    import numpy as np

    os.environ.setdefault("TVM_NUM_THREADS", str(threads))
    from edgetune.tasks import load_model

    feed = load_model(str(model)).random_inputs(seed=0)
    if runtime == "onnxruntime":
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        session = onnxruntime.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]

        def call() -> Any:
            return session.run(None, dict(zip(names, feed.values())))
    else:
        import tvm
        from tvm import relax

        vm = relax.VirtualMachine(tvm.runtime.load_module(str(artifact)), tvm.cpu())
        args = [tvm.runtime.tensor(np.asarray(v)) for v in feed.values()]

        def call() -> Any:
            return vm["main"](*args)

    for _ in range(3):
        call()
    times = []
    for _ in range(blocks):
        time.sleep(0.5)
        call()
        started = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - started) / calls * 1e3)
    return statistics.median(times)


def in_own_process(runtime: str, args: argparse.Namespace, artifact: Path) -> float:
    out = subprocess.run(
        [sys.executable, __file__, "--alone", runtime, "--model", str(args.model), "--artifact", str(artifact),
         "--threads", str(args.threads), "--calls", str(args.calls)],
        check=True, capture_output=True, text=True,
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1])["ms"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, help="a tune's run directory (its model.so is timed)")
    parser.add_argument("--model", type=Path, required=True, help="the ONNX file the run tuned")
    parser.add_argument("--artifact", type=Path, help="model.so (default: RUN/model.so)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=20, help="calls per block in the own-process timing")
    parser.add_argument("--alone", choices=["onnxruntime", "tvm"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    artifact = args.artifact or (args.run / "model.so" if args.run else None)
    if artifact is None:
        parser.error("--run or --artifact is required")
    if args.alone:
        print(json.dumps({"ms": alone(args.alone, args.model, artifact, args.threads, 15, args.calls)}))
        return 0
    from edgetune.board.baseline import compare_with_baseline
    from edgetune.tasks import load_model

    model = load_model(str(args.model))
    onnx_bytes, inputs = model.bytes_for("onnx"), model.random_inputs(seed=0)
    ways: dict[str, dict[str, list[float]]] = {}

    def record(way: str, tuned: float, ort: float) -> None:
        ways.setdefault(way, {"tuned": [], "ort": []})
        ways[way]["tuned"].append(tuned)
        ways[way]["ort"].append(ort)

    rows = []
    for index in range(args.rounds):
        order = ["blocks", "interleaved", "own"] if index % 2 == 0 else ["own", "interleaved", "blocks"]
        for way in order:
            load = os.getloadavg()[0]
            time.sleep(2.0)
            if way == "own":
                tuned, ort = in_own_process("tvm", args, artifact), in_own_process("onnxruntime", args, artifact)
            else:
                result = compare_with_baseline(
                    "onnxruntime", artifact, onnx_bytes, inputs, args.threads,
                    **({} if way == "blocks" else {"pause_sec": 0.0, "allow_spinning": False}),
                )
                tuned, ort = result.tuned_ms, result.baseline_ms
            record(way, tuned, ort)
            rows.append({"round": index, "way": way, "tuned_ms": tuned, "ort_ms": ort, "load_before": load,
                         "load_after": os.getloadavg()[0]})
            print(json.dumps(rows[-1]), flush=True)
    names = {"blocks": "blocks after a pause, ORT defaults (the product)", "interleaved": "interleaved, ORT spinning off (before)",
             "own": "each alone in its own process"}
    print(f"\n{args.model.name}, {args.threads} threads, {args.rounds} rounds (medians)\n")
    print("| protocol | tuned ms | ONNX Runtime ms | tuned / ONNX Runtime |\n|---|---|---|---|")
    for way, values in ways.items():
        tuned, ort = statistics.median(values["tuned"]), statistics.median(values["ort"])
        print(f"| {names[way]} | {tuned:.3f} | {ort:.3f} | {tuned / ort:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
