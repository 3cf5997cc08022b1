"""A tune's start-up on the embedded board: the board's start, and how long `edgetune tune` takes to its first trial.

Two measurements, each in rounds with a pause before each, nothing else running:

* ``board``: ``LocalBoard().start()`` as ``edgetune tune`` makes it (in a process that has imported TVM, as the
  CLI has by then), the tracker module swapped alone: ``edgetune.board.tracker_server`` (the product: TVM's
  tracker served in the process started) against ``tvm.exec.rpc_tracker`` (TVM's command, which serves it from a
  popen worker). Wall clock to a registered server, and the CPU of the board's processes.
* ``cli``: ``edgetune tune --profile host --model demo:tiny-cnn --trials 10 --no-evaluate`` as a user runs it:
  seconds to its "tuning" phase (the build workers are warm, the first measurement follows) and to its exit.

Usage: ``python benchmarks/startup.py --rounds 3 --rows benchmarks/startup_rows.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TRACKERS = {"served": "edgetune.board.tracker_server", "tvm-exec": "tvm.exec.rpc_tracker"}


def _group_cpu(pgids: list[int]) -> float:
    """User + system CPU seconds of the processes in these process groups (children waited for included)."""
    import psutil

    total = 0.0
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) in pgids:
                times = proc.cpu_times()
                total += times.user + times.system + times.children_user + times.children_system
        except (psutil.Error, ProcessLookupError):
            continue
    return total


def board_row(tracker: str) -> dict[str, Any]:
    """One start of the loopback board whose tracker runs ``TRACKERS[tracker]``."""
    import tvm.rpc  # noqa: F401  (imported before the clock starts, as in `edgetune tune`)

    from edgetune.board.local import LocalBoard

    class Board(LocalBoard):
        def _spawn(self, args, log_name, env=None):  # the tracker module swapped, nothing else
            if args and args[0] == TRACKERS["served"]:
                args = [TRACKERS[tracker], *args[1:]]
            return super()._spawn(args, log_name, env)

    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    board = Board(key="startup-bench")
    board.start()
    wall = time.perf_counter() - started
    cpu = _group_cpu(board.pids)
    board.stop()
    return {"kind": "board", "tracker": tracker, "wall_s": round(wall, 2), "board_cpu_s": round(cpu, 2),
            "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)}


def cli_row() -> dict[str, Any]:
    """One `edgetune tune` of the demo CNN at 10 trials, timed from the outside."""
    with tempfile.TemporaryDirectory(prefix="edgetune-startup-") as out:
        command = [sys.executable, "-m", "edgetune.cli", "tune", "--profile", "host", "--model", "demo:tiny-cnn",
                   "--trials", "10", "--no-evaluate", "--out", out]
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        to_tuning = None
        assert proc.stdout is not None
        for line in proc.stdout:
            if to_tuning is None and "edgetune: tuning" in line:
                to_tuning = time.perf_counter() - started
        proc.wait()
        total = time.perf_counter() - started
        if proc.returncode != 0:
            raise SystemExit(f"edgetune tune exited with {proc.returncode}")
        summary = json.loads((Path(out) / "summary.json").read_text())
    return {"kind": "cli", "to_tuning_s": round(to_tuning or float("nan"), 2), "total_s": round(total, 2),
            "tuning_wall_s": round(summary["seconds"]["tuning_wall"], 2),
            "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pause", type=float, default=5.0, help="seconds before each row")
    parser.add_argument("--only", choices=("board", "cli"), default=None)
    parser.add_argument("--rows", type=Path, default=None)
    parser.add_argument("--board-row", choices=sorted(TRACKERS), help=argparse.SUPPRESS)  # one row, in a new process
    args = parser.parse_args()
    if args.board_row:
        print(json.dumps(board_row(args.board_row)))
        return 0
    rows: list[dict[str, Any]] = []
    for round_ in range(args.rounds):
        order = ["tvm-exec", "served"] if round_ % 2 == 0 else ["served", "tvm-exec"]
        if args.only in (None, "board"):
            for tracker in order:  # each start in a fresh process: nothing of the last one is warm
                time.sleep(args.pause)
                done = subprocess.run([sys.executable, __file__, "--board-row", tracker], capture_output=True,
                                      text=True, check=True)
                rows.append({**json.loads(done.stdout.strip().splitlines()[-1]), "round": round_})
                print(json.dumps(rows[-1]), flush=True)
        if args.only in (None, "cli"):
            time.sleep(args.pause)
            rows.append({**cli_row(), "round": round_})
            print(json.dumps(rows[-1]), flush=True)
    if args.rows:
        args.rows.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
