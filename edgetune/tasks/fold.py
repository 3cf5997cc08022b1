"""Constant folding on the host, with numpy, before Relax's ``FoldConstant``.

Relax's ``FoldConstant`` folds an operator on constants by legalizing it to a
PrimFunc, compiling that with LLVM and running it: about 30 ms per distinct
shape. Graph preparation folds hundreds of them: every bias reshape of an
ONNX import (81 in EfficientNet-B0), every weight layout transform the
blocked layout inserts (140), the dynamo exporter's ``isnan`` guards (70).
That was half of ``prepare_graph``'s time, paid by every tune, build and
deploy, and by the tests.

:func:`fold_constants` folds the operators whose numpy form is exactly
TVM's (data movement, ``isnan``, IEEE float32 arithmetic) with numpy first;
Relax's ``FoldConstant`` then folds whatever is left, as before. A fold whose
result does not have the call's static shape and dtype is left to TVM.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import tvm
from tvm import relax

_CONSTANT = type(relax.const(0.0))  # tvm.ir.expr.GenericConst: a Relax tensor constant


def fold_constants() -> tvm.transform.Pass:
    """Relax's ``FoldConstant``, after the operators numpy folds exactly are folded on the host."""
    return tvm.transform.Sequential([_fold_on_host, relax.transform.FoldConstant()], name="edgetune.FoldConstants")


@tvm.transform.module_pass(opt_level=0, name="edgetune.FoldConstantsOnHost")
def _fold_on_host(mod: tvm.IRModule, _ctx: Any) -> tvm.IRModule:
    out = tvm.IRModule(mod.functions, attrs=mod.attrs)
    changed = False
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            folder = _HostFolder(mod)
            new = folder.visit_expr(func)
            if folder.folded:
                out[gvar] = new
                changed = True
    return out if changed else mod


def _static(expr: relax.Expr) -> tuple[tuple[int, ...], str] | None:
    """An expression's static tensor shape and dtype (from its type, ``expr.ty`` in TVM 0.27), or None."""
    ty = getattr(expr, "ty", None)
    shape = getattr(getattr(ty, "shape", None), "values", None)
    dtype = getattr(ty, "dtype", None)
    if shape is None or dtype is None or not all(isinstance(v, tvm.tirx.IntImm) for v in shape):
        return None
    return tuple(int(v) for v in shape), str(dtype)


def _same_dtype(values: list[np.ndarray], dtype: str) -> bool:
    return all(v.dtype == np.dtype(dtype) for v in values)


def _binary(function: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., np.ndarray | None]:
    def fold(_call: relax.Call, values: list[np.ndarray], dtype: str) -> np.ndarray | None:
        # same-dtype floating-point operands only: numpy then computes in that dtype, IEEE as LLVM's code does
        if len(values) != 2 or not _same_dtype(values, dtype) or np.dtype(dtype).kind != "f":
            return None
        return function(values[0], values[1])

    return fold


