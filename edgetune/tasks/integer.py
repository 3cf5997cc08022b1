"""Quantized models computed in integers: dequantize -> float layer -> quantize rewritten as int8 kernels.

TVM 0.27's TFLite and ONNX frontends import a full-integer model (TFLite's
int8 operators, ONNX's QuantizeLinear/DequantizeLinear "QDQ") as float
arithmetic between ``R.dequantize`` and ``R.quantize``: it runs, and matches,
but in float32. :func:`integer_arithmetic` matches the convolutions
(ordinary, depthwise and grouped) and dense layers (``R.matmul`` with a
constant weight) of that pattern::

    quantize(act(add(conv2d(dequantize(x_i8, sx, zx), dequantize(W_i8, sw[oc], 0)), bias)), sy, zy) [-> clip]

and writes each as one integer form, the canonical one the integer schedules
(VNNI, ``sdot``) are written for:

1. ``x_i8`` padded explicitly with its zero point ``zx`` (``R.nn.pad``, int8)
   where the layer pads, then ``R.nn.conv2d(x_pad, W_i8, padding=0,
   out_dtype="int32")`` (same strides, dilation, groups and layouts: NHWC/HWIO
   or HWOI for TFLite, NCHW/OIHW for ONNX) or ``R.matmul(x_i8, W_i8,
   out_dtype="int32")``: int8 operands, int32 accumulation. The weights stay
   int8 constants in the layout the frontend gave.
2. ``+ bias_i32``: one int32 constant per output channel, the layer's bias in
   accumulator units (``sx * sw[oc]``) minus the activation zero point's
   contribution ``zx * sum(W[oc])``; left out when it is all zeros.
3. The requantization, elementwise after the accumulator so that FuseOps puts
   it into the convolution's kernel: ``astype(float32) * (sx * sw[oc] / sy)``
   (one float32 per output channel, or one scalar), ``R.round`` (half to even,
   as XNNPACK's QS8 kernels, LiteRT's default int8 path, round), ``+ zy``,
   ``R.clip`` to ``[qmin, qmax]`` narrowed by a ReLU/ReLU6 in float before the
   quantize or a clip on the int8 result after it, then ``astype("int8")``.

The requantization is the float32 one of XNNPACK's QS8/QC8 kernels and ONNX
Runtime's MLAS, not TFLite's reference fixed-point multiply; on the test
fixtures every output equals LiteRT's default (XNNPACK) and ONNX Runtime's,
and a single convolution's differ from TFLite's reference kernels by one
quantum on 0.2% of its values (``tests/test_integer.py``).

Under ``FuseOps`` each layer is one kernel (one MetaSchedule task): the
convolution or matmul, then the bias add, cast, multiply, round, add, clip
and cast. What fuses after it also goes in: a residual add left in float
(``dequantize -> add -> quantize``, MobileNetV2's), and the next layer's
``R.nn.pad`` when this kernel's output has no other consumer; a pad whose
input has several consumers (or a model's input) is a kernel of its own.

uint8 activations (what ONNX Runtime's documentation recommends quantizing to
on x86-64, U8S8) are first made int8 by :func:`signed_activations`: a quantize
to uint8 whose every reader is a dequantize quantizes to int8 with its zero
point less 128, and its dequantizes read it so. ``s * (q - z)`` is the same
value for ``q - 128`` and ``z - 128``, so the model computes what it did.

Anything else stays as the frontend wrote it, in float between dequantize and
quantize (elementwise adds and multiplies, means and average pools,
hard-swish, concats, a layer whose weights have a zero point, a uint8
activation read by other than dequantizes, per-channel activations):
:attr:`IntegerReport.in_float` lists each such quantized operator with why,
never an error.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
from tvm import relax

from .relax_exprs import is_op as _is_op

#: ops that only rearrange a constant weight between its dequantize and the layer (TFLite's depthwise reshape,
#: a dense layer's transpose); applied to the int8 values and the scales alike
_LAYOUT_OPS = {"relax.reshape", "relax.permute_dims", "relax.expand_dims", "relax.squeeze"}
_LAYERS = {"relax.nn.conv2d", "relax.matmul"}
_INT8 = (-128, 127)


@dataclass(frozen=True)
class FloatOp:
    """A quantized operator left in float: the float ops between its dequantizes and its quantize, and why."""

    ops: tuple[str, ...]
    shape: tuple[int, ...]
    reason: str

    @property
    def name(self) -> str:
        return "+".join(self.ops) if self.ops else "requantize"

    def describe(self) -> str:
        return f"{self.name} {'x'.join(map(str, self.shape))}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {"ops": list(self.ops), "shape": list(self.shape), "reason": self.reason, "description": self.describe()}


@dataclass(frozen=True)
class IntegerReport:
    """What :func:`integer_arithmetic` did: the layers now in integers, and the quantized operators left in float."""

    convolutions: int = 0
    depthwise: int = 0
    dense: int = 0
    in_float: tuple[FloatOp, ...] = ()
    #: uint8 activations made int8 first (:func:`signed_activations`)
    unsigned: int = 0

    @property
    def layers(self) -> int:
        return self.convolutions + self.depthwise + self.dense

    def detail(self) -> str:
        """One line for the pass's message: what is integer, and a count of what is left in float, by kind."""
        parts = [f"{count} {what}" for count, what in ((self.convolutions, "convolutions"), (self.depthwise, "depthwise"),
                                                         (self.dense, "dense")) if count]
        line = f"{', '.join(parts) or 'no layer'} in int8"
        if self.in_float:
            kinds = Counter(op.name for op in self.in_float)
            left = ", ".join(f"{name} x{count}" if count > 1 else name for name, count in sorted(kinds.items()))
            line += f"; {len(self.in_float)} quantized operator(s) left in float ({left})"
        if self.unsigned:
            line += f"; {self.unsigned} uint8 activation(s) as int8 (zero points less 128)"
        return line


