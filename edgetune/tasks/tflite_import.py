"""TensorFlow Lite flatbuffers through TVM's Relax frontend, with their shape arithmetic resolved first.

TensorFlow's converter writes a Keras ``Reshape`` / ``Flatten`` of a batch-``None``
model as ``RESHAPE`` whose new shape is computed at run time: ``SHAPE`` ->
``STRIDED_SLICE`` -> ``PACK``. TVM 0.27's frontend takes such a shape only as a
constant (``relax.ShapeExpr`` fails on the computed tensor, issue 53), and other
converters read operands such as reduction axes, paddings, permutations or
slice bounds with ``get_tensor_value`` alone, which sees an empty buffer when the
operand is computed. edgetune's inputs are static, so all of that arithmetic is
constant: :class:`StaticShapeConverter` evaluates it with numpy while the
frontend converts the graph, and the consumers see constants, as if the
converter had folded them itself.

What is resolved: integer (and bool) tensors computed by the operators in
:data:`FOLDERS` from constants and from ``SHAPE`` of tensors whose shape is
static. What is not: anything computed from tensor *values* (a shape that
depends on the data), float arithmetic (TVM's ``FoldConstant`` does that later),
``STRIDED_SLICE`` with ellipsis or new-axis masks, and integer results above
:data:`MAX_FOLDED_ELEMENTS` elements; those reach the frontend unchanged.

The converter also replaces one frontend conversion that fails on every model,
``EXPAND_DIMS`` (:meth:`StaticShapeConverter.convert_expand_dims`), and takes
``SHAPE`` of a quantized tensor, which the frontend refused although it reads
only the shape (an int8 model's computed RESHAPE).
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, Callable

import numpy as np
from tvm import relax
from tvm.relax.frontend.tflite.tflite_frontend import OperatorConverter, TensorWrapper

#: larger integer results are left to the frontend: shape arithmetic is a few elements
MAX_FOLDED_ELEMENTS = 1 << 16
#: TFLite's fused activation ``NONE``: integer arithmetic with another one is not shape arithmetic
_NO_ACTIVATION = 0

Value = np.ndarray
#: an operator's numpy evaluation: (operator, its input values, its output tensors) -> its output values
Folder = Callable[[Any, list[Value], list[TensorWrapper]], list[Value]]


def _options(op: Any, table: str) -> Any:
    """The operator's option table ``table`` (a generated ``tflite`` class), or None when absent."""
    raw = op.BuiltinOptions()
    if raw is None:
        return None
    options = getattr(importlib.import_module(f"tflite.{table}"), table)()
    options.Init(raw.Bytes, raw.Pos)
    return options


def _option(op: Any, table: str, field: str, default: int = 0) -> int:
    options = _options(op, table)
    return int(getattr(options, field)()) if options is not None else default


def _no_activation(op: Any, table: str) -> None:
    """Integer arithmetic with a fused activation is not shape arithmetic: leave it to the frontend."""
    if _option(op, table, "FusedActivationFunction", _NO_ACTIVATION) != _NO_ACTIVATION:
        raise ValueError("a fused activation is left to the frontend")


def _strided_slice(op: Any, values: list[Value], _outputs: list[TensorWrapper]) -> list[Value]:
    """TFLite's STRIDED_SLICE with begin, end and shrink-axis masks (``offset``: end is relative to begin)."""
    data, begin, end, strides = (np.asarray(v) for v in values)
    options = _options(op, "StridedSliceOptions")
    if options is not None and (options.EllipsisMask() or options.NewAxisMask()):
        raise ValueError("ellipsis and new-axis masks are left to the frontend")
    begin_mask = options.BeginMask() if options else 0
    end_mask = options.EndMask() if options else 0
    shrink_mask = options.ShrinkAxisMask() if options else 0
    offset = bool(options.Offset()) if options else False
    index: list[Any] = []
    for axis in range(len(begin)):
        start, stop, step = int(begin[axis]), int(end[axis]), int(strides[axis])
        if offset:
            stop += start
        if shrink_mask >> axis & 1:
            index.append(start)
        else:
            index.append(slice(None if begin_mask >> axis & 1 else start, None if end_mask >> axis & 1 else stop, step))
    return [np.asarray(data[tuple(index)])]


def _slice(_op: Any, values: list[Value], _outputs: list[TensorWrapper]) -> list[Value]:
    data, begin, size = values
    return [data[tuple(slice(int(b), None if int(s) == -1 else int(b) + int(s)) for b, s in zip(begin, size))]]


def _concatenation(op: Any, values: list[Value], _outputs: list[TensorWrapper]) -> list[Value]:
    _no_activation(op, "ConcatenationOptions")
    return [np.concatenate(values, axis=_option(op, "ConcatenationOptions", "Axis"))]


