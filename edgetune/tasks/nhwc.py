"""NHWC models (TensorFlow Lite's) turned channels-first, so that the blocked layout treats them as ONNX models.

:func:`~edgetune.tasks.blocking.block_channels` calls :func:`channels_first`
first when a model has NHWC convolutions.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax

from .blocking import _BINARY, _count, _is_op, _shape
from .fold import fold_constants


def channels_first(mod: tvm.IRModule, target: Any) -> tuple[tvm.IRModule, int]:
    """``mod``'s NHWC convolutions (a TensorFlow Lite model's) in NCHW/OIHW, and how many there were.

    The blocked layout starts from NCHW: Relax's ``ConvertLayout`` turns each convolution and the ops
    between them, so a transpose is left only where the graph enters and leaves them, and the weights'
    transposes fold away. The steps after it then treat the model as an ONNX one: its depthwise
    convolutions, stem and activations blocked, and its workloads the schedule library's.
    """
    nhwc = _count(mod, lambda call: call.attrs.data_layout == "NHWC")
    if not nhwc:
        return mod, 0
    widened = _ChannelVectorsAsTensors(mod)
    out = tvm.IRModule(mod.functions, attrs=mod.attrs)
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            out[gvar] = widened.visit_expr(func)
    mod = out
    with target:
        converted = tvm.transform.Sequential(
            [relax.transform.ConvertLayout({"relax.nn.conv2d": ["NCHW", "OIHW"]}), relax.transform.Normalize(),
             fold_constants()]
        )(mod)
    return converted, nhwc


@relax.expr_functor.mutator
class _ChannelVectorsAsTensors(relax.PyExprMutator):
    """A bias of shape ``(C,)`` added to an NHWC tensor as a ``(1, 1, 1, C)`` constant; a clip as maximum/minimum.

    TensorFlow Lite's biases broadcast along the last axis; ``ConvertLayout``
    cannot move a rank-1 operand to NCHW and transposes the tensor back to NHWC
    instead. Of rank 4, the constant is transposed with the tensor and folds.
    """

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if _is_op(call, "relax.nn.conv2d") and call.attrs.data_layout == "NHWC":
            return self._with_padding_folded(call)
        if _is_op(call, "relax.nn.max_pool2d") and call.attrs.layout == "NHWC":
            return self._max_pool_with_padding_folded(call)
        if _is_op(call, "relax.clip") and _shape(call.args[0]) is not None and len(_shape(call.args[0])) == 4:
            # ConvertLayout cannot move relax.clip: as maximum/minimum with scalars it moves, and stays blocked
            dtype = call.args[0].ty.dtype
            low, high = (float(getattr(bound.value, "value", bound.value)) for bound in call.args[1:3])
            return relax.op.minimum(relax.op.maximum(call.args[0], relax.const(low, dtype)), relax.const(high, dtype))
        if not _is_op(call, _BINARY) or len(call.args) != 2:
            return call
        args = list(call.args)
        for index in (0, 1):
            constant, other = args[index], _shape(args[1 - index])
            if (isinstance(constant, tvm.ir.expr.Constant) and other is not None and len(other) == 4
                    and len(constant.value.shape) == 1 and constant.value.shape[0] in (1, other[3])):
                # one value per channel as (1, 1, 1, C); a single value (one channel) as a scalar
                value = constant.value.numpy()
                shape = (1, 1, 1, -1) if value.size > 1 else ()
                args[index] = relax.const(value.reshape(shape), constant.value.dtype)
                return relax.Call(call.op, args, call.attrs)
        return call

    def _with_padding_folded(self, conv: relax.Call) -> relax.Expr:
        """A zero ``PAD`` of H and W before an NHWC convolution (Keras' ``ZeroPadding2D``) as the convolution's padding.

        ``ConvertLayout`` cannot move ``nn.pad``: left, the tensor went back to NHWC for it and stayed so to the
        next convolution (DenseNet's and NASNet's concats, ResNet-50's stem).
        """
        found = self._zero_padding_of(conv.args[0])
        if found is None:
            return conv
        data, (top, bottom, left, right) = found
        padding = [int(p) for p in conv.attrs.padding]
        attrs = conv.attrs
        return relax.op.nn.conv2d(
            data, conv.args[1], strides=attrs.strides,
            padding=[padding[0] + top, padding[1] + left, padding[2] + bottom, padding[3] + right],
            dilation=attrs.dilation, groups=attrs.groups, data_layout=attrs.data_layout,
            kernel_layout=attrs.kernel_layout, out_layout=attrs.out_layout, out_dtype=attrs.out_dtype,
        )

    def _max_pool_with_padding_folded(self, pool: relax.Call) -> relax.Expr:
        """A zero ``PAD`` before an NHWC max pool as the pool's padding, when what is padded is never negative.

        ResNet-50's and DenseNet's stems (ReLU -> ZeroPadding2D -> MaxPool): a max pool pads with the lowest
        value, a ``PAD`` with zeros, and the two agree when every value is at least zero (after a ReLU). Left,
        the pad kept the stem's output in NHWC and DenseNet's dense blocks concatenated between transposes.
        """
        found = self._zero_padding_of(pool.args[0])
        if found is None or not self._never_negative(found[0]):
            return pool
        data, (top, bottom, left, right) = found
        padding = [int(p) for p in pool.attrs.padding]
        attrs = pool.attrs
        return relax.op.nn.max_pool2d(
            data, pool_size=attrs.pool_size, strides=attrs.strides, dilation=attrs.dilation,
            padding=[padding[0] + top, padding[1] + left, padding[2] + bottom, padding[3] + right],
            ceil_mode=attrs.ceil_mode, count_include_pad=attrs.count_include_pad, layout=attrs.layout,
            out_layout=attrs.out_layout,
        )

    def _zero_padding_of(self, data: relax.Expr) -> tuple[relax.Expr, tuple[int, int, int, int]] | None:
        """``(unpadded input, (top, bottom, left, right))`` when ``data`` is a zero pad of H and W only."""
        bound = self.lookup_binding(data) if isinstance(data, relax.Var) else None
        if not _is_op(bound, "relax.nn.pad") or bound.attrs.pad_mode != "constant":
            return None
        value = getattr(bound.attrs, "pad_value", 0.0)
        widths = [int(w) for w in bound.attrs.pad_width]
        if float(getattr(value, "value", value) or 0.0) != 0.0 or len(widths) != 8 or any(widths[i] for i in (0, 1, 6, 7)):
            return None
        top, bottom, left, right = widths[2:6]
        return bound.args[0], (top, bottom, left, right)

    def _never_negative(self, expr: relax.Expr, depth: int = 3) -> bool:
        """Whether ``expr`` is a ReLU's output (``relu``, a ``clip`` or ``maximum`` with a bound at least 0)."""
        if depth == 0:
            return False
        if isinstance(expr, relax.Var):
            expr = self.lookup_binding(expr)
        if _is_op(expr, "relax.nn.relu"):
            return True
        if _is_op(expr, "relax.clip"):
            return _at_least_zero(expr.args[1])
        if _is_op(expr, "relax.maximum"):
            return any(_at_least_zero(arg) or self._never_negative(arg, depth - 1) for arg in expr.args)
        if _is_op(expr, "relax.minimum"):  # a ReLU6 turned maximum/minimum above
            return all(_at_least_zero(arg) or self._never_negative(arg, depth - 1) for arg in expr.args)
        return False


def _at_least_zero(expr: Any) -> bool:
    """A scalar constant (or ``PrimValue``) that is at least zero."""
    if isinstance(expr, tvm.ir.expr.Constant) and expr.value.numpy().size == 1:
        return bool(expr.value.numpy().reshape(-1)[0] >= 0)
    value = getattr(expr, "value", None)
    value = getattr(value, "value", value)
    return isinstance(value, (int, float)) and value >= 0
