"""Tuning history: a MetaSchedule database in SQL.

Backend conformance pattern: every test taking ``db_url`` runs once per backend
in ``BACKENDS``. The ``postgresql`` parameter uses the session's own PostgreSQL
server (conftest ``postgres_url``: Debian's ``postgresql`` binaries; skipped
without them, a failure under ``CI=true``), or ``EDGETUNE_TEST_POSTGRES_URL`` (an
empty database the tests may wipe) when that is set. Every test starts from an
empty database.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import sqlite3
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
import tvm
import tvm_ffi
from tvm import te
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms

from edgetune.errors import HistoryError
from edgetune.history import SCHEMA_VERSION, HistoryDatabase, open_history, upgrade_history
from conftest import reset_postgres

BACKENDS = ["sqlite", "postgresql"]

ARM = tvm.target.Target(
    {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72", "num-cores": 4}
)
X86 = tvm.target.Target({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "num-cores": 2})


def _sqlalchemy_url(db_url: str) -> str:
    """The URL with the driver the history uses (psycopg 3 for PostgreSQL)."""
    if db_url.startswith("postgresql://"):
        return "postgresql+psycopg://" + db_url.removeprefix("postgresql://")
    return db_url


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history' / 'tuning.db'}"
    url = request.getfixturevalue("postgres_url")
    reset_postgres(url)
    return url


@pytest.fixture
def db(db_url: str) -> HistoryDatabase:
    database = open_history(db_url, board_id="board-01")
    yield database
    database.close()


def _matmul() -> tuple[tvm.IRModule, list[ms.arg_info.ArgInfo]]:
    a = te.placeholder((16, 16), name="A")
    b = te.placeholder((16, 16), name="B")
    k = te.reduce_axis((0, 16), name="k")
    c = te.compute((16, 16), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    func = te.create_prim_func([a, b, c])
    return tvm.IRModule({"main": func}), ms.arg_info.ArgInfo.from_prim_func(func)


MOD, ARGS = _matmul()


def _schedule(factor: int, mod: tvm.IRModule = MOD) -> Schedule:
    """A distinct candidate per factor: split the outer loop by ``factor``."""
    sch = Schedule(mod)
    i, _j, _k = sch.get_loops(sch.get_sblock("C"))
    sch.split(i, [None, factor])
    return sch


def _record(workload, factor: int, run_secs, target=ARM) -> ms.database.TuningRecord:
    return ms.database.TuningRecord(_schedule(factor).trace, workload, run_secs, target, ARGS)


def _secs(record: ms.database.TuningRecord) -> list[float]:
    return [float(sec) for sec in record.run_secs]


def _trace_json(record: ms.database.TuningRecord) -> str:
    return json.dumps(record.as_json()[0], sort_keys=True)


def _scalar(db_url: str, sql: str) -> object:
    engine = sa.create_engine(_sqlalchemy_url(db_url))
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text(sql)).scalar_one()
    finally:
        engine.dispose()


# --------------------------------------------------------------------- workloads


def test_commit_workload_twice_gives_one_row_and_the_same_workload(db, db_url):
    first = db.commit_workload(MOD)
    again = db.commit_workload(tvm.ir.load_json(tvm.ir.save_json(MOD)))
    assert first.same_as(again)
    assert db.has_workload(MOD)
    assert _scalar(db_url, "SELECT COUNT(*) FROM workloads") == 1
    shash = _scalar(db_url, "SELECT shash FROM workloads")
    assert shash == str(tvm_ffi.structural_hash(MOD))

    other = tvm.IRModule({"main": te.create_prim_func(list(_matmul_sized(8)))})
    assert not db.has_workload(other)


def _matmul_sized(n: int):
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    return a, b, te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")


def test_is_a_metaschedule_database(db):
    assert isinstance(db, ms.database.Database)
    with db:
        assert ms.database.Database.current().same_as(db)
    assert ms.database.Database.current() is None


def _add_equal_workload_row(db_url: str, mod: tvm.IRModule = MOD) -> int:
    """A second row for ``mod``, serialised differently (as another TVM version would)."""
    text = json.dumps(json.loads(tvm.ir.save_json(mod)), indent=1)
    engine = sa.create_engine(_sqlalchemy_url(db_url))
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO workloads (shash, mod_hash, mod_json, created_at)"
                    " VALUES (:s, :h, :m, 0)"
                ),
                {
                    "s": str(tvm_ffi.structural_hash(mod)),
                    "h": hashlib.sha256(text.encode()).hexdigest(),
                    "m": text,
                },
            )
            return conn.execute(sa.text("SELECT MAX(id) FROM workloads")).scalar_one()
    finally:
        engine.dispose()


def test_structurally_equal_workload_rows_are_one_workload(db_url):
    """A module serialised differently (another TVM version, an import) has its own row."""
    first = open_history(db_url, board_id="board-01")
    first.commit_tuning_record(_record(first.commit_workload(MOD), 2, [4e-3]))
    first.close()
    second_row = _add_equal_workload_row(db_url)
    engine = sa.create_engine(_sqlalchemy_url(db_url))
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO records (workload_id, target_json, target_hash, target_kind,"
                " trace_json, candidate_hash, run_secs_json, mean_run_sec, args_info_json,"
                " board_id, timing, tvm_version, created_at)"
                " SELECT :w, target_json, target_hash, target_kind, trace_json,"
                " 'other', '[0.001]', 0.001, args_info_json, 'board-02', timing, tvm_version, 0"
                " FROM records"
            ),
            {"w": second_row},
        )
    engine.dispose()

    db = open_history(db_url, board_id="board-01")
    try:
        workload = db.commit_workload(MOD)
        assert [_secs(r) for r in db.get_top_k(workload, 5)] == [[1e-3], [4e-3]]
        assert db.count_records(MOD) == 2
        # a candidate already stored under the other row is updated there, not duplicated
        db.commit_tuning_record(_record(workload, 2, [3e-3]))
        assert db.count_records(MOD) == 2
        assert db.lookup_run_secs(MOD, ARM, _schedule(2).trace) == [3e-3]
    finally:
        db.close()
    assert _scalar(db_url, "SELECT COUNT(*) FROM workloads") == 2


def test_same_module_from_two_handles_is_one_row(db_url):
    """Insert-or-select: a second writer that has not seen the row reuses it."""
    first = open_history(db_url)
    second = open_history(db_url)
    try:
        assert second.count_records(MOD) == 0  # second has looked and found nothing
        first.commit_workload(MOD)
        second.commit_tuning_record(_record(second.commit_workload(MOD), 4, [1e-3]))
        assert _scalar(db_url, "SELECT COUNT(*) FROM workloads") == 1
        # A writer that looked before the row existed inserts at the same moment as
        # another: the unique (shash, mod_hash) makes its insert select that row.
        row_id = _scalar(db_url, "SELECT id FROM workloads")
        third = open_history(db_url)
        try:
            with third._engine.begin() as conn:
                entry = third._insert_workload(conn, MOD, tvm.ir.save_json(MOD), time.time())
            assert entry.ids == [row_id]
        finally:
            third.close()
        assert _scalar(db_url, "SELECT COUNT(*) FROM workloads") == 1
    finally:
        first.close()
        second.close()


# ----------------------------------------------------------------------- records


def test_top_k_orders_by_mean_run_time_and_skips_failures(db, db_url):
    workload = db.commit_workload(MOD)
    db.commit_tuning_record(_record(workload, 2, [3e-3, 5e-3]))  # mean 4 ms
    db.commit_tuning_record(_record(workload, 4, [1e-3, 2e-3]))  # mean 1.5 ms
    db.commit_tuning_record(_record(workload, 8, [2e-3]))  # mean 2 ms
    db.commit_tuning_record(_record(workload, 16, [1e10]))  # MetaSchedule's failure stub
    db.commit_tuning_record(_record(workload, 32, None))
    db.commit_tuning_record_with_error(_record(workload, 1, [1e-4]), "RPC session timed out")

    assert len(db) == 6
    assert db.count_records() == 6
    assert db.count_records(successful_only=True) == 3
    assert db.count_records(workload=MOD, target=ARM, successful_only=True) == 3
    assert db.count_records(target=X86) == 0

    top = db.get_top_k(workload, 10)
    assert [_secs(r) for r in top] == [[1e-3, 2e-3], [2e-3], [3e-3, 5e-3]]
    assert [_secs(r) for r in db.get_top_k(workload, 2)] == [[1e-3, 2e-3], [2e-3]]
    assert db.get_top_k(workload, 0) == []

    errors = _scalar(db_url, "SELECT COUNT(*) FROM records WHERE error = 'RPC session timed out'")
    assert errors == 1
    assert _scalar(db_url, "SELECT COUNT(*) FROM records WHERE board_id = 'board-01'") == 6
    assert _scalar(db_url, "SELECT DISTINCT tvm_version FROM records") == tvm.__version__
    # Failed records read back with MetaSchedule's stub, so stock code skips them too.
    failed = [r for r in db.get_all_tuning_records() if _secs(r) == [1e10]]
    assert len(failed) == 3


def test_trace_without_schedule_instructions_is_never_picked(db):
    """Mirrors TVM's TuningRecord::IsValid, which the stock databases apply."""
    workload = db.commit_workload(MOD)
    empty_trace = Schedule(MOD).trace
    db.commit_tuning_record(ms.database.TuningRecord(empty_trace, workload, [1e-6], ARM, ARGS))
    db.commit_tuning_record(_record(workload, 4, [1e-3]))
    assert len(db) == 2
    assert [_secs(r) for r in db.get_top_k(workload, 5)] == [[1e-3]]


