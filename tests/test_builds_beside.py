"""Builds beside the search (issue 55, point 4): a module built once per process, builds the tuning thread does not wait for."""

from __future__ import annotations

import os
import threading
from contextlib import closing

import pytest
import tvm
import tvm.s_tir.meta_schedule as ms
from tvm import te
from tvm.s_tir.meta_schedule.builder import BuilderInput
from tvm.s_tir.meta_schedule.runner import RunnerInput

from edgetune.builder.builder import WarmBuilder
from edgetune.builder.builds import BuiltModules, PendingArtifact, resolve
from edgetune.builder.intrinsics import load_tensor_intrinsics
from edgetune.common.failure import is_stopped_before_board
from edgetune.measure.pending import PendingBuildRunner
from edgetune.measure.runner import MeasureConfig, TrackerRunner
from edgetune.tuning.callbacks import remove_artifact

HOST = tvm.target.Target({"kind": "llvm", "num-cores": 2})


def _candidates(n: int, count: int) -> list[ms.MeasureCandidate]:
    """Up to ``count`` distinct real candidates of an ``n`` x ``n`` matmul (a size no other test builds)."""
    import tvm_ffi

    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    mod = tvm.IRModule({"main": te.create_prim_func([a, b, c])})
    load_tensor_intrinsics(HOST)
    ctx = ms.TuneContext(
        mod=mod, target=HOST, space_generator="post-order-apply",
        search_strategy="replay-trace", task_name=f"scale{n}", num_threads=2, rand_state=3,
    )
    ctx.pre_tuning(
        max_trials=4 * count, num_trials_per_iter=4 * count, design_spaces=ctx.generate_design_space(),
        database=ms.database.MemoryDatabase(), cost_model=ms.cost_model.RandomModel(),
    )
    distinct = {int(tvm_ffi.structural_hash(c.sch.mod)): c for c in ctx.generate_measure_candidates()}
    assert len(distinct) >= count
    return list(distinct.values())[:count]


def test_a_repeated_candidate_is_built_once() -> None:
    (candidate, *_rest) = _candidates(37, 2)
    inputs = [BuilderInput(candidate.sch.mod, HOST)] * 2  # twice in one batch
    with closing(WarmBuilder(timeout_sec=60, max_workers=1)) as builder:
        first = builder.build(inputs)
        assert [r.error_msg for r in first] == [None, None]
        assert builder.stats.built == 1 and builder.stats.reused == 1
        again = builder.build([BuilderInput(candidate.sch.mod, HOST)])  # a later batch, or the re-timing
        assert builder.stats.built == 1 and builder.stats.reused == 2
        assert str(again[0].artifact_path) == str(first[0].artifact_path)
        # the recorder's "done with it" keeps a reused artifact for the next batch
        remove_artifact(str(again[0].artifact_path))
        assert os.path.exists(str(again[0].artifact_path))
        # another target is another build
        other = tvm.target.Target({"kind": "llvm", "num-cores": 1})
        builder.build([BuilderInput(candidate.sch.mod, other)])
        assert builder.stats.built == 2


def test_only_unleased_artifacts_beyond_the_limit_are_deleted(tmp_path) -> None:
    from tvm.s_tir.meta_schedule.builder import BuilderResult

    from edgetune.builder.builds import Build

    built = BuiltModules(keep=2)
    paths = []
    for i in range(3):
        path = tmp_path / f"cand-{i}" / "candidate.so"
        path.parent.mkdir()
        path.write_bytes(b"so")
        paths.append(str(path))
        built.add(f"k{i}", Build.finished(BuilderResult(str(path), None)))
        built.note_path(f"k{i}", str(path))
    assert len(built) == 3 and all(os.path.exists(p) for p in paths)  # every one leased: none deleted
    assert built.release(paths[1]) is False  # the oldest unleased beyond 2: deleted
    assert not os.path.exists(paths[1]) and os.path.exists(paths[0]) and len(built) == 2
    assert built.release(paths[0]) is True  # within the limit now: kept
    assert os.path.exists(paths[0]) and built.get("k0") is not None


