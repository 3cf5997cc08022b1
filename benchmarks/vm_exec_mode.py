"""The Relax VM compiled against interpreted: a tuned run's model built both ways, timed side by side.

``edgetune.artifact.compile`` builds CPU models with the VM's instruction sequence compiled to machine code
(``CPU_VM_EXEC_MODE = "compiled"``) rather than interpreted per call ("bytecode"). This rebuilds a finished
run's delivered model from its own recipe and history with :func:`~edgetune.artifact.compile.compile_model`
(what ``edgetune tune`` and ``deploy`` call) in each mode, swapping only that constant, checks the two give
the same outputs, and times both and the baseline runtime with ``benchmarks/ab_artifacts.py`` (the product's
block protocol, in one process).

    python benchmarks/vm_exec_mode.py RUN_DIR MODEL --out OUT --rounds 30
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

MODES = ("bytecode", "compiled")


def build(run_dir: Path, model_spec: str, out: Path, profile: str) -> dict[str, float]:
    """``OUT/{mode}.so`` for each mode; returns each build's seconds."""
    import numpy as np
    import tvm
    from tvm import relax

    import edgetune.artifact.compile as compile_module
    from edgetune.board.baseline import load_module_fresh
    from edgetune.history import open_history
    from edgetune.profile import load_profile
    from edgetune.tasks import load_model
    from edgetune.tasks.recipe import Recipe, prepare_model

    summary = json.loads((run_dir / "summary.json").read_text())
    target = load_profile(profile).tvm_target()
    model = load_model(model_spec)
    prepared = prepare_model(model, Recipe.from_dict(summary["recipe"]), target)
    history = open_history(f"sqlite:///{run_dir / 'history.db'}", read_only=True)
    seconds, outputs = {}, {}
    feed = [tvm.runtime.tensor(np.asarray(v)) for v in model.random_inputs(seed=0).values()]
    try:
        for mode in MODES:
            compile_module.CPU_VM_EXEC_MODE = mode
            started = time.perf_counter()
            executable = compile_module.compile_model(
                prepared.mod, target, history, prepack_weights=prepared.recipe.prepack_weights)
            seconds[mode] = time.perf_counter() - started
            executable.export_library(str(out / f"{mode}.so"))
            result = relax.VirtualMachine(load_module_fresh(out / f"{mode}.so"), tvm.cpu())["main"](*feed)
            outputs[mode] = (result if hasattr(result, "numpy") else result[0]).numpy()
    finally:
        history.close()
    difference = float(np.abs(outputs["bytecode"] - outputs["compiled"]).max())
    print(f"built in {seconds['bytecode']:.1f} s (bytecode) and {seconds['compiled']:.1f} s (compiled); "
          f"outputs differ by at most {difference:g}")
    return {**{f"build_s_{m}": s for m, s in seconds.items()}, "max_abs_diff": difference}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a finished tune's output directory (summary.json, history.db)")
    parser.add_argument("model", help="the model it tuned")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--profile", default="host")
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    built = build(args.run_dir, args.model, args.out, args.profile)
    timing = args.out / "ab.json"
    subprocess.run([sys.executable, str(Path(__file__).with_name("ab_artifacts.py")), args.model,
                    *[f"{mode}={args.out / f'{mode}.so'}" for mode in MODES], "--profile", args.profile,
                    "--rounds", str(args.rounds), "--json", str(timing)], check=True)
    result = {**json.loads(timing.read_text()), **built, "run_dir": str(args.run_dir)}
    timing.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