def test_committing_a_candidate_again_updates_its_row(db, db_url):
    workload = db.commit_workload(MOD)
    db.commit_tuning_record(_record(workload, 4, [5e-3]))
    db.commit_tuning_record(_record(workload, 4, [2e-3, 2e-3]))
    assert len(db) == 1
    assert _secs(db.get_top_k(workload, 1)[0]) == [2e-3, 2e-3]
    assert _scalar(db_url, "SELECT mean_run_sec FROM records") == pytest.approx(2e-3)

    # the same trace on another board's target is another candidate
    db.commit_tuning_record(_record(workload, 4, [1e-3], target=X86))
    assert len(db) == 2


def test_has_candidate_and_lookup_run_secs_for_resuming(db):
    workload = db.commit_workload(MOD)
    db.commit_tuning_record(_record(workload, 4, [1e-3, 3e-3]))
    db.commit_tuning_record_with_error(_record(workload, 8, [1e-3]), "wrong result")

    assert db.has_candidate(workload, ARM, _schedule(4).trace)
    assert db.has_candidate(MOD, ARM, _schedule(8).trace)
    assert not db.has_candidate(workload, X86, _schedule(4).trace)
    assert not db.has_candidate(workload, ARM, _schedule(2).trace)
    assert db.lookup_run_secs(workload, ARM, _schedule(4).trace) == [1e-3, 3e-3]
    assert db.lookup_run_secs(workload, ARM, _schedule(8).trace) == [1e10]
    assert db.lookup_run_secs(workload, ARM, _schedule(2).trace) is None


