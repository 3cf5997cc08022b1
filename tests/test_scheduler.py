"""DynaTune-style task scheduling: belief model, bandit decisions, MetaSchedule integration.

The unit tests use scripted per-task improvement curves where the right choice
is known; the MetaSchedule tests drive the real C++ tuning loop with a fake
builder and runner (no compilation, no device), so they take a second; one
integration test tunes ``demo:tiny-cnn`` on the loopback board with ``--scheduler ucb``.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import tvm
import tvm.s_tir.meta_schedule as ms
from tvm import te
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
from tvm.s_tir.meta_schedule.runner import PyRunner, PyRunnerFuture, RunnerResult

from edgetune.builder.intrinsics import load_tensor_intrinsics
from edgetune.errors import EdgetuneError
from edgetune.profile import load_profile
from edgetune.search import make_task_scheduler
from edgetune.search.scheduler import (
    EpsilonGreedyTaskScheduler,
    LearningCurveBelief,
    SlotBandit,
    SoftmaxTaskScheduler,
    UCBTaskScheduler,
    SlotScheduler,
    best_so_far,
    log_power,
    segment_start,
)


def saturating(x: np.ndarray, a: float, half: float, c: float) -> np.ndarray:
    return a / (1.0 + (x / half) ** (-c))


# ---------------------------------------------------------------------------
# belief model
# ---------------------------------------------------------------------------
def test_log_power_increases_and_saturates():
    x = np.array([1.0, 2.0, 10.0, 100.0, 1e6])
    y = log_power(x, math.log(0.7), math.log(10.0), math.log(1.5))
    assert np.all(np.diff(y) > 0)
    assert y[2] == pytest.approx(0.35)  # half of the asymptote at x = e^b
    assert y[-1] == pytest.approx(0.7, rel=1e-6)


def test_segments_start_after_the_last_big_jump_with_enough_points():
    best = [1.0, 1.05, 1.1, 1.12, 1.5, 1.52, 1.53, 1.55, 1.56]
    assert segment_start(best, jump=0.2, min_points=4) == 4
    # a jump in the last few points is merged with the segment before it
    assert segment_start(best + [2.5], jump=0.2, min_points=4) == 4
    assert segment_start(best, jump=0.5, min_points=4) == 0


def test_fit_recovers_a_known_saturating_value():
    rng = np.random.default_rng(0)
    x = np.arange(1, 81, dtype=float)
    truth = saturating(x, 0.5, 12.0, 1.3)
    y = np.maximum.accumulate(truth * (1 + 0.005 * rng.standard_normal(len(x))))
    belief = LearningCurveBelief(bounded=True).fit(x, y)
    a, a_std = belief.saturation()
    assert a == pytest.approx(0.5, rel=0.1)
    assert a_std < 0.1
    mean, std = belief.predict([200.0])
    assert mean[0] == pytest.approx(saturating(np.array([200.0]), 0.5, 12.0, 1.3)[0], rel=0.08)
    # the prediction never falls below what was measured
    assert np.all(belief.predict_next(8) >= y[-1])


def test_segmented_fit_models_the_level_after_a_jump():
    x = np.arange(1, 61, dtype=float)
    before = saturating(x[:30], 0.2, 5.0, 1.5)
    after = 0.35 + 0.05 * (1 - np.exp(-(x[30:] - 30) / 5.0))  # a 60% jump, then a new plateau
    y = np.concatenate([before, after])
    belief = LearningCurveBelief().fit(x, y)
    assert belief.segment_start_ == 30
    assert belief.saturation()[0] == pytest.approx(0.40, rel=0.1)
    whole = LearningCurveBelief(jump=10.0).fit(x, y)  # no segmentation
    assert whole.segment_start_ == 0
    resid_seg = np.abs(belief.predict(x[30:])[0] - y[30:]).mean()
    resid_whole = np.abs(whole.predict(x[30:])[0] - y[30:]).mean()
    assert resid_seg < resid_whole / 2


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_laplace_posterior_matches_emcee_on_synthetic_curves(seed):
    """The cheap Laplace posterior predicts the next slot like the paper's MCMC."""
    rng = np.random.default_rng(seed)
    half = [6.0, 15.0, 40.0][seed]
    x = np.arange(1, 33, dtype=float)
    y = np.maximum.accumulate(saturating(x, 0.4, half, 1.0) * (1 + 0.03 * rng.standard_normal(len(x))))
    y = np.maximum(y, 1e-3)
    laplace = LearningCurveBelief(seed=seed).fit(x, y)
    mcmc = LearningCurveBelief(posterior="mcmc", seed=seed).fit(x, y)
    assert 0.2 < mcmc.acceptance_ < 0.9
    gain_l = laplace.predict_next(8) - y[-1]
    gain_m = mcmc.predict_next(8) - y[-1]
    # expected next-slot improvement, and its spread, agree within tolerances far
    # smaller than the differences between tasks that drive the decisions
    assert gain_l.mean() == pytest.approx(gain_m.mean(), rel=0.3, abs=0.002)
    assert 0.5 < (gain_l.std() + 1e-4) / (gain_m.std() + 1e-4) < 2.0
    mean_l, std_l = laplace.predict([64.0])
    mean_m, std_m = mcmc.predict([64.0])
    assert mean_l[0] == pytest.approx(mean_m[0], rel=0.1)


