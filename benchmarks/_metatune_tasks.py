"""Operator tasks for MetaTune's corpus and its held-out benchmark: TE programs as MetaSchedule tasks.

Each entry is ``(name, IRModule, weight)``, what :class:`edgetune.tuning.Components`
takes as ``tasks``. The corpus covers the operator kinds the shipped model must
know (conv2d, depthwise and grouped conv2d, dense/matmul, fused bias + ReLU
epilogues); the held-out set has other shapes and a transformer-style matmul.
"""

from __future__ import annotations

from typing import Any, Callable


def _module(build: Callable[[], list[Any]]) -> Any:
    import tvm
    from tvm import te

    # without layout_free_buffers: MetaSchedule would add layout rewrites to the traces, whose
    # IndexMap TuningRecord.as_json cannot serialise (the history could not store them)
    func = te.create_prim_func(build()).with_attr("global_symbol", "main").without_attr("layout_free_buffers")
    return tvm.IRModule({"main": func})


def conv2d(n: int, h: int, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, depthwise: bool = False,
           relu: bool = True) -> Any:
    """NHWC conv2d (grouped or depthwise) with a fused bias + ReLU epilogue."""
    from tvm import te, topi

    def build() -> list[Any]:
        data = te.placeholder((n, h, h, cin), name="data")
        if depthwise:
            weight = te.placeholder((k, k, cin, 1), name="weight")
            out = topi.nn.depthwise_conv2d_nhwc(data, weight, stride, k // 2, 1)
        elif groups > 1:
            weight = te.placeholder((k, k, cin // groups, cout), name="weight")
            out = topi.nn.group_conv2d_nhwc(data, weight, stride, k // 2, 1, groups)
        else:
            weight = te.placeholder((k, k, cin, cout), name="weight")
            out = topi.nn.conv2d_nhwc(data, weight, stride, k // 2, 1)
        bias = te.placeholder((out.shape[-1],), name="bias")
        out = topi.add(out, bias)
        if relu:
            out = topi.nn.relu(out)
        return [data, weight, bias, out]

    return _module(build)


def dense(m: int, k: int, n: int, relu: bool = True) -> Any:
    """``x @ w.T + b`` (ReLU optional): a fully connected layer."""
    from tvm import te, topi

    def build() -> list[Any]:
        x, w, b = te.placeholder((m, k), name="x"), te.placeholder((n, k), name="w"), te.placeholder((n,), name="b")
        out = topi.add(topi.nn.dense(x, w), b)
        return [x, w, b, topi.nn.relu(out) if relu else out]

    return _module(build)


def batch_matmul(b: int, m: int, k: int, n: int) -> Any:
    """Batched ``x @ y.T`` as in attention scores."""
    from tvm import te, topi

    def build() -> list[Any]:
        x, y = te.placeholder((b, m, k), name="x"), te.placeholder((b, n, k), name="y")
        return [x, y, topi.nn.batch_matmul(x, y)]

    return _module(build)


def corpus_tasks() -> list[tuple[str, Any, int]]:
    """The shipped model's training tasks (small shapes: a candidate builds and runs in well under a second)."""
    return [
        ("conv3x3_16x16_16to32", conv2d(1, 16, 16, 32, 3), 1),
        ("conv3x3_8x8_32to32", conv2d(1, 8, 32, 32, 3), 1),
        ("conv1x1_16x16_8to16", conv2d(1, 16, 8, 16, 1), 1),
        ("dwconv3x3_16x16_32", conv2d(1, 16, 32, 32, 3, depthwise=True), 1),
        ("gconv3x3_16x16_32g4", conv2d(1, 16, 32, 32, 3, groups=4), 1),
        ("dense_1x256to128", dense(1, 256, 128), 1),
        ("matmul_64x64x64", dense(64, 64, 64, relu=False), 1),
        ("bmm_4x32x32x32", batch_matmul(4, 32, 32, 32), 1),
        *extended_corpus_tasks(),
    ]


def extended_corpus_tasks() -> list[tuple[str, Any, int]]:
    """More of the layer kinds real CNNs and transformer blocks have (strided, stem, expand/project, wider
    depthwise, other matmul shapes), still small, none of them a held-out shape. The first shipped model had
    only the eight tasks above; with 298 records its first-batch ranking of held-out tasks was worse than random.
    """
    return [
        ("conv3x3_s2_16x16_16to32", conv2d(1, 16, 16, 32, 3, stride=2), 1),
        ("conv3x3_12x12_24to48", conv2d(1, 12, 24, 48, 3), 1),
        ("conv7x7_s2_32x32_3to16", conv2d(1, 32, 3, 16, 7, stride=2), 1),
        ("conv5x5_8x8_8to16", conv2d(1, 8, 8, 16, 5), 1),
        ("conv1x1_8x8_64to32", conv2d(1, 8, 64, 32, 1), 1),
        ("conv1x1_20x20_16to64", conv2d(1, 20, 16, 64, 1), 1),
        ("conv1x1_20x20_64to16_linear", conv2d(1, 20, 64, 16, 1, relu=False), 1),
        ("dwconv3x3_s2_16x16_32", conv2d(1, 16, 32, 32, 3, stride=2, depthwise=True), 1),
        ("dwconv3x3_10x10_96", conv2d(1, 10, 96, 96, 3, depthwise=True), 1),
        ("gconv3x3_12x12_64g8", conv2d(1, 12, 64, 64, 3, groups=8), 1),
        ("dense_1x512to64", dense(1, 512, 64), 1),
        ("dense_16x64to128", dense(16, 64, 128), 1),
        ("matmul_32x96x32", dense(32, 96, 32, relu=False), 1),
        ("bmm_2x16x64x16", batch_matmul(2, 16, 64, 16), 1),
        ("bmm_6x48x16x48", batch_matmul(6, 48, 16, 48), 1),
        ("bmm_12x8x32x8", batch_matmul(12, 8, 32, 8), 1),
    ]


def heldout_tasks() -> list[tuple[str, Any, int]]:
    """Shapes and operators the corpus never had: ResNet/MobileNet-like layers and transformer matmuls."""
    return [
        ("conv3x3_s2_28x28_32to64", conv2d(1, 28, 32, 64, 3, stride=2), 1),
        ("dwconv3x3_28x28_48", conv2d(1, 28, 48, 48, 3, depthwise=True), 1),
        ("conv1x1_14x14_48to96", conv2d(1, 14, 48, 96, 1), 1),
        ("mlp_32x128to256", dense(32, 128, 256), 1),
        ("attn_8x24x40x24", batch_matmul(8, 24, 40, 24), 1),
    ]
