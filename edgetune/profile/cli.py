"""The ``edgetune profiles`` subcommand: list, show and validate device profiles."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from edgetune.errors import EdgetuneError
from edgetune.profile.loader import PATH_ENV, list_profiles, load_profile, profile_search_path, validate_profile_file
from edgetune.profile.schema import DeviceProfile

_EPILOG = f"""\
examples:
  edgetune profiles list
  edgetune profiles show rk3399
  edgetune profiles show ./my-board.toml
  edgetune profiles validate device_profiles/*.toml

Profiles are looked up by name in the directories of ${PATH_ENV}
({os.pathsep}-separated) first, then in edgetune's bundled device_profiles/.
"""


def add_profiles_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``profiles`` on the main CLI's subparsers; dispatch with ``args.func(args)``."""
    parser = subparsers.add_parser(
        "profiles",
        help="list, show and validate device profiles",
        description="List, show and validate device profiles (one TOML file per board).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="profiles_command", metavar="COMMAND", required=True)
    commands.add_parser(
        "list",
        help="table of every profile on the search path",
        description="Show every profile on the search path (the first one of a name wins).",
    )
    show = commands.add_parser(
        "show",
        help="print one profile with all defaults filled in",
        description="Print one profile with every default filled in.",
        epilog="examples:\n  edgetune profiles show rpi4\n  edgetune profiles show ./my-board.toml",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    show.add_argument("name", metavar="NAME", help="profile name, or path to a .toml file")
    validate = commands.add_parser(
        "validate",
        help="check profile files (schema and TVM target); exit 2 if any is invalid",
        description=(
            "Check that each FILE is a valid profile and that the installed TVM accepts its\n"
            "target. Prints 'ok: FILE (NAME)' or the error for each file; exits 2 if any failed."
        ),
        epilog=(
            "examples:\n"
            "  edgetune profiles validate my-board.toml\n"
            "  edgetune profiles validate device_profiles/*.toml"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    validate.add_argument("files", metavar="FILE", nargs="+", help="profile TOML file")
    parser.set_defaults(func=run_profiles)
    return parser


def run_profiles(args: argparse.Namespace) -> int:
    """Run ``profiles list|show|validate``; returns the process exit code."""
    if args.profiles_command == "validate":
        return _validate(args.files)
    try:
        if args.profiles_command == "list":
            _print_table(list_profiles())
        else:
            print(load_profile(args.name).describe())
    except EdgetuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


def _validate(files: list[str]) -> int:
    status = 0
    for path in files:
        try:
            profile = validate_profile_file(path)
        except EdgetuneError as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = 2
        else:
            print(f"ok: {path} ({profile.name})")
    return status


def _cpu_or_arch(profile: DeviceProfile) -> str:
    """What distinguishes the chip: LLVM mcpu, CUDA arch, OpenCL device, else the board's arch."""
    for key in ("mcpu", "arch", "device"):
        if isinstance(profile.target.get(key), str):
            return profile.target[key]
    return profile.device.arch


def _print_table(profiles: list[DeviceProfile]) -> None:
    table = Table(caption="search path: " + os.pathsep.join(str(d) for d in profile_search_path()))
    for column in ("name", "target kind", "mcpu/arch", "rpc key", "description"):
        table.add_column(column, overflow="fold")
    for profile in profiles:
        table.add_row(profile.name, profile.target["kind"], _cpu_or_arch(profile), profile.rpc.key, profile.description)
    Console().print(table)
