"""Graph preparation: batch norms folded as ONNX Runtime would, the kernel inventory, and NHWC convolutions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tvm
import tvm.s_tir.meta_schedule as ms
from tvm import relax

from edgetune.tasks import load_model, prepare_for_tuning
from edgetune.tasks.graph import prepare_graph

TARGET = tvm.target.Target({"kind": "llvm", "num-cores": 2})


def run(mod, x: np.ndarray) -> np.ndarray:
    with tvm.transform.PassContext(opt_level=3):
        vm = relax.VirtualMachine(relax.build(mod, target=TARGET), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def test_nhwc_convolutions_compute_the_same() -> None:
    model = load_model("demo:tiny-cnn")
    nhwc = prepare_graph(model, "NHWC")
    assert prepare_graph(model, "as-is", "none").mod is model.mod
    x = model.random_inputs(0)["input"]
    np.testing.assert_allclose(run(nhwc.mod, x), run(model.mod, x), rtol=1e-4, atol=1e-5)
    convs = [t for t in ms.relax_integration.extract_tasks(prepare_for_tuning(nhwc.mod, TARGET), TARGET) if "conv2d" in t.task_name]
    assert convs and all("conv2d_nhwc" in t.dispatched[0].script() for t in convs)


@pytest.mark.parametrize("mcpu, block", [("", 4), ("skylake-avx512", 16), ("haswell", 8)])
def test_blocked_convolutions_compute_the_same(mcpu: str, block: int) -> None:
    """conv_layout NCHWc: blocked by the target's float32 lanes, lowered to conv2d_NCHWc, same outputs."""
    from edgetune.tasks.graph import vector_lanes

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2, **({"mcpu": mcpu} if mcpu else {})})
    assert vector_lanes(target) == block
    model = load_model("demo:resnet18@32")
    blocked = prepare_graph(model, "NCHWc", "full", target)
    (entry,) = [p for p in blocked.graph.passes if p.name == "layout-NCHWc"]
    assert entry.status == "applied" and f"in NCHW{block}c" in entry.detail, entry
    tasks = ms.relax_integration.extract_tasks(prepare_for_tuning(blocked.mod, TARGET), TARGET)
    # every conv, the 3-channel stem included (NCHW3c in, blocked out), and the max pool after it
    assert sum("conv2d_NCHWc" in t.task_name for t in tasks) >= 9
    assert "20 of 20 convolutions" in entry.detail and "max_pool2d" in [t.task_name for t in tasks]
    def data_shape(task) -> list[int]:
        func = task.dispatched[0]["main"]
        return [int(d) for d in func.params[0].ty.shape]

    stems = [t.task_name for t in tasks if "conv2d_NCHWc" in t.task_name and data_shape(t) == [1, 1, 32, 32, 3]]
    assert len(stems) == 1, [t.task_name for t in tasks]
    x = model.random_inputs(0)["input"]
    reference = run(prepare_graph(model, "as-is", "full").mod, x)
    np.testing.assert_allclose(run(blocked.mod, x), reference, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("spec, transforms", [
    ("demo:mobilenetv1@64", 2), ("demo:mobilenetv2@64", 2), ("demo:squeezenet1.1@64", 2),
])
def test_cnns_block_their_depthwise_convolutions_clips_and_concats(spec: str, transforms: int | None) -> None:
    """NCHWc on a MobileNet: depthwise convs blocked too, ReLU6 (ONNX Clip) in their epilogues, same outputs.

    MobileNetV1 keeps its 27 BatchNormalization and Clip nodes as Keras exports them: blocked, only the
    3-channel input (for the stem, blocked too) and the pooled end change layout. MobileNetV2's 24-channel layers do not divide
    into blocks of 16: they go in blocks of 8, so no transform surrounds them either.
    SqueezeNet's Fire modules concatenate two blocked convs' outputs: the concat stays blocked.
    """
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2, "mcpu": "skylake-avx512"})
    model = load_model(spec)
    blocked = prepare_graph(model, "NCHWc", "full", target)
    (entry,) = [p for p in blocked.graph.passes if p.name == "layout-NCHWc"]
    names = [t.task_name for t in ms.relax_integration.extract_tasks(prepare_for_tuning(blocked.mod, TARGET), TARGET)]
    if "mobilenet" in spec:
        assert entry.status == "applied" and "depthwise" in entry.detail and "clip bounds as ops" in entry.detail, entry
        if spec == "demo:mobilenetv1@64":  # all, the 3-channel stem and every depthwise conv among them
            assert "27 of 27 convolutions in NCHW16c (13 of 13 depthwise)" in entry.detail, entry
        else:  # the two 1x1 convolutions into and the two out of the 24-channel layers, with a block of 8 on that side
            assert "52 of 52 convolutions in NCHW16c (17 of 17 depthwise), 4 with 8-channel blocks" in entry.detail, entry
        depthwise = [n for n in names if "depthwise_conv2d_NCHWc" in n]
        assert len(depthwise) >= 6 and all("maximum" in n and "minimum" in n for n in depthwise), names
    else:
        # all, the classifier's 1000 channels padded to 1008, 63 blocks of 16 (not 125 blocks of 8)
        assert entry.status == "applied" and "26 of 26 convolutions in NCHW16c, 1 with output channels padded" in entry.detail, entry
        assert "8-channel" not in entry.detail, entry
        assert not [n for n in names if "concat" in n and "layout_transform" in n], names
    # no clip left as a pass of its own over memory
    assert not [n for n in names if "maximum" in n and "conv2d" not in n], names
    if transforms is not None:
        assert sum("layout_transform" in n for n in names) == transforms, names
    x = model.random_inputs(0)["input"]
    reference = run(prepare_graph(model, "as-is", "full").mod, x)
    np.testing.assert_allclose(run(blocked.mod, x), reference, rtol=1e-4, atol=1e-4)


