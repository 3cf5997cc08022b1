"""How well MetaTune model files rank recorded candidates, zero-shot and after k shots (offline).

A diagnostic of the model, not of the product (``benchmarks/metatune.py`` is the
product benchmark: it tunes). It takes histories that tuning runs left (each a
pool of measured candidates of one task) and asks, for each model file: if the
model picks its top 8 of the pool, how close is the best of those 8 to the
pool's best? Zero-shot uses the file's start as it is; after k shots it first
adapts to k random records of the pool exactly as a tuning run does
(:func:`edgetune.costmodel.net.adapt` with the file's ``inner_steps`` and
``inner_lr``, labels relative to the best of the k) and picks among the rest.
``random`` picks 8 at random. Seconds, not minutes: use it to compare training
choices before spending a product benchmark on them.

    python benchmarks/metatune_ranking.py --histories '/tmp/metatransfer-*/history.db' \\
        --model shipped=edgetune/costmodel/data/metatune.npz --model plain=plain.npz
"""

from __future__ import annotations

import argparse
import glob
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PICK = 8
SHOTS = (8, 16)


def pick_quality(costs: np.ndarray, scores: np.ndarray, exclude: np.ndarray) -> float:
    """Best cost in the pool (``exclude`` aside) over the best cost of the ``PICK`` highest-scored: 1 is perfect."""
    rest = np.setdiff1d(np.arange(len(costs)), exclude)
    chosen = rest[np.argsort(-scores[rest], kind="stable")[:PICK]]
    return float(costs[rest].min() / costs[chosen].min())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--histories", required=True, help="glob of history files, one task each")
    parser.add_argument("--model", action="append", required=True, metavar="NAME=FILE")
    parser.add_argument("--splits", type=int, default=5, help="random k-shot draws per pool")
    parser.add_argument("--min-records", type=int, default=24)
    args = parser.parse_args()
    from edgetune.costmodel import graph, net
    from edgetune.costmodel.modelfile import ModelFile
    from edgetune.costmodel.training import load_corpus, relative_throughput

    net.set_threads(1)
    pools = []
    for path in sorted(glob.glob(args.histories)):
        corpus = load_corpus([f"sqlite:///{path}"])
        costs = np.asarray(corpus.costs)
        if len(corpus.graphs) >= args.min_records and corpus.tasks == 1:
            pools.append((graph.stack(corpus.graphs), costs))
    if not pools:
        parser.error(f"--histories must name history files of one task with >= {args.min_records} records, "
                     f"got none in {args.histories!r}")
    rng = np.random.default_rng(0)
    draws = [[rng.permutation(len(costs)) for _ in range(args.splits)] for _, costs in pools]
    columns = ["zero-shot", *(f"after {k} shots" for k in SHOTS)]
    results: dict[str, dict[str, list[float]]] = {}
    for spec in args.model:
        name, _, path = spec.partition("=")
        model = ModelFile.load(path)
        params = net.to_torch(model.params)
        hyper = model.info.get("hyperparameters", {})
        steps, lr = int(hyper.get("inner_steps", 10)), float(hyper.get("inner_lr", 0.05))
        scores = results.setdefault(name, {c: [] for c in columns})
        for ((nodes, adjacency, mask), costs), permutations in zip(pools, draws):
            scaled = ((nodes - model.feature_mean) / model.feature_std) * mask[:, :, None]
            z = net.embeddings(params, (scaled, adjacency, mask))
            for permutation in permutations:
                scores["zero-shot"].append(pick_quality(costs, net.predict(params, z), np.array([], int)))
                for k in SHOTS:
                    support = permutation[:k]
                    labels = net.torch.as_tensor(relative_throughput(costs[support]))
                    fast = net.adapt(params, z[support], labels, steps=steps, lr=lr)
                    scores[f"after {k} shots"].append(pick_quality(costs, net.predict(fast, z), support))
    scores = results.setdefault("random", {c: [] for c in columns})
    for (_, costs), permutations in zip(pools, draws):
        for permutation in permutations:
            scores["zero-shot"].append(pick_quality(costs, rng.random(len(costs)), np.array([], int)))
            for k in SHOTS:
                scores[f"after {k} shots"].append(pick_quality(costs, rng.random(len(costs)), permutation[:k]))
    print(f"{len(pools)} pools from {args.histories}, {args.splits} draws each. Best of the top {PICK} picked over "
          "the pool's best (geometric mean; 1 is perfect):\n")
    print("| model | " + " | ".join(columns) + " |\n|---|" + "---|" * len(columns))
    for name, scores in results.items():
        print(f"| {name} | " + " | ".join(f"{math.exp(np.mean(np.log(scores[c]))):.3f}" for c in columns) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
