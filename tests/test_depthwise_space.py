"""Blocked depthwise convolutions are searched with their channel lanes one vector, innermost (issue 52).

MetaSchedule's ``MultiLevelTiling`` splits a blocked depthwise convolution's lane axis like any other and the
vectorizer takes whatever the tiles leave innermost: on MnasNet 1.0 the best of 8 measured candidates of its
heaviest depthwise tasks were scalar kernels (37-71 GFLOPS). :mod:`edgetune.search.depthwise_space` keeps the
lanes whole and innermost in every candidate; the tests check that structure, that the candidates compute the
convolution, that their traces replay (the library and the history store them) and that the product's contexts
get the space only where it applies.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tvm
import tvm_ffi
import tvm.s_tir.meta_schedule as ms
from tvm import te, tirx, topi

from edgetune.search.depthwise_space import DEPTHWISE_BLOCK, PAD_AT, depthwise_space, is_depthwise_nchwc_workload
from edgetune.search.spaces import task_space, with_task_spaces
from edgetune.tasks.blocked_computes import depthwise_conv2d_nchwc

TARGET = tvm.target.Target({"kind": "llvm", "num-cores": 2})
LANES = 8


@pytest.fixture(autouse=True, scope="module")
def _cpu_intrinsics_only() -> None:
    """As the pipeline does before its TuneContexts: not all of TVM's intrinsic families (25-45 s)."""
    from edgetune.builder.intrinsics import load_tensor_intrinsics

    load_tensor_intrinsics(TARGET)


def depthwise_workload(chunks: int = 3, size: int = 14, kernel: int = 3, stride: int = 1,
                       lanes: int = LANES, relu6: bool = False) -> tvm.IRModule:
    """A fused task as the blocked graph gives one: a depthwise convolution in NCHW8c, a bias add and a ReLU (with
    ``relu6``: ReLU6 as ONNX's Clip imports, a maximum and a minimum)."""
    data = te.placeholder((1, chunks, size, size, lanes), name="data")
    weight = te.placeholder((chunks, 1, kernel, kernel, 1, lanes), name="weight")
    bias = te.placeholder((1, chunks, 1, 1, lanes), name="bias")
    pad = kernel // 2
    conv = depthwise_conv2d_nchwc(data, weight, (stride, stride), (pad, pad, pad, pad), (1, 1), "float32")
    out = topi.add(conv, bias)
    out = topi.minimum(topi.maximum(out, 0.0), 6.0) if relu6 else topi.nn.relu(out)
    return tvm.IRModule({"main": te.create_prim_func([data, weight, bias, out])})


def _samples(mod: tvm.IRModule, space, count: int) -> list:
    """``count`` candidates of ``space`` on ``mod``, each a sampled sketch with its postprocessors applied."""
    context = ms.TuneContext(mod=mod, target=TARGET, space_generator=space, search_strategy="replay-trace",
                             rand_state=1, num_threads=1)
    sketches = context.space_generator.generate_design_space(mod)
    postprocs = list(context.space_generator.postprocs)
    out = []
    for i in range(count):
        sch = tvm.s_tir.Schedule(mod, seed=i + 1)
        sketches[i % len(sketches)].trace.apply_to_schedule(
            sch, remove_postproc=True, decision_provider=lambda inst, inputs, attrs, decision: None)
        sch.enter_postproc()
        if all(postproc.apply(sch) for postproc in postprocs):
            out.append(sch)
    return out


def _lanes_whole_and_vectorized(sch) -> bool:
    """Whether the depthwise update's innermost loop is vectorized and covers whole blocks of lanes."""
    loops = sch.get_loops(sch.get_sblock(DEPTHWISE_BLOCK + "_update") if _has(sch, DEPTHWISE_BLOCK + "_update")
                          else sch.get_sblock(DEPTHWISE_BLOCK))
    inner = sch.get(loops[-1])
    return inner.kind == tirx.ForKind.VECTORIZED and int(inner.extent) % LANES == 0


def _has(sch, name: str) -> bool:
    try:
        sch.get_sblock(name)
    except Exception:  # noqa: BLE001 - TVM's own error for a block that is not there
        return False
    return True


def test_a_blocked_depthwise_convolution_is_recognised_and_an_ordinary_one_is_not() -> None:
    assert is_depthwise_nchwc_workload(depthwise_workload())
    data = te.placeholder((1, 2, 8, 8, LANES), name="data")
    weight = te.placeholder((2, 2, 3, 3, LANES, LANES), name="weight")
    with TARGET:  # TOPI's blocked convolution asks for the target
        conv = topi.nn.conv2d_NCHWc(data, weight, 1, 1, 1, f"NCHW{LANES}c", f"NCHW{LANES}c", "float32")
    assert not is_depthwise_nchwc_workload(tvm.IRModule({"main": te.create_prim_func([data, weight, conv])}))


