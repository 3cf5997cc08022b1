"""The requantize epilogue moved into its int8 kernel: elementwise ops applied before the kernel's output is unblocked.

An int8 kernel (:mod:`edgetune.tasks.int8`) writes its output blocked by the
instruction's tile, ``[..., O/L, L]``, and a ``reshape`` (a ``strided_slice``
of the padded channels, a ``permute_dims`` back to NCHW) makes the plain
tensor the graph reads. The requantization the integer pass wrote after the
layer (bias add, cast, multiply, round, zero point, clip, cast: elementwise,
per channel) then follows the reshape. ``FuseOps`` fuses elementwise ops into
the kernel before them, but not past a reshape: the epilogue was a kernel of
its own, one more pass over the int32 accumulator through a reshape's index
arithmetic. On MobileNetV2 int8 those epilogue kernels took half the model's
time (1.5 of 2.9 ms, tuned at 8 trials per task).

:func:`sink_unblocking` moves each such elementwise op above the unblocking
ops: ``op(unblock(b), c)`` becomes ``unblock(op(b, c'))``, the per-channel
constant ``c`` laid out as the blocked tensor's ``[O/L, L]`` tail (padded
channels get zeros, and are sliced off after). Repeated down the chain, the
whole epilogue ends up on the blocked tensor, where ``FuseOps`` puts it into
the int8 kernel, and only the int8 result is unblocked, by an injective op
that fuses into whatever reads it. The kernel's compute and its tensorized
tile are unchanged (a kernel that wrote the plain layout directly, channel
``c`` from tile ``c // L``, tensorized to wrong sums: reverted in a7ef410).

Only single-use chains move, and only ops whose other operands are constants
that vary along the channel axis alone (or not at all): anything else keeps
reading the plain tensor, as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
from tvm import relax
from tvm.ir.expr import Constant

from .relax_exprs import op_name, static_shape

#: the int8 kernels' PrimFunc names (``call_te``'s ``primfunc_name_hint`` in :mod:`edgetune.tasks.int8`)
KERNEL_PREFIXES = ("conv2d_int8", "dense_int8")
#: elementwise ops moved with one constant operand (either side for the commutative ones) or none
_BINARY = {"relax.add", "relax.multiply", "relax.subtract", "relax.maximum", "relax.minimum"}
_COMMUTATIVE = {"relax.add", "relax.multiply", "relax.maximum", "relax.minimum"}
_UNARY = {"relax.round", "relax.clip", "relax.astype"}


@dataclass(frozen=True)
class _Unblocked:
    """A plain tensor that is ``blocked`` unblocked: ``channels`` real channels on ``axis`` of the plain shape."""

    blocked: relax.Var
    steps: tuple[relax.Call, ...]  # the unblocking ops, in order, each applied to the result of the one before
    channels: int
    axis: int
    rank: int


def sink_unblocking(mod: tvm.IRModule) -> tuple[tvm.IRModule, int]:
    """``mod`` with the elementwise ops after its int8 kernels applied before their unblocking; how many moved."""
    sinker = _SinkUnblocking(mod)
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            sinker.uses = _use_counts(func)
            sinker.builder_.update_func(gvar, sinker.visit_expr(func))
    out = sinker.builder_.get()
    for gvar, func in out.functions_items():
        if isinstance(func, relax.Function):
            out[gvar] = relax.analysis.remove_all_unused(func)
    return relax.transform.Normalize()(out), sinker.moved


def _is_kernel_call(expr: relax.Expr) -> bool:
    if op_name(expr) != "relax.call_tir":
        return False
    callee = expr.args[0]
    return isinstance(callee, relax.GlobalVar) and callee.name_hint.startswith(KERNEL_PREFIXES)


@relax.expr_functor.mutator
class _SinkUnblocking(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.moved = 0
        self.blocked: set[relax.Var] = set()  # (new) int8 kernel outputs and elementwise results on them
        self.unblocked: dict[relax.Var, _Unblocked] = {}  # (new) plain tensors that unblock one of those
        self.uses: dict[relax.Var, int] = {}  # reads of each variable of the function being visited

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        if not isinstance(binding.var, relax.DataflowVar):
            super().visit_var_binding_(binding)
            return
        value = self.visit_expr(binding.value)
        if isinstance(value, relax.Var) and (value in self.unblocked or value in self.blocked):
            self.set_var_remap(binding.var, value)  # an alias (the int8 pass binds a layer to its unblocked result)
            return
        single = self.uses.get(binding.var, 0) == 1
        if _is_kernel_call(value) and single:
            var = self.builder_.emit(value, binding.var.name)
            self.blocked.add(var)
        elif single and (unblocking := self._unblocking_step(value)) is not None:
            var = self.builder_.emit(value, binding.var.name)
            self.unblocked[var] = unblocking
        elif (moved := self._moved(value)) is not None:
            blocked, plain = moved
            self.blocked.add(blocked)
            var = blocked
            for step in plain.steps[:-1]:
                var = self.builder_.emit(_replace_first_arg(step, var))
            var = self.builder_.emit(_replace_first_arg(plain.steps[-1], var), binding.var.name)
            if single:
                self.unblocked[var] = plain
            self.moved += 1
        else:
            var = self.builder_.emit(value, binding.var.name)
        self.set_var_remap(binding.var, var)

    def _unblocking_step(self, call: relax.Expr) -> _Unblocked | None:
        """``call`` as one more unblocking op on a blocked tensor (or on one being unblocked), else None."""
        name = op_name(call)
        if not name or not isinstance(call.args[0], relax.Var):
            return None
        source = call.args[0]
        if name == "relax.reshape" and source in self.blocked:
            blocked, plain = static_shape(source), static_shape(call)
            # [..., O/L, L] -> [..., O]: the last two axes merged, nothing else moved
            if blocked is None or plain is None or len(blocked) != len(plain) + 1 or blocked[:-2] != plain[:-1] \
                    or blocked[-2] * blocked[-1] != plain[-1]:
                return None
            return _Unblocked(source, (call,), plain[-1], len(plain) - 1, len(plain))
        before = self.unblocked.get(source)
        if before is None:
            return None
        if name == "relax.strided_slice":
            axes, begin = _slice_axes_begin(call)
            plain = static_shape(call)
            if axes != [before.axis] or any(begin) or plain is None:
                return None
            return _Unblocked(before.blocked, (*before.steps, call), plain[before.axis], before.axis, before.rank)
        if name == "relax.permute_dims":
            axes = [int(a) for a in call.attrs.axes]
            return _Unblocked(before.blocked, (*before.steps, call), before.channels, axes.index(before.axis), before.rank)
        return None

    def _moved(self, call: relax.Expr) -> tuple[relax.Var, _Unblocked] | None:
        """An elementwise ``call`` on an unblocked tensor, emitted on the blocked one: (its result, how to unblock it)."""
        name = op_name(call)
        if name in _UNARY:
            source = call.args[0]
            plain = self.unblocked.get(source) if isinstance(source, relax.Var) else None
            if plain is None:
                return None
            blocked = self.builder_.emit(_replace_first_arg(call, plain.blocked))
            return blocked, _Unblocked(blocked, plain.steps, plain.channels, plain.axis, plain.rank)
        if name not in _BINARY:
            return None
        left, right = call.args[0], call.args[1]
        if isinstance(right, Constant) and isinstance(left, relax.Var) and left in self.unblocked:
            tensor, constant, first = left, right, True
        elif name in _COMMUTATIVE and isinstance(left, Constant) and isinstance(right, relax.Var) and right in self.unblocked:
            tensor, constant, first = right, left, False
        else:
            return None
        plain = self.unblocked[tensor]
        tail = _blocked_constant(constant.value.numpy(), plain, static_shape(plain.blocked))
        if tail is None:
            return None
        operands = (plain.blocked, relax.const(tail)) if first else (relax.const(tail), plain.blocked)
        blocked = self.builder_.emit(relax.Call(call.op, list(operands), call.attrs, call.ty_args))
        return blocked, _Unblocked(blocked, plain.steps, plain.channels, plain.axis, plain.rank)


def _blocked_constant(value: np.ndarray, plain: _Unblocked, blocked_shape: list[int] | None) -> np.ndarray | None:
    """A constant broadcast over the plain tensor, as one over its blocked form (None: it varies off the channels)."""
    if blocked_shape is None or value.ndim > plain.rank:
        return None
    full = value.reshape((1,) * (plain.rank - value.ndim) + value.shape)
    off_channel = [size for axis, size in enumerate(full.shape) if axis != plain.axis]
    if any(size != 1 for size in off_channel):
        return None
    if full.size == 1:
        return value.reshape(())  # a scalar broadcasts over any layout
    per_channel = full.reshape(-1)
    if per_channel.size != plain.channels:
        return None
    tiles, lanes = blocked_shape[-2], blocked_shape[-1]
    padded = np.zeros(tiles * lanes, dtype=value.dtype)  # the padded channels compute nothing anyone reads
    padded[: plain.channels] = per_channel
    return padded.reshape(tiles, lanes)


def _ints(value: Any) -> list[int]:
    """A Relax tuple of ``PrimValue``s, a ``ShapeExpr`` or an attribute array, as Python ints."""
    items = getattr(value, "fields", None) or getattr(value, "values", None) or value
    return [int(getattr(item, "value", item)) for item in items]


def _slice_axes_begin(call: relax.Call) -> tuple[list[int], list[int]]:
    """A ``strided_slice``'s axes and begins, whether TVM keeps them as arguments or attributes."""
    attrs = call.attrs
    if attrs is not None and hasattr(attrs, "axes"):
        return _ints(attrs.axes), _ints(attrs.begin)
    return _ints(call.args[1]), _ints(call.args[2])


def _replace_first_arg(call: relax.Call, arg: relax.Expr) -> relax.Call:
    return relax.Call(call.op, [arg, *call.args[1:]], call.attrs, call.ty_args)


def _use_counts(func: relax.Function) -> dict[relax.Var, int]:
    """How many times each variable of ``func`` is read (a function output counts as a read)."""
    counts: dict[relax.Var, int] = {}

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Var):
            counts[expr] = counts.get(expr, 0) + 1

    for block in func.body.blocks:
        for binding in block.bindings:
            relax.analysis.post_order_visit(binding.value, visit)
    relax.analysis.post_order_visit(func.body.body, visit)
    return counts
