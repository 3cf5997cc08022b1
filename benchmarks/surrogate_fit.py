"""How well the random-forest cost model ranks what a tune measured next, and what each fit costs, by training-set cap.

Offline, on a history a tuning run left (many tasks; nothing is measured). It
replays the history in the order it was measured. At checkpoints (every
``--every``-th batch after the first ``--warmup`` share of records), the product's
:class:`~edgetune.costmodel.surrogate.RandomForestModel`, holding every record
measured before, scores the task's next ``--pool`` records (the candidates the
search went on to measure) and picks its top 8 by expected improvement, as the
search ranks (``mean``: by the predicted mean alone). Quality: the pool's best latency over the best of the 8 (1 is
perfect; ``random`` picks 8 at random). Seconds: one fit at that checkpoint.

    python benchmarks/surrogate_fit.py --db sqlite:///PATH/history.db --cap 1000000000 --cap 1024 --cap 512

Feature rows are cached beside ``--cache``. Time it alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PICK = 8


def load_rows(url: str, cache: Path) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """Every successful or failed record in measurement order: task key, feature row, seconds, batch id."""
    if cache.exists():
        data = np.load(cache, allow_pickle=False)
        return list(data["tasks"]), data["rows"], data["costs"], data["batch"]
    from tvm.s_tir.meta_schedule import TuneContext
    from tvm.target import Target

    from edgetune.builder.intrinsics import load_tensor_intrinsics
    from edgetune.common.failure import FAILURE_THRESHOLD_SECS
    from edgetune.costmodel.surrogate import CandidateFeatures, stack_rows
    from edgetune.history import open_history

    store = open_history(url, read_only=True)
    features = CandidateFeatures()
    try:
        summaries = store.bulk.record_summaries()
        by_group: dict[tuple[str, str, str], list] = defaultdict(list)
        for s in summaries:
            by_group[(s.workload.shash, s.target_json, s.timing)].append(s)
        row_of: dict[int, np.ndarray] = {}
        for (_, target_json, _), group in by_group.items():
            target = Target(json.loads(target_json))
            load_tensor_intrinsics(target)
            context = TuneContext(mod=group[0].workload.workload.mod, target=target, task_name="replay")
            records = store.bulk.records_by_id([s.id for s in group])
            for s, row in zip(group, features(context, [r.as_measure_candidate() for r in records])):
                row_of[s.id] = row
    finally:
        store.close()
    tasks = [f"{s.workload.shash}/{s.timing}" for s in summaries]
    costs = np.array([s.mean_run_sec if s.mean_run_sec is not None else FAILURE_THRESHOLD_SECS for s in summaries])
    batch = np.cumsum([i == 0 or tasks[i] != tasks[i - 1] for i in range(len(tasks))])
    rows = stack_rows([row_of[s.id] for s in summaries])
    np.savez(cache, tasks=np.array(tasks), rows=rows, costs=costs, batch=batch)
    return tasks, rows, costs, batch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="the history to replay (read-only)")
    parser.add_argument("--cap", type=int, action="append", required=True, help="max_train_samples to compare")
    parser.add_argument("--warmup", type=float, default=0.3, help="share of records before the first checkpoint")
    parser.add_argument("--every", type=int, default=40, help="a checkpoint every this many batches")
    parser.add_argument("--pool", type=int, default=64, help="the task's next records scored at a checkpoint")
    parser.add_argument("--cache", default="/tmp/surrogate_fit_rows.npz")
    args = parser.parse_args()
    from edgetune.costmodel.surrogate import RandomForestModel, expected_improvement

    tasks, rows, costs, batch = load_rows(args.db, Path(args.cache))
    print(f"{len(tasks)} records of {len(set(tasks))} tasks from {args.db}; load average {os.getloadavg()[0]:.2f}")
    starts = [i for i in range(1, len(tasks)) if batch[i] != batch[i - 1] and i >= args.warmup * len(tasks)]
    checkpoints = [i for i in starts[:: args.every]
                   if sum(1 for j in range(i, len(tasks)) if tasks[j] == tasks[i]) >= 2 * PICK]
    rng = np.random.default_rng(0)
    quality: dict[str, list[float]] = defaultdict(list)
    seconds: dict[str, list[float]] = defaultdict(list)
    for at in checkpoints:
        task = tasks[at]
        pool = np.array([j for j in range(at, len(tasks)) if tasks[j] == task][: args.pool])
        pool_costs = costs[pool]
        models = {}
        for cap in args.cap:
            model = RandomForestModel(max_train_samples=cap)
            for key in dict.fromkeys(tasks[:at]):
                mine = [j for j in range(at) if tasks[j] == key]
                model.add_measured(key, rows[mine], list(costs[mine]))
            models[cap] = model
        for cap, model in models.items():
            started = time.perf_counter()
            mean, std = model.predict_rows(task, rows[pool])
            seconds[f"cap {cap}"].append(time.perf_counter() - started)
            for name, score in ((f"cap {cap}", expected_improvement(mean, std, 1.0)), (f"cap {cap} mean", mean)):
                chosen = pool[np.argsort(-score, kind="stable")[:PICK]]
                quality[name].append(float(pool_costs.min() / costs[chosen].min()))
        chosen = rng.choice(pool, PICK, replace=False)
        quality["random"].append(float(pool_costs.min() / costs[chosen].min()))
        print(f"record {at}: {task[:12]} pool {len(pool)} " + " ".join(
            f"{k}={quality[k][-1]:.3f}" + (f"/{seconds[k][-1]:.2f}s" if k in seconds else "") for k in quality), flush=True)
    print(f"\n{len(checkpoints)} checkpoints; load average {os.getloadavg()[0]:.2f}\n")
    print("| model | pick quality (geomean) | worst | fit + predict seconds (median) | max |\n|---|---|---|---|---|")
    for name, values in quality.items():
        q = np.asarray(values)
        secs = seconds.get(name)
        timing = f"{np.median(secs):.2f} | {max(secs):.2f}" if secs else "- | -"
        print(f"| {name} | {math.exp(np.mean(np.log(q))):.3f} | {q.min():.3f} | {timing} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
