"""The kernels a prepared graph compiles to, by class: what tuning can speed up and what only moves memory.

A graph that left a foldable kernel behind (a batch norm, an activation that
did not fuse into its convolution) shows up here as a memory-bound kernel
reading a compute-bound kernel's output. ``edgetune tune`` prints the
inventory (``--trials 0`` prints it without tuning) and writes it to
``summary.json``.

Classes:

* ``compute`` (compute-bound): a reduction whose update multiplies values read
  from two different buffers: convolutions, dense layers, matmuls, with
  whatever epilogue fused into them.
* ``memory`` (memory-bound), by kind: ``elementwise`` (same-shape or broadcast
  arithmetic), ``data-movement`` (reshape, transpose, concat, pad...),
  ``reduction`` (pooling, softmax, norms, means), ``other``.

On a quantized model each kernel also says its arithmetic (``precision``):
``int8`` for a contraction of int8 operands (the ``integer`` pass's
convolutions and dense layers), ``float`` for a quantized operator computed in
float between dequantize and quantize (what that pass leaves in float).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

import tvm
from tvm import relax, tirx
from tvm.s_tir import SBlock

#: MetaSchedule / Relax op pattern kinds (tvm.relay.op.OpPattern before Relay was removed)
_PATTERN_KINDS = {0: "elementwise", 1: "elementwise", 2: "data-movement", 3: "reduction", 4: "compute", 7: "data-movement"}


@dataclass
class Kernel:
    """One tuning task of the prepared graph."""

    name: str
    weight: int  # how many times the model calls it
    klass: str  # "compute" or "memory"
    kind: str  # "contraction" for compute; elementwise / data-movement / reduction / other for memory
    after_compute: bool = False  # reads the output of a compute-bound kernel directly
    #: a convolution kernel's layout ("NCHW", "NCHWc"); empty for other kernels
    layout: str = ""
    #: why a convolution is in NCHW under a blocked layout (the graph's reason for it), why a quantized operator
    #: runs in float, else empty
    note: str = ""
    #: "int8" (int8 operands, int32 accumulation), "float" (a quantized operator computed in float), else empty
    precision: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class KernelInventory:
    kernels: list[Kernel] = field(default_factory=list)

    @property
    def compute_bound(self) -> int:
        return sum(1 for k in self.kernels if k.klass == "compute")

    @property
    def memory_bound(self) -> int:
        return sum(1 for k in self.kernels if k.klass == "memory")

    @property
    def foldable(self) -> list[str]:
        """Kernels a better graph would not have: batch norms, and elementwise passes right after a compute kernel."""
        return [
            k.name for k in self.kernels
            if "batch_norm" in k.name or (k.klass == "memory" and k.kind == "elementwise" and k.after_compute)
        ]

    def describe(self) -> str:
        kinds = Counter(k.kind for k in self.kernels if k.klass == "memory")
        memory = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
        line = f"kernels: {self.compute_bound} compute-bound, {self.memory_bound} memory-bound"
        line += f" ({memory})" if memory else ""
        if self.foldable:
            line += f"; left unfused: {', '.join(self.foldable)}"
        unblocked = [k.name for k in self.kernels if k.note and not k.precision]
        if unblocked:
            line += f"; in NCHW under the blocked layout: {', '.join(unblocked)}"
        integer = sum(1 for k in self.kernels if k.precision == "int8")
        in_float = [k.name for k in self.kernels if k.precision == "float"]
        if integer or in_float:
            line += f"; {integer} int8 kernel(s)"
            epilogues = sum(1 for k in self.kernels if k.note == FUSED_FLOAT_NOTE)
            line += f" ({epilogues} with a quantized operator in float fused)" if epilogues else ""
        if in_float:
            line += f", quantized operators in float: {', '.join(in_float)}"
        return line

    def to_dict(self) -> dict[str, Any]:
        return {
            "compute_bound": self.compute_bound,
            "memory_bound": self.memory_bound,
            "foldable": self.foldable,
            "kernels": [k.to_dict() for k in self.kernels],
        }


def kernel_inventory(prepared: tvm.IRModule, tasks: Sequence[Any], unblocked: Sequence[Any] = ()) -> KernelInventory:
    """Classify ``tasks`` (MetaSchedule ``ExtractedTask``s of ``prepared``, the fused module).

    ``unblocked``: the convolutions the blocked layout left in NCHW (:func:`~edgetune.tasks.blocking.unblocked_convolutions`),
    whose reasons go on the kernels that compute them.
    """
    producers = _compute_producers(prepared)
    kernels = []
    for task in tasks:
        func = _prim_func(task.dispatched[0])
        kind = classify(func)
        klass = "compute" if kind == "contraction" else "memory"
        layout = conv_layout_of(func) if klass == "compute" else ""
        note = _unblocked_reason(func, unblocked) if layout == "NCHW" else ""
        precision = precision_of(func, klass == "compute")
        if precision == "float":
            note = FLOAT_NOTE
        elif precision == "int8" and _quantizes(func):
            note = FUSED_FLOAT_NOTE
        kernels.append(Kernel(task.task_name, int(task.weight), klass, kind, task.task_name in producers["after_compute"],
                              layout, note, precision))
    return KernelInventory(kernels)


#: the note on a kernel that computes a quantized operator in float
FLOAT_NOTE = "a quantized operator computed in float (dequantize -> float32 -> quantize): no integer form"


#: the note on an int8 kernel whose fused epilogue also computes one in float (a residual add after a projection)
FUSED_FLOAT_NOTE = "int8 accumulation; its fused epilogue computes a quantized operator in float (a residual add...)"


def precision_of(func: tirx.PrimFunc, contraction: bool) -> str:
    """``int8`` for a contraction of int8/uint8 operands, ``float`` for a kernel that dequantizes or quantizes, else empty."""
    if contraction and _contracts_int8(func):
        return "int8"
    return "float" if _quantizes(func) else ""


def _quantizes(func: tirx.PrimFunc) -> bool:
    """Whether ``func`` computes a legalized ``R.dequantize``/``R.quantize`` (blocks ``dequantized``/``quantized``)."""
    return any(b.name_hint.startswith(("dequantized", "quantized")) for b in _blocks(func))


def _contracts_int8(func: tirx.PrimFunc) -> bool:
    """A reduction block whose update multiplies two int8 (or uint8) loads, widened: int8 x int8 -> int32."""
    found = False

    def visit(node: Any) -> None:
        nonlocal found
        if isinstance(node, tirx.Mul):
            dtypes = {_loaded_dtype(side) for side in (node.a, node.b)}
            if dtypes <= {"int8", "uint8"} and str(node.ty) == "int32":
                found = True

    for block in _blocks(func):
        if any(int(iv.iter_type) == 2 for iv in block.iter_vars):
            _walk(block.body, visit)
    return found


def _loaded_dtype(expr: Any) -> str:
    """The dtype of the buffer an operand reads, under its casts ("" for anything but a load)."""
    while isinstance(expr, tirx.Cast):
        expr = expr.value
    return str(expr.ty) if isinstance(expr, tvm.ir.TensorLoad) else ""


def conv_layout_of(func: tirx.PrimFunc) -> str:
    """``NCHWc`` for a blocked convolution's kernel, ``NCHW`` for a plain one, empty for a kernel with no convolution."""
    names = [b.name_hint for b in _blocks(func)]
    if any("conv2d" in name and "NCHWc" in name for name in names):
        return "NCHWc"
    if any("conv2d" in name and "nchw" in name for name in names):
        return "NCHW"
    if any("conv2d" in name and "nhwc" in name for name in names):
        return "NHWC"  # a TensorFlow Lite model's convolution left in its layout (an int8 one under a blocked layout)
    return ""


