"""A search strategy that spends fewer on-device trials: MetaSchedule's
evolutionary search wrapped with contextual exploration, K-means sampling and
an adaptive early stop.

Per batch, in the order MetaSchedule calls the hooks
(``_initialize_with_tune_context`` -> ``pre_tuning`` -> [``generate_measure_candidates``
-> ``notify_runner_results``]* -> ``post_tuning``):

1. the inner ``EvolutionarySearch`` proposes a batch of ``b`` candidates,
   ranked by the cost model (with the random forest: by expected improvement);
2. contextual exploration (AdaTune §4.2.2): ``eps_t = mean sigma / Perf(p*)``
   of randomly drawn unmeasured candidates; the batch keeps its best
   ``(1 - eps_t) b`` and takes ``eps_t b`` random candidates instead of a fixed
   5 % share (needs a cost model with uncertainty; otherwise the inner
   search's fixed epsilon-greedy share stays);
3. K-means sampling (§II.C of the early-stop paper) keeps one candidate per
   cluster of similar candidates. It keeps about a third of a batch, and one
   round of evolution costs the host far more than the board's measurements,
   so one round proposes up to :data:`MAX_PROPOSAL_BATCHES` batches of ``b``
   (the inner search's next-best candidates, as the next rounds would have
   proposed them without a measurement in between). Each batch gets its own
   exploration share and is clustered on its own, as a round's batch was; the
   kept candidates fill the measured batch up to ``b``, and the batches a
   full measured batch does not need are not proposed. The cost model is
   therefore updated once per measured batch of ``b``, not once per
   proposed batch; the early stop still sees what each proposed batch kept
   as one batch, in order;
4. after measurement, the early stop updates the task's maximum trial count;
   once the task's measured trials reach it, the strategy returns ``None`` and
   MetaSchedule's task scheduler retires the task.

The task's budget (MetaSchedule's ``max_trials``) caps the candidates
*proposed*, ``b`` per round: it buys search rounds, and sampling decides how
many of each round reach the board. The early stop counts candidates
*measured*, as the paper's trial count does, so the two compose: sampling
thins each round, the early stop ends a task whose measurements stopped
paying off. What each component saved is collected in a :class:`SearchReport`
shared by the clones MetaSchedule makes per task.

With ``suggested`` (``edgetune tune --suggested``, settings per task type
from the history, :mod:`edgetune.search.suggest`), each per-task clone looks
up its own task type (the operator signature of its workload) when
MetaSchedule initialises it with the task's context: the adaptive early stop
starts from the type's trial count as ``im`` (and may still extend it), the
fixed or no early stop gets it as a hard cap on measured candidates, and the
K-means sampler uses the type's distance ratio (0: measure every candidate).
Task types without history keep the profile's settings; what each task got
is in :attr:`SearchReport.suggested`.
"""

from __future__ import annotations

import math
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import tvm.s_tir.meta_schedule as ms
from tvm_ffi import structural_hash
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate, PySearchStrategy

from ..common.choices import SAMPLERS
from ..common.failure import is_valid_secs
from .default_schedule import is_untuned_copy
from .early_stop import AdaptiveEarlyStop, EarlyStop, make_early_stop
from .effort import Effort, EffortSizer, round_returns
from .limits import TaskLimits
from .sampling import KMeansSampler
from ..costmodel.surrogate import CandidateFeatures, mean_std_or_none


@dataclass
class TaskSearchReport:
    """What the strategy did for one task."""

    task: str
    share: int = 0  # the task's expected share of the run's budget
    proposed: int = 0
    measured: int = 0
    random_candidates: int = 0
    stopped_early: bool = False
    early_stop_limit: int | None = None
    transferred: int = 0  # candidates of the first batch transferred from similar workloads
    capped: int | None = None  # at most this many measured: the task is worth little of the model
    exploration: list[float] = field(default_factory=list)  # eps_t per batch

    @property
    def removed_fraction(self) -> float:
        return 1.0 - self.measured / self.proposed if self.proposed else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "share": self.share,
            "proposed": self.proposed,
            "measured": self.measured,
            "removed_by_sampling": round(self.removed_fraction, 4),
            "stopped_early": self.stopped_early,
            "early_stop_limit": self.early_stop_limit,
            "share_left_by_early_stop": max(0, self.share - self.proposed) if self.stopped_early else 0,
            "random_candidates": self.random_candidates,
            "transferred": self.transferred,
            "capped": self.capped,
            "mean_exploration": round(float(np.mean(self.exploration)), 4) if self.exploration else None,
        }


