"""Two real ``edgetune tune`` runs sharing one tracker and one PostgreSQL history (issue 17).

Both tune the same demo model with the same seed at the same time, so their
searches propose the same candidates: the claims in the history must let only
one of them measure each, the other waiting for the result. Also: claims are
released when a run is interrupted.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from conftest import SESSION_KEY, reset_postgres
from edgetune.history import open_history

pytestmark = pytest.mark.integration


def _tune(out: Path, db: str, board, *extra: str) -> subprocess.Popen:
    script = Path(sys.executable).parent / "edgetune"
    command = [
        str(script), "tune", "--profile", "host", "--model", "demo:tiny-cnn", "--out", str(out), "--db", db,
        "--no-evaluate", "--quiet", "--tracker", f"{board.host}:{board.port}", "--key", SESSION_KEY, *extra,
    ]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _scalar(url: str, sql: str) -> int:
    engine = sa.create_engine("postgresql+psycopg://" + url.split("://", 1)[1])
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text(sql)).scalar_one())
    finally:
        engine.dispose()


def _timed_modules(url: str) -> list[str]:
    """Claim keys (scheduled module hashes) of every record a board timed."""
    import tvm_ffi
    from tvm.s_tir import Schedule

    engine = sa.create_engine("postgresql+psycopg://" + url.split("://", 1)[1])
    try:
        with engine.connect() as conn:
            ids = [int(i) for i in conn.execute(sa.text(
                "SELECT id FROM records WHERE board_id LIKE '%@%' AND error IS NULL ORDER BY id")).scalars()]
    finally:
        engine.dispose()
    db = open_history(url, read_only=True)
    try:
        keys = []
        for record in db.bulk.records_by_id(ids):
            sch = Schedule(record.workload.mod)
            record.trace.apply_to_schedule(sch, remove_postproc=False)
            keys.append(str(tvm_ffi.structural_hash(sch.mod)))
        return keys
    finally:
        db.close()


def test_two_runs_sharing_a_history_never_measure_one_candidate_twice(tmp_path, loopback_board, postgres_url):
    reset_postgres(postgres_url)
    open_history(postgres_url).close()  # the tables exist before both start
    runs = [_tune(tmp_path / name, postgres_url, loopback_board, "--trials", "12") for name in ("a", "b")]
    outputs = [proc.communicate(timeout=900) for proc in runs]
    for proc, (_stdout, stderr) in zip(runs, outputs):
        assert proc.returncode == 0, stderr[-3000:]
    trials = [json.loads((tmp_path / name / "summary.json").read_text())["trials"] for name in ("a", "b")]
    measured = sum(t["measured_on_device"] for t in trials)
    # what a board timed is stored with the board's address ('key@host:port'); a served
    # candidate without. Each timed module (trace replayed, hashed as the claims key it) once.
    timed = _timed_modules(postgres_url)
    assert len(timed) == measured, trials
    assert len(set(timed)) == len(timed), "a candidate was measured by both runs"
    # same seed, same model: the runs proposed common candidates and one waited for the other
    waited = sum(t["waited_for_others"] for t in trials)
    assert waited >= 1, trials
    assert all(t["served_from_history"] >= t["waited_for_others"] for t in trials)
    # every claim ended with its measurement (or was released): none is left live
    assert _scalar(postgres_url, "SELECT COUNT(*) FROM claims WHERE record_id IS NULL") == 0
    assert _scalar(postgres_url, "SELECT COUNT(*) FROM claims WHERE record_id IS NOT NULL") == measured


def test_an_interrupted_run_releases_its_claims(tmp_path, loopback_board, postgres_url):
    reset_postgres(postgres_url)
    open_history(postgres_url).close()
    proc = _tune(tmp_path / "run", postgres_url, loopback_board, "--trials", "400")
    deadline, finished, live = time.monotonic() + 300, 0, 0
    while time.monotonic() < deadline and proc.poll() is None:
        finished = _scalar(postgres_url, "SELECT COUNT(*) FROM claims WHERE record_id IS NOT NULL")
        live = _scalar(postgres_url, "SELECT COUNT(*) FROM claims WHERE record_id IS NULL")
        if finished >= 2 and live >= 1:
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    assert live >= 1, "the run never held a claim while measuring"
    proc.send_signal(signal.SIGINT)
    try:
        _stdout, stderr = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)  # the CLI dumps every thread's stack: where it is stuck
        time.sleep(3)
        proc.kill()
        pytest.fail("the run did not stop within 240 s of Ctrl-C; its stacks:\n" + proc.communicate()[1][-6000:])
    assert proc.returncode == 130, stderr[-2000:]
    assert _scalar(postgres_url, "SELECT COUNT(*) FROM claims WHERE record_id IS NULL") == 0
    assert _scalar(postgres_url, "SELECT COUNT(*) FROM claims WHERE record_id IS NOT NULL") >= finished
