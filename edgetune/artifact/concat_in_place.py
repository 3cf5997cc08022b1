"""Concatenations built in place: each producer writes straight into its slice of the concat's output.

SqueezeNet's fire modules concatenate two convolutions' outputs along channels,
and so do ShuffleNet's units. Built as Relax builds them, every such concat is
a kernel that copies both inputs into a new buffer, and the next convolution
reads that copy from memory: in SqueezeNet 1.0 at 224x224 the fire modules'
concats and the cold reads after them cost about a quarter of the model's
time (``benchmarks/kernels_in_context.py``), while the same kernels ran 5-10x
faster on warm buffers.

Where a concat joins contiguous slices (every dimension before the axis is 1,
as for a batch of one along channels, plain or blocked NCHWc) and each input is
a buffer that exactly one kernel writes and only the concat reads, this pass,
run right after ``StaticPlanBlockMemory``, gives the group a storage of its
own: the concat's output lies over it and each input is a view of its slice
(``R.memory.alloc_tensor`` at the slice's byte offset, made zero-offset with
``R.memory.ensure_zero_offset`` as kernels require). The producers then write
the concatenated tensor themselves and the concat kernel is dropped. The
kernels are unchanged, so tuned records and the schedule library still apply.

Only for CPU targets: ``ensure_zero_offset`` copies (which would break the
aliasing) on devices whose pointers the host cannot offset, and where an offset
is not a multiple of the runtime's 64-byte alignment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tvm
from tvm import relax, tirx

ALLOC_ALIGNMENT = 64  # the runtime's kAllocAlignment: ensure_zero_offset copies below it
_ALLOC_TENSOR = "relax.memory.alloc_tensor"


@dataclass(frozen=True)
class _Alloc:
    index: int  # of its binding in the block
    shape: tuple[int, ...]
    dtype: str


def concat_axis(func: Any, n_inputs: int) -> int | None:
    """The axis ``func`` (a PrimFunc) concatenates its first ``n_inputs`` parameters along, or None if it is no concat.

    A legalized ``concat``: loops around one block whose single store into the
    last parameter selects (``if_then_else``) among loads of the inputs, each
    read once, and shapes that differ only along the axis, where the output's
    is the inputs' sum. Anything else, or IR this does not know, is no concat.
    """
    if not isinstance(func, tirx.PrimFunc) or len(func.params) != n_inputs + 1:
        return None
    try:
        shapes = [tuple(int(d) for d in p.ty.shape) for p in func.params]
        node = func.body
        for _ in range(64):
            if isinstance(node, tirx.BufferStore):
                break
            node = node.block if hasattr(node, "block") else node.body
        else:
            return None
        if not node.buffer.same_as(func.params[-1]):
            return None
        sources: list[Any] = []
        pending = [node.value]
        while pending:
            expr = pending.pop()
            if isinstance(expr, tvm.ir.expr.Call) and getattr(expr.op, "name", "") == "prim.if_then_else":
                pending += [expr.args[2], expr.args[1]]
            else:
                sources.append(expr.source)  # a load; anything else raises, and is no concat
    except (AttributeError, TypeError, ValueError):
        return None
    if len(sources) != n_inputs or not all(src.same_as(p) for src, p in zip(sorted(
            sources, key=lambda src: [p.same_as(src) for p in func.params].index(True)
            if any(p.same_as(src) for p in func.params) else -1), func.params)):
        return None
    *inputs, out = shapes
    if any(len(shape) != len(out) for shape in inputs):
        return None
    axes = [k for k in range(len(out)) if any(shape[k] != out[k] for shape in inputs)]
    if len(axes) != 1 or sum(shape[axes[0]] for shape in inputs) != out[axes[0]]:
        return None
    return axes[0]


def _alloc_of(value: Any) -> tuple[tuple[int, ...], str] | None:
    """(shape, dtype) of an ``R.memory.alloc_tensor`` at offset 0 with a static shape, else None."""
    if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name == _ALLOC_TENSOR):
        return None
    _storage, offset, shape, dtype = value.args[:4]
    if not isinstance(shape, relax.ShapeExpr) or not all(isinstance(d, tirx.IntImm) for d in shape.values):
        return None
    if not isinstance(offset, tirx.IntImm) or int(offset.value) != 0:
        return None
    return tuple(int(d) for d in shape.values), str(dtype.value)


def _vars_in(expr: Any) -> list[relax.Var]:
    found: list[relax.Var] = []
    relax.analysis.post_order_visit(expr, lambda node: found.append(node) if isinstance(node, relax.Var) else None)
    return found


def _nbytes(shape: tuple[int, ...], dtype: str) -> int:
    count = 1
    for d in shape:
        count *= d
    return count * tvm.runtime.DataType(dtype).bits // 8


def _rewrite_block(block: relax.BindingBlock, mod: tvm.IRModule, outside_uses: set[relax.Var]) -> tuple[relax.BindingBlock, int]:
    bindings = list(block.bindings)
    root: dict[relax.Var, relax.Var] = {}
    allocs: dict[relax.Var, _Alloc] = {}
    uses: dict[relax.Var, list[tuple[int, bool]]] = {}  # root -> (binding index, whether a kernel's argument) per use
    for i, binding in enumerate(bindings):
        if not isinstance(binding, relax.VarBinding):
            return block, 0
        value = binding.value
        if isinstance(value, relax.Var):
            root[binding.var] = root.get(value, value)
            continue
        alloc = _alloc_of(value)
        if alloc is not None:
            allocs[binding.var] = _Alloc(i, *alloc)
        if isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar):
            for arg in value.args:
                for var in _vars_in(arg):
                    uses.setdefault(root.get(var, var), []).append((i, arg.same_as(var)))
        else:
            for var in _vars_in(value):
                uses.setdefault(root.get(var, var), []).append((i, False))
    escaped = {root.get(v, v) for v in outside_uses}

    def callee(i: int) -> Any:
        op = bindings[i].value.op
        return mod[op] if isinstance(op, relax.GlobalVar) and op in mod.functions else None

    groups = []  # (concat binding index, [input allocs], output alloc)
    claimed: set[relax.Var] = set()
    for i, binding in enumerate(bindings):
        value = binding.value
        if not (isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar)):
            continue
        if not value.op.name_hint.startswith("concatenate") or len(value.args) < 3:
            continue
        n = len(value.args) - 1
        axis = concat_axis(callee(i), n)
        if axis is None or binding.var in escaped or uses.get(binding.var):
            continue
        args = [root.get(a, a) if isinstance(a, relax.Var) else None for a in value.args]
        if any(a is None or a not in allocs or a in escaped or a in claimed for a in args) or len(set(args)) != len(args):
            continue
        *inputs, out = args
        if any(u[0] < i for u in uses.get(out, [])):  # written before the concat: not the concat's alone
            continue
        if any(d != 1 for d in allocs[out].shape[:axis]):
            continue
        if len({allocs[a].dtype for a in args}) != 1:
            continue
        fits = True
        offset = 0
        for a in inputs:
            a_uses = uses.get(a, [])
            # one kernel before the concat takes it, so writes it (an output of a kernel with several included),
            # and only the concat reads it
            producers = [index for index, _ in a_uses if index != i]
            if (len(a_uses) != 2 or not all(direct for _, direct in a_uses) or len(producers) != 1
                    or producers[0] > i or not isinstance(callee(producers[0]), tirx.PrimFunc)
                    or offset % ALLOC_ALIGNMENT):
                fits = False
                break
            offset += _nbytes(allocs[a].shape, allocs[a].dtype)
        if fits and offset == _nbytes(allocs[out].shape, allocs[out].dtype):
            groups.append((i, inputs, out))
            claimed.update(args)
    if not groups:
        return block, 0

    replace: dict[int, list[relax.Binding]] = {}
    before: dict[int, list[relax.Binding]] = {}
    dropped: set[int] = set()
    for concat_index, inputs, out in groups:
        dtype = allocs[out].dtype
        storage = relax.Var("concat_storage", relax.ObjectType())
        size = _nbytes(allocs[out].shape, dtype)
        first = min(allocs[a].index for a in [*inputs, out])
        before.setdefault(first, []).append(relax.VarBinding(
            storage, relax.op.memory.alloc_storage(relax.ShapeExpr([size]), 0, "global", dtype)))
        offsets = [0]
        for a in inputs:
            offsets.append(offsets[-1] + _nbytes(allocs[a].shape, dtype))
        for a, offset in [*zip(inputs, offsets), (out, 0)]:
            alloc = allocs[a]
            view = relax.op.memory.alloc_tensor(storage, offset, relax.ShapeExpr(list(alloc.shape)), dtype)
            if offset == 0:
                replace[alloc.index] = [relax.VarBinding(a, view)]
            else:
                at_offset = relax.Var(f"{a.name}_at_offset", a.ty)
                replace[alloc.index] = [relax.VarBinding(at_offset, view),
                                        relax.VarBinding(a, relax.op.memory.ensure_zero_offset(at_offset))]
        dropped.add(concat_index)
    new_bindings: list[relax.Binding] = []
    for i, binding in enumerate(bindings):
        new_bindings += before.get(i, [])
        if i not in dropped:
            new_bindings += replace.get(i, [binding])
    return relax.BindingBlock(new_bindings), len(groups)


@tvm.transform.module_pass(opt_level=0, name="ConcatInPlace")
class ConcatInPlace:
    """Run after ``StaticPlanBlockMemory`` (CPU targets): concats whose inputs can be views of their output become them."""

    def transform_module(self, mod: tvm.IRModule, _ctx: Any) -> tvm.IRModule:
        updates = {}
        for gv, func in mod.functions_items():
            if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
                continue
            blocks = list(func.body.blocks)
            changed = False
            for k, block in enumerate(blocks):
                outside: set[relax.Var] = set(_vars_in(func.body.body))
                for j, other in enumerate(blocks):
                    if j != k:
                        for b in other.bindings:
                            outside.update(_vars_in(b.value))
                new_block, count = _rewrite_block(block, mod, outside)
                if count:
                    blocks[k] = new_block
                    changed = True
            if changed:
                updates[gv] = relax.Function(func.params, relax.SeqExpr(blocks, func.body.body), func.ret_ty,
                                             func.is_pure, func.attrs, func.span)
        if not updates:
            return mod
        mod = mod.clone()  # a pass returns a new module and leaves its input as it was
        for gv, func in updates.items():
            mod[gv] = func
        return mod