class SearchReport:
    """Per-task reports, shared by every clone of one strategy (thread-safe).

    ``lookahead``: where the task scheduler finds each task's search to have its next batch searched while
    its last one is measured, and what was searched so (:class:`~edgetune.search.lookahead.Lookahead`; None: never).
    """

    def __init__(self, lookahead: Any = None, effort: EffortSizer | None = None) -> None:
        self.lookahead = lookahead
        #: each task class's evolutionary effort, sized by its returns (None: MetaSchedule's fixed effort)
        self.effort = effort
        self._lock = threading.Lock()
        self.tasks: dict[str, TaskSearchReport] = {}
        #: per task name, the settings applied with ``suggested`` (see :meth:`AdaptiveSearch.pre_tuning`)
        self.suggested: dict[str, dict[str, Any]] = {}
        #: host seconds spent making batches (the evolutionary search and the cost model's predictions in it)
        self.seconds = 0.0

    def add_seconds(self, seconds: float) -> None:
        with self._lock:
            self.seconds += seconds

    def task(self, name: str) -> TaskSearchReport:
        with self._lock:
            return self.tasks.setdefault(name, TaskSearchReport(name))

    def to_dict(self) -> dict[str, Any]:
        tasks = [t.to_dict() for t in self.tasks.values()]
        proposed = sum(t.proposed for t in self.tasks.values())
        measured = sum(t.measured for t in self.tasks.values())
        return {
            "proposed": proposed,
            "measured": measured,
            "removed_by_sampling": round(1 - measured / proposed, 4) if proposed else 0.0,
            "tasks_stopped_early": sum(t.stopped_early for t in self.tasks.values()),
            "tasks": tasks,
        }


#: batches of a run that look for transferred candidates before giving up
TRANSFER_ATTEMPTS = 3
#: with K-means sampling, the batches one round of evolution proposes at most (see the module docstring)
MAX_PROPOSAL_BATCHES = 4


