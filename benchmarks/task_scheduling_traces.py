"""Task schedulers replayed on real tuning traces: the ceiling of the 1.5x goal, measured.

``task_scheduling.py`` runs each scheduler once per seed, so two schedulers
never see the same tuning luck, and it cannot say what the best possible
scheduler would have reached. This script separates the two questions:

``record``
    Tunes every task of a model on the loopback board for the same number of
    trials (round-robin, one batch per slot, each batch awaited so that its
    seconds are its own: search + build + measurement). It saves, per task
    and slot, the latencies measured and the seconds the slot took. Each seed
    is one run of edgetune's tuning pipeline (``run_tune``, what ``edgetune
    tune`` runs) with the recording round-robin passed in as its task
    scheduler, on profile ``--profile`` with the settings of the committed
    traces: generic ``llvm`` target (2 cores), stock evolutionary search,
    XGBoost, fixed timing, no untuned default-schedule trial, no transfer.

``replay``
    Runs schedulers on those traces: giving task ``k`` its ``j``-th slot
    returns exactly the latencies and seconds recorded for that slot. Every
    scheduler sees the same curves, so differences are the scheduler's alone.
    Replayed: MetaSchedule's ``gradient`` rule (re-implemented from its C++
    source, as in ``task_scheduling_simulation.py``), ``round-robin``,
    edgetune's ``ucb`` (``SlotBandit``, its defaults), ``ucb-absolute`` (the
    paper's unscaled exploration bonus, C = 2e-4) and the **hindsight
    optimum**: the allocation of slots that reaches a given model latency in
    the least recorded time, found exactly by dynamic programming over the
    tasks (it knows every task's future, so no scheduler can beat it).

The assumption: a task's curve depends on its own trials, not on when they
were run. MetaSchedule shares one cost model between tasks, so this holds
only approximately.

Usage::

  python benchmarks/task_scheduling_traces.py record --seeds 0 1 2 --trials-per-task 40
  python benchmarks/task_scheduling_traces.py replay --budget 240 --write-results
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from _results import write_section  # noqa: E402
from edgetune.search.scheduler import SlotBandit  # noqa: E402

MARK = "task_scheduling_traces"
DEFAULT_TRACES = HERE / "task_scheduling_traces.json"
FAILED_MS = 1e8


# ---------------------------------------------------------------------------
# record
# ---------------------------------------------------------------------------
class RoundRobinRecorder(SlotBandit):
    """Round-robin over live tasks that keeps every slot's latencies and seconds."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.slots_: list[list[dict[str, Any]]] = [[] for _ in self.arms]

    def choose(self, alive):  # noqa: D102
        return self._give(min(alive, key=lambda k: (self.arms[k].slots, k)))

    def observe(self, task_id, latencies_ms, seconds=None):  # noqa: D102
        super().observe(task_id, latencies_ms, seconds)
        if latencies_ms:
            self.slots_[task_id].append({"latencies_ms": [float(v) for v in latencies_ms], "seconds": seconds})


def trace_profile(args: argparse.Namespace, seed: int) -> Any:
    """The profile of one recording: ``--profile`` with stock search, XGBoost, fixed timing, every task capped alike."""
    from _pipeline import AS_BEFORE, STOCK_SEARCH, bench_profile

    tuning = {
        **AS_BEFORE, **STOCK_SEARCH, "cost_model": "xgb", "seed": seed, "num_trials_per_iter": args.batch,
        "max_trials_per_task": args.trials_per_task, "task_scheduler": "round-robin",
    }
    return bench_profile(args.profile, tuning=tuning, measure={"evaluator": "fixed", "number": 5, "repeat": 3, "min_repeat_ms": 20})


