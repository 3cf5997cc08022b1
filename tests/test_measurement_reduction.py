"""Components that cut on-device trials, on synthetic objectives with known answers.

Adaptive evaluator (AdaTune §4.1), K-means sampling and adaptive early stop
(early-stop paper §II.B-C), expected improvement (AdaTune §4.2). The tests
through the real loopback board are in test_measurement_reduction_board.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgetune.measure.evaluator import PROBE_RUNS, STOCK_RUNS, AdaptiveEvaluator, cumulative_cv, mean_ci_halfwidth
from edgetune.search.early_stop import AdaptiveEarlyStop, EarlyStop, FixedEarlyStop, make_early_stop
from edgetune.search.sampling import KMeansSampler
from edgetune.costmodel.surrogate import RandomForestModel, aggregate_features, expected_improvement


# --------------------------------------------------------------------------- adaptive evaluator
class NoisyTimer:
    """Single-run times of a kernel of ``mean_sec``; counts remote calls.

    ``batch_sigma`` is the spread of a factor shared by all runs of one call
    (background load that comes and goes between micro-batches);
    ``run_sigma`` the independent jitter of each run.
    """

    def __init__(self, mean_sec: float, batch_sigma: float = 0.0, run_sigma: float = 0.01, seed: int = 0) -> None:
        self.mean_sec, self.batch_sigma, self.run_sigma = mean_sec, batch_sigma, run_sigma
        self.rng = np.random.default_rng(seed)
        self.calls: list[int] = []

    def __call__(self, count: int) -> list[float]:
        self.calls.append(count)
        factor = self.rng.lognormal(0.0, self.batch_sigma)
        return list(self.mean_sec * factor * self.rng.lognormal(0.0, self.run_sigma, size=count))


def test_cumulative_cv_matches_hand_computation():
    batches = [[1.0, 1.0], [3.0, 3.0]]  # cumulative throughputs 2/2 and 4/8
    perf = np.array([1.0, 0.5])
    assert cumulative_cv(batches) == pytest.approx(perf.std() / perf.mean())
    assert cumulative_cv([[2e-3] * 5] * 3) == pytest.approx(0.0, abs=1e-12)
    assert cumulative_cv([[1e-3] * 50]) == math.inf  # one micro-batch: nothing to compare


def test_quiet_timer_stops_after_two_micro_batches():
    timer = NoisyTimer(1e-4, batch_sigma=0.005)
    result = AdaptiveEvaluator(micro_batch=50, max_runs=500, cv_threshold=0.10).measure(timer)
    assert result.runs == 100 and result.stopped_by == "cv" and result.micro_batches == 2
    assert timer.calls == [50, 50]  # one remote call per micro-batch, not per run
    assert result.cv < 0.10
    assert result.mean_sec == pytest.approx(1e-4, rel=0.02)


def test_noisy_timer_gets_more_runs_and_hits_the_cap_when_never_stable():
    evaluator = AdaptiveEvaluator(micro_batch=50, max_runs=500, cv_threshold=0.10)
    quiet = [evaluator.measure(NoisyTimer(1e-4, batch_sigma=0.01, seed=s)).runs for s in range(10)]
    noisy = [evaluator.measure(NoisyTimer(1e-4, batch_sigma=0.6, seed=s)).runs for s in range(10)]
    assert quiet == [100] * 10
    assert np.mean(noisy) > 150 and min(noisy) >= 100
    hopeless = AdaptiveEvaluator(micro_batch=50, max_runs=200, cv_threshold=1e-6).measure(NoisyTimer(1e-4, 0.5))
    assert hopeless.runs == 200 and hopeless.stopped_by == "cap" and hopeless.micro_batches == 4


def test_floor_is_respected():
    timer = NoisyTimer(1e-4)
    result = AdaptiveEvaluator(micro_batch=10, max_runs=100, cv_threshold=0.1, min_runs=40).measure(timer)
    assert result.runs == 40 and timer.calls == [10, 10, 10, 10]


def test_time_bounded_micro_batches_for_slow_kernels():
    """A 10 ms kernel: a 3-run probe, then micro-batches of at most 25 ms (3 runs)."""
    timer = NoisyTimer(10e-3, run_sigma=0.001)
    result = AdaptiveEvaluator(micro_batch=50, max_runs=500, cv_threshold=0.1, micro_batch_ms=25).measure(timer)
    assert timer.calls == [PROBE_RUNS, 3, 3]
    assert result.runs == PROBE_RUNS + 6 and result.probe_runs == PROBE_RUNS and len(result.run_secs) == 6
    fast = NoisyTimer(1e-5, run_sigma=0.001)  # sub-ms kernels still get the paper's full micro-batch
    AdaptiveEvaluator(micro_batch=50, max_runs=500, cv_threshold=0.1, micro_batch_ms=25).measure(fast)
    assert fast.calls == [PROBE_RUNS, 50, 50]


def test_device_time_budget_stops_a_never_stable_2ms_kernel_near_stocks_cost():
    """The issue-17 case: a 2 ms kernel on a noisy board used to run to the 500-run cap (about 1 s)."""
    settings = dict(micro_batch=50, max_runs=500, cv_threshold=0.03, micro_batch_ms=25)
    unbounded = AdaptiveEvaluator(**settings).measure(NoisyTimer(2e-3, batch_sigma=0.5, seed=1))
    assert unbounded.stopped_by == "cap" and unbounded.runs == 500
    timer = NoisyTimer(2e-3, batch_sigma=0.5, seed=1)
    bounded = AdaptiveEvaluator(**settings, budget_ms=100).measure(timer)
    assert bounded.stopped_by == "budget" and bounded.micro_batches >= 2
    assert bounded.runs < unbounded.runs / 5
    # it stops after the micro-batch that crossed 100 ms (micro-batches hold about 25 ms)
    assert 0.1 - 0.05 <= sum(bounded.run_secs) <= 0.1 + 0.1
    # a slow kernel's budget is stock's cost (its warm-up and 3 runs): the probe's run, one more run and
    # the untimed warm-up of each of the two calls
    slow = AdaptiveEvaluator(**settings, budget_ms=100, stop_rule="auto").measure(NoisyTimer(80e-3, batch_sigma=0.5, seed=1))
    assert slow.stopped_by == "budget" and slow.runs == 2 and slow.micro_batches == 2 and slow.probe_runs == 0
    assert 2 * slow.runs == STOCK_RUNS
    # a quiet candidate still stops on the CV, before the budget
    quiet = AdaptiveEvaluator(**settings, budget_ms=100).measure(NoisyTimer(2e-3, batch_sigma=0.001))
    assert quiet.stopped_by == "cv"


@pytest.mark.parametrize("run_ms", [0.01, 0.5, 2.0, 10.0, 30.0, 80.0, 200.0])
def test_a_candidate_never_costs_more_device_time_than_stocks_evaluator(run_ms):
    """Stock (number=3, min_repeat_ms=100, one warm-up) spends about max(100 ms, 3 runs) plus a run.

    The profile's evaluator (CI/CV rule, 25 ms micro-batches, 100 ms budget) on
    a noisy board never spends more than that (beyond the small error of
    predicting a micro-batch from the runs before it), at every kernel length.
    """
    evaluator = AdaptiveEvaluator(micro_batch=50, max_runs=500, cv_threshold=0.03, micro_batch_ms=25, budget_ms=100, stop_rule="auto")
    stock = max(0.1, 3 * run_ms / 1e3) + run_ms / 1e3
    for seed in range(5):
        timer = NoisyTimer(run_ms / 1e3, batch_sigma=0.2, run_sigma=0.05, seed=seed)
        spent: list[float] = []

        def time_runs(count: int) -> list[float]:
            times = timer(count + 1)  # as TVM's time_evaluator: one untimed warm-up run per call
            spent.extend(times)
            return times[1:]

        evaluator.measure(time_runs)
        assert sum(spent) <= 1.25 * stock, (seed, sum(spent), stock)
        # and within the budget it is given: max(100 ms, stock's 4 runs)
        assert sum(spent) <= 1.25 * max(0.1, 4 * run_ms / 1e3), (seed, sum(spent))


def test_mean_ci_halfwidth_matches_hand_computation():
    runs = [1.0, 2.0, 3.0, 4.0]  # mean 2.5, sample std 1.29099, t(0.975, 3) = 3.18245
    assert mean_ci_halfwidth(runs) == pytest.approx(3.18245 * 1.290994 / 2 / 2.5, rel=1e-4)
    assert mean_ci_halfwidth([1.0]) == math.inf
    assert mean_ci_halfwidth([2e-3] * 6) == pytest.approx(0.0, abs=1e-12)


def test_ci_rule_knows_a_long_kernels_mean_where_the_cv_rule_guesses():
    """10 ms kernels with 8 % single-run jitter: micro-batches of 3 runs make the CV rule stop on luck.

    Over 100 candidates the CV rule's estimate misses the true mean by more
    than 3 % far more often than the CI rule's, which is built to miss in about
    5 % of cases (a 95 % interval of +-3 %).
    """
    def misses(rule: str) -> tuple[float, float]:
        errors, runs = [], []
        for seed in range(100):
            evaluator = AdaptiveEvaluator(micro_batch=50, max_runs=500, cv_threshold=0.03, micro_batch_ms=25, stop_rule=rule)
            result = evaluator.measure(NoisyTimer(10e-3, run_sigma=0.08, seed=seed))
            assert result.stopped_by == rule
            errors.append(abs(result.mean_sec / (10e-3 * math.exp(0.08**2 / 2)) - 1))
            runs.append(result.runs)
        return float(np.mean(np.array(errors) > 0.03)), float(np.mean(runs))

    cv_miss, cv_runs = misses("cv")
    ci_miss, ci_runs = misses("ci")
    assert cv_miss > 0.2 and ci_miss <= 0.08
    assert ci_runs > cv_runs  # the honest answer costs runs; measure.budget_ms bounds them


def test_auto_rule_uses_the_ci_for_long_kernels_and_the_cv_for_short_ones():
    settings = dict(micro_batch=50, max_runs=500, cv_threshold=0.03, micro_batch_ms=25, stop_rule="auto")
    long_kernel = AdaptiveEvaluator(**settings).measure(NoisyTimer(10e-3, run_sigma=0.005))
    short_kernel = AdaptiveEvaluator(**settings).measure(NoisyTimer(1e-5, run_sigma=0.005))
    assert long_kernel.stopped_by == "ci" and short_kernel.stopped_by == "cv"
    # a drift between the two micro-batches is still seen: no stop on the first agreeing pair
    assert long_kernel.micro_batches >= 2 and short_kernel.micro_batches >= 2


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"stop_rule": "median"}, "stop_rule must be one of auto, cv, ci, got 'median' instead"),
        ({"ci_threshold": 0}, "ci_threshold must be > 0"),
        ({"budget_ms": -1}, "budget_ms must be >= 0"),
        ({"micro_batch": 0}, "micro_batch must be >= 1, got 0 instead"),
        ({"micro_batch": 50, "max_runs": 60}, "max_runs must be >= 2 x micro_batch"),
        ({"cv_threshold": 0}, "cv_threshold must be > 0"),
        ({"min_runs": 1000}, "min_runs must be within"),
    ],
)
def test_evaluator_rejects_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AdaptiveEvaluator(**kwargs)


# --------------------------------------------------------------------------- K-means sampling
def blobs(centres: list[list[float]], per: int, spread: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.vstack([np.asarray(c) + rng.normal(0, spread, size=(per, len(c))) for c in centres])


def test_kmeans_keeps_one_candidate_per_cluster_nearest_its_centre():
    centres = [[0, 0, 0, 0], [10, 0, 0, 0], [0, 10, 0, 10]]
    points = blobs(centres, per=5, spread=0.3)
    sampler = KMeansSampler(distance_ratio=0.1)
    keep = sampler.select(points)
    assert len(keep) == 3
    assert sorted(i // 5 for i in keep) == [0, 1, 2]  # one per blob
    for index in keep:  # the member nearest its blob's mean
        blob = points[(index // 5) * 5 : (index // 5) * 5 + 5]
        nearest = int(np.argmin(((blob - blob.mean(axis=0)) ** 2).sum(axis=1)))
        assert index == (index // 5) * 5 + nearest
    assert sampler.reports_[-1].removed_fraction == pytest.approx(12 / 15)
    assert sampler.removed_fraction_ == pytest.approx(12 / 15)


def test_kmeans_threshold_rule_picks_the_smallest_k_under_the_ratio():
    points = blobs([[0, 0], [10, 0], [0, 10], [10, 10]], per=4, spread=0.5, seed=3)
    assert KMeansSampler(distance_ratio=0.05).choose_k(points)[0] == 4
    # a loose threshold is met with fewer clusters than there are blobs
    assert KMeansSampler(distance_ratio=0.6).choose_k(points)[0] < 4


def test_kmeans_keeps_diverse_batches_and_collapses_duplicates():
    diverse = np.eye(8) * 5.0  # eight equidistant candidates
    assert len(KMeansSampler(distance_ratio=0.3).select(diverse)) >= 6
    same = np.ones((6, 4))
    assert KMeansSampler().select(same) == [0]
    with pytest.raises(ValueError, match="distance_ratio must be > 0"):
        KMeansSampler(distance_ratio=0)


# --------------------------------------------------------------------------- early stop
def test_adaptive_early_stop_follows_the_update_rule_step_by_step():
    """M moves by clip(ir*M*(r-1), lb, ub) up and clip(dr*M*(1-r), lb, ub) down,
    never below im nor the trials done, never above the budget."""
    rule = AdaptiveEarlyStop(initial=16, increment=1.0, decrement=0.5, flops_ratio=0.1, min_step=8, max_step=32)
    rule.start(budget=128, plan_size=8)
    script = [  # batches of 4 trials: (batch best, expected ratio, expected M after the update)
        (100.0, None, 16),  # first batch: nothing to compare with
        (150.0, 1.5, 16 + 8),  # 50 % better: +ceil(1.0 * 16 * 0.5) = +8
        (140.0, 140 / 150, 24),  # within fr = 10 % of the best: unchanged
        (240.0, 1.6, 24 + 15),  # 60 % better: +ceil(1.0 * 24 * 0.6) = +15
        (242.4, 1.01, 39 + 8),  # 1 % better: +ceil(0.39) = 1, raised to lb = 8
        (100.0, 100 / 242.4, 47 - 14),  # 59 % worse: -ceil(0.5 * 47 * 0.5875) = -14
        (200.0, 200 / 242.4, 28),  # 17.5 % worse: -ceil(2.9) raised to lb: 25, but 28 trials are done
    ]
    for step, (batch_best, ratio, limit) in enumerate(script, start=1):
        rule.update(4, batch_best)
        assert rule.steps_[-1].ratio == (None if ratio is None else pytest.approx(ratio)), step
        assert rule.max_trials_ == limit, step
    assert rule.trials_ == 28 and rule.should_stop()
    assert rule.best_ == 242.4


def test_adaptive_early_stop_never_goes_below_its_initial_maximum():
    rule = AdaptiveEarlyStop(initial=24, flops_ratio=0.05)
    rule.start(budget=64, plan_size=8)
    rule.update(8, 100.0)
    rule.update(8, 10.0)  # a terrible second batch: the cost model barely has data yet
    assert rule.max_trials_ == 24 and not rule.should_stop()
    rule.update(8, 10.0)
    assert rule.should_stop() and rule.trials_ == 24


def test_adaptive_early_stop_stops_when_batches_get_worse_and_respects_the_budget():
    rule = AdaptiveEarlyStop(initial=16, flops_ratio=0.05)
    rule.start(budget=64, plan_size=8)
    rule.update(8, 100.0)
    rule.update(8, 300.0)  # +16: M = 32
    rule.update(8, 100.0)  # clearly worse: the extension is taken back down to the trials done
    assert rule.max_trials_ == 24 and rule.should_stop()
    growing = AdaptiveEarlyStop(initial=16, max_step=64)
    growing.start(budget=40, plan_size=8)
    for k in range(10):
        growing.update(8, 100.0 * 2**k)
        if growing.should_stop():
            break
    assert growing.trials_ == 40 and growing.max_trials_ == 40  # capped by the budget


def test_fixed_early_stop_waits_patience_trials_without_improvement():
    rule = FixedEarlyStop(patience=16)
    rule.start(budget=100, plan_size=8)
    for best, stop in [(10.0, False), (12.0, False), (11.0, False), (11.5, True)]:
        rule.update(8, best)
        assert rule.should_stop() is stop
    assert rule.trials_ == 32 and rule.limit == 16 + 16


def test_adaptive_stops_sooner_than_fixed_after_a_drop():
    """The paper's motivation: a performance drop after the optimum is found."""
    script = [100.0, 120.0, 121.0, 40.0, 35.0, 30.0, 30.0, 30.0, 30.0, 30.0]
    used = {}
    for rule in (AdaptiveEarlyStop(initial=48), FixedEarlyStop(patience=48)):
        rule.start(budget=200, plan_size=8)
        for best in script:
            if rule.should_stop():
                break
            rule.update(8, best)
        used[rule.name] = rule.trials_
    assert used["adaptive"] < used["fixed"]


