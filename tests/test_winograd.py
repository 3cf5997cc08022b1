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


def _library_workload(mod: tvm.IRModule, latency_us: float, mcpu: str = "skylake-avx512"):
    """``mod`` as a schedule library holds it, with one schedule measured at ``latency_us`` on ``mcpu``."""
    import json

    import tvm_ffi

    from edgetune.schedules.library import LibrarySchedule, LibraryWorkload
    from edgetune.tasks.flops import task_flops
    from edgetune.tasks.signature import operator_signature

    schedule = LibrarySchedule(trace_json=[], latency_us=latency_us, gflops=None, board="test", records=8,
                               target_json=json.dumps({"kind": "llvm", "mcpu": mcpu}))
    return LibraryWorkload(str(tvm_ffi.structural_hash(mod)), tvm.ir.save_json(mod), list(operator_signature(mod)),
                           task_flops(mod), [schedule])


def _shape_of(task) -> str:
    from edgetune.search.transfer import buffer_shapes
    from edgetune.tasks.winograd import shape_key

    shapes = buffer_shapes(task.dispatched[0])
    return shape_key(shapes[0], shapes[-1])


def test_auto_takes_the_winograd_form_for_the_shapes_whose_library_schedules_beat_the_direct_ones(resnet, tmp_path) -> None:
    """``tuning.winograd = "auto"``: a shape goes into the Winograd form where the library holds both forms of it and
    the Winograd one ran at most WINOGRAD_MAX_SHARE of the direct one's latency; the recipe records the shapes."""
    from types import SimpleNamespace

    from edgetune.common.cpu_family import family_of
    from edgetune.schedules.library import write_library
    from edgetune.tasks.recipe import Recipe, prepare_model, recipe_from_settings
    from edgetune.tasks.winograd import WINOGRAD_MAX_SHARE, winograd_wins

    model, _prepared, tasks, target = resnet
    winograd = {_shape_of(t): t for t in tasks[True] if "winograd" in t.task_name}
    direct = {_shape_of(t): t for t in tasks[False] if "conv2d_NCHWc" in t.task_name}
    shapes = sorted(set(winograd) & set(direct), key=lambda key: -int(key.split("x")[1]))  # the most channels first
    assert len(shapes) >= 3, (sorted(winograd), sorted(direct))
    faster, close, lone = shapes[:3]
    workloads = [
        _library_workload(winograd[faster].dispatched[0], 100.0), _library_workload(direct[faster].dispatched[0], 200.0),
        # 0.95 of the direct form's: within the margin, stays direct
        _library_workload(winograd[close].dispatched[0], 190.0), _library_workload(direct[close].dispatched[0], 200.0),
        _library_workload(winograd[lone].dispatched[0], 10.0),  # no direct record to compare with: stays direct
        # another CPU model's records do not decide where this one's measured both forms
        _library_workload(winograd[close].dispatched[0], 50.0, mcpu="znver4"),
    ]
    assert WINOGRAD_MAX_SHARE < 0.95
    assert winograd_wins(workloads, "skylake-avx512") == {faster: (100.0, 200.0)}
    assert set(winograd_wins(workloads, "")) == {faster, close}  # across the family: the Zen 4 record counts

    library = write_library(tmp_path / "lib.schedules.gz", {
        "family": {"name": family_of(target).name}, "tvm_version": tvm.__version__, "top_k": 3}, workloads)
    tuning = SimpleNamespace(conv_layout="NCHWc", graph_optimization="full", prepack_weights=False, fast_math=True,
                             integer=True, block_grouped=True, winograd="auto", schedules=str(library))
    from edgetune.schedules.use import recipe_library

    recipe = recipe_from_settings(tuning, target, library=recipe_library(tuning, target))
    assert recipe.switch("winograd") == (faster,)
    assert "winograd 1 shape(s) from the library" in recipe.describe()
    assert Recipe.from_json(recipe.to_json()).build_key() == recipe.build_key()  # the shapes survive the history
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(winograd_module, "MIN_TILES", 1)
        built = prepare_model(model, recipe, target)
        off = prepare_model(model, recipe_from_settings(tuning, target, library=None), target)
    chosen = ms.relax_integration.extract_tasks(prepare_for_tuning(built.mod, target), target)
    assert {_shape_of(t) for t in chosen if "winograd" in t.task_name} == {faster}
    assert sum(t.weight for t in chosen if "winograd" in t.task_name) == sum(
        t.weight for t in tasks[True] if "winograd" in t.task_name and _shape_of(t) == faster)
    entry = next(p for p in built.graph.passes if p.name == "winograd")
    assert entry.status == "applied" and entry.detail.startswith(
        f"{sum(t.weight for t in chosen if 'winograd' in t.task_name)} 3x3 convolution(s) in the Winograd form"), entry
    # no library: auto is off, and the report has no Winograd entry
    assert off.recipe.switch("winograd") is False and not any(p.name == "winograd" for p in off.graph.passes)


def test_the_winograd_setting_reads_old_profiles_booleans_and_on_off(tmp_path) -> None:
    from types import SimpleNamespace

    from edgetune.errors import ProfileError
    from edgetune.profile import load_profile
    from edgetune.tasks.recipe import resolve_winograd

    base = (tmp_path / "base.toml")
    for value, expected in (("true", "on"), ("false", "off"), ('"auto"', "auto"), ('"on"', "on")):
        base.write_text(f'name = "w"\n[target]\nkind = "llvm"\n[tuning]\nwinograd = {value}\n')
        assert load_profile(str(base)).tuning.winograd == expected
    base.write_text('name = "w"\n[target]\nkind = "llvm"\n[tuning]\nwinograd = "yes"\n')
    with pytest.raises(ProfileError, match="winograd"):
        load_profile(str(base))
    assert load_profile("host").tuning.winograd == "auto"
    library = SimpleNamespace(workloads=[])
    assert resolve_winograd("on", "NCHW16c", TARGET, None) is True
    assert resolve_winograd("off", "NCHW16c", TARGET, library) is False
    assert resolve_winograd("auto", "NCHW16c", TARGET, library) is False  # a library without Winograd schedules
    assert resolve_winograd(True, "NCHW", TARGET, None) is True  # an old recipe's boolean, as recorded
