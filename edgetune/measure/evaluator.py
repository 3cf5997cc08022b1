"""Adaptive measurement: stop timing a candidate once its throughput is stable.

AdaTune §4.1. A candidate is timed in micro-batches of ``B`` single runs (one
remote ``time_evaluator`` call with ``number=1, repeat=B`` per micro-batch, so
there is no RPC round trip per run). After micro-batch ``i`` the cumulative
throughput is::

    Perf_i = (runs in micro-batches 1..i) * GFLOP / (their total time)

and timing stops as soon as the coefficient of variation of
``Perf_1 .. Perf_i`` is below the threshold (at least two micro-batches, at
least ``min_runs``, at most ``max_runs``: the paper's n). On a quiet board the
second micro-batch agrees with the first and timing stops; on a noisy one
(background work, throttling) micro-batches disagree, the CV stays high and
more runs are taken. The GFLOP count cancels out of the CV, so only run times
are needed.

One addition to the paper: with ``micro_batch_ms`` > 0 a probe call
(``PROBE_RUNS`` run, also the warm-up stock's evaluator does, not part of the
estimate) measures the run time first, and micro-batches then hold at most
``micro_batch_ms`` of device time (at least one run). Fifty runs of a 10 ms
convolution would otherwise cost half a second per micro-batch, more than stock
MetaSchedule's 100 ms per candidate; sub-millisecond kernels still get the
paper's full micro-batch. ``micro_batch_ms = 0`` is the paper's rule.

A second addition: a device-time budget per candidate (``budget_ms``). On a
busy board the CV may never settle, and a 2 ms kernel run to the 500-run cap
costs a second of board time, ten times what stock MetaSchedule's evaluator
spends (``number=3, min_repeat_ms=100``: about 100 ms, or 3 runs of a longer
kernel, plus a warm-up). Once two micro-batches have run, no micro-batch is
started that would take the device time spent on the candidate past
``max(budget_ms, STOCK_RUNS x run time)`` (stock's cost): timing stops
(``stopped_by="budget"``) and the estimate is the mean of every run taken, as
for the cap. So a candidate never costs more than stock's evaluator would
spend on it (to within the error of predicting the next micro-batch from the
runs so far). ``budget_ms = 0`` turns it off.

Every timing call (``time_evaluator``) runs the kernel once untimed before
the runs it times, so a call of ``k`` runs costs ``k + 1``; the budget counts
it. For a kernel so long that micro-batches hold a single run, the probe's
run is the first micro-batch: probe, one more run and stop is stock's cost.

A third: which spread stops the timing (``stop_rule``). The paper's CV of the
cumulative throughput compares micro-batches; when kernels are long a
time-bounded micro-batch holds only a few runs, so that CV is little more than
the spread of single runs, which a user does not care about: what matters is
how well the *mean* (the number the cost model and the ranking use) is known.
``stop_rule="ci"`` stops once the 95 % confidence interval of the mean run time
(Student's t over every run taken) is narrower than ``ci_threshold`` of the
mean on either side (``stopped_by="ci"``); ``"cv"`` is the paper's rule;
``"auto"`` (the default) uses the CI rule for kernels whose micro-batches are
cut short by ``micro_batch_ms`` and the CV rule for the rest. Both rules need
two micro-batches, so a drift between them is still seen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..common.choices import STOP_RULES

#: the paper's defaults: micro-batches of 50 runs of at most n = 500, stop below 10 % CV
DEFAULT_MICRO_BATCH = 50
DEFAULT_MAX_RUNS = 500
DEFAULT_CV_THRESHOLD = 0.10  # the paper's; profiles default to 0.03 (see device_profiles/README.md)
#: runs of the probe call that sizes time-bounded micro-batches (and warms up, as stock's one untimed run)
PROBE_RUNS = 1
#: runs stock MetaSchedule's evaluator spends on a long kernel: number=3 timed, plus its warm-up
STOCK_RUNS = 4
#: relative half-width of the mean's 95 % confidence interval that ends timing under the CI rule
DEFAULT_CI_THRESHOLD = 0.03


def cumulative_cv(batches: Sequence[Sequence[float]]) -> float:
    """CV of the cumulative throughput after each micro-batch (run times in seconds).

    ``inf`` for fewer than two micro-batches (nothing to compare yet) or a non-positive time.
    """
    if len(batches) < 2:
        return math.inf
    runs = np.cumsum([len(b) for b in batches], dtype=float)
    seconds = np.cumsum([float(np.sum(b)) for b in batches])
    if np.any(seconds <= 0) or any(len(b) == 0 for b in batches):
        return math.inf
    perf = runs / seconds
    return float(np.std(perf) / np.mean(perf))


def mean_ci_halfwidth(run_secs: Sequence[float]) -> float:
    """Half-width of the 95 % confidence interval of the mean run time, relative to the mean.

    Student's t with n - 1 degrees of freedom over the single runs; ``inf`` for
    fewer than two runs or a non-positive mean.
    """
    n = len(run_secs)
    if n < 2:
        return math.inf
    mean = float(np.mean(run_secs))
    if mean <= 0:
        return math.inf
    return float(_t_quantile(n - 1) * np.std(run_secs, ddof=1) / math.sqrt(n) / mean)


def _t_quantile(dof: int) -> float:
    """Student's t 97.5 % quantile (two-sided 95 %)."""
    from scipy.stats import t

    return float(t.ppf(0.975, dof))


