"""Demo models built in code, so examples and tests never download anything.

Each demo is an ONNX ``ModelProto`` (opset 13) with random weights from a fixed
seed: the same name and resolution give byte-identical ONNX (for given numpy
and onnx versions), hence the same sha256 and tuning-task keys. Weights use
He initialisation so activations stay finite and non-trivial through deep
stacks of layers; the numbers are meaningless, the shapes and ops are real.

The CNN demos take a square input of 224 by default and build at any
multiple of 32 down to 32 (e.g. 96 or 128); for the transformer blocks
``@N`` is the sequence length, a multiple of 8 (32 for demo:transformer and
128 for demo:transformer-bert by default). ``ZOO`` lists the models a
schedule library is built from.
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
# He's gain for a conv that reads the outputs of an activation is 1 / E[act(z)^2], z ~ N(0, 1):
# 2 after ReLU, these after SiLU and hard-swish; a squeeze-excite gate near 1/2 scales by 1/4
_SILU_GAIN = 2.8
_HARD_SWISH_GAIN = 3.0
_GATE_GAIN = 4.0


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

    def hard_sigmoid(self, x: str) -> str:
        """PyTorch's Hardsigmoid: clip(x / 6 + 1/2, 0, 1)."""
        return self._node("HardSigmoid", [x], alpha=1.0 / 6.0, beta=0.5)

    def hard_swish(self, x: str) -> str:
        """Hardswish as x * HardSigmoid(x), as PyTorch exports it before opset 14."""
        return self._node("Mul", [x, self.hard_sigmoid(x)])

    def silu(self, x: str) -> str:
        """SiLU (swish) as x * Sigmoid(x), as PyTorch exports it."""
        return self._node("Mul", [x, self.sigmoid(x)])

    def sigmoid(self, x: str) -> str:
        return self._node("Sigmoid", [x])

    def concat(self, parts: list[str]) -> str:
        return self._node("Concat", parts, axis=1)

    def split_channels(self, x: str, channels: int) -> tuple[str, str]:
        """Halve the channels as torch.chunk(x, 2, dim=1) exports: Split with constant sizes."""
        name = self._name("split")
        sizes = self.shape_const([channels // 2, channels // 2])
        outs = [f"{name}_a", f"{name}_b"]
        self.nodes.append(helper.make_node("Split", [x, sizes], outs, name=name, axis=1))
        return outs[0], outs[1]

    def shape_const(self, values: list[int]) -> str:
        """An int64 initializer (Reshape shape, Split sizes)."""
        name = self._name("shape")
        self.inits.append(numpy_helper.from_array(np.asarray(values, dtype=np.int64), name))
        return name

    def squeeze_excite(
        self,
        x: str,
        channels: int,
        squeeze: int,
        act: tuple[Callable[[str], str], float],
        gate: Callable[[str], str],
        gain: float,
    ) -> str:
        """Squeeze-and-excitation: GlobalAveragePool, 1x1 conv, ``act``, 1x1 conv, ``gate``, scale ``x``.

        ``gain`` is the He gain for ``x``'s activation, ``act`` the activation and its gain.
        """
        s = act[0](self.conv(self._node("GlobalAveragePool", [x]), channels, squeeze, 1, gain=gain))
        s = gate(self.conv(s, squeeze, channels, 1, gain=act[1]))
        return self._node("Mul", [x, s])

    def pool_flatten(self, x: str) -> str:
        return self._node("Flatten", [self._node("GlobalAveragePool", [x])], axis=1)

    def dense(self, x: str, cin: int, cout: int, gain: float = 1.0) -> str:
        """A PyTorch Linear as exported: Gemm with transB=1."""
        weight = self._rng.normal(0.0, np.sqrt(gain / cin), (cout, cin))
        bias = self._rng.normal(0.0, 0.05, cout)
        return self._node("Gemm", [x, self._const("fc_w", weight), self._const("fc_b", bias)], transB=1)

    def classifier(self, x: str, cin: int, classes: int) -> str:
        """Global average pool, flatten and a PyTorch-style Gemm (transB=1)."""
        return self.dense(self.pool_flatten(x), cin, classes)

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


def _fire(g: _GraphBuilder, x: str, cin: int, squeeze: int, expand: int) -> str:
    """SqueezeNet's Fire module: 1x1 squeeze, then 1x1 and 3x3 expand convs concatenated."""
    s = g.relu(g.conv(x, cin, squeeze, 1))
    return g.concat([g.relu(g.conv(s, squeeze, expand, 1)), g.relu(g.conv(s, squeeze, expand, 3))])


def squeezenet(res: int = 224) -> onnx.ModelProto:
    """SqueezeNet 1.1: Fire modules (1x1 squeeze, 1x1 and 3x3 expand, Concat), a conv classifier."""
    g = _GraphBuilder(_SEED + 11)
    x = g.maxpool(g.relu(g.conv("input", 3, 64, 3, stride=2)))
    x = _fire(g, _fire(g, x, 64, 16, 64), 128, 16, 64)
    x = g.maxpool(x)
    x = _fire(g, _fire(g, x, 128, 32, 128), 256, 32, 128)
    x = g.maxpool(x)
    x = _fire(g, _fire(g, x, 256, 48, 192), 384, 48, 192)
    x = _fire(g, _fire(g, x, 384, 64, 256), 512, 64, 256)
    x = g.relu(g.conv(x, 512, 1000, 1))
    out = g._node("Flatten", [g._node("GlobalAveragePool", [x])], axis=1)
    return g.model("squeezenet", "input", res, out, 1000)


def squeezenet10(res: int = 224) -> onnx.ModelProto:
    """SqueezeNet 1.0: a 7x7 stride-2 stem with 96 channels, max pools after the stem, Fire 4 and Fire 8.

    Fire (squeeze, expand) sizes (16, 64) x2, (32, 128) x2, (48, 192) x2,
    (64, 256) x2, and the 1x1 conv classifier, as in torchvision's
    squeezenet1_0 (padded pools instead of ceil mode, as in demo:squeezenet).
    """
    g = _GraphBuilder(_SEED + 10)
    x = g.maxpool(g.relu(g.conv("input", 3, 96, 7, stride=2)))
    x = _fire(g, x, 96, 16, 64)
    x = _fire(g, x, 128, 16, 64)
    x = _fire(g, x, 128, 32, 128)
    x = g.maxpool(x)
    x = _fire(g, x, 256, 32, 128)
    x = _fire(g, x, 256, 48, 192)
    x = _fire(g, x, 384, 48, 192)
    x = _fire(g, x, 384, 64, 256)
    x = g.maxpool(x)
    x = _fire(g, x, 512, 64, 256)
    x = g.relu(g.conv(x, 512, 1000, 1))
    return g.model("squeezenet1.0", "input", res, g.pool_flatten(x), 1000)


def resnet50(res: int = 224) -> onnx.ModelProto:
    """ResNet-50: bottleneck blocks (1x1, 3x3, 1x1 x4) repeated 3-4-6-3, BatchNorm folded into conv bias.

    The stride of a stage's first block is on its 3x3 conv (torchvision's
    ResNet v1.5); the first block of each stage has a 1x1 projection
    shortcut. As in demo:resnet18, the last conv of each branch and the
    projection get half the He gain.
    """
    g = _GraphBuilder(_SEED + 50)
    x = g.maxpool(g.relu(g.conv("input", 3, 64, 7, stride=2)))
    cin = 64
    for width, repeats, first_stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        cout = 4 * width
        for i in range(repeats):
            stride = first_stride if i == 0 else 1
            branch = g.relu(g.conv(x, cin, width, 1))
            branch = g.relu(g.conv(branch, width, width, 3, stride=stride))
            branch = g.conv(branch, width, cout, 1, gain=1.0)
            shortcut = x if i > 0 else g.conv(x, cin, cout, 1, stride, gain=1.0)
            x = g.relu(g.add(branch, shortcut))
            cin = cout
    return g.model("resnet50", "input", res, g.classifier(x, cin, 1000), 1000)


def _make_divisible(value: float, divisor: int = 8) -> int:
    """Round channels to a multiple of 8, never down by more than 10% (the MobileNet papers' rule)."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


# (kernel, expanded channels, output channels, squeeze-excite, hard-swish, stride)
# of MobileNetV3-Small's bottlenecks, from Table 2 of the paper
_MOBILENETV3_SMALL_CONFIG = (
    (3, 16, 16, True, False, 2),
    (3, 72, 24, False, False, 2),
    (3, 88, 24, False, False, 1),
    (5, 96, 40, True, True, 2),
    (5, 240, 40, True, True, 1),
    (5, 240, 40, True, True, 1),
    (5, 120, 48, True, True, 1),
    (5, 144, 48, True, True, 1),
    (5, 288, 96, True, True, 2),
    (5, 576, 96, True, True, 1),
    (5, 576, 96, True, True, 1),
)


def mobilenetv3_small(res: int = 224) -> onnx.ModelProto:
    """MobileNetV3-Small (width 1.0), BatchNorm folded, as torchvision's mobilenet_v3_small exports at opset 13.

    Hard-swish is x * HardSigmoid(x); squeeze-excite is GlobalAveragePool,
    1x1 conv to a quarter of the expanded channels (rounded to 8), ReLU,
    1x1 conv, HardSigmoid and Mul. Head: 1x1 conv to 576, pool, a 1024-wide
    dense layer with hard-swish, the 1000-way classifier.
    """
    g = _GraphBuilder(_SEED + 3)
    x = g.hard_swish(g.conv("input", 3, 16, 3, stride=2))
    cin = 16
    for kernel, hidden, cout, se, hs, stride in _MOBILENETV3_SMALL_CONFIG:
        act, gain = (g.hard_swish, _HARD_SWISH_GAIN) if hs else (g.relu, 2.0)
        y = x if hidden == cin else act(g.conv(x, cin, hidden, 1, gain=1.0))
        y = act(g.conv(y, hidden, hidden, kernel, stride=stride, group=hidden, gain=gain))
        if se:
            y = g.squeeze_excite(y, hidden, _make_divisible(hidden // 4), (g.relu, 2.0), g.hard_sigmoid, gain)
            gain *= _GATE_GAIN
        y = g.conv(y, hidden, cout, 1, gain=gain / 2)
        x = g.add(x, y) if stride == 1 and cin == cout else y
        cin = cout
    x = g.hard_swish(g.conv(x, cin, 576, 1))
    x = g.hard_swish(g.dense(g.pool_flatten(x), 576, 1024, gain=_HARD_SWISH_GAIN))
    return g.model("mobilenetv3-small", "input", res, g.dense(x, 1024, 1000), 1000)


def shufflenetv2(res: int = 224) -> onnx.ModelProto:
    """ShuffleNetV2 x1.0, BatchNorm folded, as torchvision's shufflenet_v2_x1_0 exports.

    Stages of 4, 8 and 4 units with 116, 232 and 464 channels, conv5 to 1024.
    A stride-1 unit splits the channels in two (Split), transforms one half
    (1x1, depthwise 3x3, 1x1) and concatenates; a stride-2 unit runs both
    branches on the whole input. Each unit ends with a channel shuffle of
    two groups as Reshape, Transpose and Reshape.
    """
    g = _GraphBuilder(_SEED + 20)
    x = g.maxpool(g.relu(g.conv("input", 3, 24, 3, stride=2)))
    cin, size = 24, res // 4
    for cout, repeats in ((116, 4), (232, 8), (464, 4)):
        half = cout // 2
        for i in range(repeats):
            if i == 0:
                size //= 2
                left = g.conv(x, cin, cin, 3, stride=2, group=cin, gain=1.0)
                left = g.relu(g.conv(left, cin, half, 1))
                right, right_in, stride = x, cin, 2
            else:
                left, right = g.split_channels(x, cout)
                right_in, stride = half, 1
            right = g.relu(g.conv(right, right_in, half, 1))
            right = g.conv(right, half, half, 3, stride=stride, group=half, gain=1.0)
            right = g.relu(g.conv(right, half, half, 1))
            x = g.concat([left, right])
            x = g._node("Reshape", [x, g.shape_const([1, 2, half, size, size])])
            x = g._node("Transpose", [x], perm=[0, 2, 1, 3, 4])
            x = g._node("Reshape", [x, g.shape_const([1, cout, size, size])])
            cin = cout
    x = g.relu(g.conv(x, cin, 1024, 1))
    return g.model("shufflenetv2", "input", res, g.classifier(x, 1024, 1000), 1000)


# (expansion, kernel, stride, output channels, repeats) of EfficientNet-B0's stages, from Table 1 of the paper
_EFFICIENTNET_B0_CONFIG = (
    (1, 3, 1, 16, 1),
    (6, 3, 2, 24, 2),
    (6, 5, 2, 40, 2),
    (6, 3, 2, 80, 3),
    (6, 5, 1, 112, 3),
    (6, 5, 2, 192, 4),
    (6, 3, 1, 320, 1),
)


def efficientnet_b0(res: int = 224) -> onnx.ModelProto:
    """EfficientNet-B0, BatchNorm folded, as torchvision's efficientnet_b0 exports (no stochastic depth at inference).

    MBConv blocks: 1x1 expansion, depthwise 3x3 or 5x5, squeeze-excite to a
    quarter of the block's input channels (SiLU, then Sigmoid), 1x1
    projection, residual add where the shape allows. SiLU is x * Sigmoid(x).
    Head: 1x1 conv to 1280, pool, the 1000-way classifier.
    """
    g = _GraphBuilder(_SEED + 30)
    x = g.silu(g.conv("input", 3, 32, 3, stride=2))
    cin = 32
    for expansion, kernel, first_stride, cout, repeats in _EFFICIENTNET_B0_CONFIG:
        for i in range(repeats):
            stride = first_stride if i == 0 else 1
            hidden = cin * expansion
            y = x if expansion == 1 else g.silu(g.conv(x, cin, hidden, 1, gain=1.0))
            y = g.silu(g.conv(y, hidden, hidden, kernel, stride=stride, group=hidden, gain=_SILU_GAIN))
            y = g.squeeze_excite(y, hidden, max(1, cin // 4), (g.silu, _SILU_GAIN), g.sigmoid, _SILU_GAIN)
            y = g.conv(y, hidden, cout, 1, gain=_SILU_GAIN * _GATE_GAIN / 2)
            x = g.add(x, y) if stride == 1 and cin == cout else y
            cin = cout
    x = g.silu(g.conv(x, cin, 1280, 1))
    return g.model("efficientnet-b0", "input", res, g.classifier(x, 1280, 1000), 1000)


#: width, heads and MLP width of the demo transformer blocks
_TRANSFORMER = (128, 4, 256)
_TRANSFORMER_BERT = (768, 12, 3072)  # BERT-base
_TRANSFORMER_OPSET = 17  # LayerNormalization, as PyTorch exports it


def _encoder_block(name: str, seed: int, seq: int, width: int, heads: int, hidden: int) -> onnx.ModelProto:
    """One pre-norm transformer encoder block on a [1, seq, width] input, as PyTorch exports it."""
    head = width // heads
    g = _GraphBuilder(seed)
    rng = g._rng

    def const(kind: str, array: np.ndarray) -> str:
        return g._const(kind, np.asarray(array, dtype=np.float32))

    def linear(x: str, cin: int, cout: int) -> str:
        w = const("w", rng.normal(0.0, np.sqrt(1.0 / cin), (cin, cout)))
        return g._node("Add", [g._node("MatMul", [x, w]), const("b", rng.normal(0.0, 0.02, cout))])

    def layer_norm(x: str) -> str:
        scale, bias = const("ln_g", 1.0 + rng.normal(0.0, 0.02, width)), const("ln_b", rng.normal(0.0, 0.02, width))
        return g._node("LayerNormalization", [x, scale, bias], axis=-1, epsilon=1e-5)

    def heads_first(x: str) -> str:  # [1, S, D] -> [1, H, S, Dh]
        return g._node("Transpose", [g._node("Reshape", [x, g.shape_const([1, seq, heads, head])])], perm=[0, 2, 1, 3])

    x = "input"
    y = layer_norm(x)
    q, k, v = (heads_first(linear(y, width, width)) for _ in range(3))
    scores = g._node("Mul", [g._node("MatMul", [q, g._node("Transpose", [k], perm=[0, 1, 3, 2])]), const("scale", np.array(head**-0.5))])
    attn = g._node("MatMul", [g._node("Softmax", [scores], axis=-1), v])
    attn = g._node("Reshape", [g._node("Transpose", [attn], perm=[0, 2, 1, 3]), g.shape_const([1, seq, width])])
    x = g.add(x, linear(attn, width, width))
    y = linear(layer_norm(x), width, hidden)
    erf = g._node("Erf", [g._node("Div", [y, const("sqrt2", np.array(np.sqrt(2.0)))])])
    y = g._node("Mul", [g._node("Mul", [y, g._node("Add", [erf, const("one", np.array(1.0))])]), const("half", np.array(0.5))])
    out = g.add(x, linear(y, hidden, width))
    graph = helper.make_graph(
        g.nodes,
        name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, seq, width])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, seq, width])],
        g.inits,
    )
    model = helper.make_model(graph, producer_name="edgetune.demo", opset_imports=[helper.make_opsetid("", _TRANSFORMER_OPSET)])
    onnx.checker.check_model(model)
    return model


def transformer(seq: int = 32) -> onnx.ModelProto:
    """A pre-norm transformer encoder block as PyTorch exports it (``@N`` is the sequence length).

    LayerNorm, multi-head self-attention with MatMul and Softmax, an erf-GELU
    MLP and two residual adds; width 128, 4 heads, MLP 256.
    """
    return _encoder_block("transformer", _SEED + 7, seq, *_TRANSFORMER)


def transformer_bert(seq: int = 128) -> onnx.ModelProto:
    """The demo:transformer block at BERT-base width: 768, 12 heads, MLP 3072 (``@N`` is the sequence length)."""
    return _encoder_block("transformer-bert", _SEED + 768, seq, *_TRANSFORMER_BERT)


# CNNs accept any resolution >= 32 that is a multiple of 32 (their total stride):
# 224 by default, e.g. 96 or 128 for quicker tuning; @N of a transformer is its
# sequence length, a multiple of 8.
DEMOS: dict[str, _Demo] = {
    "tiny-cnn": _Demo(tiny_cnn, default_res=32, min_res=8, res_multiple=1),
    "resnet18": _Demo(resnet18, default_res=224, min_res=32, res_multiple=32),
    "mobilenetv1": _Demo(mobilenetv1, default_res=224, min_res=32, res_multiple=32),
    "mobilenetv2": _Demo(mobilenetv2, default_res=224, min_res=32, res_multiple=32),
    "squeezenet": _Demo(squeezenet, default_res=224, min_res=32, res_multiple=32),
    # @N is the sequence length for the transformer block
    "transformer": _Demo(transformer, default_res=32, min_res=8, res_multiple=8),
    "resnet50": _Demo(resnet50, default_res=224, min_res=32, res_multiple=32),
    "mobilenetv3-small": _Demo(mobilenetv3_small, default_res=224, min_res=32, res_multiple=32),
    "squeezenet1.0": _Demo(squeezenet10, default_res=224, min_res=32, res_multiple=32),
    # the same builder as "squeezenet" (byte-identical ONNX), under its version's name
    "squeezenet1.1": _Demo(squeezenet, default_res=224, min_res=32, res_multiple=32),
    "shufflenetv2": _Demo(shufflenetv2, default_res=224, min_res=32, res_multiple=32),
    "efficientnet-b0": _Demo(efficientnet_b0, default_res=224, min_res=32, res_multiple=32),
    "transformer-bert": _Demo(transformer_bert, default_res=128, min_res=8, res_multiple=8),
}

#: the zoo a schedule library is built from: each CNN at 224 and 128, each transformer at sequence length 32 and 128
ZOO: tuple[str, ...] = tuple(
    f"demo:{name}@{res}"
    for name in (
        "resnet18", "resnet50", "mobilenetv1", "mobilenetv2", "mobilenetv3-small",
        "squeezenet1.0", "squeezenet1.1", "shufflenetv2", "efficientnet-b0",
    )
    for res in (224, 128)
) + tuple(f"demo:{name}@{seq}" for name in ("transformer", "transformer-bert") for seq in (32, 128))


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
