"""Board farm throughput: 1, 2 and 4 RPC servers under one key (issue 17).

Each configuration tunes the same model through ``edgetune.tuning.run_tune``
(what ``edgetune tune`` runs), on the embedded loopback board started with N
RPC servers under one key (``EmbeddedBoard(servers=N)``); nothing else
differs. The servers share this host's cores, so board-bound time is played
by the profile's ``measure.cooldown_sec`` (a pause after each candidate, as a
fanless board needs): that is the part of a real board's time that several
boards overlap.

Reported per configuration and seed: candidates measured, the runner's busy
wall clock (from a batch's start to its last result, summed), measured
candidates per minute of that, the tuning wall clock, and how the candidates
were spread over the boards. Ratios are against 1 server, per seed, then the
median over seeds.

Usage::

  python benchmarks/board_farm.py                         # 1 2 4 servers, seeds 0 1 2
  python benchmarks/board_farm.py --servers 1 4 --seeds 0 --trials 32
  python benchmarks/board_farm.py --write-results
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _results import write_section

MARK = "board_farm"


def run_one(servers: int, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    from edgetune.board.base import EmbeddedBoard
    from edgetune.profile import load_profile
    from edgetune.tuning import TuneOptions, run_tune

    profile = load_profile(args.profile)
    profile = dataclasses.replace(
        profile,
        measure=dataclasses.replace(profile.measure, cooldown_sec=args.cooldown),
        tuning=dataclasses.replace(profile.tuning, seed=seed),
    )
    out = Path(tempfile.mkdtemp(prefix=f"farm-{servers}-{seed}-"))
    board = EmbeddedBoard(key="farm", num_threads=1, log_dir=out / "board", servers=servers)
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    summary = run_tune(
        TuneOptions(profile=profile, model=args.model, out_dir=out, trials=args.trials, evaluate=False,
                    warm_start="off", board=board)
    )
    measurement = summary.measurement
    busy = float(measurement.get("batch_wall_seconds") or 0.0)
    measured = summary.trials.measured_on_device
    return {
        "servers": servers, "seed": seed, "measured": measured, "busy_s": busy,
        "per_min": measured / busy * 60 if busy else None, "wall_s": time.monotonic() - started,
        "tuning_wall_s": summary.seconds.tuning_wall, "by_board": measurement.get("by_board", {}),
        "sessions_lost": measurement.get("sessions_lost", 0),
        "load_before": load_before, "load_after": os.getloadavg()[0],
    }


def _median_spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def report_text(rows: list[dict[str, Any]], args: argparse.Namespace, seconds: float) -> str:
    base = {r["seed"]: r for r in rows if r["servers"] == min(args.servers)}
    lines = [
        "## Board farm throughput: RPC servers under one key (issue 17)",
        "",
        f"Reproduce: `python benchmarks/board_farm.py --servers {' '.join(map(str, args.servers))} "
        f"--seeds {' '.join(map(str, args.seeds))} --model {args.model} --trials {args.trials} "
        f"--cooldown {args.cooldown:g} --write-results{'' if args.mark == MARK else ' --mark ' + args.mark}` "
        f"({platform.machine()}, {seconds / 60:.0f} min in one run).",
        "",
        f"Each row tunes `{args.model}` through `run_tune` with profile `{args.profile}`, "
        f"`measure.cooldown_sec = {args.cooldown:g}` (board-bound time), {args.trials} trials; "
        "only the number of loopback RPC servers under the key differs. Busy = the runner's wall clock "
        "from each batch's start to its last result. Values: median [min-max] over seeds; ratios per seed "
        f"against {min(args.servers)} server(s), then the median.",
        "",
        "| servers | measured | busy s | candidates / busy min | x vs 1 | tuning wall s | x vs 1 | spread over boards (seed 0) | load before -> after |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for servers in args.servers:
        mine = [r for r in rows if r["servers"] == servers]
        rate_ratio = [r["per_min"] / base[r["seed"]]["per_min"] for r in mine if r["per_min"] and base[r["seed"]]["per_min"]]
        wall_ratio = [base[r["seed"]]["tuning_wall_s"] / r["tuning_wall_s"] for r in mine]
        first = mine[0]["by_board"] if mine else {}
        loads = ", ".join(f"{r['load_before']:.1f} -> {r['load_after']:.1f}" for r in mine if "load_before" in r)
        lines.append(
            f"| {servers} | {_median_spread([r['measured'] for r in mine])} | {_median_spread([r['busy_s'] for r in mine])} "
            f"| {_median_spread([r['per_min'] for r in mine if r['per_min']])} | {_median_spread(rate_ratio)} "
            f"| {_median_spread([r['tuning_wall_s'] for r in mine])} | {_median_spread(wall_ratio)} "
            f"| {', '.join(str(v) for v in sorted(first.values(), reverse=True))} "
            f"| {loads} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--model", default="demo:tiny-cnn")
    parser.add_argument("--trials", type=int, default=48)
    parser.add_argument("--cooldown", type=float, default=1.0, help="measure.cooldown_sec: board-bound seconds per candidate")
    parser.add_argument("--profile", default="host")
    parser.add_argument("--write-results", action="store_true")
    parser.add_argument("--mark", default=MARK, help="the results section --write-results replaces (or adds)")
    args = parser.parse_args()
    started = time.monotonic()
    rows = []
    for seed in args.seeds:  # configurations interleaved per seed: machine noise hits all
        for servers in args.servers:
            row = run_one(servers, seed, args)
            print(row, file=sys.stderr, flush=True)
            rows.append(row)
    text = report_text(rows, args, time.monotonic() - started)
    print(text)
    if args.write_results:
        write_section(text, args.mark)
    return 0


if __name__ == "__main__":
    sys.exit(main())
