"""Never worse than no tuning: default schedules are measured candidates, and model.so is never the slower build."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import tvm
import tvm.s_tir.meta_schedule as ms
import tvm_ffi

from edgetune.search.default_schedule import default_schedule, is_default_trace, is_untuned_copy
from edgetune.tasks import load_model, prepare_for_tuning

TARGET = tvm.target.Target({"kind": "llvm", "num-cores": 2})


def workloads(spec: str = "demo:tiny-cnn"):
    tasks = ms.relax_integration.extract_tasks(prepare_for_tuning(load_model(spec).mod, TARGET), TARGET)
    return [t.dispatched[0] for t in tasks if not t.mod.attrs.get("tirx.is_scheduled", False)]


def test_default_schedule_changes_nothing_and_is_a_valid_record() -> None:
    for mod in workloads():
        sch = default_schedule(mod)
        tvm.ir.assert_structural_equal(sch.mod, mod)
        assert is_default_trace(sch.trace)
        record = ms.database.TuningRecord(sch.trace, ms.database.Workload(mod), [1e-3], TARGET, None)
        # replaying the stored record (as compile_relax's ApplyDatabase does) gives the untuned function back
        replay = tvm.s_tir.Schedule(mod)
        record.trace.apply_to_schedule(replay, remove_postproc=False)
        tvm.ir.assert_structural_equal(replay.mod, mod)


def test_a_real_schedule_is_not_a_default_trace() -> None:
    mod = workloads()[0]
    sch = tvm.s_tir.Schedule(mod)
    block = sch.get_child_blocks(sch.get_sblock("root"))[0]
    sch.get_loops(block)
    sch.parallel(sch.get_loops(block)[0])
    assert not is_default_trace(sch.trace) and not is_untuned_copy(sch.trace)


def test_the_untuned_code_with_postprocessing_is_an_untuned_copy() -> None:
    """The search's database hands back the measured default with postprocessing re-applied: still untuned code."""
    mod = workloads()[0]
    sch = default_schedule(mod)
    sch.enter_postproc()
    block = sch.get_child_blocks(sch.get_sblock("root"))[0]
    sch.get_loops(block)
    assert is_untuned_copy(sch.trace) and not is_default_trace(sch.trace)
    assert is_untuned_copy(default_schedule(mod).trace)


def test_the_search_drops_the_untuned_code_and_programs_it_measured_or_holds_twice() -> None:
    """A board trial for a program measured before, or twice in one batch, teaches nothing."""
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

    from edgetune.search.strategy import AdaptiveSearch

    mod = workloads()[0]

    def candidate(loop: int | None) -> MeasureCandidate:
        sch = default_schedule(mod)
        if loop is not None:
            block = sch.get_child_blocks(sch.get_sblock("root"))[0]
            sch.parallel(sch.get_loops(block)[loop])
        return MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True))

    copy = default_schedule(mod)
    copy.enter_postproc()
    untuned = MeasureCandidate(copy, ms.arg_info.ArgInfo.from_entry_func(copy.mod, remove_preproc=True))
    outer, outer_again, inner = candidate(0), candidate(0), candidate(1)
    search = AdaptiveSearch()
    assert search._unmeasured([untuned, outer, outer_again, inner]) == [outer, inner]
    search._measured.add(tvm_ffi.structural_hash(outer.sch.mod))  # as notify_runner_results records it
    assert search._unmeasured([outer_again, inner]) == [inner]
    assert search._unmeasured([outer_again, inner], taken=[inner]) == []


