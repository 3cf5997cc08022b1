"""Demo models built in code, so examples and tests never download anything.

Each demo is an ONNX ``ModelProto`` (opset 13) with random weights from a fixed
seed: the same name and resolution give byte-identical ONNX (for given numpy
and onnx versions), hence the same sha256 and tuning-task keys. Weights use
He initialisation so activations stay finite and non-trivial through deep
stacks of layers; the numbers are meaningless, the shapes and ops are real.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edgetune.errors import ModelError

OPSET = 13
_SEED = 20261101


@dataclass(frozen=True)
class _Demo:
    build: Callable[[int], onnx.ModelProto]
    default_res: int
    min_res: int
    res_multiple: int


class _GraphBuilder:
    """Accumulates nodes and seeded initializers for one ONNX graph."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._count = 0

    def _name(self, kind: str) -> str:
        self._count += 1
        return f"{kind}_{self._count}"

    def _const(self, kind: str, array: np.ndarray) -> str:
        name = self._name(kind)
        self.inits.append(numpy_helper.from_array(array.astype(np.float32), name))
        return name

    def _node(self, op: str, inputs: list[str], **attrs: object) -> str:
        out = self._name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv(
        self,
        x: str,
        cin: int,
        cout: int,
        kernel: int,
        stride: int = 1,
        group: int = 1,
        gain: float = 2.0,
    ) -> str:
        """Conv with bias; ``gain`` 2 suits a following ReLU, 1 a linear output."""
        fan_in = cin // group * kernel * kernel
        weight = self._rng.normal(0.0, np.sqrt(gain / fan_in), (cout, cin // group, kernel, kernel))
        bias = self._rng.normal(0.0, 0.05, cout)
        pad = kernel // 2
        return self._node(
            "Conv",
            [x, self._const("w", weight), self._const("b", bias)],
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad, pad, pad, pad],
            group=group,
        )

    def conv_bn(self, x: str, cin: int, cout: int, kernel: int, stride: int = 1, group: int = 1) -> str:
        """Conv without bias, then an inference BatchNormalization: what Keras/TensorFlow exporters emit.

        The statistics are random but plausible (variance near 1, small means),
        so folding them into the weights changes the numbers measurably.
        """
        fan_in = cin // group * kernel * kernel
        weight = self._rng.normal(0.0, np.sqrt(2.0 / fan_in), (cout, cin // group, kernel, kernel))
        pad = kernel // 2
        y = self._node(
            "Conv", [x, self._const("w", weight)],
            kernel_shape=[kernel, kernel], strides=[stride, stride], pads=[pad, pad, pad, pad], group=group,
        )
        gamma = self._const("bn_gamma", 1.0 + self._rng.normal(0.0, 0.1, cout))
        beta = self._const("bn_beta", self._rng.normal(0.0, 0.05, cout))
        mean = self._const("bn_mean", self._rng.normal(0.0, 0.1, cout))
        var = self._const("bn_var", self._rng.uniform(0.5, 1.5, cout))
        return self._node("BatchNormalization", [y, gamma, beta, mean, var], epsilon=1e-3)

    def relu(self, x: str) -> str:
        return self._node("Relu", [x])

    def relu6(self, x: str) -> str:
        lo = self._const("clip_min", np.array(0.0))
        hi = self._const("clip_max", np.array(6.0))
        return self._node("Clip", [x, lo, hi])

    def add(self, a: str, b: str) -> str:
        return self._node("Add", [a, b])

    def maxpool(self, x: str) -> str:
        return self._node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])

    def classifier(self, x: str, cin: int, classes: int) -> str:
        """Global average pool, flatten and a PyTorch-style Gemm (transB=1)."""
        flat = self._node("Flatten", [self._node("GlobalAveragePool", [x])], axis=1)
        weight = self._rng.normal(0.0, np.sqrt(1.0 / cin), (classes, cin))
        bias = self._rng.normal(0.0, 0.05, classes)
        return self._node(
            "Gemm", [flat, self._const("fc_w", weight), self._const("fc_b", bias)], transB=1
        )

    def model(self, name: str, x: str, res: int, out: str, classes: int) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            name,
            [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 3, res, res])],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, classes])],
            self.inits,
        )
        model = helper.make_model(
            graph, producer_name="edgetune.demo", opset_imports=[helper.make_opsetid("", OPSET)]
        )
        onnx.checker.check_model(model)
        return model


def tiny_cnn(res: int = 32) -> onnx.ModelProto:
    """Two convs and a dense layer: a handful of tasks that tune in seconds."""
    g = _GraphBuilder(_SEED)
    x = g.relu(g.conv("input", 3, 16, 3))
    x = g.relu(g.conv(x, 16, 32, 3, stride=2))
    return g.model("tiny_cnn", "input", res, g.classifier(x, 32, 10), 10)


