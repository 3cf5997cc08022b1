"""`edgetune tune` end to end through a real tracker and RPC server.

Each test runs the real console command in a subprocess, measuring on the
session's loopback board (or, for the embedded default, on the board the
command starts itself), with few trials.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import SESSION_KEY, run_cli
from edgetune.board.rpc_tracker import TrackerAddress

pytestmark = pytest.mark.integration


def board_args(board: TrackerAddress) -> list[str]:
    return ["--tracker", f"{board.host}:{board.port}", "--key", SESSION_KEY]


def record_counts(db: Path) -> tuple[int, int, int]:
    """(records, distinct candidates, successful records) in a history file."""
    with sqlite3.connect(db) as conn:
        total, distinct = conn.execute("select count(*), count(distinct workload_id || ':' || candidate_hash) from records").fetchone()
        ok = conn.execute("select count(*) from records where mean_run_sec is not null").fetchone()[0]
    return total, distinct, ok


@pytest.fixture(scope="module")
def tuned_run(tmp_path_factory, loopback_board):
    """One real tuning run of the demo CNN, shared by the tests that inspect it."""
    out = tmp_path_factory.mktemp("tuned")
    result = run_cli("tune", "--profile", "host", "--model", "demo:tiny-cnn", "--trials", "10", "--out", str(out), *board_args(loopback_board))
    assert result.returncode == 0, result.stderr[-3000:]
    return out, result


def test_tune_writes_artifact_summary_and_history(tuned_run):
    out, result = tuned_run
    summary = json.loads((out / "summary.json").read_text())
    trials = summary["trials"]
    assert trials["this_run"] >= 10 and trials["measured_on_device"] >= 9
    assert trials["build_timeouts"] == 0
    assert summary["seconds"]["device"] > 0
    # tiny-cnn's 5 kernels, and the layout transforms a blocked conv layout (the default on AVX-512) adds
    transforms = sum("layout_transform" in task["name"] for task in summary["tasks"])
    assert len(summary["tasks"]) == 5 + transforms
    # every task got at least one trial, even with a budget of 2 per task
    assert all(task["trials_this_run"] >= 1 for task in summary["tasks"])
    e2e = summary["end_to_end"]
    assert e2e["outputs_match"] is True and e2e["max_abs_diff"] < 1e-3
    assert e2e["tuned_latency"]["median_ms"] > 0 and e2e["untuned_latency"]["median_ms"] > 0
    assert Path(e2e["artifact"]).stat().st_size > 0
    total, distinct, ok = record_counts(out / "history.db")
    assert total == distinct == trials["this_run"]
    assert ok == trials["this_run"] - trials["failed"]
    # live progress and the final report reached the user
    assert "fused_conv2d" in result.stderr and "overall:" in result.stderr
    assert "end to end on the device" in result.stdout
    # the prepared graph and its kernels: two conv+bias+relu and a dense layer; a mean and a reshape
    graph = summary["graph"]
    passes = {p["name"]: p["status"] for p in graph["passes"]}
    assert passes["integer"] == "unchanged"  # a float model: nothing quantized to compute in int8
    assert graph["optimization"] == "full" and [p["name"] for p in graph["passes"]][1:3] == ["fold-constants", "fold-batch-norm"]
    assert (graph["kernels"]["compute_bound"], graph["kernels"]["memory_bound"], graph["kernels"]["foldable"]) == (3, 2 + transforms, [])
    assert f"kernels: 3 compute-bound, {2 + transforms} memory-bound" in result.stdout
    kernels_ms = sum(t["weight"] * t["best_latency_us"] for t in summary["tasks"]) / 1e3
    assert e2e["tuned_kernels_ms"] == pytest.approx(kernels_ms)
    assert "inside the tuned kernels:" in result.stdout


def test_rerun_resumes_without_measuring_again(tuned_run, loopback_board):
    out, _ = tuned_run
    before = record_counts(out / "history.db")
    result = run_cli("tune", "--profile", "host", "--model", "demo:tiny-cnn", "--trials", "10", "--out", str(out), "--no-evaluate", *board_args(loopback_board))
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trials"]["in_history_before"] == before[0]
    assert summary["trials"]["this_run"] == 0 and summary["trials"]["measured_on_device"] == 0
    assert record_counts(out / "history.db") == before


def test_ctrl_c_keeps_measurements_and_rerun_resumes(tmp_path, loopback_board):
    out = tmp_path / "run"
    db = out / "history.db"
    command = ["tune", "--profile", "host", "--model", "demo:tiny-cnn", "--out", str(out), "--no-evaluate", *board_args(loopback_board)]
    script = Path(sys.executable).parent / "edgetune"
    # started with SIGINT blocked, as a parent may leave it (the mask is inherited, and a run
    # started that way used to ignore Ctrl-C and finish): the run must still stop
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        proc = subprocess.Popen([str(script), *command, "--trials", "400"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    deadline, seen = time.monotonic() + 240, 0
    while time.monotonic() < deadline and proc.poll() is None:
        if db.exists():
            try:
                seen = record_counts(db)[0]
                if seen >= 3:
                    break
            except sqlite3.OperationalError:
                pass
        time.sleep(0.5)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    masks = " ".join(line for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines() if line.startswith("Sig"))
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 130, f"SIGINT sent with {seen} records kept ({masks}); stdout:\n{stdout[-1500:]}\nstderr:\n{stderr[-2000:]}"
    assert "interrupted" in stderr and "resume" in stderr and "Traceback" not in stderr
    kept, distinct, _ok_kept = record_counts(db)
    assert kept >= 3 and kept == distinct
    assert json.loads((out / "summary.json").read_text())["interrupted"] is True

    result = run_cli(*command, "--trials", str(kept + 5))
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trials"]["in_history_before"] == kept
    assert 1 <= summary["trials"]["this_run"] <= 5 + len(summary["tasks"])
    # the cost model was trained on the kept measurements before the first new one
    assert summary["warm_start"]["scope"] == "same"
    assert summary["warm_start"]["same_task"] == _ok_kept
    # candidates the search proposes again are served from the history, not re-measured
    trials = summary["trials"]
    assert trials["measured_on_device"] + trials["served_from_history"] + trials["failed"] >= trials["this_run"]
    total, distinct, _ok = record_counts(db)
    assert total == distinct
    # a served candidate adds no row, unless its module was measured under another trace
    # (e.g. equal to a task's default schedule): found through its claim, stored under its own trace
    assert kept + trials["this_run"] - trials["served_from_history"] <= total <= kept + trials["this_run"]


def test_embedded_board_is_started_and_stopped(tmp_path):
    out = tmp_path / "embedded"
    result = run_cli(
        "tune", "--profile", "host", "--model", "demo:tiny-cnn", "--trials", "5", "--scheduler", "ucb", "--out", str(out), "--no-evaluate"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "starting loopback tracker and RPC server" in result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["board"]["label"] == "loopback board (embedded)"
    # the embedded board shares the host's CPUs: no batch is timed while the next one is built
    assert summary["search"]["scheduler_awaits_measurements"] is True
    assert summary["board"]["tracker"].startswith("127.0.0.1:")
    assert summary["trials"]["measured_on_device"] >= 5
    log_dir = str((out / "board-logs").resolve())
    leftovers = []
    for proc in psutil.process_iter(["cwd", "cmdline"]):
        try:
            if proc.info["cwd"] == log_dir:
                leftovers.append(proc.info["cmdline"])
        except psutil.Error:
            continue
    assert leftovers == []


def _processes_in(directory: Path) -> list[list[str]]:
    found = []
    for proc in psutil.process_iter(["cwd", "cmdline"]):
        try:
            if proc.info["cwd"] == str(directory.resolve()):
                found.append(proc.info["cmdline"])
        except psutil.Error:
            continue
    return found


def test_sigterm_stops_the_embedded_board(tmp_path):
    """`kill PID` on a tune run leaves no tracker or RPC server behind."""
    out = tmp_path / "killed"
    process = subprocess.Popen(
        [sys.executable, "-m", "edgetune.cli", "tune", "--profile", "host", "--model", "demo:tiny-cnn",
         "--trials", "400", "--out", str(out), "--no-evaluate", "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    log_dir = out / "board-logs"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        # SIGTERM lands mid-tuning, inside MetaSchedule's C++ loop: the case that used to hang
        if (out / "history.db").exists() and len(_processes_in(log_dir)) >= 2:
            try:
                if record_counts(out / "history.db")[0] >= 1:
                    break
            except sqlite3.OperationalError:
                pass
        time.sleep(0.5)
    assert process.poll() is None, process.communicate()[1][-2000:]
    assert len(_processes_in(log_dir)) >= 2  # tracker and server are up
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    time.sleep(0.5)
    assert _processes_in(log_dir) == [], stderr[-2000:]
    # the batch in flight was kept and the run says how to resume
    assert json.loads((out / "summary.json").read_text())["interrupted"] is True
    assert "run the same command again to resume" in stderr and "Traceback" not in stderr


def test_history_exports_to_stock_json_database(tuned_run, tmp_path):
    import tvm.s_tir.meta_schedule as ms

    out, _ = tuned_run
    result = run_cli("db", "export-tvm", str(tmp_path / "json"), "--db", str(out / "history.db"))
    assert result.returncode == 0, result.stderr
    stock = ms.database.JSONDatabase(
        path_workload=str(tmp_path / "json" / "database_workload.json"),
        path_tuning_record=str(tmp_path / "json" / "database_tuning_record.json"),
    )
    assert len(stock) == record_counts(out / "history.db")[0]


def _history_of_two_task_types(db: Path) -> None:
    """A history of demo:tiny-cnn on the host profile's target, known by construction:
    one conv2d workload found its best at the last of 24 records, the dense
    layer (matmul) at the first of 16. Built directly, not by a tuning run, so
    which task types have enough records does not depend on timing."""
    import tvm.s_tir.meta_schedule as ms

    from edgetune.builder.intrinsics import load_tensor_intrinsics
    from edgetune.history import open_history
    from edgetune.tasks.signature import operator_signature
    from edgetune.profile import load_profile
    from edgetune.tasks import load_model, prepare_for_tuning
    from edgetune.tasks.graph import prepare_graph

    profile = load_profile("host")
    target = profile.tvm_target()
    load_tensor_intrinsics(target)
    # the graph a tune with this profile prepares: convolutions in the profile's layout (blocked on x86)
    prepared = prepare_graph(load_model("demo:tiny-cnn"), profile.tuning.conv_layout, "full", target)
    extracted = ms.relax_integration.extract_tasks(prepare_for_tuning(prepared.mod, target), target)
    mods = {"+".join(operator_signature(t.dispatched[0])): t.dispatched[0] for t in extracted}
    conv = next(mod for op, mod in mods.items() if "conv2d" in op)
    dense = next(mod for op, mod in mods.items() if op.startswith("matmul"))
    history = open_history(str(db), board_id="other-run")
    for mod, count, best_at in ((conv, 24, 24), (dense, 16, 1)):
        workload = history.commit_workload(mod)
        ctx = ms.TuneContext(
            mod=mod, target=target, space_generator="post-order-apply", search_strategy="replay-trace",
            task_name="history", num_threads=2, rand_state=5,
        )
        ctx.pre_tuning(
            max_trials=count, num_trials_per_iter=count, design_spaces=ctx.generate_design_space(),
            database=ms.database.MemoryDatabase(), cost_model=ms.cost_model.RandomModel(),
        )
        candidates = ctx.generate_measure_candidates()
        assert len(candidates) == count
        for i, cand in enumerate(candidates, start=1):
            seconds = 1e-7 if i == best_at else 1.0
            history.commit_tuning_record(ms.database.TuningRecord(cand.sch.trace, workload, [seconds], target, cand.args_info))
    history.close()


def test_suggested_settings_are_applied_per_task_type(tmp_path, loopback_board):
    out = tmp_path / "suggest"
    base = ["tune", "--profile", "host", "--model", "demo:tiny-cnn", "--out", str(out), "--no-evaluate", *board_args(loopback_board)]
    out.mkdir(parents=True)
    _history_of_two_task_types(out / "history.db")
    shown = run_cli("db", "suggest", "--db", str(out / "history.db"), env={"COLUMNS": "250"})
    assert shown.returncode == 0 and "conv2d_NCHWc" in shown.stdout, shown.stdout + shown.stderr
    assert "kmeans_distance_ratio" in shown.stdout
    # fixed early stop: the suggestion is a hard cap per task, easy to check
    # 40 trials: the 7 defaults, then batches of every task (the caps below are checked as upper bounds; 70 took
    # twice as long and bound no cap either)
    second = run_cli(*base, "--trials", "40", "--suggested", "--early-stop", "fixed")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "--suggested:" in second.stderr  # the run says which types got what
    assert "--suggested:" in second.stdout  # and repeats it in the final report
    summary = json.loads((out / "summary.json").read_text())
    suggested = summary["suggested"]
    types = {t["operator"]: t for t in suggested["task_types"]}
    by_name = {t["name"]: t for t in summary["tasks"]}
    assert [e["task"] for e in suggested["tasks"]] == list(by_name)
    for entry in suggested["tasks"]:
        if not entry["from_history"]:
            assert entry["operator"] in suggested["task_types_without_history"] and entry["max_trials"] is None
            assert entry["kmeans_distance_ratio"] == 0.3  # the profile's
            continue
        own = types[entry["operator"]]
        assert entry["max_trials"] == own["max_trials_per_task"]
        ratio = own["kmeans_distance_ratio"]
        assert entry["kmeans_distance_ratio"] == (None if ratio == 0 else ratio)
        assert by_name[entry["task"]]["trials_this_run"] <= entry["max_trials"]
    caps = {e["operator"]: e["max_trials"] for e in suggested["tasks"] if e["from_history"]}
    batch = suggested["batch"]
    # best at 24 -> 24 x 1.25 = 30 rounded up to whole batches; best at 1 -> one batch
    assert caps == {
        next(op for op in caps if "conv2d" in op): -(-30 // batch) * batch,
        next(op for op in caps if op.startswith("matmul")): batch,
    }, caps
    assert {"+".join(op) if isinstance(op, list) else op for op in suggested["task_types_without_history"]} == set(
        e["operator"] for e in suggested["tasks"] if not e["from_history"]
    )