def test_best_so_far_skips_leading_failures_and_keeps_failed_trials_as_no_change():
    xs, ys = best_so_far([1e9, 2.0, 1e9, 1.0, 4.0], flop=2e6)
    assert list(xs) == [2.0, 3.0, 4.0, 5.0]
    assert list(ys) == pytest.approx([1.0, 1.0, 2.0, 2.0])  # GFLOPS


def test_bad_hyperparameters_name_what_was_expected():
    with pytest.raises(EdgetuneError, match="posterior must be one of laplace, mcmc, got 'gibbs' instead"):
        LearningCurveBelief(posterior="gibbs")
    with pytest.raises(ValueError, match="exploration must be >= 0, got -1 instead"):
        SlotBandit([1.0], [1.0], exploration=-1)
    with pytest.raises(ValueError, match="policy must be one of"):
        SlotBandit([1.0], [1.0], policy="thompson")
    with pytest.raises(ValueError, match="bonus must be one of share, absolute, got 'relative' instead"):
        SlotBandit([1.0], [1.0], bonus="relative")
    with pytest.raises(ValueError, match="peak_gflops must be > 0 or None, got 0 instead"):
        UCBTaskScheduler(peak_gflops=0)


# ---------------------------------------------------------------------------
# bandit on scripted curves
# ---------------------------------------------------------------------------
class Scripted:
    """Task k's best latency (ms) after n trials; each slot measures 8 candidates."""

    def __init__(self, curves):
        self.curves = curves
        self.trials = [0] * len(curves)

    def slot(self, k: int, batch: int = 8) -> list[float]:
        out = []
        for _ in range(batch):
            self.trials[k] += 1
            out.append(self.curves[k](self.trials[k]))
        return out


def saturates_early(n: int) -> float:  # 10 ms, within 1% of its final 4 ms by trial 16
    return 4.0 + 6.0 * math.exp(-n / 2.5)


def keeps_improving(n: int) -> float:  # 10 ms, steadily towards 1 ms over ~100 trials
    return 1.0 + 9.0 / (1.0 + (n / 30.0) ** 1.2)


def run_bandit(bandit: SlotBandit, script: Scripted, slots: int, alive=None) -> list[int]:
    chosen = []
    for _ in range(slots):
        k = bandit.choose(alive if alive is not None else list(range(len(script.curves))))
        bandit.observe(k, script.slot(k), seconds=1.0)
        chosen.append(k)
    return chosen


@pytest.mark.parametrize("policy", ["ucb", "epsilon-greedy", "softmax"])
def test_the_task_that_keeps_improving_gets_the_slots(policy):
    script = Scripted([saturates_early, keeps_improving])
    bandit = SlotBandit([1e9, 1e9], [1.0, 1.0], policy=policy, seed=0)
    chosen = run_bandit(bandit, script, 20)
    assert chosen[:2] == [0, 1]  # untried tasks first
    later = chosen[2:]
    assert later.count(1) >= 0.7 * len(later), chosen
    # and the model is faster than an even split of the same slots would make it
    even = Scripted([saturates_early, keeps_improving])
    for i in range(20):
        even.slot(i % 2)
    ours = saturates_early(script.trials[0]) + keeps_improving(script.trials[1])
    split = saturates_early(even.trials[0]) + keeps_improving(even.trials[1])
    assert ours < split


