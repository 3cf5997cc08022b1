"""``edgetune provision`` and ``edgetune boards status|teardown``."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..common.choices import baseline_runtimes
from ..errors import BoardError, EdgetuneError

PROVISION_EPILOG = """\
examples:
  edgetune provision rk3399 --inventory boards.toml
      connect, check the board against its profile, install TVM, start the server, verify
  EDGETUNE_INVENTORY=boards.toml edgetune provision --all
      every board of the inventory, in parallel
  edgetune provision rpi4 --accept-new-host-key
      first contact: record the board's host key (its fingerprint is printed)
  edgetune provision rpi4 --baseline onnxruntime,litert
      also install ONNX Runtime and LiteRT there, so that `tune --board rpi4
      --baseline ...` and `deploy --baseline ...` time them on the board

Idempotent: run it again to repair a board (a dead server is restarted, a
stale runtime replaced). Then: edgetune tune --board rk3399 --model net.onnx
"""

BOARDS_EPILOG = """\
examples:
  edgetune boards status                 reachable? server alive? registered? TVM version? hot?
  edgetune boards status --db out/history.db --json
                                         + the tracker's keys and which board measured what, as JSON
  edgetune boards teardown rk3399        stop the board's RPC server and its tunnel
  edgetune boards teardown --all --tracker   stop everything, the host tracker too
"""


def add_inventory_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--inventory", "-i", metavar="FILE",
                        help="board inventory TOML (default: $EDGETUNE_INVENTORY); see rpc_setup/boards.example.toml")


def add_provision_parsers(sub: Any) -> None:
    """Register ``provision`` and ``boards`` on the top-level subparsers."""
    provision = sub.add_parser(
        "provision",
        help="bring TVM RPC up on boards over SSH (runtime, tracker, tunnel, server, check)",
        description="Connect to each board over SSH (host keys verified), check it matches its profile, "
        "install the host's exact TVM version in a venv on the board, start or reuse the host tracker, "
        "open the SSH tunnel (tunnel mode), start the board's RPC server and verify a round trip.",
        epilog=PROVISION_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    provision.add_argument("boards", nargs="*", metavar="BOARD", help="board names from the inventory")
    provision.add_argument("--all", action="store_true", help="every board of the inventory, in parallel")
    add_inventory_argument(provision)
    provision.add_argument("--accept-new-host-key", action="store_true",
                           help="add an unknown board's host key to known_hosts (its fingerprint is printed); "
                           "a changed key is still refused")
    provision.add_argument("--no-verify", action="store_true", help="skip the kernel round trip at the end")
    provision.add_argument("--baseline", type=baseline_runtimes, default=(), metavar="RUNTIMES",
                           help="also install these runtimes in the board's venv (onnxruntime, litert, comma-separated), "
                           "from wheels for the board's architecture, so that tune and deploy --baseline time them there")
    provision.set_defaults(func=run_provision)

    boards = sub.add_parser("boards", help="status and teardown of provisioned boards",
                            epilog=BOARDS_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    boards_sub = boards.add_subparsers(dest="boards_command", metavar="ACTION")
    boards_sub.required = True
    status = boards_sub.add_parser(
        "status", help="the tracker's keys, which board measured what (--db), and each inventory board's health: "
        "reachable, server, registered, SoC temperature, CPU governor and clock (exit 3 if not all healthy)")
    status.add_argument("boards", nargs="*", metavar="BOARD", help="default: every board of the inventory")
    add_inventory_argument(status)
    status.add_argument("--tracker", metavar="HOST:PORT",
                        help="tracker to ask (default: $TVM_TRACKER_HOST:$TVM_TRACKER_PORT when set, else the "
                        "inventory's host tracker)")
    status.add_argument("--key", help="show only this device key (default: $TVM_TRACKER_KEY with a tracker, else all)")
    status.add_argument("--db", metavar="URL", help="history database: records per board (board_id KEY@host:port) "
                        "and per workload")
    status.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    status.set_defaults(func=run_status)
    teardown = boards_sub.add_parser("teardown", help="stop a board's RPC server and tunnel")
    teardown.add_argument("boards", nargs="*", metavar="BOARD")
    teardown.add_argument("--all", action="store_true", help="every board of the inventory")
    teardown.add_argument("--tracker", action="store_true", help="also stop the host tracker")
    add_inventory_argument(teardown)
    teardown.set_defaults(func=run_teardown)
    add_runtime_parser(sub)


RUNTIME_EPILOG = """\
examples:
  edgetune runtime build --arch armv7l --out rt-armv7l
      cross-compile, on this host, what a 32-bit Raspberry Pi OS board needs and the
      registries' sources allow; say precisely what they lack

