"""Measurement reduction through real components: the loopback RPC board,
MetaSchedule's TuneContext and the ``edgetune tune`` command.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import SESSION_KEY, run_cli
from edgetune.board.local import LocalBoard
from edgetune.profile import load_profile
from edgetune.profile.schema import MeasureSettings

pytestmark = pytest.mark.integration


def _matmul_artifact(directory: Path, n: int = 96) -> tuple[str, list]:
    """A naive (unscheduled) n x n matmul built for this host: about a millisecond per run."""
    import tvm
    from tvm import te
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    func = te.create_prim_func([a, b, c]).with_attr("global_symbol", "main")
    mod = tvm.IRModule({"main": func})
    lib = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"}))
    path = directory / "matmul" / "lib.so"
    path.parent.mkdir(parents=True)
    lib.export_library(str(path))
    return str(path), [info.as_json() for info in ArgInfo.from_entry_func(mod, remove_preproc=True)]


def test_adaptive_evaluator_takes_more_runs_on_a_noisy_board(tmp_path):
    """Quiet board: the second micro-batch agrees with the first. Noisy board: other
    work takes the server's core (SIGSTOP/SIGCONT) for 1.5 micro-batches in every
    second micro-batch of its own work, so micro-batches disagree, the CV stays
    high and more runs are taken. Stalls are used rather than competing busy loops
    because on a shared 2-core host the scheduler spreads busy loops too evenly to
    tell the two cases apart reliably; they are placed by the server's own CPU time,
    not at random, because random stalls (20-200 ms every 20-250 ms) missed or hit
    both of a measurement's first two micro-batches about half the time, and a CI
    run on a loaded host then saw as many runs on the noisy board as on the quiet one."""
    from edgetune.measure.runner import TrackerRunner

    artifact, args_info = _matmul_artifact(tmp_path, n=192)  # ~2.5 ms a run on a quiet host
    with LocalBoard(key="noise-test", num_threads=1, log_dir=tmp_path / "board") as board:
        address = board.start()
        server_group = board.pids[-1]
        # A micro-batch must last about as long as a stall, or it averages the stalls out and the CV cannot see them:
        # on a loaded host the kernel ran 7-16 ms, 50 of them 0.4-0.8 s. So the micro-batch is sized from the
        # kernel's time on this host now, and the stalls from the server's CPU time per run.
        probe = TrackerRunner(address, config=_cv_rule(50))
        try:
            cpu_before = _group_cpu_sec(server_group)
            warm = _runs_used(probe, artifact, args_info, 2, 50)  # also the warm-up: a fresh server's first timings drift
            cpu_per_run = (_group_cpu_sec(server_group) - cpu_before) / sum(record.runs for record in warm)
        finally:
            probe.close()
        run_sec = min(record.mean_sec for record in warm)
        micro = int(min(50, max(5, round(0.130 / run_sec))))
        runner = TrackerRunner(address, config=_cv_rule(micro))
        try:
            quiet, noisy = [], []
            for _ in range(4):  # interleaved blocks, so the shared host's own noise hits both alike
                quiet += [r.runs for r in _runs_used(runner, artifact, args_info, 2, micro)]
                with _stalls(server_group, every_cpu_sec=micro * cpu_per_run, stall_sec=1.5 * micro * run_sec):
                    noisy += [r.runs for r in _runs_used(runner, artifact, args_info, 2, micro)]
        finally:
            runner.close()
    print(f"{run_sec * 1e3:.2f} ms a run ({cpu_per_run * 1e3:.2f} ms CPU), micro-batches of {micro}; "
          f"runs used: quiet {quiet}, noisy {noisy}")
    assert np.mean(noisy) > np.mean(quiet), (quiet, noisy)
    assert min(quiet) == 2 * micro  # quiet: two micro-batches are enough at least once
    assert sum(runs > 2 * micro for runs in noisy) >= len(noisy) - 2, noisy  # noisy: rarely two


def _cv_rule(micro_batch: int) -> MeasureSettings:
    """The paper's CV rule alone (``budget_ms=0``: a 2.5 ms kernel would spend a 100 ms budget in two micro-batches)."""
    return MeasureSettings(
        evaluator="adaptive", micro_batch=micro_batch, max_runs=6 * micro_batch, cv_threshold=0.10,
        micro_batch_ms=0, budget_ms=0,
    )


#: the CPU seconds (user + system, with the reaped children's) that a process group has used, from /proc
_GROUP_CPU = """
import os

def group_members(pgid):
    members = []
    for name in os.listdir("/proc"):
        if name.isdigit() and _stat(name) is not None and int(_stat(name)[2]) == pgid:
            members.append(name)
    return members

def group_cpu_sec(pgid, members=None):
    total = 0
    for name in group_members(pgid) if members is None else members:
        fields = _stat(name)
        if fields is not None:  # None: exited meanwhile (its time moves to its parent's children's time)
            total += sum(int(field) for field in fields[11:15])
    return total / os.sysconf("SC_CLK_TCK")

def _stat(name):
    try:
        with open(f"/proc/{name}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
"""
_namespace: dict = {}
exec(_GROUP_CPU, _namespace)
_group_cpu_sec = _namespace["group_cpu_sec"]

