"""Small TensorFlow Lite models written by the tests themselves (no TensorFlow, no downloads).

A ``.tflite`` file is a FlatBuffer of the TFLite schema; the ``tflite`` package
(``edgetune[tflite]``) ships the schema's generated Python builders, and
:func:`write_model` uses them to lay out buffers, tensors, operators and one
subgraph. Recipe for another model: add its constant tensors with
:meth:`_Graph.const`, its activations with :meth:`_Graph.tensor`, and its
operators with :meth:`_Graph.op` (builtin code, option table), then
:meth:`_Graph.finish`. LiteRT (``ai-edge-litert``) runs the result, which is how
the tests check that the file is a valid model.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Callable

import numpy as np


def _schema(table: str) -> Any:
    """The generated module of one schema table (the package's attribute of that name is the class)."""
    return importlib.import_module(f"tflite.{table}")


class _Graph:
    """One subgraph being written: tensors (with their buffers) and operators."""

    def __init__(self) -> None:
        import flatbuffers

        self.builder = flatbuffers.Builder(4096)
        self.buffers: list[bytes] = [b""]  # buffer 0: the empty sentinel every model has
        self.tensors: list[tuple[str, tuple[int, ...], int, int]] = []  # name, shape, type, buffer
        self.ops: list[tuple[int, list[int], list[int], int, Callable[[Any], int] | None, str]] = []
        self.codes: list[tuple[int, str]] = []

    def tensor(self, name: str, shape: tuple[int, ...], type_: int = 0) -> int:
        """An activation tensor (float32 unless ``type_``); its index."""
        self.tensors.append((name, shape, type_, 0))
        return len(self.tensors) - 1

    def const(self, name: str, array: np.ndarray) -> int:
        """A constant tensor holding ``array`` (float32 or int32); its index."""
        type_ = {np.dtype("float32"): 0, np.dtype("int32"): 2}[array.dtype]
        self.buffers.append(np.ascontiguousarray(array).tobytes())
        self.tensors.append((name, tuple(array.shape), type_, len(self.buffers) - 1))
        return len(self.tensors) - 1

    def op(self, code: int, inputs: list[int], outputs: list[int], options_type: int = 0,
           options: Callable[[Any], int] | None = None, custom: str = "") -> None:
        """An operator: builtin ``code`` (or a custom one named ``custom``), its tensors, its option table."""
        key = (code, custom)
        if key not in self.codes:
            self.codes.append(key)
        self.ops.append((self.codes.index(key), inputs, outputs, options_type, options, custom))

    def finish(self, inputs: list[int], outputs: list[int]) -> bytes:
        b = self.builder

        def int_vector(start: Callable[[Any, int], None], values: list[int], prepend: str = "PrependInt32") -> int:
            start(b, len(values))
            for value in reversed(values):
                getattr(b, prepend)(value)
            return b.EndVector()

        buffers = []
        for data in self.buffers:
            vector = b.CreateByteVector(data) if data else None
            _schema("Buffer").BufferStart(b)
            if vector is not None:
                _schema("Buffer").BufferAddData(b, vector)
            buffers.append(_schema("Buffer").BufferEnd(b))
        tensors = []
        for name, shape, type_, buffer in self.tensors:
            name_offset = b.CreateString(name)
            shape_offset = int_vector(_schema("Tensor").TensorStartShapeVector, list(shape))
            _schema("Tensor").TensorStart(b)
            _schema("Tensor").TensorAddShape(b, shape_offset)
            _schema("Tensor").TensorAddType(b, type_)
            _schema("Tensor").TensorAddBuffer(b, buffer)
            _schema("Tensor").TensorAddName(b, name_offset)
            tensors.append(_schema("Tensor").TensorEnd(b))
        operators = []
        for index, op_inputs, op_outputs, options_type, options, _custom in self.ops:
            options_offset = options(b) if options is not None else None
            in_offset = int_vector(_schema("Operator").OperatorStartInputsVector, op_inputs)
            out_offset = int_vector(_schema("Operator").OperatorStartOutputsVector, op_outputs)
            _schema("Operator").OperatorStart(b)
            _schema("Operator").OperatorAddOpcodeIndex(b, index)
            _schema("Operator").OperatorAddInputs(b, in_offset)
            _schema("Operator").OperatorAddOutputs(b, out_offset)
            if options_offset is not None:
                _schema("Operator").OperatorAddBuiltinOptionsType(b, options_type)
                _schema("Operator").OperatorAddBuiltinOptions(b, options_offset)
            operators.append(_schema("Operator").OperatorEnd(b))
        codes = []
        for code, custom in self.codes:
            custom_offset = b.CreateString(custom) if custom else None
            _schema("OperatorCode").OperatorCodeStart(b)
            _schema("OperatorCode").OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
            _schema("OperatorCode").OperatorCodeAddBuiltinCode(b, code)
            _schema("OperatorCode").OperatorCodeAddVersion(b, 1)
            if custom_offset is not None:
                _schema("OperatorCode").OperatorCodeAddCustomCode(b, custom_offset)
            codes.append(_schema("OperatorCode").OperatorCodeEnd(b))

        def table_vector(start: Callable[[Any, int], None], offsets: list[int]) -> int:
            start(b, len(offsets))
            for offset in reversed(offsets):
                b.PrependUOffsetTRelative(offset)
            return b.EndVector()

        tensors_vec = table_vector(_schema("SubGraph").SubGraphStartTensorsVector, tensors)
        ops_vec = table_vector(_schema("SubGraph").SubGraphStartOperatorsVector, operators)
        in_vec = int_vector(_schema("SubGraph").SubGraphStartInputsVector, inputs)
        out_vec = int_vector(_schema("SubGraph").SubGraphStartOutputsVector, outputs)
        name = b.CreateString("main")
        _schema("SubGraph").SubGraphStart(b)
        _schema("SubGraph").SubGraphAddTensors(b, tensors_vec)
        _schema("SubGraph").SubGraphAddInputs(b, in_vec)
        _schema("SubGraph").SubGraphAddOutputs(b, out_vec)
        _schema("SubGraph").SubGraphAddOperators(b, ops_vec)
        _schema("SubGraph").SubGraphAddName(b, name)
        subgraph = _schema("SubGraph").SubGraphEnd(b)
        subgraphs_vec = table_vector(_schema("Model").ModelStartSubgraphsVector, [subgraph])
        codes_vec = table_vector(_schema("Model").ModelStartOperatorCodesVector, codes)
        buffers_vec = table_vector(_schema("Model").ModelStartBuffersVector, buffers)
        description = b.CreateString("written by edgetune's tests (tests/tflite_models.py)")
        _schema("Model").ModelStart(b)
        _schema("Model").ModelAddVersion(b, 3)
        _schema("Model").ModelAddOperatorCodes(b, codes_vec)
        _schema("Model").ModelAddSubgraphs(b, subgraphs_vec)
        _schema("Model").ModelAddDescription(b, description)
        _schema("Model").ModelAddBuffers(b, buffers_vec)
        b.Finish(_schema("Model").ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())


def write_model(path: Path, *, unsupported: bool = False, seed: int = 0) -> Path:
    """A small float32 CNN as a ``.tflite`` file: conv (ReLU6) -> depthwise conv (ReLU) -> add -> mean -> dense.

    Input ``input`` is NHWC (1, 16, 16, 3), the output (1, 10). ``unsupported`` appends a
    custom operator no importer knows (``EdgetuneNoSuchOp``), for the one-line error.
    """
    from tflite.ActivationFunctionType import ActivationFunctionType as Act
    from tflite.BuiltinOperator import BuiltinOperator as Op
    from tflite.BuiltinOptions import BuiltinOptions as Options
    from tflite.Padding import Padding

    rng = np.random.default_rng(seed)
    g = _Graph()
    x = g.tensor("input", (1, 16, 16, 3))
    conv_w = g.const("conv/weights", rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32))  # OHWI
    conv_b = g.const("conv/bias", rng.normal(0, 0.1, (8,)).astype(np.float32))
    conv = g.tensor("conv", (1, 16, 16, 8))

    def conv_options(b: Any) -> int:
        _schema("Conv2DOptions").Conv2DOptionsStart(b)
        _schema("Conv2DOptions").Conv2DOptionsAddPadding(b, Padding.SAME)
        _schema("Conv2DOptions").Conv2DOptionsAddStrideW(b, 1)
        _schema("Conv2DOptions").Conv2DOptionsAddStrideH(b, 1)
        _schema("Conv2DOptions").Conv2DOptionsAddDilationWFactor(b, 1)
        _schema("Conv2DOptions").Conv2DOptionsAddDilationHFactor(b, 1)
        _schema("Conv2DOptions").Conv2DOptionsAddFusedActivationFunction(b, Act.RELU6)
        return _schema("Conv2DOptions").Conv2DOptionsEnd(b)

    g.op(Op.CONV_2D, [x, conv_w, conv_b], [conv], Options.Conv2DOptions, conv_options)
    dw_w = g.const("dw/weights", rng.normal(0, 0.3, (1, 3, 3, 8)).astype(np.float32))  # 1HWC
    dw_b = g.const("dw/bias", rng.normal(0, 0.1, (8,)).astype(np.float32))
    dw = g.tensor("dw", (1, 16, 16, 8))

    def dw_options(b: Any) -> int:
        _schema("DepthwiseConv2DOptions").DepthwiseConv2DOptionsStart(b)
        _schema("DepthwiseConv2DOptions").DepthwiseConv2DOptionsAddPadding(b, Padding.SAME)
        _schema("DepthwiseConv2DOptions").DepthwiseConv2DOptionsAddStrideW(b, 1)
        _schema("DepthwiseConv2DOptions").DepthwiseConv2DOptionsAddStrideH(b, 1)
        _schema("DepthwiseConv2DOptions").DepthwiseConv2DOptionsAddDepthMultiplier(b, 1)
        _schema("DepthwiseConv2DOptions").DepthwiseConv2DOptionsAddDilationWFactor(b, 1)
        _schema("DepthwiseConv2DOptions").DepthwiseConv2DOptionsAddDilationHFactor(b, 1)
        _schema("DepthwiseConv2DOptions").DepthwiseConv2DOptionsAddFusedActivationFunction(b, Act.RELU)
        return _schema("DepthwiseConv2DOptions").DepthwiseConv2DOptionsEnd(b)

    g.op(Op.DEPTHWISE_CONV_2D, [conv, dw_w, dw_b], [dw], Options.DepthwiseConv2DOptions, dw_options)
    added = g.tensor("residual", (1, 16, 16, 8))

    def add_options(b: Any) -> int:
        _schema("AddOptions").AddOptionsStart(b)
        _schema("AddOptions").AddOptionsAddFusedActivationFunction(b, Act.NONE)
        return _schema("AddOptions").AddOptionsEnd(b)

    g.op(Op.ADD, [conv, dw], [added], Options.AddOptions, add_options)
    axes = g.const("mean/axes", np.array([1, 2], dtype=np.int32))
    pooled = g.tensor("pooled", (1, 8))

    def mean_options(b: Any) -> int:
        _schema("ReducerOptions").ReducerOptionsStart(b)
        _schema("ReducerOptions").ReducerOptionsAddKeepDims(b, False)
        return _schema("ReducerOptions").ReducerOptionsEnd(b)

    g.op(Op.MEAN, [added, axes], [pooled], Options.ReducerOptions, mean_options)
    fc_w = g.const("dense/weights", rng.normal(0, 0.3, (10, 8)).astype(np.float32))
    fc_b = g.const("dense/bias", rng.normal(0, 0.1, (10,)).astype(np.float32))
    logits = g.tensor("logits", (1, 10))

    def fc_options(b: Any) -> int:
        _schema("FullyConnectedOptions").FullyConnectedOptionsStart(b)
        _schema("FullyConnectedOptions").FullyConnectedOptionsAddFusedActivationFunction(b, Act.NONE)
        return _schema("FullyConnectedOptions").FullyConnectedOptionsEnd(b)

    g.op(Op.FULLY_CONNECTED, [pooled, fc_w, fc_b], [logits], Options.FullyConnectedOptions, fc_options)
    output = logits
    if unsupported:
        output = g.tensor("custom", (1, 10))
        g.op(Op.CUSTOM, [logits], [output], custom="EdgetuneNoSuchOp")
    path.write_bytes(g.finish([x], [output]))
    return path


