"""Canonical-form int8 models (what the quantize pass emits) built by hand, and their numpy reference.

conv (explicit pad with the zero point) + int32 bias + requantize (scale, round, zero point, clip, int8) + ReLU
as the clip's lower bound, twice, then a dense layer with the same epilogue.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Int8Layer:
    weight: np.ndarray  # int8, OIHW (conv) or [K, N] (dense)
    bias: np.ndarray  # int32, per output channel
    scale: np.ndarray  # float32, per output channel
    zero_point: int
    pad: int = 0
    stride: int = 1


def make_layers(seed: int = 0, channels: tuple[int, int, int] = (8, 32, 24), classes: int = 40) -> list[Int8Layer]:
    rng = np.random.default_rng(seed)
    c0, c1, c2 = channels

    def conv(o: int, i: int, pad: int, stride: int) -> Int8Layer:
        w = rng.integers(-127, 128, (o, i, 3, 3)).astype("int8")
        # scales that spread the outputs over the int8 range (inputs' spread about 60): none saturates
        norms = np.sqrt((w.astype(np.float64) ** 2).sum(axis=(1, 2, 3)))
        return Int8Layer(w, rng.integers(-2000, 2000, o).astype("int32"),
                         (rng.uniform(0.5, 1.5, o) * 50 / (norms * 60)).astype("float32"), -5, pad, stride)

    k = c2 * 4 * 4
    dense_w = rng.integers(-127, 128, (k, classes)).astype("int8")
    return [conv(c1, c0, 1, 1), conv(c2, c1, 0, 2),
            Int8Layer(dense_w, rng.integers(-2000, 2000, classes).astype("int32"),
                      (50 / (np.sqrt((dense_w.astype(np.float64) ** 2).sum(axis=0)) * 60)).astype("float32"), -60)]


INPUT_SHAPE = (1, 8, 11, 11)  # NCHW; conv 3x3 pad 1 -> 11x11, conv 3x3 stride 2 -> 5x5 ... see make_model


def requantize(acc: np.ndarray, layer: Int8Layer, channel_axis: int) -> np.ndarray:
    shape = [1] * acc.ndim
    shape[channel_axis] = -1
    scaled = (acc + layer.bias.reshape(shape)).astype("float32") * layer.scale.reshape(shape)
    return np.clip(np.round(scaled) + np.float32(layer.zero_point), layer.zero_point, 127).astype("int8")


def reference(x: np.ndarray, layers: list[Int8Layer], zero_point_in: int) -> np.ndarray:
    """The model in numpy integer arithmetic (int64 sums), float32 requantization as the graph computes it."""
    act, zp = x, zero_point_in
    for layer in layers[:2]:
        padded = np.pad(act, [(0, 0), (0, 0), (layer.pad, layer.pad), (layer.pad, layer.pad)], constant_values=zp)
        o, _, kh, kw = layer.weight.shape
        n, _, h, w = padded.shape
        oh, ow = (h - kh) // layer.stride + 1, (w - kw) // layer.stride + 1
        acc = np.zeros((n, o, oh, ow), np.int64)
        for a in range(kh):
            for b in range(kw):
                window = padded[:, :, a:a + layer.stride * oh:layer.stride, b:b + layer.stride * ow:layer.stride]
                acc += np.einsum("nchw,oc->nohw", window.astype(np.int64), layer.weight[:, :, a, b].astype(np.int64))
        act, zp = requantize(acc.astype(np.int32), layer, 1), layer.zero_point
    dense = layers[2]
    flat = act[:, :, :4, :4].reshape(act.shape[0], -1).astype(np.int64)
    return requantize((flat @ dense.weight.astype(np.int64)).astype(np.int32), dense, 1)


def make_model(layers: list[Int8Layer], zero_point_in: int):  # noqa: ANN201 - a tvm.IRModule
    """The canonical form in Relax: ``pad`` -> int8 ``conv2d`` (``out_dtype="int32"``) -> ``+ bias`` -> requantize."""
    from tvm import relax

    def requant(bb: relax.BlockBuilder, acc: relax.Expr, layer: Int8Layer, shape: tuple[int, ...]) -> relax.Expr:
        biased = bb.emit(relax.op.add(acc, relax.const(layer.bias.reshape(shape))))
        as_float = bb.emit(relax.op.astype(biased, "float32"))
        scaled = bb.emit(relax.op.multiply(as_float, relax.const(layer.scale.reshape(shape))))
        rounded = bb.emit(relax.op.round(scaled))
        shifted = bb.emit(relax.op.add(rounded, relax.const(np.float32(layer.zero_point))))
        clipped = bb.emit(relax.op.clip(shifted, layer.zero_point, 127))
        return bb.emit(relax.op.astype(clipped, "int8"))

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(INPUT_SHAPE, "int8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            act, zp = x, zero_point_in
            for layer in layers[:2]:
                if layer.pad:
                    p = layer.pad
                    act = bb.emit(relax.op.nn.pad(act, [0, 0, 0, 0, p, p, p, p], pad_value=float(zp)))
                acc = bb.emit(relax.op.nn.conv2d(act, relax.const(layer.weight), strides=layer.stride, padding=0,
                                                 out_dtype="int32"))
                act, zp = requant(bb, acc, layer, (1, -1, 1, 1)), layer.zero_point
            corner = bb.emit(relax.op.strided_slice(act, axes=[2, 3], begin=[0, 0], end=[4, 4]))
            flat = bb.emit(relax.op.reshape(corner, (INPUT_SHAPE[0], -1)))
            dense = layers[2]
            acc = bb.emit(relax.op.matmul(flat, relax.const(dense.weight), out_dtype="int32"))
            out = bb.emit_output(requant(bb, acc, dense, (1, -1)))
        bb.emit_func_output(out)
    return bb.get()