@dataclass(frozen=True)
class _Quantized:
    """A constant's integer values with its scale and zero point per element (broadcast to its shape)."""

    values: np.ndarray
    scale: np.ndarray
    zero_point: np.ndarray


@dataclass(frozen=True)
class _Rewrite:
    """One layer's integer form, everything computed: what :class:`_Integer` emits in place of ``call``."""

    data: relax.Expr  # the int8 activation, as the original graph binds it
    layer: relax.Call  # the float conv2d / matmul
    weight: np.ndarray  # int8, the layer's weight layout
    bias: np.ndarray  # int32 per output channel, the activation zero point's term included
    multiplier: np.ndarray  # float32 per output channel (or one)
    zero_in: int
    zero_out: int
    bounds: tuple[int, int]
    channel_axis: int  # of the layer's output
    kind: str  # "convolutions", "depthwise" or "dense"


def is_quantized(mod: tvm.IRModule) -> bool:
    """Whether ``mod`` holds a quantize of a computed tensor (a quantized model as a frontend imports it)."""
    return any(_is_op(value, "relax.quantize") for func in _functions(mod) for _var, value in _bindings(func))


def integer_convolutions(mod: tvm.IRModule) -> int:
    """How many convolutions of ``mod`` take int8 data (the ``integer`` pass's, or a model's own)."""
    return sum(
        1 for func in _functions(mod) for _var, value in _bindings(func)
        if _is_op(value, "relax.nn.conv2d") and str(getattr(value.args[0].ty, "dtype", "")) in ("int8", "uint8")
    )


