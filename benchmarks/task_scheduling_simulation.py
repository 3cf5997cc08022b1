"""Task schedulers on synthetic learning curves: how much sooner than MetaSchedule's gradient scheduler can anything be?

The loopback benchmark (task_scheduling.py) costs ~40 minutes for three
seeds and its wall clock is at the mercy of the shared machine. This script
asks the same question in seconds, on a synthetic model whose tasks behave
like tuning tasks, so that scheduler designs can be compared on many seeds:

- a model of 19 tasks (12 convolution-like ones whose best latencies are
  log-normally spread around 0.25 ms, weights 1 or 2, and 7 tiny ones around
  0.01 ms: reshape, pooling, a small dense layer), the shape of ResNet-18's
  task list;
- each trial of task ``k`` at its ``n``-th trial has latency
  ``opt_k * (1 + E)`` with ``log E ~ N(log m0_k - beta_k * log n, 1)``: random
  programs are ``m0`` times slower than the best one, and the search closes
  the gap like a power law of the trials spent (``beta_k`` differs per task);
- a slot is one batch of 4 trials; it costs host seconds (search and build:
  2-4 s for a convolution, 1 s for a tiny task) plus the time to measure.

Schedulers: ``gradient`` (MetaSchedule's formula, re-implemented here: one
round-robin round, then ``weight * (0.2 * backward-window gradient + 0.8 *
best / rounds)``), ``round-robin``, edgetune's ``ucb`` (``SlotBandit`` with its
defaults: exploration bonus scaled by the task's share of the model latency),
``ucb-absolute`` (the paper's absolute bonus, C = 2e-4 of the model latency:
edgetune's default before this benchmark), and an ``oracle`` that knows every
task's true trial distribution and greedily picks the largest expected
model-latency reduction per second (a ceiling for any one-step scheduler).

Reported per scheduler, median [min-max] over seeds: the gradient scheduler's
final model latency reached how many times sooner (gradient's time / its
time; 0 when not reached within the budget), and the final model latency
relative to gradient's.

Usage::

  python benchmarks/task_scheduling_simulation.py
  python benchmarks/task_scheduling_simulation.py --seeds 32 --slots 80 160 --write-results
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _results import write_section  # noqa: E402
from edgetune.search.scheduler import SlotBandit  # noqa: E402

MARK = "task_scheduling_simulation"
BATCH = 4


def synthetic_model(rng: np.random.Generator, convs: int = 12, tiny: int = 7) -> list[dict[str, float]]:
    """Tasks: weight, best latency (ms), slowness of random programs m0, learning rate beta, host s per slot."""
    tasks = []
    for _ in range(convs):
        opt = float(np.exp(rng.normal(math.log(0.25), 0.8)))
        tasks.append({"weight": float(rng.choice([1.0, 2.0], p=[0.6, 0.4])), "opt": opt, "m0": float(rng.uniform(2, 10)),
                      "beta": float(rng.uniform(0.2, 0.9)), "host": float(rng.uniform(2.0, 4.0)), "flop": opt * 1e7})
    for _ in range(tiny):
        opt = float(np.exp(rng.normal(math.log(0.01), 0.5)))
        tasks.append({"weight": 1.0, "opt": opt, "m0": float(rng.uniform(0.5, 3)), "beta": 0.3, "host": 1.0, "flop": opt * 1e6})
    return tasks


class Tuning:
    """The simulated tuning run: trials drawn per task, model latency over time."""

    def __init__(self, tasks: list[dict[str, float]], seed: int) -> None:
        self.tasks = tasks
        self.rng = np.random.default_rng(seed)
        self.trials = [0] * len(tasks)
        self.best = [math.inf] * len(tasks)
        self.seconds = 0.0
        self.curve: list[tuple[float, float]] = []  # (seconds, model latency ms) once every task has a best

    def run_slot(self, k: int) -> tuple[list[float], float]:
        task = self.tasks[k]
        latencies = []
        for _ in range(BATCH):
            self.trials[k] += 1
            gap = math.exp(self.rng.normal(math.log(task["m0"]) - task["beta"] * math.log(self.trials[k]), 1.0))
            latencies.append(task["opt"] * (1.0 + gap))
        self.best[k] = min(self.best[k], min(latencies))
        seconds = task["host"] + 0.3 * BATCH + 50e-3 * sum(latencies)  # search+build, upload, 50 timed runs each
        self.seconds += seconds
        if all(b < math.inf for b in self.best):
            self.curve.append((self.seconds, sum(t["weight"] * b for t, b in zip(self.tasks, self.best))))
        return latencies, seconds

    def time_to(self, goal: float) -> float:
        return next((t for t, v in self.curve if v <= goal * (1 + 1e-12)), math.inf)


def gradient(tasks: list[dict[str, float]], seed: int, slots: int, alpha: float = 0.2, window: int = 3) -> Tuning:
    run = Tuning(tasks, seed)
    history: list[list[float]] = [[] for _ in tasks]
    for slot in range(slots):
        if slot < len(tasks):
            k = slot
        else:
            grads = []
            for i, h in enumerate(history):
                n, best = len(h), h[-1]
                g1 = (h[n - 1 - window] - best) / window if n >= 1 + window else 0.0
                grads.append((alpha * g1 + (1 - alpha) * best / n) * tasks[i]["weight"])
            k = int(np.argmax(grads))
        run.run_slot(k)
        history[k].append(run.best[k])
    return run


def round_robin(tasks: list[dict[str, float]], seed: int, slots: int) -> Tuning:
    run = Tuning(tasks, seed)
    for slot in range(slots):
        run.run_slot(slot % len(tasks))
    return run


def bandit(**params: Any) -> Callable[[list[dict[str, float]], int, int], Tuning]:
    def schedule(tasks: list[dict[str, float]], seed: int, slots: int) -> Tuning:
        run = Tuning(tasks, seed)
        chooser = SlotBandit([t["flop"] for t in tasks], [t["weight"] for t in tasks], seed=seed, **params)
        alive = list(range(len(tasks)))
        for _ in range(slots):
            k = chooser.choose(alive)
            latencies, seconds = run.run_slot(k)
            chooser.observe(k, latencies, seconds)
        return run

    return schedule


def oracle(tasks: list[dict[str, float]], seed: int, slots: int, draws: int = 400) -> Tuning:
    run = Tuning(tasks, seed)
    rng = np.random.default_rng(seed + 10_000)
    for slot in range(slots):
        if slot < len(tasks):
            k = slot
        else:
            gains = []
            for i, task in enumerate(tasks):
                n = run.trials[i] + np.arange(1, BATCH + 1)
                gap = np.exp(rng.normal(math.log(task["m0"]) - task["beta"] * np.log(n)[None, :], 1.0, size=(draws, BATCH)))
                next_best = (task["opt"] * (1 + gap)).min(axis=1)
                gains.append(task["weight"] * float(np.mean(np.maximum(0.0, run.best[i] - next_best))) / (task["host"] + 0.3 * BATCH))
            k = int(np.argmax(gains))
        run.run_slot(k)
    return run


SCHEDULERS: dict[str, Callable[[list[dict[str, float]], int, int], Tuning]] = {
    "gradient": gradient,
    "round-robin": round_robin,
    "ucb": bandit(),
    "ucb-absolute": bandit(bonus="absolute", exploration=2e-4),
    "oracle": oracle,
}


def _fmt(values: list[float]) -> str:
    return f"{np.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=16, help="number of seeds (synthetic models and runs); default 16")
    parser.add_argument("--slots", type=int, nargs="+", default=[80, 160], help="budgets in slots of 4 trials; default 80 160")
    parser.add_argument("--schedulers", nargs="+", default=list(SCHEDULERS), choices=list(SCHEDULERS))
    parser.add_argument("--interpretation", default="", help="paragraph appended to the RESULTS.md section")
    parser.add_argument("--write-results", action="store_true", help="update the section in benchmarks/RESULTS.md")
    args = parser.parse_args()
    began = time.time()
    lines = [
        "## Task schedulers on synthetic learning curves (issue 4, simulation)",
        "",
        f"Reproduce: `python benchmarks/task_scheduling_simulation.py --seeds {args.seeds} --slots {' '.join(map(str, args.slots))} --write-results` "
        "(no board, no TVM tuning: seconds). The model, the trial distributions and the schedulers are described in the script's docstring.",
        "",
        "| slots (trials) | scheduler | reached gradient's final, x sooner | seeds reaching it | final model latency / gradient's |",
        "|---|---|---|---|---|",
    ]
    for slots in args.slots:
        speedups: dict[str, list[float]] = {name: [] for name in args.schedulers}
        finals: dict[str, list[float]] = {name: [] for name in args.schedulers}
        for seed in range(args.seeds):
            tasks = synthetic_model(np.random.default_rng(1000 + seed))
            reference = gradient(tasks, seed, slots)
            goal = reference.curve[-1][1]
            for name in args.schedulers:
                run = reference if name == "gradient" else SCHEDULERS[name](tasks, seed, slots)
                reached = run.time_to(goal)
                speedups[name].append(reference.time_to(goal) / reached if reached < math.inf else 0.0)
                finals[name].append(run.curve[-1][1] / goal)
        for name in args.schedulers:
            hits = sum(1 for s in speedups[name] if s > 0)
            lines.append(f"| {slots} ({slots * BATCH}) | {name} | {_fmt(speedups[name])} | {hits} of {args.seeds} | {_fmt(finals[name])} |")
        print(f"{slots} slots done ({time.time() - began:.0f} s)", file=sys.stderr, flush=True)
    if args.interpretation:
        lines += ["", args.interpretation]
    text = "\n".join(lines)
    print(text)
    if args.write_results:
        write_section(text, MARK)
    return 0


if __name__ == "__main__":
    sys.exit(main())
