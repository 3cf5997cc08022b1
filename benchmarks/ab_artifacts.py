"""Two or more delivered models of one model file, and its baseline runtime, timed in one process, in blocks.

Timings of one ``model.so`` minutes apart moved by up to 40% on a noisy VM (RESULTS, ``keras_densenet_flatten``),
more than most changes under test. This loads each row's ``model.so`` (``LABEL=PATH``, e.g. the tunes before
and after a change: ``real_models.py --out``'s row directories) and the baseline runtime's model, and times
them with the product's protocol (:func:`edgetune.board.baseline.time_in_blocks`: each alone in a block of
calls after a pause and untimed warm-up calls, rounds alternating the order), so that every variant meets the
machine in the same state. Prints per variant the median of its blocks, the spread, and per-round ratios to
the first variant and to the baseline.

    python benchmarks/ab_artifacts.py KERAS/densenet121-224.tflite old=OUT_OLD/ROW/model.so new=OUT_NEW/ROW/model.so \\
        --rounds 30 --json OUT/ab.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any, Callable


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="the model file the artifacts were tuned from (.tflite, .onnx)")
    parser.add_argument("artifacts", nargs="+", metavar="LABEL=PATH", help="delivered model.so files")
    parser.add_argument("--profile", default="host", help="the profile whose thread count both runtimes use")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--pause", type=float, default=None, help="seconds before each block (default: the protocol's)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    pairs = []
    for spec in args.artifacts:
        label, sep, path = spec.partition("=")
        if not sep or not Path(path).is_file():
            parser.error(f"each artifact must be LABEL=PATH of a file, got {spec!r} instead")
        pairs.append((label, path))

    from edgetune.profile import load_profile

    threads = load_profile(args.profile).device.num_threads
    os.environ.setdefault("TVM_NUM_THREADS", str(threads))  # before TVM's thread pool starts in this process

    import numpy as np
    import tvm
    from tvm import relax

    from edgetune.board import baseline
    from edgetune.tasks import load_model

    model = load_model(args.model)
    runtime = "litert" if model.format == "tflite" else "onnxruntime"
    feed = {name: np.asarray(value) for name, value in model.random_inputs(seed=0).items()}
    loaded = baseline._load(runtime, Path(args.model).read_bytes(), threads, None)  # noqa: SLF001 - the product's loader
    if isinstance(loaded, baseline.BaselineResult):
        print(f"error: {runtime}: {loaded.error}", file=sys.stderr)
        return 2
    _version, run = loaded
    blocks: dict[str, Callable[[], float]] = {}
    calls = 10
    for label, path in pairs:
        vm = relax.VirtualMachine(baseline.load_module_fresh(path), tvm.cpu())
        inputs = [tvm.runtime.tensor(value) for value in feed.values()]
        vm["main"](*inputs)
        calls = max(calls, baseline._calls_for(lambda vm=vm, inputs=inputs: vm["main"](*inputs)))  # noqa: SLF001
        blocks[label] = _tvm_block(vm, inputs, lambda: calls)
    calls = max(calls, baseline._calls_for(lambda: run(feed)))  # noqa: SLF001

    def baseline_block() -> float:
        import time

        baseline.warm_up(lambda: run(feed))
        started = time.perf_counter()
        for _ in range(calls):
            run(feed)
        return (time.perf_counter() - started) / calls * 1e3

    blocks[runtime] = baseline_block
    load_before = os.getloadavg()[0]
    pause = baseline.BLOCK_PAUSE_SEC if args.pause is None else args.pause
    times = baseline.time_in_blocks(blocks, args.rounds, pause)
    first = pairs[0][0]
    result: dict[str, Any] = {
        "model": args.model, "baseline": runtime, "threads": threads, "rounds": args.rounds, "calls": calls,
        "load": [load_before, os.getloadavg()[0]], "variants": {},
    }
    print(f"{args.model}: {args.rounds} rounds of {calls}-call blocks, {threads} threads, "
          f"load {load_before:.2f} -> {result['load'][1]:.2f}")
    for label, values in times.items():
        to_first = [v / f for v, f in zip(values, times[first])]
        to_base = [v / b for v, b in zip(values, times[runtime])]
        entry = {"ms": statistics.median(values), "min_ms": min(values), "max_ms": max(values),
                 "per_round_vs_first": statistics.median(to_first), "per_round_vs_baseline": statistics.median(to_base),
                 "blocks_ms": values}
        result["variants"][label] = entry
        print(f"  {label:>12}: {entry['ms']:.4g} ms ({entry['min_ms']:.4g}-{entry['max_ms']:.4g}); per round: "
              f"{entry['per_round_vs_first']:.3f} x {first}, {entry['per_round_vs_baseline']:.3f} x {runtime}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


def _tvm_block(vm: Any, inputs: list[Any], calls: Callable[[], int]) -> Callable[[], float]:
    import tvm

    from edgetune.board import baseline

    def block() -> float:
        baseline.warm_up(lambda: vm["main"](*inputs))
        timer = vm.time_evaluator("main", tvm.cpu(), number=calls(), repeat=1)
        return float(timer(*inputs).mean) * 1e3

    return block


if __name__ == "__main__":
    sys.exit(main())