def integer_arithmetic(mod: tvm.IRModule) -> tuple[tvm.IRModule, IntegerReport]:
    """``mod`` with its quantized convolutions and dense layers in integers (see the module's doc), and what was done."""
    original = mod
    mod, unsigned = signed_activations(mod)
    found: dict[Any, _Rewrite] = {}
    in_float: list[FloatOp] = []
    for func in _functions(mod):
        graph = _Graph(func)
        for var, value in graph.bindings:
            if not _is_op(value, "relax.quantize") or not _has_dequantize(graph, value.args[0]):
                continue
            rewrite, reason = _match(graph, value)
            if rewrite is not None:
                key, rewrite = graph.output_of(var, rewrite)
                found[key] = rewrite
            else:
                in_float.append(FloatOp(_float_ops(graph, value.args[0]), _shape(value), reason))
    counts = Counter(r.kind for r in found.values())
    report = IntegerReport(counts["convolutions"], counts["depthwise"], counts["dense"], tuple(in_float),
                           unsigned if found else 0)
    if not found:
        return original, report  # nothing in integers: the graph as imported, uint8 and all
    mutator = _Integer(mod, found)
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gvar, mutator.visit_expr(func))
    out = relax.transform.DeadCodeElimination()(mutator.builder_.get())
    return out, report


def signed_activations(mod: tvm.IRModule) -> tuple[tvm.IRModule, int]:
    """``mod`` with its uint8 activations int8 (see the module's doc), and how many.

    Only a quantize to uint8 with a constant zero point, every reader of which is a dequantize with a constant zero
    point, changes: anything that reads the uint8 values themselves keeps them.
    """
    targets: set[Any] = set()
    for func in _functions(mod):
        graph = _Graph(func)
        for var, value in graph.bindings:
            if not _is_op(value, "relax.quantize") or str(value.attrs.out_dtype) != "uint8":
                continue
            users = graph.users.get(var, [])
            if not isinstance(value.args[2], tvm.ir.expr.Constant) or not users or graph.uses[var] != len(users):
                continue  # read by the function's output, or twice by one op
            readers = [graph.bound[user] for user in users]
            if all(_is_op(r, "relax.dequantize") and r.args[0].same_as(var) and isinstance(r.args[2], tvm.ir.expr.Constant)
                   for r in readers):
                targets.add(var)
    if not targets:
        return mod, 0
    mutator = _Signed(mod, targets)
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gvar, mutator.visit_expr(func))
    return mutator.builder_.get(), len(targets)


def _less_128(zero_point: tvm.ir.expr.Constant) -> relax.Expr:
    """A uint8 zero point as the int8 one of the same values shifted by -128."""
    return relax.const((zero_point.value.numpy().astype(np.int16) - 128).astype(np.int8), "int8")


@relax.expr_functor.mutator
class _Signed(relax.PyExprMutator):
    """Quantizes ``targets`` (uint8 quantize bindings) to int8, and their dequantizes read them so."""

    def __init__(self, mod: tvm.IRModule, targets: set[Any]) -> None:
        super().__init__(mod)
        self.targets = targets

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = binding.value
        if binding.var in self.targets:
            new = relax.op.quantize(self.visit_expr(value.args[0]), self.visit_expr(value.args[1]),
                                    _less_128(value.args[2]), axis=value.attrs.axis, out_dtype="int8")
        elif _is_op(value, "relax.dequantize") and isinstance(value.args[0], relax.Var) and value.args[0] in self.targets:
            new = relax.op.dequantize(self.visit_expr(value.args[0]), self.visit_expr(value.args[1]),
                                      _less_128(value.args[2]), axis=value.attrs.axis, out_dtype=value.attrs.out_dtype)
        else:
            super().visit_var_binding_(binding)
            return
        if isinstance(binding.var, relax.DataflowVar):
            var = self.builder_.emit(new, binding.var.name)
        else:  # a dataflow block's output (a model whose last op is the dequantize)
            var = self.builder_.emit_output(new, binding.var.name)
        self.set_var_remap(binding.var, var)