def _reshape(_call: relax.Call, values: list[np.ndarray], _dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    return values[0].reshape(shape)


def _permute_dims(call: relax.Call, values: list[np.ndarray], _dtype: str) -> np.ndarray:
    axes = call.attrs.axes
    return np.transpose(values[0], None if axes is None else [int(a) for a in axes])


def _isnan(_call: relax.Call, values: list[np.ndarray], _dtype: str) -> np.ndarray:
    return np.isnan(values[0])


def _where(_call: relax.Call, values: list[np.ndarray], dtype: str) -> np.ndarray | None:
    if len(values) != 3 or values[0].dtype != np.bool_ or not _same_dtype(values[1:], dtype):
        return None
    return np.where(values[0], values[1], values[2])


def _sqrt(_call: relax.Call, values: list[np.ndarray], dtype: str) -> np.ndarray | None:
    return np.sqrt(values[0]) if _same_dtype(values, dtype) and np.dtype(dtype).kind == "f" else None


def _layout_transform(call: relax.Call, values: list[np.ndarray], _dtype: str) -> np.ndarray | None:
    """The index map evaluated on every source index at once (TVM's ``IndexMap.map_tensor`` takes 20 s for a 3x3
    512x512 weight: one symbolic evaluation per element). Only bijective maps of floordiv/floormod arithmetic."""
    attrs = call.attrs
    separators = getattr(attrs, "axis_separators", None)
    if attrs.pad_value is not None or (separators is not None and len(separators)):
        return None
    index_map, source = attrs.index_map, values[0]
    if len(index_map.initial_indices) != source.ndim:
        return None
    blocked = _split_and_permute(index_map, source)
    if blocked is not None or source.size > _EVALUATED_ELEMENTS:
        return blocked
    grid = np.indices(source.shape, dtype=np.int64)
    env = {var: grid[axis] for axis, var in enumerate(index_map.initial_indices)}
    targets = [_evaluate(expr, env) for expr in index_map.final_indices]
    if any(t is None for t in targets):
        return None
    out_shape = tuple(int(np.max(t)) + 1 if np.size(t) else 0 for t in targets)
    if int(np.prod(out_shape)) != source.size:
        return None  # padded or not onto: TVM's
    out = np.empty(out_shape, dtype=source.dtype)
    flat = np.ravel_multi_index(tuple(np.broadcast_to(t, source.shape).ravel() for t in targets), out_shape)
    if np.unique(flat).size != source.size:
        return None
    out.reshape(-1)[flat] = source.reshape(-1)
    return out


#: largest tensor whose index map is evaluated element by element (a map that is not a split and a permutation)
_EVALUATED_ELEMENTS = 1 << 16


def _split_and_permute(index_map: Any, source: np.ndarray) -> np.ndarray | None:
    """A map whose every output index is an input index ``x``, ``x // b`` or ``x % b`` (blocking, unblocking, a
    weight's ``OIHW{i}i{o}o``) as a reshape and a transpose of ``source``; None for any other map."""
    variables = list(index_map.initial_indices)

    def axis_of(expr: Any) -> int | None:
        return next((i for i, v in enumerate(variables) if expr.same_as(v)), None)

    uses: list[tuple[int, str, int]] = []  # (input axis, "whole" | "div" | "mod", block)
    for expr in index_map.final_indices:
        kind = type(expr).__name__
        if kind in ("Var", "SizeVar") and axis_of(expr) is not None:
            uses.append((axis_of(expr), "whole", 1))
        elif kind in ("FloorDiv", "FloorMod") and type(expr.b).__name__ == "IntImm" and axis_of(expr.a) is not None:
            uses.append((axis_of(expr.a), "div" if kind == "FloorDiv" else "mod", int(expr.b.value)))
        else:
            return None
    split: list[tuple[int, ...]] = []  # each input axis as the sub-axes it is split into
    position: dict[tuple[int, str], int] = {}  # (input axis, part) -> index among all sub-axes
    for axis, extent in enumerate(source.shape):
        kinds = sorted((kind, block) for a, kind, block in uses if a == axis)
        if kinds == [("whole", 1)]:
            position[(axis, "whole")] = sum(len(p) for p in split)
            split.append((extent,))
        elif len(kinds) == 2 and kinds[0][0] == "div" and kinds[1][0] == "mod" and kinds[0][1] == kinds[1][1] and \
                kinds[0][1] > 0 and extent % kinds[0][1] == 0:
            block = kinds[0][1]
            start = sum(len(p) for p in split)
            position[(axis, "div")], position[(axis, "mod")] = start, start + 1
            split.append((extent // block, block))
        else:
            return None  # an axis dropped, used twice, or split by a block that does not divide it
    order = [position[(axis, kind)] for axis, kind, _block in uses]
    return np.transpose(source.reshape([d for part in split for d in part]), order)


def _evaluate(expr: Any, env: dict[Any, np.ndarray]) -> np.ndarray | int | None:
    """An index expression (variables, integers, +, -, *, floordiv, floormod) on numpy index arrays; None: another."""
    kind = type(expr).__name__
    if kind in ("Var", "SizeVar"):
        return env.get(expr)
    if kind == "IntImm":
        return int(expr.value)
    if kind in ("Add", "Sub", "Mul", "FloorDiv", "FloorMod"):
        a, b = _evaluate(expr.a, env), _evaluate(expr.b, env)
        if a is None or b is None:
            return None
        if kind == "Add":
            return a + b
        if kind == "Sub":
            return a - b
        if kind == "Mul":
            return a * b
        if isinstance(b, int) and b == 0:
            return None
        return np.floor_divide(a, b) if kind == "FloorDiv" else np.mod(a, b)
    return None


#: operator -> numpy fold; each takes (call, argument values, the call's dtype) and returns the result or None
_FOLDS: dict[str, Callable[..., np.ndarray | None]] = {
    "relax.permute_dims": _permute_dims,
    "relax.layout_transform": _layout_transform,
    "relax.isnan": _isnan,
    "relax.where": _where,
    "relax.sqrt": _sqrt,
    "relax.add": _binary(np.add),
    "relax.subtract": _binary(np.subtract),
    "relax.multiply": _binary(np.multiply),
    "relax.divide": _binary(np.divide),
}
#: operators that only give the same data another static shape
_RESHAPES = {"relax.reshape", "relax.expand_dims", "relax.squeeze", "relax.flatten"}


@relax.expr_functor.mutator
class _HostFolder(relax.PyExprMutator):
    """Each call of a foldable operator whose arguments are constants (or variables bound to them), as a constant."""

    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.folded = 0

    def visit_call_(self, original: relax.Call) -> relax.Expr:
        call = super().visit_call_(original)
        if not isinstance(call, relax.Call) or not isinstance(call.op, tvm.ir.Op):
            return call
        name = call.op.name
        if name not in _FOLDS and name not in _RESHAPES:
            return call
        expected = _static(original)  # the visited call is not normalized yet; the original's type is the same
        if expected is None:
            return call
        shape, dtype = expected
        values = []
        for arg in call.args:
            if isinstance(arg, relax.Var):
                bound = self.lookup_binding(arg)
                arg = bound if bound is not None else arg
            if isinstance(arg, _CONSTANT):
                values.append(arg.value.numpy())
            elif isinstance(arg, relax.ShapeExpr) and name in _RESHAPES:
                continue  # the new shape: the call's own struct info says it
            else:
                return call
        if not values:
            return call
        try:
            result = _reshape(call, values, dtype, shape) if name in _RESHAPES else _FOLDS[name](call, values, dtype)
        except Exception:  # noqa: BLE001 - an operand numpy refuses is TVM's to fold
            return call
        if result is None:
            return call
        result = np.asarray(result)
        if result.shape != shape or result.dtype != np.dtype(dtype):
            return call
        self.folded += 1
        return relax.const(np.array(result, order="C", copy=True), dtype)  # ascontiguousarray makes a 0-d array 1-d