def _empty_options(table: str) -> Callable[[Any], int]:
    """An option table with every field at its default (e.g. ``RangeOptions``)."""

    def write(b: Any) -> int:
        getattr(_schema(table), f"{table}Start")(b)
        return getattr(_schema(table), f"{table}End")(b)

    return write


def write_computed_shape_model(path: Path, *, unknown_op: bool = False, seed: int = 0) -> Path:
    """Shapes and axes computed at run time, as TensorFlow's converter writes a Keras ``Reshape`` (issue 53).

    Input ``input`` (1, 4, 4, 8) is flattened by a RESHAPE whose new shape is
    SHAPE -> STRIDED_SLICE (the batch, shrunk to a scalar) -> PACK with -1, and
    averaged by a MEAN whose axes come from RANGE(1, 3); both are concatenated and
    fed to a dense layer, output (1, 10). ``unknown_op`` appends a
    DYNAMIC_UPDATE_SLICE, a builtin LiteRT runs and TVM 0.27's frontend lacks.
    """
    from tflite.BuiltinOperator import BuiltinOperator as Op
    from tflite.BuiltinOptions import BuiltinOptions as Options
    from tflite.TensorType import TensorType

    rng = np.random.default_rng(seed)
    g = _Graph()
    x = g.tensor("input", (1, 4, 4, 8))
    shape = g.tensor("shape", (4,), TensorType.INT32)

    def shape_options(b: Any) -> int:
        _schema("ShapeOptions").ShapeOptionsStart(b)
        _schema("ShapeOptions").ShapeOptionsAddOutType(b, TensorType.INT32)
        return _schema("ShapeOptions").ShapeOptionsEnd(b)

    g.op(Op.SHAPE, [x], [shape], Options.ShapeOptions, shape_options)
    begin, end, strides = (g.const(f"batch/{n}", np.array([v], dtype=np.int32)) for n, v in (("begin", 0), ("end", 1), ("strides", 1)))
    batch = g.tensor("batch", (), TensorType.INT32)

    def slice_options(b: Any) -> int:
        _schema("StridedSliceOptions").StridedSliceOptionsStart(b)
        _schema("StridedSliceOptions").StridedSliceOptionsAddShrinkAxisMask(b, 1)
        return _schema("StridedSliceOptions").StridedSliceOptionsEnd(b)

    g.op(Op.STRIDED_SLICE, [shape, begin, end, strides], [batch], Options.StridedSliceOptions, slice_options)
    minus_one = g.const("flat/minus_one", np.array(-1, dtype=np.int32))
    new_shape = g.tensor("flat/shape", (2,), TensorType.INT32)

    def pack_options(b: Any) -> int:
        _schema("PackOptions").PackOptionsStart(b)
        _schema("PackOptions").PackOptionsAddValuesCount(b, 2)
        _schema("PackOptions").PackOptionsAddAxis(b, 0)
        return _schema("PackOptions").PackOptionsEnd(b)

    g.op(Op.PACK, [batch, minus_one], [new_shape], Options.PackOptions, pack_options)
    flat = g.tensor("flat", (1, 128))
    g.op(Op.RESHAPE, [x, new_shape], [flat])
    start, limit, delta = (g.const(f"axes/{n}", np.array(v, dtype=np.int32)) for n, v in (("start", 1), ("limit", 3), ("delta", 1)))
    axes = g.tensor("axes", (2,), TensorType.INT32)
    g.op(Op.RANGE, [start, limit, delta], [axes], Options.RangeOptions, _empty_options("RangeOptions"))
    pooled = g.tensor("pooled", (1, 8))

    def mean_options(b: Any) -> int:
        _schema("ReducerOptions").ReducerOptionsStart(b)
        _schema("ReducerOptions").ReducerOptionsAddKeepDims(b, False)
        return _schema("ReducerOptions").ReducerOptionsEnd(b)

    g.op(Op.MEAN, [x, axes], [pooled], Options.ReducerOptions, mean_options)
    joined = g.tensor("joined", (1, 136))

    def concat_options(b: Any) -> int:
        _schema("ConcatenationOptions").ConcatenationOptionsStart(b)
        _schema("ConcatenationOptions").ConcatenationOptionsAddAxis(b, 1)
        return _schema("ConcatenationOptions").ConcatenationOptionsEnd(b)

    g.op(Op.CONCATENATION, [flat, pooled], [joined], Options.ConcatenationOptions, concat_options)
    fc_w = g.const("dense/weights", rng.normal(0, 0.3, (10, 136)).astype(np.float32))
    fc_b = g.const("dense/bias", rng.normal(0, 0.1, (10,)).astype(np.float32))
    logits = g.tensor("logits", (1, 10))
    g.op(Op.FULLY_CONNECTED, [joined, fc_w, fc_b], [logits], Options.FullyConnectedOptions,
         _empty_options("FullyConnectedOptions"))
    output = logits
    if unknown_op:
        update = g.const("update/values", np.ones((1, 2), dtype=np.float32))
        where = g.const("update/start", np.array([0, 3], dtype=np.int32))
        output = g.tensor("updated", (1, 10))
        g.op(Op.DYNAMIC_UPDATE_SLICE, [logits, update, where], [output])
    path.write_bytes(g.finish([x], [output]))
    return path