Needs the board's Debian cross toolchain (apt-get install g++-arm-linux-gnueabihf)
and cmake >= 3.26 with ninja (pip install "edgetune[runtime-build]"). Sources
are downloaded once into ~/.cache/edgetune/runtime-build. Exit 0 when the whole
runtime was built, 3 when a part could not be (the message names the missing files).
"""


def add_runtime_parser(sub: Any) -> None:
    """``edgetune runtime build``: a board runtime for boards without a TVM wheel."""
    runtime = sub.add_parser("runtime", help="build a TVM runtime for boards without a wheel (32-bit armv7)")
    runtime_sub = runtime.add_subparsers(dest="runtime_command", metavar="ACTION")
    runtime_sub.required = True
    build = runtime_sub.add_parser(
        "build", help="cross-compile a board runtime on this host from registry sources",
        description="Cross-compile a board runtime from the sources the package registries ship: libtvm_ffi "
        "from the apache-tvm-ffi sdist of the installed version, and libtvm_runtime when the installed apache-tvm "
        "wheel's runtime sources are complete (they are not in 0.27: the missing files are listed).",
        epilog=RUNTIME_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    build.add_argument("--arch", required=True, help="the board's uname -m: armv7l (or aarch64)")
    build.add_argument("--out", required=True, metavar="DIR", help="where lib/, include/ and runtime-build.json go")
    build.add_argument("--cache", metavar="DIR", help="download and build cache (default ~/.cache/edgetune/runtime-build)")
    build.set_defaults(func=run_runtime_build)


def run_runtime_build(args: argparse.Namespace) -> int:
    from ..errors import RuntimeBuildError
    from .source_build import SOURCE_DOC, build_runtime

    result = build_runtime(args.arch, args.out, cache=args.cache, log=_log)
    print(f"built {result.ffi_library} (tvm-ffi {result.ffi_version} for {result.arch})")
    if result.complete:
        return 0
    raise RuntimeBuildError(
        f"libtvm_runtime (RPC server, Relax VM) cannot be built from registry sources: the apache-tvm "
        f"{result.tvm_version} wheel ships its runtime sources without {len(result.missing_sources)} files they "
        f"need ({', '.join(result.missing_sources)}); build it from a TVM source tree"
        + (f" at the wheel's commit {result.tvm_commit}" if result.tvm_commit else "") + f", see {SOURCE_DOC}"
    )


def _log(message: str) -> None:
    print(message, flush=True)


def _table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())


def run_provision(args: argparse.Namespace) -> int:
    from .inventory import load_inventory
    from .workflow import ProvisionOptions, provision_many

    inventory = load_inventory(args.inventory)
    entries = inventory.select(args.boards, args.all)
    options = ProvisionOptions(accept_new_host_key=args.accept_new_host_key, verify=not args.no_verify,
                               baselines=args.baseline)
    group = provision_many(entries, inventory, options, _log)
    print()
    _table(
        [[r.name, r.profile or "-", r.key or "-", r.mode, r.facts.arch if r.facts else "-", r.tvm_version or "-",
          r.tracker or "-", r.verified or ("-" if r.ok else "FAILED"), f"{r.seconds:.0f}s"] for r in group.results],
        ["BOARD", "PROFILE", "KEY", "MODE", "ARCH", "TVM", "TRACKER", "VERIFIED", "TIME"],
    )
    if not group.failed:
        return 0
    if len(group.results) == 1:
        raise group.failed[0].error  # type: ignore[misc]
    for result in group.failed:
        print(f"edgetune: error: {' '.join(str(result.error).split())}", file=sys.stderr)
    return max(r.error.exit_code for r in group.failed)  # type: ignore[union-attr]


def run_status(args: argparse.Namespace) -> int:
    """Bad input (a malformed --tracker, a missing --db) fails before any board is asked."""
    import json
    from concurrent.futures import ThreadPoolExecutor

    from ..board.rpc_tracker import TRACKER_HOST_ENV, TrackerAddress, tracker_defaults
    from . import farm
    from .inventory import ENV_VAR, inventory_path, load_inventory
    from .workflow import board_status, current_tracker

    explicit, key = tracker_defaults(args.tracker, args.key)
    address = TrackerAddress.parse(explicit, key or "") if explicit else None
    has_inventory = bool(args.inventory or os.environ.get(ENV_VAR) or args.boards)
    if not (has_inventory or address or args.db):
        inventory_path(None)  # the one-line error naming --inventory and EDGETUNE_INVENTORY
    inventory = load_inventory(args.inventory) if has_inventory else None
    history = farm.history_status(args.db, key) if args.db else None
    tracker = None
    if address is not None:
        source = "--tracker" if args.tracker else f"{TRACKER_HOST_ENV}/PORT"
        tracker = farm.tracker_status(address, source, key, strict=True)
    statuses = None
    if inventory is not None:
        entries = inventory.select(args.boards, all_boards=not args.boards)
        running = current_tracker()
        if tracker is None:
            host = running or inventory.tracker
            where = TrackerAddress("127.0.0.1" if host.host in ("0.0.0.0", "") else host.host, host.port, "")
            source = f"host tracker, pid {running.pid}" if running else "inventory"
            tracker = farm.tracker_status(where, source, key, strict=False)
        with ThreadPoolExecutor(max_workers=min(8, len(entries))) as pool:
            statuses = list(pool.map(lambda e: board_status(e, inventory, running), entries))
    if args.json:
        print(json.dumps(farm.to_json(tracker, history, statuses), indent=1))
    else:
        print("\n".join(farm.render(tracker, history, statuses)))
    unhealthy = [s.name for s in statuses or [] if not s.healthy]
    if unhealthy:
        raise BoardError(f"not ready: {', '.join(unhealthy)}; repair with: edgetune provision {' '.join(unhealthy)}")
    return 0


def run_teardown(args: argparse.Namespace) -> int:
    from .inventory import load_inventory
    from .host_tracker import stop_tracker
    from .workflow import teardown_board

    inventory = load_inventory(args.inventory)
    if args.boards or args.all or not args.tracker:
        for entry in inventory.select(args.boards, args.all):
            teardown_board(entry, _log)
    if args.tracker:
        print("host tracker: " + ("stopped" if stop_tracker() else "was not running"))
    return 0


__all__ = ["add_provision_parsers", "EdgetuneError"]