@pytest.mark.integration
def test_the_search_never_measures_the_untuned_code_again(tmp_path: Path, loopback_board) -> None:
    """Each task's default is measured once, before the search; no search candidate is that code again."""
    import json
    import sqlite3

    from edgetune.board.base import TrackerBoard
    from edgetune.profile import load_profile
    from edgetune.tuning import TuneOptions, run_tune

    profile = load_profile("host").with_overrides(rpc={"key": loopback_board.key}, tuning={"schedules": "off"})
    summary = run_tune(TuneOptions(profile=profile, model="demo:tiny-cnn", out_dir=tmp_path, trials=24, evaluate=False,
                                   board=TrackerBoard(loopback_board)))
    assert summary.trials.default_schedules == len(summary.tasks)
    with sqlite3.connect(tmp_path / "history.db") as conn:
        traces = [json.loads(row[0]) for row in conn.execute("SELECT trace_json FROM records")]
    kinds = [[inst[0] for inst in insts] for insts, _decisions in traces]
    lookups = {"GetSBlock", "GetChildBlocks"}
    defaults = [k for k in kinds if set(k) <= lookups]
    copies = [k for k in kinds if "EnterPostproc" in k and set(k[: k.index("EnterPostproc")]) <= lookups]
    searched = len(kinds) - len(defaults)
    assert len(defaults) == len(summary.tasks) and searched > len(summary.tasks)  # the search ran
    assert copies == [], copies  # the search used to measure such a copy in most searched tasks


@pytest.mark.integration
def test_tasks_no_tuned_candidate_beats_keep_their_default(tmp_path: Path, loopback_board) -> None:
    """With a budget of one trial per task and no library only the defaults are measured: every task keeps its
    untuned code. (With the shipped library a convolution measures the library's schedule of the nearest shape
    instead: tests/test_schedules.py.)"""
    from edgetune.board.base import TrackerBoard
    from edgetune.history import open_history
    from edgetune.profile import load_profile
    from edgetune.tuning import TuneOptions, run_tune

    profile = load_profile("host").with_overrides(rpc={"key": loopback_board.key}, tuning={"schedules": "off"})
    from edgetune.tuning import TuningPipeline

    probe = TuningPipeline(TuneOptions(profile=profile, model="demo:tiny-cnn", out_dir=tmp_path / "probe"))
    extracted = probe.extract_tasks(profile.tvm_target(), probe.check_inputs()[1])  # in the profile's conv layout
    n_tasks = len(extracted)
    options = TuneOptions(
        profile=profile, model="demo:tiny-cnn", out_dir=tmp_path, trials=n_tasks, board=TrackerBoard(loopback_board)
    )
    summary = run_tune(options)
    assert summary.trials.this_run == n_tasks
    assert sorted(summary.tasks_kept_default) == sorted(t.name for t in summary.tasks)
    assert all(t.default_latency_us and t.default_latency_us == t.best_latency_us for t in summary.tasks)
    history = open_history(summary.history, read_only=True)
    try:
        for task in extracted:
            assert is_default_trace(history.best_record(task.dispatched[0], profile.tvm_target()).trace)
    finally:
        history.close()
    assert summary.end_to_end.outputs_match
    # the summary file says which tasks kept it
    assert (tmp_path / "summary.json").read_text().count('"kept_default": true') == n_tasks
    # a rerun finds the defaults in the history and measures nothing again
    again = run_tune(TuneOptions(profile=profile, model="demo:tiny-cnn", out_dir=tmp_path, trials=n_tasks,
                                 board=TrackerBoard(loopback_board), evaluate=False))
    assert again.trials.this_run == 0 and len(again.tasks_kept_default) == n_tasks


def test_model_so_is_the_untuned_build_when_the_tuned_one_measures_slower(tmp_path: Path, monkeypatch) -> None:
    """Measured slower twice, the tuned build is set aside and model.so is the untuned build."""
    import numpy as np

    from edgetune.profile import load_profile
    from edgetune.tuning import evaluate

    def fake_export(executable, path, profile):
        Path(path).write_bytes(executable)
        return Path(path)

    timings = {b"tuned": 2.0, b"untuned": 1.0}

    def fake_run(address, device, path, inputs, **timing):
        ms_ = timings[Path(path).read_bytes()]
        return types.SimpleNamespace(outputs=[np.zeros(3)], latency=types.SimpleNamespace(median_ms=ms_, to_dict=lambda: {"median_ms": ms_}))

    monkeypatch.setattr(evaluate, "compile_model", lambda mod, target, history=None, prepack_weights=False: b"tuned" if history is not None else b"untuned")
    monkeypatch.setattr(evaluate, "export_model", fake_export)
    monkeypatch.setattr(evaluate, "run_on_board", fake_run)
    model = types.SimpleNamespace(mod=None, inputs=[], random_inputs=lambda seed: {}, recipe=types.SimpleNamespace(prepack_weights=False))
    result = evaluate.evaluate_end_to_end(model, load_profile("host"), TARGET, object(), None, tmp_path)
    assert result.delivered == "untuned"
    assert (tmp_path / "model.so").read_bytes() == b"untuned"
    assert (tmp_path / evaluate.SLOWER_TUNED_ARTIFACT_NAME).read_bytes() == b"tuned"
    timings[b"tuned"] = 0.5  # faster: delivered as tuned
    (tmp_path / "b").mkdir()
    result = evaluate.evaluate_end_to_end(model, load_profile("host"), TARGET, object(), None, tmp_path / "b")
    assert result.delivered == "tuned" and (tmp_path / "b" / "model.so").read_bytes() == b"tuned"