def test_weight_and_flops_turn_curves_into_model_latency():
    # same curves, but task 0 occurs 4 times in the model: its gain counts 4x
    a = Scripted([keeps_improving, keeps_improving])
    bandit = SlotBandit([1e9, 1e9], [4.0, 1.0], seed=0)
    run_bandit(bandit, a, 2)
    values = bandit.values([0, 1])
    assert values[0] == pytest.approx(4 * values[1], rel=0.1)  # posterior samples differ per task


def test_cost_aware_values_divide_by_seconds_per_slot():
    script = Scripted([keeps_improving, keeps_improving])
    bandit = SlotBandit([1e9, 1e9], [1.0, 1.0], seed=0)
    for k, seconds in ((0, 1.0), (1, 3.0)):
        bandit.choose([k])
        bandit.observe(k, script.slot(k), seconds=seconds)
    values = bandit.values([0, 1])
    assert values[0] == pytest.approx(3 * values[1], rel=0.1)


def test_never_starves_a_task():
    flat = lambda n: 5.0  # noqa: E731 - nothing to gain, ever
    script = Scripted([flat, keeps_improving, keeps_improving])
    bandit = SlotBandit([1e9] * 3, [1.0] * 3, policy="epsilon-greedy", epsilon=0.0, max_idle_slots=6, seed=0)
    chosen = run_bandit(bandit, script, 60)
    picks = [i for i, k in enumerate(chosen) if k == 0]
    assert len(picks) >= 60 // 7
    assert max(np.diff(picks + [60])) <= 7
    # UCB's own bonus revisits it too, without the guard
    script = Scripted([flat, keeps_improving, keeps_improving])
    ucb = SlotBandit([1e9] * 3, [1.0] * 3, max_idle_slots=1000, seed=0)
    assert run_bandit(ucb, script, 60).count(0) >= 2


def test_finished_tasks_are_never_chosen():
    script = Scripted([keeps_improving, keeps_improving, saturates_early])
    bandit = SlotBandit([1e9] * 3, [1.0] * 3, seed=0)
    run_bandit(bandit, script, 3)
    chosen = run_bandit(bandit, script, 30, alive=[0, 2])  # task 1 was terminated
    assert 1 not in chosen and set(chosen) == {0, 2}


def test_empty_batches_earn_no_gain():
    script = Scripted([keeps_improving, keeps_improving])
    bandit = SlotBandit([1e9] * 2, [1.0] * 2, seed=0)
    run_bandit(bandit, script, 2)
    bandit.choose([0])
    bandit.observe(0, [], seconds=None)  # the search strategy returned nothing
    values = bandit.values([0, 1])
    assert values[0] == 0.0 and values[1] > 0


# ---------------------------------------------------------------------------
# inside MetaSchedule's own tuning loop (fake builder and runner)
# ---------------------------------------------------------------------------
def _matmul(n: int) -> tvm.IRModule:
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="matmul")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


@derived_object
class SizeBuilder(PyBuilder):
    """Builds nothing; the artifact name says which task (matrix size) it is."""

    def build(self, build_inputs):
        from tvm.s_tir.analysis import estimate_tir_flops

        return [BuilderResult(str(round((estimate_tir_flops(inp.mod) / 2) ** (1 / 3))), None) for inp in build_inputs]


@derived_object
class _Done(PyRunnerFuture):
    def __init__(self, result, ready=True):
        super().__init__()
        self.value = result
        self.ready = ready

    def done(self):
        return self.ready  # False: like a board still measuring, until someone waits for it

    def result(self):
        return self.value


@derived_object
class ScriptedRunner(PyRunner):
    """Latency of the n-th candidate of each task from a scripted curve."""

    def __init__(self, curves, ready=True):
        super().__init__()
        self.curves = curves
        self.ready = ready
        self.count = {}

    def run(self, runner_inputs):
        out = []
        for inp in runner_inputs:
            size = int(inp.artifact_path)
            self.count[size] = self.count.get(size, 0) + 1
            out.append(_Done(RunnerResult([self.curves[size](self.count[size]) * 1e-3], None), self.ready))
        return out


