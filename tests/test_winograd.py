"""3x3 stride-1 convolutions in the Winograd form on blocked tensors (``tuning.winograd``).

The form must compute the convolution (any input and output block, padding, sizes that tiles of 4 do not divide),
be chosen only for the convolutions it applies to, keep the bias and activation fused in the same kernel as the
direct convolution does, and be searched with MetaSchedule's Winograd rules for its transforms.
"""

from __future__ import annotations

import numpy as np
import pytest
import tvm
import tvm.s_tir.meta_schedule as ms
from tvm import relax, te, topi

from edgetune.tasks import load_model, prepare_for_tuning
from edgetune.tasks.graph import prepare_graph
from edgetune.tasks.recipe import graph_switches
from edgetune.tasks import winograd as winograd_module
from edgetune.tasks.winograd import MIN_TILES, conv2d_winograd_nchwc, transform_weights, winograd_applies

TARGET = tvm.target.Target({"kind": "llvm", "num-cores": 2})


def _run_prim(func: tvm.tirx.PrimFunc | tvm.IRModule, args: list[np.ndarray], out_shape: list[int]) -> np.ndarray:
    built = tvm.compile(func, target=TARGET)
    out = tvm.runtime.tensor(np.zeros(out_shape, "float32"))
    built(*[tvm.runtime.tensor(a) for a in args], out)
    return out.numpy()