@pytest.mark.integration
def test_default_schedule_off_starts_the_search_at_once(tmp_path: Path, loopback_board) -> None:
    """tuning.default_schedule = false: no untuned trial, every trial of the budget goes to the search."""
    from edgetune.board.base import TrackerBoard
    from edgetune.profile import load_profile
    from edgetune.tuning import TuneOptions, run_tune

    profile = load_profile("host").with_overrides(rpc={"key": loopback_board.key}, tuning={"default_schedule": False})
    assert profile.tuning.default_schedule is False
    n_tasks = len(workloads())
    summary = run_tune(TuneOptions(profile=profile, model="demo:tiny-cnn", out_dir=tmp_path, trials=2 * n_tasks, evaluate=False,
                                   board=TrackerBoard(loopback_board)))
    assert summary.trials.default_schedules == 0
    assert summary.trials.this_run >= 2 * n_tasks  # all search trials (a last batch may run over)
    assert all(t.default_latency_us is None and t.trial_cap is None and not t.kept_default for t in summary.tasks)
    assert summary.seconds.session > 0  # the runner's tracker requests, in the summary since issue 15
    assert summary.search.scheduler_decision_seconds is None  # MetaSchedule's gradient rule keeps no count


@pytest.mark.integration
def test_minor_tasks_leave_the_budget_to_heavy_ones(tmp_path: Path, loopback_board) -> None:
    """Tasks under tuning.minor_task_share of the untuned model measure at most minor_task_trials candidates."""
    from edgetune.board.base import TrackerBoard
    from edgetune.profile import load_profile
    from edgetune.tuning import TuneOptions, run_tune

    # lagging_trials 0: trials kept for convolutions far below their class (tuning/lagging.py) would leave the minor
    # tasks none of their cap, and this test is about the caps
    profile = load_profile("host").with_overrides(rpc={"key": loopback_board.key},
                                                  tuning={"early_stop": "none", "lagging_trials": 0})
    # 7 untuned defaults, then 21 searched: enough for the heavy tasks to outspend three minor ones capped at 2
    summary = run_tune(TuneOptions(profile=profile, model="demo:tiny-cnn", out_dir=tmp_path, trials=28, evaluate=False,
                                   board=TrackerBoard(loopback_board)))
    peak = profile.device.peak_gflops

    def expected_us(t) -> float:
        # a task as it may be once tuned: at half the peak, or its untuned latency if lower; a task
        # without FLOPs (a layout transform, a reshape) has no roofline and keeps its untuned latency;
        # a convolution that measured the shipped library's schedule instead of its default: at half the peak
        if t.default_latency_us is None:
            return t.flops / (0.5 * peak * 1e9) * 1e6
        if not peak or not t.flops:
            return t.default_latency_us
        return min(t.default_latency_us, t.flops / (0.5 * peak * 1e9) * 1e6)

    expected = sum(t.weight * expected_us(t) for t in summary.tasks)
    minor = [t for t in summary.tasks if t.default_latency_us is not None and t.weight * t.default_latency_us < 0.01 * expected]
    heavy = [t for t in summary.tasks if t not in minor]
    assert minor and heavy
    for task in minor:
        assert task.trial_cap == 2 and task.trials_this_run <= 1 + 2, task  # its default, then at most 2
    assert all(t.trial_cap is None for t in heavy), [(t.name, t.default_latency_us, t.trial_cap, 0.01 * expected) for t in heavy]
    assert sum(t.trials_this_run for t in heavy) > sum(t.trials_this_run for t in minor)
    # resumed with more trials: a minor task's cap counts its records in the history, so it gets none
    held = sum(t.trials_before + t.trials_this_run for t in summary.tasks)
    again = run_tune(TuneOptions(profile=profile, model="demo:tiny-cnn", out_dir=tmp_path, trials=held + 4, evaluate=False,
                                 board=TrackerBoard(loopback_board)))
    names = {t.name for t in minor}
    resumed = [t for t in again.tasks if t.name in names]
    # (a reshape with no program but its default left untried measured only that: one of its 2 is left)
    assert resumed and all(t.trial_cap == max(0, 2 - t.trials_before) for t in resumed), resumed
    assert all(t.trials_this_run <= t.trial_cap for t in resumed) and any(t.trial_cap == 0 for t in resumed), resumed
    assert again.trials.this_run > 0  # the heavy tasks took the trials