@derived_object
class StopsAfter(ms.search_strategy.PySearchStrategy):
    """ReplayTrace that ends its task after ``batches`` batches (like an early stop)."""

    def __init__(self, batches: int):
        super().__init__()
        self.batches = batches
        self.inner = ms.search_strategy.ReplayTrace()

    def _initialize_with_tune_context(self, context):
        self.inner._initialize_with_tune_context(context)

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None):
        self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)

    def post_tuning(self):
        self.inner.post_tuning()

    def generate_measure_candidates(self):
        if self.batches <= 0:
            return None
        self.batches -= 1
        return self.inner.generate_measure_candidates()

    def notify_runner_results(self, measure_candidates, results):
        self.inner.notify_runner_results(measure_candidates, results)

    def clone(self):
        return StopsAfter(self.batches)


def _schedule(sch):
    block = sch.get_sblock("matmul")
    i, j, k = sch.get_loops(block)
    sch.split(i, factors=[None, 4])


def _tune_fake(scheduler, strategies, curves, *, budget, per_task, batch=4, ready=True):
    target = tvm.target.Target({"kind": "llvm", "num-cores": 1})
    load_tensor_intrinsics(target)
    sizes = sorted(curves)
    contexts = [
        ms.TuneContext(
            _matmul(n), target=target, space_generator=_schedule, search_strategy=strategies.get(n, ms.search_strategy.ReplayTrace()),
            task_name=f"mm{n}", rand_state=n,
        )
        for n in sizes
    ]
    runner = ScriptedRunner(curves, ready)
    scheduler.tune(
        contexts, [1.0] * len(sizes), max_trials_global=budget, max_trials_per_task=per_task, num_trials_per_iter=batch,
        builder=SizeBuilder(), runner=runner, measure_callbacks=[], database=ms.database.MemoryDatabase(), cost_model=None,
    )
    return runner.count


def test_ucb_inside_metaschedule_prefers_the_improving_task_and_respects_budgets():
    curves = {16: saturates_early, 32: keeps_improving, 48: saturates_early}
    scheduler = make_task_scheduler("ucb", cost_aware=False)  # fake batches take no time: decide on gains alone
    counts = _tune_fake(scheduler, {}, curves, budget=160, per_task=100)
    assert sum(counts.values()) == 160
    assert counts[32] >= 0.5 * 160 and counts[16] >= 8 and counts[48] >= 8, counts
    assert all(c <= 100 for c in counts.values())
    assert len(scheduler.bandit_.history) == 160 // 4


def test_pipelined_choices_wait_for_a_running_task_before_choosing_it_again():
    """Batches still on the board are not awaited, unless the choice falls on one."""
    curves = {16: saturates_early, 32: keeps_improving, 48: saturates_early}
    scheduler = make_task_scheduler("ucb", cost_aware=False)
    counts = _tune_fake(scheduler, {}, curves, budget=160, per_task=100, ready=False)
    assert sum(counts.values()) == 160
    bandit = scheduler.bandit_
    assert len(bandit.history) == 40
    # every slot but the ones still running at the end was observed by the bandit
    observed = sum(len(a.latencies_ms) for a in bandit.arms)
    assert 160 - 2 * 4 * 3 <= observed < 160
    assert counts[32] >= 0.5 * 160, counts


def test_awaiting_schedulers_observe_every_batch_before_the_next_choice():
    """``wait_for_results=True`` (the embedded board): no batch is in flight while the next one is chosen and built."""
    curves = {16: saturates_early, 32: keeps_improving, 48: saturates_early}
    seen_before_choice = []

    class Recording(SlotBandit):
        def choose(self, alive):
            seen_before_choice.append(sum(len(a.latencies_ms) for a in self.arms))
            return super().choose(alive)

    @derived_object
    class AwaitingUCB(SlotScheduler):  # UCB's policy, with a bandit that records what it had seen
        _bandit_class = Recording

    scheduler = AwaitingUCB(cost_aware=False, wait_for_results=True)
    counts = _tune_fake(scheduler, {}, curves, budget=160, per_task=100, ready=False)
    assert sum(counts.values()) == 160
    # the n-th choice (from 0) comes after all n batches before it were observed
    assert seen_before_choice == [4 * n for n in range(40)]


