"""CPU seconds per measured trial: the tuning process against its build workers, and builds per trial (issue 55).

``host_time.py`` says where the tuning thread's wall clock goes; on a 2-core host
the question under it is how much CPU a measured trial costs in all, since the
search, the builds and the embedded board share the cores. Each row here is one
``host_time.run_row`` (one ``run_tune`` of a model at N trials per task from an
empty history, the product's defaults unless a flag of ``host_time.py`` swaps a
component), with:

* ``tuning_cpu_s_per_trial``: the tuning process's own user + system CPU
  (the search, features, cost model, the runner's threads, the embedded board);
* ``worker_cpu_s_per_trial``: the build workers' CPU during the row: the change in
  the CPU of the process's live descendants (read from ``/proc``; the build pools
  outlive a tune) plus that of the descendants reaped during it;
* ``builds_per_trial``: builds submitted (``BuiltModules.add``) per measured trial;
* ``cpu_bound_floor_s``: the CPU per trial over the host's cores, the fastest the
  row could go if nothing ever waited.

Usage: ``python benchmarks/host_cpu.py --models demo:transformer demo:mobilenetv2@128 --per-task 32 --rows R``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import host_time  # noqa: E402  (the benchmark beside this one: its row is this one's row)

TICKS = os.sysconf("SC_CLK_TCK")


def _descendants_cpu(root: int) -> float:
    """User + system CPU seconds of ``root``'s live descendants, from ``/proc``."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        parents[int(entry)] = int(fields[1])
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime
    total, frontier = 0.0, [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent:
                total += cpu[pid]
                frontier.append(pid)
    return total


def _cpu() -> tuple[float, float]:
    """(this process's CPU, its descendants' CPU: live ones plus those reaped)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, reaped.ru_utime + reaped.ru_stime + _descendants_cpu(os.getpid())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["demo:transformer", "demo:mobilenetv2@128"])
    parser.add_argument("--per-task", type=int, default=32)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--profile", default="host")
    parser.add_argument("--schedules", default="off", help="tuning.schedules (off: the search does all the work)")
    parser.add_argument("--out", type=Path, default=Path("edgetune-out/host_cpu"))
    parser.add_argument("--rows", type=Path, default=None)
    args = parser.parse_args()
    row_args = argparse.Namespace(profile=args.profile, schedules=args.schedules, board="embedded", board_sleep=0.0,
                                  out=args.out)
    from edgetune.builder import builds

    submitted = [0]
    add = builds.BuiltModules.add

    def counting_add(self: Any, key: str, build: Any) -> None:
        submitted[0] += 1
        add(self, key, build)

    builds.BuiltModules.add = counting_add  # type: ignore[method-assign]
    rows_path = args.rows or args.out / "rows.json"
    rows: list[dict[str, Any]] = json.loads(rows_path.read_text()) if rows_path.exists() else []
    done = {(r["model"], r["per_task"], r["seed"]) for r in rows}
    # a first tune in a process pays its imports and thread pools: a throwaway one, so that no row does
    host_time.run_row(args.models[0], 1, 0, "on", argparse.Namespace(**{**vars(row_args), "out": args.out / "warm-up"}))
    cores = len(os.sched_getaffinity(0))
    for seed in args.seeds:
        for model in args.models:
            if (model, args.per_task, seed) in done:
                continue
            time.sleep(2.0)
            submitted[0] = 0
            own0, workers0 = _cpu()
            row = host_time.run_row(model, args.per_task, seed, "on", row_args)
            own1, workers1 = _cpu()
            measured = row["measured"] or 1
            tuning_cpu, worker_cpu = (own1 - own0) / measured, (workers1 - workers0) / measured
            out = {
                "model": model, "per_task": args.per_task, "seed": seed, "measured": row["measured"],
                "builds_per_trial": submitted[0] / measured, "tuning_cpu_s_per_trial": tuning_cpu,
                "worker_cpu_s_per_trial": worker_cpu, "cpu_bound_floor_s": (tuning_cpu + worker_cpu) / cores,
                "host_s_per_trial": row["host_s_per_trial"], "cores": cores, "kernels_ms": row["kernels_ms"],
                "load_before": row["load_before"], "load_after": row["load_after"], "host_time": row["host_time"],
            }
            rows.append(out)
            rows_path.parent.mkdir(parents=True, exist_ok=True)
            rows_path.write_text(json.dumps(rows, indent=1))
            print(json.dumps({k: v for k, v in out.items() if k != "host_time"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
