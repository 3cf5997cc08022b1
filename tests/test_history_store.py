"""Conformance suite of the public history store interface (``edgetune.history.store.HistoryStore``).

Every backend must pass every test here, as Optuna's storage tests do: each test
takes ``store_url`` and runs once per backend of test_history's ``BACKENDS``
(an SQLite file and a real PostgreSQL server). The tests use only the
interface's methods (and ``commit_*`` to fill a store), never SQL, so that a
new backend can be checked by adding it to the fixture.
"""

from __future__ import annotations

import ast
import dataclasses
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest
import tvm
import tvm_ffi
from tvm import te
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir import Schedule

from edgetune.errors import HistoryError
from edgetune.history import BulkStore, ClaimStore, HistoryStore, RecipeStore, open_history
from edgetune.history.store import RECORD_FIELDS, WORKLOAD_FIELDS, ClaimOwner
from test_history import ARM, MOD, X86, _matmul_sized, _record, _schedule, _secs
from test_history import db_url as store_url  # noqa: F401 - the per-backend fixture

MOD8 = tvm.IRModule({"main": te.create_prim_func(list(_matmul_sized(8)))})
REPO = Path(__file__).resolve().parent.parent


def _record8(factor: int, secs: list[float], target=ARM) -> ms.database.TuningRecord:
    args = ms.arg_info.ArgInfo.from_prim_func(MOD8["main"])
    return ms.database.TuningRecord(_schedule(factor, MOD8).trace, ms.database.Workload(MOD8), secs, target, args)


@pytest.fixture
def store(store_url: str) -> HistoryStore:
    """Three ARM records of MOD (one failed), one X86 record of MOD, one ARM record of MOD8."""
    db = open_history(store_url, board_id="board-a")
    workload = db.commit_workload(MOD)
    db.commit_tuning_record(_record(workload, 2, [4e-3]))
    db.commit_tuning_record(_record(workload, 4, [1e-3]))
    db.commit_tuning_record_with_error(_record(workload, 8, [1.0]), "RPC session timed out")
    db.commit_tuning_record(_record(workload, 4, [3e-4], target=X86))
    db.commit_tuning_record(_record8(2, [5e-5]))
    yield db
    db.close()


def test_what_open_history_returns_is_a_store(store):
    assert isinstance(store, HistoryStore)
    # composed of smaller stores, each its own interface
    assert isinstance(store.claims, ClaimStore) and isinstance(store.bulk, BulkStore) and isinstance(store.recipes, RecipeStore)
    assert "://" in store.url or Path(store.url).name == "tuning.db"


def test_workloads_by_row_id(store):
    everything = store.bulk.workloads()
    assert len(everything) == 2
    by_module = {len(entry.workload.mod["main"].params): row for row, entry in everything.items()}
    assert sorted(by_module) == [3]  # both are 3-argument matmuls
    some = store.bulk.workloads([min(everything)])
    assert list(some) == [min(everything)]
    assert some[min(everything)].ids == [min(everything)]
    assert store.bulk.workloads([10_000]) == {}


def test_record_summaries_in_measurement_order_and_by_target(store):
    summaries = store.bulk.record_summaries()
    assert len(summaries) == 5
    assert [s.created_at for s in summaries] == sorted(s.created_at for s in summaries)
    arm = store.bulk.record_summaries(ARM)
    assert len(arm) == 4
    assert [s.mean_run_sec for s in arm] == [4e-3, 1e-3, None, 5e-5]  # the failure has no mean
    assert {id(s.workload) for s in arm[:3]} == {id(arm[0].workload)}  # one entry per workload
    assert [s.mean_run_sec for s in store.bulk.record_summaries(X86)] == [3e-4]
    assert {s.timing for s in summaries} == {"warm"}  # a handle opened without a timing writes warm
    flushed = open_history(store.url if "://" in store.url else f"sqlite:///{store.url}", timing="flushed")
    try:
        flushed.commit_measurement(_record(flushed.commit_workload(MOD), 2, [6e-3]))
    finally:
        flushed.close()
    assert [(s.mean_run_sec, s.timing) for s in store.bulk.record_summaries(ARM)][-1] == (6e-3, "flushed")


def test_records_by_id_keep_the_order_asked_for(store):
    ids = [s.id for s in store.bulk.record_summaries(ARM)]
    wanted = [ids[2], ids[0], ids[1]]
    got = store.bulk.records_by_id(wanted)
    assert [_secs(r) for r in got[1:]] == [[4e-3], [1e-3]]
    assert _secs(got[0])[0] >= 1e9  # a failed record carries TVM's failure stub
    with pytest.raises(HistoryError, match="no record with id"):
        store.bulk.records_by_id([max(ids) + 1000])


