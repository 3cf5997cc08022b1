"""``edgetune schedules build|export|import|info``: make, move and describe schedule libraries."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable

EPILOG = """examples:
  edgetune schedules build --profile host --budget 32 --db zoo.db --out host.schedules.xz   # hours; resumable
  edgetune schedules build --profile host --budget 8 --db try.db --out try.schedules.xz --zoo demo:resnet18@128
  edgetune schedules export --db history.db --profile host team.schedules.xz
  edgetune schedules import team.schedules.xz --db postgresql://tuner@db-host/edgetune
  edgetune schedules info team.schedules.xz
  edgetune schedules build --budget 32 --db gap.db --out gap.schedules.xz --zoo net.onnx --missing-from auto
  edgetune schedules build --budget 32 --db mine.db --out mine.schedules.xz --zoo net.onnx --missing-from auto --for-this-cpu --heaviest 6
  edgetune schedules build --budget 128 --db deep.db --out deep.schedules.xz --zoo net.onnx --heaviest 4 --start-from auto
  edgetune schedules build --budget 32 --db dw.db --out dw.schedules.xz --operator depthwise_conv2d_NCHWc
  edgetune schedules merge shipped.schedules.xz more.schedules.xz --out all.schedules.xz
  edgetune tune --profile host --model net.onnx --schedules team.schedules.xz