def record(args: argparse.Namespace) -> int:
    """Each seed: the tuning pipeline (``run_tune``) with the recording round-robin as its task scheduler."""
    from tvm.ir.utils import derived_object

    from _pipeline import fresh_dir, shared_board
    from edgetune.search.scheduler import SlotScheduler
    from edgetune.tuning import Components, TuneOptions, TuningPipeline, run_tune

    @derived_object
    class RecordingRoundRobin(SlotScheduler):
        _bandit_class = RoundRobinRecorder

    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    probe = TuningPipeline(TuneOptions(profile=trace_profile(args, 0), model=args.model, out_dir=fresh_dir("sched-trace-")))
    n_tasks = len(probe.extract_tasks(*probe.check_inputs()))
    out = Path(args.out)
    saved = json.loads(out.read_text()) if out.exists() and args.append else {"meta": {}, "traces": []}
    saved["meta"].update(model=args.model, batch=args.batch, trials_per_task=args.trials_per_task,
                         date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), load_start=os.getloadavg()[0])
    began = time.time()
    with shared_board(trace_profile(args, 0)) as board:
        for seed in args.seeds:
            scheduler = RecordingRoundRobin(wait_for_results=True, seed=seed)
            options = TuneOptions(
                profile=trace_profile(args, seed), model=args.model, out_dir=fresh_dir(f"sched-trace-{seed}-"),
                trials=args.trials_per_task * n_tasks, evaluate=False, warm_start="off", board=board,
            )
            summary = run_tune(options, components=Components(task_scheduler=scheduler))
            bandit = scheduler.bandit_
            saved["traces"].append({
                "seed": seed, "task_names": [t.name for t in summary.tasks], "weights": [float(t.weight) for t in summary.tasks],
                "flops": [a.flop for a in bandit.arms], "slots": bandit.slots_,
            })
            saved["meta"].update(load_end=os.getloadavg()[0], minutes=(time.time() - began) / 60)
            out.write_text(json.dumps(saved))
            trials = sum(len(s["latencies_ms"]) for task in bandit.slots_ for s in task)
            print(f"seed {seed}: {trials} trials recorded ({time.time() - began:.0f} s total)", flush=True)
    return 0


# ---------------------------------------------------------------------------
# replay
# ---------------------------------------------------------------------------
class Replay:
    """One scheduler's run on a recorded trace: slot ``j`` of task ``k`` returns what was recorded."""

    def __init__(self, trace: dict[str, Any]) -> None:
        self.trace = trace
        self.weights = trace["weights"]
        self.used = [0] * len(self.weights)
        self.best = [math.inf] * len(self.weights)
        self.seconds = 0.0
        self.trials = 0
        self.curve: list[tuple[float, int, float]] = []  # (seconds, trials, model latency) once all tasks have a best

    def alive(self) -> list[int]:
        return [k for k, slots in enumerate(self.trace["slots"]) if self.used[k] < len(slots)]

    def run_slot(self, k: int) -> tuple[list[float], float]:
        slot = self.trace["slots"][k][self.used[k]]
        self.used[k] += 1
        latencies = slot["latencies_ms"]
        valid = [v for v in latencies if 0 < v < FAILED_MS]
        if valid:
            self.best[k] = min(self.best[k], min(valid))
        self.seconds += slot["seconds"]
        self.trials += len(latencies)
        if all(b < math.inf for b in self.best):
            self.curve.append((self.seconds, self.trials, sum(w * b for w, b in zip(self.weights, self.best))))
        return latencies, slot["seconds"]

    def reached(self, goal: float, axis: int) -> float:
        return next((point[axis] for point in self.curve if point[2] <= goal * (1 + 1e-12)), math.inf)


Schedule = Callable[[dict[str, Any], int, int], Replay]


def _until(run: Replay, budget: int) -> bool:
    return run.trials < budget and bool(run.alive())


def gradient(trace: dict[str, Any], budget: int, seed: int, alpha: float = 0.2, window: int = 3) -> Replay:
    """MetaSchedule's rule: one round-robin round, then weight * (alpha * gradient + (1 - alpha) * best / rounds)."""
    run = Replay(trace)
    history: list[list[float]] = [[] for _ in run.weights]
    while _until(run, budget):
        alive = run.alive()
        first_round = [k for k in alive if not history[k]]
        if first_round:
            k = first_round[0]
        else:
            def score(i: int) -> float:
                h = history[i]
                n, best = len(h), h[-1]
                g1 = (h[n - 1 - window] - best) / window if n >= 1 + window else 0.0
                return (alpha * g1 + (1 - alpha) * best / n) * run.weights[i]

            k = max(alive, key=score)
        run.run_slot(k)
        history[k].append(run.best[k])
    return run


def round_robin(trace: dict[str, Any], budget: int, seed: int) -> Replay:
    run = Replay(trace)
    while _until(run, budget):
        alive = run.alive()
        run.run_slot(min(alive, key=lambda k: (run.used[k], k)))
    return run


