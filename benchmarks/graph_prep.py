"""Host time of graph preparation: constants folded on the host (numpy) and then by Relax, or by Relax alone.

``prepare_graph`` (what every tune, build and deploy runs on a model) is timed per model, the two folds
alternating, ``--reps`` times each; the prepared modules are checked structurally equal. Only the fold
component is swapped (``edgetune.tasks.fold.fold_constants`` against ``relax.transform.FoldConstant``).

    python benchmarks/graph_prep.py demo:efficientnet-b0@224 OUT/mobilenet_v2-224-onnx-dynamo.onnx ... \\
        --rows benchmarks/graph_prep_rows.json

Alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--profile", default="host")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rows", type=Path, default=None)
    args = parser.parse_args()

    import tvm_ffi
    from tvm import relax

    import edgetune.tasks.blocking as blocking
    import edgetune.tasks.fold as fold
    import edgetune.tasks.graph as graph
    import edgetune.tasks.nhwc as nhwc
    from edgetune.profile import load_profile
    from edgetune.tasks import load_model

    folds = {"host": fold.fold_constants, "relax": relax.transform.FoldConstant}
    target = load_profile(args.profile).tvm_target()
    rows = []
    for spec in args.models:
        model = load_model(spec)
        times: dict[str, list[float]] = {name: [] for name in folds}
        prepared = {}
        load_before = os.getloadavg()[0]
        for rep in range(args.reps):
            for name in (list(folds) if rep % 2 == 0 else list(folds)[::-1]):
                for module in (graph, blocking, nhwc):
                    module.fold_constants = folds[name]
                started = time.perf_counter()
                prepared[name] = graph.prepare_graph(model, "auto", "full", target)
                times[name].append(time.perf_counter() - started)
        row = {
            "model": Path(spec).name, "reps": args.reps, "load_before": load_before, "load_after": os.getloadavg()[0],
            **{f"{name}_s": statistics.median(values) for name, values in times.items()},
            **{f"{name}_all_s": values for name, values in times.items()},
            "same_module": bool(tvm_ffi.structural_equal(prepared["host"].mod, prepared["relax"].mod)),
        }
        row["speedup"] = row["relax_s"] / row["host_s"]
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if not k.endswith("_all_s")}), flush=True)
    if args.rows:
        args.rows.write_text(json.dumps(rows, indent=1))
    print("| model | Relax FoldConstant alone (s) | host fold, then Relax (s) | speedup | same module |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['relax_s']:.2f} | {r['host_s']:.2f} | {r['speedup']:.1f}x | {r['same_module']} |")


if __name__ == "__main__":
    main()