def test_a_fixed_block_blocks_channels_the_vector_lanes_do_not_divide() -> None:
    """NCHW8c on an AVX-512 target: MobileNetV2's 24-channel layers are blocked too, so no transform surrounds them."""
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2, "mcpu": "skylake-avx512"})
    model = load_model("demo:mobilenetv2@64")
    blocked = prepare_graph(model, "NCHW8c", "full", target)
    (entry,) = [p for p in blocked.graph.passes if p.name == "layout-NCHW8c"]
    assert entry.status == "applied" and "52 of 52 convolutions in NCHW8c (17 of 17 depthwise)" in entry.detail, entry
    names = [t.task_name for t in ms.relax_integration.extract_tasks(prepare_for_tuning(blocked.mod, TARGET), TARGET)]
    assert sum("layout_transform" in n for n in names) == 2, names  # the 3-channel input and the pooled end
    x = model.random_inputs(0)["input"]
    reference = run(prepare_graph(model, "as-is", "full").mod, x)
    np.testing.assert_allclose(run(blocked.mod, x), reference, rtol=1e-4, atol=1e-4)


def test_channels_blocks_of_16_do_not_divide_go_in_blocks_of_8_on_avx512() -> None:
    """MobileNetV3-small's 24, 40, 72, 88 and 120 channels on AVX-512: blocks of 8 on the side that needs them.

    A convolution from 24 channels to 96 reads NCHW8c and writes NCHW16c (one ``conv2d_NCHWc``, no transform
    to NCHW between); depthwise convolutions, the squeeze-excite gates and the residual adds of such tensors
    stay in blocks of 8. Outputs are the imported graph's.
    """
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2, "mcpu": "skylake-avx512"})
    model = load_model("demo:mobilenetv3-small@32")
    blocked = prepare_graph(model, "NCHWc", "full", target)
    (entry,) = [p for p in blocked.graph.passes if p.name == "layout-NCHWc"]
    assert "52 of 52 convolutions in NCHW16c (11 of 11 depthwise), 25 with 8-channel blocks" in entry.detail, entry
    lanes = {}
    for task in ms.relax_integration.extract_tasks(prepare_for_tuning(blocked.mod, TARGET), TARGET):
        params = task.dispatched[0]["main"].params
        lanes[task.task_name] = (int(params[0].ty.shape[-1]), int(params[-1].ty.shape[-1]))
    convs = {name: io for name, io in lanes.items() if "conv2d_NCHWc" in name and "depthwise" not in name}
    assert {(8, 16), (16, 8), (8, 8), (16, 16)} <= set(convs.values()), convs
    assert any(io == (8, 8) for name, io in lanes.items() if "depthwise_conv2d_NCHWc" in name), lanes
    # the squeeze-excite pools read the blocked tensors: only the input and the classifier's end change layout
    assert sum("layout_transform" in name for name in lanes) == 2, sorted(lanes)
    x = model.random_inputs(0)["input"]
    reference = run(prepare_graph(model, "as-is", "full").mod, x)
    np.testing.assert_allclose(run(blocked.mod, x), reference, rtol=1e-4, atol=1e-4)