def test_none_rule_runs_to_the_budget_and_bad_parameters_are_refused():
    rule = make_early_stop("none")
    assert type(rule) is EarlyStop
    rule.start(budget=16, plan_size=8)
    rule.update(8, 1.0)
    assert not rule.should_stop()
    rule.update(8, 0.5)
    assert rule.should_stop()
    with pytest.raises(ValueError, match="flops_ratio must be within"):
        AdaptiveEarlyStop(flops_ratio=1.5)
    with pytest.raises(ValueError, match="early_stop must be one of"):
        make_early_stop("sometimes")


# --------------------------------------------------------------------------- expected improvement
def test_expected_improvement_closed_form_and_monte_carlo():
    # mu == best: EI = sigma * phi(0)
    assert expected_improvement(np.array([1.0]), np.array([0.2]), best=1.0)[0] == pytest.approx(0.2 / math.sqrt(2 * math.pi))
    # sigma == 0: max(0, mu - best)
    assert list(expected_improvement(np.array([1.5, 0.5]), np.array([0.0, 0.0]), best=1.0)) == [0.5, 0.0]
    rng = np.random.default_rng(0)
    for mu, sigma in [(0.8, 0.3), (1.2, 0.1), (0.5, 0.05)]:
        samples = rng.normal(mu, sigma, size=400_000)
        monte_carlo = np.maximum(samples - 1.0, 0).mean()
        assert expected_improvement(np.array([mu]), np.array([sigma]), 1.0)[0] == pytest.approx(monte_carlo, rel=0.02, abs=1e-5)