def _options_writer(table: str, **fields: int) -> Callable[[Any], int]:
    """An option table ``table`` with ``fields`` (schema names without the ``Add`` prefix) set."""

    def write(b: Any) -> int:
        module = _schema(table)
        getattr(module, f"{table}Start")(b)
        for name, value in fields.items():
            getattr(module, f"{table}Add{name}")(b, value)
        return getattr(module, f"{table}End")(b)

    return write


def write_shape_arithmetic_model(path: Path) -> Path:
    """Integer shape arithmetic with the corners numpy and TFLite could disagree on, as two outputs.

    From ``input`` (2, 3, 4, 5): ``shape`` = SHAPE; a reversed STRIDED_SLICE (negative stride,
    begin mask); one with an end mask; REDUCE_PROD of the latter, EXPAND_DIMS'd; a GATHER; integer
    DIV (rounds toward zero) and FLOOR_DIV of negative numbers; all concatenated into output
    ``numbers`` (int32, 17 values). Output ``expanded`` is the input RESHAPEd to PACK(batch, product),
then EXPAND_DIMS'd at axis 1: (2, 1, 60).
    """
    from tflite.BuiltinOperator import BuiltinOperator as Op
    from tflite.BuiltinOptions import BuiltinOptions as Options
    from tflite.TensorType import TensorType

    int32 = TensorType.INT32

    def ints(name: str, values: Any) -> int:
        return g.const(name, np.array(values, dtype=np.int32))

    g = _Graph()
    x = g.tensor("input", (2, 3, 4, 5))
    shape = g.tensor("shape", (4,), int32)
    g.op(Op.SHAPE, [x], [shape], Options.ShapeOptions, _options_writer("ShapeOptions", OutType=int32))
    reversed_ = g.tensor("reversed", (3,), int32)  # shape[:0:-1] = [5, 4, 3]
    g.op(Op.STRIDED_SLICE, [shape, ints("r/begin", [0]), ints("r/end", [0]), ints("r/strides", [-1])], [reversed_],
         Options.StridedSliceOptions, _options_writer("StridedSliceOptions", BeginMask=1))
    tail = g.tensor("tail", (3,), int32)  # shape[1:] = [3, 4, 5]
    g.op(Op.STRIDED_SLICE, [shape, ints("t/begin", [1]), ints("t/end", [0]), ints("t/strides", [1])], [tail],
         Options.StridedSliceOptions, _options_writer("StridedSliceOptions", EndMask=1))
    product = g.tensor("product", (), int32)  # 60
    g.op(Op.REDUCE_PROD, [tail, ints("p/axes", [0])], [product], Options.ReducerOptions,
         _options_writer("ReducerOptions", KeepDims=False))
    product_1d = g.tensor("product_1d", (1,), int32)
    g.op(Op.EXPAND_DIMS, [product, ints("p/axis", 0)], [product_1d], Options.ExpandDimsOptions,
         _options_writer("ExpandDimsOptions"))
    gathered = g.tensor("gathered", (2,), int32)  # [5, 2]
    g.op(Op.GATHER, [shape, ints("g/indices", [3, 0])], [gathered], Options.GatherOptions,
         _options_writer("GatherOptions", Axis=0))
    numerators, denominators = ints("d/num", [-7, 7]), ints("d/den", [2, 2])
    divided = g.tensor("divided", (2,), int32)  # [-3, 3]
    g.op(Op.DIV, [numerators, denominators], [divided], Options.DivOptions, _options_writer("DivOptions"))
    floored = g.tensor("floored", (2,), int32)  # [-4, 3]
    g.op(Op.FLOOR_DIV, [numerators, denominators], [floored], Options.FloorDivOptions, _options_writer("FloorDivOptions"))
    numbers = g.tensor("numbers", (17,), int32)
    g.op(Op.CONCATENATION, [shape, reversed_, tail, product_1d, gathered], [g.tensor("numbers_head", (13,), int32)],
         Options.ConcatenationOptions, _options_writer("ConcatenationOptions", Axis=0))
    head = len(g.tensors) - 1
    g.op(Op.CONCATENATION, [head, divided, floored], [numbers],
         Options.ConcatenationOptions, _options_writer("ConcatenationOptions", Axis=0))
    batch = g.tensor("batch", (), int32)
    g.op(Op.STRIDED_SLICE, [shape, ints("b/begin", [0]), ints("b/end", [1]), ints("b/strides", [1])], [batch],
         Options.StridedSliceOptions, _options_writer("StridedSliceOptions", ShrinkAxisMask=1))
    new_shape = g.tensor("new_shape", (2,), int32)
    g.op(Op.PACK, [batch, product], [new_shape], Options.PackOptions, _options_writer("PackOptions", ValuesCount=2, Axis=0))
    reshaped = g.tensor("reshaped", (2, 60))
    g.op(Op.RESHAPE, [x, new_shape], [reshaped])
    expanded = g.tensor("expanded", (2, 1, 60))
    g.op(Op.EXPAND_DIMS, [reshaped, ints("e/axis", 1)], [expanded], Options.ExpandDimsOptions,
         _options_writer("ExpandDimsOptions"))
    path.write_bytes(g.finish([x], [numbers, expanded]))
    return path


def write_computed_axes_model(path: Path) -> Path:
    """A MEAN over axes computed by RANGE(1, 3) and nothing else: input (1, 4, 4, 8), output (1, 8).

    TVM 0.27's converter reads MEAN's axes with ``get_tensor_value`` alone, so a computed axes
    tensor failed there even without a computed RESHAPE (a TypeError on its empty buffer).
    """
    from tflite.BuiltinOperator import BuiltinOperator as Op
    from tflite.BuiltinOptions import BuiltinOptions as Options
    from tflite.TensorType import TensorType

    g = _Graph()
    x = g.tensor("input", (1, 4, 4, 8))
    bounds = [g.const(f"axes/{name}", np.array(value, dtype=np.int32)) for name, value in (("start", 1), ("limit", 3), ("delta", 1))]
    axes = g.tensor("axes", (2,), TensorType.INT32)
    g.op(Op.RANGE, bounds, [axes], Options.RangeOptions, _empty_options("RangeOptions"))
    pooled = g.tensor("pooled", (1, 8))
    g.op(Op.MEAN, [x, axes], [pooled], Options.ReducerOptions, _options_writer("ReducerOptions", KeepDims=False))
    path.write_bytes(g.finish([x], [pooled]))
    return path