def test_metaschedule_terminated_tasks_are_not_chosen_again():
    curves = {16: keeps_improving, 32: keeps_improving, 48: keeps_improving}
    scheduler = UCBTaskScheduler(cost_aware=False)
    # task 16 ends itself after one batch (returns no candidates), task 48 reaches its per-task budget
    counts = _tune_fake(scheduler, {16: StopsAfter(1)}, curves, budget=200, per_task=40)
    assert counts[16] == 4 and counts[48] <= 40 and counts[32] <= 40
    history = scheduler.bandit_.history
    assert history.count(0) == 1  # the pick that found it finished is not counted as a slot
    assert sum(counts.values()) == 4 + 40 + 40


@pytest.mark.parametrize("cls", [EpsilonGreedyTaskScheduler, SoftmaxTaskScheduler])
def test_alternative_policies_run_inside_metaschedule(cls):
    curves = {16: saturates_early, 32: keeps_improving}
    counts = _tune_fake(cls(seed=1, cost_aware=False), {}, curves, budget=48, per_task=48)
    assert sum(counts.values()) == 48 and counts[32] > counts[16]


def test_a_scheduler_object_can_tune_twice():
    curves = {16: keeps_improving, 32: keeps_improving}
    scheduler = UCBTaskScheduler(cost_aware=False)
    _tune_fake(scheduler, {}, curves, budget=16, per_task=16)
    first = scheduler.bandit_
    counts = _tune_fake(scheduler, {}, curves, budget=16, per_task=16)
    assert scheduler.bandit_ is not first and len(scheduler.bandit_.history) == 4
    assert sum(counts.values()) == 16


# ---------------------------------------------------------------------------
# selection by name
# ---------------------------------------------------------------------------
def test_schedulers_are_selectable_by_name_and_profile_key():
    assert isinstance(make_task_scheduler("gradient"), ms.task_scheduler.TaskScheduler)
    for name, cls in (("ucb", UCBTaskScheduler), ("epsilon-greedy", EpsilonGreedyTaskScheduler), ("softmax", SoftmaxTaskScheduler)):
        scheduler = make_task_scheduler(name, peak_gflops=50.0, seed=3)
        assert isinstance(scheduler, cls) and isinstance(scheduler, ms.task_scheduler.TaskScheduler)
        assert scheduler.params["peak_gflops"] == 50.0
    profile = load_profile("host").with_overrides(tuning={"task_scheduler": "ucb"})
    assert profile.tuning.task_scheduler == "ucb"
    with pytest.raises(EdgetuneError, match="task_scheduler"):
        load_profile("host").with_overrides(tuning={"task_scheduler": "lottery"})