def test_expected_improvement_prefers_uncertainty_at_equal_mean():
    ei = expected_improvement(np.array([0.9, 0.9]), np.array([0.01, 0.3]), best=1.0)
    assert ei[1] > ei[0] > 0


def test_aggregate_features_is_fixed_length():
    per_store = np.array([[1.0, 2.0], [3.0, 0.0]])
    assert list(aggregate_features(per_store)) == [4.0, 2.0, 3.0, 2.0, 2.0]
    assert aggregate_features(np.zeros((0, 2))).shape == (5,)


# --------------------------------------------------------------------------- the forest's training set
def _forest_with_tasks(sizes: dict[str, int], **kwargs) -> RandomForestModel:
    """A forest holding ``sizes[task]`` synthetic records per task; latency falls with feature 0."""
    model = RandomForestModel(n_estimators=4, seed=0, **kwargs)
    rng = np.random.default_rng(1)
    for index, (task, size) in enumerate(sizes.items()):
        rows = np.column_stack([rng.uniform(size=size), np.full(size, float(index))])
        model.add_measured(task, rows, list(1e-3 * (2.0 - rows[:, 0])))
    return model


def test_below_the_cap_one_forest_is_fitted_on_every_record_and_reused_until_records_come():
    model = _forest_with_tasks({"a": 30, "b": 20}, max_train_samples=64)
    x, y = model.training_set(None)
    assert x.shape == (50, 2) and y.max() == pytest.approx(1.0)
    model.predict_rows("a", x[:3])
    model.predict_rows("b", x[:3])  # same records: the forest fitted for "a" serves "b"
    assert model.fits_ == 1
    model.add_measured("b", np.array([[0.5, 1.0]]), [1.5e-3])
    mean, std = model.predict_rows("b", x[:3])
    assert model.fits_ == 2 and mean.shape == (3,) and np.all(std >= 0)


