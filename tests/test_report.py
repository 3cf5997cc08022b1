"""`edgetune report` and the report every `edgetune tune` writes: files, plots, numbers, a real browser.

One real tune of the demo CNN (module fixture) is reported on; a second run is
interrupted with Ctrl-C and then resumed, so the report shows two sessions.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import SESSION_KEY, require_tool, run_cli
from edgetune.board.rpc_tracker import TrackerAddress
from edgetune.tuning.summary import TuneSummary

pytestmark = pytest.mark.integration

PLOTS = ("latency", "tasks", "time", "runs")
TUNE = ("tune", "--profile", "host", "--model", "demo:tiny-cnn")


def board_args(board: TrackerAddress) -> list[str]:
    return ["--tracker", f"{board.host}:{board.port}", "--key", SESSION_KEY]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, loopback_board) -> Path:
    """A completed run: tuned, evaluated end to end, and reported by `edgetune tune` itself."""
    out = tmp_path_factory.mktemp("report") / "run"
    result = run_cli(*TUNE, "--trials", "12", "--out", str(out), "--quiet", *board_args(loopback_board))
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"report: {out / 'report.html'}" in result.stdout
    return out


@pytest.fixture(scope="module")
def interrupted_then_resumed(tmp_path_factory, loopback_board) -> dict:
    """A run stopped with Ctrl-C (its report kept aside), then resumed with a larger budget."""
    out = tmp_path_factory.mktemp("report-resumed") / "run"
    script = Path(sys.executable).parent / "edgetune"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "edgetune.cli"]
    args = [*TUNE, "--out", str(out), "--no-evaluate", "--quiet", *board_args(loopback_board)]
    proc = subprocess.Popen([*command, *args, "--trials", "400"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = out / "measurements.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if log.exists() and len(log.read_text().splitlines()) >= 8:
            break
        time.sleep(0.5)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 130, stderr[-2000:]
    interrupted = out.parent / "interrupted"
    interrupted.mkdir()
    for name in ("summary.json", "report.html"):
        shutil.copy(out / name, interrupted / name)
    shutil.copytree(out / "report", interrupted / "report")
    kept = TuneSummary.load(out)
    resumed = run_cli(*args, "--trials", str(kept.trials.this_run + 6))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return {"out": out, "interrupted": interrupted, "first": (stdout, stderr), "resumed": resumed}


def page_of(run_dir: Path) -> str:
    return (run_dir / "report.html").read_text(encoding="utf-8")


def table_rows(page: str, table_id: str) -> list[list[str]]:
    body = re.search(rf'<table id="{table_id}">.*?<tbody>(.*?)</tbody>', page, re.S)
    assert body, f"no table {table_id}"
    return [
        [html.unescape(cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        for row in re.findall(r"<tr>(.*?)</tr>", body.group(1), re.S)
    ]


def assert_meaningful_png(path: Path, min_size: tuple[int, int] = (600, 150)) -> None:
    """A valid PNG of at least ``min_size`` with real content: many colours, not almost all white."""
    from PIL import Image

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        rgb = image.convert("RGB")
    assert rgb.size[0] >= min_size[0] and rgb.size[1] >= min_size[1], (path, rgb.size)
    counts = {color: n for n, color in rgb.getcolors(maxcolors=1 << 24)}
    assert len(counts) > 50, f"{path}: only {len(counts)} colours, a blank plot?"
    assert counts.get((255, 255, 255), 0) < 0.97 * rgb.size[0] * rgb.size[1], f"{path} is almost all white"


def close(cell: str, value: float | None) -> bool:
    if value is None:
        return cell == "-"
    return float(cell) == pytest.approx(value, rel=1e-3, abs=1e-9)


# -- a completed run ---------------------------------------------------------------------------------------


def test_tune_writes_the_report_with_every_plot(tuned):
    page = page_of(tuned)
    for name in PLOTS:
        png = tuned / "report" / f"{name}.png"
        assert png.exists(), name
        assert_meaningful_png(png)
        assert f'<img src="report/{name}.png"' in page
    assert "Not drawn" not in page
    assert len((tuned / "sessions.jsonl").read_text().splitlines()) == 1


def test_task_table_matches_the_summary(tuned):
    summary = TuneSummary.load(tuned)
    rows = table_rows(page_of(tuned), "tasks")
    assert len(rows) == len(summary.tasks) >= 5  # tiny-cnn: 5 kernels, and the transforms of a blocked layout
    for row, task in zip(rows, summary.tasks):
        index, name, kernel, weight, before, this_run, best, default, speedup, kept, library, retimed = row
        assert retimed == "-"  # tuning.confirm_best is off by default (tests/test_confirm.py covers it on)
        if task.transferred_latency_us is not None:  # the shipped library's schedule of another shape
            assert library.endswith(" (other shape)") and close(library.removesuffix(" (other shape)"), task.transferred_latency_us)
        else:
            assert close(library, task.library_latency_us)
        assert (int(index), name, float(weight)) == (task.index, task.name, task.weight)
        if "conv2d" in name or "matmul" in name:
            assert kernel == "compute", (name, kernel)
        else:
            assert kernel.startswith("memory: "), (name, kernel)
        assert (int(before), int(this_run)) == (task.trials_before, task.trials_this_run)
        assert close(best, task.best_latency_us) and close(default, task.default_latency_us)
        assert kept == ("yes" if task.kept_default else "no")
        if task.best_latency_us and task.default_latency_us:
            assert float(speedup.lstrip("x")) == pytest.approx(task.default_latency_us / task.best_latency_us, abs=0.006)


def test_status_and_session_match_the_summary(tuned):
    summary = TuneSummary.load(tuned)
    page = page_of(tuned)
    e2e = summary.end_to_end
    assert "completed" in page and f"tuned {e2e.tuned_ms:.3f} ms" in page and f"untuned {e2e.untuned_ms:.3f} ms" in page
    assert f"inside the tuned kernels {e2e.tuned_kernels_ms:.3f} ms" in page
    kernels = summary.graph["kernels"]
    # tiny-cnn: two convs and a dense layer; a mean, a reshape, and the transforms of a blocked conv layout
    assert kernels["compute_bound"] == 3 and kernels["memory_bound"] == 2 + _layout_transforms(summary)
    assert f"kernels: 3 compute-bound, {kernels['memory_bound']} memory-bound" in page
    # issue 55: the host's time per measured trial, as the tune printed it (wall clock less the board's)
    host = summary.host_time_lines()[0]
    assert host.startswith("host time ") and html.escape(host) in page
    (session,) = table_rows(page, "sessions")
    assert session[0] == "S1" and int(session[2]) == summary.trials.this_run
    assert close(session[3], round(summary.seconds.tuning_wall, 1))
    assert close(session[5], round(e2e.untuned_ms, 3)) and close(session[6], round(e2e.tuned_ms, 3))


def test_report_command_rewrites_the_page(tuned):
    (tuned / "report.html").unlink()
    result = run_cli("report", str(tuned))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"report: {tuned / 'report.html'}"
    assert "Not drawn" not in page_of(tuned)


def test_the_page_renders_in_a_real_browser(tuned, tmp_path):
    """chromium opens the page from disk: the plots load (their colours are on the screenshot)."""
    chromium = require_tool("chromium", "chromium")
    shot = tmp_path / "report.png"
    result = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--screenshot={shot}",
         "--window-size=1200,2000", (tuned / "report.html").resolve().as_uri()],
        capture_output=True, text=True, timeout=180,
    )
    assert shot.exists(), result.stderr[-2000:]
    assert_meaningful_png(shot, (1200, 2000))
    import numpy as np
    from PIL import Image

    with Image.open(shot) as image:
        pixels = np.asarray(image.convert("RGB"), dtype=int)
    # matplotlib's tab:green (the estimate and best-so-far curves) only appears if the PNGs loaded
    green = int((np.abs(pixels - (44, 160, 44)) < 20).all(axis=2).sum())
    assert green > 200, f"only {green} pixels of the curves' green: did the plots load?"


# -- interrupted, resumed, and summaries without a history ---------------------------------------------------


def test_an_interrupted_run_is_reported_by_tune(interrupted_then_resumed):
    stdout, stderr = interrupted_then_resumed["first"]
    kept = interrupted_then_resumed["interrupted"]
    assert "report: " in stdout and "interrupted" in stderr and "Traceback" not in stderr
    summary = TuneSummary.load(kept)
    assert summary.interrupted and summary.end_to_end is None
    page = page_of(kept)
    assert "interrupted" in page and "no end-to-end measurement" in page
    for name in ("latency", "tasks", "time", "runs"):
        assert_meaningful_png(kept / "report" / f"{name}.png")
    (session,) = table_rows(page, "sessions")
    assert session[-1] == "interrupted" and session[5] == session[6] == "-"


def test_a_resumed_run_shows_both_sessions(interrupted_then_resumed):
    out, resumed = interrupted_then_resumed["out"], interrupted_then_resumed["resumed"]
    assert f"report: {out / 'report.html'}" in resumed.stdout
    page = page_of(out)
    sessions = table_rows(page, "sessions")
    assert [row[0] for row in sessions] == ["S1", "S2"]
    assert [row[-1] for row in sessions] == ["interrupted", "resumed"]
    history = [json.loads(line) for line in (out / "sessions.jsonl").read_text().splitlines()]
    assert [s["interrupted"] for s in history] == [True, False]
    assert [int(row[2]) for row in sessions] == [s["trials"]["this_run"] for s in history]
    for name in PLOTS:
        assert_meaningful_png(out / "report" / f"{name}.png")
    # every measurement carries its time, so the evaluator plot knows both sessions
    lines = [json.loads(line) for line in (out / "measurements.jsonl").read_text().splitlines()]
    assert all("time" in line for line in lines)


def test_sessions_split_the_history_by_time(interrupted_then_resumed):
    from edgetune.report.data import load_run

    data = load_run(interrupted_then_resumed["out"])
    first, second = data.sessions
    assert first.summary.interrupted and not second.summary.interrupted
    assert second.first_trial == first.trials and second.offset == pytest.approx(first.length)
    assert data.timeline.source == "history" and len(data.timeline.trials) == first.trials + second.trials
    assert {line["session"] for line in data.measurements} == {1, 2}
    assert data.notes == []


def test_a_summary_without_history_or_end_to_end_still_reports(tuned, tmp_path):
    """An interrupted summary from an older edgetune, its history gone: the curves, with notes saying why."""
    data = json.loads((tuned / "summary.json").read_text())
    data["interrupted"] = True
    data.pop("end_to_end")
    for task in data["tasks"]:
        task.pop("workload_hash")
    data["history"] = str(tmp_path / "gone.db")
    run_dir = tmp_path / "old"
    run_dir.mkdir()
    (run_dir / "summary.json").write_text(json.dumps(data))
    result = run_cli("report", str(run_dir))
    assert result.returncode == 0, result.stderr
    page = page_of(run_dir)
    assert "interrupted" in page and "older edgetune" in page
    assert_meaningful_png(run_dir / "report" / "latency.png")
    assert_meaningful_png(run_dir / "report" / "time.png")
    assert not (run_dir / "report" / "tasks.png").exists() and "Not drawn" in page


def _missing(d: Path) -> Path:
    return d / "missing"


def _a_file(d: Path) -> Path:
    (d / "file").write_text("not a directory")
    return d / "file"


def _no_summary(d: Path) -> Path:
    (d / "empty").mkdir()
    return d / "empty"


def _corrupt_summary(d: Path) -> Path:
    (d / "bad").mkdir()
    (d / "bad" / "summary.json").write_text("{oops")
    return d / "bad"


@pytest.mark.parametrize(
    "make, needle",
    [(_missing, "not found"), (_a_file, "not a directory"), (_no_summary, "no summary.json"), (_corrupt_summary, "cannot be read")],
    ids=["missing", "a-file", "no-summary", "corrupt-summary"],
)
def test_report_on_a_bad_directory_is_one_line(tmp_path, make, needle):
    result = run_cli("report", str(make(tmp_path)), timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("edgetune: error:") and needle in lines[0], result.stderr


def test_report_help_teaches():
    result = run_cli("report", "--help", timeout=60)
    assert result.returncode == 0
    assert "RUN_DIR" in result.stdout and "examples:" in result.stdout and "--db" in result.stdout


def test_a_failing_report_never_fails_the_tune(tuned, tmp_path, loopback_board):
    run = tmp_path / "run"
    shutil.copytree(tuned, run, ignore=shutil.ignore_patterns("report", "report.html"))
    (run / "report").write_text("in the way of the plots' directory")
    # the history already holds more than one trial: nothing is measured, the run only summarises
    result = run_cli(*TUNE, "--trials", "1", "--out", str(run), "--no-evaluate", "--quiet", *board_args(loopback_board))
    assert result.returncode == 0, result.stderr[-3000:]
    warnings = [line for line in result.stderr.splitlines() if "report not written" in line]
    assert len(warnings) == 1 and warnings[0].startswith("edgetune: warning:"), result.stderr
    assert "Traceback" not in result.stderr and not (run / "report.html").exists()
    assert "report: " not in result.stdout


def test_report_after_tune_warns_in_one_line(tmp_path, capsys):
    from edgetune.report import report_after_tune

    assert report_after_tune(tmp_path / "nothing-here") is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("edgetune: warning: report not written") and "edgetune report" in err[0]


def _layout_transforms(summary: TuneSummary) -> int:
    """Layout transforms the run's conv layout added around blocked convolutions (none as imported)."""
    return sum("layout_transform" in task.name for task in summary.tasks)