#: stops the process group for stall_sec in the middle of every second stretch of every_cpu_sec of its own CPU time
#: (mid-stretch, so that the drift of a measurement's micro-batches against this count cannot push a stall out of one
#: micro-batch into the next); the stretches without a stall give the micro-batches the stalled ones disagree with.
#: The group's members are listed again every 100 ms, not on every 5 ms poll, so that the staller takes little CPU.
_STALLER = _GROUP_CPU + """
import signal, sys, time
pgid, every, stall = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
members = group_members(pgid)
next_stall = group_cpu_sec(pgid, members) + 1.5 * every
print("ready", flush=True)
polls = 0
while True:
    polls += 1
    if polls % 20 == 0:
        members = group_members(pgid)
    if group_cpu_sec(pgid, members) < next_stall:
        time.sleep(0.005)
        continue
    os.killpg(pgid, signal.SIGSTOP)
    time.sleep(stall)
    os.killpg(pgid, signal.SIGCONT)
    next_stall += 2 * every
"""


@contextlib.contextmanager
def _stalls(pgid: int, every_cpu_sec: float, stall_sec: float):
    """Stall a process group in every second stretch of ``every_cpu_sec`` of its CPU time, until the block ends.

    From a process of its own, not a thread of the test's: a thread needs this interpreter's GIL to send its SIGCONT.
    CI hung here once with the server stopped for good and the test's process idle, most likely a thread holding
    the GIL while it waited on the stopped server.
    """
    staller = subprocess.Popen(
        [sys.executable, "-S", "-c", _STALLER, str(pgid), str(every_cpu_sec), str(stall_sec)], stdout=subprocess.PIPE, text=True
    )
    try:
        # the stalls count from the staller's start: the measurements must not begin before it has counted
        assert staller.stdout.readline() == "ready\n"
        yield
    finally:
        staller.kill()  # it may die between a stop and its continue: the group is continued below
        staller.wait()
        os.killpg(pgid, signal.SIGCONT)


