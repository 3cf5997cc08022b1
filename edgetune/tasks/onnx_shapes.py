"""Shape arithmetic in an ONNX graph resolved to constants before TVM's frontend reads it.

PyTorch's TorchScript exporter writes ``torch.chunk`` and ``x.size()`` as run-time
arithmetic on a ``Shape``: torchvision's ShuffleNetV2 splits every block's channels
with ``Shape -> Gather -> Div -> Mul -> Slice``. TVM 0.27's Relax ONNX frontend
turns a ``Slice`` whose ends are computed into a symbolic shape and then fails
(``emit_te now only supports Tensor that has ShapeExpr shape``), so the model did
not import. The model's input shapes are static (:func:`edgetune.tasks.models.load_model`
enforces it), so every such value is a constant: it is computed here, with
ONNX's reference implementation of each operator, and written as an initializer.

Only values computed from a ``Shape`` are folded: a graph without one is left
exactly as it was, so no model that imported before changes.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

#: operators folded when all their inputs are constants and one of them comes from a Shape
FOLDABLE = frozenset({
    "Gather", "Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Floor", "Ceil", "Unsqueeze", "Squeeze", "Concat",
    "Cast", "Slice", "Reshape", "Identity", "Equal", "Less", "Greater", "Not", "Where", "Min", "Max", "ReduceProd",
    "ReduceSum", "Range", "ConstantOfShape", "Expand", "Tile", "Size",
})
#: at most this many elements in a folded value (shape arithmetic is a few integers)
MAX_ELEMENTS = 4096
#: passes of shape inference and folding: a folded Slice gives the next Shape a static input
MAX_PASSES = 8


def _static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Every value's shape that shape inference finds fully static."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - a graph ONNX cannot infer: nothing known, nothing folded
        return {}
    shapes: dict[str, tuple[int, ...]] = {}
    for value in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        tensor_type = value.type.tensor_type
        if not tensor_type.HasField("shape"):
            continue
        dims = tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            shapes[value.name] = tuple(int(d.dim_value) for d in dims)
    return shapes


def _evaluate(node: onnx.NodeProto, inputs: list[np.ndarray | None], opset: int) -> list[np.ndarray] | None:
    """``node`` run on constant ``inputs`` by ONNX's reference implementation; None where it cannot be."""
    from onnx.reference import ReferenceEvaluator

    names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
    copy = onnx.helper.make_node(node.op_type, names, [f"out{i}" for i in range(len(node.output))], domain=node.domain)
    copy.attribute.extend(node.attribute)
    graph = onnx.helper.make_graph(
        [copy], "fold",
        [onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(x.dtype), list(x.shape))
         for n, x in zip(names, inputs) if x is not None],
        [onnx.helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in copy.output],
    )
    try:
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
        outputs = ReferenceEvaluator(model).run(None, {n: x for n, x in zip(names, inputs) if x is not None})
    except Exception:  # noqa: BLE001 - an operator the reference lacks or rejects: left to the frontend
        return None
    return [np.asarray(x) for x in outputs]


def _fold_once(model: onnx.ModelProto, opset: int) -> int:
    """One pass: Shapes of static values and what is computed from them only, replaced by initializers; how many nodes."""
    shapes = _static_shapes(model)
    graph = model.graph
    constants: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    derived: set[str] = set()  # values computed from a Shape
    folded: list[onnx.NodeProto] = []
    for node in graph.node:
        if node.op_type == "Constant" and not node.domain:
            attrs = {a.name: a for a in node.attribute}
            if "value" in attrs:
                constants[node.output[0]] = numpy_helper.to_array(attrs["value"].t)
            continue
        outputs: list[np.ndarray] | None = None
        if node.op_type == "Shape" and not node.domain and node.input[0] in shapes:
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            dims = shapes[node.input[0]]
            start, end = int(attrs.get("start", 0)), attrs.get("end")
            outputs = [np.array(dims[start:None if end is None else int(end)], dtype=np.int64)]
        elif (node.op_type in FOLDABLE and not node.domain and any(i in derived for i in node.input)
              and all(not i or i in constants for i in node.input)
              and all(constants[i].size <= MAX_ELEMENTS for i in node.input if i)):
            outputs = _evaluate(node, [constants[i] if i else None for i in node.input], opset)
            if outputs is not None and any(x.size > MAX_ELEMENTS for x in outputs):
                outputs = None
        if outputs is None:
            continue
        for name, value in zip(node.output, outputs):
            constants[name] = value
            derived.add(name)
        folded.append(node)
    if not folded:
        return 0
    gone = {id(node) for node in folded}
    kept = [node for node in graph.node if id(node) not in gone]
    used = {name for node in kept for name in node.input} | {o.name for o in graph.output}
    existing = {t.name for t in graph.initializer}
    for node in folded:
        for name in node.output:
            if name in used and name not in existing:
                graph.initializer.append(numpy_helper.from_array(constants[name], name))
    del graph.node[:]
    graph.node.extend(kept)
    return len(folded)


def fold_shape_arithmetic(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """``model`` (a copy) with its shape arithmetic computed, and how many nodes were folded (0: ``model`` itself)."""
    if not any(node.op_type == "Shape" for node in model.graph.node):
        return model, 0
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    folded_model = onnx.ModelProto()
    folded_model.CopyFrom(model)
    total = 0
    for _ in range(MAX_PASSES):
        folded = _fold_once(folded_model, opset)
        total += folded
        if not folded:
            break
    return (folded_model, total) if total else (model, 0)