def resnet18(res: int = 224) -> onnx.ModelProto:
    """ResNet-18 with BatchNorm folded into conv weight+bias, as exporters emit it.

    The last conv of each residual branch gets half the He gain so the sum of
    branch and shortcut does not grow by a factor of two per block.
    """
    g = _GraphBuilder(_SEED + 18)
    x = g.maxpool(g.relu(g.conv("input", 3, 64, 7, stride=2)))
    cin = 64
    for cout, first_stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for stride in (first_stride, 1):
            branch = g.relu(g.conv(x, cin, cout, 3, stride=stride))
            branch = g.conv(branch, cout, cout, 3, gain=1.0)
            if stride == 1 and cin == cout:
                shortcut = x
            else:
                shortcut = g.conv(x, cin, cout, 1, stride, gain=1.0)
            x = g.relu(g.add(branch, shortcut))
            cin = cout
    return g.model("resnet18", "input", res, g.classifier(x, 512, 1000), 1000)


# (output channels, stride) of MobileNetV1's 13 depthwise-separable blocks, from the paper
_MOBILENETV1_CONFIG = (
    (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
    (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1),
)


def mobilenetv1(res: int = 224) -> onnx.ModelProto:
    """MobileNetV1 (width 1.0) as Keras/TensorFlow exporters emit it: BatchNormalization and Clip(0, 6) nodes kept.

    Unlike the other demos, nothing is folded in code: each convolution has no
    bias and is followed by its own BatchNormalization node, so the graph
    preparation (edgetune.tasks.graph) has the work an exported model gives it.
    """
    g = _GraphBuilder(_SEED + 1)
    x = g.relu6(g.conv_bn("input", 3, 32, 3, stride=2))
    cin = 32
    for cout, stride in _MOBILENETV1_CONFIG:
        x = g.relu6(g.conv_bn(x, cin, cin, 3, stride=stride, group=cin))
        x = g.relu6(g.conv_bn(x, cin, cout, 1))
        cin = cout
    return g.model("mobilenetv1", "input", res, g.classifier(x, cin, 1000), 1000)


# (expansion t, output channels c, repeats n, first stride s) from the paper
_MOBILENETV2_CONFIG = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def mobilenetv2(res: int = 224) -> onnx.ModelProto:
    """MobileNetV2 (width 1.0), BatchNorm folded, ReLU6 as Clip(0, 6)."""
    g = _GraphBuilder(_SEED + 2)
    x = g.relu6(g.conv("input", 3, 32, 3, stride=2))
    cin = 32
    for expansion, cout, repeats, first_stride in _MOBILENETV2_CONFIG:
        for i in range(repeats):
            stride = first_stride if i == 0 else 1
            hidden = cin * expansion
            y = x if expansion == 1 else g.relu6(g.conv(x, cin, hidden, 1))
            y = g.relu6(g.conv(y, hidden, hidden, 3, stride=stride, group=hidden))
            y = g.conv(y, hidden, cout, 1, gain=1.0)
            x = g.add(x, y) if stride == 1 and cin == cout else y
            cin = cout
    x = g.relu6(g.conv(x, cin, 1280, 1))
    return g.model("mobilenetv2", "input", res, g.classifier(x, 1280, 1000), 1000)


def squeezenet(res: int = 224) -> onnx.ModelProto:
    """SqueezeNet 1.1: Fire modules (1x1 squeeze, 1x1 and 3x3 expand, Concat), a conv classifier."""
    g = _GraphBuilder(_SEED + 11)

    def fire(x: str, cin: int, squeeze: int, expand: int) -> str:
        s = g.relu(g.conv(x, cin, squeeze, 1))
        return g._node("Concat", [g.relu(g.conv(s, squeeze, expand, 1)), g.relu(g.conv(s, squeeze, expand, 3))], axis=1)

    x = g.maxpool(g.relu(g.conv("input", 3, 64, 3, stride=2)))
    x = fire(fire(x, 64, 16, 64), 128, 16, 64)
    x = g.maxpool(x)
    x = fire(fire(x, 128, 32, 128), 256, 32, 128)
    x = g.maxpool(x)
    x = fire(fire(x, 256, 48, 192), 384, 48, 192)
    x = fire(fire(x, 384, 64, 256), 512, 64, 256)
    x = g.relu(g.conv(x, 512, 1000, 1))
    out = g._node("Flatten", [g._node("GlobalAveragePool", [x])], axis=1)
    return g.model("squeezenet", "input", res, out, 1000)


#: width, heads and MLP width of the demo transformer block
_TRANSFORMER = (128, 4, 256)
_TRANSFORMER_OPSET = 17  # LayerNormalization, as PyTorch exports it


def transformer(seq: int = 32) -> onnx.ModelProto:
    """A pre-norm transformer encoder block as PyTorch exports it (``@N`` is the sequence length).

    LayerNorm, multi-head self-attention with MatMul and Softmax, an erf-GELU
    MLP and two residual adds; width 128, 4 heads, MLP 256.
    """
    width, heads, hidden = _TRANSFORMER
    head = width // heads
    g = _GraphBuilder(_SEED + 7)
    rng = g._rng

    def const(kind: str, array: np.ndarray) -> str:
        return g._const(kind, np.asarray(array, dtype=np.float32))

    def shape(values: list[int]) -> str:
        name = g._name("shape")
        g.inits.append(numpy_helper.from_array(np.asarray(values, dtype=np.int64), name))
        return name

    def linear(x: str, cin: int, cout: int) -> str:
        w = const("w", rng.normal(0.0, np.sqrt(1.0 / cin), (cin, cout)))
        return g._node("Add", [g._node("MatMul", [x, w]), const("b", rng.normal(0.0, 0.02, cout))])

    def layer_norm(x: str) -> str:
        scale, bias = const("ln_g", 1.0 + rng.normal(0.0, 0.02, width)), const("ln_b", rng.normal(0.0, 0.02, width))
        return g._node("LayerNormalization", [x, scale, bias], axis=-1, epsilon=1e-5)

    def heads_first(x: str) -> str:  # [1, S, D] -> [1, H, S, Dh]
        return g._node("Transpose", [g._node("Reshape", [x, shape([1, seq, heads, head])])], perm=[0, 2, 1, 3])

    x = "input"
    y = layer_norm(x)
    q, k, v = (heads_first(linear(y, width, width)) for _ in range(3))
    scores = g._node("Mul", [g._node("MatMul", [q, g._node("Transpose", [k], perm=[0, 1, 3, 2])]), const("scale", np.array(head**-0.5))])
    attn = g._node("MatMul", [g._node("Softmax", [scores], axis=-1), v])
    attn = g._node("Reshape", [g._node("Transpose", [attn], perm=[0, 2, 1, 3]), shape([1, seq, width])])
    x = g.add(x, linear(attn, width, width))
    y = linear(layer_norm(x), width, hidden)
    erf = g._node("Erf", [g._node("Div", [y, const("sqrt2", np.array(np.sqrt(2.0)))])])
    y = g._node("Mul", [g._node("Mul", [y, g._node("Add", [erf, const("one", np.array(1.0))])]), const("half", np.array(0.5))])
    out = g.add(x, linear(y, hidden, width))
    graph = helper.make_graph(
        g.nodes,
        "transformer",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, seq, width])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, seq, width])],
        g.inits,
    )
    model = helper.make_model(graph, producer_name="edgetune.demo", opset_imports=[helper.make_opsetid("", _TRANSFORMER_OPSET)])
    onnx.checker.check_model(model)
    return model