def _gather(op: Any, values: list[Value], _outputs: list[TensorWrapper]) -> list[Value]:
    if _option(op, "GatherOptions", "BatchDims"):
        raise ValueError("batched GATHER is left to the frontend")
    return [np.take(values[0], values[1], axis=_option(op, "GatherOptions", "Axis"))]


def _reshape(op: Any, values: list[Value], outputs: list[TensorWrapper]) -> list[Value]:
    if len(values) > 1:
        return [np.reshape(values[0], [int(d) for d in np.atleast_1d(values[1])])]
    options = _options(op, "ReshapeOptions")
    if options is not None and options.NewShapeLength():
        return [np.reshape(values[0], [int(d) for d in options.NewShapeAsNumpy()])]
    return [np.reshape(values[0], [int(d) for d in outputs[0].tensor.ShapeAsNumpy()])]


def _squeeze(op: Any, values: list[Value], _outputs: list[TensorWrapper]) -> list[Value]:
    options = _options(op, "SqueezeOptions")
    axes = tuple(int(a) for a in options.SqueezeDimsAsNumpy()) if options and options.SqueezeDimsLength() else None
    return [np.squeeze(values[0], axis=axes)]


def _scalar(value: Value) -> Any:
    return np.asarray(value).item()


def _binary(function: Callable[[Value, Value], Value], options_table: str | None = None) -> Folder:
    def fold(op: Any, values: list[Value], _outputs: list[TensorWrapper]) -> list[Value]:
        if options_table is not None:
            _no_activation(op, options_table)
        return [function(values[0], values[1])]

    return fold


def _truncating_divide(a: Value, b: Value) -> Value:
    """TFLite's integer DIV rounds toward zero (C++ ``/``), numpy's ``//`` toward minus infinity."""
    quotient = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -quotient, quotient)


def _reduce(function: Callable[..., Value]) -> Folder:
    def fold(op: Any, values: list[Value], _outputs: list[TensorWrapper]) -> list[Value]:
        axes = tuple(int(a) for a in np.atleast_1d(values[1]))
        return [function(values[0], axis=axes, keepdims=bool(_option(op, "ReducerOptions", "KeepDims")))]

    return fold


#: operator -> numpy evaluation of its outputs from its input values (``SHAPE`` is folded apart: from a shape)
FOLDERS: dict[str, Folder] = {
    "STRIDED_SLICE": _strided_slice,
    "SLICE": _slice,
    "PACK": lambda op, v, _o: [np.stack(v, axis=_option(op, "PackOptions", "Axis"))],
    "UNPACK": lambda op, v, _o: list(np.moveaxis(v[0], _option(op, "UnpackOptions", "Axis"), 0)),
    "CONCATENATION": _concatenation,
    "GATHER": _gather,
    "RESHAPE": _reshape,
    "SQUEEZE": _squeeze,
    "EXPAND_DIMS": lambda _op, v, _o: [np.expand_dims(v[0], int(_scalar(v[1])))],
    "CAST": lambda _op, v, _o: [v[0]],  # the result takes the output tensor's type
    "FILL": lambda _op, v, _o: [np.full([int(d) for d in v[0]], _scalar(v[1]))],
    "RANGE": lambda _op, v, _o: [np.arange(_scalar(v[0]), _scalar(v[1]), _scalar(v[2]))],
    "ADD": _binary(np.add, "AddOptions"),
    "SUB": _binary(np.subtract, "SubOptions"),
    "MUL": _binary(np.multiply, "MulOptions"),
    "DIV": _binary(_truncating_divide, "DivOptions"),
    "FLOOR_DIV": _binary(np.floor_divide),
    "FLOOR_MOD": _binary(np.mod),
    "MAXIMUM": _binary(np.maximum),
    "MINIMUM": _binary(np.minimum),
    "REDUCE_PROD": _reduce(np.prod),
    "SUM": _reduce(np.sum),
    "REDUCE_MAX": _reduce(np.max),
    "REDUCE_MIN": _reduce(np.min),
}


