"""An evolutionary search sized by what it returns (issue 55, point 3): the rule, and a tune that follows it."""

from __future__ import annotations

from contextlib import closing
from typing import Any

import numpy as np
import pytest

from edgetune.builder.builder import WarmBuilder
from edgetune.search.early_stop import EarlyStop
from edgetune.search.effort import Effort, EffortSizer, RoundReturns, round_returns, top_mean
from edgetune.search.strategy import AdaptiveSearch
from test_search_ahead import _matmul, _options


def test_an_iterations_return_is_the_rise_of_the_predicted_top_of_unmeasured_programs() -> None:
    # iteration 0: programs 1..4 (program 1 measured before); iteration 1 finds 5, better than all; iteration 2 only
    # repeats programs seen before, at the same predictions
    calls = [
        ([1, 2, 3, 4], np.array([0.9, 0.4, 0.2, 0.1])),
        ([2, 5, 3, 3], np.array([0.4, 0.8, 0.2, 0.2])),
        ([5, 2, 4, 1], np.array([0.8, 0.4, 0.1, 0.9])),
    ]
    returns = round_returns(calls, measured={1}, batch=2)
    # top 2 of the unmeasured: (0.4 + 0.2) / 2 -> (0.8 + 0.4) / 2 -> unchanged; program 1's 0.9 never counts
    assert returns.iterations == pytest.approx((1.0, 0.0))
    assert returns.population is None  # 3 unmeasured programs in the sample: too few for halves of a batch of 2
    assert round_returns([], measured=set(), batch=2) is None  # the cost model was warming up: nothing observed


def test_a_populations_return_is_what_its_last_doubling_bought() -> None:
    flat = [(list(range(64)), np.full(64, 0.5))]  # every sample predicted alike: half of it finds the same top
    assert round_returns(flat, set(), batch=4).population == pytest.approx(0.0)
    spread = [(list(range(64)), np.linspace(0.0, 1.0, 64))]  # one half misses some of the best: the whole sample gains
    assert round_returns(spread, set(), batch=4, seed=3).population > 0.01
    assert top_mean([0.1, 0.9, 0.5], 2) == pytest.approx(0.7) and top_mean([], 3) == 0.0


def test_the_depth_stops_at_the_first_iteration_that_does_not_pay_and_grows_while_all_pay() -> None:
    assert EffortSizer(64).effort("conv") == Effort(64, 4)  # MetaSchedule's depth, the batch's population
    # the rule, from classes started at two iterations (benchmarks/host_time.py --start-iterations 2)
    sizer = EffortSizer(64, min_return=0.02, smoothing=1.0, start_iterations=2)
    start = sizer.effort("conv")
    assert start == Effort(64, 2)
    # the second iteration returned nothing: the next round runs it once more (to see if it pays again), no deeper
    assert sizer.observe("conv", start, RoundReturns((0.3, 0.001), None)).iterations == 2
    # the first iteration returned nothing: one iteration, still measured
    assert sizer.observe("pool", start, RoundReturns((0.001, 0.0), None)).iterations == 1
    # every iteration measured pays: one deeper than measured, round after round
    deeper = sizer.observe("dense", start, RoundReturns((0.3, 0.1), None))
    assert deeper.iterations == 3
    deeper = sizer.observe("dense", deeper, RoundReturns((0.3, 0.1, 0.05), None))
    assert deeper.iterations == 4
    deeper = sizer.observe("dense", deeper, RoundReturns((0.3, 0.1, 0.05, 0.04), None))
    assert deeper.iterations == 5
    assert sizer.observe("dense", deeper, RoundReturns((0.3, 0.1, 0.05, 0.04, 0.03), None)).iterations == 6
    # classes are apart; a round with nothing observed leaves its class as it was
    assert sizer.effort("other") == start
    assert sizer.observe("conv", Effort(64, 2), None).iterations == 2


