"""``edgetune costmodel pretrain | info``: make and inspect MetaTune model files."""

from __future__ import annotations

import argparse
import time
from typing import Any

PRETRAIN_EPILOG = """\
examples:
  edgetune costmodel pretrain --db edgetune-out/tiny-cnn-host/history.db --out tiny.npz
  edgetune costmodel pretrain --db rk3399.db --db postgresql://tuner@db.lab/tuning --out lab.npz

Every task (workload and target) of every history is used, failed candidates
included. Tune with it: `edgetune tune --cost-model meta` and, in the profile,
tuning.cost_model_file = "lab.npz" (without it, the model bundled with edgetune).
Needs PyTorch: pip install 'edgetune[meta]'.
"""


def add_costmodel_parser(sub: Any) -> None:
    """Add ``costmodel pretrain`` and ``costmodel info`` to the top-level subparsers."""
    parser = sub.add_parser("costmodel", help="pre-train and inspect MetaTune cost models (--cost-model meta)")
    actions = parser.add_subparsers(dest="costmodel_command", metavar="ACTION")
    actions.required = True
    pretrain = actions.add_parser(
        "pretrain", help="meta-train a MetaTune model from tuning histories",
        description="Supervised pre-training, then first-order MAML over few-shot tasks of the histories' records.",
        epilog=PRETRAIN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    pretrain.add_argument("--db", metavar="URL", action="append", required=True,
                          help="history database (a path, sqlite:///PATH or postgresql://...); repeat for several")
    pretrain.add_argument("--out", metavar="FILE", required=True, help="model file to write (.npz)")
    pretrain.add_argument("--seed", type=int, default=0)
    pretrain.add_argument("--epochs", type=int, default=40, help="supervised pre-training epochs (default 40)")
    pretrain.add_argument("--iterations", type=int, default=300, help="MAML meta-iterations (default 300)")
    pretrain.set_defaults(func=_pretrain)
    info = actions.add_parser("info", help="describe a MetaTune model file (or the bundled one)")
    info.add_argument("file", nargs="?", help="model file (default: the model bundled with edgetune)")
    info.set_defaults(func=_info)


def _pretrain(args: argparse.Namespace) -> int:
    from .modelfile import describe
    from .training import pretrain_from_histories

    started = time.monotonic()
    model = pretrain_from_histories(args.db, seed=args.seed, epochs=args.epochs, iterations=args.iterations)
    path = model.save(args.out)
    print(describe(model, str(path)))
    print(f"wrote {path} ({path.stat().st_size} bytes) in {time.monotonic() - started:.0f} s")
    return 0


def _info(args: argparse.Namespace) -> int:
    from .modelfile import bundled_model, describe, ModelFile

    if args.file:
        print(describe(ModelFile.load(args.file), args.file))
    else:
        print(describe(bundled_model(), "(bundled with edgetune)"))
    return 0
