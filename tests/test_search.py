"""Search components chosen by name, and the evolutionary population sized to the batch."""

from __future__ import annotations

import pytest
import tvm.s_tir.meta_schedule as ms

from edgetune.errors import ProfileError
from edgetune.profile import load_profile
from edgetune.search import make_cost_model, make_search_strategy, make_task_scheduler
from edgetune.search.factory import MAX_POPULATION, MIN_POPULATION, auto_population


@pytest.mark.parametrize(("batch", "population"), [(1, 64), (4, 64), (8, 64), (16, 128), (32, 256), (64, 512), (1000, 512)])
def test_auto_population_scales_with_the_batch_within_bounds(batch, population):
    assert auto_population(batch) == population
    assert MIN_POPULATION <= auto_population(batch) <= MAX_POPULATION


def test_auto_population_rejects_an_empty_batch():
    with pytest.raises(ValueError, match="must be >= 1, got 0 instead"):
        auto_population(0)


def test_evolutionary_strategy_uses_auto_or_explicit_population():
    auto = make_search_strategy("evolutionary", num_trials_per_iter=16)
    assert isinstance(auto, ms.search_strategy.EvolutionarySearch)
    assert auto.population_size == 128 and auto.init_min_unmeasured == 50
    assert make_search_strategy("evolutionary", num_trials_per_iter=64).population_size == 512  # stock
    explicit = make_search_strategy("evolutionary", num_trials_per_iter=8, population_size=80)
    assert explicit.population_size == 80 and explicit.init_min_unmeasured == 40
    assert make_search_strategy("replay-trace") == "replay-trace"


def test_unknown_names_are_rejected_with_the_choices():
    with pytest.raises(ValueError, match=r"cost_model must be one of meta, random, rf, xgb, got 'gbm' instead"):
        make_cost_model("gbm")
    with pytest.raises(ValueError, match="search_strategy must be one of"):
        make_search_strategy("annealing")
    with pytest.raises(ValueError, match="task_scheduler must be one of"):
        make_task_scheduler("lottery")


def test_components_are_metaschedule_objects():
    assert isinstance(make_cost_model("random", seed=3), ms.cost_model.CostModel)
    assert isinstance(make_task_scheduler("round-robin"), ms.task_scheduler.TaskScheduler)


def test_profile_population_size_is_validated():
    profile = load_profile("host")
    assert profile.tuning.population_size == 0
    assert profile.with_overrides(tuning={"population_size": 96}).tuning.population_size == 96
    with pytest.raises(ProfileError, match="population_size"):
        profile.with_overrides(tuning={"population_size": -1})