def test_record_groups_count_per_workload_and_target(store):
    groups = store.bulk.record_groups()
    assert len(groups) == 3
    by_count = sorted((g.count, g.successful, g.failed, g.best_sec) for g in groups)
    assert by_count == [(1, 1, 0, 5e-5), (1, 1, 0, 3e-4), (3, 2, 1, 1e-3)]
    assert all(g.boards == ["board-a"] for g in groups)
    assert all(g.first <= g.last for g in groups)
    assert len({id(g.workload) for g in groups}) == 2


def test_successful_records_newest_first_with_their_board(store):
    found = store.successful_records(ARM)
    assert [_secs(r) for r, _ in found] == [[5e-5], [1e-3], [4e-3]]
    assert {board for _, board in found} == {"board-a"}
    assert len(store.successful_records(ARM, limit=1)) == 1
    # of the workloads kept only, each asked once, the limit counting what is kept
    asked: list[int] = []
    mod_only = store.successful_records(ARM, limit=1, keep=lambda mod: asked.append(1) or not tvm_ffi.structural_equal(mod, MOD8))
    assert [_secs(r) for r, _ in mod_only] == [[1e-3]] and len(asked) == 2
    assert store.successful_records(ARM, keep=lambda mod: False) == []


def test_fastest_records_per_workload_of_the_workloads_kept(store):
    """Transfer's seeds: each workload's fastest few on a target, its failures left out, workloads filtered first."""
    assert sorted(_secs(r) for r in store.fastest_records(ARM, per_workload=1)) == [[5e-5], [1e-3]]
    assert sorted(_secs(r) for r in store.fastest_records(ARM, per_workload=2)) == [[5e-5], [1e-3], [4e-3]]
    assert [_secs(r) for r in store.fastest_records(X86)] == [[3e-4]]
    asked: list[int] = []

    def only_the_8x8(mod) -> bool:
        asked.append(1)
        return tvm_ffi.structural_equal(mod, MOD8)

    assert [_secs(r) for r in store.fastest_records(ARM, per_workload=2, keep=only_the_8x8)] == [[5e-5]]
    assert len(asked) == 2  # once per workload, not once per record


def test_workloads_equal_but_for_block_names_are_two_and_each_replays_its_records(store):
    """Two models' mean poolings differ only in block names (named after their inputs): structurally equal, they
    were one workload, and the second one's records, whose traces find blocks by name, did not replay."""
    a = te.placeholder((16, 16), name="A")
    b = te.placeholder((16, 16), name="B")
    k = te.reduce_axis((0, 16), name="k")
    renamed = tvm.IRModule({"main": te.create_prim_func(
        [a, b, te.compute((16, 16), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="D")])})
    assert tvm_ffi.structural_equal(renamed, MOD)
    workload = store.commit_workload(renamed)
    assert not workload.same_as(store.commit_workload(MOD))
    sch = Schedule(renamed)
    i, _j, _k = sch.get_loops(sch.get_sblock("D"))
    sch.split(i, [None, 2])
    store.commit_tuning_record(ms.database.TuningRecord(
        sch.trace, workload, [2e-5], ARM, ms.arg_info.ArgInfo.from_prim_func(renamed["main"])))
    assert _secs(store.best_record(renamed, ARM)) == [2e-5]
    assert _secs(store.best_record(MOD, ARM)) == [1e-3]
    assert sorted(_secs(r) for r, _ in store.successful_records(ARM)) == [[2e-5], [5e-5], [1e-3], [4e-3]]


def test_counts_candidates_and_best(store):
    assert store.count_records() == 5
    assert store.count_records(MOD, ARM) == 3
    assert store.count_records(MOD, ARM, successful_only=True) == 2
    assert store.has_candidate(MOD, ARM, _schedule(8).trace)  # failed, but measured
    assert not store.has_candidate(MOD, X86, _schedule(2).trace)
    assert _secs(store.best_record(MOD, ARM)) == [1e-3]
    assert store.best_record(MOD8, X86) is None


def test_prune_records_dry_run_then_for_real(store):
    counted = store.bulk.prune_records(failed=True, keep_top=1, dry_run=True)
    assert (counted.failed, counted.beyond_top, counted.removed) == (1, 1, 2)
    assert store.count_records() == 5
    done = store.bulk.prune_records(failed=True, keep_top=1)
    assert done.removed == 2
    assert store.count_records() == 3
    assert store.bulk.prune_records(created_before=time.time() + 60).removed == 3
    assert store.count_records() == 0


