"""History maintenance: stats, dedupe, export/import, prune; library and ``edgetune db`` CLI.

Every test taking ``db_url`` runs on each backend of test_history's ``BACKENDS``
(SQLite and a real PostgreSQL server).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
import tvm
import tvm_ffi
from tvm import te
from tvm.s_tir import meta_schedule as ms

from conftest import reset_postgres, run_cli
from edgetune.errors import HistoryError
from edgetune.history import (
    SCHEMA_VERSION,
    dedupe,
    export_history,
    history_stats,
    import_history,
    open_history,
    prune,
)
from test_history import (  # noqa: F401 - db_url is a fixture
    ARM,
    MOD,
    X86,
    _add_equal_workload_row,
    _matmul_sized,
    _record,
    _scalar,
    _schedule,
    _sqlalchemy_url,
    db_url,
)

MOD8 = tvm.IRModule({"main": te.create_prim_func(list(_matmul_sized(8)))})
DAY = 86400.0


def _execute(db_url: str, sql: str, **params) -> None:
    engine = sa.create_engine(_sqlalchemy_url(db_url))
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(sql), params)
    finally:
        engine.dispose()


def _rows(db_url: str) -> tuple[list[tuple], list[tuple]]:
    """Every column of every row, ids replaced by the workload's text, sorted."""
    engine = sa.create_engine(_sqlalchemy_url(db_url))
    try:
        with engine.connect() as conn:
            workloads = sorted(
                tuple(row)
                for row in conn.execute(
                    sa.text("SELECT shash, mod_hash, mod_json, created_at FROM workloads")
                )
            )
            records = sorted(
                tuple(row)
                for row in conn.execute(
                    sa.text(
                        "SELECT w.mod_hash, r.target_json, r.target_hash, r.target_kind,"
                        " r.trace_json, r.candidate_hash, r.run_secs_json, r.mean_run_sec,"
                        " r.error, r.args_info_json, r.board_id, r.timing, r.tvm_version, r.created_at"
                        " FROM records r JOIN workloads w ON w.id = r.workload_id"
                    )
                )
            )
    finally:
        engine.dispose()
    return workloads, records


def _wipe(db_url: str) -> None:
    if db_url.startswith("sqlite:///"):
        for suffix in ("", "-wal", "-shm"):
            Path(db_url.removeprefix("sqlite:///") + suffix).unlink(missing_ok=True)
    else:
        reset_postgres(db_url)


def _fill(db_url: str) -> None:
    """Two workloads, two targets, successes and failures, three boards."""
    db = open_history(db_url, board_id="rk3399-a")
    try:
        w16 = db.commit_workload(MOD)
        w8 = db.commit_workload(MOD8)
        db.commit_tuning_record(_record(w16, 2, [4e-3, 6e-3]))
        db.commit_tuning_record(_record(w16, 4, [1e-3]))
        db.commit_tuning_record(_record(w16, 8, [2e-3]))
        db.commit_tuning_record_with_error(_record(w16, 16, [1e-3]), "RPC session timed out")
        db.commit_tuning_record(_record(w16, 4, [3e-4], target=X86))
        db.commit_tuning_record(
            ms.database.TuningRecord(
                _schedule(2, MOD8).trace, w8, [5e-5], ARM,
                ms.arg_info.ArgInfo.from_prim_func(MOD8["main"]),
            )
        )
    finally:
        db.close()


def _duplicate_under_second_row(db_url: str, secs_and_ages: list[tuple[float, float]]) -> int:
    """Copies of MOD's factor-4 ARM record under a second row of MOD, with given ages."""
    row = _add_equal_workload_row(db_url)
    now = time.time()
    for index, (sec, age) in enumerate(secs_and_ages):
        if index:  # one per row: the unique constraint holds within a row
            row = _add_equal_workload_row_variant(db_url, index)
        _execute(
            db_url,
            "INSERT INTO records (workload_id, target_json, target_hash, target_kind, trace_json,"
            " candidate_hash, run_secs_json, mean_run_sec, error, args_info_json, board_id,"
            " timing, tvm_version, created_at)"
            " SELECT :w, target_json, target_hash, target_kind, trace_json, candidate_hash,"
            " :secs, :mean, NULL, args_info_json, 'import', timing, tvm_version, :at FROM records"
            " WHERE id = (SELECT MIN(id) FROM records WHERE mean_run_sec = 0.001)",
            w=row,
            secs=json.dumps([sec]),
            mean=sec,
            at=now - age,
        )
    return row