@dataclass
class AdaptiveResult:
    """How one candidate was measured."""

    run_secs: list[float]  # the single-run times the estimate uses, in order
    cv: float  # the final cumulative-throughput CV
    micro_batches: int
    stopped_by: str  # "cv" / "ci" (stable by that rule), "budget" (device-time budget spent), "cap" (max_runs reached)
    batch_means: list[float] = field(default_factory=list)
    probe_runs: int = 0  # warm-up/sizing runs, timed but not part of the estimate

    @property
    def runs(self) -> int:
        """Runs executed on the device, probe included."""
        return len(self.run_secs) + self.probe_runs

    @property
    def mean_sec(self) -> float:
        return float(np.mean(self.run_secs))


@dataclass(frozen=True)
class AdaptiveEvaluator:
    """Micro-batch timing with a CV stopping rule (see the module docstring).

    Parameters
    ----------
    micro_batch:
        Runs per remote timing call (the paper's B).
    max_runs:
        Cap on runs per candidate (the paper's n); a multiple of ``micro_batch`` is sensible.
    cv_threshold:
        Stop once the cumulative-throughput CV is below this (0.10 = 10 %).
    min_runs:
        Floor: never stop before this many runs (two micro-batches are always taken).
    micro_batch_ms:
        Device time a micro-batch may take (0: always ``micro_batch`` runs, as in the paper).
    budget_ms:
        Device time one candidate may take, at least stock's (see the module docstring; 0: no budget).
    stop_rule:
        ``"cv"`` (the paper's), ``"ci"`` (the mean's confidence interval) or ``"auto"``
        (CI for kernels too long for a full micro-batch, CV for the rest).
    ci_threshold:
        The CI rule stops once the mean's 95 % interval is within this share of the mean on either side.
    """

    micro_batch: int = DEFAULT_MICRO_BATCH
    max_runs: int = DEFAULT_MAX_RUNS
    cv_threshold: float = DEFAULT_CV_THRESHOLD
    min_runs: int = 0
    micro_batch_ms: float = 0.0
    budget_ms: float = 0.0
    stop_rule: str = "cv"
    ci_threshold: float = DEFAULT_CI_THRESHOLD

    def __post_init__(self) -> None:
        if self.micro_batch < 1:
            raise ValueError(f"micro_batch must be >= 1, got {self.micro_batch!r} instead")
        if self.max_runs < 2 * self.micro_batch:
            raise ValueError(f"max_runs must be >= 2 x micro_batch ({2 * self.micro_batch}), got {self.max_runs!r} instead")
        if not self.cv_threshold > 0:
            raise ValueError(f"cv_threshold must be > 0, got {self.cv_threshold!r} instead")
        if self.min_runs < 0 or self.min_runs > self.max_runs:
            raise ValueError(f"min_runs must be within 0..max_runs ({self.max_runs}), got {self.min_runs!r} instead")
        if not self.micro_batch_ms >= 0:
            raise ValueError(f"micro_batch_ms must be >= 0, got {self.micro_batch_ms!r} instead")
        if not self.budget_ms >= 0:
            raise ValueError(f"budget_ms must be >= 0, got {self.budget_ms!r} instead")
        if self.stop_rule not in STOP_RULES:
            raise ValueError(f"stop_rule must be one of {', '.join(STOP_RULES)}, got {self.stop_rule!r} instead")
        if not self.ci_threshold > 0:
            raise ValueError(f"ci_threshold must be > 0, got {self.ci_threshold!r} instead")

    def budget_sec(self, run_sec: float) -> float:
        """Device seconds a candidate of ``run_sec`` per run may take: at least what stock's evaluator takes."""
        if self.budget_ms <= 0:
            return math.inf
        return max(self.budget_ms / 1e3, STOCK_RUNS * run_sec)

    def batch_size(self, run_sec: float | None) -> int:
        """Runs in the next micro-batch given the run time seen so far."""
        if self.micro_batch_ms <= 0 or run_sec is None or run_sec <= 0:
            return self.micro_batch
        fitting = math.ceil(self.micro_batch_ms / 1e3 / run_sec)
        return max(1, min(self.micro_batch, fitting))

    def measure(self, time_runs: Callable[[int], Sequence[float]]) -> AdaptiveResult:
        """Call ``time_runs(k)`` (returns ``k`` single-run times in seconds) until stable."""
        probe: list[float] = []
        if self.micro_batch_ms > 0:
            probe = self._call(time_runs, min(PROBE_RUNS, self.max_runs))
        size = self.batch_size(float(np.mean(probe)) if probe else None)
        rule = self.rule_for(size)
        batches: list[list[float]] = []
        runs = len(probe)
        # every timing call runs the kernel once more, untimed (TVM's time_evaluator warms up)
        spent = float(np.sum(probe)) + (float(np.mean(probe)) if probe else 0.0)
        if size == 1 and probe:
            # a kernel too long for more than single-run micro-batches: the probe's run (already
            # warmed up by its call) is the first micro-batch, or the probe alone would cost half the budget
            batches, probe = [probe], []
        cv = math.inf
        while True:
            count = min(size, self.max_runs - runs)
            if count <= 0:
                break
            if len(batches) >= 2:
                mean = spent / (runs + len(batches) + bool(probe))  # per execution, warm-ups included
                if spent + (count + 1) * mean > self.budget_sec(mean) * (1 + 1e-9):
                    return self._result(batches, cv, "budget", len(probe))
            batches.append(self._call(time_runs, count))
            runs += count
            spent += float(np.sum(batches[-1])) + float(np.mean(batches[-1]))
            cv = cumulative_cv(batches)
            if runs >= self.min_runs and len(batches) >= 2 and self._stable(rule, cv, batches):
                return self._result(batches, cv, rule, len(probe))
        return self._result(batches, cv, "cap", len(probe))

    def rule_for(self, batch_size: int) -> str:
        """The stop rule for a candidate whose micro-batches hold ``batch_size`` runs."""
        if self.stop_rule != "auto":
            return self.stop_rule
        return "ci" if batch_size < self.micro_batch else "cv"

    def _stable(self, rule: str, cv: float, batches: list[list[float]]) -> bool:
        if rule == "ci":
            return mean_ci_halfwidth([t for batch in batches for t in batch]) < self.ci_threshold
        return cv < self.cv_threshold

    @staticmethod
    def _call(time_runs: Callable[[int], Sequence[float]], count: int) -> list[float]:
        times = [float(t) for t in time_runs(count)]
        if len(times) != count:
            raise RuntimeError(f"timing call returned {len(times)} run times, expected {count}")
        return times

    @staticmethod
    def _result(batches: list[list[float]], cv: float, stopped_by: str, probe_runs: int) -> AdaptiveResult:
        if not batches:  # max_runs used up by the probe alone
            raise ValueError("max_runs leaves no room for a micro-batch after the probe")
        flat = [t for batch in batches for t in batch]
        return AdaptiveResult(flat, cv, len(batches), stopped_by, [float(np.mean(b)) for b in batches], probe_runs)
