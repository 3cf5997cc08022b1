"""Weights prepacked in the layout each schedule reads (tuning.prepack_weights): stored, built, delivered."""

from __future__ import annotations

import functools
import hashlib
from collections import Counter
from pathlib import Path

import pytest
import tvm
import tvm.s_tir.meta_schedule as ms
from tvm import relax
from tvm.s_tir import Schedule

from edgetune.tasks import load_model, prepare_for_tuning

TARGET = tvm.target.Target({"kind": "llvm", "num-cores": 2})


def _constant_tensors(mod) -> Counter:
    """The model's constant tensors by shape and content: a transposed square weight keeps its shape, not its bytes."""
    tensors: Counter = Counter()

    def visit(expr) -> None:
        if isinstance(expr, tvm.ir.expr.Constant) and hasattr(expr.value, "shape"):  # a tensor, not a scalar
            array = expr.value.numpy()
            tensors[(array.shape, hashlib.sha1(array.tobytes()).hexdigest())] += 1

    relax.analysis.post_order_visit(mod["main"], visit)
    return tensors


def _rewritten_candidate(task):
    """A sample of ``task``'s design space with its postprocessors applied: RewriteLayout among them."""
    ctx = ms.TuneContext(mod=task.dispatched[0], target=TARGET, space_generator="post-order-apply", task_name=task.task_name)
    space = ctx.generate_design_space()[0]
    sch = Schedule(task.dispatched[0], seed=1, debug_mask="none")
    space.trace.apply_to_schedule(sch, remove_postproc=True)
    sch.enter_postproc()
    assert all(postproc.apply(sch) for postproc in ctx.space_generator.postprocs)
    return sch


@functools.lru_cache(maxsize=1)
def _dense_tasks():
    prepared = prepare_for_tuning(load_model("demo:transformer@32").mod, TARGET, prepack_weights=True)
    return [t for t in ms.relax_integration.extract_tasks(prepared, TARGET) if "layout_free_buffers" in (t.dispatched[0]["main"].attrs or {})]


def test_prepacking_marks_constant_weights_and_never_activations() -> None:
    plain = prepare_for_tuning(load_model("demo:transformer@32").mod, TARGET)
    assert not any(
        "layout_free_buffers" in (t.dispatched[0]["main"].attrs or {}) for t in ms.relax_integration.extract_tasks(plain, TARGET)
    )
    marked = _dense_tasks()
    assert any("matmul" in t.task_name for t in marked)
    # attention's Q x K^T multiplies two activations: nothing of it is a weight
    assert not any("NT_matmul" in t.task_name for t in marked), [t.task_name for t in marked]


def test_a_record_that_rewrites_a_weight_layout_is_stored_and_replays(tmp_path: Path) -> None:
    from edgetune.history import open_history

    task = next(t for t in _dense_tasks() if "matmul" in t.task_name)
    sch = _rewritten_candidate(task)
    assert "TransformLayout" in [inst.kind.name for inst in sch.trace.insts]
    history = open_history(str(tmp_path / "history.db"))
    try:
        workload = history.commit_workload(task.dispatched[0])
        args = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
        # TVM 0.27's TuningRecord.as_json() raises on this trace's IndexMap: the history must not
        history.commit_tuning_record(ms.database.TuningRecord(sch.trace, workload, [1e-3], TARGET, args))
        (back,) = history.get_top_k(workload, 1)
        replayed = Schedule(task.dispatched[0], debug_mask="none")
        back.trace.apply_to_schedule(replayed, remove_postproc=False)
        tvm.ir.assert_structural_equal(replayed.mod, sch.mod)
    finally:
        history.close()


def test_a_library_schedule_of_the_plain_workload_serves_the_prepacked_one(tmp_path: Path) -> None:
    import tvm_ffi

    from edgetune.schedules.library import LibraryWorkload, ScheduleLibrary
    from edgetune.tasks.models import comparable_workload

    task = _dense_tasks()[0]
    marked = task.dispatched[0]
    plain = comparable_workload(marked)
    assert "layout_free_buffers" not in (plain["main"].attrs or {})
    assert not tvm_ffi.structural_equal(plain, marked)  # two workloads to MetaSchedule and the history
    assert comparable_workload(plain) is plain  # nothing to strip: the same module, the same key
    # an entry exported from a history tuned without prepacking is found for the prepacked task
    entry = LibraryWorkload(str(tvm_ffi.structural_hash(plain)), tvm.ir.save_json(plain), [], 1.0, [], None)
    library = ScheduleLibrary(header={}, workloads=[entry])
    assert library.find(marked) is entry and library.find(plain) is entry


