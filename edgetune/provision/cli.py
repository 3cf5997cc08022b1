"""``edgetune provision`` and ``edgetune boards status|teardown``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import BoardError, EdgetuneError

PROVISION_EPILOG = """\
examples:
  edgetune provision rk3399 --inventory boards.toml
      connect, check the board against its profile, install TVM, start the server, verify
  EDGETUNE_INVENTORY=boards.toml edgetune provision --all
      every board of the inventory, in parallel
  edgetune provision rpi4 --accept-new-host-key
      first contact: record the board's host key (its fingerprint is printed)

Idempotent: run it again to repair a board (a dead server is restarted, a
stale runtime replaced). Then: edgetune tune --board rk3399 --model net.onnx
"""

BOARDS_EPILOG = """\
examples:
  edgetune boards status                 reachable? server alive? registered? TVM version?
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
    provision.set_defaults(func=run_provision)

    boards = sub.add_parser("boards", help="status and teardown of provisioned boards",
                            epilog=BOARDS_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    boards_sub = boards.add_subparsers(dest="boards_command", metavar="ACTION")
    boards_sub.required = True
    status = boards_sub.add_parser("status", help="reachable? server alive? registered? TVM version? (exit 3 if not all healthy)")
    status.add_argument("boards", nargs="*", metavar="BOARD", help="default: every board")
    add_inventory_argument(status)
    status.set_defaults(func=run_status)
    teardown = boards_sub.add_parser("teardown", help="stop a board's RPC server and tunnel")
    teardown.add_argument("boards", nargs="*", metavar="BOARD")
    teardown.add_argument("--all", action="store_true", help="every board of the inventory")
    teardown.add_argument("--tracker", action="store_true", help="also stop the host tracker")
    add_inventory_argument(teardown)
    teardown.set_defaults(func=run_teardown)


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
    options = ProvisionOptions(accept_new_host_key=args.accept_new_host_key, verify=not args.no_verify)
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
    from concurrent.futures import ThreadPoolExecutor

    from .inventory import load_inventory
    from .workflow import board_status, current_tracker

    inventory = load_inventory(args.inventory)
    entries = inventory.select(args.boards, all_boards=not args.boards)
    tracker = current_tracker()
    where = f"{tracker.host}:{tracker.port} (pid {tracker.pid})" if tracker else "not running"
    print(f"tracker: {where}")
    with ThreadPoolExecutor(max_workers=min(8, len(entries))) as pool:
        statuses = list(pool.map(lambda e: board_status(e, inventory, tracker), entries))
    _table([[s.name, s.reachable, s.tvm, s.server, s.registered, s.tunnel] for s in statuses],
           ["BOARD", "REACHABLE", "TVM", "SERVER", "REGISTERED", "TUNNEL"])
    for status in statuses:
        if status.detail:
            print(f"{status.name}: {' '.join(status.detail.split())}")
    unhealthy = [s.name for s in statuses if not s.healthy]
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


def resolve_board(name: str, inventory_file: str | None) -> tuple[str, str, str]:
    """``(profile, tracker HOST:PORT, key)`` for ``edgetune tune --board NAME``."""
    from ..profile import load_profile
    from .inventory import load_inventory

    inventory = load_inventory(inventory_file)
    entry = inventory.get(name)
    key = entry.rpc_key(load_profile(entry.profile))
    host = "127.0.0.1" if inventory.tracker.host in ("0.0.0.0", "") else inventory.tracker.host
    return entry.profile, f"{host}:{inventory.tracker.port}", key


__all__ = ["add_provision_parsers", "resolve_board", "EdgetuneError"]
