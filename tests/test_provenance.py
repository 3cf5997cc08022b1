"""Which tool wrote a model file (issue 52: a library's zoo says which exporter wrote each real export)."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

from edgetune.tasks.provenance import file_writer, model_writer, zoo_entry
from edgetune.tuning.zoo import ModelBuilt
from torch_models import require_torch

TFLITE = Path(__file__).parent / "data" / "tflite"


def _conv_module():
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()).eval()


def test_pytorchs_two_onnx_exporters_and_torch_export_are_told_apart(tmp_path) -> None:
    require_torch()
    import torch

    from edgetune.tasks import load_model

    module, example = _conv_module(), (torch.randn(1, 3, 16, 16),)
    torchscript, dynamo, pt2 = tmp_path / "ts.onnx", tmp_path / "dynamo.onnx", tmp_path / "net.pt2"
    torch.onnx.export(module, example, str(torchscript), dynamo=False, opset_version=17)
    torch.onnx.export(module, example, str(dynamo), dynamo=True)
    torch.export.save(torch.export.export(module, example), str(pt2))

    version = torch.__version__.split("+")[0]
    assert file_writer(torchscript).startswith(f"torch.onnx.export (TorchScript exporter), PyTorch {version}")
    assert file_writer(dynamo).startswith(f"torch.onnx.export (dynamo exporter), PyTorch {version}")
    assert file_writer(pt2) == "torch.export (.pt2 archive)"
    # the loaded model (the bytes a tune hashes) says the same as the file
    for path in (torchscript, dynamo, pt2):
        model = load_model(str(path))
        assert model_writer(model.format, model.data) == file_writer(path), path


def test_a_keras_tflite_file_names_the_converter_and_an_unknown_file_names_nothing(tmp_path) -> None:
    assert file_writer(TFLITE / "mobilenet_v2.tflite") == "the TensorFlow Lite converter (MLIR)"
    garbage = tmp_path / "broken.onnx"
    garbage.write_bytes(b"not a model")
    assert file_writer(garbage) is None and file_writer(tmp_path / "absent.tflite") is None
    assert model_writer("onnx", b"\x00garbage") is None and model_writer("demo", b"") is None
    # another ONNX producer is named as it names itself; an unnamed one is unknown
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    named = helper.make_model(graph, producer_name="tf2onnx", producer_version="1.16.1")
    assert model_writer("onnx", named.SerializeToString()) == "tf2onnx 1.16.1"
    unnamed = helper.make_model(graph)
    unnamed.producer_name = ""
    path = tmp_path / "unnamed.onnx"
    onnx.save(unnamed, str(path))
    assert file_writer(path) is None


def test_a_library_zoo_entry_names_a_files_exporter_and_leaves_demos_as_given() -> None:
    writer = "torch.onnx.export (TorchScript exporter), PyTorch 2.13.0"
    assert zoo_entry("/data/exports/squeezenet1_0-224.onnx", writer) == f"squeezenet1_0-224.onnx via {writer}"
    assert zoo_entry("demo:resnet18@224", "edgetune") == "demo:resnet18@224"
    assert zoo_entry("net.onnx", None) == "net.onnx"
    built = ModelBuilt("/data/exports/squeezenet1_0-224.onnx", tasks=22, trials_this_run=704, in_history_before=0,
                       seconds=1.0, of_tasks=35, writer=writer)
    assert built.label("x86-64-avx512.schedules.xz") == (
        f"squeezenet1_0-224.onnx via {writer} (the 22 of its 35 tasks x86-64-avx512.schedules.xz lacked)")


def test_schedules_info_says_the_default_zoo_is_lookalikes_and_names_the_shipped_real_exports() -> None:
    from conftest import run_cli

    result = run_cli("schedules", "info")
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "edgetune's zoo (`schedules build` default; in-code lookalikes, no exporter): demo:resnet18@224" in out
    # the shipped AVX-512 library holds real exports, each named with the exporter that wrote it
    for export in ("shufflenet_v2_x1_0", "mobilenet_v3_small", "efficientnet_b0"):
        assert f"{export}-224-onnx-torchscript.onnx via torch.onnx.export (TorchScript exporter), PyTorch" in out, export
