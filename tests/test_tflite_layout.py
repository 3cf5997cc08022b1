"""NHWC models get the graph ONNX models get (issue 53, point 2): a TensorFlow Lite model's convolutions blocked.

Before, the blocked layout failed to lower on an NHWC model ("not enough values to
unpack (expected 5, got 4)") and the whole model stayed NHWC, with none of the
schedule library's workloads.
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
from tflite_models import write_model

TARGET = tvm.target.Target({"kind": "llvm", "num-cores": 2})
DATA = Path(__file__).parent / "data" / "tflite"


def test_an_nhwc_models_convolutions_come_out_blocked_and_match_litert(tmp_path: Path) -> None:
    from ai_edge_litert.interpreter import Interpreter

    path = write_model(tmp_path / "net.tflite")  # conv (ReLU6) -> depthwise conv (ReLU) -> residual add -> mean -> dense
    model = load_model(str(path))
    blocked = prepare_graph(model, "NCHW8c", "full", TARGET)
    (entry,) = [p for p in blocked.graph.passes if p.name == "layout-NCHW8c"]
    assert entry.status == "applied", blocked.graph.describe()
    assert "2 of 2 convolutions in NCHW8c (1 of 1 depthwise)" in entry.detail and "2 from NHWC" in entry.detail
    tasks = ms.relax_integration.extract_tasks(prepare_for_tuning(blocked.mod, TARGET), TARGET)
    names = [t.task_name for t in tasks]
    convs = [n for n in names if "conv2d" in n]
    assert len(convs) == 2 and all("NCHWc" in n for n in convs), names
    # bias, ReLU6 (as maximum/minimum), ReLU and the residual add fused into the convolutions, no transpose between
    assert any("conv2d_NCHWc" in n and "maximum_minimum" in n for n in names), names
    assert any("depthwise_conv2d_NCHWc" in n and n.endswith("add1") for n in names), names
    assert not any("transpose" in n and ("add" in n or "clip" in n) for n in names), names
    assert sum("transpose" in n for n in names) <= 1  # the input's, once

    x = model.random_inputs(seed=0)["input"]
    with tvm.transform.PassContext(opt_level=3):
        vm = relax.VirtualMachine(relax.build(blocked.mod, target=TARGET), tvm.cpu())
    ours = vm["main"](tvm.runtime.tensor(x)).numpy()
    interpreter = Interpreter(model_path=str(path), num_threads=1)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    theirs = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    assert np.abs(ours - theirs).max() <= 1e-4 * np.abs(theirs).max()


def _ops(mod, name: str) -> int:
    found = 0

    def visit(expr) -> None:
        nonlocal found
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == name:
            found += 1

    relax.analysis.post_order_visit(mod["main"], visit)
    return found


@pytest.mark.parametrize("family", ["mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0", "resnet50", "densenet121"])
def test_keras_models_are_blocked_like_onnx_ones_and_match_litert(family: str) -> None:
    """The Keras fixtures (tests/data/tflite) in the host's blocked layout: every convolution from NHWC, a zero
    PAD before a convolution or before a max pool after a ReLU (ResNet-50's and DenseNet's stems) folded into
    it, no transpose inside the network, outputs as LiteRT's."""
    from ai_edge_litert.interpreter import Interpreter

    from edgetune.profile import load_profile

    target = load_profile("host").tvm_target()
    path = DATA / f"{family}.tflite"
    model = load_model(str(path))
    convs = _ops(model.mod, "relax.nn.conv2d")
    blocked = prepare_graph(model, "NCHWc", "full", target)
    (entry,) = [p for p in blocked.graph.passes if p.name.startswith("layout-")]
    assert entry.status == "applied" and f"{convs} from NHWC" in entry.detail, blocked.graph.describe()
    if family in ("resnet50", "densenet121"):
        from edgetune.tasks.nhwc import channels_first

        first = channels_first(model.mod, target)[0]
        assert _ops(model.mod, "relax.nn.pad") == 2 and _ops(first, "relax.nn.pad") == 0
        # the input's transpose only: before, DenseNet's dense blocks concatenated in NHWC between 124 of them
        assert _ops(first, "relax.permute_dims") == 1
    if family == "densenet121":
        # Keras's x = concat([x, new]) flattened: each layer's batch norm and ReLU read the pieces where their
        # convolutions wrote them, in one kernel with the concat; before, every layer copied the block so far
        (flat,) = [p for p in blocked.graph.passes if p.name == "flatten-concat"]
        assert flat.status == "applied" and flat.detail.endswith("concats of a concat flattened"), flat
        names = [t.task_name for t in ms.relax_integration.extract_tasks(prepare_for_tuning(blocked.mod, target), target)]
        concats = [n for n in names if "concatenate" in n]
        assert concats and all("multiply" in n for n in concats), concats
    inputs = model.random_inputs(seed=0)
    with tvm.transform.PassContext(opt_level=3):
        vm = relax.VirtualMachine(relax.build(blocked.mod, target=target), tvm.cpu())
    ours = vm["main"](*[tvm.runtime.tensor(v) for v in inputs.values()]).numpy()
    interpreter = Interpreter(model_path=str(path), num_threads=1)
    interpreter.allocate_tensors()
    for detail, value in zip(interpreter.get_input_details(), inputs.values()):
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()
    theirs = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    assert np.abs(ours - theirs).max() <= 1e-4 * np.abs(theirs).max()


@pytest.mark.parametrize("relu", [True, False])
def test_a_zero_pad_before_a_max_pool_folds_only_when_nothing_padded_is_negative(relu: bool) -> None:
    """Zeros and a max pool's own padding (the lowest value) agree only on values that are at least zero."""
    from edgetune.tasks.nhwc import channels_first

    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 8, 4), "float32"))
    weight = relax.const(np.random.default_rng(0).standard_normal((3, 3, 4, 4)).astype("float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            conv = builder.emit(relax.op.nn.conv2d(x, weight, padding=[1, 1, 1, 1], data_layout="NHWC", kernel_layout="HWIO"))
            act = builder.emit(relax.op.nn.relu(conv)) if relu else conv
            padded = builder.emit(relax.op.nn.pad(act, [0, 0, 1, 1, 1, 1, 0, 0], pad_value=0.0))
            pooled = builder.emit_output(relax.op.nn.max_pool2d(padded, pool_size=[3, 3], strides=[2, 2], layout="NHWC"))
        builder.emit_func_output(pooled)
    mod = builder.get()
    converted, _ = channels_first(mod, TARGET)
    assert _ops(converted, "relax.nn.pad") == (0 if relu else 1)
    inputs = [tvm.runtime.tensor(np.random.default_rng(1).standard_normal((1, 8, 8, 4)).astype("float32"))]
    outputs = []
    for module in (mod, converted):
        with tvm.transform.PassContext(opt_level=3):
            vm = relax.VirtualMachine(relax.build(module, target=TARGET), tvm.cpu())
        outputs.append(vm["main"](*inputs).numpy())
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-5, atol=1e-5)