def _add_equal_workload_row_variant(db_url: str, indent: int) -> int:
    text = json.dumps(json.loads(tvm.ir.save_json(MOD)), indent=indent + 1)
    _execute(
        db_url,
        "INSERT INTO workloads (shash, mod_hash, mod_json, created_at) VALUES (:s, :h, :m, 0)",
        s=str(tvm_ffi.structural_hash(MOD)),
        h=hashlib.sha256(text.encode()).hexdigest(),
        m=text,
    )
    return _scalar(db_url, "SELECT MAX(id) FROM workloads")


# ------------------------------------------------------------------------- stats


def test_stats_group_by_workload_and_target(db_url):
    before = time.time()
    _fill(db_url)
    db = open_history(db_url, read_only=True)
    try:
        groups = history_stats(db)
    finally:
        db.close()
    args16 = "float32[16,16], float32[16,16], float32[16,16]"
    args8 = "float32[8,8], float32[8,8], float32[8,8]"
    assert sorted((g.task, g.args, g.target) for g in groups) == sorted(
        [
            ("C", args16, "llvm aarch64-linux-gnu cortex-a72, warm"),
            ("C", args16, "llvm x86_64-linux-gnu, warm"),
            ("C", args8, "llvm aarch64-linux-gnu cortex-a72, warm"),
        ]
    )
    by_key = {(g.args.split(",")[0], g.target.split()[1].rstrip(",")): g for g in groups}
    arm16 = by_key[("float32[16", "aarch64-linux-gnu")]
    assert (arm16.count, arm16.successful, arm16.failed) == (4, 3, 1)
    assert arm16.best_sec == pytest.approx(1e-3)
    assert before - 1 <= arm16.first <= arm16.last <= time.time() + 1
    assert arm16.boards == ["rk3399-a"]
    x86 = by_key[("float32[16", "x86_64-linux-gnu")]
    assert (x86.count, x86.successful, x86.failed, x86.best_sec) == (1, 1, 0, pytest.approx(3e-4))
    arm8 = by_key[("float32[8", "aarch64-linux-gnu")]
    assert (arm8.count, arm8.best_sec) == (1, pytest.approx(5e-5))
    assert len(groups) == 3


def test_stats_merge_rows_of_one_workload(db_url):
    _fill(db_url)
    _duplicate_under_second_row(db_url, [(5e-4, 0)])
    db = open_history(db_url, read_only=True)
    try:
        groups = history_stats(db)
    finally:
        db.close()
    assert len(groups) == 3
    arm16 = next(g for g in groups if "16" in g.args and "aarch64" in g.target)
    assert len(arm16.workload_ids) == 2
    assert (arm16.count, arm16.successful, arm16.best_sec) == (5, 4, pytest.approx(5e-4))
    assert sorted(arm16.boards) == ["import", "rk3399-a"]


# ------------------------------------------------------------------------ dedupe


def test_dedupe_by_date_keeps_the_newest(db_url):
    _fill(db_url)
    _duplicate_under_second_row(db_url, [(5e-4, 10.0), (7e-4, 5.0)])
    db = open_history(db_url)
    try:
        assert db.count_records(MOD, ARM) == 6
        dry = dedupe(db, "date", dry_run=True)
        assert (dry.configurations, dry.removed) == (1, 2)
        assert db.count_records(MOD, ARM) == 6
        result = dedupe(db, "date")
        assert (result.configurations, result.removed) == (1, 2)
        assert db.count_records(MOD, ARM) == 4
        # the original record was committed last (just now): it is the newest
        assert db.lookup_run_secs(MOD, ARM, _schedule(4).trace) == [1e-3]
        assert dedupe(db, "date").removed == 0
    finally:
        db.close()


def test_dedupe_by_average_replaces_with_the_mean(db_url):
    _fill(db_url)
    _duplicate_under_second_row(db_url, [(5e-4, 10.0), (2.5e-3, 5.0)])
    db = open_history(db_url)
    try:
        result = dedupe(db, "average")
        assert (result.configurations, result.removed) == (1, 2)
        assert db.count_records(MOD, ARM) == 4
        average = (1e-3 + 5e-4 + 2.5e-3) / 3
        assert db.lookup_run_secs(MOD, ARM, _schedule(4).trace) == [pytest.approx(average)]
        # the averaged record is what MetaSchedule now ranks
        assert float(db.best_record(MOD, ARM).run_secs[0]) == pytest.approx(average)
    finally:
        db.close()


