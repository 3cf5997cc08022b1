"""Host seconds per measured trial, by component, with the feature cache on and off (issue 55).

Each row is one ``run_tune`` of a model at N trials per task from an empty
history (the pipeline of ``edgetune tune``); the only component swapped is the
random forest's feature cache (``feature_cache_rows``: 100,000 rows, the
product's default, or 0, every row computed again, as before the cache). The
summary's ``host_time`` section says where the wall clock went: the search,
the cost model's features and its fits and predictions, builds, the board, the
rest. Side by side per seed, the order alternating, after one throwaway tune that
pays the process's first-use costs; the load average is recorded before and
after each row. Rows go to ``--rows`` as they finish; a rerun skips those it has.

Usage::

  python benchmarks/host_time.py --models demo:mobilenetv2@128 demo:transformer --per-task 32 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

CACHES = {"on": 100_000, "off": 0}


def run_row(model: str, per_task: int, seed: int, cache: str, args: argparse.Namespace) -> dict[str, Any]:
    from edgetune.costmodel.surrogate import RandomForestModel
    from edgetune.profile import load_profile
    from edgetune.tuning import TuneOptions, TuningPipeline, run_tune
    from edgetune.tuning.pipeline import Components

    profile = load_profile(args.profile).with_overrides(tuning={"seed": seed, "schedules": args.schedules})
    out_dir = args.out / f"{model.replace(':', '_').replace('@', '_')}-{per_task}pt-seed{seed}-cache-{cache}"
    probe = TuningPipeline(TuneOptions(profile=profile, model=model, out_dir=out_dir))
    n_tasks = len(probe.extract_tasks(profile.tvm_target(), probe.check_inputs()[1]))
    components = Components(cost_model=RandomForestModel(seed=seed, feature_cache_rows=CACHES[cache]))
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    summary = run_tune(TuneOptions(profile=profile, model=model, out_dir=out_dir, trials=per_task * n_tasks,
                                   evaluate=False), components=components)
    wall = time.monotonic() - started
    host = summary.host_time or {}
    measured = host.get("measured_trials") or 0
    return {
        "model": model, "per_task": per_task, "seed": seed, "feature_cache": cache, "tasks": n_tasks,
        "wall_s": wall, "tuning_wall_s": summary.seconds.tuning_wall, "device_s": summary.seconds.device,
        "measured": measured, "host_time": host,
        "host_s_per_trial": (summary.seconds.tuning_wall - summary.seconds.device) / measured if measured else None,
        "kernels_ms": summary.kernels_ms(), "load_before": load_before, "load_after": os.getloadavg()[0],
    }


def report(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | per task | feature cache | seeds | host s / measured trial (median, min-max) | search | features | cost model | build | board | other | kernels ms (median) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key in sorted({(r["model"], r["per_task"], r["feature_cache"]) for r in rows}):
        group = [r for r in rows if (r["model"], r["per_task"], r["feature_cache"]) == key and r["host_s_per_trial"]]
        if not group:
            continue
        per = [r["host_s_per_trial"] for r in group]

        def part(name: str) -> str:
            values = [r["host_time"][name] / r["measured"] for r in group if r["host_time"].get(name) is not None]
            return f"{statistics.median(values):.3f}" if values else "-"

        kernels = [r["kernels_ms"] for r in group if r["kernels_ms"]]
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {len(group)} | {statistics.median(per):.3f} ({min(per):.3f}-{max(per):.3f}) | "
            + " | ".join(part(n) for n in ("search", "features", "cost_model", "build", "board", "other"))
            + f" | {statistics.median(kernels):.3f} |" if kernels else " | - |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["demo:mobilenetv2@128", "demo:transformer"])
    parser.add_argument("--per-task", type=int, default=32)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--cache", nargs="+", choices=sorted(CACHES), default=["off", "on"])
    parser.add_argument("--schedules", default="off", help="tuning.schedules (off: the search does all the work)")
    parser.add_argument("--profile", default="host")
    parser.add_argument("--out", type=Path, default=Path("edgetune-out/host_time"))
    parser.add_argument("--rows", type=Path, default=None)
    args = parser.parse_args()
    rows_path = args.rows or args.out / "rows.json"
    rows: list[dict[str, Any]] = json.loads(rows_path.read_text()) if rows_path.exists() else []
    done = {(r["model"], r["per_task"], r["seed"], r["feature_cache"]) for r in rows}
    # a first tune in a process pays its imports and thread pools: a throwaway one, so that no row does
    warm = argparse.Namespace(**{**vars(args), "out": args.out / "warm-up"})
    run_row(args.models[0], 1, 0, "on", warm)
    for index, seed in enumerate(args.seeds):
        for model in args.models:
            # side by side: the same seed's rows one after the other, the order alternating with the seed
            for cache in args.cache if index % 2 == 0 else args.cache[::-1]:
                if (model, args.per_task, seed, cache) in done:
                    continue
                time.sleep(2.0)
                row = run_row(model, args.per_task, seed, cache, args)
                rows.append(row)
                rows_path.parent.mkdir(parents=True, exist_ok=True)
                rows_path.write_text(json.dumps(rows, indent=1))
                print(json.dumps({k: v for k, v in row.items() if k != "host_time"}), flush=True)
    print(report(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
