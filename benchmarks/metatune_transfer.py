"""MetaTune across platforms: pre-train on one target, adapt on another; meta vs plain transfer vs scratch vs rf.

The paper's cross-platform case (metatune.txt, section 5.3) on this machine:

1. **Source corpus.** The corpus tasks (:func:`benchmarks._metatune_tasks.corpus_tasks`)
   are tuned for a *generic* x86-64 target (no ``mcpu``) at 1 thread, through the
   product's pipeline (:func:`benchmarks.metatune_pretrain.tune_corpus`).
2. **Three starts, one network.** The same GCN and head, from the same corpus:
   - ``meta``: what ``edgetune costmodel pretrain`` does (supervised pre-training, then first-order MAML);
   - ``plain``: supervised pre-training only, no meta-learning (``iterations = 0``);
   - ``scratch``: the network's random initial weights, nothing learnt from the corpus (only its feature scaling).

   During tuning, each fine-tunes on the task's own measurements the same way (``tuning.cost_model = "meta"``
   with ``tuning.cost_model_file``).
3. **Destination.** The held-out tasks are tuned for this CPU's own target (the
   ``host`` profile: detected ``mcpu``) at 2 threads, with the three model files and
   with ``rf``, each run the product's pipeline (:func:`benchmarks.metatune.tune_one`).

    python benchmarks/metatune_transfer.py --db /tmp/source.db               # tune the source corpus, then compare
    python benchmarks/metatune_transfer.py --db /tmp/source.db --skip-tuning --budget 32 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._metatune_tasks import corpus_tasks, heldout_tasks  # noqa: E402
from benchmarks._pipeline import bench_profile, shared_board  # noqa: E402
from benchmarks.metatune import CHECKPOINTS, at, report, tune_one  # noqa: E402
from benchmarks.metatune_pretrain import tune_corpus  # noqa: E402

SOURCE_TARGET = {"kind": "llvm", "num-cores": 1}  # generic x86-64: no mcpu, one thread
STARTS = ("meta", "plain", "scratch")


def make_model_files(db: Path, out_dir: Path, seed: int) -> dict[str, Path]:
    """The three starts from the source corpus in ``db``: model files by name."""
    from edgetune.costmodel import graph, net
    from edgetune.costmodel.modelfile import ModelFile
    from edgetune.costmodel.training import pretrain_from_histories

    out_dir.mkdir(parents=True, exist_ok=True)
    meta = pretrain_from_histories([str(db)], seed=seed)
    plain = pretrain_from_histories([str(db)], seed=seed, iterations=0)
    hyper = meta.info["hyperparameters"]
    scratch = ModelFile(net.init_params(graph.NODE_FEATURES, hyper["hidden"], seed), meta.feature_mean,
                        meta.feature_std, {**meta.info, "training": {"scratch": True}})
    files = {}
    for name, model in (("meta", meta), ("plain", plain), ("scratch", scratch)):
        files[name] = model.save(out_dir / f"{name}.npz")
        training = model.info.get("training", {})
        print(f"{name}: {files[name]} ({training.get('records', 0)} records, "
              f"meta loss {training.get('meta_query_loss', [])}, {training.get('seconds', 0)} s)", flush=True)
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True, help="source corpus history (created or resumed)")
    parser.add_argument("--trials-per-task", type=int, default=36, help="source corpus records per task")
    parser.add_argument("--skip-tuning", action="store_true", help="use the source corpus as it is")
    parser.add_argument("--tasks", nargs="+", help="held-out task names (default: all)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=32, help="measurements per destination run")
    args = parser.parse_args()
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    started = time.time()
    args.db.parent.mkdir(parents=True, exist_ok=True)
    if not args.skip_tuning:
        seconds = tune_corpus(args.db.resolve(), args.trials_per_task, 0, target=SOURCE_TARGET, threads=1)
        print(f"source corpus: {len(corpus_tasks())} tasks x {args.trials_per_task} trials, {SOURCE_TARGET} "
              f"at 1 thread, in {seconds:.0f} s -> {args.db}", flush=True)
    files = make_model_files(args.db.resolve(), args.db.resolve().parent / "transfer-models", seed=0)
    destination = bench_profile("host", target=None)
    print(f"destination: {destination.target} at {destination.device.num_threads or 'all'} threads", flush=True)
    tasks = [t for t in heldout_tasks() if not args.tasks or t[0] in args.tasks]
    checkpoints = [n for n in CHECKPOINTS if n <= args.budget] or [args.budget]
    models = [*STARTS, "rf"]
    rows = []
    with shared_board(destination) as board:
        for task in tasks:
            for seed in args.seeds:
                for model in models:
                    work = Path(tempfile.mkdtemp(prefix=f"metatransfer-{model}-{seed}-"))
                    cost_model, model_file = ("rf", "") if model == "rf" else ("meta", str(files[model]))
                    curve = tune_one(task, cost_model, seed, args.budget, board, work, target=None,
                                     model_file=model_file)
                    rows.append({"task": task[0], "seed": seed, "model": model, "curve": curve})
                    print(f"{task[0]} seed {seed} {model}: {len(curve)} measured, best "
                          + ", ".join(f"@{n} {at(curve, n) * 1e6:.1f} us" for n in checkpoints)
                          + f" ({time.time() - started:.0f} s)", flush=True)
    print(f"\n`python benchmarks/metatune_transfer.py {' '.join(sys.argv[1:])}`: {time.time() - started:.0f} s. "
          "Best latency relative to `rf` (geometric mean over tasks and seeds; < 1 is better):\n")
    print(report(rows, models, checkpoints))
    return 0


if __name__ == "__main__":
    sys.exit(main())
