"""Integer convolutions and dense layers in the form the target's dot-product instruction reads.

A quantized model's integer operators (``conv2d``/``matmul`` of int8 data and
constant int8 weights, ``out_dtype="int32"``, then a bias and the requantize
epilogue: the canonical form of the quantize pass) become one ``call_tir`` each
of an int8 compute whose innermost loops are the instruction's tile
(:mod:`edgetune.search.int8_space` tensorizes them):

* data channels-last (``NHWC``), so 4 input channels are contiguous: one
  transpose from ``NCHW``, which ``FuseOps`` fuses into the producer's epilogue;
* weights packed here, once, at compile time, into ``[KH, KW, O/L, I/4, L, 4]``
  (``[N/L, K/4, L, 4]`` for dense): ``L`` output channels x 4 input channels per
  tile, contiguous, which the intrinsic reads as one vector (``L`` = 16 for
  AVX-512 VNNI, 8 for AVX-VNNI, 4 for ``sdot``/NEON). TVM 0.27's tensorize does
  not check that a tile is contiguous, and ``RewriteLayout`` does not rewrite a
  tensorized block's weight, so the graph guarantees it. Output channels are
  zero-padded to whole tiles and sliced off after;
* for VNNI, which multiplies *unsigned* activations, the activation is shifted
  by +128 as uint8 and ``-128 * sum(w)`` per output channel is folded into the
  int32 bias that follows (or added where none does).

Input channels (a dense layer's ``K``) that are not a multiple of 4 (an RGB
stem, Keras MobileNets at width multipliers such as 0.2: 3, 25, 51 channels)
are zero-padded to one: the weights here, the activation by a ``pad`` that
``FuseOps`` fuses into its producer. A zero weight makes the padded lanes add
nothing, whatever the activation holds there.

Depthwise convolutions (one input channel per group: no 4-channel dot
product) stay plain int8 multiplies, but as one kernel each with their padding
inside: the canonical form pads explicitly with the input's zero point, and
that ``pad`` (after the previous kernel's unblocking reshape) was a kernel of
its own, a copy of the whole activation, between two convolutions; 0.7 of
MobileNetV2 int8's 3.0 ms of kernels. Here the depthwise compute reads the
zero point wherever a kernel tap falls in the padding (one block, so its
requantization fuses into it as into any convolution), and the reshape before
it is left alone.

Left as they were (plain int8 schedules, and said in the pass's detail):
grouped convolutions, implicit padding (the canonical form pads explicitly),
and non-constant weights. A target with no instruction (``none``) keeps its
convolutions and dense layers as they were; its depthwise ones still take their padding inside.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
from tvm import relax, te
from tvm.ir.expr import Constant

from ..common.int8_isa import OUTPUT_LANES, int8_instruction, wants_unsigned_activations
from .int8_epilogue import sink_unblocking
from .relax_exprs import is_op as _is_op, static_shape as _shape

#: a depthwise convolution's kernel axes in (KH, KW, C, multiplier 1) order, by data layout and kernel layout
_DEPTHWISE_KERNEL_TO_HWC = {"NHWC": {"HWOI": (0, 1, 2, 3), "HWIO": (0, 1, 3, 2)}, "NCHW": {"OIHW": (2, 3, 0, 1)}}
#: (data layout, kernel layout) of the int8 convolutions rewritten, and the kernel axes in (KH, KW, O, I) order
_KERNEL_TO_HWOI = {("NCHW", "OIHW"): (2, 3, 0, 1), ("NHWC", "HWIO"): (0, 1, 3, 2), ("NHWC", "OHWI"): (1, 2, 0, 3)}


def int8_kernels(mod: tvm.IRModule, target: Any) -> tuple[tvm.IRModule, str]:
    """``mod`` with its int8 convolutions and dense layers in the instruction's form; the detail says how many."""
    instruction = int8_instruction(target)
    lanes = OUTPUT_LANES.get(instruction)  # None: no instruction; only the depthwise convolutions are rewritten
    rewriter = _Int8Kernels(mod, lanes, wants_unsigned_activations(instruction))
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gvar, rewriter.visit_expr(func))
    out = rewriter.builder_.get()
    for gvar, func in out.functions_items():
        if isinstance(func, relax.Function):
            out[gvar] = relax.analysis.remove_all_unused(func)
    out = relax.transform.Normalize()(out)
    if lanes is None:
        detail = f"no int8 dot-product instruction on this target ({instruction})"
    else:
        detail = f"{rewriter.converted} int8 kernels for {instruction}"
    if rewriter.converted:
        out, moved = sink_unblocking(out)
        if moved:
            detail += f", their epilogues fused in ({moved} elementwise ops moved before the unblocking)"
    if rewriter.depthwise:
        detail += f"; {rewriter.depthwise} depthwise as one kernel with their zero-point padding"
    if rewriter.left and lanes is not None:
        detail += f"; {len(rewriter.left)} left as plain int8 ({', '.join(sorted(set(rewriter.left)))})"
    return (out if rewriter.converted or rewriter.depthwise else mod), detail


