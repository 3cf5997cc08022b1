"""Constant folding on the host (edgetune/tasks/fold.py): the graph Relax's FoldConstant gives, without an LLVM build
per folded operator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax, tirx

import edgetune.tasks.blocking as blocking
import edgetune.tasks.fold as fold
import edgetune.tasks.graph as graph
import edgetune.tasks.nhwc as nhwc
from edgetune.tasks import load_model
from edgetune.tasks.graph import prepare_graph

TARGET = tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2})
TFLITE = Path(__file__).parent / "data" / "tflite"


def _use_fold(monkeypatch, make) -> None:
    for module in (graph, blocking, nhwc):
        monkeypatch.setattr(module, "fold_constants", make)


def _left_for_tvm(monkeypatch) -> list[str]:
    """Make every fold run the host folder, then record the operators on constants it left for Relax's FoldConstant."""
    left: list[str] = []

    @tvm.transform.module_pass(opt_level=0, name="count")
    def count(mod, _ctx):
        def visit(expr):
            if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name in fold._FOLDS:
                if expr.args and all(isinstance(a, (fold._CONSTANT, relax.ShapeExpr)) for a in expr.args):
                    left.append(expr.op.name)

        for _gvar, func in mod.functions_items():
            if isinstance(func, relax.Function):
                relax.analysis.post_order_visit(func, visit)
        return mod

    _use_fold(monkeypatch, lambda: tvm.transform.Sequential([fold._fold_on_host, count, relax.transform.FoldConstant()]))
    return left


def _dynamo_clip_model(tmp_path: Path) -> str:
    """torch.onnx.export's dynamo exporter writes a clip's bounds through isnan/where on constants (70 in MobileNetV2)."""
    from torch_models import require_torch

    require_torch()
    import torch
    from torch import nn

    torch.manual_seed(0)
    module = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU6(), nn.Conv2d(32, 32, 3, padding=1, groups=32),
                           nn.ReLU6(), nn.Conv2d(32, 24, 1)).eval()
    path = tmp_path / "clip.onnx"
    torch.onnx.export(module, (torch.randn(1, 3, 16, 16),), str(path), dynamo=True)
    return str(path)


@pytest.mark.parametrize("spec", ["demo:mobilenetv2@64", str(TFLITE / "mobilenet_v2.tflite"), "dynamo"])
def test_host_folding_prepares_the_graph_relax_foldconstant_prepares(spec: str, tmp_path: Path, monkeypatch) -> None:
    """ONNX bias reshapes, the blocked layout's weight transforms (16- and 8-channel blocks), an NHWC model's
    transposes and the dynamo exporter's isnan/where: the same module as Relax's FoldConstant alone, and nothing of
    those left for it to compile."""
    model = load_model(_dynamo_clip_model(tmp_path) if spec == "dynamo" else spec)
    left = _left_for_tvm(monkeypatch)
    ours = prepare_graph(model, "auto", "full", TARGET)
    assert all(p.status != "skipped" for p in ours.graph.passes), ours.graph.passes
    assert not left, sorted(set(left))
    _use_fold(monkeypatch, relax.transform.FoldConstant)
    theirs = prepare_graph(model, "auto", "full", TARGET)
    assert tvm_ffi.structural_equal(ours.mod, theirs.mod)


def test_layout_transforms_fold_as_tvm_maps_them() -> None:
    """A split-and-permute map (a weight's OIHW -> OIHW16i8o) as a reshape and transpose, another map element by
    element, a padded one left to TVM; each against TVM's own IndexMap.map_tensor."""
    rng = np.random.default_rng(0)

    def folded(source: np.ndarray, index_map, pad_value=None):
        call = relax.op.layout_transform(relax.const(source), index_map=index_map, pad_value=pad_value)
        return fold._layout_transform(call, [source], str(source.dtype))

    weight = rng.normal(size=(16, 32, 3, 3)).astype("float32")
    blocked = tirx.IndexMap.from_func(lambda o, i, h, w: (o // 8, i // 16, h, w, i % 16, o % 8))
    np.testing.assert_array_equal(folded(weight, blocked), blocked.map_tensor(tvm.runtime.tensor(weight)).numpy())
    unblock = tirx.IndexMap.from_func(lambda n, c, h, w, v: (n, c * 8 + v, h, w))
    data = rng.normal(size=(1, 3, 4, 4, 8)).astype("float32")
    np.testing.assert_array_equal(folded(data, unblock), unblock.map_tensor(tvm.runtime.tensor(data)).numpy())
    flipped = tirx.IndexMap.from_func(lambda a, b: (a * 4 + b,))  # a fuse, not a split and a permutation: evaluated
    small = rng.normal(size=(6, 4)).astype("float32")
    np.testing.assert_array_equal(folded(small, flipped), flipped.map_tensor(tvm.runtime.tensor(small)).numpy())
    # 20 channels in blocks of 16: padded, so TVM folds it
    assert folded(rng.normal(size=(1, 20, 2, 2)).astype("float32"),
                  tirx.IndexMap.from_func(lambda n, c, h, w: (n, c // 16, h, w, c % 16)), pad_value=0.0) is None


def test_a_scalar_stays_a_scalar_and_integer_arithmetic_is_left_to_tvm() -> None:
    """A 0-d constant keeps its shape (numpy's ascontiguousarray would make it 1-d); integer arithmetic (numpy's
    overflow is not TVM's) is left to Relax's FoldConstant, which gives the same module in the end."""
    x = relax.Var("x", relax.TensorType((4,), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            bound = bb.emit(relax.op.where(relax.op.isnan(relax.const(6.0, "float32")), relax.const(np.inf, "float32"),
                                           relax.const(6.0, "float32")))
            mixed = bb.emit(relax.op.add(relax.const(np.arange(4, dtype="int32")), relax.const(1, "int32")))
            out = bb.emit_output(relax.op.minimum(relax.op.add(x, relax.op.astype(mixed, "float32")), bound))
        bb.emit_func_output(out)
    folded = fold._fold_on_host(bb.get())
    constants = []
    relax.analysis.post_order_visit(folded["main"], lambda e: constants.append(e) if isinstance(e, fold._CONSTANT) else None)
    six = [c for c in constants if c.value.numpy().shape == () and c.value.numpy() == 6.0 and str(c.value.dtype) == "float32"]
    assert six, "the clip bound folds to a 0-d 6.0"
    adds = []
    relax.analysis.post_order_visit(folded["main"], lambda e: adds.append(e) if isinstance(e, relax.Call)
                                    and getattr(e.op, "name", "") == "relax.add" and isinstance(e.args[0], fold._CONSTANT) else None)
    assert adds, "the int32 add is TVM's to fold"
    assert tvm_ffi.structural_equal(relax.transform.FoldConstant()(folded), relax.transform.FoldConstant()(bb.get()))
