"""Blocked channel layout (``NCHW{b}c``) for CPU convolutions, the layout ONNX Runtime's x86 kernels use.

``b`` is the target's float32 vector lanes, so the innermost axis of every
blocked tensor is one vector register. :func:`block_channels` does it in three
steps, and :func:`lower_blocked` the fourth:

1. ONNX's ``Clip``, which the importer emits as ``call_tir`` of TOPI's
   ``maximum``/``minimum`` (opaque to ``ConvertLayout``), becomes Relax's
   ``maximum``/``minimum`` ops again, recognized by structural equality with
   the PrimFunc TOPI makes for the same shapes.
2. Relax's ``ConvertLayout`` blocks the ordinary convolutions (``NCHW{b}c`` data,
   ``OIHW{b}i{b}o`` weights) and the elementwise ops that follow them.
3. :class:`_BlockRest` blocks what ``ConvertLayout`` leaves in NCHW between two
   blocked kernels: depthwise convolutions (``ConvertLayout`` cannot prove the
   blocked weight layout for one input channel per group, so MobileNets would
   go blocked -> NCHW -> blocked around every depthwise conv), the elementwise
   ops after them (bias, ReLU6 as ``maximum``/``minimum``, hard-swish, SiLU, a
   squeeze-excite gate), channel concats, max/average pools, global average
   pools (a squeeze-excite block's, a classifier's), a stem with
   fewer input channels than a block (its input in one block, ``NCHW3c``, its
   output blocked, as ONNX Runtime's NCHW-in/NCHWc-out kernel), a
   re-blocking transform of a tensor that is already blocked, and, with
   blocks of 16 (AVX-512), the convolutions whose channels divide into half
   blocks only (MobileNetV2's and EfficientNet's 24 and 40 channels): those
   channels go in blocks of 8, as ``conv2d_NCHWc`` with a block of 8 on the
   side that needs it (``NCHW8c`` data and ``NCHW16c`` output, or the other
   way), so no layout transform to NCHW and back surrounds them.
4. :func:`lower_blocked`, run by :func:`~edgetune.tasks.graph.prepare_graph`
   after ``fast-math``, has ``LegalizeOps`` lower blocked convolutions, which it has no lowering for:
   ordinary ones to TOPI's ``conv2d_NCHWc``, depthwise ones to the
   ``depthwise_conv2d_NCHWc`` compute below (TOPI 0.27 declares that operator
   but registers no generic implementation), and, with ``grouped`` (the
   ``tuning.block_grouped`` switch), grouped ones whose groups are whole blocks
   to ``group_conv2d_NCHWc``.

Every tensor's block is its channel count's: ``b`` where ``b`` divides it,
else the half block (for ``b`` of 16). An ordinary convolution whose output
channels ``b`` does not divide, by a few per cent of them at most
(:data:`PAD_TO_BLOCK_MAX_SHARE`: SqueezeNet's 1000-channel classifier), writes
them padded with zero weights to whole blocks instead (1008, 63 blocks of 16);
the padded tensor stays blocked through the ops that act channel by channel
after it (bias, activation, pools, the global average pool) and is sliced
back where it leaves the blocked layout. A convolution the blocked layout cannot
lower stays NCHW on its own, with layout transforms around it, and the rest of
the graph stays blocked: one whose channels do not divide into blocks, and a
grouped one whose groups are not whole blocks, nor whole half blocks (ResNeXt-50's
first stage, 4 channels per group). RegNetX's 16 per group run blocked, and,
under blocks of 16, RegNetY's and ResNeXt-50's 8 per group run in blocks of 8,
unless ``tuning.block_grouped`` is off. :func:`unblocked_convolutions`
lists them with the reason, for the summary and the kernel inventory.

Between blocks of 16 and blocks of 8 a tensor is never re-blocked whole where
a kernel can read or write the other block itself: a re-blocking is one
transform, not two through NCHW; an ordinary convolution reads its input in
the block it is in (``conv2d_NCHWc`` takes any input block); an elementwise op
on a re-blocked tensor runs in the tensor's own block (a squeeze-excite gate,
a few values, is re-blocked, not the tensor it scales); and
:func:`produce_in_consumer_blocks` has a convolution whose only reader
re-blocks its output (through bias and activation) write that block itself.
RegNetY-400MF went from 71 tasks to 57 and ran 0.885x its earlier build
(RESULTS ``reblock``); only its 1x1 squeeze-excite gates' transforms are left.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Collection

import numpy as np
import tvm
import tvm.sym
import tvm_ffi
from tvm import relax, te, topi

from .blocked_computes import depthwise_conv2d_nchwc, group_conv2d_nchwc
from .fold import fold_constants
from .relax_exprs import is_op as _is_op, static_shape as _shape
from .winograd import WINOGRAD_FUNC, conv2d_winograd_nchwc, shape_key, transform_weights, winograd_applies

#: ``grouped`` (``tuning.block_grouped``, on by default): grouped convolutions whose groups are whole blocks run as
#: ``group_conv2d_NCHWc``; off, they stay NCHW between layout transforms. The blocked form is an ordinary blocked
#: convolution's loop nest, so the library's convolutions give it first candidates (transfer_decisions): at two trials
#: per task torchvision's RegNetX-400MF ran 1.19x ONNX Runtime blocked and 2.64x NCHW, ResNeXt-50 1.18x and 1.56x. Before
#: that transfer the blocked form started from its untuned loops and was 2.1x slower than NCHW
#: (benchmarks/results/real-exports.md)

#: an ordinary convolution whose output channels blocks do not divide has them padded with zero weights to whole
#: blocks, where that adds at most this share of its arithmetic: the SqueezeNets' 512 -> 1000 classifier on 13x13 ran
#: at 93-151 GFLOPS in blocks of 8 and 192-219 padded to 1,008 in blocks of 16 (AVX-512 Zen 4, 2 trials per task from
#: the library; RESULTS ``real_exports_zen4_padded``). Its padded channels are carried blocked through the elementwise ops, pools
#: and global average pool that follow it, and sliced off where the tensor leaves the blocked layout
PAD_TO_BLOCK_MAX_SHARE = 1 / 32

_BINARY = {"relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum"}
_POOLS = {"relax.nn.max_pool2d", "relax.nn.avg_pool2d"}
_UNARY = {"relax.nn.relu", "relax.clip", "relax.sigmoid", "relax.tanh", "relax.nn.silu", "relax.nn.gelu",
          "relax.nn.gelu_tanh", "relax.exp", "relax.negative"}


def block_channels(mod: tvm.IRModule, block: int, target: Any, *, grouped: bool = True) -> tuple[tvm.IRModule, str]:
    """Convolutions of ``mod`` in ``NCHW{block}c``, not yet lowered; the detail line says how many.

    ``grouped``: grouped convolutions whose groups are whole blocks (or whole half blocks) run blocked too.

    The blocked convolutions are Relax ops Relax's ``LegalizeOps`` cannot lower:
    :func:`lower_blocked` does, after the passes that still want Relax's
    elementwise ops (``fast-math`` replaces sigmoid with a ``call_tir`` this
    pass could not see through, and SiLU would stay NCHW between transforms).
    """
    layouts = [f"NCHW{block}c", f"OIHW{block}i{block}o"]
    total = _count(mod, lambda call: True)
    from .integer import integer_convolutions

    integer = integer_convolutions(mod)
    if integer:  # the blocked computes and the library are float32; integer blocked layouts are the int8 schedules'
        return mod, f"not applied: {integer} int8 convolutions stay in the layout imported"
    from .nhwc import channels_first

    mod, nhwc = channels_first(mod, target)
    depthwise = _count(mod, _is_depthwise)
    mod, clips = clips_as_ops(mod)
    with target:
        converted = tvm.transform.Sequential(
            [relax.transform.ConvertLayout({"relax.nn.conv2d": layouts}), relax.transform.Normalize(), fold_constants()]
        )(mod)
        rest = tvm.IRModule(converted.functions, attrs=converted.attrs)
        padded = 0
        for gvar, func in converted.functions_items():
            if isinstance(func, relax.Function):
                mutator = _BlockRest(converted, block, grouped)
                rest[gvar] = mutator.visit_expr(func)
                padded += mutator.padded_convolutions
        rest = tvm.transform.Sequential(
            [relax.transform.Normalize(), relax.transform.DeadCodeElimination(), fold_constants()]
        )(rest)
        rest = produce_in_consumer_blocks(rest)
        kept = _count(rest, lambda call: call.attrs.data_layout == "NCHW")
        blocked_depthwise = _count(rest, lambda call: call.attrs.kernel_layout.startswith("OIHW1i"))
        half = _count(rest, lambda call: _half_blocked(call, block))
        grouped = _count(rest, lambda call: call.attrs.groups > 1 and not call.attrs.kernel_layout.startswith("OIHW1i")
                         and call.attrs.data_layout != "NCHW")
    detail = f"{total - kept} of {total} convolutions in NCHW{block}c"
    if depthwise:
        detail += f" ({blocked_depthwise} of {depthwise} depthwise)"
    if grouped:
        detail += f", {grouped} grouped with whole blocks per group"
    if half:
        detail += f", {half} with {block // 2}-channel blocks where {block} do not divide"
    if padded:
        detail += f", {padded} with output channels padded to whole blocks"
    if clips:
        detail += f", {clips} clip bounds as ops"
    if nhwc:
        detail += f", {nhwc} from NHWC"
    return rest, detail


def produce_in_consumer_blocks(mod: tvm.IRModule) -> tvm.IRModule:
    """A convolution whose only reader re-blocks its output (through bias and activation) writes that block itself.

    RegNetY's and ResNeXt's 1x1 convolutions run in blocks of 16 and feed a grouped convolution of 8 channels per
    group, in blocks of 8: the re-blocking transform read and wrote the whole tensor between them (RegNetY-400MF's
    first stage: a 48x112x112 tensor). ``conv2d_NCHWc`` writes any output block, so the transform goes.
    """
    out = tvm.IRModule(mod.functions, attrs=mod.attrs)
    changed = False
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter = _ProduceInConsumerBlock(mod, _use_counts(func))
            out[gvar] = rewriter.visit_expr(func)
            changed = changed or rewriter.rewritten > 0
    if not changed:
        return mod
    return tvm.transform.Sequential([relax.transform.Normalize(), relax.transform.DeadCodeElimination()])(out)


def _use_counts(func: relax.Function) -> dict[relax.Var, int]:
    """How many bindings read each dataflow variable of ``func`` (which only its own dataflow block can read)."""
    return {var: len(users) for block in func.body.blocks if isinstance(block, relax.DataflowBlock)
            for var, users in relax.analysis.udchain(block).items()}


@relax.expr_functor.mutator
class _ProduceInConsumerBlock(relax.PyExprMutator):
    """See :func:`produce_in_consumer_blocks`. ``uses`` counts the reads of the function's (original) variables."""

    def __init__(self, mod: tvm.IRModule, uses: dict[relax.Var, int]) -> None:
        super().__init__(mod)
        self.uses = uses
        self.values: dict[relax.Var, tuple[relax.Expr, int]] = {}  # emitted variable -> (its value, reads)
        self.rewritten = 0

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        if not isinstance(binding.var, relax.DataflowVar):
            super().visit_var_binding_(binding)
            return
        value = self.visit_expr(binding.value)
        if _is_reblock(value):
            produced = self._produced_in(value.args[0], _shape(value)[4])
            if produced is not None:
                self.rewritten += 1
                value = produced
        var = self.builder_.emit(value, binding.var.name)
        self.values[var] = (value, self.uses.get(binding.var, 0))
        self.set_var_remap(binding.var, var)

    def _produced_in(self, var: relax.Expr, b: int) -> relax.Expr | None:
        """``var``'s value computed in blocks of ``b``, where it is a convolution's output read only on the way."""
        if var not in self.values or self.values[var][1] != 1:
            return None
        value = self.values[var][0]
        if _is_op(value, "relax.nn.conv2d"):
            return _conv_writing_block(value, b)
        if _is_op(value, _UNARY) and isinstance(value.args[0], relax.Var):
            inner = self._produced_in(value.args[0], b)
            if inner is not None:
                return relax.Call(value.op, [self.builder_.emit(inner), *value.args[1:]], value.attrs)
            return None
        if _is_op(value, _BINARY):
            args = list(value.args[:2])
            position = [i for i, arg in enumerate(args) if not isinstance(arg, tvm.ir.expr.Constant)]
            if len(position) != 1 or not isinstance(args[position[0]], relax.Var):
                return None
            (tensor,), constant = position, 1 - position[0]
            args[constant] = _constant_in_block(args[constant], b)
            inner = self._produced_in(args[tensor], b) if args[constant] is not None else None
            if inner is None:
                return None
            args[tensor] = self.builder_.emit(inner)
            return relax.Call(value.op, args, value.attrs)
        return None


