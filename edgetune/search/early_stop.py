"""Per-task early stop: when is a task worth no more measurements?

Two rules with one interface (call order: ``start`` once, then ``update`` after
every measured batch; ``should_stop`` before asking for the next batch):

* :class:`AdaptiveEarlyStop` - the adaptive early stop of "Adaptive
  optimization ... K-means sampling and history database" (§II.B). The task's
  maximum trial count ``M`` starts at ``im`` and moves after every batch with
  the ratio ``r = f(c) / f(c*)`` of the batch's best throughput to the best
  throughput of all earlier batches:

  - ``r > 1`` (the batch beat the best): ``M += clip(ir * M * (r - 1), lb, ub)``
  - ``1 - fr <= r <= 1`` (close to the best): ``M`` unchanged
  - ``r < 1 - fr`` (clearly worse): ``M -= clip(dr * M * (1 - r), lb, ub)``

  then ``M`` is kept within ``[max(im, trials so far), budget]`` and the task
  stops once its trials reach ``M``. The paper names the parameters (``im``,
  ``ir``, ``dr``, ``fr``, ``ub``/``lb`` bounding the step "Add", plan size) but
  gives no formula; the step above grows with the size of the improvement (or
  drop) as the text describes, ``lb``/``ub`` keep every step between one and a
  few batches, and ``M`` never falls below ``im``: a drop takes back what
  earlier improvements added, so one bad early batch, when the cost model has
  barely any data, cannot end a task ("so the tuning will not accidentally
  stop when a batch of configurations have poor performance").
* :class:`FixedEarlyStop` - AutoTVM's rule: stop after ``patience`` trials
  without a better candidate.

Trials here are measured candidates, as in the paper; the search strategy
separately caps the candidates it proposes (see ``edgetune.search.strategy``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class EarlyStopStep:
    """One update, for reports and tests."""

    trials: int
    batch_best: float | None  # throughput (higher is better) of the batch's best candidate
    ratio: float | None  # f(c) / f(c*) before the update
    max_trials: int  # M after the update


class EarlyStop:
    """Interface; the base never stops (``early_stop = "none"``)."""

    name = "none"

    def start(self, budget: int, plan_size: int, expected: int | None = None) -> None:
        """Begin a task with ``budget`` trials at most, ``plan_size`` per batch.

        ``expected`` is the task's fair share of a run's budget (defaults to
        ``budget``); the rules' defaults are relative to it.
        """
        self.budget_ = budget
        self.plan_size_ = plan_size
        self.trials_ = 0
        self.best_: float | None = None
        self.steps_: list[EarlyStopStep] = []

    def update(self, trials: int, batch_best: float | None) -> None:
        """``trials`` more were proposed; ``batch_best`` is the best throughput among them (None: all failed)."""
        self.trials_ += trials
        if batch_best is not None and (self.best_ is None or batch_best > self.best_):
            self.best_ = batch_best
        self.steps_.append(EarlyStopStep(self.trials_, batch_best, None, self.budget_))

    def should_stop(self) -> bool:
        return self.trials_ >= self.budget_

    @property
    def limit(self) -> int:
        """The trial count the task is currently allowed."""
        return self.budget_


class AdaptiveEarlyStop(EarlyStop):
    """The paper's adaptive maximum trial count (see the module docstring).

    Parameters
    ----------
    initial:
        ``im``, the initial maximum trial count; 0 means half the task's
        expected share of the budget (at least two batches).
    increment:
        ``ir``, how strongly an improvement raises the maximum.
    decrement:
        ``dr``, how strongly a clearly worse batch lowers it.
    flops_ratio:
        ``fr``, width of the "close to the best" band in which nothing changes.
    min_step, max_step:
        ``lb`` and ``ub``, bounds of one change; 0 means one batch and four batches.
    """

    name = "adaptive"

    def __init__(
        self,
        initial: int = 0,
        increment: float = 1.0,
        decrement: float = 1.0,
        flops_ratio: float = 0.05,
        min_step: int = 0,
        max_step: int = 0,
    ) -> None:
        for label, value in (("initial", initial), ("min_step", min_step), ("max_step", max_step)):
            if value < 0:
                raise ValueError(f"{label} must be >= 0, got {value!r} instead")
        for label, value in (("increment", increment), ("decrement", decrement)):
            if not value >= 0:
                raise ValueError(f"{label} must be >= 0, got {value!r} instead")
        if not 0 <= flops_ratio < 1:
            raise ValueError(f"flops_ratio must be within [0, 1), got {flops_ratio!r} instead")
        if min_step and max_step and min_step > max_step:
            raise ValueError(f"min_step must be <= max_step ({max_step}), got {min_step!r} instead")
        self.initial = initial
        self.increment = increment
        self.decrement = decrement
        self.flops_ratio = flops_ratio
        self.min_step = min_step
        self.max_step = max_step

    def start(self, budget: int, plan_size: int, expected: int | None = None) -> None:
        super().start(budget, plan_size, expected)
        self.lb_ = self.min_step or plan_size
        self.ub_ = max(self.lb_, self.max_step or 4 * plan_size)
        initial = self.initial or max(2 * plan_size, (expected or budget) // 2)
        self.max_trials_ = self.floor_ = min(budget, initial)

    def update(self, trials: int, batch_best: float | None) -> None:
        self.trials_ += trials
        ratio: float | None = None
        if batch_best is not None and self.best_ is not None and self.best_ > 0:
            ratio = batch_best / self.best_
            m = self.max_trials_
            if ratio > 1:
                self.max_trials_ = m + self._step(self.increment * m * (ratio - 1))
            elif ratio < 1 - self.flops_ratio:
                self.max_trials_ = m - self._step(self.decrement * m * (1 - ratio))
        elif batch_best is None and self.best_ is not None:
            # every candidate failed: as bad as a batch can be
            ratio = 0.0
            self.max_trials_ -= self._step(self.decrement * self.max_trials_)
        if batch_best is not None and (self.best_ is None or batch_best > self.best_):
            self.best_ = batch_best
        self.max_trials_ = int(min(self.budget_, max(self.floor_, self.trials_, self.max_trials_)))
        self.steps_.append(EarlyStopStep(self.trials_, batch_best, ratio, self.max_trials_))

    def _step(self, amount: float) -> int:
        return int(min(self.ub_, max(self.lb_, math.ceil(amount))))

    def should_stop(self) -> bool:
        return self.trials_ >= self.max_trials_

    @property
    def limit(self) -> int:
        return self.max_trials_


class FixedEarlyStop(EarlyStop):
    """AutoTVM's early stop: no better candidate in ``patience`` trials ends the task.

    ``patience=0`` means half the task's expected share of the budget.
    """

    name = "fixed"

    def __init__(self, patience: int = 0) -> None:
        if patience < 0:
            raise ValueError(f"patience must be >= 0, got {patience!r} instead")
        self.patience = patience

    def start(self, budget: int, plan_size: int, expected: int | None = None) -> None:
        super().start(budget, plan_size, expected)
        self.patience_ = self.patience or max(plan_size, (expected or budget) // 2)
        self.last_improvement_ = 0

    def update(self, trials: int, batch_best: float | None) -> None:
        improved = batch_best is not None and (self.best_ is None or batch_best > self.best_)
        super().update(trials, batch_best)
        if improved:
            self.last_improvement_ = self.trials_
        self.steps_[-1].max_trials = self.limit

    def should_stop(self) -> bool:
        return self.trials_ >= self.limit

    @property
    def limit(self) -> int:
        return min(self.budget_, self.last_improvement_ + self.patience_)


def make_early_stop(name: str, **params: float) -> EarlyStop:
    """``adaptive`` (with the paper's parameters), ``fixed`` (``patience``) or ``none``."""
    if name == "adaptive":
        return AdaptiveEarlyStop(**{k: v for k, v in params.items() if k != "patience"})  # type: ignore[arg-type]
    if name == "fixed":
        return FixedEarlyStop(int(params.get("patience", 0)))
    if name == "none":
        return EarlyStop()
    raise ValueError(f"early_stop must be one of adaptive, fixed, none, got {name!r} instead")
