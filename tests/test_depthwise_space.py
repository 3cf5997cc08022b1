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


def depthwise_workload(chunks: int = 3, size: int = 14, kernel: int = 3, stride: int = 1) -> tvm.IRModule:
    """A fused task as the blocked graph gives one: a depthwise convolution in NCHW8c, a bias add and a ReLU."""
    data = te.placeholder((1, chunks, size, size, LANES), name="data")
    weight = te.placeholder((chunks, 1, kernel, kernel, 1, LANES), name="weight")
    bias = te.placeholder((1, chunks, 1, 1, LANES), name="bias")
    pad = kernel // 2
    conv = depthwise_conv2d_nchwc(data, weight, (stride, stride), (pad, pad, pad, pad), (1, 1), "float32")
    out = topi.nn.relu(topi.add(conv, bias))
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

    rng = np.random.default_rng(0)
    shapes = [[int(d) for d in info.shape] for info in ms.arg_info.ArgInfo.from_prim_func(mod["main"])]
    args = [rng.normal(size=shape).astype("float32") for shape in shapes[:-1]] + [np.zeros(shapes[-1], "float32")]
    results = []
    for candidate in (mod, sch.mod):
        built = tvm.compile(candidate, target=TARGET)
        tensors = [tvm.runtime.tensor(a) for a in args]
        built.mod["main"](*tensors)
        results.append(tensors[-1].numpy())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-5, atol=1e-5)
    assert results[0].any()


def test_the_pipelines_contexts_give_the_space_to_depthwise_tasks_on_cpus_only(tmp_path: Path) -> None:
    """What ``make_contexts`` does with a real model's tasks: its depthwise task gets the space, its other tasks keep
    MetaSchedule's context; ``tuning.depthwise_tiling = false`` and a GPU target keep the default for it too."""
    from test_grouped_conv import _prepared

    from edgetune.tasks import prepare_for_tuning

    layers = ((3, 16, "stem", 1, 3, 2), (16, 16, "depthwise", 16, 3, 1), (16, 32, "pointwise", 1, 1, 1))
    _path, _model, blocked = _prepared(tmp_path, layers, f"NCHW{LANES}c")
    extracted = list(ms.relax_integration.extract_tasks(prepare_for_tuning(blocked.mod, TARGET), TARGET))
    contexts, _weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
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
