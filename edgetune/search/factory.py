"""Build MetaSchedule search components from names used in profiles and flags."""

from __future__ import annotations

from typing import Any

import tvm.s_tir.meta_schedule as ms

from ..common.choices import COST_MODELS, SEARCH_STRATEGIES, STOCK_SCHEDULERS, TASK_SCHEDULERS

#: bounds of the automatic evolutionary population (MetaSchedule's default is the upper one)
MIN_POPULATION, MAX_POPULATION = 64, 512
POPULATION_PER_CANDIDATE = 8


def _check(kind: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{kind} must be one of {', '.join(sorted(allowed))}, got {value!r} instead")


def make_cost_model(name: str, *, seed: int = 0, num_cores: int = 1, model_file: str = "",
                    meta_handoff_samples: int = 0) -> Any:
    """``xgb`` (MetaSchedule's XGBoost model, as in AutoTVM), ``rf`` (random
    forest ranking by expected improvement, as in AdaTune), ``meta`` (MetaTune,
    adapted from ``model_file`` or the bundled model; with ``meta_handoff_samples``
    it hands ranking over to the random forest as a task's measurements grow;
    needs edgetune[meta]) or ``random``."""
    _check("cost_model", name, COST_MODELS)
    if name == "meta":
        from ..costmodel.meta_model import MetaTuneModel

        return MetaTuneModel(model_file or None, handoff_samples=meta_handoff_samples, seed=seed)
    if name == "random":
        return ms.cost_model.RandomModel(seed=seed)
    if name == "rf":
        from ..costmodel.surrogate import RandomForestModel

        return RandomForestModel(seed=seed)
    return ms.cost_model.XGBModel(num_tuning_cores=num_cores, tree_method="auto")


def auto_population(num_trials_per_iter: int) -> int:
    """Evolutionary population for a batch size: 8 per candidate, within 64..512.

    MetaSchedule evolves 512 programs per batch whatever the batch size; 512 is
    8 per candidate of its default 64-candidate batch. edgetune keeps that
    ratio for the smaller batches boards need (8-16): on a 2-core host
    evolving 512 programs costs about 13 s per batch of 8 (1.7 s of host time
    per measured candidate), 64 programs about 1.8 s.
    """
    if num_trials_per_iter < 1:
        raise ValueError(f"num_trials_per_iter must be >= 1, got {num_trials_per_iter!r} instead")
    return max(MIN_POPULATION, min(MAX_POPULATION, POPULATION_PER_CANDIDATE * num_trials_per_iter))


def make_search_strategy(
    name: str,
    *,
    num_trials_per_iter: int = 64,
    population_size: int = 0,
    tuning: Any = None,
    surrogate: Any = None,
    expected_trials_per_task: int = 0,
    limits: Any = None,
    seeds: Any = None,
    suggested: dict[tuple[str, ...], dict[str, Any]] | None = None,
    report: Any = None,
) -> Any:
    """A search strategy by name; ``population_size=0`` sizes the evolution to the batch.

    With ``tuning`` (a profile's ``[tuning]`` settings) asking for sampling,
    early stop or contextual exploration, the evolutionary search is wrapped in
    :class:`~edgetune.search.strategy.AdaptiveSearch`; ``surrogate`` is the
    cost model object (contextual exploration reads its uncertainty).
    ``suggested`` (settings per task type from the history, see
    :func:`edgetune.search.suggest.settings_by_operator`) needs the wrapper
    too: each task's clone applies its own type's entry. Only the evolutionary
    search takes it, and ``seeds`` (candidates transferred from similar
    workloads for each task's first batch, see :mod:`edgetune.search.transfer`)
    and ``limits`` (:class:`~edgetune.search.strategy.TaskLimits`: caps of tasks
    worth little of the model, and what was measured before the search).
    """
    _check("search_strategy", name, SEARCH_STRATEGIES)
    if name != "evolutionary":
        return name
    if population_size < 0:
        raise ValueError(f"population_size must be >= 0, got {population_size!r} instead")
    population = population_size or auto_population(num_trials_per_iter)
    from .strategy import AdaptiveSearch, SearchSettings, uses_adaptive_search

    if suggested is not None and tuning is None:
        raise ValueError("suggested settings need the profile's tuning settings")
    # seeds and task caps ride on the adaptive search; with every reduction component off the
    # search stays stock MetaSchedule's, as the README promises for fixed/none/xgb
    if tuning is not None and (uses_adaptive_search(tuning) or suggested is not None):
        return AdaptiveSearch(
            SearchSettings.from_tuning(tuning, population),
            surrogate=surrogate if tuning.cost_model == "rf" else None,
            expected_trials_per_task=expected_trials_per_task,
            limits=limits,
            seeds=seeds,
            suggested=suggested,
            report=report,
        )
    return ms.search_strategy.EvolutionarySearch(
        population_size=population,
        init_min_unmeasured=min(50, population // 2),
    )


def make_task_scheduler(name: str, *, peak_gflops: float | None = None, seed: int = 0, **params: Any) -> Any:
    """``gradient`` (MetaSchedule's default), ``round-robin``, or edgetune's
    ``ucb`` / ``epsilon-greedy`` / ``softmax`` (:mod:`edgetune.search.scheduler`;
    ``params`` are their hyperparameters, ignored by the stock two).

    ``wait_for_results=True`` (a ``params`` key) makes edgetune's schedulers
    await each batch's measurements before the next batch is searched and
    built. ``edgetune tune`` sets it for the embedded loopback board, whose
    device is this host's CPU: there, candidates timed while the host compiles
    the next batch come out slow (benchmarks/RESULTS.md, trace replay section).
    The stock schedulers cannot be told: both time a batch while the next one
    is built (round-robin always, gradient whenever it picks another task)."""
    _check("task_scheduler", name, TASK_SCHEDULERS)
    if name in STOCK_SCHEDULERS:
        return ms.task_scheduler.TaskScheduler.create(name)
    from .scheduler import SCHEDULER_CLASSES

    return SCHEDULER_CLASSES[name](peak_gflops=peak_gflops, seed=seed, **params)