def test_dedupe_records_with_nothing_duplicated_changes_nothing(store):
    result = store.bulk.dedupe_records("average")
    assert (result.configurations, result.removed) == (0, 0)
    assert store.count_records() == 5
    with pytest.raises(HistoryError, match="use 'date' or 'average'"):
        store.bulk.dedupe_records("median")


def test_export_rows_import_into_a_fresh_sqlite_store(store, tmp_path):
    workload_rows, record_rows = store.bulk.export_rows()
    assert len(workload_rows) == 2 and len(record_rows) == 5
    assert set(WORKLOAD_FIELDS) <= set(workload_rows[0]) and set(RECORD_FIELDS) <= set(record_rows[0])
    lines = [(f"w{i}", {"type": "workload", **row}) for i, row in enumerate(workload_rows)]
    lines += [(f"r{i}", {"type": "record", **row}) for i, row in enumerate(record_rows)]
    other = open_history(str(tmp_path / "copy.db"))
    try:
        result = other.bulk.import_rows(lines)
        assert (result.added, result.workloads_added) == (5, 2)
        assert other.bulk.import_rows(lines).skipped == 5  # idempotent
        assert _secs(other.best_record(MOD, ARM)) == [1e-3]
        # and back into the original store: everything is already there
        assert store.bulk.import_rows(lines).skipped == 5
    finally:
        other.close()


def test_import_rows_is_one_transaction(store):
    workload_rows, record_rows = store.bulk.export_rows()
    fresh = {"type": "record", **record_rows[0], "trace_json": record_rows[0]["trace_json"]}
    fresh["created_at"] = time.time() + 10
    fresh["run_secs_json"] = "[9e-4]"
    fresh["mean_run_sec"] = 9e-4
    bad = {"type": "record", "workload_id": workload_rows[0]["id"]}  # no fields
    with pytest.raises(HistoryError, match="line 2: missing field"):
        store.bulk.import_rows([("line 0", {"type": "workload", **workload_rows[0]}), ("line 1", fresh), ("line 2", bad)])
    assert _secs(store.best_record(MOD, ARM)) == [1e-3]  # the update in line 1 was rolled back


def test_read_only_store_refuses_every_write(store, store_url):
    reader = open_history(store_url, read_only=True)
    try:
        assert reader.count_records() == 5
        for write in (
            lambda: reader.bulk.prune_records(failed=True),
            lambda: reader.bulk.dedupe_records("date"),
            lambda: reader.bulk.import_rows([]),
            lambda: reader.commit_tuning_record(_record(reader.commit_workload(MOD), 32, [1e-3])),
        ):
            with pytest.raises(HistoryError, match="read-only"):
                write()
    finally:
        reader.close()


def _recipe(**changes):
    from edgetune.tasks.recipe import Recipe, RecipePass

    recipe = Recipe("auto", "NCHWc", "full", False, (("fast_math", True),), (RecipePass("fold-constants", "applied"),), "0.27")
    return dataclasses.replace(recipe, **changes)


def test_recipes_per_model_and_target_the_last_one_wins(store, store_url):
    """A tune's recipe is kept per (model, target); an older history holds none; a read-only handle reads, never writes."""
    model, other = "ab" * 32, "cd" * 32
    assert store.recipes.load(model, ARM) is None  # tuned before recipes were recorded
    store.recipes.store(model, ARM, _recipe(switches=(("fast_math", False),)))
    store.recipes.store(model, X86, _recipe(conv_layout="as-is", conv_layout_applied="as-is"))
    assert store.recipes.load(model, ARM) == _recipe(switches=(("fast_math", False),))
    assert store.recipes.load(model, X86).conv_layout_applied == "as-is" and store.recipes.load(other, ARM) is None
    store.recipes.store(model, ARM, _recipe(prepack_weights=True))  # tuned again: the last tune's recipe
    reader = open_history(store_url, read_only=True)
    try:
        assert reader.recipes.load(model, ARM) == _recipe(prepack_weights=True)
        with pytest.raises(HistoryError, match="read-only"):
            reader.recipes.store(other, ARM, _recipe())
    finally:
        reader.close()
    assert store.count_records() == 5  # beside the records, which stay as they were


