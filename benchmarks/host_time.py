"""Host seconds per measured trial, by component: the feature cache and the overlap on and off (issue 55).

Each row is one ``run_tune`` of a model at N trials per task from an empty
history (the pipeline of ``edgetune tune``); the only components swapped are
the random forest's feature cache (``--cache``; ``feature_cache_rows``: 100,000
rows, the product's default, or 0, every row computed again, as before the
cache) and the overlap (``--overlap``; on, the product's default: builds beside
the search and each task's next batch searched while the board times its last;
off: ``Components(builds_beside=False, search_ahead=False)``, the tuning thread
waits for builds and measurements as before) and the batches one round of
evolution proposes for K-means sampling (``--proposal-batches``:
``edgetune.search.strategy.MAX_PROPOSAL_BATCHES``, 4 in the product, 1 as
before: one round's sampled batch measured alone) and the return an
evolutionary iteration must buy to be run again (``--min-return``:
``tuning.search_min_return``, 0.02 in the product) and how a candidate's library is
linked (``--candidate-link``: ``build.candidate_link``, ``driver`` in the product, through
``g++``; ``direct``, the compiler's own ld) and the depth a task class's first ranked round
of evolution starts at (``--start-iterations``: ``edgetune.search.effort.START_ITERATIONS``,
4 in the product, MetaSchedule's; 2 was compared). Every row starts with
the process's builds forgotten (``BUILT.clear()``), so no row reuses an artifact an
earlier row built, as a new ``edgetune tune`` process would not. The summary's ``host_time``
section says where the wall clock went: the search (``ahead``: of it, what the
board hid), the cost model's features and its fits and predictions, builds, the
board, the rest. Side by side per seed, the order alternating, after one
throwaway tune that pays the process's first-use costs; the load average is
recorded before and after each row. Rows go to ``--rows`` as they finish; a
rerun skips those it has.

The embedded board shares the host's CPU (``--board embedded``, the default):
there "on" is the quiet lookahead, a task's next batch searched beside its
last batch's builds and each batch timed only once that search is done
(``edgetune/measure/pending.py``); nothing is built ahead. ``--board tracker`` tunes through a
loopback tracker as ``--tracker`` would (a board the pipeline does not wait
for), and ``--board-sleep S`` adds S seconds per measured candidate, a stand-in
for a board slower than this host's CPU.

Usage::

  python benchmarks/host_time.py --models demo:mobilenetv2@128 demo:transformer --per-task 32 --seeds 0 1 2
  python benchmarks/host_time.py --models demo:transformer --per-task 32 --cache on --overlap off on --board tracker --board-sleep 0.2
  python benchmarks/host_time.py --models demo:transformer demo:mobilenetv2@128 --per-task 32 --cache on --proposal-batches 1 4 --seeds 0 1 2
  python benchmarks/host_time.py --models demo:mobilenetv2@128 --per-task 32 --cache on --proposal-batches 2 4 --min-return 0.02 0.05
  python benchmarks/host_time.py --models demo:mobilenetv2@128 demo:transformer --per-task 32 --cache on --candidate-link driver direct --seeds 0 1
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from edgetune.profile.schema import TuningSettings  # the settings' schema only: no TVM import
from edgetune.search.effort import START_ITERATIONS

CACHES = {"on": 100_000, "off": 0}
OVERLAPS = ("on", "off")
BOARDS = ("embedded", "tracker")
DEFAULT_MIN_RETURN = TuningSettings().search_min_return  # the product's tuning.search_min_return
DEFAULT_START_ITERATIONS = START_ITERATIONS  # the product's first depth of a task class's evolution


def slow_board(seconds_per_candidate: float) -> Any:
    """``Components.wrap_runner`` adding ``seconds_per_candidate`` per measured candidate, batches one at a time."""
    import tvm.s_tir.meta_schedule as ms
    from tvm.ir.utils import derived_object

    from edgetune.measure.futures import PromisedFuture

    @derived_object
    class SlowBoard(ms.runner.PyRunner):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner
            self.lock = threading.Lock()

        def run(self, runner_inputs: list[Any]) -> list[Any]:
            promises = [concurrent.futures.Future() for _ in runner_inputs]
            threading.Thread(target=self.measure, args=(list(runner_inputs), promises), daemon=True).start()
            return [PromisedFuture(p) for p in promises]

        def measure(self, inputs: list[Any], promises: list[concurrent.futures.Future]) -> None:
            with self.lock:
                time.sleep(seconds_per_candidate * len(inputs))
                results = [f.result() for f in self.inner.run(inputs)] if inputs else []
            for promise, result in zip(promises, results):
                promise.set_result(result)

    return SlowBoard


def run_row(model: str, per_task: int, seed: int, cache: str, args: argparse.Namespace, overlap: str = "on",
            board: Any = None, effort: str = "returns", proposal_batches: int = 4,
            min_return: float = DEFAULT_MIN_RETURN, candidate_link: str = "driver",
            start_iterations: int = DEFAULT_START_ITERATIONS) -> dict[str, Any]:
    """One tune; ``board``: a TrackerBoard (``--board tracker``), None for the embedded board."""
    from edgetune.builder.builds import BUILT
    from edgetune.costmodel.surrogate import RandomForestModel
    from edgetune.search import effort as search_effort
    from edgetune.search import strategy
    from edgetune.profile import load_profile
    from edgetune.tuning import TuneOptions, TuningPipeline, run_tune
    from edgetune.tuning.pipeline import Components

    overrides: dict[str, Any] = {"tuning": {"seed": seed, "schedules": args.schedules, "search_effort": effort,
                                            "search_min_return": min_return},
                                 "build": {"candidate_link": candidate_link}}
    if board is not None:
        overrides["rpc"] = {"key": board.address.key}
    profile = load_profile(args.profile).with_overrides(**overrides)
    out_dir = args.out / (f"{model.replace(':', '_').replace('@', '_')}-{per_task}pt-seed{seed}-cache-{cache}"
                          f"-overlap-{overlap}-{args.board}-sleep{args.board_sleep:g}-effort-{effort}-proposals{proposal_batches}"
                          + (f"-return{min_return:g}" if min_return != DEFAULT_MIN_RETURN else "")
                          + (f"-link-{candidate_link}" if candidate_link != "driver" else "")
                          + (f"-start{start_iterations}" if start_iterations != DEFAULT_START_ITERATIONS else ""))
    probe = TuningPipeline(TuneOptions(profile=profile, model=model, out_dir=out_dir))
    n_tasks = len(probe.extract_tasks(profile.tvm_target(), probe.check_inputs()[1]))
    components = Components(
        cost_model=RandomForestModel(seed=seed, feature_cache_rows=CACHES[cache]),
        builds_beside=overlap == "on", search_ahead=overlap == "on",
        wrap_runner=slow_board(args.board_sleep) if args.board_sleep > 0 else None,
    )
    BUILT.clear()  # this row builds every candidate itself, as a new process would
    load_before = os.getloadavg()[0]
    product, strategy.MAX_PROPOSAL_BATCHES = strategy.MAX_PROPOSAL_BATCHES, proposal_batches
    search_effort.START_ITERATIONS = start_iterations
    try:
        started = time.monotonic()
        summary = run_tune(TuneOptions(profile=profile, model=model, out_dir=out_dir, trials=per_task * n_tasks,
                                       evaluate=False, board=board), components=components)
        wall = time.monotonic() - started
    finally:
        strategy.MAX_PROPOSAL_BATCHES = product
        search_effort.START_ITERATIONS = DEFAULT_START_ITERATIONS
    host = summary.host_time or {}
    measured = host.get("measured_trials") or 0
    return {
        "model": model, "per_task": per_task, "seed": seed, "feature_cache": cache, "overlap": overlap, "effort": effort,
        "proposal_batches": proposal_batches, "min_return": min_return, "candidate_link": candidate_link,
        "start_iterations": start_iterations,
        "board": args.board, "board_sleep": args.board_sleep, "tasks": n_tasks,
        "wall_s": wall, "tuning_wall_s": summary.seconds.tuning_wall, "device_s": summary.seconds.device,
        "measured": measured, "host_time": host,
        "host_s_per_trial": (summary.seconds.tuning_wall - summary.seconds.device) / measured if measured else None,
        "kernels_ms": summary.kernels_ms(), "load_before": load_before, "load_after": os.getloadavg()[0],
        "search_effort": summary.search.effort if summary.search is not None else None,
    }


def _variant(row: dict[str, Any]) -> tuple[Any, ...]:
    """What a row compares (rows written before the overlap existed ran it off, on the embedded board; before the
    proposal batches, one batch per round; before the minimum return was varied, the product's; before the direct
    link, through the driver; before the start depth was varied, MetaSchedule's 4)."""
    return (row["model"], row["per_task"], row["feature_cache"], row.get("overlap", "off"), row.get("board", "embedded"),
            row.get("board_sleep", 0.0), row.get("effort", "fixed"), row.get("proposal_batches", 1),
            row.get("min_return", DEFAULT_MIN_RETURN), row.get("candidate_link", "driver"), row.get("start_iterations", 4))


def report(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | per task | feature cache | overlap | board (s added per candidate) | search effort | proposal batches | min return | candidate link | start depth | seeds | host s / measured trial (median, min-max) | search | of it ahead | features | cost model | build | builds awaited beside the search | board | other | kernels ms (median) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key in sorted({_variant(r) for r in rows}):
        group = [r for r in rows if _variant(r) == key and r["host_s_per_trial"]]
        if not group:
            continue
        per = [r["host_s_per_trial"] for r in group]

        def part(name: str) -> str:
            values = [r["host_time"][name] / r["measured"] for r in group if r["host_time"].get(name) is not None]
            return f"{statistics.median(values):.3f}" if values else "-"

        kernels = [r["kernels_ms"] for r in group if r["kernels_ms"]]
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {key[4]} ({key[5]:g}) | {key[6]} | {key[7]} | {key[8]:g} | {key[9]} | {key[10]} | {len(group)} | "
            f"{statistics.median(per):.3f} ({min(per):.3f}-{max(per):.3f}) | "
            + " | ".join(part(n) for n in ("search", "ahead", "features", "cost_model", "build", "build_beside", "board", "other"))
            + (f" | {statistics.median(kernels):.3f} |" if kernels else " | - |")
        )
    return "\n".join(lines)


class _board:
    """``--board tracker``: a loopback tracker and server for the whole benchmark (a TrackerBoard); else None."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.local: Any = None

    def __enter__(self) -> Any:
        if self.kind != "tracker":
            return None
        from edgetune.board.base import TrackerBoard
        from edgetune.board.local import LocalBoard

        self.local = LocalBoard(key="host-time")
        return TrackerBoard(self.local.start())

    def __exit__(self, *exc: object) -> None:
        if self.local is not None:
            self.local.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["demo:mobilenetv2@128", "demo:transformer"])
    parser.add_argument("--per-task", type=int, default=32)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--cache", nargs="+", choices=sorted(CACHES), default=["off", "on"])
    parser.add_argument("--overlap", nargs="+", choices=OVERLAPS, default=["on"],
                        help="builds beside the search and search ahead (on: the product's default) or not")
    parser.add_argument("--board", choices=BOARDS, default="embedded",
                        help="the embedded board, or a loopback tracker tuned through as --tracker does")
    parser.add_argument("--board-sleep", type=float, default=0.0, help="seconds added per measured candidate")
    parser.add_argument("--effort", nargs="+", choices=("returns", "fixed"), default=["returns"],
                        help="tuning.search_effort: sized by returns (the product's default) or fixed")
    parser.add_argument("--proposal-batches", type=int, nargs="+", default=[4],
                        help="batches one round of evolution proposes for K-means sampling (4: the product's; 1: as before)")
    parser.add_argument("--min-return", type=float, nargs="+", default=[DEFAULT_MIN_RETURN],
                        help=f"tuning.search_min_return: the predicted return one more iteration must buy "
                             f"({DEFAULT_MIN_RETURN:g}: the product's)")
    parser.add_argument("--candidate-link", nargs="+", choices=("direct", "driver"), default=["driver"],
                        help="build.candidate_link: the driver (g++, the product's) or the compiler's own ld (direct)")
    parser.add_argument("--start-iterations", type=int, nargs="+", default=[DEFAULT_START_ITERATIONS],
                        help=f"the depth a task class's first ranked round of evolution starts at "
                             f"({DEFAULT_START_ITERATIONS}: the product's, MetaSchedule's)")
    parser.add_argument("--schedules", default="off", help="tuning.schedules (off: the search does all the work)")
    parser.add_argument("--profile", default="host")
    parser.add_argument("--out", type=Path, default=Path("edgetune-out/host_time"))
    parser.add_argument("--rows", type=Path, default=None)
    args = parser.parse_args()
    rows_path = args.rows or args.out / "rows.json"
    rows: list[dict[str, Any]] = json.loads(rows_path.read_text()) if rows_path.exists() else []
    done = {(*_variant(r), r["seed"]) for r in rows}
    with _board(args.board) as board:
        # a first tune in a process pays its imports and thread pools: a throwaway one, so that no row does
        warm = argparse.Namespace(**{**vars(args), "out": args.out / "warm-up"})
        run_row(args.models[0], 1, 0, "on", warm, board=board)
        variants = [(cache, overlap, effort, batches, ret, link, start) for cache in args.cache
                    for overlap in args.overlap for effort in args.effort for batches in args.proposal_batches
                    for ret in args.min_return for link in args.candidate_link for start in args.start_iterations]
        for index, seed in enumerate(args.seeds):
            for model in args.models:
                # side by side: the same seed's rows one after the other, the order alternating with the seed
                for cache, overlap, effort, batches, ret, link, start in variants if index % 2 == 0 else variants[::-1]:
                    key = (model, args.per_task, cache, overlap, args.board, args.board_sleep, effort, batches, ret, link,
                           start, seed)
                    if key in done:
                        continue
                    time.sleep(2.0)
                    row = run_row(model, args.per_task, seed, cache, args, overlap, board, effort, batches, ret, link, start)
                    rows.append(row)
                    rows_path.parent.mkdir(parents=True, exist_ok=True)
                    rows_path.write_text(json.dumps(rows, indent=1))
                    print(json.dumps({k: v for k, v in row.items() if k != "host_time"}), flush=True)
    print(report(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