@pytest.mark.integration
def test_tune_with_ucb_end_to_end(tmp_path, loopback_board):
    from conftest import SESSION_KEY, run_cli

    out = tmp_path / "ucb"
    result = run_cli(
        "tune", "--profile", "host", "--model", "demo:tiny-cnn", "--trials", "20", "--scheduler", "ucb", "--out", str(out),
        "--tracker", f"{loopback_board.host}:{loopback_board.port}", "--key", SESSION_KEY, "--quiet",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    # the budget is spent, or what is left of it is what the adaptive early stop saved (a short run's batches
    # are of one candidate, and the early stop may end a task after one without progress)
    unspent = 20 - summary["trials"]["this_run"]
    assert 0 <= unspent <= sum(t["share_left_by_early_stop"] for t in summary["measurement_reduction"]["tasks"]), summary
    assert all(task["trials_this_run"] >= 1 for task in summary["tasks"])
    assert summary["end_to_end"]["outputs_match"] is True
    # a board reached through a tracker is another machine (here, stands in for one): batches overlap
    assert summary["search"]["scheduler_awaits_measurements"] is False
    assert summary["search"]["scheduler_decision_seconds"] > 0  # edgetune's schedulers time their choices


def test_unknown_hyperparameters_fail_at_construction():
    with pytest.raises(EdgetuneError, match="hyperparameters must be keywords of SlotBandit"):
        UCBTaskScheduler(explore=0.1)
    with pytest.raises(EdgetuneError, match="jump must be > 0, got 0 instead"):
        UCBTaskScheduler(belief_params={"jump": 0})


def test_peak_gflops_normalises_and_bounds_the_curve():
    # the same task with a known peak: the belief sees values in (0, 1] and is bounded by 1
    script = Scripted([keeps_improving, keeps_improving])
    bandit = SlotBandit([2e6, 2e6], [1.0, 1.0], peak_gflops=10.0, seed=0)
    run_bandit(bandit, script, 4)
    bandit.values([0, 1])
    belief = bandit.arms[0].belief
    assert belief.bounded and belief.y_last_ < 1.0
    assert belief.saturation()[0] <= 1.05


def test_the_bonus_is_scaled_by_the_share_of_the_model_latency():
    """Tasks worth 0.1% of the model are not explored like the big ones (the paper's absolute bonus does)."""
    tiny = lambda n: 0.001 * keeps_improving(n)  # noqa: E731 - improves, but can never matter
    tiny_slots = {}
    for bonus, exploration in (("share", 1e-3), ("absolute", 2e-4)):
        script = Scripted([keeps_improving, keeps_improving, tiny, tiny, tiny])
        bandit = SlotBandit([1e9, 1e9, 1e6, 1e6, 1e6], [1.0] * 5, bonus=bonus, exploration=exploration, max_idle_slots=1000, seed=0)
        chosen = run_bandit(bandit, script, 80)
        tiny_slots[bonus] = sum(chosen.count(k) for k in (2, 3, 4))
        shares = bandit.shares(list(range(5)))
        assert sum(shares.values()) == pytest.approx(1.0) and max(shares[k] for k in (2, 3, 4)) < 0.005
    assert tiny_slots["share"] == 3, tiny_slots  # their first slots only
    assert tiny_slots["absolute"] >= 10, tiny_slots


# ---------------------------------------------------------------------------
# benchmarks/task_scheduling_traces.py: replay and hindsight optimum
# ---------------------------------------------------------------------------
def _traces_module():
    import importlib
    import sys
    from pathlib import Path

    benchmarks = str(Path(__file__).resolve().parents[1] / "benchmarks")
    if benchmarks not in sys.path:
        sys.path.insert(0, benchmarks)
    return importlib.import_module("task_scheduling_traces")


def _trace(*tasks):
    """A trace from per-task lists of (latency ms, seconds) slots of one trial each."""
    return {
        "seed": 0, "weights": [1.0] * len(tasks), "flops": [1e9] * len(tasks),
        "task_names": [f"t{k}" for k in range(len(tasks))],
        "slots": [[{"latencies_ms": [lat], "seconds": sec} for lat, sec in task] for task in tasks],
    }


def test_hindsight_optimum_finds_the_cheapest_allocation_even_behind_a_late_jump():
    """Task 1 pays off only in its third slot: greedy on the next slot misses it, the exact optimum does not."""
    traces = _traces_module()
    trace = _trace([(10, 1), (5, 1), (4, 1)], [(10, 2), (9, 2), (1, 2)])
    # goal 11: only "task 0 once + task 1 three times" (10 + 1) reaches it cheaply: 1 + 6 s, 4 trials
    assert traces.hindsight_cost(trace, 11.0, "seconds") == pytest.approx(7.0)
    assert traces.hindsight_cost(trace, 11.0, "trials") == 4
    # goal 14: task 0 three times, task 1 once (4 + 10): 5 s, cheaper than twice each (5 + 9, 6 s)
    assert traces.hindsight_cost(trace, 14.0, "seconds") == pytest.approx(5.0)
    assert traces.hindsight_cost(trace, 0.5, "seconds") == math.inf


def test_replayed_schedulers_get_exactly_the_recorded_slots():
    traces = _traces_module()
    trace = _trace([(10, 1), (5, 1), (4, 1)], [(10, 2), (9, 2), (1, 2)])
    run = traces.round_robin(trace, budget=4, seed=0)
    assert run.used == [2, 2] and run.seconds == pytest.approx(6.0)
    assert [point[2] for point in run.curve] == [20.0, 15.0, 14.0]
    # gradient: one round-robin round, then weight * (0.8 * best / rounds): 0.8*10/1 for both, lowest id first
    run = traces.gradient(trace, budget=6, seed=0)
    assert run.used == [3, 3] and run.curve[-1][2] == 5.0
    assert run.reached(14.0, 1) == 4 and run.reached(3.0, 1) == math.inf