def test_above_the_cap_a_fit_reads_all_of_the_tasks_records_and_a_sample_of_the_others():
    model = _forest_with_tasks({"a": 300, "b": 40, "c": 300}, max_train_samples=128)
    x, y = model.training_set("b")
    assert x.shape == (128, 2) and len(y) == 128
    assert np.sum(x[:, 1] == 1.0) == 40  # every record of "b" (feature 1 is the task's index)
    assert 0 < np.sum(x[:, 1] == 0.0) < 88 and 0 < np.sum(x[:, 1] == 2.0) < 88
    x_again, _ = model.training_set("b")
    assert np.array_equal(x, x_again)  # the sample is a function of the records, not of the call
    # a task with more records than the cap: a sample of its own, nothing of the others
    x_a, _ = model.training_set("a")
    assert x_a.shape == (128, 2) and np.all(x_a[:, 1] == 0.0)
    # one fit per task asked, and none again until records come
    model.predict_rows("a", x[:2])
    model.predict_rows("a", x[:2])
    model.predict_rows("b", x[:2])
    assert model.fits_ == 2


def test_the_capped_forest_still_ranks_the_tasks_candidates():
    model = _forest_with_tasks({"a": 200, "b": 200, "c": 200}, max_train_samples=100)
    probe = np.column_stack([np.linspace(0.0, 1.0, 5), np.full(5, 1.0)])
    mean, _ = model.predict_rows("b", probe)
    assert np.all(np.diff(mean) > 0)  # faster (larger feature 0) predicted better


def test_the_cap_must_hold_the_warm_up():
    with pytest.raises(ValueError, match="max_train_samples must be >= num_warmup_samples"):
        RandomForestModel(max_train_samples=4, num_warmup_samples=8)


def test_inconsistent_settings_fail_as_one_profile_line(tmp_path):
    from conftest import run_cli

    profile = tmp_path / "noisy.toml"
    profile.write_text('name = "noisy"\n[target]\nkind = "llvm"\n[measure]\nmicro_batch = 50\nmax_runs = 60\n')
    result = run_cli("tune", "--profile", str(profile), "--model", "demo:tiny-cnn", "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"edgetune: error: {profile}: [measure] max_runs must be >= 2 x micro_batch (100), got 60 instead"
    )
    flops = tmp_path / "flops.toml"
    flops.write_text('name = "flops"\n[target]\nkind = "llvm"\n[tuning]\nearly_stop_flops_ratio = 1.5\n')
    result = run_cli("tune", "--profile", str(flops), "--model", "demo:tiny-cnn", "--out", str(tmp_path / "out2"))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"edgetune: error: {flops}: [tuning] early stop: flops_ratio must be within [0, 1), got 1.5 instead"
    )