def _unblocked_reason(func: tirx.PrimFunc, unblocked: Sequence[Any]) -> str:
    """The graph's reason for the NCHW convolution ``func`` computes: the one whose data and weight shapes it takes."""
    shapes = set()
    for param in func.params:
        shape = getattr(param.ty, "shape", None)
        if shape is not None and all(isinstance(d, tirx.IntImm) for d in shape):
            shapes.add(tuple(int(d) for d in shape))
    for conv in unblocked:
        if tuple(conv.data_shape) in shapes and tuple(conv.weight_shape) in shapes:
            return conv.reason
    return ""


def classify(func: tirx.PrimFunc) -> str:
    """``contraction`` for a compute-bound PrimFunc, else the kind of memory-bound pass it is."""
    if _is_contraction(func):
        return "contraction"
    annotated = relax.transform.AnnotateTIROpPattern()(tvm.IRModule({"main": func}))["main"]
    pattern = annotated.attrs.get("op_pattern") if annotated.attrs is not None else None
    kind = _PATTERN_KINDS.get(int(pattern), "other") if pattern is not None else "other"
    if kind == "compute":  # out-elementwise-fusable without a two-operand product: a pooling window
        return "reduction"
    if kind == "elementwise" and _has_reduction(func):
        return "reduction"
    if kind == "other" and all("layout_transform" in b.name_hint for b in _blocks(func) if b.name_hint != "root"):
        return "data-movement"  # a blocked layout's transform: opaque to the op pattern, a copy all the same
    return kind


