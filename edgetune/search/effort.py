"""An evolutionary search sized by what it returns, per task class (issue 55, point 3).

MetaSchedule's evolutionary search spends the same effort on every batch: a
population of ``P`` programs evolved for a fixed number of iterations (4), each
iteration mutating and predicting ``P`` programs. On a 2-core host that search
is most of the host's time per measured trial, and late in a task, or on a
task class whose cost model is already sure, the later iterations predict
nothing better than the earlier ones.

:class:`EffortSizer` sets each round's population and iterations from the
returns measured on the earlier rounds of the same task class (the operator
signature of the task's workload; the tasks of one class share what they learn):

* **The return of an iteration** is the relative improvement of the predicted
  score of the batch it would hand out: the mean score of the best ``b``
  (the batch size) distinct unmeasured programs the search has seen by the end
  of that iteration, over the same after the iteration before. The cost model
  records every prediction the search makes (one call per iteration, see
  :meth:`edgetune.costmodel.surrogate.RandomForestModel.observing`), so the
  returns cost nothing to measure.
* **The return of the population** is read off the first iteration's random
  sample: the predicted top ``b`` of the whole sample over the mean of the
  same for random halves of it, i.e. what the last doubling of the sample
  returned.

Both are smoothed per class and per iteration (an exponential average). A round
runs iterations up to and including the first whose smoothed return is under
``min_return``: that one keeps being measured, so the depth grows again when it
starts to pay; while every iteration measured pays, the next round goes one
deeper (up to ``max_iterations``). The population doubles while one more
population's worth of programs (``P`` predictions) bought by doubling returns at
least ``min_return``, and halves when it returns under half of it (within
``min_population`` and ``max_population``). A class starts at the batch's
automatic population and MetaSchedule's depth (:data:`START_ITERATIONS`, 4). A
start at 2 evaluated 18-34% fewer programs but saved no host time per trial on
a 2-core Zen 3, whose cores are CPU-bound and spend about half of it on builds,
and its kernels came out worse (RESULTS ``host_time_start_depth``, ``host_cpu``).

Before the cost model ranks anything (the random forest's warm-up, its first
measurements) its scores are random numbers, so evolving a population against
them is a random walk that costs ``population x iterations`` mutations and
predictions and ends where a random sample would. Such a round is the initial
sample alone (no iteration) at the smallest population: AutoTVM, too, samples
at random until its model has trained once. Nothing is observed then and the
class keeps its effort for the rounds the forest ranks. On a tune with few
tasks and a small budget (a 12-trial tune of a 2-convolution CNN: every round
in the warm-up) this was most of the host's time.

The search is the same MetaSchedule ``EvolutionarySearch``; only its
``population_size`` and ``genetic_num_iters`` change between rounds (one inner
search object per effort used, see :class:`edgetune.search.strategy.AdaptiveSearch`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

#: MetaSchedule's ``genetic_num_iters`` (``search_effort = "fixed"`` keeps it)
DEFAULT_ITERATIONS = 4
#: the depth a class's first ranked round starts at (see the module docstring)
START_ITERATIONS = DEFAULT_ITERATIONS
#: random halves of the first iteration's sample averaged for the population's return
HALVES = 8


@dataclass(frozen=True, order=True)
class Effort:
    """One round's evolutionary search: ``population`` programs evolved for ``iterations`` iterations."""

    population: int
    iterations: int

    def __post_init__(self) -> None:
        if self.population < 2:
            raise ValueError(f"population must be >= 2, got {self.population!r} instead")
        if self.iterations < 0:
            raise ValueError(f"iterations must be >= 0, got {self.iterations!r} instead")


def top_mean(scores: Iterable[float], count: int) -> float:
    """Mean of the ``count`` highest ``scores`` (0.0 for none)."""
    values = np.sort(np.fromiter(scores, dtype=float))[::-1][:count]
    return float(values.mean()) if values.size else 0.0


