"""The ``edgetune`` command line.

Every deliberate failure is an :class:`~edgetune.errors.EdgetuneError`; the CLI
prints it as one line on stderr and exits with its ``exit_code`` (no traceback;
``EDGETUNE_DEBUG=1`` shows one).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Sequence

from ._version import __version__
from .common.choices import (
    TASK_SCHEDULERS,
    WARM_START_MODES,
)
from .errors import EdgetuneError, TuningInterrupted

TUNE_EPILOG = """\
examples:
  edgetune tune --profile host --model demo:tiny-cnn --trials 32
      tune on this machine: a loopback tracker and RPC server stand in for a board
  edgetune tune --profile rk3399 --model net.onnx --tracker 127.0.0.1:9190 --key rk3399
      measure on a board registered with a tracker (see `edgetune provision`)

Re-running the same command resumes: candidates already in the history
database are not measured again, and --trials is the total budget for the
model on this target. Ctrl-C once stops after the batch in flight; twice stops now.

environment (TVM's own, as its RPC tools read them; a flag given wins):
  TVM_TRACKER_HOST, TVM_TRACKER_PORT   default of --tracker (either set: host 127.0.0.1,
                                       port 9190 if the other is not); unset both for
                                       the loopback board
  TVM_TRACKER_KEY                      default of --key when there is a tracker
"""


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="edgetune",
        description="Tune neural networks for ARM boards and other devices with Apache TVM, "
        "measuring candidates on the device through TVM's RPC tracker.",
    )
    parser.add_argument("--version", action="version", version=f"edgetune {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    _add_tune_parser(sub)
    _add_other_parsers(sub)
    return parser


def _add_tune_parser(sub: Any) -> None:
    """``edgetune tune``: where the model, board and budget come from, and the trial-reducing switches."""
    tune = sub.add_parser(
        "tune",
        help="tune a model for a device profile and compile it",
        description="Extract the model's operators, tune each with MetaSchedule while measuring "
        "on the device, then compile the model with the best schedules and compare it "
        "with an untuned build on the device.",
        epilog=TUNE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    tune.add_argument("--profile", "-p", help="profile name (see `edgetune profiles list`) or TOML file; required without --board")
    tune.add_argument(
        "--board", metavar="NAME", help="a board of the inventory (see `edgetune provision`): its profile, tracker and key "
        "are the defaults of --profile, --tracker and --key"
    )
    tune.add_argument("--inventory", metavar="FILE", help="board inventory for --board (default: $EDGETUNE_INVENTORY)")
    tune.add_argument(
        "--model", "-m", required=True, help="ONNX file, PyTorch .pt2 file (torch.export.save; needs edgetune[torch]), "
        "or a built-in demo: demo:NAME[@RES] with NAME one of tiny-cnn, resnet18, resnet50, mobilenetv1, mobilenetv2, "
        "mobilenetv3-small, squeezenet (1.1), squeezenet1.0, squeezenet1.1, shufflenetv2, efficientnet-b0, "
        "transformer, transformer-bert (e.g. demo:resnet18@96; for a transformer @RES is the sequence length)"
    )
    tune.add_argument(
        "--tracker", metavar="HOST:PORT",
        help="RPC tracker of the board (default: $TVM_TRACKER_HOST:$TVM_TRACKER_PORT when set; else start a loopback one here)",
    )
    tune.add_argument("--key", help="device key at the tracker (default: $TVM_TRACKER_KEY with a tracker, else the profile's rpc.key)")
    tune.add_argument("--trials", type=int, help="total measurement budget for the model (default: the profile's tuning.trials)")
    tune.add_argument("--db", metavar="URL", help="history database: a path, sqlite:///... or postgresql://... URL (default: OUT/history.db)")
    tune.add_argument("--out", metavar="DIR", help="output directory (default: ./edgetune-out/MODEL-PROFILE)")
    tune.add_argument(
        "--warm-start",
        choices=WARM_START_MODES,
        default="same",
        help="train the cost model on the history before tuning: 'same' tasks (this board, and down-weighted "
        "other boards; default), 'auto' adds the same operator at other shapes where a task has no history "
        "of its own, 'similar' adds them always (neither helped on benchmarks/RESULTS.md, warm_start_similar), 'off'",
    )
    tune.add_argument(
        "--suggested",
        action="store_true",
        help="give each task its own task type's settings from the history (see `edgetune db suggest`): the "
        "trials by which that type found its best become the task's initial maximum of the adaptive early stop "
        "(a hard per-task cap with early_stop fixed or none), and with the kmeans sampler the type's safe K-means "
        "distance ratio; task types without history keep the profile's settings (the run names them)",
    )
    tune.add_argument(
        "--scheduler",
        choices=TASK_SCHEDULERS,
        help="how the budget is shared between the model's tasks (default: the profile's tuning.task_scheduler)",
    )
    _add_profile_flags(tune)
    tune.add_argument("--no-evaluate", action="store_true", help="skip compiling and measuring the whole model after tuning")
    tune.add_argument("--quiet", "-q", action="store_true", help="no progress display, only the final summary")
    tune.set_defaults(func=_run_tune)


def _add_profile_flags(tune: Any) -> None:
    """One flag per profile key declared with one (edgetune/profile/schema.py), overriding it for this run."""
    from .profile.schema import FEWER_TRIALS, PROFILE_FLAGS

    groups = {
        FEWER_TRIALS: tune.add_argument_group(
            FEWER_TRIALS, "each overrides the profile key named in brackets; `none`/`fixed`/`xgb` give stock MetaSchedule",
        ),
        "": tune,
    }
    for flag in PROFILE_FLAGS.values():
        options: dict[str, Any] = {"help": f"{flag.help} [{flag.dotted}]", "metavar": flag.metavar}
        if flag.choices:
            options["choices"] = flag.choices
        elif flag.type is bool:
            options["action"] = argparse.BooleanOptionalAction
        elif flag.type is not None:
            options["type"] = flag.type
        groups[flag.group].add_argument(flag.option, dest=flag.name, **options)


def _add_other_parsers(sub: Any) -> None:
    """Every other command; each subpackage adds its own."""
    from .profile.cli import add_profiles_parser

    add_profiles_parser(sub)

    from .provision.cli import add_provision_parsers

    add_provision_parsers(sub)

    from .deployment.cli import add_deploy_parser

    add_deploy_parser(sub)

    from .report.cli import add_report_parser

    add_report_parser(sub)

    db = sub.add_parser("db", help="inspect, maintain and move the tuning history database")
    db_sub = db.add_subparsers(dest="db_command", metavar="ACTION")
    db_sub.required = True
    from .history.cli import add_db_commands
    from .search.cli import add_suggest_command

    add_db_commands(db_sub)
    add_suggest_command(db_sub)
    from .costmodel.cli import add_costmodel_parser

    add_costmodel_parser(sub)
    from .schedules.cli import add_schedules_parser

    add_schedules_parser(sub, build=_schedules_build)


def _schedules_build(args: argparse.Namespace) -> int:
    """``schedules build`` tunes: the command is tuning's (edgetune.tuning.zoo), imported when it runs."""
    from .tuning.zoo import build_command

    return build_command(args)


def _run_tune(args: argparse.Namespace) -> int:
    """``edgetune tune``: the options from the flags, then the same run as ``edgetune.tune()`` (api.run_and_report)."""
    from .api import run_and_report, tune_options
    from .profile.schema import PROFILE_FLAGS
    from .display import RichProgress, baseline_lines

    options = tune_options(
        args.model, args.profile, board=args.board, inventory=args.inventory, tracker=args.tracker, key=args.key,
        trials=args.trials, db=args.db, out=args.out, evaluate=not args.no_evaluate, warm_start=args.warm_start,
        suggested=args.suggested, scheduler=args.scheduler, **{flag: getattr(args, flag) for flag in PROFILE_FLAGS},
    )
    display = RichProgress(quiet=args.quiet)
    summary = run_and_report(options, display, finished=lambda s: display.print_summary(s, options.out_dir), say=print)
    for line in baseline_lines(summary):  # the last word: is the user better off than with what they run today?
        print(line)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from .common.interrupts import dump_stacks_on_sigusr1, exit_cleanly_on_sigterm, sigint_blocked

    with sigint_blocked():  # threads the parser's imports start (OpenBLAS's, from numpy) never take a Ctrl-C
        parser = _build_parser()
        args = parser.parse_args(argv)

    exit_cleanly_on_sigterm()
    dump_stacks_on_sigusr1()
    try:
        with _ctrl_c_for(args):
            return int(args.func(args) or 0)
    except TuningInterrupted as error:
        print(f"edgetune: {error}", file=sys.stderr)
        return error.exit_code
    except EdgetuneError as error:
        if os.environ.get("EDGETUNE_DEBUG"):
            raise
        print(f"edgetune: error: {_one_line(error)}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("edgetune: interrupted", file=sys.stderr)
        return 130


def _ctrl_c_for(args: argparse.Namespace) -> Any:
    """Commands that tune take Ctrl-C on one thread from their first line (common.interrupts).

    A thread that has SIGINT unblocked (importing numpy starts OpenBLAS's) may be
    handed Ctrl-C by the kernel, and Z3's handler, in place during a proof,
    swallows it there: so SIGINT is blocked from before the parser's imports, and
    the forwarding begins before the command imports anything.
    """
    from contextlib import nullcontext

    from .common.interrupts import forward_sigint_to_main_thread

    return forward_sigint_to_main_thread() if args.func in (_run_tune, _schedules_build) else nullcontext()


def _one_line(error: Any) -> str:
    text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    return text or type(error).__name__


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