def test_records_timed_another_way_are_another_runs(tuned, tmp_path):
    """An upgraded history holds an older run's warm records of the same workloads: not this run's curve."""
    import sqlite3

    from edgetune.report.data import history_records, load_summary

    summary = load_summary(tuned)
    db = tmp_path / "history.db"
    shutil.copy(summary.history.split(":///", 1)[-1], db)
    mine = history_records(summary, f"sqlite:///{db}", [])
    assert mine and {r.timing for r in mine} == {"flushed"}
    columns = ("workload_id, target_json, target_hash, target_kind, trace_json, candidate_hash, run_secs_json,"
               " mean_run_sec, error, args_info_json, board_id, tvm_version")
    with sqlite3.connect(db) as conn:
        conn.execute(f"INSERT INTO records ({columns}, timing, created_at)"
                     f" SELECT {columns}, 'warm', created_at - 86400 FROM records")
    notes: list[str] = []
    assert [r.id for r in history_records(summary, f"sqlite:///{db}", notes)] == [r.id for r in mine] and not notes


def test_a_slow_end_of_tuning_still_puts_every_record_in_its_session(tmp_path, loopback_board, monkeypatch):
    """The summary's date is when the tuning ended, not when the summary was made: on a busy host the board's
    after-batch hook can take seconds, and the report then read the run's first records as another run's."""
    from edgetune.board.base import TrackerBoard
    from edgetune.measure.runner import TrackerRunner
    from edgetune.profile import load_profile
    from edgetune.report.data import load_run
    from edgetune.tuning import TuneOptions, run_tune

    wait_idle = TrackerRunner._cls.wait_idle  # the Python class behind the derived object

    def slow(self, timeout_sec=None):
        wait_idle(self, timeout_sec)
        time.sleep(3.0)  # longer than the report's slack of 1.5 s

    monkeypatch.setattr(TrackerRunner._cls, "wait_idle", slow)
    profile = load_profile("host").with_overrides(rpc={"key": SESSION_KEY}, tuning={"schedules": "off"})
    summary = run_tune(TuneOptions(profile=profile, model="demo:tiny-cnn", out_dir=tmp_path, trials=6, evaluate=False,
                                   board=TrackerBoard(loopback_board)))
    assert summary.trials.this_run >= 6
    sessions = load_run(tmp_path).sessions
    assert [s.summary is not None for s in sessions] == [True], [(s.label, s.start, s.end) for s in sessions]