def test_deferred_builds_are_resolved_by_the_runner(loopback_board) -> None:
    found = _candidates(29, 3)
    with closing(WarmBuilder(timeout_sec=60, max_workers=2)) as builder:
        builder.defer = True
        results = builder.build([BuilderInput(c.sch.mod, HOST) for c in found])
        builder.defer = False
        pending = [PendingArtifact.parse(r.artifact_path) for r in results]
        assert all(p is not None for p in pending), [str(r.artifact_path) for r in results]
        assert builder.stats.built == 0  # nothing collected by the tuning thread
        runner = TrackerRunner(loopback_board, config=MeasureConfig(evaluator="fixed", number=2, repeat=2, min_repeat_ms=0))
        wrapped = PendingBuildRunner(runner, builder)
        try:
            inputs = [RunnerInput(r.artifact_path, "cpu", c.args_info) for r, c in zip(results, found)]
            outcome = [f.result() for f in wrapped.run(inputs)]
        finally:
            wrapped.close()
            runner.close()
        assert all(o.error_msg is None and len(o.run_secs) == 2 for o in outcome), [o.error_msg for o in outcome]
        assert builder.stats.built == len(found) and runner.stats.measured == len(found)
        assert all(os.path.exists(str(resolve(r.artifact_path).artifact_path)) for r in results)


def test_a_deferred_build_failure_is_the_candidates_error_and_a_stop_sends_nothing(loopback_board) -> None:
    found = _candidates(31, 2)
    runner = TrackerRunner(loopback_board, config=MeasureConfig(evaluator="fixed", number=1, repeat=1, min_repeat_ms=0))
    stop = threading.Event()
    try:
        with closing(WarmBuilder(timeout_sec=0.001, max_workers=1)) as builder:  # every build times out
            builder.defer = True
            results = builder.build([BuilderInput(found[0].sch.mod, HOST)])
            wrapped = PendingBuildRunner(runner, builder, stop)
            (failed,) = [f.result() for f in wrapped.run([RunnerInput(results[0].artifact_path, "cpu", found[0].args_info)])]
            wrapped.close()
            assert failed.run_secs is None and "timeout" in str(failed.error_msg).lower()
            assert builder.stats.timed_out == 1 and runner.stats.measured == 0
        with closing(WarmBuilder(timeout_sec=60, max_workers=1)) as builder:
            builder.defer = True
            results = builder.build([BuilderInput(found[1].sch.mod, HOST)])
            stop.set()  # Ctrl-C while the batch builds: built, never sent to the board
            wrapped = PendingBuildRunner(runner, builder, stop)
            (left,) = [f.result() for f in wrapped.run([RunnerInput(results[0].artifact_path, "cpu", found[1].args_info)])]
            wrapped.close()
            assert is_stopped_before_board(left.error_msg) and runner.stats.measured == 0
    finally:
        runner.close()


@pytest.mark.parametrize("cores", [1, 3])
def test_the_pool_is_sized_to_the_cores_this_process_may_use(monkeypatch, cores) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(cores)))
    assert WarmBuilder().max_workers == cores
    assert WarmBuilder(max_workers=5).max_workers == 5  # build.workers overrides


def test_workers_started_early_are_the_ones_the_builder_takes(monkeypatch) -> None:
    """``start_workers_early`` (called as a run begins) warms a pool in the background; a builder started alike
    waits for that pool and takes it instead of starting its own, and a second early start while one is idle
    or warming starts nothing."""
    from edgetune.builder import builder as builder_module

    made: list[threading.Thread] = []
    warm_pool = builder_module._warm_pool

    def counting(*args):
        made.append(threading.current_thread())
        return warm_pool(*args)

    monkeypatch.setattr(builder_module, "_warm_pool", counting)
    settings = dict(max_workers=1, timeout_sec=17.25)  # settings no other test's builder uses: its own pool key
    assert builder_module.start_workers_early(**settings) is True
    assert builder_module.start_workers_early(**settings) is False  # warming already
    with closing(WarmBuilder(**settings)) as builder:
        builder.start()
        assert builder._pool is not None
        assert len(made) == 1 and made[0].name == "edgetune-build-workers", made  # the early pool, not a new one
        [candidate] = _candidates(24, 1)
        [result] = builder.build([BuilderInput(candidate.sch.mod, HOST)])
        assert result.error_msg is None, result.error_msg
    assert builder_module.start_workers_early(**settings) is False  # the closed builder left the pool idle
    with closing(WarmBuilder(**settings)) as builder:
        builder.start()
    assert len(made) == 1
