"""ONNX QDQ models as ONNX Runtime's quantizer writes them (``quantize_static``, QDQ format), made by the tests.

:func:`write_qdq_resnet` builds a small float ResNet-like CNN with ``onnx.helper``
(seeded He-normal weights, non-zero biases), calibrates it on seeded standard-normal
inputs and quantizes it to int8 activations and weights, per channel, in the QDQ
format: QuantizeLinear/DequantizeLinear pairs around float Conv, Add, Relu,
GlobalAveragePool and Gemm nodes, the form TVM's ONNX frontend imports as
``R.quantize``/``R.dequantize``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

INPUT = "input"
SHAPE = (1, 3, 16, 16)


def _resnet_graph(seed: int) -> Any:
    """stem conv 3->8 + ReLU, a residual block (a depthwise 3x3 conv + ReLU, a 3x3 conv in 2 groups, add, ReLU),
    a stride-2 conv 8->16 + ReLU, global average pool, flatten, a dense classifier 16->10."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def conv(name: str, x: str, cin: int, cout: int, stride: int = 1, relu: bool = True, group: int = 1) -> str:
        w = rng.normal(0, (2.0 / (cin // group * 9)) ** 0.5, (cout, cin // group, 3, 3)).astype(np.float32)
        b = rng.normal(0, 0.1, cout).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, f"{name}.w"), numpy_helper.from_array(b, f"{name}.b")])
        out = f"{name}.out"
        nodes.append(helper.make_node("Conv", [x, f"{name}.w", f"{name}.b"], [out], pads=[1, 1, 1, 1],
                                      strides=[stride, stride], group=group))
        if not relu:
            return out
        nodes.append(helper.make_node("Relu", [out], [f"{name}.relu"]))
        return f"{name}.relu"

    stem = conv("stem", INPUT, 3, 8)
    branch = conv("block.conv2", conv("block.conv1", stem, 8, 8, group=8), 8, 8, relu=False, group=2)
    nodes.append(helper.make_node("Add", [branch, stem], ["block.add"]))
    nodes.append(helper.make_node("Relu", ["block.add"], ["block.out"]))
    down = conv("down", "block.out", 8, 16, stride=2)
    nodes.append(helper.make_node("GlobalAveragePool", [down], ["pool"]))
    nodes.append(helper.make_node("Flatten", ["pool"], ["flat"]))
    inits.append(numpy_helper.from_array(rng.normal(0, 0.35, (10, 16)).astype(np.float32), "fc.w"))
    inits.append(numpy_helper.from_array(rng.normal(0, 0.1, 10).astype(np.float32), "fc.b"))
    nodes.append(helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], transB=1))
    graph = helper.make_graph(nodes, "qdq_resnet", [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, (1, 10))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


class _Calibration:
    """ONNX Runtime's CalibrationDataReader protocol: seeded standard-normal inputs, then None."""

    def __init__(self, count: int = 8) -> None:
        self.inputs = [{INPUT: np.random.default_rng(100 + i).standard_normal(SHAPE).astype(np.float32)} for i in range(count)]

    def get_next(self) -> dict[str, np.ndarray] | None:
        return self.inputs.pop() if self.inputs else None


def write_qdq_resnet(path: Path, seed: int = 0, per_channel: bool = True, unsigned: bool = False,
                     unsigned_activations: bool = False) -> Path:
    """The QDQ int8 model at ``path`` (its float original beside it, ``.float.onnx``); ``unsigned``: uint8
    activations and weights with zero points (QUInt8), as ONNX Runtime's quantizer writes them when asked;
    ``unsigned_activations``: uint8 activations and int8 weights (U8S8, what ONNX Runtime recommends on x86-64)."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    float_path = path.with_suffix(".float.onnx")
    onnx.save(_resnet_graph(seed), str(float_path))
    reader = type("Reader", (_Calibration, CalibrationDataReader), {})()
    activations = QuantType.QUInt8 if unsigned or unsigned_activations else QuantType.QInt8
    weights = QuantType.QUInt8 if unsigned else QuantType.QInt8
    quantize_static(str(float_path), str(path), reader, quant_format=QuantFormat.QDQ, per_channel=per_channel,
                    activation_type=activations, weight_type=weights)
    return path


def output_scale(path: Path) -> float:
    """The scale of the DequantizeLinear that gives the model's output: one quantum of it."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    output = model.graph.output[0].name
    (node,) = [n for n in model.graph.node if output in n.output]
    assert node.op_type == "DequantizeLinear", node.op_type
    scales = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    return float(scales[node.input[1]])


def onnxruntime_outputs(path: Path, inputs: dict[str, np.ndarray], fused: bool = True) -> list[np.ndarray]:
    """ONNX Runtime's outputs; ``fused=False``: its graph optimizations off, so each QDQ group runs as the spec reads
    it (dequantize, the float operator, quantize) instead of ONNX Runtime's fused int8 kernels."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    if not fused:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, inputs)