def test_silu_and_squeeze_excite_stay_blocked_in_efficientnet() -> None:
    """EfficientNet-B0: SiLU (sigmoid, made fast-math after blocking) fuses into its blocked conv's kernel and the
    squeeze-excite pools read blocked tensors, so the only layout transforms left are of the input and of
    (N, C, 1, 1) squeeze-excite vectors: none of a whole feature map. Before, every SiLU sat in NCHW between two
    transforms of the full tensor (131 kernels at 128x128, 76 now). Outputs are the imported graph's."""
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2, "mcpu": "skylake-avx512"})
    model = load_model("demo:efficientnet-b0@32")
    blocked = prepare_graph(model, "NCHWc", "full", target)
    passes = [(p.name, p.status) for p in blocked.graph.passes]
    assert passes[-2:] == [("layout-NCHWc", "applied"), ("fast-math", "applied")], passes
    tasks = ms.relax_integration.extract_tasks(prepare_for_tuning(blocked.mod, TARGET), TARGET)
    names = [t.task_name for t in tasks]
    assert not [n for n in names if "sigmoid" in n and "conv2d" not in n], names
    assert sum("conv2d_NCHWc" in n and "sigmoid" in n and "multiply" in n for n in names) >= 20, names
    for task in tasks:
        shapes = [[int(d) for d in p.ty.shape] for p in task.dispatched[0]["main"].params if hasattr(p.ty, "shape")]
        if task.task_name.startswith("mean"):
            assert len(shapes[0]) == 5, (task.task_name, shapes)  # (N, C/b, H, W, b) in, not NCHW
        if "layout_transform" in task.task_name and shapes[0][1] != 3:  # other than the RGB input
            assert all(shape[2:4] == [1, 1] for shape in shapes), (task.task_name, shapes)
    x = model.random_inputs(0)["input"]
    reference = run(prepare_graph(model, "as-is", "full").mod, x)
    np.testing.assert_allclose(run(blocked.mod, x), reference, rtol=1e-4, atol=1e-4)


def test_a_blocked_graph_that_fails_to_lower_is_prepared_without_the_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """The blocked layout is lowered after fast-math, outside its pass: a failure there skips the layout, as a
    failing pass is skipped, instead of failing the tune."""
    import edgetune.tasks.blocking as blocking

    def fail(mod, target, winograd=False):
        raise tvm.error.InternalError("no lowering for this\nsecond line")

    monkeypatch.setattr(blocking, "lower_blocked", fail)
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2, "mcpu": "skylake-avx512"})
    model = load_model("demo:tiny-cnn")
    prepared = prepare_graph(model, "NCHWc", "full", target)
    (entry,) = [p for p in prepared.graph.passes if p.name == "layout-NCHWc"]
    assert entry.status == "skipped" and "no lowering for this" in entry.detail and "second" not in entry.detail
    assert prepared.graph.conv_layout == "NCHWc"
    names = [t.task_name for t in ms.relax_integration.extract_tasks(prepare_for_tuning(prepared.mod, TARGET), TARGET)]
    assert names and not [n for n in names if "NCHWc" in n or "layout_transform" in n], names


def test_blocks_of_8_stay_blocks_of_8_without_a_half_block() -> None:
    """AVX2 (blocks of 8): no half blocks of 4; 116-channel ShuffleNet layers stay NCHW as they were."""
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2, "mcpu": "haswell"})
    blocked = prepare_graph(load_model("demo:mobilenetv3-small@32"), "NCHWc", "full", target)
    (entry,) = [p for p in blocked.graph.passes if p.name == "layout-NCHWc"]
    assert "52 of 52 convolutions in NCHW8c" in entry.detail and "channel blocks" not in entry.detail, entry