def test_every_candidate_keeps_the_lanes_one_vector_where_multi_level_tiling_does_not() -> None:
    """The regression this space fixes: MetaSchedule's default space leaves some candidates' lanes split (a scalar
    kernel); in the depthwise space none is, whatever tiles are drawn."""
    mod = depthwise_workload()
    ours = _samples(mod, depthwise_space(), 12)
    assert len(ours) == 12
    assert all(_lanes_whole_and_vectorized(sch) for sch in ours)
    assert len({tvm_ffi.structural_hash(sch.mod) for sch in ours}) > 1  # the tiles are drawn, not fixed
    stock = _samples(mod, "post-order-apply", 12)
    assert not all(_lanes_whole_and_vectorized(sch) for sch in stock)


@pytest.mark.parametrize("kernel, stride", [(3, 1), (5, 2)])
def test_a_candidate_computes_the_convolution_and_its_trace_replays(kernel: int, stride: int) -> None:
    mod = depthwise_workload(kernel=kernel, stride=stride)
    sch = _samples(mod, depthwise_space(), 3)[-1]
    replayed = tvm.s_tir.Schedule(mod)
    tvm.s_tir.schedule.Trace.apply_json_to_schedule(sch.trace.as_json(), replayed)  # as the history stores it
    assert tvm_ffi.structural_equal(replayed.mod, sch.mod)

    results = _outputs(mod, sch.mod)
    np.testing.assert_allclose(results[1], results[0], rtol=1e-5, atol=1e-5)
    assert results[0].any()


def _outputs(mod: tvm.IRModule, *scheduled: tvm.IRModule) -> list[np.ndarray]:
    """The output of ``mod`` and of each of ``scheduled`` (``mod`` scheduled), all built for ``TARGET`` and run on the
    same random inputs."""
    rng = np.random.default_rng(0)
    shapes = [[int(d) for d in info.shape] for info in ms.arg_info.ArgInfo.from_prim_func(mod["main"])]
    args = [rng.normal(size=shape).astype("float32") for shape in shapes[:-1]] + [np.zeros(shapes[-1], "float32")]
    results = []
    for candidate in (mod, *scheduled):
        tensors = [tvm.runtime.tensor(a) for a in args]
        tvm.compile(candidate, target=TARGET).mod["main"](*tensors)
        results.append(tensors[-1].numpy())
    return results


def test_candidates_build_for_an_arm_board() -> None:
    """An ARM board's blocks are NEON's 4 lanes (NCHW4c): its candidates cross-compile to aarch64 code, with the
    lanes in NEON's 128-bit registers (a board is what runs them; here only the code is checked)."""
    arm = tvm.target.Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72", "mattr": ["+neon"],
                             "num-cores": 4})
    mod = depthwise_workload(chunks=4, lanes=4)
    context = ms.TuneContext(mod=mod, target=arm, space_generator=depthwise_space(int32_lanes=4),
                             search_strategy="replay-trace", rand_state=1, num_threads=1)
    sketches = context.space_generator.generate_design_space(mod)
    sch = tvm.s_tir.Schedule(mod, seed=3)
    sketches[0].trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=lambda *args: None)
    sch.enter_postproc()
    assert all(postproc.apply(sch) for postproc in context.space_generator.postprocs)
    assembly = tvm.compile(sch.mod, target=arm).mod.inspect_source("s")
    assert "fmla" in assembly and ".4s" in assembly


