"""Is the interleaved comparison with ONNX Runtime fair? (issue 29)

ONNX Runtime's intra-op threads spin after a run by default, and TVM's thread
pool has its own; with as many threads as cores either can slow the other's
next round. For one delivered model (a tune's run directory: ``model.so`` and
the ONNX model it was tuned from) this times, on the same input and threads:

* TVM alone and ONNX Runtime alone (spinning on, its default; and off),
* interleaved as ``edgetune tune --baseline`` does it, spinning on and off
  (:func:`edgetune.board.baseline.compare_with_baseline`, the product's code),

and reports each runtime's median over rounds. The fair protocol is the one
whose interleaved medians stay closest to each runtime alone.

For a run directory whose model is a ``.tflite`` file the baseline is LiteRT
(XNNPACK, whose Python API has no spinning switch): LiteRT alone and TVM alone,
before and after the two interleaved as ``--baseline litert`` does it.

Usage::

  python benchmarks/baseline_fairness.py RUN_DIR [RUN_DIR ...] [--rounds 15 --number 10] [--write-results]

Time it on a quiet machine only (no test suite or second benchmark beside it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

MARK = "baseline_fairness"


def _alone_tvm(artifact: Path, inputs: dict[str, Any], rounds: int, number: int) -> float:
    import tvm
    from tvm import relax

    from edgetune.board.baseline import load_module_fresh

    vm = relax.VirtualMachine(load_module_fresh(artifact), tvm.cpu())
    args = [tvm.runtime.tensor(v) for v in inputs.values()]
    timer = vm.time_evaluator("main", tvm.cpu(), number=number, repeat=1)
    timer(*args)
    return statistics.median(timer(*args).mean * 1e3 for _ in range(rounds))


def _alone_ort(onnx: bytes, inputs: dict[str, Any], threads: int, spinning: bool, rounds: int, number: int) -> float:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    session = ort.InferenceSession(onnx, options, providers=["CPUExecutionProvider"])
    session.run(None, inputs)
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(number):
            session.run(None, inputs)
        times.append((time.perf_counter() - started) / number * 1e3)
    return statistics.median(times)


def _alone_litert(tflite: bytes, inputs: dict[str, Any], threads: int, rounds: int, number: int) -> float:
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=tflite, num_threads=threads)
    interpreter.allocate_tensors()
    slots = {d["name"]: d["index"] for d in interpreter.get_input_details()}
    for name, value in inputs.items():
        interpreter.set_tensor(slots[name], np.asarray(value))
    interpreter.invoke()
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(number):
            interpreter.invoke()
        times.append((time.perf_counter() - started) / number * 1e3)
    return statistics.median(times)


def measure_litert(run_dir: Path, rounds: int, number: int) -> dict[str, Any]:
    """TVM and LiteRT alone, then interleaved by the product's comparison."""
    from edgetune.board.baseline import compare_with_baseline
    from edgetune.profile import load_profile
    from edgetune.tasks import load_model
    from edgetune.tuning import TuneSummary

    summary = TuneSummary.load(run_dir)
    threads = load_profile(summary.profile).device.num_threads
    model = load_model(summary.model.source)
    inputs = model.random_inputs(seed=0)
    artifact = run_dir / "model.so"
    os.environ.setdefault("TVM_NUM_THREADS", str(threads))
    row = {"model": summary.model.source, "threads": threads, "load_before": os.getloadavg()[0]}
    row["tvm_alone"] = _alone_tvm(artifact, inputs, rounds, number)
    row["litert_alone"] = _alone_litert(model.data, inputs, threads, rounds, number)
    result = compare_with_baseline("litert", artifact, model.data, inputs, threads, rounds=rounds, number=number)
    row["tvm_interleaved"], row["litert_interleaved"] = result.tuned_ms, result.baseline_ms
    row["tvm_alone_after"] = _alone_tvm(artifact, inputs, rounds, number)  # drift over the row
    row["litert_alone_after"] = _alone_litert(model.data, inputs, threads, rounds, number)
    row["load_after"] = os.getloadavg()[0]
    return row