def test_the_population_halves_where_it_returns_little_and_stays_within_its_bounds() -> None:
    sizer = EffortSizer(64, min_population=16, max_population=64, min_return=0.02, smoothing=1.0)
    effort = sizer.effort("pool")
    for expected in (32, 16, 16):  # a doubling that bought nothing: halved down to the floor
        effort = sizer.observe("pool", effort, RoundReturns((0.0,), 0.0))
        assert effort.population == expected
    # a large return doubles it again, never past the ceiling
    assert sizer.observe("pool", effort, RoundReturns((0.0,), 0.5)).population == 32
    assert sizer.observe("pool", Effort(64, 1), RoundReturns((0.0,), 0.5)).population == 64
    report = sizer.to_dict()["classes"]["pool"]
    assert report["rounds"] == 1 and report["rounds_observed"] == 5 and report["population"] == 64
    assert report["programs_evaluated"] == 64 * 5  # the one round handed out: population x (iterations + 1)


def test_before_the_cost_model_ranks_a_round_is_the_initial_sample_alone() -> None:
    sizer = EffortSizer(64, min_population=16, smoothing=1.0)
    # the forest's warm-up: its scores are random, so evolving them is a walk that buys nothing
    assert sizer.effort("conv", ranking=False) == Effort(16, 0) == sizer.warmup
    assert sizer.observe("conv", Effort(16, 0), None) == Effort(64, 4)  # nothing observed: the class keeps its effort
    assert sizer.effort("conv", ranking=True) == Effort(64, 4)  # once it ranks, the class's own effort
    report = sizer.to_dict()["classes"]["conv"]
    assert report["rounds"] == 2 and report["warmup_rounds"] == 1 and report["rounds_observed"] == 0
    assert report["programs_evaluated"] == 16 + 64 * 5
    assert EffortSizer(8, min_population=8).warmup == Effort(8, 0)  # never above the batch's own population


def test_the_random_forest_ranks_from_its_warmup_samples_on() -> None:
    from edgetune.costmodel.surrogate import RandomForestModel

    model = RandomForestModel(num_warmup_samples=4)
    assert not model.ranks
    model.add_measured("t", np.ones((3, 5)), [1e-3, 2e-3, 3e-3])
    assert not model.ranks  # 3 of 4: predict still answers random scores
    model.add_measured("u", np.ones((1, 5)), [1e-3])
    assert model.ranks


@pytest.mark.parametrize("bad, match", [
    (dict(min_population=1), "min_population"), (dict(min_return=-1.0), "min_return"),
    (dict(max_iterations=0), "max_iterations"), (dict(smoothing=0.0), "smoothing"),
    (dict(start_iterations=0), "start_iterations"),
])
def test_bad_settings_say_what_they_must_be(bad: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=f"{match} must be"):
        EffortSizer(64, **bad)


def _spy_on_inner_searches(monkeypatch: pytest.MonkeyPatch) -> list[Effort | None]:
    made: list[Effort | None] = []
    original = AdaptiveSearch._cls._make_inner  # the Python class behind MetaSchedule's derived object

    def spy(self: AdaptiveSearch, effort: Effort | None) -> Any:
        inner = original(self, effort)
        if effort is not None:  # the effort the inner MetaSchedule search was really made with
            made.append(Effort(int(inner.population_size), int(inner.genetic_num_iters)))
        return inner

    monkeypatch.setattr(AdaptiveSearch._cls, "_make_inner", spy)
    return made


