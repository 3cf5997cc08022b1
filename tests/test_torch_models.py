"""PyTorch models: ``.pt2`` files from ``torch.export.save`` loaded like ONNX ones, and one-line errors."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO
from edgetune.errors import ModelError
from edgetune.tasks import load_model, prepare_for_tuning
from edgetune.tasks.graph import prepare_graph
from torch_models import export, export_resnet18, require_torch, torch_reference


@pytest.fixture(scope="module")
def resnet(tmp_path_factory: pytest.TempPathFactory):
    require_torch()
    path = tmp_path_factory.mktemp("pt2") / "resnet18.pt2"
    module, _program = export_resnet18(path)
    return path, module


def _error_of(spec: str) -> str:
    with pytest.raises(ModelError) as info:
        load_model(spec)
    message = str(info.value)
    assert "\n" not in message and isinstance(info.value, ValueError)
    return message


def test_pt2_loads_and_matches_pytorch(resnet) -> None:
    path, module = resnet
    model = load_model(str(path))
    assert (model.name, model.source, model.format) == ("resnet18", str(path), "pt2")
    assert model.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert [(s.name, s.shape, s.dtype) for s in model.inputs] == [("x", (1, 3, 32, 32), "float32")]
    with pytest.raises(ModelError, match="a pt2 model has no ONNX bytes"):
        model.onnx_bytes  # noqa: B018
    feeds = model.random_inputs(seed=2)
    (out,) = model.reference_outputs(feeds)
    (expected,) = torch_reference(module, [feeds["x"]])
    assert out.shape == (1, 10) and out.std() > 1e-3
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def test_batch_norms_are_folded_into_the_convolutions(resnet) -> None:
    """As an ONNX export of the eval-mode model would have it: conv + bias + (residual) + relu per task."""
    import tvm
    from tvm.s_tir.meta_schedule.relax_integration import extract_tasks

    model = prepare_graph(load_model(str(resnet[0])))
    assert "batch_norm" not in model.mod.script()
    assert [p.detail for p in model.graph.passes if p.name == "fold-batch-norm"] == ["20 folded"]
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    names = [task.task_name for task in extract_tasks(prepare_for_tuning(model.mod, target), target)]
    convs = [name for name in names if "conv2d" in name]
    # 20 convolutions, 15 distinct tasks: the stem; stage 1: plain and residual; stages 2-4: strided,
    # plain, residual and the 1x1 projection shortcut (the only ones without a relu)
    assert len(convs) == 15 and all("_add" in name for name in convs), names
    assert sum("_relu" in name for name in convs) == 12
    assert not [name for name in names if "batch_norm" in name]


def test_pt2_file_errors(resnet, tmp_path: Path) -> None:
    import torch

    assert _error_of(str(tmp_path / "none.pt2")) == f"model file '{tmp_path / 'none.pt2'}' not found"
    text = tmp_path / "text.pt2"
    text.write_text("not a zip\n")
    assert _error_of(str(text)) == (
        f"'{text}' is not a torch.export ExportedProgram (a .pt2 file written by torch.export.save): "
        "it is not a zip archive"
    )
    state = tmp_path / "state.pt2"
    torch.save({"w": torch.zeros(2)}, state)
    assert "the zip archive has no archive_format record (torch.save writes such files" in _error_of(str(state))
    cut = tmp_path / "cut.pt2"
    with zipfile.ZipFile(resnet[0]) as source, zipfile.ZipFile(cut, "w") as target:
        for name in source.namelist():
            if not name.endswith("models/model.json"):
                target.writestr(name, source.read(name))
    assert _error_of(str(cut)).endswith("the archive holds no exported program")
    # a .pt2 under another name is read as ONNX, with a hint
    renamed = tmp_path / "resnet.onnx"
    renamed.write_bytes(resnet[0].read_bytes())
    assert _error_of(str(renamed)).endswith("(it is a zip archive: a torch.export program must be named *.pt2)")


def test_dynamic_shapes_are_refused(tmp_path: Path) -> None:
    require_torch()
    import torch

    class Scale(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) * 2

    program = torch.export.export(
        Scale(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: torch.export.Dim("batch", min=2, max=64)}}
    )
    path = tmp_path / "dyn.pt2"
    torch.export.save(program, path)
    message = _error_of(str(path))
    assert message.startswith(f"model input 'x' of '{path}' has a dynamic dimension 's")
    assert ", 3]); edgetune needs static shapes: re-export the model with fixed input sizes" in message


def test_non_tensor_input_is_refused(tmp_path: Path) -> None:
    require_torch()
    import torch

    class AddK(torch.nn.Module):
        def forward(self, x, k: int):
            return x + k

    path = tmp_path / "k.pt2"
    torch.export.save(torch.export.export(AddK(), (torch.randn(2), 3)), path)
    assert _error_of(str(path)).startswith(f"model input 'k' of '{path}' is not a tensor; edgetune tunes models")


def test_operator_the_frontend_lacks(tmp_path: Path) -> None:
    require_torch()
    import torch
    import tvm

    class Bessel(torch.nn.Module):
        def forward(self, x):
            return torch.special.i0e(x)

    path = tmp_path / "i0e.pt2"
    torch.export.save(export(Bessel(), (2, 3)), path)
    assert _error_of(str(path)) == (
        f"'{path}': TVM {tvm.__version__}'s PyTorch frontend has no converter for special_i0e.default: "
        "replace the operator in the model and export it again"
    )


def test_without_torch_a_pt2_model_is_one_line_naming_the_extra(tmp_path: Path) -> None:
    """torch hidden: edgetune imports and runs, and `--model x.pt2` says which extra to install."""
    path = tmp_path / "net.pt2"
    path.write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip: never read without torch
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["torch"] = None  # import torch raises ImportError
        import edgetune, edgetune.api, edgetune.cli, edgetune.tasks.models
        from edgetune.cli import main
        sys.exit(main(["tune", "--profile", "host", "--model", {str(path)!r}, "--out", {str(tmp_path / "out")!r}]))
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"edgetune: error: '{path}' is a PyTorch ExportedProgram: loading it needs torch, which is not installed; "
        "install it with: pip install 'edgetune[torch]'"
    ]


def test_import_edgetune_imports_neither_tvm_nor_torch() -> None:
    script = "import sys, edgetune, edgetune.api; print(sorted(m for m in ('tvm', 'torch', 'onnx') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_inference_batch_norms_are_folded_and_training_ones_kept(tmp_path: Path) -> None:
    """A batch norm over a dense layer's output folds into it too; one exported in training mode stays a batch norm."""
    require_torch()
    import torch
    from torch import nn

    torch.manual_seed(1)
    head = nn.Sequential(nn.Flatten(), nn.Linear(12, 6), nn.BatchNorm1d(6)).eval()
    with torch.no_grad():
        head[2].running_mean.uniform_(-1, 1)
    path = tmp_path / "head.pt2"
    torch.export.save(export(head, (2, 3, 2, 2)), path)
    imported = load_model(str(path))
    assert "R.nn.batch_norm" in imported.mod.script()
    model = prepare_graph(imported)
    assert "R.nn.batch_norm" not in model.mod.script()
    assert [p.detail for p in model.graph.passes if p.name == "fold-batch-norm"] == ["1 folded"]
    feeds = model.random_inputs(seed=4)
    np.testing.assert_allclose(model.reference_outputs(feeds)[0], torch_reference(head, [feeds["input"]])[0],
                               rtol=1e-5, atol=1e-5)
    train = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).train()
    torch.export.save(export(train, (2, 3, 8, 8)), path)
    kept = prepare_graph(load_model(str(path)))
    assert "training=True" in kept.mod.script()
    assert [p.detail for p in kept.graph.passes if p.name == "decompose-batch-norm"] == [
        "kept: 1 of 1 batch norms are in training mode"
    ]