def test_only_topi_maximum_and_minimum_with_a_scalar_become_clip_ops() -> None:
    """The Clip recognizer compares whole PrimFuncs: an add, or a maximum of two tensors, stays a call_tir."""
    from tvm import topi

    from edgetune.tasks.blocking import clips_as_ops

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 16, 4, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            lo = bb.emit_te(topi.maximum, x, relax.const(0.0, "float32"))
            hi = bb.emit_te(topi.minimum, lo, relax.const(6.0, "float32"))
            added = bb.emit_te(topi.add, hi, relax.const(1.0, "float32"))
            out = bb.emit_output(bb.emit_te(topi.maximum, added, x))
        bb.emit_func_output(out)
    mod, rewritten = clips_as_ops(bb.get())
    assert rewritten == 2
    text = mod["main"].script()
    assert "R.maximum(x, R.const(0.0" in text and "R.minimum(" in text and text.count("R.call_tir") == 2, text
    values = np.random.default_rng(0).normal(0, 4, (1, 16, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(run(mod, values), run(bb.get(), values))


@pytest.mark.parametrize("target, layout", [
    ({"kind": "llvm", "mcpu": "skylake-avx512"}, "NCHWc"),
    ({"kind": "llvm", "mcpu": "haswell"}, "NCHWc"),
    ({"kind": "llvm", "mcpu": "znver3"}, "NCHWc"),  # AVX2 by its features, whatever the name
    ({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"}, "as-is"),
    (None, "as-is"),
])
def test_auto_layout_is_the_one_measured_for_the_family(target: dict | None, layout: str) -> None:
    """conv_layout "auto" (the default) resolves by the target's CPU family; unmeasured families keep NCHW."""
    from edgetune.profile.schema import TuningSettings
    from edgetune.tasks.graph import resolve_conv_layout

    tvm_target = tvm.target.Target({**target, "num-cores": 2}) if target else None
    assert resolve_conv_layout("auto", tvm_target) == layout
    assert resolve_conv_layout("NHWC", tvm_target) == "NHWC"  # an explicit layout is kept
    assert TuningSettings().conv_layout == "auto"
    if tvm_target is not None and "aarch64" not in str(target):
        prepared = prepare_graph(load_model("demo:tiny-cnn"), "auto", "full", tvm_target)
        assert prepared.graph.conv_layout == layout
        assert any(p.name == "layout-NCHWc" for p in prepared.graph.passes) == (layout == "NCHWc")


def test_unknown_layout_is_rejected() -> None:
    with pytest.raises(ValueError, match="conv_layout must be one of auto, as-is, NHWC, NCHWc, NCHW4c, NCHW8c, NCHW16c, got 'NCHW32c' instead"):
        prepare_graph(load_model("demo:tiny-cnn"), "NCHW32c")
    with pytest.raises(ValueError, match="pass the target"):
        prepare_graph(load_model("demo:tiny-cnn"), "NCHWc")


@pytest.mark.integration
@pytest.mark.parametrize("layout", ["NHWC", "NCHWc"])
def test_a_converted_layout_run_delivers_a_matching_model(tmp_path: Path, loopback_board, layout: str) -> None:
    from edgetune.board.base import TrackerBoard
    from edgetune.profile import load_profile
    from edgetune.tuning import TuneOptions, run_tune

    profile = load_profile("host").with_overrides(rpc={"key": loopback_board.key}, tuning={"conv_layout": layout})
    summary = run_tune(TuneOptions(profile=profile, model="demo:tiny-cnn", out_dir=tmp_path, trials=8, board=TrackerBoard(loopback_board)))
    assert summary.end_to_end.outputs_match
    assert any("conv2d" in t.name for t in summary.tasks) and len(summary.tasks) >= 5  # layout transforms are tasks too
    if layout == "NCHWc":  # the blocked convolution is what was tuned and delivered
        assert any("conv2d_NCHWc" in t.name for t in summary.tasks), [t.name for t in summary.tasks]


# --------------------------------------------------------------------------- ONNX Runtime-class preparation (issue 26)


def _bn(g_nodes: list, inits: list, rng: np.random.Generator, x: str, channels: int, name: str) -> str:
    """An inference BatchNormalization with plausible random statistics."""
    from onnx import helper, numpy_helper

    params = {
        "g": 1.0 + rng.normal(0, 0.2, channels), "b": rng.normal(0, 0.1, channels),
        "m": rng.normal(0, 0.2, channels), "v": rng.uniform(0.3, 2.0, channels),
    }
    names = []
    for key, value in params.items():
        names.append(f"{name}_{key}")
        inits.append(numpy_helper.from_array(value.astype(np.float32), names[-1]))
    g_nodes.append(helper.make_node("BatchNormalization", [x, *names], [name], epsilon=1e-3))
    return name


def batch_norm_model() -> bytes:
    """An ONNX model with every place an exporter leaves a BatchNormalization.

    A conv with bias then BN then Clip (TensorFlow's ReLU6); a depthwise conv
    without bias, BN, Relu; a conv + BN added to a residual; a BN after a
    Concat (no layer to fold into); a Gemm followed by a BN over its features.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    nodes: list = []
    inits: list = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=np.float32), name))
        return name

    def conv(x: str, cin: int, cout: int, name: str, *, bias: bool, group: int = 1) -> str:
        inputs = [x, const(f"{name}_w", rng.normal(0, np.sqrt(2 / (cin // group * 9)), (cout, cin // group, 3, 3)))]
        if bias:
            inputs.append(const(f"{name}_bias", rng.normal(0, 0.1, cout)))
        nodes.append(helper.make_node("Conv", inputs, [name], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=group))
        return name

    x = _bn(nodes, inits, rng, conv("input", 3, 8, "c1", bias=True), 8, "bn1")
    nodes.append(helper.make_node("Clip", [x, const("lo", 0.0), const("hi", 6.0)], ["clip1"]))
    y = _bn(nodes, inits, rng, conv("clip1", 8, 8, "c2", bias=False, group=8), 8, "bn2")
    nodes.append(helper.make_node("Relu", [y], ["relu2"]))
    z = _bn(nodes, inits, rng, conv("relu2", 8, 8, "c3", bias=False), 8, "bn3")
    nodes.append(helper.make_node("Add", [z, "clip1"], ["res"]))
    nodes.append(helper.make_node("Concat", ["res", "relu2"], ["cat"], axis=1))
    w = _bn(nodes, inits, rng, "cat", 16, "bn4")
    nodes.append(helper.make_node("Relu", [w], ["relu4"]))
    nodes.append(helper.make_node("GlobalAveragePool", ["relu4"], ["pool"]))
    nodes.append(helper.make_node("Flatten", ["pool"], ["flat"], axis=1))
    fc_w, fc_b = const("fc_w", rng.normal(0, 0.3, (10, 16))), const("fc_b", rng.normal(0, 0.1, 10))
    nodes.append(helper.make_node("Gemm", ["flat", fc_w, fc_b], ["fc"], transB=1))
    out = _bn(nodes, inits, rng, "fc", 10, "bn5")
    graph = helper.make_graph(
        nodes, "bn_model", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 10])], inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


def tasks_and_inventory(model) -> tuple[list, object]:
    from edgetune.tasks.inventory import kernel_inventory

    prepared = prepare_for_tuning(model.mod, TARGET)
    tasks = ms.relax_integration.extract_tasks(prepared, TARGET)
    return tasks, kernel_inventory(prepared, tasks)


def relative_error(ours: np.ndarray, theirs: np.ndarray) -> float:
    return float(np.abs(ours - theirs).max() / np.abs(theirs).max())


def test_onnx_batch_norms_fold_away_and_match_onnx_runtime(tmp_path: Path) -> None:
    import onnxruntime as ort

    path = tmp_path / "bn.onnx"
    path.write_bytes(batch_norm_model())
    imported = load_model(str(path))
    model = prepare_graph(imported)
    passes = {p.name: p for p in model.graph.passes}
    assert passes["fold-batch-norm"].status == "applied" and passes["fold-batch-norm"].detail == "4 folded"
    assert passes["decompose-batch-norm"].detail == "1 into elementwise arithmetic"  # the one after the Concat
    assert "batch_norm" not in model.mod.script()
    tasks, inventory = tasks_and_inventory(model)
    assert not [t.task_name for t in tasks if "batch_norm" in t.task_name]
    assert inventory.foldable == [] and inventory.compute_bound == 4  # three convs and the dense layer
    before_tasks, before = tasks_and_inventory(prepare_graph(imported, optimization="none"))
    # as imported: 4 kernels hold the 5 batch norms (the residual one and the one after the Concat share one)
    assert len([t for t in before_tasks if "batch_norm" in t.task_name]) == 4 and len(before.foldable) == 4
    assert len(tasks) < len(before_tasks)
    feeds = model.random_inputs(seed=3)
    theirs = ort.InferenceSession(path.read_bytes(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert relative_error(model.reference_outputs(feeds)[0], theirs) < 1e-5


@pytest.mark.parametrize("spec", ["demo:tiny-cnn", "demo:resnet18@32", "demo:mobilenetv1@32", "demo:mobilenetv2@32", "demo:squeezenet@32"])
def test_demo_cnns_leave_no_batch_norm_or_unfused_elementwise_kernel(spec: str) -> None:
    _tasks, inventory = tasks_and_inventory(prepare_graph(load_model(spec)))
    assert inventory.foldable == [], inventory.describe()
    assert not [k.name for k in inventory.kernels if "batch_norm" in k.name]


def test_the_imported_mobilenetv1_shows_its_unfolded_kernels() -> None:
    """The check above can fail: the graph as imported has a batch norm + clip pass after every convolution."""
    _tasks, inventory = tasks_and_inventory(prepare_graph(load_model("demo:mobilenetv1@32"), optimization="none"))
    assert len(inventory.foldable) == 10 and all("batch_norm" in name for name in inventory.foldable)
    assert "left unfused: fused_batch_norm" in inventory.describe()


def test_inventory_counts_the_kernels_of_a_small_model() -> None:
    _tasks, inventory = tasks_and_inventory(prepare_graph(load_model("demo:tiny-cnn")))
    classes = sorted((k.klass, k.kind) for k in inventory.kernels)
    assert classes == [
        ("compute", "contraction"), ("compute", "contraction"), ("compute", "contraction"),
        ("memory", "data-movement"), ("memory", "reduction"),
    ]
    assert (inventory.compute_bound, inventory.memory_bound) == (3, 2)
    assert inventory.describe() == "kernels: 3 compute-bound, 2 memory-bound (1 data-movement, 1 reduction)"
    transformer = tasks_and_inventory(prepare_graph(load_model("demo:transformer@8")))[1]
    # four dense layers and the two attention matmuls; layer norm, softmax and two head reshapes move memory
    assert (transformer.compute_bound, transformer.memory_bound) == (6, 4)
    assert {k.kind for k in transformer.kernels if k.klass == "memory"} == {"reduction", "data-movement"}


def test_attention_reads_k_transposed_in_its_matmul_and_matches_onnx_runtime() -> None:
    import onnxruntime as ort

    imported = load_model("demo:transformer@8")
    model = prepare_graph(imported)
    assert [(p.name, p.status, p.detail) for p in model.graph.passes if p.name == "fuse-transpose-matmul"] == [
        ("fuse-transpose-matmul", "applied", "1 fused")
    ]
    before = tasks_and_inventory(prepare_graph(imported, optimization="none"))[1]
    after = tasks_and_inventory(model)[1]
    assert after.memory_bound == before.memory_bound - 1  # the transpose of k is gone into q @ k^T
    feeds = model.random_inputs(seed=1)
    theirs = ort.InferenceSession(imported.data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert relative_error(model.reference_outputs(feeds)[0], theirs) < 1e-5


def _concat_chain_module() -> tvm.IRModule:
    """Keras's dense block in miniature: ``x = concat([x, f(x)])`` twice, each ``x`` also read by a ReLU."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 3, 3), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(relax.op.nn.relu(x))
            first = bb.emit(relax.op.concat([x, a], axis=1))
            b = bb.emit(relax.op.nn.relu(first))
            second = bb.emit(relax.op.concat([first, b], axis=-3))  # the same axis, written from the end
            c = bb.emit(relax.op.nn.relu(second))
            other = bb.emit(relax.op.concat([second, c], axis=2))  # another axis: left nested
            out = bb.emit_output(relax.op.add(relax.op.sum(other), relax.op.sum(first)))
        bb.emit_func_output(out)
    return bb.get()


def test_a_concat_of_a_concat_along_its_axis_is_one_concat_and_computes_the_same() -> None:
    from edgetune.tasks.graph import flatten_concats

    mod = _concat_chain_module()
    flat, detail = flatten_concats(mod)
    assert detail == "1 concats of a concat flattened"
    concats = []
    relax.analysis.post_order_visit(
        flat["main"], lambda e: concats.append(e) if isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.concat" else None
    )
    widths = sorted(len(c.args[0].fields) for c in concats)
    # concat([x, a]) stays (the final sum reads it), the second reads x, a and b, the other axis's stays two
    assert widths == [2, 2, 3]
    x = np.random.default_rng(0).standard_normal((1, 4, 3, 3)).astype("float32")
    np.testing.assert_allclose(run(flat, x), run(mod, x), rtol=1e-6)
    assert flatten_concats(flat) == (flat, "")  # nothing left to flatten: the graph as it was


def test_unknown_graph_optimization_is_rejected() -> None:
    with pytest.raises(ValueError, match="graph_optimization must be one of full, none, got 'max' instead"):
        prepare_graph(load_model("demo:tiny-cnn"), optimization="max")


def test_a_pass_that_fails_is_skipped_and_said(monkeypatch: pytest.MonkeyPatch) -> None:
    """A TVM pass raising on a graph it cannot handle leaves the graph as it was before that pass.

    Stands in for a real failure (TVM's passes raise on operators they do not
    know): the fold is made to raise; the decomposition still removes every
    batch norm kernel, and the report names the skipped pass and the reason.
    """
    from edgetune.tasks import graph

    def broken(mod):
        raise RuntimeError("Check failed: op relax.nn.batch_norm has no FInferLayout\nmore lines")

    monkeypatch.setattr(graph, "fold_batch_norms", broken)
    model = prepare_graph(load_model("demo:mobilenetv1@32"))
    passes = {p.name: p for p in model.graph.passes}
    assert passes["fold-batch-norm"].status == "skipped"
    assert passes["fold-batch-norm"].detail == "RuntimeError: Check failed: op relax.nn.batch_norm has no FInferLayout"
    assert passes["decompose-batch-norm"].status == "applied"
    assert "fold-batch-norm skipped: RuntimeError: Check failed" in model.graph.describe()
    _tasks, inventory = tasks_and_inventory(model)
    assert inventory.foldable == []
    x = model.random_inputs(0)["input"]
    imported = load_model("demo:mobilenetv1@32")
    np.testing.assert_allclose(run(model.mod, x), run(imported.mod, x), rtol=1e-4, atol=1e-5)


@pytest.mark.integration
def test_a_skipped_pass_still_tunes_and_the_summary_says_why(tmp_path: Path, loopback_board, monkeypatch) -> None:
    from edgetune.board.base import TrackerBoard
    from edgetune.profile import load_profile
    from edgetune.tasks import graph
    from edgetune.tuning import TuneOptions, run_tune

    def broken(mod):
        raise RuntimeError("InternalError: cannot fold")

    monkeypatch.setattr(graph, "fold_batch_norms", broken)
    monkeypatch.setattr(graph, "_decompose_batch_norms", broken)
    profile = load_profile("host").with_overrides(rpc={"key": loopback_board.key})
    summary = run_tune(TuneOptions(profile=profile, model="demo:mobilenetv1@32", out_dir=tmp_path, trials=4, board=TrackerBoard(loopback_board)))
    assert summary.end_to_end.outputs_match
    skipped = {p["name"]: p["detail"] for p in summary.graph["passes"] if p["status"] == "skipped"}
    assert skipped == {"fold-batch-norm": "RuntimeError: InternalError: cannot fold",
                       "decompose-batch-norm": "RuntimeError: InternalError: cannot fold"}
    assert len(summary.graph["kernels"]["foldable"]) == 10  # the graph as imported, and the inventory says so


TRANSCENDENTAL = ("T.exp(", "T.erf(", "T.tanh(", "T.sigmoid(", "T.pow(")
#: what the activations model below calls
ACTIVATIONS = ["T.exp(", "T.erf(", "T.tanh(", "T.sigmoid("]


def transcendental_calls(mod: tvm.IRModule) -> list[str]:
    """The libm calls the legalized kernels would make (LLVM has no vector form of them: one call per element)."""
    legalized = prepare_for_tuning(mod, TARGET)
    text = "\n".join(f.script() for _gv, f in legalized.functions_items() if not isinstance(f, relax.Function))
    return [call for call in TRANSCENDENTAL if call in text]


def activations_model(dtype: int) -> bytes:
    """x @ w, then GELU (as exporters spell it, with Erf), Softmax, Sigmoid, Tanh and Exp."""
    import onnx
    from onnx import helper, numpy_helper

    np_type = helper.tensor_dtype_to_np_dtype(dtype)
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.5, (16, 24)).astype(np_type), "w"),
        numpy_helper.from_array(np.array(2**0.5, np_type), "sqrt2"),
        numpy_helper.from_array(np.array(1.0, np_type), "one"),
        numpy_helper.from_array(np.array(0.5, np_type), "half"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Div", ["h", "sqrt2"], ["h_s"]),
        helper.make_node("Erf", ["h_s"], ["h_e"]),
        helper.make_node("Add", ["h_e", "one"], ["h_p"]),
        helper.make_node("Mul", ["h", "h_p"], ["h_m"]),
        helper.make_node("Mul", ["h_m", "half"], ["gelu"]),
        helper.make_node("Softmax", ["gelu"], ["soft"], axis=-1),
        helper.make_node("Sigmoid", ["gelu"], ["sig"]),
        helper.make_node("Tanh", ["sig"], ["th"]),
        helper.make_node("Exp", ["th"], ["ex"]),
        helper.make_node("Add", ["soft", "ex"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "activations", [helper.make_tensor_value_info("x", dtype, [1, 8, 16])],
        [helper.make_tensor_value_info("y", dtype, [1, 8, 24])], inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


def test_fast_math_leaves_no_libm_call_and_matches_onnx_runtime(tmp_path: Path) -> None:
    """GELU, softmax, sigmoid, tanh and exp become TVM's polynomials: no scalar libm call per element is left."""
    import onnxruntime as ort
    from onnx import TensorProto

    path = tmp_path / "activations.onnx"
    path.write_bytes(activations_model(TensorProto.FLOAT))
    imported = load_model(str(path))
    assert transcendental_calls(imported.mod) == ACTIVATIONS
    model = prepare_graph(imported, "as-is", "full")
    (entry,) = [p for p in model.graph.passes if p.name == "fast-math"]
    assert (entry.status, entry.detail) == ("applied", "1 erf, 1 exp, 1 sigmoid, 1 softmax, 1 tanh")
    assert transcendental_calls(model.mod) == []
    feeds = model.random_inputs(seed=1)
    theirs = ort.InferenceSession(imported.data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert relative_error(model.reference_outputs(feeds)[0], theirs) < 1e-5
    assert prepare_graph(imported, "as-is", "none").mod is imported.mod  # graph_optimization = "none": exact libm


def test_fast_math_keeps_float64_exact(tmp_path: Path) -> None:
    """TVM's polynomials are float32 ones: a float64 model keeps libm's functions."""
    from onnx import TensorProto

    path = tmp_path / "activations64.onnx"
    path.write_bytes(activations_model(TensorProto.DOUBLE))
    model = prepare_graph(load_model(str(path)), "as-is", "full")
    (entry,) = [p for p in model.graph.passes if p.name == "fast-math"]
    assert entry.status == "unchanged"
    assert transcendental_calls(model.mod) == ACTIVATIONS


@pytest.mark.parametrize("op", ["gelu", "gelu_tanh", "silu", "sigmoid"])
def test_fast_math_covers_what_relax_fast_math_does_not(op: str) -> None:
    """``.pt2`` models bring nn.gelu, nn.gelu_tanh and nn.silu as ops of their own; same values, no libm call."""
    from edgetune.tasks.graph import apply_fast_math

    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 64), "float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            function = relax.op.sigmoid if op == "sigmoid" else getattr(relax.op.nn, op)
            out = builder.emit_output(function(x))
        builder.emit_func_output(out)
    mod = builder.get()
    assert transcendental_calls(mod)
    fast, detail = apply_fast_math(mod)
    assert detail == f"1 {op}" and transcendental_calls(fast) == []
    values = np.random.default_rng(0).normal(0, 3, (4, 64)).astype("float32")
    np.testing.assert_allclose(run(fast, values), run(mod, values), rtol=1e-5, atol=1e-6)


def _history_of(path: Path, mod: tvm.IRModule, target) -> str:
    """A history holding one (untuned) record of every kernel of ``mod``: what a tune of that graph leaves."""
    from edgetune.history import open_history

    history = open_history(str(path))
    try:
        for task in ms.relax_integration.extract_tasks(prepare_for_tuning(mod, target), target):
            sch = tvm.s_tir.Schedule(task.dispatched[0])
            sch.get_child_blocks(sch.get_sblock("root"))  # an instruction: a trace without one is no schedule
            args = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
            workload = history.commit_workload(task.dispatched[0])
            history.commit_tuning_record(ms.database.TuningRecord(sch.trace, workload, [1e-3], target, args))
    finally:
        history.close()
    return str(path)


def test_deploy_from_a_history_tuned_before_fast_math_builds_the_kernels_it_holds(tmp_path: Path, monkeypatch) -> None:
    """`deploy --model M --db H` of a history that records no recipe (an older edgetune's): H from before the
    fast-math pass holds the exact kernels' records, which the fast-math graph would not match (its GELU dense
    layer would be built untuned); H from after, the fast ones. The recipe is inferred once, said in a warning,
    and stored in H: the next deploy reads it and warns no more."""
    from onnx import TensorProto

    from edgetune.artifact import compile as artifact_compile
    from edgetune.deployment.recorded_recipe import tuned_kernels
    from edgetune.deployment.workflow import source_from_model
    from edgetune.profile import load_profile

    path = tmp_path / "activations.onnx"
    path.write_bytes(activations_model(TensorProto.FLOAT))
    target = load_profile("host").tvm_target()
    loaded = load_model(str(path))
    exact = prepare_graph(loaded, "auto", "full", target, fast_math=False)
    fast = prepare_graph(loaded, "auto", "full", target)
    compiled: list[str] = []
    real = artifact_compile.compile_model

    def spy(mod, target, history=None, prepack_weights=False):
        compiled.append(mod.script())
        return real(mod, target, history, prepack_weights=prepack_weights)

    monkeypatch.setattr(artifact_compile, "compile_model", spy)
    warned: dict[str, list[str]] = {}
    recipes = {}
    for name, graph in (("before", exact), ("after", fast)):
        db = _history_of(tmp_path / f"{name}.db", graph.mod, target)
        warned[name] = []
        recipes[name] = source_from_model(str(path), "host", db, tmp_path / name, log=warned[name].append).recipe
    before, after = compiled
    assert "fast_erf" not in before and "erf" in before
    assert "fast_erf" in after and "erf" not in after.replace("fast_erf", "")
    assert (recipes["before"]["switches"]["fast_math"], recipes["after"]["switches"]["fast_math"]) == (False, True)
    assert recipes["before"]["inferred"] and recipes["after"]["inferred"]
    (line,) = warned["before"]
    assert line.startswith("warning: ") and "holds no recipe" in line and "fast-math off" in line and "stored in the history" in line
    from edgetune.history import open_history

    history = open_history(str(tmp_path / "before.db"), read_only=True)
    try:
        assert tuned_kernels(exact.mod, target, history, False) > tuned_kernels(fast.mod, target, history, False)
        assert history.recipes.load(loaded.sha256, target).fast_math is False  # stored: inferred once
    finally:
        history.close()
    again: list[str] = []
    assert source_from_model(str(path), "host", str(tmp_path / "before.db"), tmp_path / "again", log=again.append).recipe == recipes["before"]
    assert again == [] and "fast_erf" not in compiled[-1]