def test_dedupe_rejects_an_unknown_method(db_url):
    db = open_history(db_url)
    try:
        with pytest.raises(HistoryError, match="use 'date' or 'average'"):
            dedupe(db, "median")
    finally:
        db.close()


# ------------------------------------------------------------------------- prune


def test_prune_failed_keep_top_older_and_dry_run(db_url):
    _fill(db_url)
    _execute(db_url, "UPDATE records SET created_at = created_at - 40 * 86400 WHERE mean_run_sec > 0.003")
    db = open_history(db_url)
    try:
        assert len(db) == 6
        with pytest.raises(HistoryError, match="nothing to prune"):
            prune(db)
        dry = prune(db, failed=True, keep_top=1, older_than_days=30, dry_run=True)
        # failed: factor 16; older: factor 2 (mean 5 ms); beyond top 1 on ARM/16x16: 2 ms, 5 ms
        assert (dry.failed, dry.older, dry.beyond_top, dry.removed) == (1, 1, 2, 3)
        assert len(db) == 6
        assert prune(db, failed=True).removed == 1
        assert prune(db, older_than_days=30).removed == 1
        assert len(db) == 4
        result = prune(db, keep_top=1)
        assert (result.beyond_top, result.removed) == (1, 1)
        assert db.count_records(MOD, ARM) == 1
        assert db.count_records(MOD, X86) == 1
        assert db.count_records(MOD8) == 1
        assert db.lookup_run_secs(MOD, ARM, _schedule(4).trace) == [1e-3]
        assert prune(db, keep_top=0).removed == 3
        assert len(db) == 0
        with pytest.raises(HistoryError, match="--keep-top must be >= 0"):
            prune(db, keep_top=-1)
    finally:
        db.close()


# ----------------------------------------------------------------- export/import


@pytest.mark.parametrize("name", ["history.jsonl", "history.jsonl.gz"])
def test_export_import_round_trips_every_column(db_url, tmp_path, name):
    _fill(db_url)
    before = _rows(db_url)
    db = open_history(db_url, read_only=True)
    try:
        assert export_history(db, tmp_path / name) == (2, 6)
    finally:
        db.close()
    opener = gzip.open if name.endswith(".gz") else open
    with opener(tmp_path / name, "rt") as lines:
        header = json.loads(lines.readline())
    assert header["format"] == "edgetune-history"
    assert header["schema_version"] == SCHEMA_VERSION
    assert header["tvm_version"] == tvm.__version__
    assert "edgetune_version" in header

    _wipe(db_url)
    db = open_history(db_url)
    try:
        result = import_history(db, tmp_path / name)
        assert (result.added, result.updated, result.skipped, result.workloads_added) == (6, 0, 0, 2)
        assert _rows(db_url) == before
        # idempotent
        again = import_history(db, tmp_path / name)
        assert (again.added, again.updated, again.skipped, again.workloads_added) == (0, 0, 6, 0)
        assert _rows(db_url) == before
        assert db.lookup_run_secs(MOD, ARM, _schedule(2).trace) == [4e-3, 6e-3]
    finally:
        db.close()



def test_an_export_keeps_each_records_timing_and_a_version_4_export_reads_as_warm(db_url, tmp_path):
    """Schema 5 put the timing in the record's key; a version-4 export (no timing) was timed warm."""
    _fill(db_url)
    db = open_history(db_url, board_id="rk3399-a", timing="flushed")
    try:
        db.commit_measurement(_record(db.commit_workload(MOD), 4, [7e-4]))  # the same candidate as a warm one
        export_history(db, tmp_path / "new.jsonl")
    finally:
        db.close()
    lines = [json.loads(line) for line in (tmp_path / "new.jsonl").read_text().splitlines()]
    assert sorted(line["timing"] for line in lines if line.get("type") == "record") == ["flushed"] + ["warm"] * 6
    header, body = lines[0], lines[1:]
    old = [{**header, "schema_version": 4}] + [
        {k: v for k, v in line.items() if k != "timing"} for line in body if line.get("timing") != "flushed"
    ]
    (tmp_path / "v4.jsonl").write_text("".join(json.dumps(line) + "\n" for line in old))

    for name, added, flushed_secs in (("new.jsonl", 7, [7e-4]), ("v4.jsonl", 6, None)):
        _wipe(db_url)
        db = open_history(db_url, timing="flushed")
        try:
            assert import_history(db, tmp_path / name).added == added
            # the flushed measurement is found, never the warm one of the same candidate
            assert db.lookup_run_secs(MOD, ARM, _schedule(4).trace) == flushed_secs
            assert db.count_records() == added - 6
        finally:
            db.close()
        warm = open_history(db_url, read_only=True, timing="warm")
        try:
            assert warm.count_records() == 6
        finally:
            warm.close()