class StaticShapeConverter(OperatorConverter):
    """TVM's TFLite converter, but integer arithmetic on constants and static shapes becomes constants.

    Each operator in :data:`FOLDERS` whose integer outputs can be computed from
    known values is evaluated here and emits nothing: ``get_tensor_value`` (what
    converters read constant operands with) and ``get_expr`` return the folded
    value, and ``has_expr`` stays False, so every consumer treats it as the
    constant the converter could have written. ``folded`` maps tensor index to value.
    """

    #: SHAPE reads only its input's shape, which quantization does not change: an int8 model's computed
    #: RESHAPE (the same SHAPE -> STRIDED_SLICE -> PACK) is no reason to refuse the model
    _SUPPORTED_QUANTIZED_OPS = OperatorConverter._SUPPORTED_QUANTIZED_OPS | {"SHAPE"}

    def __init__(self, model: Any, subgraph: Any, exp_tab: Any, bb: Any) -> None:
        super().__init__(model, subgraph, exp_tab, bb)
        self.folded: dict[int, Value] = {}
        self._folded_exprs: dict[int, Any] = {}
        for name in ("SHAPE", *FOLDERS):
            if name in self.convert_map:
                self.convert_map[name] = functools.partial(self._fold_or_convert, name, self.convert_map[name])

    def get_tensor_value(self, tensor_wrapper: TensorWrapper, is_sparse: bool = False) -> Value:
        if tensor_wrapper.tensor_idx in self.folded:
            return self.folded[tensor_wrapper.tensor_idx]
        return super().get_tensor_value(tensor_wrapper, is_sparse)

    def get_expr(self, input_tensor_idx: int) -> Any:
        """A folded tensor read as an expression (e.g. a RESHAPE of a shape vector) is its constant."""
        if input_tensor_idx in self.folded and not self.has_expr(input_tensor_idx):
            if input_tensor_idx not in self._folded_exprs:
                wrapper = self.get_tensors([input_tensor_idx])[0]
                self._folded_exprs[input_tensor_idx] = self.get_tensor_expr(wrapper)
            return self._folded_exprs[input_tensor_idx]
        return super().get_expr(input_tensor_idx)

    def convert_expand_dims(self, op: Any) -> Any:
        """TVM 0.27's own passes ``relax.op.expand_dims`` a third argument it does not take: every EXPAND_DIMS failed."""
        data, axis = self.get_input_tensors(op)
        return relax.op.expand_dims(self.get_tensor_expr(data), int(np.asarray(self.get_tensor_value(axis)).reshape(-1)[0]))

    def _fold_or_convert(self, name: str, convert: Callable[..., Any], op: Any) -> Any:
        """Fold ``op`` when it can be (None: the frontend then emits nothing for it), else convert it as TVM does."""
        outputs = self.get_output_tensors(op)
        if outputs and all(self._is_integer(tensor) for tensor in outputs):
            values = self._fold(name, op, outputs)
            if values is not None:
                for tensor, value in zip(outputs, values):
                    self.folded[tensor.tensor_idx] = value
                return None
        return convert(op=op)

    def _fold(self, name: str, op: Any, outputs: list[TensorWrapper]) -> list[Value] | None:
        inputs = [tensor for tensor in self.get_input_tensors(op) if tensor.tensor_idx >= 0]
        if name == "SHAPE":
            shape = self._static_shape(inputs[0])
            values = None if shape is None else [np.asarray(shape)]
        else:
            known = [self._known_value(tensor) for tensor in inputs]
            if any(value is None for value in known):
                return None
            try:
                values = FOLDERS[name](op, known, outputs)
            except (ValueError, IndexError, TypeError, AttributeError):
                return None  # a variant this evaluation does not cover: the frontend's conversion decides
        if values is None or len(values) != len(outputs):
            return None
        typed = [np.asarray(value).astype(self.get_tensor_type_as_numpy(tensor)) for value, tensor in zip(values, outputs)]
        if any(value.size > MAX_FOLDED_ELEMENTS for value in typed):
            return None
        return typed

    def _is_integer(self, tensor: TensorWrapper) -> bool:
        try:
            kind = np.dtype(self.get_tensor_type_as_numpy(tensor)).kind
        except KeyError:  # a type numpy has no dtype for (strings, resources)
            return False
        return kind in "iub" and tensor.qnn_params is None

    def _known_value(self, tensor: TensorWrapper) -> Value | None:
        """The tensor's value when it is a constant or was folded; None when it is computed at run time."""
        if tensor.tensor_idx in self.folded:
            return self.folded[tensor.tensor_idx]
        if self.has_expr(tensor.tensor_idx) or self.is_prefetched(tensor.tensor_idx):
            return None
        if tensor.buffer is None or tensor.buffer.DataLength() == 0 or tensor.qnn_params is not None:
            return None
        return super().get_tensor_value(tensor)

    def _static_shape(self, tensor: TensorWrapper) -> list[int] | None:
        """The shape the frontend gave the tensor, when every dimension is a number."""
        if self.has_expr(tensor.tensor_idx):
            shape = getattr(self.bb.normalize(super().get_expr(tensor.tensor_idx)).ty, "shape", None)
            values = getattr(shape, "values", None)
            if values is None:
                return None
            try:
                return [int(dim) for dim in values]
            except TypeError:  # a symbolic dimension
                return None
        if tensor.tensor_idx in self.folded:
            return list(self.folded[tensor.tensor_idx].shape)
        value = self._known_value(tensor)
        return None if value is None else list(value.shape)