def relative_gain(new: float, old: float) -> float:
    """``new / old - 1``, with no gain from nothing to nothing and a full one from nothing to something."""
    if old > 0:
        return new / old - 1.0
    return 1.0 if new > 0 else 0.0


@dataclass(frozen=True)
class RoundReturns:
    """What one round's search returned, from its cost-model calls."""

    iterations: tuple[float, ...]  # gain of iteration 1, 2, ... over the one before
    population: float | None  # gain of the first iteration's sample over its halves (None: too few programs)


def round_returns(
    calls: Sequence[tuple[Sequence[int], np.ndarray]], measured: set[int], batch: int, seed: int = 0,
) -> RoundReturns | None:
    """The returns of one round of evolution from its cost-model calls (one per iteration, in order).

    ``calls``: per iteration, the population's structural hashes and predicted scores; ``measured``: the
    programs measured before (they are not what the batch can hand out); ``batch``: the batch size ``b``.
    None when the round made no call (the cost model was warming up).
    """
    if not calls or batch < 1:
        return None
    best: dict[int, float] = {}
    tops: list[float] = []
    sample: list[float] = []
    for index, (hashes, scores) in enumerate(calls):
        for key, score in zip(hashes, np.asarray(scores, dtype=float)):
            if key in measured or key in best:
                continue
            best[key] = float(score)
            if index == 0:
                sample.append(float(score))
        tops.append(top_mean(best.values(), batch))
    gains = tuple(relative_gain(tops[i], tops[i - 1]) for i in range(1, len(tops)))
    population = None
    if len(sample) >= 2 * batch:
        rng = np.random.default_rng(seed)
        half = len(sample) // 2
        halves = [top_mean(rng.choice(sample, size=half, replace=False), batch) for _ in range(HALVES)]
        population = relative_gain(top_mean(sample, batch), float(np.mean(halves)))
    return RoundReturns(gains, population)


@dataclass
class ClassReturns:
    """Smoothed returns of one task class and the effort its next round gets."""

    effort: Effort
    iteration_gains: list[float | None] = field(default_factory=list)  # index i: iteration i + 1
    population_gain: float | None = None
    rounds: int = 0
    observed: int = 0
    warmup_rounds: int = 0  # rounds searched before the cost model ranked anything (the initial sample alone)
    programs: int = 0  # population x (iterations + 1), summed over its rounds: what the search evaluated

    def to_dict(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "rounds_observed": self.observed,
            "warmup_rounds": self.warmup_rounds,
            "population": self.effort.population,
            "iterations": self.effort.iterations,
            "programs_evaluated": self.programs,
            "iteration_returns": [None if g is None else round(g, 4) for g in self.iteration_gains],
            "population_return": None if self.population_gain is None else round(self.population_gain, 4),
        }


