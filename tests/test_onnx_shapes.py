"""Shape arithmetic in an ONNX graph (torch.chunk as the TorchScript exporter writes it) resolved before import."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edgetune.tasks import load_model
from edgetune.tasks.onnx_shapes import fold_shape_arithmetic


def _const(name: str, value: list[int]) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(value, np.int64), name))


def channel_split_model(channels: int = 8, res: int = 6) -> onnx.ModelProto:
    """ShuffleNetV2's block as torch.onnx.export (TorchScript) writes it: ``x.chunk(2, dim=1)`` as
    Shape -> Gather -> Add -> Div -> Mul -> Slice, a 1x1 convolution on one half, concatenated with the other."""
    rng = np.random.default_rng(3)
    half = channels // 2
    weight = numpy_helper.from_array(rng.normal(0, 0.3, (half, half, 1, 1)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Relu", ["input"], ["x"]),
        helper.make_node("Shape", ["x"], ["shape"]),
        _const("axis", [1]), helper.make_node("Gather", ["shape", "axis"], ["c"], axis=0),
        _const("one", [1]), helper.make_node("Add", ["c", "one"], ["c1"]),
        _const("two", [2]), helper.make_node("Div", ["c1", "two"], ["h"]),
        helper.make_node("Mul", ["h", "one"], ["end0"]),
        _const("zero", [0]), helper.make_node("Slice", ["x", "zero", "end0", "axis"], ["a"]),
        helper.make_node("Mul", ["h", "two"], ["end1"]),
        helper.make_node("Slice", ["x", "end0", "end1", "axis"], ["b"]),
        helper.make_node("Conv", ["b", "w"], ["bc"], kernel_shape=[1, 1]),
        helper.make_node("Concat", ["a", "bc"], ["output"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "chunk",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, channels, res, res])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, channels, res, res])],
        [weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_shape_arithmetic_becomes_constants_and_the_graph_keeps_its_meaning() -> None:
    model = channel_split_model()
    folded, count = fold_shape_arithmetic(model)
    assert count == 6  # Shape, Gather, Add, Div and the two Muls; the Slices keep their data input
    ops = [n.op_type for n in folded.graph.node]
    assert "Shape" not in ops and ops.count("Slice") == 2 and "Div" not in ops
    ends = {t.name: numpy_helper.to_array(t).tolist() for t in folded.graph.initializer}
    assert ends["end0"] == [4] and ends["end1"] == [8]
    assert [n.op_type for n in model.graph.node].count("Shape") == 1  # the caller's model is not changed

    from onnx.reference import ReferenceEvaluator

    x = np.random.default_rng(0).normal(size=(1, 8, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(ReferenceEvaluator(folded).run(None, {"input": x})[0],
                               ReferenceEvaluator(model).run(None, {"input": x})[0], rtol=1e-6)


def test_a_graph_without_shape_arithmetic_is_left_as_it_was() -> None:
    from edgetune.tasks.demo import build_demo

    model = build_demo("tiny-cnn", 32)
    folded, count = fold_shape_arithmetic(model)
    assert count == 0 and folded is model


def test_a_chunked_model_imports_and_matches_onnxruntime(tmp_path) -> None:
    """torchvision's ShuffleNetV2 failed to import (``emit_te now only supports Tensor that has ShapeExpr shape``):
    TVM's frontend made the Slice's computed end symbolic."""
    import onnxruntime as ort
    import tvm
    from tvm import relax

    path = tmp_path / "chunk.onnx"
    path.write_bytes(channel_split_model().SerializeToString())
    loaded = load_model(str(path))
    x = np.random.default_rng(1).normal(size=(1, 8, 6, 6)).astype(np.float32)
    vm = relax.VirtualMachine(tvm.compile(loaded.mod, target="llvm"), tvm.cpu())
    ours = vm["main"](tvm.runtime.tensor(x)).numpy()
    theirs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_a_shape_of_a_dynamic_value_is_left_to_the_frontend() -> None:
    """Nothing is guessed: a Shape whose input shape inference cannot make static stays in the graph."""
    nodes = [helper.make_node("Shape", ["input"], ["s"]), helper.make_node("Cast", ["s"], ["output"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(
        nodes, "dyn", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    folded, count = fold_shape_arithmetic(model)
    assert count == 0 and [n.op_type for n in folded.graph.node] == ["Shape", "Cast"]
