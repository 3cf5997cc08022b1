"""Small readers of Relax expressions that the graph passes share (which operator a call is, a static shape)."""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax


def op_name(expr: Any) -> str:
    """The operator ``expr`` calls (``relax.nn.conv2d``), or "" when it is not a call of an operator."""
    return expr.op.name if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) else ""


def is_op(expr: Any, names: str | set[str] | frozenset[str]) -> bool:
    """Whether ``expr`` is a call of the operator ``names`` (one name, or any of a set)."""
    name = op_name(expr)
    return bool(name) and (name == names if isinstance(names, str) else name in names)


def static_shape(expr: relax.Expr) -> list[int] | None:
    """``expr``'s shape as ints, or None where a dimension is not a constant."""
    values = getattr(getattr(getattr(expr, "ty", None), "shape", None), "values", None)
    if values is None or not all(isinstance(v, tvm.tirx.IntImm) for v in values):
        return None
    return [int(v) for v in values]
