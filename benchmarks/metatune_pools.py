"""MetaTune against the random forest on large pools of recorded candidates (offline diagnostic).

Like ``metatune_ranking.py`` a diagnostic of models, not of the product (the
product benchmark, ``metatune.py``, tunes): it merges histories into one pool
per task (a candidate measured in several runs counted once), then for k
random measurements of a pool fits each model on them exactly as a tuning run
would and asks how close the best of its top 8 among the rest comes to the
rest's best (1 is perfect). Models: MetaTune adapted from a model file
(``meta``), its unadapted start (``meta zero-shot``), edgetune's random forest
ranking by its mean and by expected improvement (``rf mean``, ``rf ei``), the
hand-over score of ``tuning.meta_handoff_samples`` = 32 at that k (``hand-over
h32``) and random picks. Which runs made a pool matters: a model looks good on
candidates that a search it guided proposed, so say which histories you merged.

    python benchmarks/metatune_pools.py --histories '/tmp/metatransfer-*/history.db'
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.metatune_ranking import PICK, pick_quality  # noqa: E402

SHOTS = (8, 16, 32, 64)
HANDOFF = 32


def load_pools(pattern: str) -> dict[str, dict[str, list]]:
    """Per task: graphs (MetaTune), feature rows (the forest) and costs of distinct candidates."""
    from tvm.s_tir.meta_schedule import TuneContext
    from tvm.target import Target

    from edgetune.builder.intrinsics import load_tensor_intrinsics
    from edgetune.common.failure import FAILURE_THRESHOLD_SECS
    from edgetune.costmodel import graph
    from edgetune.history import open_history
    from edgetune.costmodel.surrogate import CandidateFeatures

    pools: dict[str, dict[str, list]] = defaultdict(lambda: {"graphs": [], "rows": [], "costs": [], "seen": set()})
    encoder, features = graph.GraphEncoder(), CandidateFeatures()
    for path in sorted(glob.glob(pattern)):
        store = open_history(f"sqlite:///{path}", read_only=True)
        try:
            groups = defaultdict(list)
            for summary in store.bulk.record_summaries():
                groups[(summary.workload.shash, summary.target_json)].append(summary)
            for (shash, target_json), summaries in groups.items():
                pool = pools[shash]
                records = store.bulk.records_by_id([s.id for s in summaries])
                fresh = [i for i, r in enumerate(records) if str(r.trace) not in pool["seen"]]
                if not fresh:
                    continue
                pool["seen"].update(str(records[i].trace) for i in fresh)
                target = Target(json.loads(target_json))
                load_tensor_intrinsics(target)
                context = TuneContext(mod=summaries[0].workload.workload.mod, target=target, task_name="pools")
                candidates = [records[i].as_measure_candidate() for i in fresh]
                pool["graphs"].extend(encoder(context, candidates))
                pool["rows"].extend(list(features(context, candidates)))
                pool["costs"].extend(summaries[i].mean_run_sec if summaries[i].mean_run_sec is not None
                                     else FAILURE_THRESHOLD_SECS for i in fresh)
        finally:
            store.close()
    return pools


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--histories", required=True, help="glob of history files to merge into per-task pools")
    parser.add_argument("--model-file", default=None, help="MetaTune model file (default: the bundled one)")
    parser.add_argument("--draws", type=int, default=6, help="random measurement orders per pool")
    args = parser.parse_args()
    from sklearn.ensemble import RandomForestRegressor

    from edgetune.costmodel import graph, net
    from edgetune.costmodel.meta_model import MetaTuneModel
    from edgetune.costmodel.modelfile import load_model_file
    from edgetune.costmodel.training import relative_throughput
    from edgetune.costmodel.surrogate import RandomForestModel, expected_improvement, stack_rows

    net.set_threads(1)
    pools = {k: p for k, p in load_pools(args.histories).items() if len(p["costs"]) > 2 * max(SHOTS)}
    if not pools:
        parser.error(f"--histories must hold tasks with more than {2 * max(SHOTS)} distinct candidates, "
                     f"got none in {args.histories!r}")
    model = load_model_file(args.model_file)
    params = net.to_torch(model.params)
    hyper = model.info.get("hyperparameters", {})
    steps, lr = int(hyper.get("inner_steps", 10)), float(hyper.get("inner_lr", 0.05))
    product = RandomForestModel()  # the forest's hyperparameters as `rf` and the hand-over use them
    weight_at = MetaTuneModel(args.model_file, handoff_samples=HANDOFF).meta_weight
    rng = np.random.default_rng(0)
    scores: dict[tuple[str, int], list[float]] = defaultdict(list)
    for pool in pools.values():
        costs, x = np.asarray(pool["costs"]), stack_rows(pool["rows"])
        nodes, adjacency, mask = graph.stack(pool["graphs"])
        z = net.embeddings(params, (((nodes - model.feature_mean) / model.feature_std) * mask[:, :, None], adjacency, mask))
        start = np.asarray(net.predict(params, z))
        for draw in range(args.draws):
            order = rng.permutation(len(costs))
            for k in SHOTS:
                measured = order[:k]
                labels = relative_throughput(costs[measured])
                meta = np.asarray(net.predict(net.adapt(params, z[measured], net.torch.as_tensor(labels), steps=steps, lr=lr), z))
                forest = RandomForestRegressor(n_estimators=product.n_estimators, min_samples_leaf=product.min_samples_leaf,
                                               max_features=product.max_features, random_state=draw, n_jobs=1)
                per_tree = np.stack([t.predict(x) for t in forest.fit(x[measured], labels).estimators_])
                mean, std = per_tree.mean(axis=0), per_tree.std(axis=0)
                weight = weight_at(k)
                for name, score in (("meta", meta), ("meta zero-shot", start), ("rf mean", mean),
                                    ("rf ei", expected_improvement(mean, std, 1.0)),
                                    (f"hand-over h{HANDOFF}", weight * meta + (1 - weight) * (mean + std)),
                                    ("random", rng.random(len(costs)))):
                    scores[(name, k)].append(pick_quality(costs, score, measured))
    sizes = ", ".join(str(len(p["costs"])) for p in pools.values())
    print(f"{len(pools)} pools ({sizes} distinct candidates) from {args.histories}, {args.draws} draws each. "
          f"Best of the top {PICK} over the best unmeasured (geometric mean; 1 is perfect), after k random measurements:\n")
    print("| model | " + " | ".join(f"k = {k}" for k in SHOTS) + " |\n|---|" + "---|" * len(SHOTS))
    for name in dict.fromkeys(n for n, _ in scores):
        print(f"| {name} | " + " | ".join(f"{math.exp(np.mean(np.log(scores[(name, k)]))):.3f}" for k in SHOTS) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
