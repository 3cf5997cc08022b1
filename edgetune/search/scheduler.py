"""Model-level task scheduling: which operator to tune in the next time slot.

MetaSchedule's stock ``gradient`` scheduler ranks tasks by a recent-gradient
heuristic. DynaTune (Zhang et al., ICLR 2021) treats the choice as a rested
multi-armed bandit over time slots instead: each task's best-so-far GFLOPS
curve is fitted with a saturating learning curve whose posterior predicts how
much the *model* latency would drop if that task got the next slot; a UCB bonus
keeps rarely tried tasks in play. This module implements

- :class:`LearningCurveBelief`: the belief model (log-power curve, segmented
  after >20% jumps, Laplace or MCMC posterior);
- :class:`SlotBandit`: the decision logic (UCB, epsilon-greedy, softmax), pure
  Python so that it can be tested on scripted curves without TVM;
- :class:`UCBTaskScheduler`, :class:`EpsilonGreedyTaskScheduler`,
  :class:`SoftmaxTaskScheduler`: MetaSchedule ``PyTaskScheduler`` wrappers.

A *slot* is one batch (``num_trials_per_iter`` candidates) of the chosen task:
MetaSchedule's loop cannot pre-empt a batch, so a batch is the smallest unit of
time the scheduler can hand out. Batches of different tasks take different
wall-clock times (search, build and measurement cost differ), so by default the
predicted gain is divided by the task's observed seconds per slot, which makes
the decision the paper's "gain per fixed-length time slot".
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.task_scheduler import PyTaskScheduler

from ..common.failure import FAILED_RUN_MS, is_failed, is_valid_ms
from ..errors import SchedulerError
from .learning_curve import POSTERIORS, LearningCurveBelief, best_so_far, log_power, segment_start  # noqa: F401 - their home before

#: policies of :class:`SlotBandit`, as named in profiles and on the command line
POLICIES = ("ucb", "epsilon-greedy", "softmax")
#: how UCB's exploration bonus is scaled (see :class:`SlotBandit`)
BONUSES = ("share", "absolute")


def _require(ok: bool, what: str, value: Any) -> None:
    if not ok:
        raise SchedulerError(f"{what}, got {value!r} instead")


# ---------------------------------------------------------------------------
# bandit
# ---------------------------------------------------------------------------
@dataclass
class _Arm:
    flop: float
    weight: float
    latencies_ms: list[float] = field(default_factory=list)
    slots: int = 0
    last_slot: int = -1  # global slot index of the last time it was chosen
    last_slot_trials: int = 0
    slot_seconds: list[float] = field(default_factory=list)
    belief: LearningCurveBelief | None = None
    fitted_on: int = -1
    gain: float = 0.0  # expected model-latency reduction in its next slot (s)

    @property
    def best_ms(self) -> float:
        valid = [v for v in self.latencies_ms if is_valid_ms(v)]
        return min(valid) if valid else math.inf


class SlotBandit:
    """Chooses the task for each slot from the tasks' measured latencies.

    Value of a tried task ``k`` (the paper's ``u_k``, made scale-free):
    ``r_k = w_k * E[latency_k now - latency_k after one more slot] / L`` where
    ``L`` is the current model latency (sum of weighted task bests), so ``r_k``
    is the expected fraction of the model latency that slot would remove; with
    ``cost_aware`` it is divided by the task's seconds per slot relative to the
    mean. Policies:

    - ``ucb``: ``r_k + s_k * sqrt(exploration * ln t / c_k)``, highest wins,
      where ``s_k = w_k * latency_k / L`` is the task's share of the model
      latency. A slot of task ``k`` can remove at most ``s_k`` of the model
      latency, and Hoeffding's bound (the paper's argument for the square
      root) scales with the range of the reward, so a task that is 0.1% of the
      model gets a 0.1%-sized bonus, not the same bonus as the biggest conv;
    - ``epsilon-greedy``: highest ``r_k``, a uniformly random task with
      probability ``epsilon``;
    - ``softmax``: sample with probability proportional to
      ``exp(r_k / (temperature * max r))``.

    Untried tasks go first. A task whose last slot produced no measurement
    (a search strategy that returned an empty batch) or that never measured a
    valid candidate has ``r_k = 0`` and is revisited by exploration only. No
    live task waits more than ``max_idle_slots`` slots (default: 4 x tasks).

    Parameters
    ----------
    flops, weights:
        Per task: FLOPs of one call and how often the model calls it.
    policy:
        One of :data:`POLICIES`.
    exploration:
        UCB's ``C``. With ``bonus="share"`` the bonus is in units of each
        task's share of the model latency: with ``C = 1e-3`` a task tried twice
        in 40 slots gets a bonus of 4.3% of its share, one tried 10 times 1.9%.
    bonus:
        ``"share"`` (default) scales the bonus by the task's share ``s_k``;
        ``"absolute"`` is the paper's form, one bonus for every operator
        (``r_k + sqrt(C * ln t / c_k)``; then ``C = 2e-4`` is a sensible scale).
        On ResNet-18-like share distributions the absolute bonus outweighs the
        predicted gains of most tasks and turns UCB into round-robin after the
        first rounds (benchmarks/task_scheduling_simulation.py).
    epsilon, temperature:
        Settings of the other two policies.
    peak_gflops:
        The device's peak, the belief model's normaliser (``None``: each task
        is normalised by its own best, without the peak bound).
    cost_aware:
        Divide the gain by the task's measured seconds per slot.
    max_idle_slots:
        Starvation guard; ``None`` means 4 x the number of tasks.
    belief_params:
        Keyword arguments of :class:`LearningCurveBelief`.
    seed:
        Seed of the random policies and the posterior sampling.
    """

    def __init__(
        self,
        flops: Sequence[float],
        weights: Sequence[float],
        *,
        policy: str = "ucb",
        exploration: float = 1e-3,
        bonus: str = "share",
        epsilon: float = 0.05,
        temperature: float = 0.1,
        peak_gflops: float | None = None,
        cost_aware: bool = True,
        max_idle_slots: int | None = None,
        belief_params: dict[str, Any] | None = None,
        seed: int = 0,
    ) -> None:
        _check_policy_params(policy, exploration, epsilon, temperature, peak_gflops, max_idle_slots)
        _require(bonus in BONUSES, f"bonus must be one of {', '.join(BONUSES)}", bonus)
        _require(len(flops) == len(weights) and len(flops) > 0, "flops and weights must be non-empty and of equal length", (len(flops), len(weights)))
        self.policy = policy
        self.exploration = exploration
        self.bonus = bonus
        self.epsilon = epsilon
        self.temperature = temperature
        self.peak_gflops = peak_gflops
        self.cost_aware = cost_aware
        self.max_idle_slots = max_idle_slots if max_idle_slots is not None else 4 * len(flops)
        self.belief_params = dict(belief_params or {})
        LearningCurveBelief(**self.belief_params)  # validate now
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.arms = [_Arm(flop=max(1.0, float(f)), weight=float(w)) for f, w in zip(flops, weights)]
        self.slot = 0  # slots handed out so far
        self.history: list[int] = []  # task chosen in each slot

    # -- observations ----------------------------------------------------------
    def observe(self, task_id: int, latencies_ms: Sequence[float], seconds: float | None = None) -> None:
        """Record the latencies (ms; >= 1e8 = failed) a slot of ``task_id`` produced."""
        arm = self.arms[task_id]
        arm.latencies_ms.extend(float(v) for v in latencies_ms)
        arm.last_slot_trials = len(latencies_ms)
        if seconds is not None and latencies_ms:
            arm.slot_seconds.append(float(seconds))

    def cancel_last(self, task_id: int) -> None:
        """Undo the slot just given to ``task_id`` (it was finished, not tuned)."""
        if self.history and self.history[-1] == task_id:
            self.history.pop()
            self.slot -= 1
            self.arms[task_id].slots -= 1

    # -- values --------------------------------------------------------------
    def model_latency_ms(self) -> float:
        """Sum of weighted best latencies of the tasks with a valid measurement."""
        return sum(a.weight * a.best_ms for a in self.arms if a.best_ms < math.inf)

    def _expected_gain_ms(self, task_id: int) -> float:
        arm = self.arms[task_id]
        n = len(arm.latencies_ms)
        if arm.last_slot_trials == 0 or arm.best_ms == math.inf:
            return 0.0
        if arm.fitted_on != n:
            xs, ys = best_so_far(arm.latencies_ms, arm.flop)
            if len(xs) < 2:
                return 0.0
            norm = self.peak_gflops or float(ys[-1])
            # a task measured above the stated peak: the peak is wrong for it, do not bound its curve
            bounded = self.peak_gflops is not None and float(ys[-1]) <= self.peak_gflops
            params = {"seed": self.seed + 7919 * task_id, "bounded": bounded, **self.belief_params}
            arm.belief = LearningCurveBelief(**params).fit(xs, ys / norm)
            arm.fitted_on = n
            steps = arm.last_slot_trials
            gflops_next = arm.belief.predict_next(steps) * norm
            now_ms = arm.best_ms
            next_ms = arm.flop / (gflops_next * 1e9) * 1e3
            arm.gain = float(np.mean(np.maximum(0.0, now_ms - next_ms))) * arm.weight
        return arm.gain

    def values(self, alive: Sequence[int]) -> dict[int, float]:
        """``r_k`` of each live task (see the class docstring)."""
        total = self.model_latency_ms()
        if total <= 0:
            return {k: 0.0 for k in alive}
        out = {k: self._expected_gain_ms(k) / total for k in alive}
        if self.cost_aware:
            seconds = {k: float(np.median(self.arms[k].slot_seconds)) for k in alive if self.arms[k].slot_seconds}
            if seconds:
                mean = float(np.mean(list(seconds.values())))
                out = {k: v * (mean / seconds[k] if k in seconds and seconds[k] > 0 else 1.0) for k, v in out.items()}
        return out

    def shares(self, alive: Sequence[int]) -> dict[int, float]:
        """Each live task's share of the model latency (the most one slot could remove).

        A task without a valid measurement yet gets an even share, ``1 / tasks``.
        """
        total = self.model_latency_ms()
        even = 1.0 / len(self.arms)
        return {
            k: (self.arms[k].weight * self.arms[k].best_ms / total if total > 0 and self.arms[k].best_ms < math.inf else even)
            for k in alive
        }

    # -- decision -------------------------------------------------------------
    def choose(self, alive: Sequence[int]) -> int:
        """The task for the next slot, among ``alive`` task ids (non-empty)."""
        _require(len(alive) > 0, "alive must name at least one task", alive)
        untried = [k for k in alive if self.arms[k].slots == 0]
        if untried:
            return self._give(untried[0])
        idle = [k for k in alive if self.slot - self.arms[k].last_slot > self.max_idle_slots]
        if idle:
            return self._give(min(idle, key=lambda k: self.arms[k].last_slot))
        r = self.values(alive)
        if self.policy == "ucb":
            t = self.slot + 1
            share = self.shares(alive) if self.bonus == "share" else dict.fromkeys(alive, 1.0)
            score = {k: r[k] + share[k] * math.sqrt(self.exploration * math.log(t) / self.arms[k].slots) for k in alive}
            return self._give(max(alive, key=lambda k: (score[k], -k)))
        if self.policy == "epsilon-greedy":
            if self.rng.random() < self.epsilon:
                return self._give(int(alive[self.rng.integers(len(alive))]))
            return self._give(max(alive, key=lambda k: (r[k], -self.arms[k].slots, -k)))
        top = max(r.values())
        if top <= 0:
            return self._give(int(alive[self.rng.integers(len(alive))]))
        logits = np.array([r[k] / (self.temperature * top) for k in alive])
        p = np.exp(logits - logits.max())
        return self._give(int(alive[self.rng.choice(len(alive), p=p / p.sum())]))

    def _give(self, task_id: int) -> int:
        arm = self.arms[task_id]
        arm.slots += 1
        arm.last_slot = self.slot
        self.slot += 1
        self.history.append(task_id)
        return task_id


def _check_policy_params(policy: str, exploration: float, epsilon: float, temperature: float, peak_gflops: float | None, max_idle_slots: int | None) -> None:
    _require(policy in POLICIES, f"policy must be one of {', '.join(POLICIES)}", policy)
    _require(exploration >= 0, "exploration must be >= 0", exploration)
    _require(0 <= epsilon <= 1, "epsilon must be in [0, 1]", epsilon)
    _require(temperature > 0, "temperature must be > 0", temperature)
    _require(peak_gflops is None or peak_gflops > 0, "peak_gflops must be > 0 or None", peak_gflops)
    _require(max_idle_slots is None or (isinstance(max_idle_slots, int) and max_idle_slots >= 1), "max_idle_slots must be an int >= 1 or None", max_idle_slots)


# ---------------------------------------------------------------------------
# MetaSchedule task schedulers
# ---------------------------------------------------------------------------
def _run_ms(result: Any) -> float:
    if result.error_msg is not None or is_failed(result.run_secs):
        return FAILED_RUN_MS
    return float(np.median([float(x) for x in result.run_secs])) * 1e3


class SlotScheduler(PyTaskScheduler):
    """Shared ``next_task_id`` of the bandit schedulers.

    Only ``next_task_id`` is overridden: MetaSchedule's ``Tune`` and
    ``JoinRunningTask`` stay native (overriding them from Python and calling
    the base would re-enter the override). Results are collected by joining
    batches from here, so every result passes through the bandit.

    Like the stock schedulers, a batch may still be measured on the board while
    the next task's candidates are searched and built (``wait_for_results=False``):
    finished batches are collected, the choice is made, and if it falls on a task
    whose batch is still running, that batch is awaited and the choice made
    again with its results. ``wait_for_results=True`` awaits every batch before
    each decision (no overlap: slower, but on a loopback board no candidate is
    timed while the host CPU builds the next batch; ``edgetune tune`` uses it
    for its embedded board). A stop raised while one batch is joined (the
    recorder's, once that batch is committed) joins every other batch in
    flight first, so that each measured result is recorded.

    A task MetaSchedule terminated (budget reached, or its search strategy
    returned no candidates, e.g. an early stop) is never chosen again.
    """

    _policy = "ucb"
    #: the decision logic; a subclass may swap in another ``SlotBandit`` (benchmarks record traces this way)
    _bandit_class: type[SlotBandit] = SlotBandit

    def __init__(self, *, wait_for_results: bool = False, **params: Any) -> None:
        super().__init__()
        self.wait_for_results = wait_for_results
        self.params = params
        try:  # fail at construction (profile load, flag parsing), not mid-tuning
            self._bandit_class([1.0], [1.0], policy=self._policy, **params)
        except TypeError as error:
            raise SchedulerError(f"{type(self).__name__} hyperparameters must be keywords of SlotBandit, {error}") from None
        self.bandit_: SlotBandit | None = None
        self._inflight: dict[int, float] = {}  # task id -> host seconds its current slot took so far
        self._returned: tuple[int, float] | None = None  # last task handed out, and when
        self._first_record: Any = None
        self.decision_seconds_ = 0.0  # spent choosing (fits included), for overhead reports

    def next_task_id(self) -> int:
        now = time.monotonic()
        tasks = self._outer().tasks_  # type: ignore[attr-defined]
        if self.bandit_ is None or len(self.bandit_.arms) != len(tasks) or self._fresh_run(tasks):
            self.bandit_ = self._bandit_class([t.flop for t in tasks], [t.task_weight for t in tasks], policy=self._policy, **self.params)
            self._inflight, self._returned = {}, None
            self.decision_seconds_ = 0.0
        bandit = self.bandit_
        if self._returned is not None:  # search + build of the slot handed out last time
            task_id, at = self._returned
            self._inflight[task_id] = self._inflight.get(task_id, 0.0) + now - at
            self._returned = None
        for task_id, task in enumerate(tasks):
            futures = task.runner_futures
            if futures is not None:
                if self.wait_for_results or all(f.done() for f in futures):
                    self._join(task_id)
            elif task_id in self._inflight:
                # handed out, but MetaSchedule terminated it instead of tuning it
                self._inflight.pop(task_id)
                if task.is_terminated:
                    bandit.cancel_last(task_id)
                else:
                    bandit.observe(task_id, [], None)
        alive = [i for i, t in enumerate(tasks) if not t.is_terminated]
        if not alive:
            return -1
        while True:
            started = time.perf_counter()
            task_id = bandit.choose(alive)
            self.decision_seconds_ += time.perf_counter() - started
            if tasks[task_id].runner_futures is None:
                break
            # its previous batch is still on the board: wait for it, then decide again
            bandit.cancel_last(task_id)
            self._join(task_id)
        self._inflight[task_id] = 0.0
        self._returned = (task_id, time.monotonic())
        return task_id

    def _join(self, task_id: int) -> None:
        started = time.monotonic()
        try:
            results = self.join_running_task(task_id)
        except Exception:
            # a stop (the recorder raises once the batch is committed): every other batch in flight is
            # recorded too before the run ends, so no measured result is lost
            for other, task in enumerate(self._outer().tasks_):  # type: ignore[attr-defined]
                if other != task_id and task.runner_futures is not None:
                    try:
                        self.join_running_task(other)
                    except Exception:  # noqa: BLE001 - the same stop, raised again after its records
                        pass
            raise
        waited = time.monotonic() - started  # the board was the bottleneck for this long
        host = self._inflight.pop(task_id, None)
        seconds = None if host is None else host + waited
        self.bandit_.observe(task_id, [_run_ms(r) for r in results], seconds)  # type: ignore[union-attr]

    def _fresh_run(self, tasks: Any) -> bool:
        """A new ``tune`` call on the same scheduler object: start over.

        ``Tune`` creates new task records, so a first record that is not the
        one seen before means a new run.
        """
        first = tasks[0] if len(tasks) else None
        fresh = first is not None and self._first_record is not None and not first.same_as(self._first_record)
        self._first_record = first
        return fresh


@derived_object
class UCBTaskScheduler(SlotScheduler):
    """DynaTune's scheduler: UCB over time slots with a learning-curve belief.

    Keyword arguments are those of :class:`SlotBandit` (``exploration``,
    ``bonus``, ``peak_gflops``, ``cost_aware``, ``max_idle_slots``, ``belief_params``,
    ``seed``).
    """

    _policy = "ucb"


@derived_object
class EpsilonGreedyTaskScheduler(SlotScheduler):
    """Highest expected gain, a random task with probability ``epsilon``."""

    _policy = "epsilon-greedy"


@derived_object
class SoftmaxTaskScheduler(SlotScheduler):
    """Task sampled with probability ``exp(gain / (temperature * max gain))``."""

    _policy = "softmax"


SCHEDULER_CLASSES = {
    "ucb": UCBTaskScheduler,
    "epsilon-greedy": EpsilonGreedyTaskScheduler,
    "softmax": SoftmaxTaskScheduler,
}


#: edgetune's own task schedulers as MetaSchedule holds them (``derived_object`` wrappers, not SlotScheduler
#: instances): what a run checks before it reads their ``decision_seconds_``
SLOT_SCHEDULERS = (UCBTaskScheduler, EpsilonGreedyTaskScheduler, SoftmaxTaskScheduler)