def test_a_pt2_model_gets_its_onnx_runtime_baseline_through_an_export(resnet, tmp_path) -> None:
    """Issue 29: a .pt2 is exported to ONNX for ONNX Runtime; the baseline runs beside model.so and agrees."""
    import onnx

    from edgetune.board.baseline import compare_with_baseline
    from edgetune.artifact.compile import compile_model, export_model
    from edgetune.profile import load_profile

    path, module = resnet
    model = load_model(str(path))
    exported = model.bytes_for("onnx")
    assert exported is model.bytes_for("onnx")  # exported once per model
    graph = onnx.load_model_from_string(exported).graph
    assert [given.name for given in graph.input] == ["x"] and any(node.op_type == "Conv" for node in graph.node)
    assert model.bytes_for("tflite") is None
    profile = load_profile("host")
    artifact = export_model(compile_model(prepare_graph(model).mod, profile.tvm_target(), None), tmp_path / "model.so", profile)
    result = compare_with_baseline("onnxruntime", artifact, exported, model.random_inputs(seed=0), 1,
                                   rounds=2, number=2, given_as="pt2")
    assert result.error is None and result.outputs_match and result.max_rel_diff < 1e-4, result
    assert result.baseline_ms > 0 and result.tuned_ms > 0
    assert result.protocol.endswith("; the model exported from a PyTorch program (.pt2)")


def test_a_pt2_that_cannot_be_exported_is_one_line(resnet, monkeypatch) -> None:
    import sys

    model = load_model(str(resnet[0]))
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # as if the torch extra were installed without it
    with pytest.raises(ModelError) as info:
        model.bytes_for("onnx")
    message = str(info.value)
    assert "\n" not in message and "needs onnxscript" in message and "edgetune[torch]" in message