def test_a_target_view_restricts_what_metaschedule_sees(db):
    workload = db.commit_workload(MOD)
    db.commit_tuning_record(_record(workload, 2, [4e-3], target=ARM))
    db.commit_tuning_record(_record(workload, 4, [3e-3], target=ARM))
    db.commit_tuning_record(_record(workload, 8, [1e-3], target=X86))

    # stock semantics: every target's records compete
    assert len(db) == 3
    assert _secs(db.get_top_k(workload, 1)[0]) == [1e-3]

    arm = db.for_target(ARM)
    assert len(arm) == 2
    assert [_secs(r) for r in arm.get_top_k(workload, 5)] == [[3e-3], [4e-3]]
    assert len(arm.get_all_tuning_records()) == 2
    sch = arm.query_schedule(MOD, ARM, "main")
    assert tvm_ffi.structural_equal(sch.mod, _schedule(4).mod)
    assert len(db.for_target(X86)) == 1

    # the history itself has no mode: it still shows every target
    assert len(db) == 3
    assert _secs(db.best_record(workload, ARM)) == [3e-3]
    assert _secs(db.best_record(MOD, X86)) == [1e-3]
    assert db.best_record(workload, tvm.target.Target({"kind": "llvm"})) is None


def test_query_schedule_applies_the_best_trace(db):
    workload = db.commit_workload(MOD)
    db.commit_tuning_record(_record(workload, 2, [4e-3]))
    db.commit_tuning_record(_record(workload, 8, [1e-3]))

    sch = db.query_schedule(MOD, ARM, "main")
    assert tvm_ffi.structural_equal(sch.mod, _schedule(8).mod)
    assert not tvm_ffi.structural_equal(sch.mod, _schedule(2).mod)
    assert tvm_ffi.structural_equal(db.query_ir_module(MOD, ARM, "main"), _schedule(8).mod)
    assert _secs(db.query_tuning_record(MOD, ARM, "main")) == [1e-3]

    unknown = tvm.IRModule({"main": te.create_prim_func(list(_matmul_sized(8)))})
    assert db.query_schedule(unknown, ARM, "main") is None