def _prim_func(mod: tvm.IRModule) -> tirx.PrimFunc:
    funcs = [f for _g, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)]
    return funcs[0]


def _walk(node: Any, visit: Any) -> None:
    """Call ``visit`` on every TIR statement and expression under ``node`` (Python has no TIR visitor in 0.27)."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)) or type(item).__name__ == "Array":
            stack.extend(item)
            continue
        if not isinstance(item, (tirx.Stmt, tvm.ir.Expr)):
            continue
        visit(item)
        info = type(item).__tvm_ffi_type_info__
        while info is not None:
            for fld in info.fields:
                if fld.name not in ("span", "buffer", "var", "loop_var", "iter_var", "dom", "thread_binding"):
                    stack.append(getattr(item, fld.name))
            info = info.parent_type_info


def _blocks(func: tirx.PrimFunc) -> list[Any]:
    blocks: list[Any] = []
    _walk(func.body, lambda node: blocks.append(node) if isinstance(node, SBlock) else None)
    return blocks


def _has_reduction(func: tirx.PrimFunc) -> bool:
    return any(any(int(iv.iter_type) == 2 for iv in block.iter_vars) for block in _blocks(func))


def _is_contraction(func: tirx.PrimFunc) -> bool:
    """A reduction block whose update multiplies loads of two different buffers (x * w, a * b)."""
    for block in _blocks(func):
        if not any(int(iv.iter_type) == 2 for iv in block.iter_vars):
            continue
        found = False

        def visit(node: Any) -> None:
            nonlocal found
            if isinstance(node, tirx.Mul):
                loads = [_loaded_buffer(side) for side in (node.a, node.b)]
                if all(loads) and loads[0] != loads[1]:
                    found = True

        _walk(block.body, visit)
        if found:
            return True
    return False


def _loaded_buffer(expr: Any) -> str | None:
    """The buffer an operand reads, looking through casts and padding selects."""
    while isinstance(expr, tirx.Cast):
        expr = expr.value
    if isinstance(expr, tvm.ir.TensorLoad):  # a BufferLoad in TVM 0.27
        return str(getattr(expr.source, "name", expr.source))
    return None


def _compute_producers(prepared: tvm.IRModule) -> dict[str, set[str]]:
    """Which kernels (by PrimFunc name) take a contraction kernel's output as an argument in ``main``."""
    compute = {
        gvar.name_hint for gvar, func in prepared.functions_items()
        if isinstance(func, tirx.PrimFunc) and _is_contraction(func)
    }
    produced_by: dict[Any, str] = {}
    after: set[str] = set()

    def visit(expr: Any) -> None:
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.call_tir":
            callee = expr.args[0].name_hint
            for arg in expr.args[1].fields if isinstance(expr.args[1], relax.Tuple) else [expr.args[1]]:
                if produced_by.get(arg) in compute:
                    after.add(callee)

    main = prepared["main"]
    for block in main.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.call_tir":
                visit(value)
                produced_by[binding.var] = value.args[0].name_hint
    return {"after_compute": after}