A library holds each workload's best few traces (not compiled code), the CPU
family they were tuned for (x86-64-avx2, x86-64-avx512, aarch64-neon, ...),
the target and board that measured them and the TVM that made them. `tune`
uses the library shipped for the target's family by default (--schedules
auto); a library of another family or TVM is said in one line and not used.
"""


def add_schedules_parser(sub: Any, build: Callable[[argparse.Namespace], int]) -> None:
    """Add ``schedules build|export|import|info``; ``build`` runs the build (it tunes, so it lives in
    :mod:`edgetune.tuning.zoo`, above this package, and the caller hands it in)."""
    parser = sub.add_parser(
        "schedules", help="build, export, import and describe schedule libraries (tuned schedules to start from)",
        description="Schedule libraries: the best tuned schedules per workload for a CPU family, so that a tune "
        "starts where others finished.", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="schedules_command", metavar="ACTION")
    actions.required = True
    build_parser = actions.add_parser(
        "build", help="tune a zoo of models into a history and export the library (resumable)",
        description="Tune every model of the zoo through the same pipeline as `edgetune tune` (no end-to-end "
        "evaluation), each task capped at --budget trials, into the history --db, then write the library. "
        "Run the same command again to resume an interrupted build. Stopped part-way (Ctrl-C or --hours), it still "
        "writes --out from what it measured, naming the model it stopped in with how far it got.",
    )
    build_parser.add_argument("--profile", "-p", default="host", help="device profile (default: host)")
    build_parser.add_argument("--db", required=True, metavar="URL", help="the history that is the build's working store")
    build_parser.add_argument("--budget", type=int, required=True, help="measured trials per unique workload")
    build_parser.add_argument("--out", metavar="FILE", help="library file to write at the end, xz where it ends in .xz, else gzip (default: none, tune only)")
    build_parser.add_argument("--zoo", nargs="+", metavar="SPEC", help="models to tune (default: edgetune's zoo, see `schedules info`)")
    build_parser.add_argument("--work", metavar="DIR", default="edgetune-out/schedules-build", help="run directories")
    build_parser.add_argument("--tracker", metavar="HOST:PORT", help="RPC tracker of the board(s) (default: the loopback board)")
    build_parser.add_argument("--key", help="device key at the tracker")
    build_parser.add_argument(
        "--hours", type=float, metavar="H",
        help="stop after H hours of tuning (the batch in flight finishes), write --out and exit 0; run the same "
        "command again to go on (default: no limit)",
    )
    build_parser.add_argument(
        "--missing-from", metavar="FILE|auto",
        help="tune only the tasks whose exact workload this library lacks (auto: the one shipped for the profile's "
        "CPU family): a model's new layers without tuning again what the library holds, each starting from the "
        "library's schedules of its neighbours, adapted; merge the result into it",
    )
    build_parser.add_argument(
        "--for-this-cpu", action="store_true",
        help="with --missing-from: a workload the library holds only as other CPU models' schedules counts as lacking "
        "too (the target's mcpu): a new CPU model of the family builds its own (the best tiles differ between CPU "
        "models), each task starting from the others' schedules of its workload",
    )
    build_parser.add_argument(
        "--heaviest", type=int, metavar="N",
        help="tune only each model's N tasks with the most floating-point work (FLOPs times the times the model runs "
        "them; of those --missing-from lacks when given): a deeper --budget where a model's time is",
    )
    build_parser.add_argument(
        "--start-from", metavar="FILE|auto",
        help="start every task from this library's schedules (its own workload's, else its neighbours', adapted) "
        "instead of from scratch, so the build deepens what the library gives; then `schedules merge` it in",
    )
    build_parser.add_argument(
        "--operator", metavar="BLOCK",
        help="tune only the tasks that compute this operator (a block name, as `info` lists them: "
        "depthwise_conv2d_NCHWc, conv2d_NCHWc, ...): its entries built again after its search space changed; a model "
        "without one is skipped",
    )
    build_parser.set_defaults(func=build)
    export = actions.add_parser("export", help="write a library from a history's best records for a profile's target")
    export.add_argument("file", metavar="FILE", help="library file to write: xz where its name ends in .xz (.schedules.xz), gzip otherwise")
    export.add_argument("--db", required=True, metavar="URL", help="the history to export (e.g. a build's --db)")
    export.add_argument("--profile", "-p", default="host", help="whose target's records are exported (default: host)")
    export.add_argument("--top-k", type=int, default=3, help="schedules kept per workload (default 3)")
    export.add_argument("--budget", type=int, help="the budget per workload the history was tuned at (recorded in the file)")
    export.add_argument("--min-records", type=int, default=1, metavar="N",
                        help="leave out workloads with fewer than N records: a build stopped part-way measured the next "
                        "model's first batch only (default 1: every workload)")
    export.add_argument("--zoo", nargs="+", metavar="SPEC",
                        help="the models the history was tuned from (recorded in the file, listed by info; a model file is named with "
                             "the exporter that wrote it; put FILE before it)")
    export.set_defaults(func=_export)
    imp = actions.add_parser("import", help="add a library's schedules to a history (e.g. a team's PostgreSQL history)")
    imp.add_argument("file", metavar="FILE", help="library file to import")
    imp.add_argument("--db", required=True, metavar="URL", help="the history to add it to")
    imp.set_defaults(func=_import)
    merge = actions.add_parser(
        "merge", help="join libraries of one family (a zoo built in steps, or on several hosts) into one file",
        description="Join libraries of the same family, timing, target and TVM: each workload keeps its --top-k "
        "fastest schedules per CPU model that measured them (a tune tries its own CPU model's first); the file keeps "
        "each build's budget, zoo and layout, which `info` lists.",
    )
    merge.add_argument("files", metavar="FILE", nargs="+", help="libraries to join (at least two)")
    merge.add_argument("--out", required=True, metavar="FILE", help="library file to write, xz where it ends in .xz, else gzip (may be one of the inputs)")
    merge.add_argument("--top-k", type=int,
                       help="schedules kept per workload and CPU model (default: the inputs' largest)")
    merge.set_defaults(func=_merge)
    info = actions.add_parser("info", help="describe a library (or the shipped ones, and the zoo)")
    info.add_argument("file", metavar="FILE", nargs="?", help="library file (default: every library shipped with edgetune)")
    info.set_defaults(func=_info)


def _export(args: argparse.Namespace) -> int:
    from ..history import open_history
    from ..measure.runner import timing_of
    from ..profile import load_profile
    from ..tasks.graph import layout_name
    from .export import export_library

    profile = load_profile(args.profile)
    history = open_history(args.db, read_only=True, timing=timing_of(profile))
    try:
        target = profile.tvm_target()
        library = export_library(history, args.file, target, top_k=args.top_k, budget_per_workload=args.budget,
                                 zoo=[_zoo_entry(spec) for spec in args.zoo or ()], conv_layout=layout_name(profile.tuning.conv_layout, target),
                                 min_records=args.min_records)
    finally:
        history.close()
    size = Path(args.file).stat().st_size
    print(f"wrote {args.file}: {len(library.workloads)} workloads, {sum(len(w.schedules) for w in library.workloads)} "
          f"schedules, {size / 1024:.0f} KiB, family {library.family}")
    return 0


def _zoo_entry(spec: str) -> str:
    """A ``--zoo`` model as the library names it: a model file by its name and the exporter that wrote it."""
    from ..tasks.provenance import file_writer, zoo_entry

    path = Path(spec)
    return zoo_entry(spec, file_writer(path)) if not spec.startswith("demo:") and path.is_file() else spec


def _import(args: argparse.Namespace) -> int:
    from ..history import open_history
    from .library import import_library, load_library

    library = load_library(args.file)
    history = open_history(args.db, timing=library.timing)
    try:
        added, skipped = import_library(history, library)
    finally:
        history.close()
    print(f"imported {args.file} into {args.db}: {added} schedules added, {skipped} already there "
          f"({len(library.workloads)} workloads, family {library.family})")
    return 0


def _merge(args: argparse.Namespace) -> int:
    from .library import load_library, merge_libraries

    library = merge_libraries([load_library(path) for path in args.files], args.out, top_k=args.top_k)
    size = Path(args.out).stat().st_size
    print(f"wrote {args.out}: {len(library.workloads)} workloads, {sum(len(w.schedules) for w in library.workloads)} "
          f"schedules from {len(args.files)} libraries, {size / 1024:.0f} KiB, family {library.family}")
    return 0


def _info(args: argparse.Namespace) -> int:
    from ..tasks.demo import ZOO
    from .library import load_library
    from .use import shipped_libraries

    paths = [Path(args.file)] if args.file else shipped_libraries()
    if not paths:
        print("no schedule library is shipped with this edgetune")
    for path in paths:
        for line in load_library(path).describe():
            print(line)
    if not args.file:
        print("edgetune's zoo (`schedules build` default; in-code lookalikes, no exporter): " + ", ".join(ZOO))
        print("real exports (--zoo FILE ...: a torch.onnx.export, torch.export or TFLite converter file) are named in a "
              "library's zoo by the exporter that wrote them")
    return 0