def test_the_pipelines_contexts_give_the_space_to_depthwise_tasks_on_cpus_only(tmp_path: Path) -> None:
    """What ``make_contexts`` does with a real model's tasks: its depthwise task gets the space, its other tasks keep
    MetaSchedule's context; ``tuning.depthwise_tiling = false`` and a GPU target keep the default for it too."""
    from test_grouped_conv import _prepared

    from edgetune.tasks import prepare_for_tuning

    layers = ((3, 16, "stem", 1, 3, 2), (16, 16, "depthwise", 16, 3, 1), (16, 32, "pointwise", 1, 1, 1))
    _path, _model, blocked = _prepared(tmp_path, layers, f"NCHW{LANES}c")
    extracted = list(ms.relax_integration.extract_tasks(prepare_for_tuning(blocked.mod, TARGET), TARGET))
    from edgetune.tuning.session import unnamed_handlers_aside

    with unnamed_handlers_aside():  # as make_contexts does: pytest's capture handler has no name, which MetaSchedule's
        contexts, _weights = ms.relax_integration.extracted_tasks_to_tune_contexts(  # logger config rejects
            extracted, work_dir=str(tmp_path), strategy="evolutionary", num_threads=1, seed=1)
    depthwise = [i for i, c in enumerate(contexts) if is_depthwise_nchwc_workload(c.mod)]
    assert len(depthwise) == 1 and len(contexts) > 2
    swapped = with_task_spaces(list(contexts), "evolutionary")
    for i, (before, after) in enumerate(zip(contexts, swapped)):
        assert (after is before) == (i not in depthwise)
    rules = [type(r).__name__ for r in swapped[depthwise[0]].space_generator.sch_rules]
    assert "MultiLevelTiling" not in rules, rules
    task = swapped[depthwise[0]]
    sketches = task.space_generator.generate_design_space(task.mod)
    assert len(sketches) == len(PAD_AT)  # one per place of the padded input, each with its three sampled splits
    assert all(sum(str(i.kind.name) == "SamplePerfectTile" for i in s.trace.insts) == 3 for s in sketches)

    kept = with_task_spaces(list(contexts), "evolutionary", depthwise_tiling=False)
    assert all(after is before for before, after in zip(contexts, kept))
    # what task_space reads of a context; a real CUDA context would load CUDA's tensor intrinsics (30 s)
    gpu = SimpleNamespace(mod=contexts[depthwise[0]].mod, target=tvm.target.Target({"kind": "cuda", "arch": "sm_80"}))
    assert task_space(gpu) is None
    assert task_space(SimpleNamespace(mod=gpu.mod, target=TARGET)) is not None


def int8_depthwise_workload(size: int = 14, channels: int = 48, stride: int = 1) -> tvm.IRModule:
    """An int8 depthwise task as :mod:`edgetune.tasks.int8` writes one: NHWC, its zero-point padding inside, int32
    sums, a bias and a requantization to int8 fused after it."""
    from edgetune.tasks.int8 import _depthwise_compute

    x = te.placeholder((1, size, size, channels), "int8", name="x")
    w = te.placeholder((3, 3, channels), "int8", name="w")
    bias = te.placeholder((channels,), "int32", name="bias")
    out_size = (size + 2 - 3) // stride + 1
    acc = _depthwise_compute(x, w, (stride, stride), (1, 1), (1, 1, 1, 1), -3, (out_size, out_size))
    summed = te.compute(acc.shape, lambda n, y, x_, c: acc[n, y, x_, c] + bias[c], name="T_add")
    requantized = te.compute(acc.shape, lambda n, y, x_, c: tvm.tirx.max(tvm.tirx.min(
        (summed[n, y, x_, c].astype("float32") * 0.05).astype("int32"), 127), -128).astype("int8"), name="requantize")
    return tvm.IRModule({"main": te.create_prim_func([x, w, bias, requantized])})


def test_an_int8_depthwise_convolution_keeps_its_channels_in_whole_vectors_and_computes_the_same() -> None:
    """int8 depthwise convolutions (no dot-product instruction takes them) get the space too: their channels,
    innermost in NHWC, in whole vectors of int32 sums in every candidate, and the requantization fused."""
    from edgetune.search.depthwise_space import DEPTHWISE_INT8_BLOCK, is_depthwise_workload

    mod = int8_depthwise_workload(stride=2)
    assert is_depthwise_workload(mod) and not is_depthwise_nchwc_workload(mod)
    candidates = _samples(mod, depthwise_space(int32_lanes=16), 8)
    assert len(candidates) == 8
    for sch in candidates:
        inner = sch.get(sch.get_loops(sch.get_sblock(DEPTHWISE_INT8_BLOCK + "_update"))[-1])
        assert inner.kind == tirx.ForKind.VECTORIZED and int(inner.extent) == 16
    rng = np.random.default_rng(1)
    shapes = [[int(d) for d in info.shape] for info in ms.arg_info.ArgInfo.from_prim_func(mod["main"])]
    args = [rng.integers(-20, 20, size=shapes[0]).astype("int8"), rng.integers(-20, 20, size=shapes[1]).astype("int8"),
            rng.integers(-100, 100, size=shapes[2]).astype("int32"), np.zeros(shapes[3], "int8")]
    results = []
    for candidate in (mod, candidates[-1].mod):
        tensors = [tvm.runtime.tensor(a) for a in args]
        tvm.compile(candidate, target=TARGET).mod["main"](*tensors)
        results.append(tensors[-1].numpy())
    np.testing.assert_array_equal(results[1], results[0])
    assert np.abs(results[0]).max() > 0