@pytest.mark.integration
def test_a_short_budget_gives_every_task_a_search_trial(tmp_path: Path, loopback_board) -> None:
    """2 trials per task: each default, then one search trial each. Batches sized before the defaults took their
    trials gave the first tasks two and the last ones none (SqueezeNet's costliest convolutions among them)."""
    from edgetune.board.base import TrackerBoard
    from edgetune.profile import load_profile
    from edgetune.tuning import TuneOptions, run_tune

    profile = load_profile("host").with_overrides(
        rpc={"key": loopback_board.key},
        tuning={"early_stop": "none", "schedules": "off", "minor_task_share": 0, "conv_layout": "as-is"},
    )
    tasks = 5  # tiny-cnn as imported
    summary = run_tune(TuneOptions(profile=profile, model="demo:tiny-cnn", out_dir=tmp_path, trials=2 * tasks,
                                   evaluate=False, board=TrackerBoard(loopback_board)))
    assert len(summary.tasks) == tasks and summary.trials.default_schedules == tasks
    searched = {t.name: t.trials_this_run - 1 for t in summary.tasks}
    heavy = [name for name in searched if "conv2d" in name or "matmul" in name]
    assert len(heavy) == 3 and all(searched[name] == 1 for name in heavy), searched


@pytest.mark.integration
def test_stock_scheduler_on_a_board_sharing_the_host_cpu_awaits_each_batch(tmp_path: Path, loopback_board, monkeypatch) -> None:
    """Gradient on a board that is this host's CPU: batches are measured before the next is built."""
    from edgetune.board.base import TrackerBoard
    from edgetune.profile import load_profile
    from edgetune.tuning import TuneOptions, run_tune
    from edgetune.tuning import run as run_stage

    class HostCpuBoard(TrackerBoard):
        awaits_measurements = True

    wrapped = []
    real = run_stage.AwaitingRunner
    monkeypatch.setattr(run_stage, "AwaitingRunner", lambda inner: wrapped.append(inner) or real(inner))
    profile = load_profile("host").with_overrides(rpc={"key": loopback_board.key}, tuning={"task_scheduler": "gradient"})
    summary = run_tune(TuneOptions(profile=profile, model="demo:tiny-cnn", out_dir=tmp_path, trials=8, evaluate=False,
                                   board=HostCpuBoard(loopback_board)))
    assert len(wrapped) == 1 and summary.search.scheduler_awaits_measurements is True
    # every trial reached the board, or was a module measured already (e.g. a task's default schedule)
    assert summary.trials.measured_on_device + summary.trials.served_from_history >= 8
    # a real board (TrackerBoard) keeps MetaSchedule's overlap of measuring and building
    wrapped.clear()
    run_tune(TuneOptions(profile=profile, model="demo:tiny-cnn", out_dir=tmp_path / "b", trials=6, evaluate=False,
                         board=TrackerBoard(loopback_board)))
    assert wrapped == []