def test_only_the_sql_backend_touches_the_tables():
    """Everything outside the SQL backend goes through the store's methods."""
    backend = {"database.py", "sql_queries.py", "sql_operations.py", "sql_claims.py", "sql_recipes.py", "sql.py", "schema.py",
               "migrate.py"}
    private = {"_access", "_entries", "_write_transaction", "_all_workloads", "_find", "_insert_workload", "_to_records"}
    offenders = []
    for path in sorted((REPO / "edgetune").rglob("*.py")):
        if path.parent.name in ("history", "versions") and path.name in backend | {"__init__.py"}:
            continue
        if "migrations" in path.parts:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.endswith("history.schema"):
                if any(alias.name in ("records", "workloads", "meta", "metadata") for alias in node.names):
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno} imports the tables")
            if isinstance(node, ast.Attribute) and node.attr in private:
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno} uses {node.attr}")
    assert offenders == []


def test_dedupe_merges_one_candidate_measured_by_two_boards(store):
    workload = store.commit_workload(MOD)
    store.commit_measurement(_record(workload, 2, [2e-3]), board="127.0.0.1:9191")  # a second board
    assert store.count_records(MOD, ARM) == 4
    result = store.bulk.dedupe_records("average")
    assert (result.configurations, result.removed) == (1, 1)
    assert store.count_records(MOD, ARM) == 3
    kept = [r for r in store.bulk.records_by_id([s.id for s in store.bulk.record_summaries(ARM)]) if _secs(r) == [3e-3]]
    assert len(kept) == 1  # the mean of 4 ms and 2 ms


def test_board_summaries_keep_each_boards_records_apart(store):
    workload = store.commit_workload(MOD)
    store.commit_measurement(_record(workload, 2, [2e-3]), board="127.0.0.1:9191")
    store.commit_measurement(_record(workload, 7, [1e9]), error="run failed", board="127.0.0.1:9191")
    summaries = store.bulk.board_summaries()
    other = [s for s in summaries if s.board_id.endswith("@127.0.0.1:9191")]
    assert len(other) == 1, summaries
    (mine,) = other
    assert (mine.count, mine.successful, mine.best_sec) == (2, 1, pytest.approx(2e-3))
    assert sum(s.count for s in summaries) == sum(1 for _ in store.bulk.record_summaries())


# ---------------------------------------------------------------------- claims

def test_a_claim_is_held_by_one_owner_until_it_expires(store):
    first, second = ClaimOwner.this_process(), ClaimOwner.this_process()
    won = store.claims.claim_candidate(ARM, "cand-1", first, 30)
    assert won.owner == first and won.live and won.record_id is None
    lost = store.claims.claim_candidate(ARM, "cand-1", second, 30)
    assert lost.owner == first and lost.live  # the holder is named, nothing changed
    assert store.claims.claim_candidate(X86, "cand-1", second, 30).owner == second  # another target: another claim
    short = store.claims.claim_candidate(ARM, "cand-2", first, 0.3)
    assert short.owner == first
    time.sleep(0.6)
    assert store.claims.claim_of(ARM, "cand-2").expired
    taken = store.claims.claim_candidate(ARM, "cand-2", second, 30)
    assert taken.owner == second and taken.live  # an expired claim is taken over
    assert {c.candidate_key for c in store.claims.list_claims()} == {"cand-1", "cand-2"}
    with pytest.raises(HistoryError, match="lease"):
        store.claims.claim_candidate(ARM, "cand-3", first, 0)


def test_renew_finish_and_release(store):
    owner, other = ClaimOwner.this_process(), ClaimOwner.this_process()
    store.claims.claim_candidate(ARM, "a", owner, 0.5)
    store.claims.claim_candidate(ARM, "b", owner, 0.5)
    store.claims.claim_candidate(ARM, "c", owner, 0.5)
    assert store.claims.renew_claims(owner, 60) == 3
    time.sleep(0.7)
    assert store.claims.claim_candidate(ARM, "a", other, 60).owner == owner  # renewed: still held
    record_id = store.commit_measurement(_record(store.commit_workload(MOD), 16, [2e-3]))
    assert _secs(store.bulk.records_by_id([record_id])[0]) == [pytest.approx(2e-3)]
    assert not store.claims.finish_claim(ARM, "a", other, record_id)  # not its claim
    assert store.claims.finish_claim(ARM, "a", owner, record_id)
    finished = store.claims.claim_of(ARM, "a")
    assert finished.record_id == record_id and not finished.live
    # a measured claim is not taken over, unless asked (a failed result is measured again)
    assert store.claims.claim_candidate(ARM, "a", other, 60).record_id == record_id
    assert store.claims.claim_candidate(ARM, "a", other, 60, take_measured=True).owner == other
    assert not store.claims.release_claim(ARM, "b", other)
    assert store.claims.release_claim(ARM, "b", owner)
    assert store.claims.claim_of(ARM, "b") is None
    assert store.claims.release_claims(owner) == 1  # "c"; "a" is the other's now
    assert [c.candidate_key for c in store.claims.list_claims()] == ["a"]
    assert len(store.claims.list_claims(live_only=False)) == 1
    # pruning the record a finished claim points at removes the claim with it
    assert store.claims.finish_claim(ARM, "a", other, record_id)
    store.bulk.prune_records(created_before=time.time() + 60)
    assert store.claims.claim_of(ARM, "a") is None