def test_int8_tasks_other_than_depthwise_keep_the_instruction_space() -> None:
    """The routing: an int8 depthwise task gets the depthwise space, an int8 convolution the dot-product one."""
    from edgetune.search.int8_space import is_int8_workload

    vnni = tvm.target.Target({"kind": "llvm", "mcpu": "cascadelake", "num-cores": 2})
    depthwise = int8_depthwise_workload()
    assert is_int8_workload(depthwise)
    rules = [type(r).__name__ for r in task_space(SimpleNamespace(mod=depthwise, target=vnni)).sch_rules]
    assert "MultiLevelTiling" not in rules and "MultiLevelTilingWithIntrin" not in rules, rules
    x = te.placeholder((1, 8, 8, 16), "uint8", name="x")
    w = te.placeholder((16, 16), "int8", name="w")
    k = te.reduce_axis((0, 16), "k")
    dense = te.compute((64, 16), lambda i, j: te.sum(x[0, i // 8, i % 8, k].astype("int32") * w[j, k].astype("int32"),
                                                      axis=k), name="dense")
    int8_dense = tvm.IRModule({"main": te.create_prim_func([x, w, dense])})
    rules = [type(r).__name__ for r in task_space(SimpleNamespace(mod=int8_dense, target=vnni)).sch_rules]
    assert "MultiLevelTilingWithIntrin" in rules, rules


def test_a_depthwise_task_starts_from_a_depthwise_space_schedule_of_another_epilogue_behind_a_faster_other() -> None:
    """MnasNet's depthwise convolutions (bias, ReLU) found in the AVX2 library only MobileNetV2's (bias, ReLU6), as
    ``MultiLevelTiling`` traces, which do not carry into the depthwise space: all 12 measured their untuned loops
    first. A library may hold both spaces' schedules of one workload (the depthwise entries built again in the
    depthwise space, merged in); an anchor's schedules are tried in order until one carries, so the task starts from
    the depthwise-space schedule even where a ``MultiLevelTiling`` one recorded faster."""
    from edgetune.history.sql import target_json
    from edgetune.history.trace_codec import trace_as_json
    from edgetune.schedules.library import LibrarySchedule, LibraryWorkload, ScheduleLibrary
    from edgetune.schedules.use import transferred_library_candidates
    from edgetune.tasks.flops import task_flops
    from edgetune.tasks.signature import anchor_signature, operator_signature

    anchor = depthwise_workload(chunks=4, size=14, relu6=True)
    task = depthwise_workload(chunks=3, size=28)
    assert operator_signature(anchor) != operator_signature(task)
    assert anchor_signature(operator_signature(anchor)) == anchor_signature(operator_signature(task))
    [tiled] = _samples(anchor, "post-order-apply", 1)
    [own_space] = _samples(anchor, depthwise_space(), 1)
    assert not _lanes_whole_and_vectorized(tiled) and _lanes_whole_and_vectorized(own_space)  # one of each space

    def schedule(sch, latency_us: float) -> LibrarySchedule:
        return LibrarySchedule(trace_as_json(sch.trace), latency_us, None, target_json(TARGET), "local", 8)

    entry = LibraryWorkload(str(tvm_ffi.structural_hash(anchor)), tvm.ir.save_json(anchor),
                            list(operator_signature(anchor)), float(task_flops(anchor)),
                            [schedule(tiled, 10.0), schedule(own_space, 20.0)])  # MultiLevelTiling's recorded faster
    library = ScheduleLibrary({"family": {"name": "test"}}, [entry])
    context = ms.TuneContext(mod=task, target=TARGET, space_generator=depthwise_space(), search_strategy="replay-trace",
                             rand_state=1, num_threads=1)
    [candidate] = transferred_library_candidates(context, library, TARGET, 1)
    assert _lanes_whole_and_vectorized(candidate.sch)  # the depthwise space's schedule, its decisions carried
    results = _outputs(task, candidate.sch.mod)  # it computes the task's ReLU, not the anchor's ReLU6
    np.testing.assert_allclose(results[1], results[0], rtol=1e-5, atol=1e-5)
    assert results[0].max() > 6  # where ReLU6 would differ