def test_import_updates_older_measurements_and_keeps_newer(db_url, tmp_path):
    _fill(db_url)
    db = open_history(db_url, board_id="rk3399-a")
    try:
        export_history(db, tmp_path / "old.jsonl")
        # remeasured after the export: the history is newer than the file
        db.commit_tuning_record(_record(db.commit_workload(MOD), 4, [9e-4]))
        result = import_history(db, tmp_path / "old.jsonl")
        assert (result.added, result.updated, result.skipped) == (0, 0, 6)
        assert db.lookup_run_secs(MOD, ARM, _schedule(4).trace) == [9e-4]

        export_history(db, tmp_path / "new.jsonl")
    finally:
        db.close()
    _execute(db_url, "UPDATE records SET run_secs_json = '[0.5]', mean_run_sec = 0.5, created_at = 1")
    db = open_history(db_url)
    try:
        result = import_history(db, tmp_path / "new.jsonl")
        assert (result.added, result.updated, result.skipped) == (0, 6, 0)
        assert db.lookup_run_secs(MOD, ARM, _schedule(4).trace) == [9e-4]
        assert len(db) == 6
    finally:
        db.close()


def test_import_tvm_json_database(db_url, tmp_path):
    _fill(db_url)
    db = open_history(db_url)
    try:
        db.export_json(tmp_path / "tvm")
    finally:
        db.close()
    _wipe(db_url)
    db = open_history(db_url)
    try:
        result = import_history(db, tmp_path / "tvm")
        assert (result.added, result.skipped) == (6, 0)
        assert import_history(db, tmp_path / "tvm").skipped == 6
        assert len(db) == 6
        assert db.lookup_run_secs(MOD, ARM, _schedule(16).trace) == [1e10]
        assert db.lookup_run_secs(MOD, X86, _schedule(4).trace) == [3e-4]
    finally:
        db.close()