class _Graph:
    """One function's bindings: what each variable is bound to, and how many times each is used."""

    def __init__(self, func: relax.Function) -> None:
        self.bindings = list(_bindings(func))
        self.bound = dict(self.bindings)
        self.uses: Counter[Any] = Counter()
        for _var, value in self.bindings:
            relax.analysis.post_order_visit(value, self._count)
        relax.analysis.post_order_visit(func.body.body, self._count)
        self.users: dict[Any, list[Any]] = {}
        for var, value in self.bindings:
            for arg in getattr(value, "args", []):
                if isinstance(arg, relax.Var):
                    self.users.setdefault(arg, []).append(var)

    def _count(self, expr: relax.Expr) -> None:
        if isinstance(expr, relax.Var):
            self.uses[expr] += 1

    def value(self, expr: relax.Expr) -> relax.Expr:
        """What a variable is bound to (the expression itself when it is not a bound variable)."""
        return self.bound.get(expr, expr) if isinstance(expr, relax.Var) else expr

    def single_use(self, expr: relax.Expr) -> bool:
        return not isinstance(expr, relax.Var) or self.uses[expr] <= 1

    def output_of(self, var: relax.Var, rewrite: _Rewrite) -> tuple[Any, _Rewrite]:
        """The binding the integer form replaces, and the form: an int8 clip that is the quantize's only user folds
        into its bounds (TFLite's fused ReLU/ReLU6), else the quantize's own."""
        users = self.users.get(var, [])
        clip = self.bound[users[0]] if len(users) == 1 and self.uses[var] == 1 else None
        if not _is_op(clip, "relax.clip") or str(clip.ty.dtype) != "int8":
            return self.bound[var], rewrite
        low, high = _clip_bounds(clip)
        bounds = (max(rewrite.bounds[0], int(np.ceil(low))), min(rewrite.bounds[1], int(np.floor(high))))
        return clip, dataclasses.replace(rewrite, bounds=bounds)

    def constant(self, expr: relax.Expr) -> np.ndarray | None:
        """A constant's value, through the layout ops applied to it; None for anything computed."""
        expr = self.value(expr)
        if isinstance(expr, tvm.ir.expr.Constant):
            return expr.value.numpy()
        if _is_op(expr, _LAYOUT_OPS):
            inner = self.constant(expr.args[0])
            return None if inner is None else _apply_layout(expr, inner)
        return None

    def quantized_constant(self, expr: relax.Expr) -> _Quantized | None:
        """A constant ``dequantize`` (through the layout ops after it) as integer values, scales and zero points."""
        expr = self.value(expr)
        if _is_op(expr, _LAYOUT_OPS):
            inner = self.quantized_constant(expr.args[0])
            if inner is None:
                return None
            return _Quantized(*(_apply_layout(expr, array) for array in (inner.values, inner.scale, inner.zero_point)))
        if not _is_op(expr, "relax.dequantize"):
            return None
        values, scale, zero = (self.constant(arg) for arg in expr.args[:3])
        if values is None or scale is None or zero is None or values.dtype.kind not in "iu":
            return None
        axis = int(expr.attrs.axis) % max(values.ndim, 1)
        return _Quantized(values.astype(np.int64), _along(scale, axis, values.shape).astype(np.float32),
                          _along(zero, axis, values.shape).astype(np.int64))


def _match(graph: _Graph, quantize: relax.Call) -> tuple[_Rewrite | None, str]:
    """The integer form of the layer ``quantize`` ends, or None and why there is none."""
    scale, zero = graph.constant(quantize.args[1]), graph.constant(quantize.args[2])
    if str(quantize.attrs.out_dtype) != "int8":
        return None, f"quantized to {quantize.attrs.out_dtype}, not int8"
    if scale is None or zero is None or scale.size != 1 or zero.size != 1:
        return None, "output quantized per channel"
    sy, zy = np.float32(scale.reshape(())), int(zero.reshape(()))
    low, high = _INT8
    expr = quantize.args[0]
    value = graph.value(expr)
    if _is_op(value, {"relax.nn.relu", "relax.clip"}) and graph.single_use(expr):
        bounds = (0.0, np.inf) if _is_op(value, "relax.nn.relu") else _clip_bounds(value)
        low, high = max(low, zy + int(np.rint(np.float32(bounds[0]) / sy))), min(high, _quantized_bound(bounds[1], sy, zy))
        expr = value.args[0]
        value = graph.value(expr)
    bias = None
    if _is_op(value, "relax.add") and graph.single_use(expr):
        sides = [graph.value(arg) for arg in value.args]
        index = 0 if _is_op(sides[0], _LAYERS) else 1
        expr, bias = value.args[index], value.args[1 - index]
        value = graph.value(expr)
    if not _is_op(value, _LAYERS):
        return None, "no integer form in this pass"
    if not graph.single_use(expr):
        return None, f"the float {_op_name(value)}'s output is used elsewhere too"
    return _layer(graph, value, bias, sy, zy, (low, high))