@pytest.mark.parametrize("in_lanes, out_lanes, height, width, padding", [
    (16, 16, 14, 14, (1, 1, 1, 1)),  # tiles of 4 do not divide 14
    (16, 8, 9, 11, (1, 1, 1, 1)),  # another output block, odd sizes
    (8, 16, 8, 8, (0, 0, 0, 0)),  # no padding: 6x6 out
    (8, 8, 7, 5, (1, 0, 1, 2)),  # uneven padding
])
def test_the_winograd_form_computes_the_convolution(in_lanes: int, out_lanes: int, height: int, width: int,
                                                    padding: tuple[int, int, int, int]) -> None:
    rng = np.random.default_rng(0)
    in_channels, out_channels = 32, 32
    x = rng.standard_normal((1, in_channels // in_lanes, height, width, in_lanes)).astype("float32")
    kernel = rng.standard_normal((out_channels // out_lanes, in_channels // in_lanes, 3, 3, in_lanes, out_lanes))
    kernel = kernel.astype("float32")
    data = te.placeholder(x.shape, name="data")
    weights = transform_weights(kernel)
    assert weights.shape == (6, 6, in_channels, out_channels)
    packed = te.placeholder(weights.shape, name="weights")
    direct_kernel = te.placeholder(kernel.shape, name="kernel")
    winograd = conv2d_winograd_nchwc(data, packed, padding, out_lanes)
    with TARGET:
        direct = topi.nn.conv2d_NCHWc(data, direct_kernel, (1, 1), padding, (1, 1), f"NCHW{in_lanes}c",
                                      f"NCHW{out_lanes}c", "float32")
    assert [int(d) for d in winograd.shape] == [int(d) for d in direct.shape]
    shape = [int(d) for d in direct.shape]
    expected = _run_prim(te.create_prim_func([data, direct_kernel, direct]), [x, kernel], shape)
    got = _run_prim(te.create_prim_func([data, packed, winograd]), [x, weights], shape)
    assert np.abs(got - expected).max() <= 1e-5 * np.abs(expected).max()


def test_the_form_applies_to_blocked_3x3_stride_1_ungrouped_float32_convolutions_only() -> None:
    blocked = ("NCHW16c", "OIHW16i16o", "NCHW16c")
    shape, size = (4, 4, 3, 3, 16, 16), (1, 24, 24)  # 64 channels, 6x6 tiles of 4
    assert winograd_applies(*blocked, shape, (1, 1), (1, 1), 1, "float32", size)
    assert not winograd_applies(*blocked, shape, (2, 2), (1, 1), 1, "float32", size)  # strided
    assert not winograd_applies(*blocked, shape, (1, 1), (2, 2), 1, "float32", size)  # dilated
    assert not winograd_applies(*blocked, shape, (1, 1), (1, 1), 2, "float32", size)  # grouped
    assert not winograd_applies(*blocked, shape, (1, 1), (1, 1), 1, "int32", size)
    assert not winograd_applies(*blocked, (4, 4, 1, 1, 16, 16), (1, 1), (1, 1), 1, "float32", size)  # 1x1
    assert not winograd_applies(*blocked, (4, 1, 3, 3, 3, 16), (1, 1), (1, 1), 1, "float32", size)  # 3 in channels
    assert not winograd_applies("NCHW", "OIHW", "NCHW", (64, 64, 3, 3), (1, 1), (1, 1), 1, "float32", size)
    # 14x14 outputs: 16 tiles, whose weights (4x larger transformed) bound the products (MIN_TILES)
    assert MIN_TILES > 16 and not winograd_applies(*blocked, shape, (1, 1), (1, 1), 1, "float32", (1, 14, 14))
    assert winograd_applies(*blocked, shape, (1, 1), (1, 1), 1, "float32", (4, 14, 14))  # a batch of 4 has 64


@pytest.fixture(scope="module")
def resnet() -> tuple:
    """demo:resnet18@32 prepared blocked, with and without the Winograd form, and its tasks.

    At 32x32 no output has MIN_TILES tiles: the threshold is lowered here so that a small model exercises every
    3x3 stride-1 convolution's form (the threshold has its own test above).
    """
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2, "mcpu": "skylake-avx512"})
    model = load_model("demo:resnet18@32")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(winograd_module, "MIN_TILES", 1)
        prepared = {on: prepare_graph(model, "NCHWc", "full", target, winograd=on) for on in (False, True)}
    tasks = {on: ms.relax_integration.extract_tasks(prepare_for_tuning(p.mod, target), target)
             for on, p in prepared.items()}
    return model, prepared, tasks, target


def test_a_resnet_runs_its_3x3_stride_1_convolutions_in_the_winograd_form_with_their_epilogues(resnet) -> None:
    model, prepared, tasks, target = resnet
    assert graph_switches()["winograd"] is False  # a recipe records the switch; off unless asked
    assert not any("winograd" in t.task_name for t in tasks[False])
    winograd = [t.task_name for t in tasks[True] if "winograd" in t.task_name]
    direct = [t.task_name for t in tasks[True] if "conv2d_NCHWc" in t.task_name]
    # ResNet-18's 3x3 stride-1 convolutions: 4 in the first stage, 3 in each other (its first is strided); the
    # stem (7x7), the three strided 3x3 and the three 1x1 downsamples stay direct
    assert sum(t.weight for t in tasks[True] if "winograd" in t.task_name) == 13, winograd
    assert sum(t.weight for t in tasks[True] if "conv2d_NCHWc" in t.task_name) == 7, direct
    # the bias, the ReLU and the residual add are in the same kernel, as with the direct convolution
    assert all("_add" in name for name in winograd) and any(name.endswith("relu1") for name in winograd)
    assert len(tasks[True]) == len(tasks[False])
    x = model.random_inputs(0)["input"]

    def run(mod: tvm.IRModule) -> np.ndarray:
        # built for the generic TARGET: the graph is prepared for an AVX-512 CPU, which this host need not be
        with tvm.transform.PassContext(opt_level=3):
            vm = relax.VirtualMachine(relax.build(mod, target=TARGET), tvm.cpu())
        return vm["main"](tvm.runtime.tensor(x)).numpy()

    expected = run(prepare_graph(model, "as-is", "full").mod)
    np.testing.assert_allclose(run(prepared[True].mod), expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def test_a_winograd_task_is_searched_with_metaschedules_winograd_rules(resnet) -> None:
    """The data-pack and inverse transforms get MetaSchedule's CPU Winograd rules (tiles of tiles and channels,
    the 6x6 transform unrolled); a candidate computes what the unscheduled kernel computes."""
    from edgetune.builder.intrinsics import load_tensor_intrinsics

    _model, _prepared, tasks, target = resnet
    load_tensor_intrinsics(target)
    task = next(t for t in tasks[True] if "winograd" in t.task_name)
    mod = task.dispatched[0]
    context = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply",
                             search_strategy="replay-trace", rand_state=3, num_threads=1)
    sketch = context.space_generator.generate_design_space(mod)[0]
    sch = tvm.s_tir.Schedule(mod, seed=3)
    sketch.trace.apply_to_schedule(sch, remove_postproc=True)
    sch.enter_postproc()
    assert all(postproc.apply(sch) for postproc in context.space_generator.postprocs)
    kinds = [inst.kind.name for inst in sch.trace.insts]
    assert kinds.count("Unroll") >= 8, kinds  # 4 per transform, from the rules, which nothing else emits

    rng = np.random.default_rng(0)
    infos = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    shapes = [[int(d) for d in info.shape] for info in infos]
    args = [rng.standard_normal(shape).astype("float32") for shape in shapes[:-1]]
    expected = _run_prim(mod, args, shapes[-1])
    got = _run_prim(sch.mod, args, shapes[-1])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