@pytest.mark.integration
def test_a_prepacked_tune_delivers_a_matching_model_with_its_weights_rewritten_at_build_time(tmp_path: Path, loopback_board) -> None:
    from edgetune.artifact.compile import prepacked_module
    from edgetune.board.base import TrackerBoard
    from edgetune.history import open_history
    from edgetune.profile import load_profile
    from edgetune.tasks.graph import prepare_graph
    from edgetune.tuning import TuneOptions, run_tune

    profile = load_profile("host").with_overrides(
        rpc={"key": loopback_board.key}, tuning={"prepack_weights": True, "schedules": "off"}
    )
    spec = "demo:transformer@32"
    summary = run_tune(TuneOptions(profile=profile, model=spec, out_dir=tmp_path, trials=12, board=TrackerBoard(loopback_board)))
    assert summary.end_to_end.outputs_match  # the delivered model against the untuned build, on the board
    target = profile.tvm_target()
    history = open_history(str(tmp_path / "history.db"), read_only=True)
    try:
        rewritten = [
            record for record, _board in history.successful_records(target, limit=10**6)
            if "TransformLayout" in [inst.kind.name for inst in record.trace.insts]
        ]
    finally:
        history.close()
    assert rewritten, "no measured schedule rewrote a weight's layout"
    # Build with a measured rewriting record applied. Which of a task's records is fastest is up to the board's
    # noise (RewriteLayout leaves some samples in the weight's own layout), so the test picks it, not the timing.
    database = ms.database.MemoryDatabase()
    record = rewritten[0]
    workload = database.commit_workload(record.workload.mod)
    database.commit_tuning_record(
        ms.database.TuningRecord(record.trace, workload, record.run_secs, target, record.args_info)
    )
    prepared = prepare_graph(load_model(spec), profile.tuning.conv_layout, profile.tuning.graph_optimization, target)
    with target, database:
        built = prepacked_module(prepared.mod, target)
    # the rewrite ran at build time: the weight in its new layout is a constant of the model, and no kernel rewrites one
    before, after = _constant_tensors(prepare_for_tuning(prepared.mod, target)), _constant_tensors(built)
    assert after - before, "no constant of the built model is a rewritten weight"
    kernels = [f for _gv, f in built.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert not any("layout_rewrite_preproc" in f.script() for f in kernels)


def test_a_history_tuned_without_prepacking_still_applies_when_it_is_on(tmp_path: Path) -> None:
    from edgetune.artifact.compile import prepacked_module
    from edgetune.history import open_history
    from edgetune.tasks.graph import prepare_graph

    model = prepare_graph(load_model("demo:transformer@32"), target=TARGET)
    marked = {t.task_name.rstrip("1") for t in _dense_tasks()}
    plain_tasks = ms.relax_integration.extract_tasks(prepare_for_tuning(model.mod, TARGET), TARGET)
    tuned = next(t for t in plain_tasks if t.task_name.rstrip("1") in marked and "matmul" in t.task_name)
    sch = _rewritten_candidate(tuned)
    assert "TransformLayout" not in [inst.kind.name for inst in sch.trace.insts]  # nothing marked: nothing rewritten
    history = open_history(str(tmp_path / "history.db"))
    try:
        workload = history.commit_workload(tuned.dispatched[0])
        args = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
        history.commit_tuning_record(ms.database.TuningRecord(sch.trace, workload, [1e-3], TARGET, args))
        with TARGET, history.for_target(TARGET):
            built = prepacked_module(model.mod, TARGET)
    finally:
        history.close()
    scheduled = {
        gv.name_hint.rstrip("1"): f for gv, f in built.functions_items()
        if isinstance(f, tvm.tirx.PrimFunc) and (f.attrs or {}).get("tirx.is_scheduled", False)
    }
    # the one kernel the history holds is built with its record, as tuned (its weights unmarked); no other is
    assert list(scheduled) == [tuned.task_name.rstrip("1")], list(scheduled)
    assert "layout_free_buffers" not in (scheduled[tuned.task_name.rstrip("1")].attrs or {})


def test_tasks_the_library_holds_keep_their_weights_as_imported(tmp_path: Path) -> None:
    import tvm_ffi

    from edgetune.profile import load_profile
    from edgetune.schedules.library import LibraryWorkload, ScheduleLibrary
    from edgetune.tasks.models import comparable_workload
    from edgetune.schedules.use import LibraryChoice
    from edgetune.tuning import TuneOptions, TuningPipeline

    profile = load_profile("host").with_overrides(tuning={"prepack_weights": True})
    pipeline = TuningPipeline(TuneOptions(profile=profile, model="demo:transformer@32", out_dir=tmp_path))
    target = profile.tvm_target()
    model = pipeline.check_inputs()[1]
    covered = comparable_workload(next(t for t in pipeline.extract_tasks(target, model) if "matmul" in t.task_name).dispatched[0])
    entry = LibraryWorkload(str(tvm_ffi.structural_hash(covered)), tvm.ir.save_json(covered), [], 1.0, [], None)
    pipeline._library = LibraryChoice("a library", library=ScheduleLibrary(header={}, workloads=[entry]))
    marked = {
        t.task_name: "layout_free_buffers" in (t.dispatched[0]["main"].attrs or {}) for t in pipeline.extract_tasks(target, model)
    }
    # the covered task is tuned as the library's schedules were (its weights as imported); the other dense layers prepack
    plain = [t for t in pipeline.extract_tasks(target, model) if tvm_ffi.structural_equal(t.dispatched[0], covered)]
    assert len(plain) == 1 and not marked[plain[0].task_name]
    assert sum(marked.values()) >= 2, marked