class EffortSizer:
    """Each task class's next round of evolutionary search, set from what its earlier rounds returned.

    Shared by every task's search of one run (thread-safe). See the module docstring for the rule.

    Parameters
    ----------
    population:
        A class's first population (the batch's automatic one, or the profile's ``population_size``).
    min_population, max_population:
        Bounds of the population.
    min_return:
        The smallest predicted return (a relative improvement of the batch's predicted top scores) one more
        population's worth of programs must buy: one more iteration, or the extra programs of a doubling.
    start_iterations:
        A class's first depth (:data:`START_ITERATIONS`).
    max_iterations:
        The deepest round.
    smoothing:
        Weight of the newest round in each smoothed return (1: the last round alone).
    """

    def __init__(
        self,
        population: int,
        *,
        min_population: int = 16,
        max_population: int = 512,
        min_return: float = 0.02,
        start_iterations: int = START_ITERATIONS,
        max_iterations: int = 8,
        smoothing: float = 0.5,
    ) -> None:
        if not 2 <= min_population <= max_population:
            raise ValueError(f"min_population must be within [2, max_population={max_population}], "
                             f"got {min_population!r} instead")
        if min_return < 0:
            raise ValueError(f"min_return must be >= 0, got {min_return!r} instead")
        if max_iterations < 1:
            raise ValueError(f"max_iterations must be >= 1, got {max_iterations!r} instead")
        if start_iterations < 1:  # a round with no iteration returns nothing to size the next one by
            raise ValueError(f"start_iterations must be >= 1, got {start_iterations!r} instead")
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must be within (0, 1], got {smoothing!r} instead")
        self.start = Effort(min(max_population, max(min_population, int(population))),
                            min(start_iterations, max_iterations))
        #: a round's effort while the cost model's scores are random (its warm-up): the initial sample alone
        self.warmup = Effort(min(min_population, self.start.population), 0)
        self.min_population, self.max_population = min_population, max_population
        self.min_return = min_return
        self.max_iterations = max_iterations
        self.smoothing = smoothing
        self._lock = threading.Lock()
        self.classes: dict[str, ClassReturns] = {}

    def effort(self, task_class: str, *, ranking: bool = True) -> Effort:
        """The effort of ``task_class``'s next round (counted as a round of it).

        ``ranking`` False: the cost model's scores are still random (its warm-up), so the round is
        :attr:`warmup`, whatever the class's effort.
        """
        with self._lock:
            state = self.classes.setdefault(task_class, ClassReturns(self.start))
            state.rounds += 1
            effort = state.effort if ranking else self.warmup
            if not ranking:
                state.warmup_rounds += 1
            state.programs += effort.population * (effort.iterations + 1)
            return effort

    def observe(self, task_class: str, effort: Effort, returns: RoundReturns | None) -> Effort:
        """Fold one round's ``returns`` (run at ``effort``) into the class; the class's next effort."""
        with self._lock:
            state = self.classes.setdefault(task_class, ClassReturns(self.start))
            if returns is None:
                return state.effort
            state.observed += 1
            self._smooth(state, returns)
            state.effort = Effort(self._next_population(state, effort), self._next_iterations(state))
            return state.effort

    def _smooth(self, state: ClassReturns, returns: RoundReturns) -> None:
        a = self.smoothing
        gains = state.iteration_gains
        for index, gain in enumerate(returns.iterations):
            if index >= len(gains):
                gains.append(None)
            gains[index] = gain if gains[index] is None else (1 - a) * gains[index] + a * gain
        if returns.population is not None:
            old = state.population_gain
            state.population_gain = returns.population if old is None else (1 - a) * old + a * returns.population

    def _next_iterations(self, state: ClassReturns) -> int:
        """Up to the first iteration that does not pay (it keeps being measured), or one deeper than measured."""
        for index, gain in enumerate(state.iteration_gains[: self.max_iterations]):
            if gain is None:
                return index + 1
            if gain < self.min_return:
                return index + 1
        return min(self.max_iterations, len(state.iteration_gains) + 1)

    def _next_population(self, state: ClassReturns, effort: Effort) -> int:
        """Doubled while a doubling's extra programs pay ``min_return`` per population, halved under half of it."""
        gain = state.population_gain
        if gain is None:
            return effort.population
        # the last doubling evaluated P/2 x (iterations + 1) more programs: its return per P programs
        per_population = 2.0 * gain / (effort.iterations + 1)
        if per_population >= self.min_return:
            return min(self.max_population, 2 * effort.population)
        if per_population < self.min_return / 2:
            return max(self.min_population, effort.population // 2)
        return effort.population

    def to_dict(self) -> dict[str, Any]:
        with self._lock:
            return {
                "min_return": self.min_return,
                "start": {"population": self.start.population, "iterations": self.start.iterations},
                "classes": {name: state.to_dict() for name, state in sorted(self.classes.items())},
            }


__all__ = [
    "DEFAULT_ITERATIONS", "START_ITERATIONS", "ClassReturns", "Effort", "EffortSizer", "RoundReturns", "relative_gain",
    "round_returns", "top_mean",
]
