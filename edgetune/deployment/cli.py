"""``edgetune deploy``: ship a tuned model to a provisioned board, verify it, switch to it."""

from __future__ import annotations

import argparse
from typing import Any

from ..common.choices import CONV_LAYOUTS, baseline_runtimes
from ..provision.cli import add_inventory_argument

DEPLOY_EPILOG = """\
examples:
  edgetune deploy --board rk3399 edgetune-out/tiny-cnn-rk3399
      upload the tune run's model.so, check sha256 on the board, run it through
      RPC against the host reference, benchmark it with run.py, then switch `current`
  edgetune deploy --board rk3399 --model net.onnx --db history.db
      compile with the history's best schedules for the board's profile, then the same
      (add --conv-layout NHWC if the history was tuned with tune --conv-layout NHWC)
  edgetune deploy --board rk3399 --rollback tiny-cnn
      point `current` back at the previous version
  edgetune deploy --board rk3399 RUN_DIR --baseline onnxruntime
      also time ONNX Runtime on the board beside the deployed model (installed
      there by: edgetune provision rk3399 --baseline onnxruntime)

On the board: ~/.edgetune/deployments/<model>/{<version>/,current,previous};
each version holds model.so, run.py and manifest.json. Run it without the host:
  ~/.edgetune/venv/bin/python ~/.edgetune/deployments/tiny-cnn/current/run.py --input x.npy --output y.npy
"""


def add_deploy_parser(sub: Any) -> None:
    """Register ``deploy`` on the top-level subparsers."""
    deploy = sub.add_parser(
        "deploy",
        help="ship a tuned model to a board, verify it there and switch to it atomically",
        description="Upload a tuned artifact into a versioned directory on a provisioned board, check its sha256 "
        "there, verify its outputs through RPC against a host reference, benchmark it on the board "
        "(mean, p50, p90, CV, peak RSS), write manifest.json, then switch the `current` link atomically.",
        epilog=DEPLOY_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    deploy.add_argument("run_dir", nargs="?", metavar="RUN_DIR", help="output directory of `edgetune tune` (model.so, summary.json)")
    deploy.add_argument("--board", required=True, metavar="NAME", help="a provisioned board of the inventory")
    add_inventory_argument(deploy)
    deploy.add_argument("--model", metavar="M", help="instead of RUN_DIR: an ONNX or .pt2 file, or demo:NAME, to compile")
    deploy.add_argument("--profile", metavar="P", help="with --model: must match the board's profile (default: it)")
    deploy.add_argument("--db", metavar="URL", help="with --model: history database whose best schedules are used")
    deploy.add_argument("--conv-layout", choices=CONV_LAYOUTS, default=None, metavar="LAYOUT",
                        help="with --model: the convolution layout the history was tuned in, for a history an older "
                        "edgetune tuned, which records no recipe (a recorded recipe is built as it is: the layout, graph "
                        "optimization, fast-math and prepacking of the tune); one of " + ", ".join(CONV_LAYOUTS))
    deploy.add_argument("--rollback", metavar="MODEL", help="switch MODEL's `current` back to its previous version")
    deploy.add_argument("--no-verify", action="store_true", help="skip the RPC check and the benchmark (upload + sha256 only)")
    deploy.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance against the host reference (default 1e-3)")
    deploy.add_argument("--atol", type=float, default=1e-4,
                        help="absolute tolerance, scaled by the reference's largest magnitude when above 1 (default 1e-4)")
    deploy.add_argument("--warmup", type=int, default=3, help="untimed runs before the benchmark (default 3)")
    deploy.add_argument("--repeat", type=int, default=20, help="timed runs of the benchmark (default 20)")
    deploy.add_argument("--out", metavar="DIR", help="where the local manifest copy goes (default: RUN_DIR/deployments)")
    deploy.add_argument("--accept-new-host-key", action="store_true", help="record an unknown board's host key")
    deploy.add_argument("--baseline", type=baseline_runtimes, default=(), metavar="RUNTIMES",
                        help="also time these runtimes (onnxruntime, litert) on the board beside the deployed model, "
                        "on the same input and threads; install them with: edgetune provision BOARD --baseline RUNTIMES")
    deploy.set_defaults(func=run_deploy)


def run_deploy(args: argparse.Namespace) -> int:
    from .run import deploy_run as deploy

    if args.rollback:
        from ..provision.inventory import load_inventory

        return _rollback(load_inventory(args.inventory).get(args.board), args)
    result = deploy(
        args.run_dir, board=args.board, inventory=args.inventory, model=args.model, profile=args.profile, db=args.db,
        conv_layout=args.conv_layout,
        verify=not args.no_verify, rtol=args.rtol, atol=args.atol, warmup=args.warmup, repeat=args.repeat, out=args.out,
        accept_new_host_key=args.accept_new_host_key, log=lambda m: print(m, flush=True), baseline=args.baseline,
    )
    d = result.deployment
    print(f"deployed {d.model} {d.version} to {d.board}:{d.directory} "
          f"({'verified' if result.verified else 'NOT verified: --no-verify'}); manifest: {result.local_manifest}")
    return 0


def _rollback(entry: Any, args: argparse.Namespace) -> int:
    from ..provision.ssh import BoardConnection
    from .ship import deployments_root, rollback, safe_model_name

    with BoardConnection(entry, accept_new_host_key=args.accept_new_host_key) as connection:
        done = rollback(connection, deployments_root(connection, entry), safe_model_name(args.rollback))
    print(f"rolled back {done.model} on {done.board}: current -> {done.version} (previous: {done.previous})")
    return 0