@dataclass(frozen=True)
class SearchSettings:
    """The adaptive search's hyperparameters (a profile's ``[tuning]`` keys, see :meth:`from_tuning`).

    population_size, init_min_unmeasured, eps_greedy:
        Of the inner ``EvolutionarySearch``; ``eps_greedy`` is its fixed random
        share, used when exploration is not contextual.
    sampler, kmeans_distance_ratio:
        ``"kmeans"`` or ``"none"``, and the sampler's distance threshold
        (see :class:`~edgetune.search.sampling.KMeansSampler`).
    early_stop, early_stop_params:
        ``"adaptive"``, ``"fixed"`` or ``"none"`` and the rule's parameters.
    exploration, max_exploration:
        ``"contextual"`` (needs a surrogate with uncertainty) or ``"fixed"``,
        and the upper bound of the contextual share ``eps_t``.
    seed:
        Seed for random candidates and K-means.
    """

    population_size: int = 512
    init_min_unmeasured: int = 50
    eps_greedy: float = 0.05
    sampler: str = "kmeans"
    kmeans_distance_ratio: float = 0.3
    early_stop: str = "adaptive"
    early_stop_params: Mapping[str, float] = field(default_factory=dict)
    exploration: str = "contextual"
    max_exploration: float = 0.5
    seed: int = 0

    def __post_init__(self) -> None:
        if self.sampler not in SAMPLERS:
            raise ValueError(f"sampler must be 'kmeans' or 'none', got {self.sampler!r} instead")
        if self.exploration not in ("contextual", "fixed"):
            raise ValueError(f"exploration must be 'contextual' or 'fixed', got {self.exploration!r} instead")
        if not 0 <= self.max_exploration <= 1:
            raise ValueError(f"max_exploration must be within [0, 1], got {self.max_exploration!r} instead")
        make_early_stop(self.early_stop, **self.early_stop_params)  # validate now, not inside tuning

    @classmethod
    def from_tuning(cls, tuning: Any, population_size: int) -> SearchSettings:
        """The settings a profile's ``[tuning]`` section asks for, with an evolution of ``population_size``."""
        return cls(
            population_size=population_size,
            init_min_unmeasured=min(50, population_size // 2),
            sampler=tuning.sampler,
            kmeans_distance_ratio=tuning.kmeans_distance_ratio,
            early_stop=tuning.early_stop,
            early_stop_params=early_stop_params(tuning),
            exploration=tuning.exploration,
            seed=tuning.seed,
        )


def early_stop_params(tuning: Any) -> dict[str, float]:
    """The early-stop rule's keyword arguments from a profile's ``[tuning]`` settings."""
    if tuning.early_stop == "fixed":
        return {"patience": tuning.early_stop_patience}
    return {
        "initial": tuning.early_stop_initial,
        "increment": tuning.early_stop_increment,
        "decrement": tuning.early_stop_decrement,
        "flops_ratio": tuning.early_stop_flops_ratio,
        "min_step": tuning.early_stop_min_step,
        "max_step": tuning.early_stop_max_step,
    }


class ContextualExploration:
    """AdaTune's contextual exploration (§4.2.2): a batch's random share grows with the model's uncertainty.

    ``eps_t = mean sigma / Perf(p*)`` over randomly drawn unmeasured
    candidates; the batch keeps its best ``(1 - eps_t) b`` and takes
    ``eps_t b`` random ones. ``surrogate`` is read for its ``predict_mean_std``.
    """

    def __init__(self, surrogate: Any, max_exploration: float) -> None:
        self.surrogate = surrogate
        self.max_exploration = max_exploration

    def mix(self, context: Any, batch: list[Any], randoms: list[Any], task: TaskSearchReport) -> list[Any]:
        """``batch`` with its worst-ranked share ``eps_t`` replaced by ``randoms``."""
        if not randoms:
            return batch
        _, sigma = mean_std_or_none(self.surrogate, context, randoms)
        if sigma is None:
            return batch  # cost model still warming up: its ranking is random anyway
        # eps_t = mean sigma / Perf(p*); targets are normalised so that Perf(p*) = 1
        eps = min(self.max_exploration, max(0.0, float(np.mean(sigma))))
        task.exploration.append(eps)
        n_random = min(len(randoms), int(round(eps * len(batch))))
        task.random_candidates += n_random
        return batch[: len(batch) - n_random] + randoms[:n_random]


class TransferredSeeds:
    """Candidates transferred from similar workloads into a task's first batches (:mod:`edgetune.search.transfer`).

    Tried on each batch until some are found, at most ``TRANSFER_ATTEMPTS``
    times: MetaSchedule's own schedulers commit a round's results only after
    every task had its first batch, so the second batch is the first that can
    see what the other shapes found. ``provider(context, limit)`` gives the
    candidates; they take up to half of the batch.
    """

    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.done = provider is None
        self.attempts = 0

    def mix(self, context: Any, batch: list[Any], task: TaskSearchReport) -> list[Any]:
        if self.done:
            return batch
        self.attempts += 1
        if not batch or self.attempts > TRANSFER_ATTEMPTS:
            self.done = True
            return batch
        seeds = self.provider(context, max(1, len(batch) // 2))
        if seeds:
            self.done = True
            task.transferred += len(seeds)
        return seeds + batch[: len(batch) - len(seeds)]


@dataclass
class Proposal:
    """A batch as the search proposed it, before the checks made at hand-out (early stop, caps, budget)."""

    pool: list[Any]  # what the evolutionary search returned
    batch: list[Any]  # after exploration and sampling
    counts: TaskSearchReport  # proposed and random candidates, exploration: counted into the task's report at hand-out
    #: structural hash -> the proposed batch (0, 1, ...) a candidate was sampled from; the early stop sees each apart
    sampled_from: dict[int, int] = field(default_factory=dict)

    def count_into(self, task: TaskSearchReport) -> None:
        task.proposed += self.counts.proposed
        task.random_candidates += self.counts.random_candidates
        task.exploration.extend(self.counts.exploration)


@derived_object
class AdaptiveSearch(PySearchStrategy):
    """Evolutionary search plus the measurement-reducing components (see module docstring).

    Parameters
    ----------
    settings:
        The hyperparameters (:class:`SearchSettings`).
    surrogate:
        The Python cost model object; contextual exploration reads its
        uncertainty (without one, exploration stays fixed).
    expected_trials_per_task:
        The task's fair share of the run's budget, where the early stop starts.
    limits:
        Per-task caps and counts measured before the search (:class:`TaskLimits`), read only.
    seeds:
        ``seeds(context, limit)`` gives up to ``limit`` candidates transferred
        from similar workloads (:class:`TransferredSeeds`). None: no transfer.
    suggested:
        Settings per task type, ``{operator signature: {"max_trials": n,
        "kmeans_distance_ratio": r or None}}``
        (:func:`edgetune.search.suggest.settings_by_operator`); None: the
        profile's settings for every task.
    report:
        Where per-task reports are collected, the search's output (shared with clones).
        Its ``lookahead`` (a :class:`~edgetune.search.lookahead.Lookahead`, or None: never) lets the task
        scheduler have a task's next batch searched while its last one is measured (:meth:`search_ahead`).
    """

    def __init__(
        self,
        settings: SearchSettings | None = None,
        *,
        surrogate: Any = None,
        expected_trials_per_task: int = 0,
        limits: TaskLimits | None = None,
        seeds: Any = None,
        suggested: dict[tuple[str, ...], dict[str, Any]] | None = None,
        report: SearchReport | None = None,
    ) -> None:
        super().__init__()
        self.settings = settings = settings if settings is not None else SearchSettings()
        self.surrogate = surrogate
        self.expected_trials_per_task = expected_trials_per_task
        self.limits = limits if limits is not None else TaskLimits()
        self.seeds = seeds
        self.suggested = suggested
        self.report = report if report is not None else SearchReport()
        self.exploration = (
            ContextualExploration(surrogate, settings.max_exploration)
            if settings.exploration == "contextual" and surrogate is not None
            else None
        )
        self.context: Any = None
        self.inner: Any = None
        self.sampler: KMeansSampler | None = None
        self.stopper: EarlyStop
        self._make_components(dict(settings.early_stop_params), settings.kmeans_distance_ratio if settings.sampler == "kmeans" else None)
        self.rng = np.random.default_rng(settings.seed)
        self._features = CandidateFeatures()
        self._task: TaskSearchReport | None = None
        self.cap: int | None = None  # hard cap on measured candidates (suggested, fixed/no early stop)
        self.applied: dict[str, Any] | None = None  # what ``suggested`` gave this task
        self.transfer = TransferredSeeds(seeds)
        self._measured: set[int] = set()  # structural hashes of the programs this task measured
        self._ahead: Proposal | None = None  # the next batch, searched while the last one was measured
        self._in_flight = 0  # candidates of the batch handed out and not yet notified
        self._sampled_from: dict[int, int] = {}  # the batch in flight's Proposal.sampled_from
        self.task_class = ""  # the operator signature of the task's workload (what the effort is sized by)
        self._inners: dict[Effort, Any] = {}  # one inner search per effort used (see edgetune.search.effort)
        self._pre_tuning_args: tuple[Any, ...] = ()

    @property
    def contextual(self) -> bool:
        return self.exploration is not None

    def _make_components(self, early_stop_params: dict[str, Any], distance_ratio: float | None) -> None:
        """The early stop and the K-means sampler (``distance_ratio`` None: no sampling)."""
        self.stopper = make_early_stop(self.settings.early_stop, **early_stop_params)
        self.sampler = KMeansSampler(distance_ratio, seed=self.settings.seed) if distance_ratio is not None else None

    def _apply_suggested(self, context: Any) -> None:
        """This task's type's suggested settings, or the profile's (see the module docstring)."""
        from edgetune.tasks.signature import operator_signature

        settings = self.settings
        early_stop_params = dict(settings.early_stop_params)
        ratio = settings.kmeans_distance_ratio if settings.sampler == "kmeans" else None
        self.cap = None
        self.applied = None
        entry = None
        if self.suggested is not None:
            signature = operator_signature(context.mod)
            entry = self.suggested.get(signature)
            self.applied = {"operator": "+".join(signature), "from_history": entry is not None}
        if entry is not None:
            if settings.early_stop == "adaptive":
                early_stop_params["initial"] = int(entry["max_trials"])
            else:
                self.cap = int(entry["max_trials"])
            suggested_ratio = entry.get("kmeans_distance_ratio")
            if ratio is not None and suggested_ratio is not None:
                ratio = suggested_ratio or None  # 0: no ratio was safe, measure every candidate
        self._make_components(early_stop_params, ratio)

    # -- MetaSchedule hooks -------------------------------------------------------
    @property
    def sizer(self) -> EffortSizer | None:
        """The run's effort sizer, when this search can read its returns (it needs the random forest's scores)."""
        effort = self.report.effort
        return effort if effort is not None and hasattr(self.surrogate, "observing") else None

    def _make_inner(self, effort: Effort | None) -> Any:
        """MetaSchedule's evolutionary search at ``effort`` (None: the settings' population, MetaSchedule's depth)."""
        settings = self.settings
        population = effort.population if effort is not None else settings.population_size
        extra = {"genetic_num_iters": effort.iterations} if effort is not None else {}
        inner = ms.search_strategy.EvolutionarySearch(
            population_size=population,
            init_min_unmeasured=min(settings.init_min_unmeasured, population // 2) if effort is not None
            else settings.init_min_unmeasured,
            eps_greedy=0.0 if self.contextual else settings.eps_greedy,
            **extra,
        )
        inner._initialize_with_tune_context(self.context)  # pylint: disable=protected-access
        return inner

    def _inner_for(self, effort: Effort | None) -> Any:
        """The inner search of ``effort``, made and started at first use (None: the one made at initialisation)."""
        if effort is None:
            return self.inner
        inner = self._inners.get(effort)
        if inner is None:
            inner = self._inners[effort] = self._make_inner(effort)
            database, cost_model = self._pre_tuning_args
            # an inner search hands out the best programs it has not handed out itself: the ones another effort's
            # search handed out (measured since) can rank first, so it returns enough to fill a batch without them
            returned = self.batches_per_round * self.plan + math.ceil(0.2 * effort.population)  # init_measured_ratio
            inner.pre_tuning(1 << 30, returned, self.design_spaces, database, cost_model)
        return inner

    def _initialize_with_tune_context(self, context: Any) -> None:
        settings = self.settings
        self.context = context
        self.inner = self._make_inner(None)
        name = str(context.task_name) if context.task_name else "task"
        # str hashes change between processes; crc32 keeps a seed's random candidates reproducible
        self.rng = np.random.default_rng([settings.seed, zlib.crc32(name.encode())])
        self._apply_suggested(context)
        if self.report.lookahead is not None:
            self.report.lookahead.register(name, self)
        if self.sizer is not None:
            from edgetune.tasks.signature import operator_signature

            self.task_class = "+".join(operator_signature(context.mod))

    def pre_tuning(self, max_trials: int, num_trials_per_iter: int, design_spaces: Any, database: Any = None, cost_model: Any = None) -> None:
        self.plan = int(num_trials_per_iter)
        self.budget = int(max_trials)
        self.design_spaces = list(design_spaces)
        self._measured = set()
        self._ahead = None
        self._pre_tuning_args = (database, cost_model)
        # the inner search never ends a task by itself: this strategy does
        if self.sizer is None:
            self.inner.pre_tuning(1 << 30, self.batches_per_round * self.plan, design_spaces, database, cost_model)
        expected = self.expected_trials_per_task or int(max_trials)
        self.stopper.start(int(max_trials), self.plan, expected=expected)
        self._task = self.report.task(str(self.context.task_name))
        self._task.share = expected
        if self.applied is not None:
            self.report.suggested[str(self.context.task_name)] = {
                "task": str(self.context.task_name),
                **self.applied,
                "early_stop": self.settings.early_stop,
                # the adaptive rule's initial maximum (im) in effect, within the task's budget
                "early_stop_initial": self.stopper.floor_ if isinstance(self.stopper, AdaptiveEarlyStop) else None,
                "max_trials": self.cap,
                "kmeans_distance_ratio": self.sampler.distance_ratio if self.sampler is not None else None,
            }

    def post_tuning(self) -> None:
        if self.report.lookahead is not None and self._ahead is not None:
            self.report.lookahead.dropped += 1  # searched ahead for a task that ended first
        self._ahead = None
        if self.sizer is None:
            self.inner.post_tuning()
        for inner in self._inners.values():
            inner.post_tuning()
        self._inners = {}

    def generate_measure_candidates(self) -> list[MeasureCandidate] | None:
        started = time.perf_counter()
        try:
            batch = self._next_batch()
        finally:
            self.report.add_seconds(time.perf_counter() - started)
        if batch is None:  # the task's search ends: what the run kept for it goes back to the others
            self.limits.release(str(self.context.task_name))
        if self.report.lookahead is not None:  # MetaSchedule builds and runs it next: the runner knows whose it is
            self.report.lookahead.handed_out = str(self.context.task_name) if batch else None
        return batch

    def _next_batch(self) -> list[MeasureCandidate] | None:
        task, name = self._task, str(self.context.task_name)
        limit = self.limits.cap(name)
        if limit is not None:
            self.cap = limit if self.cap is None else min(self.cap, limit)
            task.capped = limit
        if task.proposed >= self.budget:
            return None
        if self.stopper.should_stop() and not self.limits.reserved(name):  # trials kept for it are searched first
            task.stopped_early = True
            task.early_stop_limit = self.stopper.limit
            return None
        outside = self.limits.measured_before(name)
        if self.cap is not None and task.measured + outside >= self.cap:
            task.stopped_early = True
            task.early_stop_limit = self.cap
            return None
        if self.limits.available(name) == 0:
            # the run's search budget is spent (or kept for tasks searched first): a proposal could not be measured,
            # and on a short run (the defaults and the library's schedules took nearly all) each costs a whole search
            return None
        proposal, self._ahead = self._ahead or self._propose(), None
        if proposal is None:
            return None
        pool, batch = proposal.pool, proposal.batch
        proposal.count_into(task)
        # the exploration's random samples and the transferred seeds can be the untuned code or a program
        # measured before, too
        batch = self._unmeasured(self.transfer.mix(self.context, batch, task))
        if not batch and pool:
            # all it proposed was measured before (a batch of one, at a short budget): fresh samples, so that an
            # empty batch below still means the run's budget is spent or the task has no program left to try
            batch = self._unmeasured(self.random_candidates(2 * len(pool) + 2))[: len(pool)]
        if self.cap is not None:
            batch = batch[: max(0, self.cap - task.measured - outside)]
        batch = batch[: self.limits.take(len(batch), name)]
        if not batch and pool:  # the run's search budget is spent: this task is done
            return None
        task.measured += len(batch)
        self._in_flight = len(batch)
        self._sampled_from = proposal.sampled_from
        return batch

    def _propose(self) -> Proposal | None:
        """The costly part of a batch: the evolutionary search, exploration and sampling (None: nothing left)."""
        pool = self._evolve()
        if pool is None:
            return None
        scratch = TaskSearchReport(str(self.context.task_name))  # counted into the task's report once handed out
        # the untuned code comes back from the database with postprocessing re-applied: it was measured
        # before the search (tuning.default_schedule), so a fresh sample takes its slot
        fresh = self._unmeasured(pool)
        if len(fresh) < min(len(pool), self.plan):
            missing = min(len(pool), self.plan) - len(fresh)
            # small design spaces (a reshape) sample the same programs often: draw more than the slots
            fresh += self._unmeasured(self.random_candidates(2 * missing + 2), fresh)[:missing]
        randoms = self.random_candidates(max(16, self.plan)) if self.exploration is not None else []
        batch: list[Any] = []
        sampled_from: dict[int, int] = {}
        # one round of evolution, sampled as the next rounds would have sampled it (see the module docstring)
        for index in range(self.batches_per_round):
            chunk = fresh[index * self.plan:(index + 1) * self.plan]
            # the task's budget caps what is proposed (the first batch was checked at hand-out)
            if not chunk or len(batch) >= self.plan or (index and self._task.proposed + scratch.proposed >= self.budget):
                break
            if self.exploration is not None:
                used = scratch.random_candidates
                chunk = self.exploration.mix(self.context, chunk, randoms, scratch)
                randoms = randoms[scratch.random_candidates - used:]  # mix takes the first ones
            scratch.proposed += len(chunk)
            if self.sampler is not None and len(chunk) > 1:
                chunk = [chunk[i] for i in self.sampler.select(self._features(self.context, chunk))]
            kept = self._unmeasured(chunk, batch)[: self.plan - len(batch)]
            sampled_from.update((structural_hash(c.sch.mod), index) for c in kept)
            batch += kept
        return Proposal(list(pool[: self.plan]), batch, scratch, sampled_from)

    @property
    def batches_per_round(self) -> int:
        """The batches one round of evolution proposes: with K-means sampling :data:`MAX_PROPOSAL_BATCHES`, else 1."""
        return MAX_PROPOSAL_BATCHES if self.sampler is not None and self.plan > 1 else 1

    def _evolve(self) -> list[Any] | None:
        """The inner evolutionary search's proposals, at the effort the task's class gets now (see :mod:`.effort`)."""
        sizer = self.sizer
        if sizer is None:
            return self.inner.generate_measure_candidates()
        # before the forest ranks anything its scores are random: evolving them buys nothing (see .effort)
        effort = sizer.effort(self.task_class, ranking=bool(getattr(self.surrogate, "ranks", True)))
        with self.surrogate.observing() as calls:
            pool = self._inner_for(effort).generate_measure_candidates()
        seed = int(self.rng.integers(1 << 30))
        sizer.observe(self.task_class, effort, round_returns(calls, self._measured, self.plan, seed=seed))
        return None if pool is None else list(pool)

    def search_ahead(self) -> list[Any] | None:
        """Propose the next batch now, while the last one is measured (:mod:`edgetune.search.lookahead`); its candidates.

        It is handed out by the next :meth:`generate_measure_candidates`, after the last batch's results came in:
        the checks that read them (early stop, caps, the run's budget, programs measured) are made then.
        None: a batch is waiting already, or the task's budget of proposals is spent.
        """
        if self._ahead is not None or self._task is None or self._ends_after_batch_in_flight():
            return None
        started = time.perf_counter()
        try:
            self._ahead = self._propose()
        finally:
            self.report.add_seconds(time.perf_counter() - started)
        return self._ahead.batch if self._ahead is not None else None

    def _ends_after_batch_in_flight(self) -> bool:
        """Whether, on what is known now, the task gets no batch after the one on the board: no search ahead then.

        The batch on the board is counted as measured; an early stop that its results could still put off
        counts as a stop (a search ahead saved is worth less than one wasted on a task that ends).
        """
        task, name = self._task, str(self.context.task_name)
        caps = [c for c in (self.cap, self.limits.cap(name)) if c is not None]
        cap = min(caps) if caps else None
        available = self.limits.available(name)
        return (
            task.proposed >= self.budget
            or (self.stopper.trials_ + self._in_flight >= self.stopper.limit and not self.limits.reserved(name))
            or (cap is not None and task.measured + self.limits.measured_before(name) >= cap)
            or (available is not None and available <= 0)
        )

    def _unmeasured(self, candidates: Any, taken: Sequence[Any] = ()) -> list[Any]:
        """``candidates`` less the untuned code and the programs this task measured or ``taken`` holds.

        A program twice in a batch, or again after it was measured, costs a board trial and teaches nothing.
        """
        seen = set(self._measured) | {structural_hash(c.sch.mod) for c in taken}
        fresh = []
        for candidate in candidates:
            if is_untuned_copy(candidate.sch.trace):
                continue
            key = structural_hash(candidate.sch.mod)
            if key not in seen:
                seen.add(key)
                fresh.append(candidate)
        return fresh

    def notify_runner_results(self, measure_candidates: Any, results: Any) -> None:
        self._in_flight = 0
        keys = [structural_hash(c.sch.mod) for c in measure_candidates]
        self._measured.update(keys)
        for inner in self._inners.values() if self.sizer is not None else [self.inner]:
            inner.notify_runner_results(measure_candidates, results)
        # the early stop sees the candidates sampled from each proposed batch as one batch, in the order proposed,
        # as it did when a round measured one sampled batch (transferred seeds and fresh samples: the first)
        groups: dict[int, list[Any]] = {}
        for key, result in zip(keys, results):
            groups.setdefault(self._sampled_from.get(key, 0), []).append(result)
        self._sampled_from = {}
        for index in sorted(groups) or [0]:
            group = groups.get(index, [])
            means = [float(np.mean([float(s) for s in r.run_secs])) for r in group if r.error_msg is None and r.run_secs]
            throughputs = [1.0 / m for m in means if is_valid_secs(m)]
            self.stopper.update(len(group), max(throughputs) if throughputs else None)
        self._task.early_stop_limit = self.stopper.limit

    def clone(self) -> AdaptiveSearch:
        return AdaptiveSearch(
            self.settings, surrogate=self.surrogate, expected_trials_per_task=self.expected_trials_per_task,
            limits=self.limits, seeds=self.seeds, suggested=self.suggested, report=self.report,
        )

    # -- random candidates ------------------------------------------------------------
    def random_candidates(self, count: int) -> list[Any]:
        """Fresh samples of the design spaces (decisions re-drawn, postprocessors applied)."""
        from tvm.s_tir import Schedule
        from tvm.s_tir.schedule import Trace

        postprocs = list(self.context.space_generator.postprocs or [])
        found: list[Any] = []
        for _ in range(4 * count):
            if len(found) >= count:
                break
            space = self.design_spaces[int(self.rng.integers(len(self.design_spaces)))]
            sch = Schedule(self.context.mod, seed=int(self.rng.integers(1, 1 << 30)), debug_mask="none")
            try:
                Trace(space.trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
                sch.enter_postproc()  # marks what follows, so a replay can drop it
                if not all(p.apply(sch) for p in postprocs):
                    continue
            except Exception:  # noqa: BLE001 - an invalid sample; draw another
                continue
            found.append(MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)))
        return found


def uses_adaptive_search(tuning: Any) -> bool:
    """Whether a profile's ``[tuning]`` asks for any component beyond stock evolutionary search."""
    return tuning.search_strategy == "evolutionary" and (
        tuning.sampler != "none"
        or tuning.early_stop != "none"
        or (tuning.exploration == "contextual" and tuning.cost_model == "rf")
    )


__all__ = [
    "AdaptiveSearch", "ContextualExploration", "SearchReport", "SearchSettings", "TaskLimits",
    "TaskSearchReport", "TransferredSeeds", "early_stop_params", "uses_adaptive_search",
]