def _is_reblock(call: relax.Expr) -> bool:
    """A layout transform from one channel block to another (``_reblock``)."""
    if not _is_op(call, "relax.layout_transform"):
        return False
    source, result = _shape(call.args[0]), _shape(call)
    return source is not None and result is not None and len(source) == len(result) == 5 and source[4] != result[4]


def _conv_writing_block(call: relax.Call, b: int) -> relax.Expr | None:
    """An ordinary blocked convolution writing blocks of ``b`` (its weight re-blocked on the output side)."""
    attrs, weight = call.attrs, call.args[1]
    if attrs.groups != 1 or attrs.data_layout == "NCHW" or not isinstance(weight, tvm.ir.expr.Constant):
        return None
    w = weight.value.numpy()
    if w.ndim != 6 or attrs.kernel_layout != f"OIHW{w.shape[4]}i{w.shape[5]}o" or (w.shape[0] * w.shape[5]) % b:
        return None
    chunks_out, chunks_in, kh, kw, b_in, b_out = w.shape
    w = w.transpose(0, 5, 1, 4, 2, 3).reshape(chunks_out * b_out, chunks_in * b_in, kh, kw)
    return relax.op.nn.conv2d(
        call.args[0], relax.const(_oihw_blocked(w, b_in, b), weight.value.dtype), strides=attrs.strides,
        padding=attrs.padding, dilation=attrs.dilation, groups=1, data_layout=attrs.data_layout,
        kernel_layout=f"OIHW{b_in}i{b}o", out_layout=f"NCHW{b}c", out_dtype=attrs.out_dtype,
    )