DEMOS: dict[str, _Demo] = {
    "tiny-cnn": _Demo(tiny_cnn, default_res=32, min_res=8, res_multiple=1),
    "resnet18": _Demo(resnet18, default_res=224, min_res=32, res_multiple=32),
    "mobilenetv1": _Demo(mobilenetv1, default_res=224, min_res=32, res_multiple=32),
    "mobilenetv2": _Demo(mobilenetv2, default_res=224, min_res=32, res_multiple=32),
    "squeezenet": _Demo(squeezenet, default_res=224, min_res=32, res_multiple=32),
    # @N is the sequence length for the transformer block
    "transformer": _Demo(transformer, default_res=32, min_res=8, res_multiple=8),
}


def demo_model_names() -> list[str]:
    """Names accepted after ``demo:`` in a model spec."""
    return list(DEMOS)


def build_demo(name: str, res: int | None = None) -> onnx.ModelProto:
    """Build demo ``name`` at square input resolution ``res`` (its default if None)."""
    demo = DEMOS.get(name)
    if demo is None:
        available = ", ".join(f"demo:{n}" for n in DEMOS)
        close = difflib.get_close_matches(name, list(DEMOS), n=1)
        hint = f" (did you mean 'demo:{close[0]}'?)" if close else ""
        raise ModelError(f"unknown demo model 'demo:{name}'{hint}; available: {available}")
    if res is None:
        res = demo.default_res
    if res < demo.min_res or res % demo.res_multiple:
        rule = f">= {demo.min_res}"
        if demo.res_multiple > 1:
            rule += f" and a multiple of {demo.res_multiple}"
        raise ModelError(f"demo:{name} resolution {res} is invalid: it must be {rule}")
    return demo.build(res)
