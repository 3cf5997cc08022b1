"""Trace transfer between shapes: adapted tiles, never a crash, and a better first batch than a cold start."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tvm
import tvm.s_tir.meta_schedule as ms

from edgetune.builder.intrinsics import load_tensor_intrinsics
from edgetune.search.transfer import adapt_tile, best_similar_records, transfer_trace, transferred_candidates
from edgetune.tasks import load_model, prepare_for_tuning

TARGET = tvm.target.Target({"kind": "llvm", "num-cores": 2})
CONV = "fused_conv2d1_add1_relu1"  # demo:tiny-cnn's 16->32 channel stride-2 convolution


@pytest.mark.parametrize(
    "factors, extent, expected",
    [([4, 8, 2], 64, [4, 8, 2]), ([8, 8, 2], 56, [4, 7, 2]), ([1, 16], 7, [1, 7]), ([2, 3, 5], 1, [1, 1, 1]), ([32], 12, [12])],
)
def test_adapt_tile_keeps_inner_factors_that_divide(factors, extent, expected) -> None:
    tiled = adapt_tile(factors, extent)
    assert tiled == expected and int(np.prod(tiled)) == extent and len(tiled) == len(factors)


def conv_workload(res: int):
    model = load_model(f"demo:tiny-cnn@{res}")
    tasks = ms.relax_integration.extract_tasks(prepare_for_tuning(model.mod, TARGET), TARGET)
    return next(t.dispatched[0] for t in tasks if t.task_name == CONV)


def context_for(mod):
    load_tensor_intrinsics(TARGET)
    ctx = ms.TuneContext(mod=mod, target=TARGET, space_generator="post-order-apply", search_strategy="replay-trace",
                         task_name=CONV, num_threads=1, rand_state=1)
    return ctx


def sampled_traces(mod, count: int):
    """Fully decided traces of ``mod`` (what the history stores for measured candidates)."""
    ctx = context_for(mod)
    traces = []
    for space in ctx.space_generator.generate_design_space(mod):
        for seed in range(1, count + 1):
            sch = tvm.s_tir.Schedule(mod, seed=seed, debug_mask="none")
            try:
                tvm.s_tir.schedule.Trace(space.trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
            except Exception:  # noqa: BLE001 - an invalid sample
                continue
            traces.append(sch.trace)
    return traces


def test_transfer_between_shapes_gives_a_valid_schedule_or_none() -> None:
    source, other = conv_workload(32), conv_workload(40)  # 16x16 -> 20x20 outputs: 8 and 16 tiles stop dividing
    ctx = context_for(other)
    postprocs = list(ctx.space_generator.postprocs)
    traces = sampled_traces(source, 12)
    assert len(traces) >= 12
    valid = 0
    for i, trace in enumerate(traces):
        sch = transfer_trace(trace, other, postprocs, seed=i + 1)  # must never raise
        if sch is None:
            continue
        valid += 1
        # a valid schedule of the *new* workload: it builds and keeps its buffer shapes
        tvm.compile(sch.mod, target=TARGET)
        shapes = [list(a.as_json()) for a in ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)]
        assert shapes == [list(a.as_json()) for a in ms.arg_info.ArgInfo.from_entry_func(other, remove_preproc=True)]
    assert valid >= len(traces) // 2, f"only {valid} of {len(traces)} traces transferred"


def test_a_trace_of_another_operator_is_skipped_not_raised() -> None:
    dense = next(
        t.dispatched[0]
        for t in ms.relax_integration.extract_tasks(prepare_for_tuning(load_model("demo:tiny-cnn").mod, TARGET), TARGET)
        if "matmul" in t.task_name
    )
    ctx = context_for(conv_workload(32))
    for trace in sampled_traces(dense, 4):
        assert transfer_trace(trace, ctx.mod, list(ctx.space_generator.postprocs)) is None
    assert transferred_candidates(ctx, [], limit=4) == []


def test_best_similar_records_interleave_other_shapes_and_skip_own_and_default() -> None:
    from edgetune.search.default_schedule import default_schedule
    from edgetune.tasks.signature import operator_signature

    own, a, b = conv_workload(32), conv_workload(40), conv_workload(48)

    def record(mod, trace, sec):
        return ms.database.TuningRecord(trace, ms.database.Workload(mod), [sec], TARGET, None)

    traces = sampled_traces(a, 3)
    records = [
        record(a, traces[0], 3e-3), record(a, traces[1], 1e-3), record(a, default_schedule(a).trace, 1e-4),
        record(b, traces[2], 2e-3), record(own, traces[0], 1e-5), record(b, traces[0], 1e10),
    ]
    picked = best_similar_records(records, own, operator_signature, per_workload=2)
    secs = [float(r.run_secs[0]) for r in picked]
    assert secs == [1e-3, 2e-3, 3e-3]  # best of each shape first; own workload, default and failures left out


@pytest.mark.integration
def test_transferred_candidates_run_and_are_tuned_quality(tmp_path, loopback_board) -> None:
    """History of the convolution at 32x32 gives the 48x48 one a first batch that starts with transferred, tuned-quality schedules.

    Whether they beat a cold first batch is a benchmark question, not a test's: in 3
    runs here the transferred best was 3.3x, 8.2x and 4.6x below the cold batch's
    median, in one CI run 1.3x above it (and an earlier CI run saw the cold best win).
    What must hold every time: the transferred candidates build, run, and are
    scheduled code, faster than the untuned default schedule, the better of them far faster.

    That last comparison is timed again here, side by side, not read from the run's
    measurements: the default schedule runs on one thread and the tuned ones on two,
    so a CI neighbour on the other core slowed the transferred ones 7x and the
    default not at all (2.5 ms against 1.2 and 1.7, where a quiet host measures
    0.2 and 0.3).
    """
    import shutil

    from edgetune.board.base import TrackerBoard
    from edgetune.profile import load_profile
    from edgetune.tuning import TuneOptions, run_tune

    from conftest import SESSION_KEY  # noqa: F401 - the session board's key

    profile = load_profile("host").with_overrides(
        rpc={"key": loopback_board.key},
        # CONV is the task's name as imported (NCHW): a blocked layout names and shapes it differently
        # no schedule library: its nearest shape, measured first, would take one of the batch's transferred seeds
        tuning={"num_trials_per_iter": 4, "sampler": "none", "early_stop": "none", "conv_layout": "as-is", "schedules": "off"},
        measure={"evaluator": "fixed"},
    )

    def tune(res: int, db: str, trials: int, transfer: str):
        options = TuneOptions(
            profile=profile.with_overrides(tuning={"transfer": transfer}), model=f"demo:tiny-cnn@{res}",
            out_dir=tmp_path / f"{res}-{transfer}", db=db, trials=trials, evaluate=False, warm_start="off",
            task_names=[CONV], board=TrackerBoard(loopback_board),
        )
        return run_tune(options)

    source = str(tmp_path / "source.db")
    tune(32, source, 1 + 24, "off")
    batch, defaults = {}, {}
    for transfer in ("similar", "off"):
        db = tmp_path / f"{transfer}.db"
        shutil.copy(source, db)
        summary = tune(48, str(db), 1 + 4, transfer)  # the default schedule, then one batch of 4
        (task,) = summary.tasks
        assert task.trials_this_run == 5
        assert summary.measurement_reduction["tasks"][0]["transferred"] == (2 if transfer == "similar" else 0)
        measured = _latencies_after(db, source)  # in measurement order: the default schedule first
        defaults[transfer], batch[transfer] = measured[0], measured[1:]
    print(batch, defaults)
    transferred = batch["similar"][:2]  # a batch starts with its transferred candidates
    assert len(batch["off"]) == 4 and all(t is not None for t in transferred), batch
    mod, target, traces = _schedules_after(tmp_path / "similar.db", source)
    default, *tuned = _fastest_side_by_side(mod, target, traces[:3])  # the default schedule, then the transferred two
    print("side by side (s):", default, tuned)
    # the better transferred schedule far faster, the other only faster: both are adapted from another shape, and a
    # loaded CI run of 145ee48 timed them at 0.33 and 1.55 ms against the default's 2.02
    assert min(tuned) < default / 2 and max(tuned) < default, (default, tuned, batch, defaults)


def _schedules_after(db, source):
    """The workload, target and traces (JSON) of the records ``db`` gained over its copy of ``source``, oldest first."""
    import sqlite3

    with sqlite3.connect(source) as conn:
        (last,) = conn.execute("select max(id) from records").fetchone()
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "select w.mod_json, r.target_json, r.trace_json from records r join workloads w on w.id = r.workload_id"
            " where r.id > ? order by r.id",
            (last,),
        ).fetchall()
    assert len({(mod_json, target_json) for mod_json, target_json, _ in rows}) == 1, "one task on one target was tuned"
    mod_json, target_json, _ = rows[0]
    return tvm.ir.load_json(mod_json), tvm.target.Target(json.loads(target_json)), [json.loads(row[2]) for row in rows]


def _fastest_side_by_side(mod, target, traces, rounds: int = 20) -> list[float]:
    """Each trace applied to ``mod``, built for ``target``, and timed in turn for ``rounds`` rounds in this process: the fastest round of each.

    Interleaved rounds meet the host in the same states, and the fastest round is
    the one a busy neighbour disturbed least.
    """
    dev = tvm.cpu(0)
    timers, args = [], None
    for trace in traces:
        sch = tvm.s_tir.Schedule(mod)
        tvm.s_tir.schedule.Trace.apply_json_to_schedule(trace, sch)
        built = tvm.compile(sch.mod, target=target).mod
        if args is None:
            infos = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
            rng = np.random.default_rng(0)
            args = [tvm.runtime.tensor(rng.random(list(info.shape)).astype(info.dtype), dev) for info in infos]
        timers.append(built.time_evaluator(built.entry_name, dev, number=5, repeat=1))
    fastest = [float("inf")] * len(timers)
    for _ in range(rounds):
        for i, timer in enumerate(timers):
            fastest[i] = min(fastest[i], timer(*args).mean)
    return fastest


def _latencies_after(db, source) -> list[float | None]:
    """Mean run seconds of the records ``db`` gained over its copy of ``source``, oldest first (None: failed)."""
    import sqlite3

    with sqlite3.connect(source) as conn:
        (last,) = conn.execute("select max(id) from records").fetchone()
    with sqlite3.connect(db) as conn:
        rows = conn.execute("select mean_run_sec from records where id > ? order by id", (last,)).fetchall()
    return [row[0] for row in rows]


def epilogue_conv_workload(tmp_path, res: int, epilogue: str):
    """demo:tiny-cnn's stride-2 convolution with another epilogue: ``relu`` (as the demo), ``hard_swish``, or ``none``
    (no bias and no activation, as the dynamo exporter writes a convolution whose folded bias is zero)."""
    from edgetune.tasks.demo import _GraphBuilder

    g = _GraphBuilder(7)
    x = g.relu(g.conv("input", 3, 16, 3))
    if epilogue == "none":
        weight = g._const("w", np.random.default_rng(1).normal(0.0, 0.1, (32, 16, 3, 3)))
        y = g._node("Conv", [x, weight], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    else:
        y = getattr(g, epilogue)(g.conv(x, 16, 32, 3, stride=2))
    path = tmp_path / f"conv-{epilogue}-{res}.onnx"
    path.write_bytes(g.model("conv", "input", res, g.classifier(y, 32, 10), 10).SerializeToString())
    tasks = ms.relax_integration.extract_tasks(prepare_for_tuning(load_model(str(path)).mod, TARGET), TARGET)
    return next(t.dispatched[0] for t in tasks if t.task_name.split("_")[:2] in (["fused", "conv2d1"], ["conv2d1"]))


@pytest.mark.parametrize("epilogue", ["hard_swish", "none"])
def test_a_schedule_of_another_epilogue_carries_its_decisions_into_this_workloads_space(tmp_path, epilogue) -> None:
    """A trace names its blocks: a convolution with ReLU's does not replay on the same convolution with hard-swish or
    without a bias (MobileNetV3's and the dynamo exporter's MobileNetV2's convolutions started from their untuned
    loops, 2 GFLOPS, 14x and 21x ONNX Runtime). Its decisions do: the same tiles and unroll, drawn by this workload's
    own design space, every epilogue block fused as that space fuses it."""
    from edgetune.search.transfer import _sampled, transfer_decisions
    from edgetune.tasks.signature import anchor_signature, operator_signature

    source, target = conv_workload(32), epilogue_conv_workload(tmp_path, 32, epilogue)
    assert operator_signature(source) != operator_signature(target)
    assert anchor_signature(operator_signature(source)) == anchor_signature(operator_signature(target))
    ctx = context_for(target)
    postprocs = list(ctx.space_generator.postprocs)
    spaces = list(ctx.space_generator.generate_design_space(target))
    traces = sampled_traces(source, 6)
    carried = 0
    for i, trace in enumerate(traces):
        sch = transfer_decisions(trace, target, spaces, postprocs, seed=i + 1)  # must never raise
        if sch is None:
            continue
        carried += 1
        # the same shape: every tile and the unroll are the source's, in order
        assert [(k, [int(v) for v in d] if k == "SamplePerfectTile" else int(d)) for k, d in _sampled(sch.trace)] == [
            (k, [int(v) for v in d] if k == "SamplePerfectTile" else int(d)) for k, d in _sampled(trace)
        ]
        built = tvm.compile(sch.mod, target=TARGET)  # a valid schedule of this workload
        args = [np.random.default_rng(0).normal(size=[int(d) for d in a.shape]).astype("float32")
                for a in ms.arg_info.ArgInfo.from_entry_func(target, remove_preproc=True)]
        reference = [a.copy() for a in args]
        dev = tvm.cpu()
        built(*[tvm.runtime.tensor(a, dev) for a in args[:-1]], out := tvm.runtime.tensor(args[-1], dev))
        tvm.compile(target, target=TARGET)(*[tvm.runtime.tensor(a, dev) for a in reference[:-1]],
                                            expected := tvm.runtime.tensor(reference[-1], dev))
        np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-4, atol=1e-4)
    assert carried >= len(traces) // 2, f"only {carried} of {len(traces)} traces carried their decisions"
    # the candidates a task gets: decisions carried where the trace of another epilogue does not replay
    records = [ms.database.TuningRecord(t, ms.database.Workload(source), [1e-3], TARGET, None) for t in traces]
    found = transferred_candidates(ctx, records, limit=3)
    assert len(found) == 3


def test_decisions_of_another_operator_are_not_carried(tmp_path) -> None:
    dense = next(
        t.dispatched[0]
        for t in ms.relax_integration.extract_tasks(prepare_for_tuning(load_model("demo:tiny-cnn").mod, TARGET), TARGET)
        if "matmul" in t.task_name
    )
    from edgetune.search.transfer import transfer_decisions

    target = epilogue_conv_workload(tmp_path, 32, "hard_swish")
    ctx = context_for(target)
    spaces = list(ctx.space_generator.generate_design_space(target))
    for trace in sampled_traces(dense, 3):
        assert transfer_decisions(trace, target, spaces, list(ctx.space_generator.postprocs)) is None
