"""The product's comparison protocol checked against each runtime timed alone in a process of its own (issues 52, 53).

``edgetune tune --baseline`` (and ``deploy --baseline``, and every benchmark)
times the delivered ``model.so`` and the baseline runtime (ONNX Runtime for an
ONNX file, LiteRT for a ``.tflite`` one) in one process with
:func:`edgetune.board.baseline.compare_with_baseline`: each runtime alone in
blocks after a pause and a warm-up, the rounds alternating, the runtime with
its defaults. This script times the same two on the same input in several
ways (``--ways``), alternating their order round by round:

* ``product``: the product's protocol, as ``--baseline`` runs it;
* ``one-call``: the protocol before the warm-up: one untimed call after each
  pause;
* ``interleaved``: the protocol before that (back to back, no pause, ONNX
  Runtime's threads told not to spin);
* ``own``: each runtime alone in a fresh Python process that loads only it,
  with its defaults: a warm-up, then the median of blocks of calls back to
  back, as an application that runs the model continuously sees it (the
  user's view).

Each round gives every way one ratio (tuned / baseline); it prints per way the
median ratio over rounds and its spread. The protocol is right where its ratio
is the own-process one's, and steady where its spread is narrow.

Usage (a tune's run directory and its model file)::

  python benchmarks/baseline_protocol.py --run edgetune-out/run --model model.onnx --rounds 3
  python benchmarks/baseline_protocol.py --run RUN --model mobilenet_v2-224.tflite --rounds 5 --write-results baseline_protocol_litert
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

WAYS = {
    "product": "each alone in blocks after a pause and a warm-up (the product now)",
    "one-call": "each alone in blocks after a pause, one untimed call (the product before)",
    "interleaved": "interleaved back to back, ONNX Runtime's spinning off (the product before that)",
    "own": "each runtime alone in a process of its own (the user's view)",
}


def alone(runtime: str, model: Path, artifact: Path, threads: int, blocks: int, calls: int) -> float:
    """In this process, which loads only ``runtime``: the median over ``blocks`` back-to-back blocks of ms per call."""
    import numpy as np

    os.environ.setdefault("TVM_NUM_THREADS", str(threads))
    from edgetune.board.baseline import warm_up
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
    elif runtime == "litert":
        from ai_edge_litert.interpreter import Interpreter

        interpreter = Interpreter(model_path=str(model), num_threads=threads)
        interpreter.allocate_tensors()
        slots = [detail["index"] for detail in interpreter.get_input_details()]

        def call() -> Any:
            for slot, value in zip(slots, feed.values()):
                interpreter.set_tensor(slot, np.asarray(value))
            interpreter.invoke()
    else:
        import tvm
        from tvm import relax

        vm = relax.VirtualMachine(tvm.runtime.load_module(str(artifact)), tvm.cpu())
        args = [tvm.runtime.tensor(np.asarray(v)) for v in feed.values()]

        def call() -> Any:
            return vm["main"](*args)

    warm_up(call, 0.5)
    times = []
    for _ in range(blocks):
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
    parser.add_argument("--model", type=Path, required=True, help="the model file the run tuned (.onnx or .tflite)")
    parser.add_argument("--artifact", type=Path, help="model.so (default: RUN/model.so)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every way (each gives one ratio per way)")
    parser.add_argument("--inner-rounds", type=int, default=15, help="the product's rounds per comparison")
    parser.add_argument("--ways", nargs="+", choices=sorted(WAYS), default=["product", "one-call", "own"])
    parser.add_argument("--calls", type=int, default=20, help="calls per block in the own-process timing")
    parser.add_argument("--rows", type=Path, help="append each round's rows (JSON lines) to this file, and report all its "
                        "rows (--rounds 0: only report)")
    parser.add_argument("--alone", choices=["onnxruntime", "litert", "tvm"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    artifact = args.artifact or (args.run / "model.so" if args.run else None)
    if artifact is None:
        parser.error("--run or --artifact is required")
    if args.alone:
        print(json.dumps({"ms": alone(args.alone, args.model, artifact, args.threads, 15, args.calls)}))
        return 0
    from edgetune.board.baseline import RUNTIME_FORMATS, RUNTIME_NAMES, compare_with_baseline
    from edgetune.tasks import load_model

    model = load_model(str(args.model))
    runtime = "litert" if model.format == "tflite" else "onnxruntime"
    if "interleaved" in args.ways and runtime != "onnxruntime":
        parser.error(f"--ways interleaved turns ONNX Runtime's spinning off: it needs an ONNX model, got {args.model}")
    model_bytes, inputs = model.bytes_for(RUNTIME_FORMATS[runtime]), model.random_inputs(seed=0)
    rows: list[dict[str, Any]] = []
    for index in range(args.rounds):
        for way in args.ways if index % 2 == 0 else args.ways[::-1]:
            load = os.getloadavg()[0]
            time.sleep(2.0)
            if way == "own":
                tuned, theirs = in_own_process("tvm", args, artifact), in_own_process(runtime, args, artifact)
            else:
                settings = {"product": {}, "one-call": {"warmup_sec": 0.0},
                            "interleaved": {"pause_sec": 0.0, "warmup_sec": 0.0, "allow_spinning": False}}[way]
                result = compare_with_baseline(runtime, artifact, model_bytes, inputs, args.threads,
                                               rounds=args.inner_rounds, **settings)
                if result.error is not None:
                    raise SystemExit(f"{way}: {result.error}")
                tuned, theirs = result.tuned_ms, result.baseline_ms
            rows.append({"model": args.model.name, "round": index, "way": way, "baseline": runtime,
                         "tuned_ms": tuned, "baseline_ms": theirs, "ratio": tuned / theirs,
                         "load_before": load, "load_after": os.getloadavg()[0]})
            print(json.dumps(rows[-1]), flush=True)
            if args.rows:
                with args.rows.open("a") as handle:
                    handle.write(json.dumps(rows[-1]) + "\n")
    if args.rows and args.rows.exists():  # every model timed into this file so far
        rows = [json.loads(line) for line in args.rows.read_text().splitlines() if line.strip()]
    print()
    print(report(rows, RUNTIME_NAMES[runtime]))
    return 0


def report(rows: list[dict[str, Any]], baseline_name: str = "baseline") -> str:
    """Per model and way: median milliseconds, the median ratio over rounds and the ratios' spread."""
    lines = [f"| model | protocol | rounds | tuned ms | {baseline_name} ms | tuned / {baseline_name} (median) | min-max |",
             "|---|---|---|---|---|---|---|"]
    for model in dict.fromkeys(row["model"] for row in rows):
        for way in WAYS:
            group = [row for row in rows if row["model"] == model and row["way"] == way]
            if not group:
                continue
            ratios = [row["ratio"] for row in group]
            lines.append(
                f"| {model} | {WAYS[way]} | {len(group)} | {statistics.median(r['tuned_ms'] for r in group):.3f} | "
                f"{statistics.median(r['baseline_ms'] for r in group):.3f} | {statistics.median(ratios):.2f} | "
                f"{min(ratios):.2f}-{max(ratios):.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