def _layer(graph: _Graph, layer: relax.Call, bias: relax.Expr | None, sy: np.float32, zy: int,
           bounds: tuple[int, int]) -> tuple[_Rewrite | None, str]:
    """The integer form of one conv2d / matmul between its quantized operands and its output's quantize."""
    data = graph.value(layer.args[0])
    if not _is_op(data, "relax.dequantize"):
        return None, "its input is not dequantized int8"
    x, sx, zx = data.args[0], graph.constant(data.args[1]), graph.constant(data.args[2])
    if str(getattr(x.ty, "dtype", "")) != "int8":
        return None, f"{getattr(x.ty, 'dtype', 'unknown')} activations (the integer form takes int8)"
    if sx is None or zx is None or sx.size != 1 or zx.size != 1:
        return None, "activations quantized per channel"
    weight = graph.quantized_constant(layer.args[1])
    if weight is None:
        return None, "its weight is not a constant dequantized int8 tensor"
    if np.any(weight.zero_point != 0) or weight.values.min() < -128 or weight.values.max() > 127:
        return None, "its weight is not symmetric int8 (a zero point other than 0)"
    conv = _is_op(layer, "relax.nn.conv2d")
    if conv:
        attrs = layer.attrs
        if len(attrs.data_layout) != 4 or len(attrs.kernel_layout) != 4 or attrs.out_layout != attrs.data_layout:
            return None, f"a {attrs.data_layout}/{attrs.kernel_layout} convolution"
        weight_axis, channel_axis = attrs.kernel_layout.index("O"), attrs.data_layout.index("C")
        groups, in_channels = int(attrs.groups), int(_shape(layer.args[0])[attrs.data_layout.index("C")])
        kind = "depthwise" if groups > 1 and groups == in_channels else "convolutions"
    else:
        if weight.values.ndim != 2 or len(_shape(layer)) < 2:
            return None, "a batched matmul"
        weight_axis, channel_axis, kind = 1, len(_shape(layer)) - 1, "dense"
    sw = _per_channel(weight.scale, weight_axis)
    if sw is None:
        return None, "its weight's scale varies along an axis other than the output channels"
    sx32, zx_int = np.float32(sx.reshape(())), int(zx.reshape(()))
    accumulator_scale = sx32.astype(np.float64) * sw.astype(np.float64)
    out_shape = _shape(layer)
    bias_acc = np.zeros(sw.size, np.int64)
    if bias is not None:
        bias_acc, reason = _bias(graph, bias, out_shape, channel_axis, accumulator_scale)
        if bias_acc is None:
            return None, reason
    sums = weight.values.sum(axis=tuple(a for a in range(weight.values.ndim) if a != weight_axis))
    total = bias_acc - zx_int * sums
    if np.abs(total).max(initial=0) >= 2**31:
        return None, "its bias does not fit int32"
    multiplier = requantize_scale(sx32, sw, sy)
    rewrite = _Rewrite(x, layer, weight.values.astype(np.int8), total.astype(np.int32), multiplier,
                       zx_int, zy, bounds, channel_axis, kind)
    return rewrite, ""


def requantize_scale(sx: np.float32, sw: np.ndarray, sy: np.float32) -> np.ndarray:
    """``sx * sw / sy`` in float32 per output channel (one value when ``sw`` is one), the requantization's multiplier.

    In float32, in this order, as XNNPACK computes its QS8/QC8 requantization scale.
    """
    scale = (np.float32(sx) * sw.astype(np.float32)) / np.float32(sy)
    return scale.astype(np.float32)


