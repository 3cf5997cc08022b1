"""Build MetaSchedule search components from names used in profiles and flags."""

from __future__ import annotations

from typing import Any

import tvm.s_tir.meta_schedule as ms

from ..profile import COST_MODELS, SEARCH_STRATEGIES, TASK_SCHEDULERS

#: bounds of the automatic evolutionary population (MetaSchedule's default is the upper one)
MIN_POPULATION, MAX_POPULATION = 64, 512
POPULATION_PER_CANDIDATE = 8


def _check(kind: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{kind} must be one of {', '.join(sorted(allowed))}, got {value!r} instead")


def make_cost_model(name: str, *, seed: int = 0, num_cores: int = 1) -> Any:
    """``xgb`` (MetaSchedule's XGBoost model, as in AutoTVM) or ``random``."""
    _check("cost_model", name, COST_MODELS)
    if name == "random":
        return ms.cost_model.RandomModel(seed=seed)
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


def make_search_strategy(name: str, *, num_trials_per_iter: int = 64, population_size: int = 0) -> Any:
    """A search strategy by name; ``population_size=0`` sizes the evolution to the batch."""
    _check("search_strategy", name, SEARCH_STRATEGIES)
    if name != "evolutionary":
        return name
    if population_size < 0:
        raise ValueError(f"population_size must be >= 0, got {population_size!r} instead")
    population = population_size or auto_population(num_trials_per_iter)
    return ms.search_strategy.EvolutionarySearch(
        population_size=population,
        init_min_unmeasured=min(50, population // 2),
    )


def make_task_scheduler(name: str) -> Any:
    """``gradient`` (MetaSchedule's default) or ``round-robin``."""
    _check("task_scheduler", name, TASK_SCHEDULERS)
    return ms.task_scheduler.TaskScheduler.create(name)