def bandit(**params: Any) -> Schedule:
    def schedule(trace: dict[str, Any], budget: int, seed: int) -> Replay:
        run = Replay(trace)
        chooser = SlotBandit(trace["flops"], trace["weights"], seed=seed, **params)
        while _until(run, budget):
            k = chooser.choose(run.alive())
            latencies, seconds = run.run_slot(k)
            chooser.observe(k, latencies, seconds)
        return run

    return schedule


def hindsight_cost(trace: dict[str, Any], goal: float, axis: str, resolution: float = 0.01) -> float:
    """Least recorded cost (seconds or trials) of any allocation whose model latency is <= ``goal``.

    Exact up to ``resolution`` (seconds are rounded up to it, so the optimum is
    never flattered). Dynamic programming over tasks: ``best[c]`` is the
    lowest model latency reachable at cost ``<= c`` with the tasks seen so far;
    each task takes its first ``j >= 1`` slots for some ``j``.
    """
    options = []
    for k, slots in enumerate(trace["slots"]):
        w, best, cost, opts = trace["weights"][k], math.inf, 0.0, []
        for slot in slots:
            valid = [v for v in slot["latencies_ms"] if 0 < v < FAILED_MS]
            best = min([best] + valid)
            cost += slot["seconds"] if axis == "seconds" else len(slot["latencies_ms"])
            if best < math.inf:
                opts.append((int(math.ceil(cost / resolution - 1e-9)) if axis == "seconds" else int(cost), w * best))
        if not opts:
            return math.inf
        options.append(opts)
    horizon = sum(max(c for c, _ in opts) for opts in options)
    table = np.zeros(horizon + 1)
    for opts in options:
        new = np.full(horizon + 1, np.inf)
        for c, value in opts:
            shifted = np.full(horizon + 1, np.inf)
            shifted[c:] = table[: horizon + 1 - c] + value
            new = np.minimum(new, shifted)
        table = new
    hits = np.nonzero(table <= goal * (1 + 1e-12))[0]
    if not len(hits):
        return math.inf
    return float(hits[0]) * (resolution if axis == "seconds" else 1.0)


SCHEDULERS: dict[str, Schedule] = {
    "gradient": gradient,
    "round-robin": round_robin,
    "ucb": bandit(),
    "ucb-absolute": bandit(bonus="absolute", exploration=2e-4),
}


def _fmt(values: list[float], digits: int = 2) -> str:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "not reached"
    return f"{np.median(values):.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def replay_budget(traces: list[dict[str, Any]], names: list[str], budget: int, reference_name: str = "gradient") -> list[str]:
    """Table rows for one budget: every scheduler against ``reference_name``'s final model latency."""
    rows: dict[str, dict[str, list[float]]] = {n: {"x_seconds": [], "x_trials": [], "final": []} for n in names + ["hindsight optimum"]}
    exhausted: dict[str, int] = dict.fromkeys(names, 0)
    for trace in traces:
        reference = SCHEDULERS[reference_name](trace, budget, trace["seed"])
        if not reference.curve:
            raise SystemExit(f"budget {budget} is too small: every task needs one batch before the model latency is defined")
        goal = reference.curve[-1][2]
        t_ref, n_ref = reference.reached(goal, 0), reference.reached(goal, 1)
        for name in names:
            run = reference if name == reference_name else SCHEDULERS[name](trace, budget, trace["seed"])
            exhausted[name] += sum(1 for k, slots in enumerate(trace["slots"]) if run.used[k] == len(slots) and len(slots) >= 2)
            t, n = run.reached(goal, 0), run.reached(goal, 1)
            rows[name]["x_seconds"].append(t_ref / t if t < math.inf else 0.0)
            rows[name]["x_trials"].append(n_ref / n if n < math.inf else 0.0)
            rows[name]["final"].append(run.curve[-1][2] / goal)
        t_opt = hindsight_cost(trace, goal, "seconds")
        n_opt = hindsight_cost(trace, goal, "trials")
        rows["hindsight optimum"]["x_seconds"].append(t_ref / t_opt)
        rows["hindsight optimum"]["x_trials"].append(n_ref / n_opt)
        print(f"budget {budget}, seed {trace['seed']}: {reference_name} final {goal:.3f} ms at {t_ref:.0f} s / {n_ref} trials; "
              f"hindsight optimum reaches it at {t_opt:.0f} s / {n_opt:.0f} trials", file=sys.stderr)
    lines = []
    for name, row in rows.items():
        final = "-" if name == "hindsight optimum" else _fmt(row["final"])
        out = "-" if name == "hindsight optimum" else str(exhausted[name])
        lines.append(f"| {reference_name} | {budget} | {name} | {_fmt(row['x_seconds'])} | {_fmt(row['x_trials'])} | {final} | {out} |")
    return lines