def _bias(graph: _Graph, bias: relax.Expr, out_shape: tuple[int, ...], channel_axis: int,
          accumulator_scale: np.ndarray) -> tuple[np.ndarray | None, str]:
    """The bias in accumulator units (int64 per output channel), or None and why it cannot be."""
    quantized = graph.quantized_constant(bias)
    if quantized is not None:
        values, scale = quantized.values - quantized.zero_point, quantized.scale.astype(np.float64)
    else:
        constant = graph.constant(bias)
        if constant is None or constant.dtype.kind != "f":
            return None, "its bias is not a constant"
        values, scale = constant.astype(np.float64), np.ones(constant.shape)
    try:
        values, scale = (np.broadcast_to(a, out_shape) for a in (values, scale))
    except ValueError:
        return None, "its bias does not broadcast to the output"
    per_value, per_scale = _per_channel(values, channel_axis), _per_channel(scale, channel_axis)
    if per_value is None or per_scale is None or per_value.size != accumulator_scale.size:
        if per_value is not None and per_scale is not None and per_value.size == 1:
            per_value, per_scale = np.repeat(per_value, accumulator_scale.size), np.repeat(per_scale, accumulator_scale.size)
        else:
            return None, "its bias is not one value per output channel"
    ratio = per_scale / accumulator_scale
    if quantized is not None and np.all(np.abs(ratio - 1.0) < 1e-5):
        return per_value.astype(np.int64), ""  # quantized at the accumulator's scale, as TFLite and ONNX Runtime write it
    return np.rint(per_value * ratio).astype(np.int64), ""


@relax.expr_functor.mutator
class _Integer(relax.PyExprMutator):
    """Emits each matched layer's integer form in place of the binding it ends in."""

    def __init__(self, mod: tvm.IRModule, found: dict[Any, _Rewrite]) -> None:
        super().__init__(mod)
        self.found = found

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        rewrite = self.found.get(call)
        if rewrite is None:
            return super().visit_call_(call)
        return self._emit(rewrite)

    def _emit(self, r: _Rewrite) -> relax.Expr:
        emit, data = self.builder_.emit, self.visit_expr(r.data)
        layer = r.layer
        rank = len(_shape(layer))
        channel_shape = [1] * rank
        channel_shape[r.channel_axis] = r.bias.size
        if _is_op(layer, "relax.nn.conv2d"):
            attrs = layer.attrs
            top, left, bottom, right = (int(p) for p in attrs.padding)
            if top or left or bottom or right:
                widths = [0] * 8
                h, w = attrs.data_layout.index("H"), attrs.data_layout.index("W")
                widths[2 * h:2 * h + 2], widths[2 * w:2 * w + 2] = [top, bottom], [left, right]
                data = emit(relax.op.nn.pad(data, widths, pad_value=float(r.zero_in)))
            acc = emit(relax.op.nn.conv2d(
                data, relax.const(r.weight, "int8"), strides=attrs.strides, padding=[0, 0, 0, 0],
                dilation=attrs.dilation, groups=attrs.groups, data_layout=attrs.data_layout,
                kernel_layout=attrs.kernel_layout, out_layout=attrs.out_layout, out_dtype="int32"))
        else:
            acc = emit(relax.op.matmul(data, relax.const(r.weight, "int8"), out_dtype="int32"))
        if np.any(r.bias):
            acc = emit(relax.op.add(acc, relax.const(r.bias.reshape(channel_shape), "int32")))
        multiplier = r.multiplier.reshape(channel_shape) if r.multiplier.size > 1 else r.multiplier.reshape(())
        scaled = emit(relax.op.multiply(emit(relax.op.astype(acc, "float32")), relax.const(multiplier, "float32")))
        rounded = emit(relax.op.round(scaled))
        if r.zero_out:
            rounded = emit(relax.op.add(rounded, relax.const(float(r.zero_out), "float32")))
        clipped = emit(relax.op.clip(rounded, float(r.bounds[0]), float(r.bounds[1])))
        return relax.op.astype(clipped, "int8")