def report_litert(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        "## Fairness of the interleaved comparison with LiteRT (issue 29)",
        "",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Machine: {os.cpu_count()} CPUs. "
        f"Reproduce: `python benchmarks/baseline_fairness.py RUN_DIR... --rounds {args.rounds} --number {args.number} --write-results` "
        "(run directories of `edgetune tune` on a `.tflite` model, e.g. from `benchmarks/make_tflite.py`).",
        "",
        "Medians over rounds (ms). Interleaved = the product's comparison (`edgetune tune --baseline litert`): each round "
        "TVM's time_evaluator, then LiteRT's `invoke` as many times. Alone = each runtime by itself, before and after "
        "the interleaved rounds. A ratio is interleaved / alone (mean of before and after): 1.00 = unaffected.",
        "",
        "| model | threads | TVM alone (before / after) | LiteRT alone (before / after) | TVM / LiteRT interleaved | "
        "ratios vs alone | load |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        tvm = (r["tvm_alone"] + r["tvm_alone_after"]) / 2
        lite = (r["litert_alone"] + r["litert_alone_after"]) / 2
        lines.append(
            f"| {r['model']} | {r['threads']} | {r['tvm_alone']:.3f} / {r['tvm_alone_after']:.3f} | "
            f"{r['litert_alone']:.3f} / {r['litert_alone_after']:.3f} | {r['tvm_interleaved']:.3f} / {r['litert_interleaved']:.3f} | "
            f"{r['tvm_interleaved'] / tvm:.2f} / {r['litert_interleaved'] / lite:.2f} | {r['load_before']:.2f} / {r['load_after']:.2f} |"
        )
    return "\n".join(lines)


def measure(run_dir: Path, rounds: int, number: int) -> dict[str, Any]:
    from edgetune.board.baseline import compare_with_baseline
    from edgetune.profile import load_profile
    from edgetune.tasks import load_model
    from edgetune.tuning import TuneSummary

    summary = TuneSummary.load(run_dir)
    threads = load_profile(summary.profile).device.num_threads
    model = load_model(summary.model.source)
    inputs = model.random_inputs(seed=0)
    artifact = run_dir / "model.so"
    os.environ.setdefault("TVM_NUM_THREADS", str(threads))  # before TVM's thread pool starts in this process
    load_before = os.getloadavg()[0]
    row = {"model": summary.model.source, "threads": threads, "load_before": load_before}
    row["tvm_alone"] = _alone_tvm(artifact, inputs, rounds, number)
    row["ort_alone_spin"] = _alone_ort(model.onnx_bytes, inputs, threads, True, rounds, number)
    row["ort_alone_nospin"] = _alone_ort(model.onnx_bytes, inputs, threads, False, rounds, number)
    for label, spinning in (("spin", True), ("nospin", False)):
        result = compare_with_baseline("onnxruntime", artifact, model.onnx_bytes, inputs, threads, rounds=rounds,
                                       number=number, allow_spinning=spinning)
        row[f"tvm_interleaved_{label}"], row[f"ort_interleaved_{label}"] = result.tuned_ms, result.baseline_ms
    row["load_after"] = os.getloadavg()[0]
    return row


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        "## Fairness of the interleaved comparison with ONNX Runtime (issue 29)",
        "",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Machine: {os.cpu_count()} CPUs. "
        f"Reproduce: `python benchmarks/baseline_fairness.py RUN_DIR... --rounds {args.rounds} --number {args.number} --write-results` "
        "(run directories of `edgetune tune`).",
        "",
        "Medians over rounds (ms). Interleaved = the product's comparison (`edgetune tune --baseline onnxruntime`), "
        "ONNX Runtime's threads spinning between runs (its default) or not. A ratio is interleaved / alone: 1.00 = unaffected.",
        "",
        "| model | threads | TVM alone | ORT alone (spin) | ORT alone (no spin) | TVM / ORT interleaved, spin | ratios vs alone | "
        "TVM / ORT interleaved, no spin | ratios vs alone | load |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        spin = (r["tvm_interleaved_spin"] / r["tvm_alone"], r["ort_interleaved_spin"] / r["ort_alone_spin"])
        nospin = (r["tvm_interleaved_nospin"] / r["tvm_alone"], r["ort_interleaved_nospin"] / r["ort_alone_nospin"])
        lines.append(
            f"| {r['model']} | {r['threads']} | {r['tvm_alone']:.3f} | {r['ort_alone_spin']:.3f} | {r['ort_alone_nospin']:.3f} | "
            f"{r['tvm_interleaved_spin']:.3f} / {r['ort_interleaved_spin']:.3f} | {spin[0]:.2f} / {spin[1]:.2f} | "
            f"{r['tvm_interleaved_nospin']:.3f} / {r['ort_interleaved_nospin']:.3f} | {nospin[0]:.2f} / {nospin[1]:.2f} | "
            f"{r['load_before']:.2f} / {r['load_after']:.2f} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path, help="run directories of `edgetune tune` (model.so, summary.json)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=10)
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    from edgetune.tuning import TuneSummary

    tflite = [d for d in args.run_dirs if TuneSummary.load(d).model.source.endswith(".tflite")]
    onnx = [d for d in args.run_dirs if d not in tflite]
    sections = []
    if onnx:
        sections.append((report([measure(d, args.rounds, args.number) for d in onnx], args), MARK))
    if tflite:
        sections.append((report_litert([measure_litert(d, args.rounds, args.number) for d in tflite], args), MARK + "_litert"))
    for text, mark in sections:
        print(text)
        if args.write_results:
            sys.path.insert(0, str(Path(__file__).parent))
            from _results import write_section

            write_section(text, mark)
    return 0


if __name__ == "__main__":
    sys.exit(main())
