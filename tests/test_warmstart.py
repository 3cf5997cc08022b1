"""Warm start: which history records train the cost model before tuning."""

from __future__ import annotations

import pytest
import tvm
import tvm.s_tir.meta_schedule as ms
from tvm import te

from edgetune.builder.intrinsics import load_tensor_intrinsics
from edgetune.history import open_history
from edgetune.costmodel.warmstart import warm_start
from edgetune.tasks.signature import operator_signature

TARGET = tvm.target.Target({"kind": "llvm", "num-cores": 2})


def matmul(n: int) -> tvm.IRModule:
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def add(n: int) -> tvm.IRModule:
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    c = te.compute((n, n), lambda i, j: a[i, j] + b[i, j], name="D")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def candidates(mod: tvm.IRModule, count: int, seed: int) -> list:
    ctx = ms.TuneContext(mod=mod, target=TARGET, space_generator="post-order-apply", search_strategy="replay-trace", task_name="t", num_threads=2, rand_state=seed)
    ctx.pre_tuning(max_trials=count, num_trials_per_iter=count, design_spaces=ctx.generate_design_space(), database=ms.database.MemoryDatabase(), cost_model=ms.cost_model.RandomModel())
    return ctx.generate_measure_candidates()


@pytest.fixture(scope="module")
def history_path(tmp_path_factory):
    load_tensor_intrinsics(TARGET)
    path = str(tmp_path_factory.mktemp("warm") / "history.db")
    # one row per (workload, target, candidate): board-b measures other candidates
    plan = [("board-a", matmul(64), 6, 1), ("board-b", matmul(64), 6, 2), ("board-a", matmul(32), 5, 3), ("board-a", add(64), 4, 4)]
    for board, mod, count, seed in plan:
        history = open_history(path, board_id=board)
        workload = history.commit_workload(mod)
        for i, cand in enumerate(candidates(mod, count, seed)):
            record = ms.database.TuningRecord(cand.sch.trace, workload, [1e-4 * (i + 1)], TARGET, cand.args_info)
            history.commit_tuning_record(record)
        history.close()
    return path


def test_operator_signature_ignores_shapes_but_not_operators():
    assert operator_signature(matmul(64)) == operator_signature(matmul(32)) == ("C",)
    assert operator_signature(add(64)) == ("D",)


def test_warm_start_uses_same_task_similar_shapes_and_a_fraction_of_other_boards(history_path):
    history = open_history(history_path, board_id="board-a")
    model = ms.cost_model.XGBModel(num_tuning_cores=2)
    report = warm_start(model, [matmul(64)], history, TARGET, board_id="board-a", scope="similar", other_board_fraction=0.5)
    assert report.same_task == 6
    assert report.other_board == 3 and report.skipped_other_board == 3  # half of board-b's 6
    assert report.similar_task == 5  # matmul 32x32; the elementwise add is left out
    assert report.groups == 2  # one feature group per workload
    assert model.data_size == report.total == 14
    # another target's history is not used at all
    other = tvm.target.Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "num-cores": 4})
    assert warm_start(ms.cost_model.XGBModel(), [matmul(64)], history, other, board_id="board-a").total == 0
    history.close()


def test_other_board_fraction_bounds(history_path):
    history = open_history(history_path, board_id="board-a")
    none_kept = warm_start(ms.cost_model.RandomModel(), [matmul(64)], history, TARGET, board_id="board-a", other_board_fraction=0.0)
    all_kept = warm_start(ms.cost_model.RandomModel(), [matmul(64)], history, TARGET, board_id="board-a", other_board_fraction=1.0)
    assert (none_kept.other_board, all_kept.other_board) == (0, 6)
    with pytest.raises(ValueError, match="other_board_fraction must be within"):
        warm_start(ms.cost_model.RandomModel(), [matmul(64)], history, TARGET, board_id="a", other_board_fraction=2)
    history.close()


def test_default_scope_uses_the_same_task_only(history_path):
    history = open_history(history_path, board_id="board-a")
    report = warm_start(ms.cost_model.RandomModel(), [matmul(64)], history, TARGET, board_id="board-a")
    assert (report.same_task, report.other_board, report.similar_task) == (6, 3, 0)
    with pytest.raises(ValueError, match="scope must be one of same, auto, similar"):
        warm_start(ms.cost_model.RandomModel(), [matmul(64)], history, TARGET, board_id="board-a", scope="all")
    history.close()


def test_auto_scope_falls_back_to_similar_shapes_only_without_same_task_history(history_path):
    history = open_history(history_path, board_id="board-a")
    # matmul 64x64 has history of its own: no other shapes are added
    covered = warm_start(ms.cost_model.RandomModel(), [matmul(64)], history, TARGET, board_id="board-a", scope="auto")
    assert (covered.same_task, covered.similar_task) == (6, 0)
    # matmul 128x128 has none: the 64x64 and 32x32 matmuls stand in (the add does not)
    fallback = warm_start(ms.cost_model.RandomModel(), [matmul(128)], history, TARGET, board_id="board-a", scope="auto")
    assert (fallback.same_task, fallback.other_board, fallback.similar_task) == (0, 0, 6 + 6 + 5)
    history.close()
