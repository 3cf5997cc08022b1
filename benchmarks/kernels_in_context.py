"""Where a delivered model's time goes: each kernel timed inside the model, and again on its own buffers.

Issue 26 point 3 asks for the whole model within 1.05x of the sum of its tuned kernels. This breaks a
``model.so`` (a run's delivered model, or a benchmark row's kept ``model-N-per-task.so``) down by kernel:

* in the model: each call timed as the model runs it (``relax.VirtualMachine.set_instrument``), caches and
  thread pool as the kernels before it left them;
* repeated: right after, the same kernel on the same buffers ``--repeat`` times, its caches warm;
* tuned (with ``--summary``): the task's best latency as the tune measured it.

A kernel much slower in the model than repeated loses time to its neighbours (cold caches, a thread-pool
wake-up); one much slower repeated than tuned computes on values its tuning inputs did not have (a libm call
whose cost depends on them, as ``erff`` did before the ``fast-math`` pass) or was picked by a noisy measurement.
The instrument's own overhead is in the "in the model" column (a few us per call).

    python benchmarks/kernels_in_context.py edgetune-out/RUN/model.so demo:transformer-bert@128 \\
        --summary edgetune-out/RUN/summary.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import time
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("artifact", type=Path, help="a delivered model.so (or a kept model-N-per-task.so)")
    parser.add_argument("model", help="the model it was built from (demo:NAME@SIZE or a model file)")
    parser.add_argument("--summary", type=Path, help="the run's summary.json: adds each task's tuned best")
    parser.add_argument("--runs", type=int, default=15, help="model runs to instrument (default 15)")
    parser.add_argument("--repeat", type=int, default=10, help="repeats of each kernel on its buffers (default 10)")
    args = parser.parse_args()
    if args.runs < 1 or args.repeat < 1:
        parser.error(f"--runs and --repeat must be >= 1, got {args.runs} and {args.repeat} instead")
    os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))

    import tvm
    from tvm import relax

    from edgetune.tasks.models import load_model

    vm = relax.VirtualMachine(tvm.runtime.load_module(str(args.artifact)), tvm.cpu())
    inputs = [tvm.runtime.tensor(v) for v in load_model(args.model).random_inputs().values()]
    main_fn = vm["main"]
    for _ in range(5):
        main_fn(*inputs)
    whole = []
    for _ in range(max(args.runs, 20)):
        started = time.perf_counter()
        main_fn(*inputs)
        whole.append(time.perf_counter() - started)

    in_model: dict[str, list[float]] = collections.defaultdict(list)
    repeated: dict[str, list[float]] = collections.defaultdict(list)
    started_at: dict[str, float] = {}

    def instrument(func, name, before, _ret, *call_args):
        if name.startswith("vm.builtin"):
            return 0
        if before:
            started_at[name] = time.perf_counter()
            return 0
        in_model[name].append(time.perf_counter() - started_at[name])
        began = time.perf_counter()
        for _ in range(args.repeat):
            func(*call_args)
        repeated[name].append((time.perf_counter() - began) / args.repeat)
        return 0

    vm.set_instrument(instrument)
    for _ in range(args.runs):
        main_fn(*inputs)
    if not in_model:
        raise SystemExit(
            f"error: {args.artifact} runs its VM compiled (edgetune.artifact.compile.CPU_VM_EXEC_MODE), which calls "
            "its kernels without the instrument: build it with the bytecode VM to break it down"
        )

    tuned = {}
    if args.summary:
        tuned = {t["name"]: t["best_latency_us"] for t in json.loads(args.summary.read_text())["tasks"]}
    rows = []
    for name, times in in_model.items():
        calls = len(times) // args.runs
        rows.append((np.median(times) * 1e3 * calls, np.median(repeated[name]) * 1e3 * calls, calls, name))
    rows.sort(reverse=True)
    print(f"{args.artifact}: whole model {np.median(whole) * 1e3:.3f} ms (median of {len(whole)} runs, not instrumented)")
    print(f"{'in the model':>13} {'repeated':>9} {'tuned':>9}  calls  kernel (ms per model run)")
    for context, warm, calls, name in rows:
        best = tuned.get(name)
        tuned_ms = f"{best * calls / 1e3:9.3f}" if best is not None else f"{'':>9}"
        print(f"{context:13.3f} {warm:9.3f} {tuned_ms}  x{calls:<4} {name}")
    total_tuned = sum(tuned.get(name, 0) * calls / 1e3 for _c, _w, calls, name in rows)
    print(f"{sum(r[0] for r in rows):13.3f} {sum(r[1] for r in rows):9.3f} "
          f"{total_tuned if tuned else float('nan'):9.3f}  sum")


if __name__ == "__main__":
    main()
