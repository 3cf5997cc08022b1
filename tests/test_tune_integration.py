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
from edgetune.board.tracker import TrackerAddress

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
    assert len(summary["tasks"]) == 5
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
    proc = subprocess.Popen([str(script), *command, "--trials", "400"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if db.exists():
            try:
                if record_counts(db)[0] >= 3:
                    break
            except sqlite3.OperationalError:
                pass
        time.sleep(0.5)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    proc.send_signal(signal.SIGINT)
    _stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 130, stderr[-2000:]
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
    assert total == distinct == kept + trials["this_run"] - trials["served_from_history"]


def test_embedded_board_is_started_and_stopped(tmp_path):
    out = tmp_path / "embedded"
    result = run_cli("tune", "--profile", "host", "--model", "demo:tiny-cnn", "--trials", "5", "--out", str(out), "--no-evaluate")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "starting loopback tracker and RPC server" in result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["board"]["label"] == "loopback board (embedded)"
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


def test_suggested_caps_come_from_the_history(tmp_path, loopback_board):
    out = tmp_path / "suggest"
    base = ["tune", "--profile", "host", "--model", "demo:tiny-cnn", "--out", str(out), "--no-evaluate", *board_args(loopback_board)]
    first = run_cli(*base, "--trials", "40")
    assert first.returncode == 0, first.stderr[-3000:]
    shown = run_cli("db", "suggest", "--db", str(out / "history.db"))
    assert shown.returncode == 0 and "conv2d_nchw" in shown.stdout, shown.stdout + shown.stderr
    second = run_cli(*base, "--trials", "80", "--suggested")
    assert second.returncode == 0, second.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    cap = summary["suggested"]["max_trials_per_task"]
    assert isinstance(cap, int) and cap >= 1
    assert all(task["trials_this_run"] <= cap for task in summary["tasks"])