def test_export_tvm_writes_one_timing_and_asks_which_when_the_history_holds_both(db_url, tmp_path):
    """TVM's JSON database has no timing: a flushed and a warm time of one candidate must not land in one file."""
    _fill(db_url)  # six records timed warm
    result = run_cli("db", "export-tvm", str(tmp_path / "warm-only"), "--db", db_url, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "(6 records, timed warm)" in result.stdout
    db = open_history(db_url, board_id="rk3399-a", timing="flushed")
    try:
        db.commit_measurement(_record(db.commit_workload(MOD), 4, [7e-4]))  # a warm candidate, timed flushed
        assert db.timings() == ["flushed", "warm"]
    finally:
        db.close()
    result = run_cli("db", "export-tvm", str(tmp_path / "both"), "--db", db_url, timeout=120)
    assert result.returncode != 0 and not (tmp_path / "both" / "database_tuning_record.json").exists()
    assert result.stderr.strip().splitlines()[-1].endswith(
        "holds records timed flushed and warm, which TVM's format cannot tell apart: pick one with --timing"
    ), result.stderr
    for timing, count, secs in (("flushed", 1, [7e-4]), ("warm", 6, None)):
        result = run_cli("db", "export-tvm", str(tmp_path / timing), "--db", db_url, "--timing", timing, timeout=120)
        assert result.returncode == 0, result.stderr
        assert f"({count} records, timed {timing})" in result.stdout
        stock = ms.database.JSONDatabase(
            path_workload=str(tmp_path / timing / "database_workload.json"),
            path_tuning_record=str(tmp_path / timing / "database_tuning_record.json"),
        )
        assert len(stock) == count
        if secs is not None:
            (record,) = stock.get_all_tuning_records()
            assert [float(x) for x in record.run_secs] == secs


def test_bad_import_files_are_one_line_errors_and_import_nothing(db_url, tmp_path):
    _fill(db_url)
    db = open_history(db_url)
    try:
        export_history(db, tmp_path / "good.jsonl")
        lines = (tmp_path / "good.jsonl").read_text().splitlines()
        cases = {
            "not-export.jsonl": "hello\n",
            "old.jsonl": json.dumps({"format": "edgetune-history", "schema_version": 1}) + "\n",
            "broken.jsonl": "\n".join([*lines[:-1], "{not json"]) + "\n",
            "orphan.jsonl": "\n".join([lines[0], lines[-1]]) + "\n",
            "badmod.jsonl": "\n".join([*lines[:3], lines[1].replace('"mod_json": "', '"mod_json": "x')]),
        }
        expected = {
            "not-export.jsonl": "not an edgetune history export",
            "old.jsonl": "schema version 1",
            "broken.jsonl": f"broken.jsonl:{len(lines)}: not JSON",
            "orphan.jsonl": "does not define",
            "badmod.jsonl": "badmod.jsonl:4: invalid workload line",
        }
        _wipe_records = "DELETE FROM records"
        _execute(db_url, _wipe_records)
        for name, text in cases.items():
            (tmp_path / name).write_text(text)
            with pytest.raises(HistoryError) as excinfo:
                import_history(db, tmp_path / name)
            assert expected[name] in str(excinfo.value)
            assert "\n" not in str(excinfo.value)
            assert len(db) == 0  # one transaction: nothing of a bad file is kept
        with pytest.raises(HistoryError, match="no such export file"):
            import_history(db, tmp_path / "missing.jsonl")
        # still usable afterwards
        assert import_history(db, tmp_path / "good.jsonl").added == 6
    finally:
        db.close()


# --------------------------------------------------------------------------- CLI


def test_cli_stats_export_import_dedupe_prune(db_url, tmp_path):
    _fill(db_url)
    result = run_cli("db", "stats", "--db", db_url, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "6 records, 3 task/target groups" in result.stdout
    assert "aarch64-linux-gnu" in result.stdout and "1.000 ms" in result.stdout
    assert "timed" not in result.stdout

    export = tmp_path / "h.jsonl.gz"
    result = run_cli("db", "export", str(export), "--db", db_url, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "2 workloads, 6 records" in result.stdout

    target = f"sqlite:///{tmp_path / 'copy.db'}"
    for expected in ("6 added, 0 updated, 0 skipped", "0 added, 0 updated, 6 skipped"):
        result = run_cli("db", "import", str(export), "--db", target, timeout=120)
        assert result.returncode == 0, result.stderr
        assert expected in result.stdout

    result = run_cli("db", "dedupe", "--db", db_url, "--by", "average", timeout=120)
    assert result.returncode == 0, result.stderr
    assert "removed 0 duplicate records" in result.stdout

    result = run_cli("db", "prune", "--db", db_url, "--failed", "--dry-run", timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "would remove 1 records (1 failed)"
    result = run_cli("db", "prune", "--db", db_url, "--failed", "--keep-top", "1", timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "removed 3 records (1 failed, 2 beyond the top 1)"
    assert _scalar(db_url, "SELECT COUNT(*) FROM records") == 3


def test_cli_errors_are_one_line_with_nonzero_exit(tmp_path):
    missing = tmp_path / "missing.db"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("nope\n")
    cases = [
        (("db", "stats", "--db", str(missing)), "not found"),
        (("db", "prune", "--db", str(missing), "--failed"), "not found"),
        (("db", "import", str(tmp_path / "nothing.jsonl"), "--db", str(tmp_path / "h.db")), "no such export file"),
        (("db", "import", str(bad), "--db", str(tmp_path / "h.db")), "not an edgetune history export"),
        (("db", "export", str(tmp_path / "x.jsonl"), "--db", "mysql://u:hunter2@h/db"), "unsupported"),
    ]
    for args, expected in cases:
        result = run_cli(*args, timeout=120)
        assert result.returncode == 4, (args, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("edgetune: error: "), result.stderr
        assert expected in lines[0]
        assert "hunter2" not in result.stderr
    open_history(str(tmp_path / "empty.db")).close()
    result = run_cli("db", "prune", "--db", str(tmp_path / "empty.db"), timeout=120)
    assert result.returncode == 4 and "nothing to prune" in result.stderr


def test_cli_help_has_examples(capsys):
    from edgetune.cli import main

    for action in ("stats", "dedupe", "export", "import", "prune"):
        with pytest.raises(SystemExit) as excinfo:
            main(["db", action, "--help"])
        assert excinfo.value.code == 0
        out = capsys.readouterr().out
        assert "examples:" in out
        assert f"edgetune db {action}" in out
    # and through the real entry point
    result = run_cli("db", "--help", timeout=120)
    assert result.returncode == 0
    for action in ("stats", "dedupe", "export", "import", "prune", "export-tvm"):
        assert action in result.stdout
