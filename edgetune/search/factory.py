"""Build MetaSchedule search components from names used in profiles and flags."""

from __future__ import annotations

from typing import Any

import tvm.s_tir.meta_schedule as ms

from ..profile import COST_MODELS, SEARCH_STRATEGIES, TASK_SCHEDULERS


def _check(kind: str, value: str, allowed: tuple[str, ...] | frozenset[str] | list[str]) -> None:
    if value not in allowed:
        raise ValueError(f"{kind} must be one of {', '.join(sorted(allowed))}, got {value!r} instead")


def make_cost_model(name: str, *, seed: int = 0, num_cores: int = 1) -> Any:
    """``xgb`` (MetaSchedule's XGBoost model, as in AutoTVM) or ``random``."""
    _check("cost_model", name, COST_MODELS)
    if name == "random":
        return ms.cost_model.RandomModel(seed=seed)
    # The stock default prints XGBoost's evaluation log every 25 rounds into the
    # task logs; keep it, but train on as many cores as the host has.
    return ms.cost_model.XGBModel(num_tuning_cores=num_cores, tree_method="auto")


def make_search_strategy(name: str) -> str:
    """Stock strategy names (``evolutionary``, ``replay-trace``, ``replay-func``)."""
    _check("search_strategy", name, SEARCH_STRATEGIES)
    return name


def make_task_scheduler(name: str) -> Any:
    """``gradient`` (MetaSchedule's default) or ``round-robin``."""
    _check("task_scheduler", name, TASK_SCHEDULERS)
    return ms.task_scheduler.TaskScheduler.create(name)