def _constant_in_block(constant: tvm.ir.expr.Constant, b: int) -> relax.Expr | None:
    """A scalar as it is, a per-channel blocked vector (1, C/l, 1, 1, l) in blocks of ``b``; None otherwise."""
    c = constant.value.numpy()
    if c.size == 1:
        return constant
    if c.ndim != 5 or c.shape[0] != 1 or c.shape[2:4] != (1, 1) or (c.shape[1] * c.shape[4]) % b:
        return None
    channels = c.shape[1] * c.shape[4]
    flat = c.reshape(channels)
    return relax.const(np.ascontiguousarray(flat.reshape(1, channels // b, 1, 1, b)), constant.value.dtype)


@dataclass(frozen=True)
class UnblockedConv:
    """A convolution the blocked layout left in NCHW, and why (the summary and the kernel inventory say it)."""

    data_shape: tuple[int, ...]
    weight_shape: tuple[int, ...]
    groups: int
    reason: str

    def describe(self) -> str:
        out_channels, in_per_group, kh, kw = self.weight_shape
        in_channels = self.data_shape[1]
        grouped = f", {self.groups} groups" if self.groups > 1 else ""
        return f"conv2d {in_channels}->{out_channels} {kh}x{kw}{grouped} on {self.data_shape[2]}x{self.data_shape[3]}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {"data_shape": list(self.data_shape), "weight_shape": list(self.weight_shape), "groups": self.groups,
                "reason": self.reason, "description": self.describe()}


def unblocked_convolutions(mod: tvm.IRModule, block: int) -> list[UnblockedConv]:
    """The convolutions of a blocked (not yet lowered) ``mod`` still in NCHW, each with the reason it is.

    Each stays NCHW on its own, between layout transforms; the rest of the graph stays blocked.
    """
    half = block // 2 if block >= 16 else None
    found: list[UnblockedConv] = []

    def divides(channels: int) -> bool:
        return channels % block == 0 or (half is not None and channels % half == 0)

    def visit(expr: relax.Expr) -> None:
        if not _is_op(expr, "relax.nn.conv2d") or expr.attrs.data_layout != "NCHW":
            return
        data, weight = _shape(expr.args[0]), _shape(expr.args[1])
        if data is None or weight is None or len(data) != 4 or len(weight) != 4:
            return
        groups = int(expr.attrs.groups)
        in_channels, out_channels = data[1], weight[0]
        if groups > 1 and not _is_depthwise(expr):
            per_group = (in_channels // groups, out_channels // groups)
            if all(c % block == 0 for c in per_group) or (half and all(c % half == 0 for c in per_group)):
                whole = "whole blocks" if all(c % block == 0 for c in per_group) else f"whole blocks of {half}"
                reason = (f"grouped: {per_group[0]} input and {per_group[1]} output channels per group, {whole}, "
                          "but the blocked form is off (tuning.block_grouped)")
            else:
                reason = (f"grouped: {per_group[0]} input and {per_group[1]} output channels per group, "
                          f"which blocks of {block} do not divide")
        elif groups > 1:
            reason = f"depthwise: {in_channels} channels, which blocks of {block} do not divide"
        elif not isinstance(expr.args[1], tvm.ir.expr.Constant):
            reason = "weights: not a constant"
        elif not (divides(in_channels) or in_channels < block) or not divides(out_channels):
            reason = f"channels: {in_channels} input and {out_channels} output, which blocks of {block} do not divide"
        else:
            reason = "attributes: no blocked form for them"
        found.append(UnblockedConv(tuple(data), tuple(weight), groups, reason))

    for _gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return found


def lower_blocked(mod: tvm.IRModule, target: Any, winograd: bool | Collection[str] = False) -> tvm.IRModule:
    """``mod``'s ops lowered, blocked convolutions to the blocked computes (:func:`_lower_conv2d`).

    ``winograd`` (``tuning.winograd`` as a recipe records it): True puts every 3x3 stride-1 convolution that
    :func:`~.winograd.winograd_applies` takes in the Winograd form (:mod:`.winograd`); a collection of shape keys
    (:func:`~.winograd.shape_key`, what ``auto`` resolved to) only those of these shapes.
    """

    def lower(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        return _lower_conv2d(bb, call, winograd=winograd)

    with target:
        return tvm.transform.Sequential(
            [fold_constants(), relax.transform.LegalizeOps(customize_legalize_map={"relax.nn.conv2d": lower}),
             relax.transform.FoldConstant()]
        )(mod)


def clips_as_ops(mod: tvm.IRModule) -> tuple[tvm.IRModule, int]:
    """``call_tir`` of TOPI's ``maximum``/``minimum`` with a scalar constant as Relax ops; how many were rewritten."""
    rewriter = _ClipsAsOps(mod)
    out = tvm.IRModule(mod.functions, attrs=mod.attrs)
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            out[gvar] = rewriter.visit_expr(func)
    if not rewriter.rewritten:
        return mod, 0
    return relax.transform.DeadCodeElimination()(out), rewriter.rewritten


@relax.expr_functor.mutator
class _ClipsAsOps(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.mod = mod
        self.rewritten = 0

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not _is_op(call, "relax.call_tir") or not isinstance(call.args[1], relax.Tuple):
            return call
        callee, args = call.args[0], call.args[1].fields
        if len(args) != 2 or not isinstance(args[1], tvm.ir.expr.Constant) or args[1].value.shape != ():
            return call
        shape = _shape(args[0])
        if shape is None or not isinstance(callee, tvm.ir.GlobalVar) or callee not in self.mod.get_global_vars():
            return call
        dtype = args[0].ty.dtype
        data, bound = te.placeholder(list(args[0].ty.shape.values), dtype), te.placeholder((), dtype)
        prim = self.mod[callee]
        for compute, op in ((topi.maximum, relax.op.maximum), (topi.minimum, relax.op.minimum)):
            expected = te.create_prim_func([data, bound, compute(data, bound)]).without_attr("global_symbol")
            if tvm_ffi.structural_equal(prim, expected):
                self.rewritten += 1
                return op(args[0], args[1])
        return call


def _count(mod: tvm.IRModule, where: Callable[[relax.Call], bool]) -> int:
    count = 0

    def visit(expr: relax.Expr) -> None:
        nonlocal count
        if _is_op(expr, "relax.nn.conv2d") and where(expr):
            count += 1

    for _gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return count


def _is_depthwise(call: relax.Call) -> bool:
    """One input and one output channel per group, in NCHW/OIHW (a MobileNet's 3x3 depthwise conv)."""
    attrs = call.attrs
    if (attrs.data_layout, attrs.kernel_layout) != ("NCHW", "OIHW") or attrs.groups == 1:
        return False
    weight = _shape(call.args[1])
    data = _shape(call.args[0])
    return weight is not None and data is not None and weight[1] == 1 and weight[0] == data[1] == attrs.groups


def _half_blocked(call: relax.Call, block: int) -> bool:
    """A blocked convolution with a block of ``block // 2`` on its data or output side."""
    attrs = call.attrs
    return attrs.data_layout == f"NCHW{block // 2}c" or attrs.out_layout == f"NCHW{block // 2}c"


@relax.expr_functor.mutator
class _BlockRest(relax.PyExprMutator):
    """Blocks the ops ``ConvertLayout`` left in NCHW between blocked kernels (see the module docstring).

    ``blocked`` maps a (new) NCHW variable to the blocked variable it equals.
    Every rewritten op is emitted blocked and followed by a transform back to
    NCHW bound to the original variable; dead-code elimination removes those
    transforms that nothing reads.
    """

    def __init__(self, mod: tvm.IRModule, block: int, grouped: bool = True) -> None:
        super().__init__(mod)
        self.block, self.grouped = block, grouped
        # channel counts that blocks of ``block`` do not divide go in half blocks, where those are a vector's worth
        self.half = block // 2 if block >= 16 else None
        self.blocked: dict[relax.Var, relax.Var] = {}
        # a blocked variable -> the tensor in another block it was re-blocked from (a convolution reads that one)
        self.reblocked: dict[relax.Var, relax.Var] = {}
        # an NCHW variable -> the blocked tensor, padded to whole blocks, whose first ``channels`` channels it is
        self.padded: dict[relax.Var, tuple[relax.Var, int]] = {}
        self.padded_convolutions = 0

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        if not isinstance(binding.var, relax.DataflowVar):
            super().visit_var_binding_(binding)
            return
        value = self.visit_expr(binding.value)
        if _is_op(value, "relax.layout_transform") and isinstance(value.args[0], relax.Var):
            source = value.args[0]
            if self._is_blocking(value) and source in self.blocked:
                blocked = self.blocked[source]
                if _lanes(blocked) == self.block:
                    self.set_var_remap(binding.var, blocked)  # blocked again: the tensor it came from
                    return
                var = self.builder_.emit(_reblock(blocked, self.block), binding.var.name)  # not through NCHW
                self.reblocked[var] = blocked
                self.set_var_remap(binding.var, var)
                return
            if self._is_unblocking(value):
                var = self.builder_.emit(value, binding.var.name)
                self.blocked[var] = source
                self.set_var_remap(binding.var, var)
                return
        pushed = self._past_reblock(value)
        if pushed is not None:  # the op in its operand's own block, re-blocked after it (a convolution reads it so)
            source = self.builder_.emit(pushed)
            var = self.builder_.emit(_reblock(source, _shape(value)[4]), binding.var.name)
            self.reblocked[var] = source
            self.set_var_remap(binding.var, var)
            return
        if _is_op(value, "relax.nn.conv2d") and value.args[0] in self.reblocked:
            direct = self._reading_other_block(value)
            if direct is not None:
                var = self.builder_.emit(direct, binding.var.name)
                self.set_var_remap(binding.var, var)
                return
        if _is_op(value, "relax.nn.conv2d") and _is_grouped_blocked(value) and not self.grouped:
            var = self.builder_.emit(self._grouped_in_nchw(value), binding.var.name)
            self.set_var_remap(binding.var, var)
            return
        padded = self._rewrite_padded(value)
        if padded is not None:
            blocked_expr, channels = padded
            blocked = self.builder_.emit(blocked_expr)
            var = self.builder_.emit(_unblock_channels(blocked, channels), binding.var.name)
            self.padded[var] = (blocked, channels)
            self.set_var_remap(binding.var, var)
            return
        rewritten = self._rewrite(value)
        if rewritten is None:
            var = self.builder_.emit(value, binding.var.name)
        else:
            blocked = self.builder_.emit(rewritten)
            var = self.builder_.emit(_unblock(blocked), binding.var.name)
            self.blocked[var] = blocked
        self.set_var_remap(binding.var, var)

    def _padded_channels(self, call: relax.Call) -> int | None:
        """The whole blocks' channels an ordinary NCHW convolution's output is padded to, or None where it is not
        (its output channels divide into blocks, its input's do not, or the padding would cost more than
        :data:`PAD_TO_BLOCK_MAX_SHARE`)."""
        attrs = call.attrs
        data, weight = call.args
        shape = _shape(data)
        if (attrs.data_layout, attrs.kernel_layout) != ("NCHW", "OIHW") or attrs.groups != 1:
            return None
        if attrs.out_layout not in ("", "NCHW") or shape is None or not isinstance(weight, tvm.ir.expr.Constant):
            return None
        if data not in self.blocked and self._block_for(shape[1]) is None:
            return None
        out_channels = int(weight.value.shape[0])
        padded = -(-out_channels // self.block) * self.block
        if padded == out_channels or padded - out_channels > out_channels * PAD_TO_BLOCK_MAX_SHARE:
            return None
        return padded

    def _rewrite_padded(self, call: relax.Expr) -> tuple[relax.Expr, int] | None:
        """``call`` on tensors padded to whole blocks, and its true channel count; None where it is no such op.

        A convolution whose output channels blocks do not divide starts one (:meth:`_padded_channels`); the ops
        that act channel by channel continue it: activations, a per-channel or scalar constant operand (padded with
        zeros), a padded tensor of the same shape, pools and the global average pool. Any other reader reads the
        sliced NCHW tensor.
        """
        if not isinstance(call, relax.Call) or not isinstance(call.op, tvm.ir.Op):
            return None
        name = call.op.name
        if name == "relax.nn.conv2d":
            padded_channels = self._padded_channels(call)
            if padded_channels is None:
                return None
            data, weight = call.args
            w = weight.value.numpy()
            out_channels, in_channels = w.shape[:2]
            b_in = _lanes(self.blocked[data]) if data in self.blocked else self._block_for(in_channels)
            w = np.concatenate([w, np.zeros((padded_channels - out_channels, *w.shape[1:]), w.dtype)])
            attrs = call.attrs
            self.padded_convolutions += 1
            return relax.op.nn.conv2d(
                self._in_blocks(data, b_in), relax.const(_oihw_blocked(w, b_in, self.block), weight.value.dtype),
                strides=attrs.strides, padding=attrs.padding, dilation=attrs.dilation, groups=1,
                data_layout=f"NCHW{b_in}c", kernel_layout=f"OIHW{b_in}i{self.block}o",
                out_layout=f"NCHW{self.block}c", out_dtype=attrs.out_dtype,
            ), out_channels
        sources = [self.padded[arg] for arg in call.args if isinstance(arg, relax.Var) and arg in self.padded]
        if not sources:
            return None
        blocked, channels = sources[0]
        if name in _UNARY and call.args[0] in self.padded:
            return relax.Call(call.op, [blocked, *call.args[1:]], call.attrs), channels
        if name == "relax.mean" and call.args[0] in self.padded and self._is_spatial_mean(call):
            return relax.op.mean(blocked, axis=[2, 3], keepdims=True), channels
        if name in _POOLS and call.args[0] in self.padded and call.attrs.layout == "NCHW":
            return self._pool(call, blocked), channels
        if name in _BINARY:
            operands = [self._padded_operand(arg, blocked, channels) for arg in call.args[:2]]
            if all(operand is not None for operand in operands):
                return relax.Call(call.op, operands, call.attrs), channels
        return None

    def _padded_operand(self, arg: relax.Expr, blocked: relax.Var, channels: int) -> relax.Expr | None:
        """``arg`` as an operand beside the padded ``blocked`` (``channels`` of it real): a padded tensor of its
        shape, a scalar constant, or a per-channel constant padded with zeros and blocked; else None."""
        if isinstance(arg, relax.Var) and arg in self.padded:
            other, other_channels = self.padded[arg]
            return other if other_channels == channels and _shape(other) == _shape(blocked) else None
        shape = _shape(arg)
        if not isinstance(arg, tvm.ir.expr.Constant) or shape is None:
            return None
        if all(d == 1 for d in shape):
            return relax.const(arg.value.numpy().reshape(()), arg.value.dtype)
        if len(shape) != 4 or shape[0] != 1 or shape[1] != channels or shape[2:] != [1, 1]:
            return None
        b = _lanes(blocked)
        vector = arg.value.numpy().reshape(channels)
        vector = np.concatenate([vector, np.zeros(_shape(blocked)[1] * b - channels, vector.dtype)])
        return relax.const(np.ascontiguousarray(vector.reshape(1, -1, 1, 1, b)), arg.value.dtype)

    def _rewrite(self, call: relax.Expr) -> relax.Expr | None:
        """``call`` on blocked tensors, or None where it stays as it is."""
        if not isinstance(call, relax.Call) or not isinstance(call.op, tvm.ir.Op):
            return None
        name = call.op.name
        if name == "relax.nn.conv2d" and _is_depthwise(call):
            return self._depthwise(call)
        if name == "relax.nn.conv2d" and self._is_grouped_half_blocked(call):
            return self._grouped_half_blocked(call)
        if name == "relax.nn.conv2d" and self._is_half_blocked(call):  # first: 8 channels in are no stem
            return self._half_blocked(call)
        if name == "relax.nn.conv2d" and self._is_stem(call):
            return self._stem(call)
        if name in _POOLS and call.args[0] in self.blocked and call.attrs.layout == "NCHW":
            return self._pool(call, self.blocked[call.args[0]])
        if name == "relax.mean" and call.args[0] in self.blocked and self._is_spatial_mean(call):
            return relax.op.mean(self.blocked[call.args[0]], axis=[2, 3], keepdims=True)
        if name in _UNARY and call.args[0] in self.blocked:
            return relax.Call(call.op, [self.blocked[call.args[0]], *call.args[1:]], call.attrs)
        if name in _BINARY and any(arg in self.blocked for arg in call.args[:2]):
            # operands in different blocks: the larger one's block (a squeeze-excite gate is re-blocked, not the
            # tensor it scales)
            largest = max((self.blocked[arg] for arg in call.args[:2] if arg in self.blocked),
                          key=lambda blocked: int(np.prod(_shape(blocked))))
            left, right = (self._operand(arg, _lanes(largest)) for arg in call.args[:2])
            if left is not None and right is not None:
                return relax.Call(call.op, [left, right], call.attrs)
        if name == "relax.concat" and call.attrs.axis == 1 and isinstance(call.args[0], relax.Tuple):
            fields = call.args[0].fields
            if fields and all(f in self.blocked for f in fields):
                blocked = [self.blocked[f] for f in fields]
                if len({_lanes(b) for b in blocked}) == 1:
                    return relax.op.concat(blocked, axis=1)
        return None

    @staticmethod
    def _is_spatial_mean(call: relax.Call) -> bool:
        """A global average pool (ONNX's ``GlobalAveragePool``): the mean over H and W of NCHW, dimensions kept.

        Blocked, it reads the blocked tensor and only its (N, C, 1, 1) result
        is unblocked: a squeeze-excite block's pool no longer needs the whole
        expanded tensor transformed to NCHW, nor a classifier's head.
        """
        shape = _shape(call.args[0])
        if shape is None or len(shape) != 4 or not call.attrs.keepdims or call.attrs.axis is None:
            return False
        return sorted(int(a) % 4 for a in call.attrs.axis) == [2, 3]

    def _block_for(self, channels: int) -> int | None:
        """The block a tensor of ``channels`` channels goes in: the block where it divides, else the half block."""
        if channels % self.block == 0:
            return self.block
        if self.half and channels % self.half == 0:
            return self.half
        return None

    def _operand(self, arg: relax.Expr, lanes: int) -> relax.Expr | None:
        """``arg`` as an operand of an elementwise op on ``lanes``-blocked tensors: blocked, a scalar, or a
        per-channel vector blocked."""
        if arg in self.blocked:
            blocked = self.blocked[arg]
            return blocked if _lanes(blocked) == lanes else self.builder_.emit(_reblock(blocked, lanes))
        shape = _shape(arg)
        if shape is None:
            return None
        if all(d == 1 for d in shape):
            if isinstance(arg, tvm.ir.expr.Constant):
                return relax.const(arg.value.numpy().reshape(()), arg.value.dtype)
            return None
        if len(shape) != 4 or shape[0] != 1 or shape[2:] != [1, 1] or shape[1] % lanes:
            return None
        channels = shape[1]
        if isinstance(arg, tvm.ir.expr.Constant):
            vector = arg.value.numpy().reshape(channels // lanes, lanes)
            return relax.const(vector.reshape(1, channels // lanes, 1, 1, lanes), arg.value.dtype)
        if isinstance(arg, relax.Var):  # a squeeze-excite gate: small, blocked by one transform
            return self.builder_.emit(_block(arg, lanes))
        return None

    def _depthwise(self, call: relax.Call) -> relax.Expr | None:
        data, weight = call.args
        channels = _shape(data)[1]
        b = _lanes(self.blocked[data]) if data in self.blocked else self._block_for(channels)
        if b is None or not isinstance(weight, tvm.ir.expr.Constant):
            return None
        blocked_data = self.blocked.get(data)
        if blocked_data is None:
            blocked_data = self.builder_.emit(_block(data, b))
        w = weight.value.numpy()
        out_channels, _one, kh, kw = w.shape
        # OIHW (C, 1, KH, KW) -> OIHW1i{b}o (C/b, 1, KH, KW, 1, b): output channel o = chunk * b + lane
        w = w.reshape(out_channels // b, b, kh, kw).transpose(0, 2, 3, 1)
        w = w.reshape(out_channels // b, 1, kh, kw, 1, b)
        attrs = call.attrs
        layout = f"NCHW{b}c"
        return relax.op.nn.conv2d(
            blocked_data, relax.const(w, weight.value.dtype), strides=attrs.strides, padding=attrs.padding,
            dilation=attrs.dilation, groups=attrs.groups, data_layout=layout, kernel_layout=f"OIHW1i{b}o",
            out_layout=layout, out_dtype=attrs.out_dtype,
        )

    def _grouped_in_nchw(self, call: relax.Call) -> relax.Expr:
        """A grouped convolution ``ConvertLayout`` blocked, computed in NCHW between two layout transforms."""
        data, weight = call.args
        w = weight.value.numpy()
        out_chunks, in_chunks, kh, kw, b_in, b_out = w.shape
        # OIHW{bi}i{bo}o (O/bo, I/bi, KH, KW, bi, bo) -> OIHW (O, I, KH, KW)
        w = w.transpose(0, 5, 1, 4, 2, 3).reshape(out_chunks * b_out, in_chunks * b_in, kh, kw)
        attrs = call.attrs
        plain = self.builder_.emit(relax.op.nn.conv2d(
            self.builder_.emit(_unblock(data)), relax.const(np.ascontiguousarray(w), weight.value.dtype),
            strides=attrs.strides, padding=attrs.padding, dilation=attrs.dilation, groups=attrs.groups,
            data_layout="NCHW", kernel_layout="OIHW", out_dtype=attrs.out_dtype,
        ))
        return _block(plain, b_out)

    def _is_stem(self, call: relax.Call) -> bool:
        """An ordinary convolution with fewer input channels than a block (an RGB stem) and blocked outputs (in half
        blocks where whole ones do not divide them: ShuffleNetV2's 24)."""
        attrs = call.attrs
        data, weight = _shape(call.args[0]), call.args[1]
        if (attrs.data_layout, attrs.kernel_layout) != ("NCHW", "OIHW") or attrs.groups != 1 or data is None:
            return False
        if attrs.out_layout not in ("", "NCHW") or not isinstance(weight, tvm.ir.expr.Constant):
            return False
        out_channels = weight.value.shape[0]
        return data[1] < self.block and self._block_for(out_channels) is not None

    def _stem(self, call: relax.Call) -> relax.Expr:
        """The stem as ``conv2d_NCHWc`` with all its input channels in one block (``NCHW3c``) and blocked outputs.

        ONNX Runtime's x86 kernels do the same (an NCHW input, NCHWc output
        kernel). Left in NCHW, a ResNet's 7x7 stem ran at a third of the blocked
        convolutions' GFLOPS and its 64-channel output paid a layout transform.
        """
        data, weight = call.args
        channels = _shape(data)[1]
        b = self._block_for(weight.value.shape[0])
        blocked_data = self.builder_.emit(
            relax.op.layout_transform(data, index_map=lambda n, c, h, w: (n, c // channels, h, w, c % channels))
        )
        w = weight.value.numpy()
        out_channels, _in, kh, kw = w.shape
        # OIHW (O, I, KH, KW) -> OIHW{I}i{b}o (O/b, 1, KH, KW, I, b): output channel o = chunk * b + lane
        w = w.reshape(out_channels // b, b, channels, kh, kw).transpose(0, 3, 4, 2, 1)
        w = w.reshape(out_channels // b, 1, kh, kw, channels, b)
        attrs = call.attrs
        return relax.op.nn.conv2d(
            blocked_data, relax.const(np.ascontiguousarray(w), weight.value.dtype), strides=attrs.strides,
            padding=attrs.padding, dilation=attrs.dilation, groups=1, data_layout=f"NCHW{channels}c",
            kernel_layout=f"OIHW{channels}i{b}o", out_layout=f"NCHW{b}c", out_dtype=attrs.out_dtype,
        )

    def _is_half_blocked(self, call: relax.Call) -> bool:
        """An ordinary convolution left in NCHW whose channels divide into blocks on each side, a half block on one."""
        attrs = call.attrs
        data, weight = _shape(call.args[0]), call.args[1]
        if self.half is None or (attrs.data_layout, attrs.kernel_layout) != ("NCHW", "OIHW") or attrs.groups != 1:
            return False
        if attrs.out_layout not in ("", "NCHW") or data is None or not isinstance(weight, tvm.ir.expr.Constant):
            return False
        sides = (self._block_for(data[1]), self._block_for(weight.value.shape[0]))
        return None not in sides and self.half in sides

    def _half_blocked(self, call: relax.Call) -> relax.Expr:
        """The convolution as ``conv2d_NCHWc`` with each side in its own block: ``NCHW8c`` in, ``NCHW16c`` out..."""
        data, weight = call.args
        w = weight.value.numpy()
        out_channels, in_channels, kh, kw = w.shape
        b_in, b_out = self._block_for(in_channels), self._block_for(out_channels)
        if data in self.blocked:  # read in the block it is in: conv2d_NCHWc takes any input block
            b_in = _lanes(self.blocked[data])
        blocked_data = self._in_blocks(data, b_in)
        w = _oihw_blocked(w, b_in, b_out)
        attrs = call.attrs
        return relax.op.nn.conv2d(
            blocked_data, relax.const(w, weight.value.dtype), strides=attrs.strides,
            padding=attrs.padding, dilation=attrs.dilation, groups=1, data_layout=f"NCHW{b_in}c",
            kernel_layout=f"OIHW{b_in}i{b_out}o", out_layout=f"NCHW{b_out}c", out_dtype=attrs.out_dtype,
        )

    def _is_grouped_half_blocked(self, call: relax.Call) -> bool:
        """A grouped convolution left in NCHW whose groups are whole half blocks (RegNetY's and ResNeXt-50's 8
        channels per group under blocks of 16), unless ``tuning.block_grouped`` is off."""
        attrs = call.attrs
        if not self.grouped or self.half is None or attrs.groups == 1 or _is_depthwise(call):
            return False
        if (attrs.data_layout, attrs.kernel_layout) != ("NCHW", "OIHW") or attrs.out_layout not in ("", "NCHW"):
            return False
        weight = call.args[1]
        if _shape(call.args[0]) is None or not isinstance(weight, tvm.ir.expr.Constant):
            return False
        out_channels, group_in = weight.value.shape[0], weight.value.shape[1]
        return out_channels % attrs.groups == 0 and group_in % self.half == 0 and (out_channels // attrs.groups) % self.half == 0

    def _grouped_half_blocked(self, call: relax.Call) -> relax.Expr:
        """The grouped convolution as ``group_conv2d_NCHWc`` in half blocks (``NCHW8c`` in and out): its loop nest is an
        ordinary blocked convolution's, seeded by the library's, where in NCHW it started from its untuned loops (16-50
        GFLOPS on RegNetY-400MF). A tensor blocked by 16 is re-blocked by 8 before it and after it: the same number of
        layout transforms as NCHW between blocked neighbours."""
        data, weight = call.args
        b = self.half
        blocked_data = self._in_blocks(data, b)
        w = _oihw_blocked(weight.value.numpy(), b, b)  # the input axis is one group's channels
        attrs = call.attrs
        return relax.op.nn.conv2d(
            blocked_data, relax.const(w, weight.value.dtype), strides=attrs.strides,
            padding=attrs.padding, dilation=attrs.dilation, groups=attrs.groups, data_layout=f"NCHW{b}c",
            kernel_layout=f"OIHW{b}i{b}o", out_layout=f"NCHW{b}c", out_dtype=attrs.out_dtype,
        )

    def _in_blocks(self, data: relax.Expr, b: int) -> relax.Expr:
        """``data`` blocked by ``b``: the blocked tensor it already equals, re-blocked from its other block, else a
        layout transform of it."""
        blocked = self.blocked.get(data)
        if blocked is None:
            return self.builder_.emit(_block(data, b))
        if _lanes(blocked) != b:
            return self.builder_.emit(_reblock(blocked, b))
        return blocked

    def _past_reblock(self, call: relax.Expr) -> relax.Expr | None:
        """An elementwise op ``ConvertLayout`` blocked on a re-blocked tensor, in that tensor's own block: its other
        operand is a constant, a per-channel gate (re-blocked: a few values, not the whole tensor) or re-blocked from
        the same block. None where it is not such an op."""
        if _is_op(call, _UNARY) and call.args[0] in self.reblocked:
            return relax.Call(call.op, [self.reblocked[call.args[0]], *call.args[1:]], call.attrs)
        if not _is_op(call, _BINARY) or not any(arg in self.reblocked for arg in call.args[:2]):
            return None
        shape = _shape(call)
        big = next(arg for arg in call.args[:2] if arg in self.reblocked)
        lanes = _lanes(self.reblocked[big])
        if shape is None or len(shape) != 5 or _shape(big) != shape:
            return None
        operands = []
        for arg in call.args[:2]:
            arg_shape = _shape(arg)
            if arg in self.reblocked and _lanes(self.reblocked[arg]) == lanes:
                operands.append(self.reblocked[arg])
            elif isinstance(arg, tvm.ir.expr.Constant):
                operands.append(_constant_in_block(arg, lanes))
            elif isinstance(arg, relax.Var) and arg_shape is not None and len(arg_shape) == 5 \
                    and arg_shape[2:4] == [1, 1] and shape[2:4] != [1, 1]:
                operands.append(self.builder_.emit(_reblock(arg, lanes)))
            else:
                return None
        if any(operand is None for operand in operands):
            return None
        return relax.Call(call.op, operands, call.attrs)

    def _reading_other_block(self, call: relax.Call) -> relax.Expr | None:
        """An ordinary blocked convolution whose input was re-blocked, reading the tensor in its own block instead
        (``conv2d_NCHWc`` with ``NCHW8c`` data and ``NCHW16c`` output, or the other way): no layout transform."""
        attrs, (data, weight) = call.attrs, call.args
        if attrs.groups != 1 or not isinstance(weight, tvm.ir.expr.Constant) or attrs.data_layout == "NCHW":
            return None
        w = weight.value.numpy()
        if w.ndim != 6 or attrs.kernel_layout != f"OIHW{w.shape[4]}i{w.shape[5]}o":
            return None
        source = self.reblocked[data]
        b_in, b_out = _lanes(source), w.shape[5]
        # OIHW{bi}i{bo}o (O/bo, I/bi, KH, KW, bi, bo) -> OIHW, then blocked by the source's block on the input side
        chunks_out, chunks_in, kh, kw, lanes_in, _ = w.shape
        w = w.transpose(0, 5, 1, 4, 2, 3).reshape(chunks_out * b_out, chunks_in * lanes_in, kh, kw)
        return relax.op.nn.conv2d(
            source, relax.const(_oihw_blocked(w, b_in, b_out), weight.value.dtype), strides=attrs.strides,
            padding=attrs.padding, dilation=attrs.dilation, groups=1, data_layout=f"NCHW{b_in}c",
            kernel_layout=f"OIHW{b_in}i{b_out}o", out_layout=attrs.out_layout or attrs.data_layout,
            out_dtype=attrs.out_dtype,
        )

    def _pool(self, call: relax.Call, data: relax.Expr) -> relax.Expr:
        """A max/average pooling ``call`` of an NCHW tensor on ``data``, its blocked form (TOPI pools any ``NCHW{b}c``)."""
        attrs = call.attrs
        layout = f"NCHW{_lanes(data)}c"
        common = dict(pool_size=attrs.pool_size, strides=attrs.strides, padding=attrs.padding,
                      dilation=attrs.dilation, ceil_mode=attrs.ceil_mode, layout=layout, out_layout=layout)
        if call.op.name == "relax.nn.max_pool2d":
            return relax.op.nn.max_pool2d(data, **common)
        return relax.op.nn.avg_pool2d(data, count_include_pad=attrs.count_include_pad, **common)

    def _is_blocking(self, call: relax.Call) -> bool:
        b = self.block
        return call.attrs.pad_value is None and _maps_like(
            call.attrs.index_map, 4, lambda n, c, h, w: (n, c // b, h, w, c % b))

    def _is_unblocking(self, call: relax.Call) -> bool:
        b = self.block
        return _maps_like(call.attrs.index_map, 5, lambda n, c, h, w, v: (n, c * b + v, h, w))


def _is_grouped_blocked(call: relax.Call) -> bool:
    """A grouped convolution (not depthwise) that ``ConvertLayout`` blocked: each group whole blocks."""
    attrs = call.attrs
    return attrs.groups > 1 and attrs.data_layout != "NCHW" and not attrs.kernel_layout.startswith("OIHW1i")


def _oihw_blocked(w: np.ndarray, b_in: int, b_out: int) -> np.ndarray:
    """An ``OIHW`` weight (O, I, KH, KW) as ``OIHW{b_in}i{b_out}o`` (O/b_out, I/b_in, KH, KW, b_in, b_out)."""
    out_channels, in_channels, kh, kw = w.shape
    w = w.reshape(out_channels // b_out, b_out, in_channels // b_in, b_in, kh, kw).transpose(0, 2, 4, 5, 3, 1)
    return np.ascontiguousarray(w)


def _lanes(blocked: relax.Expr) -> int:
    """Channels per block of a blocked (``NCHW{b}c``) tensor: its innermost extent."""
    return _shape(blocked)[4]


def _block(var: relax.Expr, b: int) -> relax.Expr:
    return relax.op.layout_transform(var, index_map=lambda n, c, h, w: (n, c // b, h, w, c % b))


def _reblock(blocked: relax.Expr, b: int) -> relax.Expr:
    """A tensor blocked by one block (``NCHW16c``) in another (``NCHW8c``) in one transform, not two through NCHW."""
    lanes = _lanes(blocked)
    return relax.op.layout_transform(
        blocked, index_map=lambda n, c, h, w, v: (n, (c * lanes + v) // b, h, w, (c * lanes + v) % b))


def _unblock(var: relax.Expr) -> relax.Expr:
    b = _lanes(var)
    return relax.op.layout_transform(var, index_map=lambda n, c, h, w, v: (n, c * b + v, h, w))


def _unblock_channels(var: relax.Expr, channels: int) -> relax.Expr:
    """A blocked tensor padded to whole blocks back in NCHW: its first ``channels`` channels (the transform and the
    slice fuse into one kernel)."""
    return relax.op.strided_slice(_unblock(var), axes=[1], begin=[0], end=[channels])


def _maps_like(index_map: Any, arity: int, expected: Callable[..., tuple[int, ...]]) -> bool:
    """``index_map`` sends probe indices where ``expected`` does (its variables' dtypes vary, so compare values)."""
    if len(index_map.initial_indices) != arity:
        return False
    analyzer = tvm.sym.Analyzer()
    for probe in ((0, 0, 0, 0, 0), (1, 3, 5, 7, 2), (2, 17, 1, 4, 15), (0, 38, 9, 11, 7)):
        probe = probe[:arity]
        got = [analyzer.simplify(e) for e in index_map.map_indices([tvm.tirx.const(i, "int64") for i in probe])]
        if not all(isinstance(g, tvm.tirx.IntImm) for g in got) or [int(g) for g in got] != list(expected(*probe)):
            return False
    return True


def _lower_conv2d(bb: relax.BlockBuilder, call: relax.Call, winograd: bool | Collection[str] = False) -> relax.Expr:
    """LegalizeOps for ``relax.nn.conv2d``: NCHW as Relax does it, blocked ones to the blocked computes."""
    attrs = call.attrs
    if attrs.data_layout == "NCHW":
        return tvm.ir.Op.get("relax.nn.conv2d").get_attr("FLegalize")(bb, call)
    data, kernel = call.args
    layout, out_dtype = attrs.data_layout, attrs.out_dtype or "float32"
    if attrs.kernel_layout.startswith("OIHW1i") and attrs.groups > 1:
        return bb.call_te(
            depthwise_conv2d_nchwc, data, kernel, attrs.strides, attrs.padding, attrs.dilation, out_dtype,
            primfunc_name_hint="depthwise_conv2d_NCHWc",
        )
    if attrs.groups != 1:
        if attrs.out_layout not in ("", layout):
            raise ValueError(f"no lowering for a grouped conv2d from {layout} to {attrs.out_layout}")
        return bb.call_te(
            group_conv2d_nchwc, data, kernel, attrs.strides, attrs.padding, attrs.dilation, attrs.groups, out_dtype,
            primfunc_name_hint="group_conv2d_NCHWc",
        )
    if winograd and isinstance(kernel, tvm.ir.expr.Constant) and winograd_applies(
            layout, attrs.kernel_layout, attrs.out_layout, kernel.value.shape, attrs.strides, attrs.dilation,
            attrs.groups, out_dtype, _out_size(call)) and (
            winograd is True or shape_key(_shape(data), _shape(call)) in winograd):
        return _lower_winograd(bb, data, kernel, attrs.padding)
    return bb.call_te(
        topi.nn.conv2d_NCHWc, data, kernel, attrs.strides, attrs.padding, attrs.dilation,
        layout, attrs.out_layout or layout, out_dtype, primfunc_name_hint="conv2d_NCHWc",
    )


def _out_size(call: relax.Call) -> tuple[int, int, int]:
    """Batch, height and width of a blocked convolution's output (``NCHW{b}c``); zeros where not static."""
    shape = _shape(call)
    return (shape[0], shape[2], shape[3]) if shape else (0, 0, 0)


#: Relax's OpPatternKind kOutEWiseFusable: what AnnotateTIROpPattern finds for a convolution, so that FuseOps fuses
#: the elementwise ops after it (bias, activation, a residual add) into its kernel
OUT_ELEMWISE_FUSABLE = 4


def _lower_winograd(bb: relax.BlockBuilder, data: relax.Expr, kernel: Any, padding: Any) -> relax.Expr:
    """A 3x3 stride-1 convolution in the Winograd form, its weights transformed here, once."""
    blocked = kernel.value.numpy()  # (O/o, I/i, 3, 3, i, o): the output's lanes are o
    call = bb.call_te(conv2d_winograd_nchwc, data, relax.const(transform_weights(blocked)), padding, blocked.shape[5],
                      primfunc_name_hint=WINOGRAD_FUNC)
    gvar = call.args[0]
    # the analysis finds a multi-stage function opaque, which would leave its bias and activation as kernels of their own
    bb.update_func(gvar, bb.get()[gvar].with_attr("op_pattern", OUT_ELEMWISE_FUSABLE))
    return call