def _runs_used(runner, artifact: str, args_info: list, times: int, micro_batch: int) -> list:
    """The adaptive evaluator's record of ``times`` measurements of the artifact."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    records = []
    for _ in range(times):
        (future,) = runner.run([RunnerInput(artifact, "llvm", [ArgInfo.from_json(a) for a in args_info])])
        result = future.result()
        assert result.error_msg is None, result.error_msg
        record = runner.adaptive_log.pop(artifact)
        assert record.runs % micro_batch == 0 and record.runs == len(record.run_secs) and record.probe_runs == 0
        records.append(record)
        print(f"  {record.runs} runs, mean {record.mean_sec * 1e3:.2f} ms, micro-batch means (ms) {[round(m * 1e3, 2) for m in record.batch_means]}")
    return records


def test_surrogate_and_strategy_on_a_real_tune_context():
    """The strategy's hooks driven as MetaSchedule drives them, with a synthetic
    latency: batches stay within the plan size, the task ends within its budget,
    every measured candidate reaches the forest, which then predicts a mean, a
    spread and expected improvement for fresh random programs."""
    import tvm
    import tvm.s_tir.meta_schedule as ms
    from tvm import te

    from edgetune.builder.intrinsics import load_tensor_intrinsics
    from edgetune.search.strategy import AdaptiveSearch, SearchReport, SearchSettings
    from edgetune.costmodel.surrogate import RandomForestModel

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    load_tensor_intrinsics(target)
    a = te.placeholder((64, 64), name="A")
    b = te.placeholder((64, 64), name="B")
    k = te.reduce_axis((0, 64), name="k")
    c = te.compute((64, 64), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    mod = tvm.IRModule({"main": te.create_prim_func([a, b, c])})
    model = RandomForestModel(num_warmup_samples=2, seed=0)  # K-means + early stop may measure few
    report = SearchReport()
    strategy = AdaptiveSearch(
        SearchSettings(population_size=64, init_min_unmeasured=16, sampler="kmeans", early_stop="adaptive", exploration="contextual", seed=0),
        surrogate=model, expected_trials_per_task=32, report=report,
    )
    ctx = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply", search_strategy=strategy, task_name="mm", num_threads=2)
    # the context holds a clone: drive it through MetaSchedule's own hooks
    strategy = ctx.search_strategy
    design_spaces = ctx.space_generator.generate_design_space(mod)
    strategy.pre_tuning(32, 8, design_spaces, ms.database.MemoryDatabase(), model)

    def fake_latency(candidate) -> float:  # a deterministic function of the program
        import tvm_ffi

        return 1e-4 * (1 + (int(tvm_ffi.structural_hash(candidate.sch.mod)) % 97) / 97)

    batches = 0
    while (candidates := strategy.generate_measure_candidates()) is not None:
        batches += 1
        assert 1 <= len(candidates) <= 8
        results = [ms.runner.RunnerResult([fake_latency(cand)], None) for cand in candidates]
        model.update(ctx, candidates, results)
        strategy.notify_runner_results(candidates, results)
        assert batches < 20
    strategy.post_tuning()
    task = report.to_dict()["tasks"][0]
    assert task["proposed"] <= 32 and task["measured"] <= task["proposed"]
    assert task["early_stop_limit"] is not None
    assert report.to_dict()["measured"] == model.num_samples_
    # after warm-up the forest gives a mean and a non-negative spread per candidate
    mu, sigma = model.predict_mean_std(ctx, candidates_for(ctx, design_spaces))
    assert mu is not None and np.all(sigma >= 0) and np.all(mu <= 1.0 + 1e-9)
    scores = model.predict(ctx, candidates_for(ctx, design_spaces))
    assert np.all(np.isfinite(scores)) and np.all(scores >= 0)


def candidates_for(ctx, design_spaces, count: int = 6):
    import tvm.s_tir.meta_schedule as ms
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    found = []
    for seed in range(1, 50):
        sch = Schedule(ctx.mod, seed=seed)
        Trace(design_spaces[0].trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
        sch.enter_postproc()
        if all(p.apply(sch) for p in ctx.space_generator.postprocs):
            found.append(ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)))
        if len(found) == count:
            break
    return found


def test_tune_with_every_component_records_what_it_saved(tmp_path, loopback_board):
    """`edgetune tune` with sampling, adaptive early stop, the forest + EI, contextual
    exploration and the adaptive evaluator: savings land in summary.json and the
    per-candidate measurement log."""
    out = tmp_path / "out"
    result = run_cli(
        "tune", "--profile", "host", "--model", "demo:tiny-cnn", "--trials", "32", "--out", str(out),
        "--cost-model", "rf", "--sampler", "kmeans", "--early-stop", "adaptive", "--exploration", "contextual",
        "--evaluator", "adaptive", "--no-evaluate", "--quiet",
        "--tracker", f"{loopback_board.host}:{loopback_board.port}", "--key", SESSION_KEY,
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    reduction = summary["measurement_reduction"]
    assert reduction["sampler"] == "kmeans" and reduction["early_stop"] == "adaptive"
    assert summary["search"]["cost_model"] == "rf"
    assert reduction["proposed"] >= reduction["measured"] > 0
    # every measurement is the search's, or a task's default schedule or the shipped library's schedule (tiny-cnn's
    # convolutions start from the nearest shape's) measured before the search
    trials = summary["trials"]
    before = trials["default_schedules"] + trials["library_schedules"]
    assert reduction["measured"] + before == trials["measured_on_device"] + trials["served_from_history"]
    assert len(reduction["tasks"]) == len(summary["tasks"]) >= 5  # every task (tiny-cnn: 5 kernels, and any layout transforms)
    assert any(t["removed_by_sampling"] > 0 or t["stopped_early"] for t in reduction["tasks"])
    measurement = summary["measurement"]
    assert measurement["evaluator"] == "adaptive"
    assert measurement["runs"] >= measurement["candidates"] * 2
    stopped = sum(measurement[f"stopped_by_{reason}"] for reason in ("cv", "ci", "budget", "cap"))
    assert stopped == measurement["candidates"]
    lines = [json.loads(line) for line in (out / "measurements.jsonl").read_text().splitlines()]
    assert len(lines) == measurement["candidates"]
    assert all(line["runs"] >= 2 and line["stopped_by"] in ("cv", "ci", "budget", "cap") for line in lines)
    assert all(line["cv"] is None or line["cv"] >= 0 for line in lines)
    assert sum(line["runs"] for line in lines) == measurement["runs"]
    assert "proposed" in result.stdout or "sampling" in result.stdout


def test_profile_keys_and_flags_select_stock_behaviour(tmp_path, loopback_board):
    """Every component can be switched off: the run then measures every proposed candidate
    with the fixed evaluator."""
    profile = load_profile("host")
    assert profile.measure.evaluator == "adaptive" and profile.tuning.sampler == "kmeans"
    out = tmp_path / "stock"
    result = run_cli(
        "tune", "--profile", "host", "--model", "demo:tiny-cnn", "--trials", "10", "--out", str(out),
        "--sampler", "none", "--early-stop", "none", "--exploration", "fixed", "--evaluator", "fixed",
        "--cost-model", "xgb", "--no-evaluate", "--quiet",
        "--tracker", f"{loopback_board.host}:{loopback_board.port}", "--key", SESSION_KEY,
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["measurement"]["evaluator"] == "fixed"
    assert summary["measurement_reduction"] is None
    assert not (out / "measurements.jsonl").exists()
    bad = run_cli("tune", "--profile", "host", "--model", "demo:tiny-cnn", "--sampler", "sometimes")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