def _dtype(expr: relax.Expr) -> str:
    return str(getattr(getattr(expr, "ty", None), "dtype", ""))


def _conv_compute(x: te.Tensor, w: te.Tensor, strides: tuple[int, int], dilation: tuple[int, int],
                  out_hw: tuple[int, int]) -> te.Tensor:
    """NHWC data x packed ``[KH, KW, O/L, I/4, L, 4]`` weights -> ``[N, OH, OW, O/L, L]`` int32."""
    kh, kw, _, in_quads, _, _ = (int(d) for d in w.shape)
    ry, rx = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")
    ko, ki = te.reduce_axis((0, in_quads), "ko"), te.reduce_axis((0, 4), "ki")
    (sh, sw), (dh, dw) = strides, dilation
    return te.compute(
        (x.shape[0], out_hw[0], out_hw[1], w.shape[2], w.shape[4]),
        lambda n, y, xx, oo, oi: te.sum(
            x[n, y * sh + ry * dh, xx * sw + rx * dw, ko * 4 + ki].astype("int32")
            * w[ry, rx, oo, ko, oi, ki].astype("int32"),
            axis=[ry, rx, ko, ki],
        ),
        name="conv2d_int8",
    )


def _depthwise_compute(x: te.Tensor, w: te.Tensor, strides: tuple[int, int], dilation: tuple[int, int],
                       pads: tuple[int, int, int, int], pad_value: int, out_hw: tuple[int, int]) -> te.Tensor:
    """NHWC int8 data x ``[KH, KW, C]`` int8 weights -> ``[N, OH, OW, C]`` int32, padded (top, left, bottom, right)
    with ``pad_value`` (the input's zero point): a tap in the padding reads it, in the one reduction block."""
    top, left, _bottom, _right = pads
    height, width = int(x.shape[1]), int(x.shape[2])
    kh, kw, _ = (int(d) for d in w.shape)
    ry, rx = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")
    (sh, sw), (dh, dw) = strides, dilation

    def tap(n: Any, y: Any, xx: Any, c: Any) -> Any:
        """The input under one kernel tap: the zero point where it falls in the padding."""
        iy, ix = y * sh + ry * dh - top, xx * sw + rx * dw - left
        if not any(pads):
            return x[n, iy, ix, c]
        inside = tvm.tirx.all(iy >= 0, iy < height, ix >= 0, ix < width)
        return tvm.tirx.if_then_else(inside, x[n, iy, ix, c], tvm.tirx.const(pad_value, x.dtype))

    return te.compute(
        (x.shape[0], out_hw[0], out_hw[1], w.shape[2]),
        lambda n, y, xx, c: te.sum(tap(n, y, xx, c).astype("int32") * w[ry, rx, c].astype("int32"), axis=[ry, rx]),
        name="depthwise_conv2d_int8",
    )


def _dense_compute(x: te.Tensor, w: te.Tensor) -> te.Tensor:
    """``[M, K]`` data x packed ``[N/L, K/4, L, 4]`` weights -> ``[M, N/L, L]`` int32."""
    ko, ki = te.reduce_axis((0, w.shape[1]), "ko"), te.reduce_axis((0, 4), "ki")
    return te.compute(
        (x.shape[0], w.shape[0], w.shape[2]),
        lambda m, oo, oi: te.sum(x[m, ko * 4 + ki].astype("int32") * w[oo, ko, oi, ki].astype("int32"), axis=[ko, ki]),
        name="dense_int8",
    )


def _to_quads(weight: np.ndarray) -> np.ndarray:
    """``[..., I]`` weights with ``I`` zero-padded to a multiple of 4: the padded lanes multiply to nothing."""
    extra = -weight.shape[-1] % 4
    if not extra:
        return weight
    return np.concatenate([weight, np.zeros((*weight.shape[:-1], extra), weight.dtype)], axis=-1)