def replay(args: argparse.Namespace) -> int:
    saved = json.loads(Path(args.traces).read_text())
    meta, traces = saved["meta"], saved["traces"]
    trials = [sum(len(s["latencies_ms"]) for task in tr["slots"] for s in task) for tr in traces]
    seeds = " ".join(str(t["seed"]) for t in traces)
    lines = [
        "## Task schedulers replayed on recorded tuning traces (issue 4): the goal's ceiling",
        "",
        f"Recorded {meta.get('date', '?')} on the loopback board: `{meta['model']}`, every task tuned to "
        f"{meta['trials_per_task']} trials in batches of {meta['batch']} (round-robin, each batch awaited), seeds "
        f"{seeds.replace(' ', ', ')} ({', '.join(map(str, trials))} trials); load average "
        f"{meta.get('load_start', math.nan):.2f} at start, {meta.get('load_end', math.nan):.2f} at end, {meta.get('minutes', math.nan):.0f} min.",
        "",
        f"Reproduce: `python benchmarks/task_scheduling_traces.py record --seeds {seeds} "
        f"--trials-per-task {meta['trials_per_task']}` (board, about 10 min per seed), then "
        f"`python benchmarks/task_scheduling_traces.py replay --budget {' '.join(map(str, args.budget))} "
        f"--references {' '.join(args.references)} --write-results` "
        f"(seconds; the traces are committed as `benchmarks/{DEFAULT_TRACES.name}`).",
        "",
        "Goal per seed and budget: the reference scheduler's final model latency in its replay (the issue's reference is "
        "MetaSchedule's gradient rule; round-robin is shown as a second reference). \"x sooner\" = the reference's "
        "cost to reach it / the scheduler's (0 = not reached); cost in recorded seconds (search + build + measurement "
        "of each slot) and in trials. Median [min-max] over seeds. Last column: tasks whose recorded trace ran out "
        "(the replay then treats them as finished), summed over seeds.",
        "",
        "| reference | budget (trials) | scheduler | x sooner (seconds) | x sooner (trials) | final model latency / reference's | traces run out |",
        "|---|---|---|---|---|---|---|",
    ]
    for reference in args.references:
        for budget in args.budget:
            lines += replay_budget(traces, args.schedulers, budget, reference)
    if args.interpretation:
        lines += ["", args.interpretation]
    text = "\n".join(lines)
    print(text)
    if args.write_results:
        write_section(text, MARK)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="tune every task to the same trial count on the loopback board and save the traces")
    rec.add_argument("--model", default="demo:resnet18@32")
    rec.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    rec.add_argument("--trials-per-task", type=int, default=40)
    rec.add_argument("--batch", type=int, default=4)
    rec.add_argument("--out", default=str(DEFAULT_TRACES))
    rec.add_argument("--profile", default="host", help="device profile of the runs (default host)")
    rec.add_argument("--append", action="store_true", help="add seeds to an existing traces file")
    rep = sub.add_parser("replay", help="replay schedulers on saved traces (no board)")
    rep.add_argument("--traces", default=str(DEFAULT_TRACES))
    rep.add_argument("--budget", type=int, nargs="+", default=[160, 240, 320], help="trials per replayed run; default 160 240 320")
    rep.add_argument("--schedulers", nargs="+", default=list(SCHEDULERS), choices=list(SCHEDULERS), help="default: all")
    rep.add_argument("--references", nargs="+", default=["gradient", "round-robin"], choices=list(SCHEDULERS),
                     help="schedulers whose final latency is the goal; default gradient round-robin")
    rep.add_argument("--interpretation", default="", help="paragraph appended to the RESULTS.md section")
    rep.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    return record(args) if args.command == "record" else replay(args)


if __name__ == "__main__":
    sys.exit(main())