def _clip_bounds(clip: relax.Call) -> tuple[float, float]:
    low, high = (float(getattr(bound, "value", bound)) for bound in clip.args[1:3])
    return low, high


def _quantized_bound(bound: float, scale: np.float32, zero: int) -> int:
    """Where a float upper bound lands in the output's integers (``R.quantize``'s own rounding: x / scale)."""
    if not np.isfinite(bound) or bound / float(scale) > 2**20:
        return _INT8[1]
    return zero + int(np.rint(np.float32(bound) / scale))


def _float_region(graph: _Graph, expr: relax.Expr, limit: int = 64) -> tuple[list[relax.Call], bool]:
    """The float ops computing ``expr`` back to its dequantizes (each once, producers first, at most ``limit``), and
    whether a dequantize of a computed tensor is among their inputs (not the float input a QDQ graph quantizes)."""
    order: list[relax.Call] = []
    seen: set[Any] = set()
    dequantized = False

    def visit(node: relax.Expr) -> None:
        nonlocal dequantized
        value = graph.value(node)
        if len(seen) >= limit or not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
            return
        if value in seen:
            return
        seen.add(value)
        if _is_op(value, "relax.dequantize"):
            dequantized = dequantized or graph.constant(value.args[0]) is None
            return
        if graph.constant(value) is not None:
            return
        for arg in value.args:
            if isinstance(arg, relax.Expr):
                visit(arg)
        order.append(value)

    visit(expr)
    return order, dequantized


def _has_dequantize(graph: _Graph, expr: relax.Expr) -> bool:
    return _float_region(graph, expr)[1]


def _float_ops(graph: _Graph, expr: relax.Expr) -> tuple[str, ...]:
    """The float ops computing ``expr`` back to its dequantizes, in order, each name once (``add+clip+multiply``)."""
    names: list[str] = []
    for call in _float_region(graph, expr)[0]:
        if _op_name(call) not in names:
            names.append(_op_name(call))
    return tuple(names)


def _apply_layout(call: relax.Call, array: np.ndarray) -> np.ndarray:
    if _is_op(call, "relax.permute_dims"):
        axes = call.attrs.axes
        return np.transpose(array, None if axes is None else [int(a) for a in axes])
    return array.reshape(_shape(call))


def _along(values: np.ndarray, axis: int, shape: tuple[int, ...]) -> np.ndarray:
    """A scale or zero point (one, or one per index of ``axis``) broadcast to ``shape``."""
    if values.size == 1:
        return np.broadcast_to(values.reshape(()), shape)
    view = [1] * len(shape)
    view[axis] = values.size
    return np.broadcast_to(values.reshape(view), shape)


def _per_channel(full: np.ndarray, axis: int) -> np.ndarray | None:
    """The values of ``full`` along ``axis`` when they do not vary along the other axes, else None."""
    moved = np.moveaxis(np.asarray(full), axis, 0).reshape(full.shape[axis], -1)
    if moved.shape[1] and not np.all(moved == moved[:, :1]):
        return None
    return moved[:, 0].copy()


def _shape(expr: relax.Expr) -> tuple[int, ...]:
    return tuple(int(d) for d in expr.ty.shape)


def _op_name(call: relax.Call) -> str:
    return call.op.name.rsplit(".", 1)[-1]


def _functions(mod: tvm.IRModule) -> list[relax.Function]:
    return [func for _gvar, func in mod.functions_items() if isinstance(func, relax.Function)]


def _bindings(func: relax.Function) -> list[tuple[relax.Var, relax.Expr]]:
    body = func.body
    if not isinstance(body, relax.SeqExpr):
        return []
    return [(b.var, b.value) for block in body.blocks for b in block.bindings if isinstance(b, relax.VarBinding)]