def _pack(weight: np.ndarray, lanes: int) -> tuple[np.ndarray, int]:
    """``[..., O, I]`` weights -> ``[..., O/L, I/4, L, 4]``, output channels zero-padded to whole tiles."""
    *lead, out_ch, in_ch = weight.shape
    padded = -(-out_ch // lanes) * lanes
    if padded != out_ch:
        weight = np.concatenate([weight, np.zeros((*lead, padded - out_ch, in_ch), weight.dtype)], axis=-2)
    tiles = weight.reshape(*lead, padded // lanes, lanes, in_ch // 4, 4)
    order = list(range(len(lead))) + [len(lead), len(lead) + 2, len(lead) + 1, len(lead) + 3]
    return np.ascontiguousarray(tiles.transpose(order)), padded


@relax.expr_functor.mutator
class _Int8Kernels(relax.PyExprMutator):
    """Rewrites int8 ``conv2d``/``matmul`` calls (see the module docstring); counts what it did and did not."""

    def __init__(self, mod: tvm.IRModule, lanes: int | None, unsigned: bool) -> None:
        super().__init__(mod)
        self.lanes, self.unsigned = lanes, unsigned
        self.converted = 0
        self.depthwise = 0  # depthwise convolutions made one kernel with their padding (not instruction kernels)
        self.left: list[str] = []
        self.compensation: dict[relax.Var, np.ndarray] = {}  # int32 result var -> the VNNI offset still to add

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        conv, dense = (_is_op(call, op) and _dtype(call.args[0]) == "int8" and call.attrs.out_dtype == "int32"
                       for op in ("relax.nn.conv2d", "relax.matmul"))
        if conv and int(call.attrs.groups) != 1:
            new = self._depthwise(call)  # on every target: no instruction takes it
        elif self.lanes is None:  # no instruction: the depthwise convolutions only
            new = None
        elif conv:
            new = self._conv(call)
        elif dense:
            new = self._dense(call)
        elif _is_op(call, "relax.add") and isinstance(call.args[1], Constant):
            new = self._fold_compensation(call)
        else:
            new = None
        return call if new is None else new

    def _leave(self, why: str) -> None:
        self.left.append(why)
        return None

    def _conv(self, call: relax.Call) -> relax.Expr | None:
        attrs, (data, weight) = call.attrs, call.args
        layouts = (str(attrs.data_layout), str(attrs.kernel_layout))
        data_shape, out_shape = _shape(data), _shape(call)
        if not isinstance(weight, Constant) or _dtype(weight) != "int8":
            return self._leave("weights not int8 constants")
        if layouts not in _KERNEL_TO_HWOI or str(attrs.out_layout) not in ("", layouts[0]) or None in (data_shape, out_shape):
            return self._leave(f"layout {layouts[0]}/{layouts[1]}")
        if any(int(p) for p in attrs.padding):
            return self._leave("implicit padding")
        hwoi = weight.value.numpy().transpose(_KERNEL_TO_HWOI[layouts])
        packed, padded = _pack(_to_quads(hwoi), self.lanes)
        x = data if layouts[0] == "NHWC" else self.builder_.emit(relax.op.permute_dims(data, [0, 2, 3, 1]))
        x = self._activations(self._quads(x, hwoi.shape[3]))
        out_hw = (out_shape[1], out_shape[2]) if layouts[0] == "NHWC" else (out_shape[2], out_shape[3])
        blocked = self.builder_.emit(self.builder_.call_te(
            _conv_compute, x, relax.const(packed), tuple(int(s) for s in attrs.strides),
            tuple(int(d) for d in attrs.dilation), out_hw, primfunc_name_hint="conv2d_int8"))
        out_ch = hwoi.shape[2]
        y = self._unblock(blocked, [out_shape[0], *out_hw, padded], out_ch, axis=3)
        if layouts[0] == "NCHW":
            y = self.builder_.emit(relax.op.permute_dims(y, [0, 3, 1, 2]))
        shape = (1, out_ch, 1, 1) if layouts[0] == "NCHW" else (1, 1, 1, out_ch)
        return self._compensated(y, hwoi.astype(np.int64).sum(axis=(0, 1, 3)).reshape(shape))

    def _depthwise(self, call: relax.Call) -> relax.Expr | None:
        """A depthwise int8 convolution as one kernel with the explicit zero-point ``pad`` before it taken inside."""
        attrs, (data, weight) = call.attrs, call.args
        layout, kernel_layout = str(attrs.data_layout), str(attrs.kernel_layout)
        data_shape, out_shape = _shape(data), _shape(call)
        if layout not in _DEPTHWISE_KERNEL_TO_HWC or kernel_layout not in _DEPTHWISE_KERNEL_TO_HWC[layout] \
                or str(attrs.out_layout) not in ("", layout) or None in (data_shape, out_shape):
            return self._leave("grouped or depthwise")
        channels = data_shape[layout.index("C")]
        if not (int(attrs.groups) == channels == out_shape[layout.index("C")]):
            return self._leave("grouped")
        if not isinstance(weight, Constant) or _dtype(weight) != "int8" or any(int(p) for p in attrs.padding):
            return self._leave("grouped or depthwise")
        hwc1 = weight.value.numpy().transpose(_DEPTHWISE_KERNEL_TO_HWC[layout][kernel_layout])
        if hwc1.shape[2:] != (channels, 1):
            return self._leave("grouped or depthwise")
        hwc = hwc1[..., 0]
        x, pads, pad_value = data, (0, 0, 0, 0), 0
        bound = self.lookup_binding(data) if isinstance(data, relax.Var) else None
        if _is_op(bound, "relax.nn.pad") and str(bound.attrs.pad_mode) == "constant":
            widths = [int(v) for v in bound.attrs.pad_width]
            h, w = layout.index("H"), layout.index("W")
            if all(widths[i] == 0 for i in range(len(widths)) if i // 2 not in (h, w)):
                x, pad_value = bound.args[0], int(bound.attrs.pad_value)
                pads = (widths[2 * h], widths[2 * w], widths[2 * h + 1], widths[2 * w + 1])
        if layout == "NCHW":
            x = self.builder_.emit(relax.op.permute_dims(x, [0, 2, 3, 1]))
        out_hw = (out_shape[1], out_shape[2]) if layout == "NHWC" else (out_shape[2], out_shape[3])
        y = self.builder_.call_te(
            _depthwise_compute, x, relax.const(np.ascontiguousarray(hwc)), tuple(int(s) for s in attrs.strides),
            tuple(int(d) for d in attrs.dilation), pads, pad_value, out_hw, primfunc_name_hint="depthwise_conv2d_int8")
        self.depthwise += 1
        # the call itself, not a variable bound to it: an alias binding in its place keeps FuseOps from putting the
        # requantization after it into its kernel
        return relax.op.permute_dims(self.builder_.emit(y), [0, 3, 1, 2]) if layout == "NCHW" else y

    def _dense(self, call: relax.Call) -> relax.Expr | None:
        data, weight = call.args
        data_shape = _shape(data)
        if not isinstance(weight, Constant) or _dtype(weight) != "int8" or weight.value.numpy().ndim != 2:
            return self._leave("dense weights not 2-D int8 constants")
        if data_shape is None or len(data_shape) != 2:
            return self._leave("dense data not [M, K]")
        nk = weight.value.numpy().T  # [N, K]
        packed, padded = _pack(_to_quads(nk), self.lanes)
        x = self._activations(self._quads(data, nk.shape[1]))
        blocked = self.builder_.emit(self.builder_.call_te(
            _dense_compute, x, relax.const(packed), primfunc_name_hint="dense_int8"))
        y = self._unblock(blocked, [data_shape[0], padded], nk.shape[0], axis=1)
        return self._compensated(y, nk.astype(np.int64).sum(axis=1))

    def _quads(self, x: relax.Expr, channels: int) -> relax.Expr:
        """``x`` (channels last) with its channels zero-padded to a multiple of 4, as :func:`_to_quads` pads weights."""
        extra = -channels % 4
        if not extra:
            return x
        rank = len(_shape(x) or ())
        return self.builder_.emit(relax.op.nn.pad(x, [0, 0] * (rank - 1) + [0, extra]))

    def _activations(self, x: relax.Expr) -> relax.Expr:
        """int8 activations as the instruction multiplies them: uint8 ``x + 128`` for VNNI (wrapping), else as they are."""
        if not self.unsigned:
            return x
        as_u8 = self.builder_.emit(relax.op.astype(x, "uint8"))
        return self.builder_.emit(relax.op.add(as_u8, relax.const(128, "uint8")))

    def _unblock(self, blocked: relax.Expr, shape: list[int], channels: int, axis: int) -> relax.Expr:
        """The blocked result reshaped to its plain shape, the padded output channels sliced off."""
        y = self.builder_.emit(relax.op.reshape(blocked, shape))
        if shape[axis] != channels:
            y = self.builder_.emit(relax.op.strided_slice(y, axes=[axis], begin=[0], end=[channels]))
        self.converted += 1
        return y

    def _compensated(self, y: relax.Expr, weight_sums: np.ndarray) -> relax.Expr:
        """``y`` with the VNNI offset's product taken back out: ``- 128 * sum(w)`` per output channel."""
        if not self.unsigned:
            return y
        offset = (-128 * weight_sums).astype(np.int32)
        var = self.builder_.emit(y) if not isinstance(y, relax.Var) else y
        self.compensation[var] = offset
        return relax.op.add(var, relax.const(offset))

    def _fold_compensation(self, call: relax.Call) -> relax.Expr | None:
        """``(conv + offset) + bias`` as ``conv + (bias + offset)``: the offset folded into the int32 bias."""
        source = call.args[0]
        bound = self.lookup_binding(source) if isinstance(source, relax.Var) else None
        if not (_is_op(bound, "relax.add") and isinstance(bound.args[0], relax.Var) and bound.args[0] in self.compensation):
            return None
        bias = call.args[1].value.numpy()
        if bias.dtype != np.int32:
            return None
        offset = self.compensation[bound.args[0]]
        return relax.op.add(bound.args[0], relax.const((bias.astype(np.int64) + offset).astype(np.int32)))
