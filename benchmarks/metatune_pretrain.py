"""Make the MetaTune model edgetune ships: tune a corpus on this machine, then meta-train on it.

Step 1 tunes :func:`benchmarks._metatune_tasks.corpus_tasks` through the product's
pipeline (:func:`edgetune.tuning.run_tune`, the embedded loopback board, the
profile's default search: random forest, K-means sampling; adaptive early stop
off and a per-task cap so that every task gets its trials) into a history database. Step 2 runs
what ``edgetune costmodel pretrain`` runs on that database and writes the model
file into the package (``edgetune/costmodel/data/metatune.npz``).

    python benchmarks/metatune_pretrain.py --trials-per-task 36 --db corpus.db
    python benchmarks/metatune_pretrain.py --db corpus.db --skip-tuning   # re-train only
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._metatune_tasks import corpus_tasks  # noqa: E402
from benchmarks._pipeline import BENCH_TARGET, bench_profile  # noqa: E402

SHIPPED = Path(__file__).resolve().parent.parent / "edgetune" / "costmodel" / "data" / "metatune.npz"


def tune_corpus(db: Path, trials_per_task: int, seed: int, only: list[str] | None = None, *,
                target: dict | None = BENCH_TARGET, threads: int | None = None, sampler: str = "none") -> float:
    """Tune every corpus task (or those named in ``only``) up to ``trials_per_task`` records into ``db``; seconds taken.

    ``target`` and ``threads`` (the board's runtime threads; None: the host profile's) say what the corpus is of.
    ``sampler`` defaults to "none": the product's K-means sampling measures about a third of what the search
    proposes, and a corpus wants every trial as a record (with it, 36 trials per task left about 15 records).
    """
    from edgetune.tuning import Components, TuneOptions, run_tune

    # a per-task cap, and no minor-task cap (it would give the small dense/1x1/depthwise tasks 2 trials):
    # MetaSchedule's gradient scheduler would otherwise spend the budget on the big tasks
    device = {"device": {"num_threads": threads}} if threads else {}
    profile = bench_profile("host", target=target, tuning={
        "early_stop": "none", "seed": seed, "max_trials_per_task": trials_per_task, "minor_task_share": 0.0,
        "sampler": sampler}, **device)
    tasks = [task for task in corpus_tasks() if not only or task[0] in only]
    options = TuneOptions(
        profile=profile, model=None, out_dir=db.parent / "corpus-run", db=str(db),
        trials=trials_per_task * len(tasks), evaluate=False, warm_start="off",
    )
    started = time.monotonic()
    run_tune(options, components=Components(tasks=tasks))
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True, help="history database of the corpus (created or resumed)")
    parser.add_argument("--trials-per-task", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=SHIPPED)
    parser.add_argument("--sampler", choices=("none", "kmeans"), default="none",
                        help="the corpus run's candidate sampler (default none: every trial a record)")
    parser.add_argument("--iterations", type=int, default=0,
                        help="MAML meta-iterations after pre-training (default 0: on the held-out benchmark the "
                        "pre-trained start did better than the meta-trained one, see benchmarks/RESULTS.md)")
    parser.add_argument("--skip-tuning", action="store_true", help="train on the database as it is")
    parser.add_argument("--tasks", nargs="+", help="tune only these corpus tasks (a top-up of a database)")
    args = parser.parse_args()
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    args.db.parent.mkdir(parents=True, exist_ok=True)
    if not args.skip_tuning:
        seconds = tune_corpus(args.db.resolve(), args.trials_per_task, args.seed, args.tasks, sampler=args.sampler)
        print(f"corpus: {len(args.tasks or corpus_tasks())} tasks x {args.trials_per_task} trials in {seconds:.0f} s -> {args.db}", flush=True)
    from edgetune.costmodel.training import pretrain_from_histories

    started = time.monotonic()
    model = pretrain_from_histories([str(args.db)], seed=args.seed, iterations=args.iterations)
    model.save(args.out)
    print(f"model: {args.out} ({args.out.stat().st_size} bytes) in {time.monotonic() - started:.0f} s", flush=True)
    from edgetune.costmodel.modelfile import describe

    print(describe(model, str(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