def test_long_target_and_trace_texts_are_indexed_by_hash(db, db_url):
    """Unique keys use SHA-256 digests, so no TEXT column is indexed (PostgreSQL's
    B-tree refuses entries over about 2.7 kB)."""
    features = [f"+feature-{index:04d}" for index in range(600)]
    long_target = tvm.target.Target(
        {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": features}
    )
    workload = db.commit_workload(MOD)
    db.commit_tuning_record(_record(workload, 4, [2e-3], target=long_target))
    db.commit_tuning_record(_record(workload, 4, [1e-3], target=long_target))
    assert len(json.loads(_scalar(db_url, "SELECT target_json FROM records"))["mattr"]) == 600
    assert db.count_records(MOD, long_target) == 1
    assert _secs(db.best_record(MOD, long_target)) == [1e-3]
    assert db.best_record(MOD, ARM) is None


# ------------------------------------------------------------------ persistence


def test_reopening_keeps_records_and_the_best_trace(db_url):
    db = open_history(db_url)
    workload = db.commit_workload(MOD)
    db.commit_tuning_record(_record(workload, 2, [4e-3]))
    db.commit_tuning_record(_record(workload, 8, [1e-3]))
    best_before = db.get_top_k(workload, 1)[0]
    db.close()

    reopened = open_history(db_url, read_only=True)
    try:
        assert len(reopened) == 2
        assert reopened.has_workload(MOD)
        best_after = reopened.query_tuning_record(MOD, ARM, "main")
        assert _trace_json(best_after) == _trace_json(best_before)
        assert _secs(best_after) == [1e-3]
        assert json.dumps(best_after.as_json()[2], sort_keys=True) == json.dumps(
            best_before.as_json()[2], sort_keys=True
        )
    finally:
        reopened.close()


def test_read_only_refuses_writes(db_url):
    writer = open_history(db_url)
    writer.commit_workload(MOD)
    writer.close()
    db = open_history(db_url, read_only=True)
    try:
        # known workloads resolve: the stock query_* call commit_workload
        assert db.commit_workload(MOD).same_as(db.commit_workload(MOD))
        other = tvm.IRModule({"main": te.create_prim_func(list(_matmul_sized(8)))})
        with pytest.raises(HistoryError, match="read-only"):
            db.commit_workload(other)
        with pytest.raises(HistoryError, match="read-only"):
            db.commit_tuning_record(_record(db.commit_workload(MOD), 4, [1e-3]))
        assert len(db) == 0
    finally:
        db.close()


def test_schema_version_mismatch_is_refused(db_url):
    open_history(db_url).close()
    engine = sa.create_engine(_sqlalchemy_url(db_url))
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE meta SET value = '7' WHERE key = 'schema_version'"))
    engine.dispose()

    with pytest.raises(HistoryError) as excinfo:
        open_history(db_url)
    message = str(excinfo.value)
    assert message.endswith(
        f"history schema version 7, this edgetune reads version {SCHEMA_VERSION}; "
        "export it with the edgetune that wrote it"
    )
    assert "\n" not in message


def _version_1_tables() -> sa.MetaData:
    """The tables as schema version 1 created them."""
    old = sa.MetaData()
    sa.Table(
        "meta", old,
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )
    sa.Table(
        "workloads", old,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("shash", sa.String(20), nullable=False, index=True),
        sa.Column("mod_json", sa.Text, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
    )
    sa.Table(
        "records", old,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "workload_id", sa.Integer, sa.ForeignKey("workloads.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("target_json", sa.Text, nullable=False),
        sa.Column("target_kind", sa.String(64), nullable=False),
        sa.Column("trace_json", sa.Text, nullable=False),
        sa.Column("candidate_hash", sa.String(64), nullable=False),
        sa.Column("run_secs_json", sa.Text, nullable=True),
        sa.Column("mean_run_sec", sa.Double, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("args_info_json", sa.Text, nullable=False),
        sa.Column("board_id", sa.String(255), nullable=False),
        sa.Column("tvm_version", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.UniqueConstraint(
            "workload_id", "target_json", "candidate_hash", name="uq_records_candidate"
        ),
        sa.Index("ix_records_best", "workload_id", "target_json", "mean_run_sec"),
    )
    return old


def _version_1_record(workload_id: int, factor: int, secs: float, mod=MOD) -> dict:
    args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    trace, _, target, args_json = ms.database.TuningRecord(
        _schedule(factor, mod).trace, ms.database.Workload(mod), [secs], ARM, args
    ).as_json()
    trace_text = json.dumps(trace, sort_keys=True)
    return {
        "workload_id": workload_id,
        "target_json": json.dumps(target, sort_keys=True),
        "target_kind": "llvm",
        "trace_json": trace_text,
        "candidate_hash": hashlib.sha256(trace_text.encode()).hexdigest(),
        "run_secs_json": json.dumps([secs]),
        "mean_run_sec": secs,
        "error": None,
        "args_info_json": json.dumps(args_json, sort_keys=True),
        "board_id": "old",
        "tvm_version": tvm.__version__,
        "created_at": 1.0,
    }


def _make_version_1_history(db_url: str) -> None:
    """A version-1 history where two racing writers left two rows of one module."""
    old = _version_1_tables()
    mod8 = tvm.IRModule({"main": te.create_prim_func(list(_matmul_sized(8)))})
    if db_url.startswith("sqlite:///"):
        Path(db_url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(_sqlalchemy_url(db_url))
    with engine.begin() as conn:
        old.create_all(conn)
        conn.execute(old.tables["meta"].insert(), [{"key": "schema_version", "value": "1"}])
        shash = str(tvm_ffi.structural_hash(MOD))
        # two racing version-1 writers left two rows of the same module text
        conn.execute(
            old.tables["workloads"].insert(),
            [
                {"shash": shash, "mod_json": tvm.ir.save_json(MOD), "created_at": 0.0},
                {"shash": shash, "mod_json": tvm.ir.save_json(MOD), "created_at": 0.0},
                {"shash": str(tvm_ffi.structural_hash(mod8)), "mod_json": tvm.ir.save_json(mod8), "created_at": 0.0},
            ],
        )
        conn.execute(
            old.tables["records"].insert(),
            [
                _version_1_record(1, 2, 4e-3),
                _version_1_record(1, 4, 1e-3),
                _version_1_record(2, 4, 5e-4),  # the same candidate under the other row
                _version_1_record(2, 8, 2e-3),
                _version_1_record(3, 2, 7e-5, mod8),
            ],
        )
    engine.dispose()



def test_version_1_history_is_refused_until_db_upgrade(db_url):
    _make_version_1_history(db_url)
    for read_only in (True, False):
        with pytest.raises(HistoryError) as excinfo:
            open_history(db_url, read_only=read_only)
        message = str(excinfo.value)
        assert f"history schema version 1, this edgetune reads version {SCHEMA_VERSION}" in message
        assert "; upgrade it with: edgetune db upgrade --db " in message
        assert "\n" not in message
    named = message.rsplit("--db ", 1)[1]  # what the message tells the user to run on
    # opening never changes the schema
    assert _scalar(db_url, "SELECT value FROM meta WHERE key = 'schema_version'") == "1"

    result = upgrade_history(named)
    assert (result.before, result.after, result.changed) == (1, SCHEMA_VERSION, True)
    assert _scalar(db_url, "SELECT version_num FROM alembic_version") == f"{SCHEMA_VERSION:04d}"
    again = upgrade_history(db_url)
    assert (again.before, again.after, again.changed) == (SCHEMA_VERSION, SCHEMA_VERSION, False)
    db = open_history(db_url, board_id="old")  # the board that measured the version-1 records
    try:
        assert _scalar(db_url, "SELECT value FROM meta WHERE key = 'schema_version'") == str(
            SCHEMA_VERSION
        )
        assert _scalar(db_url, "SELECT COUNT(*) FROM workloads") == 2
        assert len(db) == 4
        assert db.lookup_run_secs(MOD, ARM, _schedule(4).trace) == [1e-3]
        assert db.lookup_run_secs(MOD, ARM, _schedule(8).trace) == [2e-3]
        workload = db.commit_workload(MOD)
        assert [_secs(r) for r in db.get_top_k(workload, 5)] == [[1e-3], [2e-3], [4e-3]]
        # the new unique keys work: a re-measured candidate updates its row
        db.commit_tuning_record(_record(workload, 2, [3e-4]))
        db.commit_tuning_record(_record(workload, 16, [9e-3]))
        assert len(db) == 5
        assert _secs(db.best_record(MOD, ARM)) == [3e-4]
        assert _scalar(db_url, "SELECT COUNT(*) FROM records WHERE target_hash IS NULL") == 0
    finally:
        db.close()
    reopened = open_history(db_url, read_only=True)
    try:
        assert len(reopened) == 5
    finally:
        reopened.close()


def test_export_json_loads_in_stock_json_database(db, tmp_path):
    workload = db.commit_workload(MOD)
    db.commit_tuning_record(_record(workload, 2, [4e-3]))
    db.commit_tuning_record(_record(workload, 8, [1e-3, 2e-3]))
    db.commit_tuning_record(_record(workload, 4, [1e10]))
    best = db.get_top_k(workload, 1)[0]

    path_workload, path_record = db.export_json(tmp_path / "export")
    assert path_workload.name == "database_workload.json"
    assert path_record.name == "database_tuning_record.json"
    assert sorted(p.name for p in (tmp_path / "export").iterdir()) == sorted(
        [path_workload.name, path_record.name]
    )

    stock = ms.database.JSONDatabase(
        path_workload=str(path_workload), path_tuning_record=str(path_record), allow_missing=False
    )
    assert len(stock) == 3
    stock_best = stock.query_tuning_record(MOD, ARM, "main")
    assert _trace_json(stock_best) == _trace_json(best)
    assert _secs(stock_best) == [1e-3, 2e-3]

    # exporting again replaces the files instead of appending to them
    db.export_json(tmp_path / "export")
    assert len(path_record.read_text().splitlines()) == 3


# ----------------------------------------------------------- concurrent writers

WRITERS = 4
OWN_PER_WRITER = 12  # distinct candidates per writer and workload
SHARED = 4  # candidates every writer commits (the same traces)


def _own_secs(writer: int, factor: int) -> float:
    return (1 + writer) * 1e-3 + factor * 1e-6


def _concurrent_writer(db_url: str, writer: int, barrier) -> None:
    """One tuner process: commits its own candidates and the shared ones, interleaved."""
    mods = [MOD, tvm.IRModule({"main": te.create_prim_func(list(_matmul_sized(8)))})]
    own = range(2 + writer * OWN_PER_WRITER, 2 + (writer + 1) * OWN_PER_WRITER)
    shared = range(1000, 1000 + SHARED)
    # every trace built before the start line, so the writers really overlap
    jobs = [
        (index, _schedule(factor, mod).trace, [_own_secs(writer, factor)])
        for factor in own
        for index, mod in enumerate(mods)
    ] + [
        (index, _schedule(factor, mod).trace, [(1 + writer) * 1e-2])
        for factor in shared
        for index, mod in enumerate(mods)
    ]
    args = [ms.arg_info.ArgInfo.from_prim_func(mod["main"]) for mod in mods]
    # one board, several tuner processes: a shared candidate must end up as one row
    db = open_history(db_url, board_id="board-01")
    try:
        barrier.wait(timeout=120)
        # all writers commit the same two new workloads at the same moment
        handles = [db.commit_workload(mod) for mod in mods]
        for index, trace, secs in jobs:
            db.commit_tuning_record(
                ms.database.TuningRecord(trace, handles[index], secs, ARM, args[index])
            )
    finally:
        db.close()


def test_concurrent_writers_lose_and_duplicate_nothing(db_url):
    """4 tuner processes write one history at once; counts are checked exactly."""
    open_history(db_url).close()  # the tables exist; the workloads are new to everyone
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(WRITERS)
    writers = [
        ctx.Process(target=_concurrent_writer, args=(db_url, writer, barrier))
        for writer in range(WRITERS)
    ]
    started = time.monotonic()
    for process in writers:
        process.start()
    for process in writers:
        process.join(timeout=120)
    for process in writers:
        if process.is_alive():
            process.kill()
    assert [process.exitcode for process in writers] == [0] * WRITERS
    assert time.monotonic() - started < 120

    per_workload = WRITERS * OWN_PER_WRITER + SHARED
    assert _scalar(db_url, "SELECT COUNT(*) FROM workloads") == 2
    assert _scalar(db_url, "SELECT COUNT(*) FROM records") == 2 * per_workload
    distinct = _scalar(
        db_url,
        "SELECT COUNT(*) FROM (SELECT DISTINCT workload_id, target_hash, candidate_hash"
        " FROM records) AS triples",
    )
    assert distinct == 2 * per_workload
    assert _scalar(db_url, "SELECT COUNT(*) FROM records WHERE board_id = 'board-01'") == 2 * per_workload

    db = open_history(db_url, read_only=True)
    try:
        assert len(db) == 2 * per_workload
        for writer in range(WRITERS):
            for factor in range(2 + writer * OWN_PER_WRITER, 2 + (writer + 1) * OWN_PER_WRITER):
                assert db.lookup_run_secs(MOD, ARM, _schedule(factor).trace) == [
                    pytest.approx(_own_secs(writer, factor), rel=1e-12)
                ]
        for factor in range(1000, 1000 + SHARED):
            secs = db.lookup_run_secs(MOD, ARM, _schedule(factor).trace)
            assert secs is not None and len(secs) == 1
            assert secs[0] in [pytest.approx((1 + w) * 1e-2) for w in range(WRITERS)]
    finally:
        db.close()


# ------------------------------------------------------------------ SQLite only


def test_plain_path_opens_sqlite_in_wal_mode(tmp_path):
    path = tmp_path / "nested" / "dir" / "tuning.db"
    db = open_history(str(path))
    try:
        assert db.url == f"sqlite:///{path}"
        db.commit_workload(MOD)
    finally:
        db.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (
            str(SCHEMA_VERSION),
        )


def test_sqlite_connections_enforce_foreign_keys(tmp_path):
    db = open_history(str(tmp_path / "tuning.db"))
    try:
        with db._engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar_one() == 1
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar_one() == 30000
    finally:
        db.close()


def test_a_file_that_is_not_a_database_is_one_line_history_error(tmp_path):
    garbage = tmp_path / "tuning.db"
    garbage.write_bytes(b"this is not an SQLite file\n" * 200)
    with pytest.raises(HistoryError) as excinfo:
        open_history(str(garbage))
    assert str(excinfo.value).startswith(f"{garbage}: ")
    assert "\n" not in str(excinfo.value)


def test_another_applications_database_is_refused(tmp_path):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    with pytest.raises(HistoryError, match="not an edgetune tuning history"):
        open_history(str(path))


def test_read_only_needs_an_existing_history(tmp_path):
    with pytest.raises(HistoryError, match="no such tuning history file"):
        open_history(str(tmp_path / "missing.db"), read_only=True)
    assert not (tmp_path / "missing.db").exists()


# ------------------------------------------------------------------------- URLs


def test_unknown_url_scheme_names_the_supported_ones():
    with pytest.raises(HistoryError) as excinfo:
        open_history("mysql://user:hunter2@db.example/tuning")
    message = str(excinfo.value)
    assert "sqlite" in message and "postgresql" in message
    assert "hunter2" not in message


def test_postgresql_url_never_shows_the_password():
    # Port 1 on loopback: fails at once, either without a driver or refused.
    with pytest.raises(HistoryError) as excinfo:
        open_history("postgresql://tuner:hunter2@127.0.0.1:1/tuning")
    assert "hunter2" not in str(excinfo.value)
    assert "***" in str(excinfo.value)


def test_cli_db_upgrade_then_nothing_to_do(tmp_path):
    from conftest import run_cli

    path = tmp_path / "history" / "tuning.db"
    _make_version_1_history(f"sqlite:///{path}")
    refused = run_cli("db", "stats", "--db", str(path))
    assert refused.returncode != 0
    assert refused.stderr.strip().endswith(f"upgrade it with: edgetune db upgrade --db {path}")
    done = run_cli("db", "upgrade", "--db", str(path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"upgraded {path}: schema version 1 -> {SCHEMA_VERSION}"
    again = run_cli("db", "upgrade", "--db", str(path))
    assert again.returncode == 0 and "nothing to do" in again.stdout
    assert run_cli("db", "stats", "--db", str(path)).returncode == 0
    missing = run_cli("db", "upgrade", "--db", str(tmp_path / "none.db"))
    assert missing.returncode != 0 and "no such tuning history file" in missing.stderr


def test_two_boards_measuring_one_candidate_keep_two_rows(db):
    workload = db.commit_workload(MOD)
    db.commit_measurement(_record(workload, 4, [2e-3]), board="127.0.0.1:9190")
    db.commit_measurement(_record(workload, 4, [1e-3]), board="127.0.0.1:9191")
    db.commit_measurement(_record(workload, 4, [3e-3]), board="127.0.0.1:9191")  # the same board again: updated
    db.commit_measurement(_record(workload, 8, [1.0]), error="timed out", board="127.0.0.1:9190")
    assert db.count_records(MOD) == 3
    boards = {board for _record_, board in db.successful_records(ARM)}
    assert boards == {"board-01@127.0.0.1:9190", "board-01@127.0.0.1:9191"}
    assert _secs(db.best_record(MOD, ARM)) == [2e-3]
    assert db.has_candidate(MOD, ARM, _schedule(8).trace)


def test_a_served_candidate_keeps_the_row_its_board_left(db):
    """A candidate served from the history (not measured) adds no row for a trace already stored."""
    workload = db.commit_workload(MOD)
    measured = db.commit_measurement(_record(workload, 4, [2e-3]), board="127.0.0.1:9190")
    assert db.commit_served(_record(workload, 4, [2e-3])) == measured
    assert db.count_records(MOD) == 1
    assert {board for _record_, board in db.successful_records(ARM)} == {"board-01@127.0.0.1:9190"}
    # a trace the history lacks (the module was stored under another trace) is stored
    other = db.commit_served(_record(workload, 8, [3e-3]))
    assert other != measured and db.count_records(MOD) == 2


def test_version_2_history_upgrades_to_keep_each_boards_row(db_url):
    """A history made by revisions 0001+0002 (schema 2), upgraded by ``db upgrade``."""
    from alembic import command
    from alembic.config import Config

    from edgetune.history.migrate import MIGRATIONS

    if db_url.startswith("sqlite:///"):
        Path(db_url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(_sqlalchemy_url(db_url))
    with engine.begin() as conn:
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        config.attributes["connection"] = conn
        command.upgrade(config, "0002")
        conn.execute(sa.text("INSERT INTO workloads (shash, mod_hash, mod_json, created_at) VALUES (:s, :h, :m, 0)"),
                     {"s": str(tvm_ffi.structural_hash(MOD)), "h": hashlib.sha256(tvm.ir.save_json(MOD).encode()).hexdigest(),
                      "m": tvm.ir.save_json(MOD)})
        row = _version_1_record(1, 4, 1e-3)
        row["target_hash"] = hashlib.sha256(row["target_json"].encode()).hexdigest()
        conn.execute(sa.text(f"INSERT INTO records ({', '.join(row)}) VALUES ({', '.join(':' + k for k in row)})"), row)
    engine.dispose()
    with pytest.raises(HistoryError, match="history schema version 2"):
        open_history(db_url)
    assert upgrade_history(db_url).after == SCHEMA_VERSION
    db = open_history(db_url, board_id="old")
    try:
        assert db.count_records(MOD) == 1
        workload = db.commit_workload(MOD)
        db.commit_measurement(_record(workload, 4, [5e-4]), board="127.0.0.1:1")  # another board: a new row
        db.commit_tuning_record(_record(workload, 4, [2e-3]))  # board "old" again: its row updated
        assert db.count_records(MOD) == 2
        assert _secs(db.best_record(MOD, ARM)) == [5e-4]
    finally:
        db.close()


def test_version_3_history_upgrades_to_hold_claims(db_url):
    """A history made by revisions 0001..0003 (schema 3) gets the claims table from ``db upgrade``."""
    from alembic import command
    from alembic.config import Config

    from edgetune.history.migrate import MIGRATIONS
    from edgetune.history.store import ClaimOwner

    if db_url.startswith("sqlite:///"):
        Path(db_url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(_sqlalchemy_url(db_url))
    with engine.begin() as conn:
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        config.attributes["connection"] = conn
        command.upgrade(config, "0003")
        assert "claims" not in sa.inspect(conn).get_table_names()
    engine.dispose()
    with pytest.raises(HistoryError, match="history schema version 3"):
        open_history(db_url)
    result = upgrade_history(db_url)
    assert (result.before, result.after) == (3, SCHEMA_VERSION)
    assert _scalar(db_url, "SELECT version_num FROM alembic_version") == f"{SCHEMA_VERSION:04d}"
    db = open_history(db_url)
    try:
        owner = ClaimOwner.this_process()
        assert db.claims.claim_candidate(ARM, "k", owner, 30).owner == owner
        record_id = db.commit_measurement(_record(db.commit_workload(MOD), 4, [1e-3]))
        assert db.claims.finish_claim(ARM, "k", owner, record_id)
        assert db.claims.claim_of(ARM, "k").record_id == record_id
    finally:
        db.close()


# ------------------------------------------------------------------------ timing


def test_records_of_one_timing_are_never_ranked_against_the_others(db_url):
    """Timed warm, a weight-heavy kernel can look 5x faster than inside a model: flushed and warm stay apart."""
    warm = open_history(db_url, board_id="b", timing="warm")
    flushed = open_history(db_url, board_id="b", timing="flushed")
    try:
        workload = warm.commit_workload(MOD)
        warm.commit_measurement(_record(workload, 4, [1e-4]))  # fast only because its data stayed in cache
        warm.commit_measurement(_record(workload, 8, [2e-4]))
        only_warm = warm.commit_workload(tvm.IRModule({"main": te.create_prim_func(list(_matmul_sized(8)))}))
        warm.commit_measurement(ms.database.TuningRecord(
            _schedule(2, only_warm.mod).trace, only_warm, [5e-5], ARM,
            ms.arg_info.ArgInfo.from_prim_func(only_warm.mod["main"])))

        # the same candidate timed flushed is a new measurement, not a cache hit
        assert flushed.has_candidate(MOD, ARM, _schedule(4).trace) is False
        assert flushed.lookup_run_secs(MOD, ARM, _schedule(4).trace) is None
        assert warm.lookup_run_secs(MOD, ARM, _schedule(4).trace) == [1e-4]
        flushed.commit_measurement(_record(workload, 4, [9e-4]))
        flushed.commit_measurement(_record(workload, 8, [6e-4]))
        assert flushed.count_records(MOD) == 2 and warm.count_records(MOD) == 2
        assert open_history(db_url, read_only=True).count_records(MOD) == 4  # no timing: both

        # ranked within one timing: the flushed winner is factor 8, whatever warm said
        view = flushed.for_target(ARM)
        assert [_secs(r) for r in view.get_top_k(workload, 5)] == [[6e-4], [9e-4]]
        assert _secs(flushed.best_record(MOD, ARM)) == [6e-4]
        assert _secs(warm.best_record(MOD, ARM)) == [1e-4]
        assert len(view) == 2
        # a workload never timed this way still compiles with its best (upgraded histories)
        assert [_secs(r) for r in view.get_top_k(only_warm, 5)] == [[5e-5]]
        assert _secs(flushed.best_record(only_warm, ARM)) == [5e-5]
        assert len(flushed.successful_records(ARM)) == 2
        # db stats shows them as two groups of the workload
        from edgetune.history.maintenance import history_stats

        of_mod = [g for g in history_stats(flushed) if g.count == 2]
        assert sorted(g.target.rsplit(", ", 1)[1] for g in of_mod) == ["flushed", "warm"]
    finally:
        warm.close()
        flushed.close()
    assert _scalar(db_url, "SELECT count(*) FROM records WHERE timing = 'flushed'") == 2


def test_an_unknown_timing_is_one_line():
    with pytest.raises(HistoryError, match=r"^timing must be one of flushed, warm, got 'cold' instead$"):
        open_history("sqlite:///unused.db", timing="cold")


def test_version_4_history_upgrades_with_its_records_timed_warm(db_url):
    """Schema 4 records were timed warm by the default profile; their claims survive the table rebuild."""
    from alembic import command
    from alembic.config import Config

    from edgetune.history.migrate import MIGRATIONS

    if db_url.startswith("sqlite:///"):
        Path(db_url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(_sqlalchemy_url(db_url))
    with engine.begin() as conn:
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        config.attributes["connection"] = conn
        command.upgrade(config, "0004")
        conn.execute(sa.text("INSERT INTO workloads (shash, mod_hash, mod_json, created_at) VALUES (:s, :h, :m, 0)"),
                     {"s": str(tvm_ffi.structural_hash(MOD)), "h": hashlib.sha256(tvm.ir.save_json(MOD).encode()).hexdigest(),
                      "m": tvm.ir.save_json(MOD)})
        row = _version_1_record(1, 4, 1e-3)
        row["target_hash"] = hashlib.sha256(row["target_json"].encode()).hexdigest()
        conn.execute(sa.text(f"INSERT INTO records ({', '.join(row)}) VALUES ({', '.join(':' + k for k in row)})"), row)
        conn.execute(sa.text(
            "INSERT INTO claims (target_hash, candidate_key, owner_host, owner_pid, owner_run, claimed_at,"
            " expires_at, record_id) VALUES (:t, 'k', 'h', 1, 'r', 0, 0, 1)"), {"t": row["target_hash"]})
    engine.dispose()
    with pytest.raises(HistoryError, match="history schema version 4"):
        open_history(db_url)
    assert (upgrade_history(db_url).before, SCHEMA_VERSION) == (4, 5)
    assert _scalar(db_url, "SELECT timing FROM records") == "warm"
    assert _scalar(db_url, "SELECT record_id FROM claims WHERE candidate_key = 'k'") == 1
    db = open_history(db_url, board_id="old", timing="flushed")
    try:
        assert db.count_records(MOD) == 0 and not db.has_candidate(MOD, ARM, _schedule(4).trace)
        workload = db.commit_workload(MOD)
        db.commit_measurement(_record(workload, 4, [3e-3]))  # the same board and candidate, timed flushed: a new row
        assert _scalar(db_url, "SELECT count(*) FROM records") == 2
        assert _secs(db.best_record(MOD, ARM)) == [3e-3]
    finally:
        db.close()


def test_retiming_a_candidate_replaces_its_times_on_every_board_of_this_kind(db_url: str) -> None:
    """tuning/confirm.py: a re-measured candidate's older, luckier row on another server cannot stay the fastest."""
    db = open_history(db_url, board_id="board-01")
    other = open_history(db_url, board_id="board-02")  # another kind of board sharing the history
    try:
        workload = db.commit_workload(MOD)
        db.commit_measurement(_record(workload, 4, [1e-3]), board="127.0.0.1:9190")  # a lucky run's server
        db.commit_measurement(_record(workload, 4, [1.5e-3]), board="127.0.0.1:9191")  # this run's server
        db.commit_measurement(_record(workload, 8, [1.2e-3]), board="127.0.0.1:9191")
        db.commit_measurement(_record(workload, 2, [9e-3]), board="127.0.0.1:9191")
        other.commit_measurement(_record(workload, 4, [0.5e-3]), board="10.0.0.2:9090")

        fastest = db.fastest_candidates(MOD, ARM, 2)
        # one entry per candidate, at its fastest row of either board kind (the history's view is per target)
        assert [_secs(record) for _key, record in fastest] == [[0.5e-3], [1.2e-3]]
        assert len({key for key, _record in fastest}) == 2
        assert db.fastest_candidates(MOD, X86, 3) == [] and db.fastest_candidates(MOD, ARM, 0) == []

        key = fastest[0][0]
        assert db.retime_candidate(MOD, ARM, key, [2e-3, 2.2e-3]) == 2  # both servers of board-01, not board-02's row
        engine = sa.create_engine(_sqlalchemy_url(db_url))
        try:
            with engine.connect() as conn:
                rows = sorted((board, json.loads(secs)) for board, secs in conn.execute(sa.text(
                    "SELECT board_id, run_secs_json FROM records WHERE run_secs_json LIKE '%0.0022%' OR board_id LIKE 'board-02%'"
                )).all())
        finally:
            engine.dispose()
        assert rows == [
            ("board-01@127.0.0.1:9190", [2e-3, 2.2e-3]), ("board-01@127.0.0.1:9191", [2e-3, 2.2e-3]),
            ("board-02@10.0.0.2:9090", [0.5e-3]),
        ]
        assert _secs(db.best_record(MOD, ARM)) == [0.5e-3]  # board-02's own row is left as it was
        with pytest.raises(HistoryError, match="must be a successful measurement"):
            db.retime_candidate(MOD, ARM, key, [1e10])
    finally:
        db.close()
        other.close()


def test_a_record_that_does_not_replay_is_left_out_with_one_warning(tmp_path, caplog):
    """A history written before workloads compared block names holds records whose traces name another module's
    blocks: reading one raised inside MetaSchedule and ended a build. Now it is left out, said once."""
    url = f"sqlite:///{tmp_path / 'tuning.db'}"
    db = open_history(url, board_id="board-01")
    workload = db.commit_workload(MOD)
    db.commit_tuning_record(_record(workload, 2, [4e-3]))
    db.commit_tuning_record(_record(workload, 4, [1e-3]))
    db.close()
    engine = sa.create_engine(_sqlalchemy_url(url))
    with engine.begin() as conn:  # the faster record's trace now names a block the workload lacks
        conn.execute(sa.text("UPDATE records SET trace_json = replace(trace_json, '\"C\"', '\"Z\"') "
                             "WHERE id = (SELECT MAX(id) FROM records)"))
    engine.dispose()
    db = open_history(url, board_id="board-01")
    try:
        with caplog.at_level("WARNING", logger="edgetune.history.database"):
            assert [_secs(r) for r, _ in db.successful_records(ARM)] == [[4e-3]]
            assert _secs(db.best_record(MOD, ARM)) == [4e-3]
            assert [_secs(r) for r in db.get_top_k(db.commit_workload(MOD), 5)] == [[4e-3]]
        assert sum("does not replay" in r.getMessage() for r in caplog.records) == 1
    finally:
        db.close()