def test_read_only_store_refuses_claims(store, store_url):
    reader = open_history(store_url, read_only=True)
    try:
        with pytest.raises(HistoryError, match="read-only"):
            reader.claims.claim_candidate(ARM, "x", ClaimOwner.this_process(), 10)
        assert reader.claims.list_claims() == []
    finally:
        reader.close()


CLAIMERS = 3
CLAIM_KEYS = 40


def _claimer(url: str, barrier, queue) -> None:
    """One tuner process: claims every key as fast as it can; reports the ones it won."""
    db = open_history(url)
    owner = ClaimOwner.this_process()
    barrier.wait()
    won = [key for key in (f"k{i}" for i in range(CLAIM_KEYS)) if db.claims.claim_candidate(ARM, key, owner, 60).owner == owner]
    queue.put((owner.run, won))
    db.close()


def test_processes_racing_for_claims_each_win_different_candidates(store, store_url):
    ctx = multiprocessing.get_context("spawn")
    barrier, queue = ctx.Barrier(CLAIMERS), ctx.Queue()
    procs = [ctx.Process(target=_claimer, args=(store_url, barrier, queue)) for _ in range(CLAIMERS)]
    for proc in procs:
        proc.start()
    results = [queue.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
    assert [proc.exitcode for proc in procs] == [0] * CLAIMERS
    won = [key for _run, keys in results for key in keys]
    assert sorted(won) == sorted(f"k{i}" for i in range(CLAIM_KEYS))  # every key exactly once
    owners = {c.candidate_key: c.owner.run for c in store.claims.list_claims()}
    assert all(owners[key] == run for run, keys in results for key in keys)


def _holder(url: str, lease: float, ready) -> None:
    """Claims two candidates, then hangs until killed (a tuner that died mid-measurement)."""
    db = open_history(url)
    owner = ClaimOwner.this_process()
    db.claims.claim_candidate(ARM, "held-1", owner, lease)
    db.claims.claim_candidate(ARM, "held-2", owner, lease)
    ready.set()
    time.sleep(600)


def test_claims_of_a_killed_process_expire_and_are_taken_over(store, store_url):
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=_holder, args=(store_url, 2.0, ready))
    proc.start()
    try:
        assert ready.wait(120)
        me = ClaimOwner.this_process()
        assert store.claims.claim_candidate(ARM, "held-1", me, 60).owner.pid == proc.pid  # live: refused
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(30)
        deadline = time.monotonic() + 30
        for key in ("held-1", "held-2"):
            while store.claims.claim_candidate(ARM, key, me, 60).owner != me:
                assert time.monotonic() < deadline, "the dead process's claim never expired"
                time.sleep(0.2)
    finally:
        if proc.is_alive():
            proc.kill()


def test_workload_json_of_this_tvm_version_skips_the_upgrade_pass(monkeypatch) -> None:
    """Histories and libraries load hundreds of workloads: tvm.ir.load_json's upgrade pass took 7x the load itself.
    JSON this TVM version wrote loads directly and equal; another version's still goes through the upgrade."""
    import tvm
    import tvm_ffi

    from edgetune.common.tvm_json import load_tvm_json

    a = tvm.te.placeholder((4, 8), name="a")
    b = tvm.te.compute((4, 8), lambda i, j: a[i, j] * 2.0, name="b")
    mod = tvm.IRModule({"main": tvm.te.create_prim_func([a, b])})
    text = tvm.ir.save_json(mod)
    assert tvm.__version__ in text
    upgraded: list[str] = []
    real = tvm.ir.load_json
    monkeypatch.setattr(tvm.ir, "load_json", lambda s: upgraded.append(s) or real(s))
    assert tvm_ffi.structural_equal(load_tvm_json(text), mod) and not upgraded
    older = text.replace(tvm.__version__, "0.20.0")
    assert tvm_ffi.structural_equal(load_tvm_json(older), mod) and upgraded == [older]
