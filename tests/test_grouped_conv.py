"""Every convolution in a layout it can lower (issue 52, point 3).

A grouped convolution (groups > 1, not depthwise) stays NCHW on its own,
between layout transforms, and the rest of the graph stays blocked; one whose
groups are whole blocks runs in its blocked form (``group_conv2d_NCHWc``), whose
loop nest is an ordinary blocked convolution's, so the library's schedules seed it.
Before, one grouped convolution made the blocked layout fail to lower and the
whole graph stayed NCHW.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tvm
import tvm.s_tir.meta_schedule as ms
from tvm import relax

from edgetune.tasks import load_model, prepare_for_tuning
from edgetune.tasks.graph import prepare_graph
from edgetune.tasks.inventory import kernel_inventory

TARGET = tvm.target.Target({"kind": "llvm", "num-cores": 2})


#: (input channels, output channels, name, groups, kernel, stride) of :func:`grouped_model`'s default convolutions
LAYERS = ((3, 32, "stem", 1, 3, 2), (32, 32, "wide_groups", 2, 3, 1), (32, 32, "narrow_groups", 8, 3, 1),
          (32, 64, "pointwise", 1, 1, 1))


def grouped_model(layers: tuple[tuple[int, int, str, int, int, int], ...] = LAYERS, pools: dict[str, str] | None = None) -> bytes:
    """By default stem 3->32, a grouped 3x3 conv of 2 groups (16 channels each), one of 8 groups (4 each), a 1x1 conv,
    then a classifier; each convolution with a bias and a ReLU. ``pools``: after the named layers, a 3x3 stride-2
    pooling of that ONNX op (``MaxPool`` in ceil mode, as torchvision's SqueezeNet pools, or ``AveragePool``)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    nodes: list = []
    inits: list = []

    def conv(x: str, cin: int, cout: int, name: str, *, group: int = 1, kernel: int = 3, stride: int = 1) -> str:
        weight = rng.normal(0, np.sqrt(2 / (cin // group * kernel * kernel)), (cout, cin // group, kernel, kernel))
        inits.extend([numpy_helper.from_array(weight.astype(np.float32), f"{name}_w"),
                      numpy_helper.from_array(rng.normal(0, 0.1, cout).astype(np.float32), f"{name}_b")])
        pad = kernel // 2
        nodes.append(helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [f"{name}_conv"], kernel_shape=[kernel] * 2,
                                      pads=[pad] * 4, strides=[stride] * 2, group=group))
        nodes.append(helper.make_node("Relu", [f"{name}_conv"], [name]))
        return name

    x = "input"
    for cin, cout, name, group, kernel, stride in layers:
        x = conv(x, cin, cout, name, group=group, kernel=kernel, stride=stride)
        op = (pools or {}).get(name)
        if op is not None:
            ceil = {"ceil_mode": 1} if op == "MaxPool" else {}
            nodes.append(helper.make_node(op, [x], [f"{name}_pool"], kernel_shape=[3, 3], strides=[2, 2], **ceil))
            x = f"{name}_pool"
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool"]))
    nodes.append(helper.make_node("Flatten", ["pool"], ["flat"], axis=1))
    inits += [numpy_helper.from_array(rng.normal(0, 0.2, (10, layers[-1][1])).astype(np.float32), "fc_w"),
              numpy_helper.from_array(rng.normal(0, 0.1, 10).astype(np.float32), "fc_b")]
    nodes.append(helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1))
    graph = helper.make_graph(
        nodes, "grouped", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _prepared(tmp_path: Path, layers=LAYERS, layout: str = "NCHW8c", pools: dict[str, str] | None = None, **switches):
    path = tmp_path / "grouped.onnx"
    path.write_bytes(grouped_model(layers, pools))
    model = load_model(str(path))
    return path, model, prepare_graph(model, layout, "full", TARGET, **switches)


def _matches_onnx_runtime(path: Path, model, blocked) -> None:
    import onnxruntime as ort

    x = model.random_inputs(0)["input"]
    with tvm.transform.PassContext(opt_level=3):
        vm = relax.VirtualMachine(relax.build(blocked.mod, target=TARGET), tvm.cpu())
    ours = vm["main"](tvm.runtime.tensor(x)).numpy()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    theirs = session.run(None, {session.get_inputs()[0].name: x})[0]
    assert np.abs(ours - theirs).max() <= 1e-4 * np.abs(theirs).max()


def test_grouped_convolutions_stay_nchw_alone_the_rest_blocked_and_it_matches_onnx_runtime(tmp_path: Path) -> None:
    """With the blocked grouped form off (tuning.block_grouped = false), both grouped convolutions stay NCHW; with it
    on (the default), the one whose groups are not whole blocks still does."""
    path, model, blocked = _prepared(tmp_path, block_grouped=False)
    graph = blocked.graph
    (entry,) = [p for p in graph.passes if p.name == "layout-NCHW8c"]
    assert entry.status == "applied", graph.describe()  # before: skipped, the whole graph NCHW
    assert "2 of 4 convolutions in NCHW8c" in entry.detail, entry
    # both grouped convolutions stay NCHW on their own, and the summary says why
    wide, narrow = sorted(graph.unblocked, key=lambda conv: conv.groups)
    assert (wide.groups, wide.weight_shape, narrow.groups, narrow.weight_shape) == (2, (32, 16, 3, 3), 8, (32, 4, 3, 3))
    assert wide.reason.startswith("grouped: 16 input and 16 output channels per group, whole blocks, but the blocked form is off")
    assert narrow.reason.startswith("grouped: 4 input") and "do not divide" in narrow.reason
    assert "2 convolution(s) left in NCHW (grouped" in graph.describe()
    assert sorted(c["groups"] for c in graph.to_dict()["unblocked_convolutions"]) == [2, 8]

    prepared = prepare_for_tuning(blocked.mod, TARGET)
    tasks = ms.relax_integration.extract_tasks(prepared, TARGET)
    inventory = kernel_inventory(prepared, tasks, graph.unblocked)
    convs = {k.name: k for k in inventory.kernels if k.layout}
    assert sorted(k.layout for k in convs.values()) == ["NCHW", "NCHW", "NCHWc", "NCHWc"], convs
    assert sorted(k.note for k in convs.values() if k.layout == "NCHW") == sorted([wide.reason, narrow.reason])
    assert all(k.name in inventory.describe() for k in convs.values() if k.note)
    _matches_onnx_runtime(path, model, blocked)


def test_grouped_convolutions_with_whole_blocks_per_group_run_blocked(tmp_path: Path) -> None:
    """The blocked form (group_conv2d_NCHWc), the default: the grouped convolution whose groups are whole blocks runs
    blocked, the other stays NCHW."""
    from edgetune.tasks.recipe import graph_switches

    assert graph_switches()["block_grouped"] is True  # the default, and a recorded switch of the recipe
    path, model, blocked = _prepared(tmp_path)
    (entry,) = [p for p in blocked.graph.passes if p.name == "layout-NCHW8c"]
    assert "3 of 4 convolutions in NCHW8c" in entry.detail and "1 grouped with whole blocks per group" in entry.detail
    (left,) = blocked.graph.unblocked
    assert left.groups == 8
    tasks = ms.relax_integration.extract_tasks(prepare_for_tuning(blocked.mod, TARGET), TARGET)
    assert sum("group_conv2d_NCHWc" in t.dispatched[0].script() for t in tasks) == 1
    _matches_onnx_runtime(path, model, blocked)


def test_groups_of_eight_channels_run_in_blocks_of_eight_under_blocks_of_sixteen(tmp_path: Path) -> None:
    """RegNetY's and ResNeXt-50's 8 channels per group under AVX-512's blocks of 16: each group is a whole half block,
    so the convolution runs as group_conv2d_NCHWc in NCHW8c, re-blocked from and to a tensor blocked by 16 (48, 64
    channels) and not at all on one blocked by 8 (40). Before, all three stayed NCHW and started from their untuned
    loops (16-50 GFLOPS on RegNetY-400MF, 24 of its tasks); 4 channels per group still stay NCHW."""

    layers = ((3, 48, "stem", 1, 3, 2), (48, 48, "g6", 6, 3, 1), (48, 64, "p1", 1, 1, 1), (64, 64, "g8", 8, 3, 1),
              (64, 40, "p2", 1, 1, 1), (40, 40, "g5", 5, 3, 1), (40, 64, "p3", 1, 1, 1), (64, 64, "g16", 16, 3, 1))
    path, model, blocked = _prepared(tmp_path, layers, "NCHW16c")
    (entry,) = [p for p in blocked.graph.passes if p.name == "layout-NCHW16c"]
    assert entry.status == "applied" and "7 of 8 convolutions in NCHW16c" in entry.detail, entry
    assert "3 grouped with whole blocks per group" in entry.detail, entry
    (left,) = blocked.graph.unblocked  # 4 channels per group: no whole block of any size
    assert left.groups == 16 and "4 input and 4 output channels per group" in left.reason
    tasks = ms.relax_integration.extract_tasks(prepare_for_tuning(blocked.mod, TARGET), TARGET)
    grouped = [t.dispatched[0] for t in tasks if "group_conv2d_NCHWc" in t.dispatched[0].script()]
    assert len(grouped) == 3
    for func in grouped:  # in blocks of 8, in and out
        shapes = [[int(d) for d in a.shape] for a in ms.arg_info.ArgInfo.from_entry_func(func, remove_preproc=True)]
        assert shapes[0][-1] == 8 and shapes[-1][-1] == 8 and shapes[1][-2:] == [8, 8], shapes
    _matches_onnx_runtime(path, model, blocked)
    # with the blocked grouped form off, the three stay NCHW, and the summary says their groups were whole half blocks
    _path, _model, off = _prepared(tmp_path, layers, "NCHW16c", block_grouped=False)
    reasons = sorted(conv.reason for conv in off.graph.unblocked)
    assert sum("whole blocks of 8, but the blocked form is off" in reason for reason in reasons) == 3, reasons


def test_the_blocked_grouped_convolution_computes_what_the_nchw_one_does() -> None:
    """group_conv2d_NCHWc against TOPI's grouped NCHW convolution: strided, padded, two blocks per group."""
    from tvm import te, topi

    from edgetune.tasks.blocking import group_conv2d_nchwc

    rng = np.random.default_rng(0)
    groups, block, cin, cout = 2, 4, 16, 24
    x = rng.normal(size=(1, cin, 9, 9)).astype(np.float32)
    w = rng.normal(size=(cout, cin // groups, 3, 3)).astype(np.float32)
    data, weight = te.placeholder(x.shape), te.placeholder(w.shape)
    plain = topi.nn.group_conv2d_nchw(data, weight, 2, 1, 1, groups, "float32")
    xb = x.reshape(1, cin // block, block, 9, 9).transpose(0, 1, 3, 4, 2)
    wb = w.reshape(cout // block, block, cin // groups // block, block, 3, 3).transpose(0, 2, 4, 5, 3, 1)
    bdata, bweight = te.placeholder(xb.shape), te.placeholder(wb.shape)
    blocked = group_conv2d_nchwc(bdata, bweight, (2, 2), (1, 1, 1, 1), (1, 1), groups, "float32")

    def run(args, out, *values):
        func = tvm.compile(te.create_prim_func([*args, out]), target="llvm")
        result = tvm.runtime.tensor(np.zeros([int(d) for d in out.shape], np.float32))
        func(*[tvm.runtime.tensor(v) for v in values], result)
        return result.numpy()

    expected = run([data, weight], plain, x, w)
    got = run([bdata, bweight], blocked, xb, np.ascontiguousarray(wb))
    got = got.transpose(0, 1, 4, 2, 3).reshape(expected.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_an_ordinary_blocked_convolutions_schedule_carries_into_the_grouped_one(tmp_path: Path) -> None:
    """The grouped blocked form is the ordinary blocked convolution's loop nest (one reduction over the group's
    channels, then the kernel), so the library's convolutions give it first candidates: at two trials per task it
    had none and ran near its untuned loops, 2.1x slower than NCHW on RegNetX."""
    from edgetune.search.transfer import transfer_decisions
    from edgetune.tasks.signature import anchor_signature, operator_signature

    _path, _model, blocked = _prepared(tmp_path)
    tasks = ms.relax_integration.extract_tasks(prepare_for_tuning(blocked.mod, TARGET), TARGET)
    grouped = next(t.dispatched[0] for t in tasks if "group_conv2d_NCHWc" in t.dispatched[0].script())
    stem = next(t.dispatched[0] for t in tasks if "conv2d_NCHWc" in t.dispatched[0].script()
                and "group_conv2d" not in t.dispatched[0].script() and "data_pad" in t.dispatched[0].script())
    assert anchor_signature(operator_signature(grouped)) == anchor_signature(operator_signature(stem))
    from test_transfer import context_for, sampled_traces  # the same target: llvm, 2 cores

    traces = sampled_traces(stem, 4)
    ctx = context_for(grouped)
    spaces = list(ctx.space_generator.generate_design_space(grouped))
    carried = [sch for i, trace in enumerate(traces)
               if (sch := transfer_decisions(trace, grouped, spaces, list(ctx.space_generator.postprocs), seed=i + 1))]
    assert len(carried) >= len(traces) // 2, f"{len(carried)} of {len(traces)}"
    args = ms.arg_info.ArgInfo.from_entry_func(grouped, remove_preproc=True)
    values = [np.random.default_rng(i).normal(size=[int(d) for d in a.shape]).astype("float32") for i, a in enumerate(args)]

    def run(mod):
        out = tvm.runtime.tensor(np.zeros_like(values[-1]))
        tvm.compile(mod, target=TARGET)(*[tvm.runtime.tensor(v) for v in values[:-1]], out)
        return out.numpy()

    expected = run(grouped)
    for sch in carried[:3]:
        np.testing.assert_allclose(run(sch.mod), expected, rtol=1e-4, atol=1e-4)


def _layout_transforms(mod: tvm.IRModule) -> list[tuple[list[int], list[int]]]:
    """The (input shape, output shape) of every layout-transform kernel ``mod``'s main function calls."""
    found = []

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.call_tir":
            if "layout_transform" in expr.args[0].name_hint:
                source = expr.args[1].fields[0]
                found.append(([int(d) for d in source.ty.shape.values], [int(d) for d in expr.ty.shape.values]))

    relax.analysis.post_order_visit(mod["main"], visit)
    return found


def test_a_tensor_between_blocks_of_sixteen_and_of_eight_is_not_re_blocked(tmp_path: Path) -> None:
    """Under blocks of 16, a grouped convolution of 8 channels per group runs in blocks of 8: the 1x1 convolution
    before it writes blocks of 8 and the one after it reads them, so nothing is transformed between them. Before, each
    such tensor went blocked by 16 -> NCHW -> blocked by 8 and back (RegNetY-400MF: 0.68 ms of transform kernels
    in a 4.9 ms model). Left: the input's transform into the stem, and the one into the 4-per-group convolution,
    which stays NCHW (the classifier after it is NCHW too)."""
    layers = ((3, 48, "stem", 1, 3, 2), (48, 48, "g6", 6, 3, 1), (48, 64, "p1", 1, 1, 1), (64, 64, "g8", 8, 3, 1),
              (64, 40, "p2", 1, 1, 1), (40, 40, "g5", 5, 3, 1), (40, 64, "p3", 1, 1, 1), (64, 64, "g16", 16, 3, 1))
    path, model, blocked = _prepared(tmp_path, layers, "NCHW16c")
    transforms = _layout_transforms(blocked.mod)
    assert sorted(transforms) == sorted([([1, 3, 32, 32], [1, 1, 32, 32, 3]),  # into the stem
                                         ([1, 4, 16, 16, 16], [1, 64, 16, 16])]), transforms  # into g16, in NCHW
    _matches_onnx_runtime(path, model, blocked)


def _squeeze_excite_model() -> bytes:
    """A 48-channel grouped convolution (8 per group) whose output a squeeze-excite gate of 48 channels scales."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)

    def init(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.normal(0, 0.3, shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["input", "stem_w", "stem_b"], ["stem"], kernel_shape=[3, 3], pads=[1] * 4, strides=[2, 2]),
        helper.make_node("Relu", ["stem"], ["stem_r"]),
        helper.make_node("Conv", ["stem_r", "g_w", "g_b"], ["g"], kernel_shape=[3, 3], pads=[1] * 4, group=6),
        helper.make_node("Relu", ["g"], ["x"]),
        helper.make_node("GlobalAveragePool", ["x"], ["pooled"]),
        helper.make_node("Conv", ["pooled", "se_w", "se_b"], ["se"], kernel_shape=[1, 1]),
        helper.make_node("Sigmoid", ["se"], ["gate"]),
        helper.make_node("Mul", ["x", "gate"], ["scaled"]),
        helper.make_node("Conv", ["scaled", "p_w", "p_b"], ["output"], kernel_shape=[1, 1]),
    ]
    inits = [init("stem_w", 48, 3, 3, 3), init("stem_b", 48), init("g_w", 48, 8, 3, 3), init("g_b", 48),
             init("se_w", 48, 48, 1, 1), init("se_b", 48), init("p_w", 64, 48, 1, 1), init("p_b", 64)]
    graph = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 64, 16, 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


def test_a_gate_in_another_block_than_the_tensor_it_scales_is_re_blocked_not_the_tensor(tmp_path: Path) -> None:
    """The grouped convolution's output is in blocks of 8, and ``ConvertLayout`` puts the squeeze-excite gate of 48
    channels (a 1x1 convolution) and its multiply in blocks of 16: the multiply runs in blocks of 8 with the gate's
    convolution writing blocks of 8, and the next convolution reads them. Before, the whole 48x16x16 tensor went to
    NCHW and back to blocks of 16 for the multiply."""
    path = tmp_path / "se.onnx"
    path.write_bytes(_squeeze_excite_model())
    model = load_model(str(path))
    blocked = prepare_graph(model, "NCHW16c", "full", TARGET)
    transforms = _layout_transforms(blocked.mod)  # the input's into the stem and the output's: none between
    assert sorted(transforms) == sorted([([1, 3, 32, 32], [1, 1, 32, 32, 3]), ([1, 4, 16, 16, 16], [1, 64, 16, 16])])

    scaled = []

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.call_tir" \
                and "multiply" in expr.args[0].name_hint:
            scaled.append([int(d) for d in expr.ty.shape.values])

    relax.analysis.post_order_visit(blocked.mod["main"], visit)
    assert scaled == [[1, 6, 16, 16, 8]], scaled
    _matches_onnx_runtime(path, model, blocked)


def test_output_channels_blocks_do_not_divide_are_padded_to_whole_blocks(tmp_path: Path) -> None:
    """SqueezeNet's 1000-channel classifier under blocks of 16: its output is padded with zero weights to 1008 channels,
    63 whole blocks (a few per cent more arithmetic for whole vectors), carried blocked through its bias, ReLU and
    global average pool, and sliced to 1000 where it leaves the blocked layout. A 3x3 convolution reading a padded
    output (520 -> 528) reads the sliced tensor. A share of padding above PAD_TO_BLOCK_MAX_SHARE (24 -> 32) keeps
    the half blocks. Outputs match ONNX Runtime's."""
    from edgetune.tasks.blocking import PAD_TO_BLOCK_MAX_SHARE

    assert 8 / 520 <= PAD_TO_BLOCK_MAX_SHARE < 8 / 24
    layers = ((3, 32, "stem", 1, 3, 2), (32, 520, "wide", 1, 1, 1), (520, 32, "narrow", 1, 3, 1),
              (32, 24, "half", 1, 1, 1), (24, 1000, "classifier", 1, 1, 1))
    path, model, blocked = _prepared(tmp_path, layers, "NCHW16c")
    (entry,) = [p for p in blocked.graph.passes if p.name == "layout-NCHW16c"]
    assert entry.status == "applied" and "5 of 5 convolutions in NCHW16c" in entry.detail, entry
    assert "2 with output channels padded to whole blocks" in entry.detail, entry
    assert not blocked.graph.unblocked
    tasks = ms.relax_integration.extract_tasks(prepare_for_tuning(blocked.mod, TARGET), TARGET)

    def param_shapes(task) -> list[list[int]]:
        func = task.dispatched[0]["main"]
        return [[int(d) for d in param.ty.shape] for param in func.params]

    shapes = [shape for t in tasks if "conv2d_NCHWc" in t.task_name for shape in param_shapes(t)]
    assert [1, 33, 16, 16, 16] in shapes and [1, 63, 16, 16, 16] in shapes, shapes  # 528 and 1008 channels
    assert [1, 3, 16, 16, 8] in shapes, shapes  # 24 channels: 3 blocks of 8, not padded to 32
    # the classifier's bias, ReLU and pool run on the padded blocks: no 1000-channel NCHW tensor is pooled
    pools = [t for t in tasks if t.task_name.startswith("mean")]
    assert pools and all([1, 63, 1, 1, 16] in param_shapes(t) for t in pools), [param_shapes(t) for t in pools]
    _matches_onnx_runtime(path, model, blocked)


@pytest.mark.parametrize("pool", ["MaxPool", "AveragePool"])
def test_a_pooling_reads_a_tensor_padded_to_whole_blocks_as_it_is(tmp_path: Path, pool: str) -> None:
    """A max pool (ceil mode, as SqueezeNet's) or an average pool after a convolution whose output is padded to whole
    blocks (520 -> 528 channels) pools the 33 padded blocks, and the convolution after it reads the pooled tensor
    sliced back to 520 channels. Outputs match ONNX Runtime's."""
    layers = ((3, 32, "stem", 1, 3, 1), (32, 520, "wide", 1, 1, 1), (520, 32, "narrow", 1, 3, 1))
    path, model, blocked = _prepared(tmp_path, layers, "NCHW16c", pools={"wide": pool})
    (entry,) = [p for p in blocked.graph.passes if p.name == "layout-NCHW16c"]
    assert "1 with output channels padded to whole blocks" in entry.detail, entry
    tasks = ms.relax_integration.extract_tasks(prepare_for_tuning(blocked.mod, TARGET), TARGET)
    pooled = [t for t in tasks if "pool" in t.task_name]
    shapes = [[int(d) for d in param.ty.shape] for t in pooled for param in t.dispatched[0]["main"].params]
    # 32x32 -> 16x16 in ceil mode (15x15 floor): the pool reads and writes the padded blocks
    side = 16 if pool == "MaxPool" else 15
    assert pooled and [1, 33, 32, 32, 16] in shapes and [1, 33, side, side, 16] in shapes, [t.task_name for t in tasks]
    _matches_onnx_runtime(path, model, blocked)