def test_a_tune_sizes_each_round_by_its_returns_and_measures_every_trial(tmp_path, loopback_board, monkeypatch) -> None:
    from edgetune.tuning import Components, run_tune

    made = _spy_on_inner_searches(monkeypatch)
    with closing(WarmBuilder(timeout_sec=60, max_workers=1)) as builder:
        # any return below 1000% is too little: after the forest's warm-up the rounds shrink to one iteration
        options = _options(tmp_path / "returns", loopback_board, 24, sampler="none", population_size=32,
                           search_min_return=10.0)
        summary = run_tune(options, components=Components(tasks=[("mm", _matmul(48), 1)], builder=builder))
    # the smaller searches still fill the batches (a 48x48 matmul has few programs: one may come a candidate short)
    assert summary.trials.this_run >= 22, summary.trials
    (effort,) = summary.search.effort["classes"].values()
    # 6 batches of 4 (one more searched ahead may end unused); the forest ranks from its 8th measurement on
    assert effort["rounds"] >= 6 and effort["rounds_observed"] >= 2, effort
    assert effort["iterations"] == 1 and effort["population"] == 16, effort
    # before that its scores are random: the first batches are the initial sample alone, at the smallest population
    assert effort["warmup_rounds"] >= 1 and made[0] == Effort(16, 0), (effort, made)
    # then the class's effort: the batch's population at MetaSchedule's depth, cut by the returns
    assert Effort(32, 4) in made and Effort(16, 1) in made, made  # MetaSchedule's search made at each effort
    assert summary.search.effort["start"] == {"population": 32, "iterations": 4}
    assert summary.search.population_size == 32


def test_a_fixed_effort_keeps_metaschedules_search(tmp_path, loopback_board, monkeypatch) -> None:
    from edgetune.tuning import Components, run_tune

    made = _spy_on_inner_searches(monkeypatch)
    with closing(WarmBuilder(timeout_sec=60, max_workers=1)) as builder:
        options = _options(tmp_path / "fixed", loopback_board, 8, sampler="none", search_effort="fixed")
        summary = run_tune(options, components=Components(tasks=[("mm", _matmul(48), 1)], builder=builder))
    assert summary.trials.this_run == 8 and summary.search.effort is None and made == []


def test_a_round_whose_sampling_keeps_little_fills_its_batch_from_the_next_proposed_batches(
        tmp_path, loopback_board, monkeypatch) -> None:
    # K-means sampling keeps about a third of a batch: a round of evolution that measured only that cost the host
    # ~85 evolved programs per measured trial; one round now proposes several batches and measures a full one
    from edgetune.search.sampling import KMeansSampler
    from edgetune.tuning import Components, run_tune

    clustered: list[int] = []

    def keep_one(self: KMeansSampler, features: np.ndarray) -> list[int]:  # every batch is one cluster
        clustered.append(len(features))
        return [0]

    monkeypatch.setattr(KMeansSampler, "select", keep_one)
    made = _spy_on_inner_searches(monkeypatch)
    handed_out: list[int] = []
    original = AdaptiveSearch._cls._next_batch

    def spy(self: AdaptiveSearch) -> Any:
        batch = original(self)
        if batch:
            handed_out.append(len(batch))
        return batch

    monkeypatch.setattr(AdaptiveSearch._cls, "_next_batch", spy)
    judged: list[int] = []
    update = EarlyStop.update

    def judge(self: EarlyStop, trials: int, batch_best: float | None) -> None:
        judged.append(trials)
        update(self, trials, batch_best)

    monkeypatch.setattr(EarlyStop, "update", judge)
    with closing(WarmBuilder(timeout_sec=60, max_workers=1)) as builder:
        # the run's budget (which also bounds a task's proposals) does not bind: the task's cap of 8 measured does
        options = _options(tmp_path / "kmeans", loopback_board, 64, sampler="kmeans", population_size=32,
                           max_trials_per_task=8)
        summary = run_tune(options, components=Components(tasks=[("mm", _matmul(48), 1)], builder=builder))
    # each proposed batch of 4 was clustered on its own and kept one: four proposed batches make one measured batch
    assert clustered and all(n > 1 for n in clustered), clustered
    assert handed_out == [4, 4] and summary.trials.this_run == 8, (handed_out, summary.trials)
    # the early stop still judged what each proposed batch kept as a batch of its own
    assert judged == [1] * 8, judged
    # the host evolved once per measured batch, not once per kept candidate
    (effort,) = summary.search.effort["classes"].values()
    assert made and effort["rounds"] <= len(handed_out) + 1 < summary.trials.this_run, (effort, handed_out)
