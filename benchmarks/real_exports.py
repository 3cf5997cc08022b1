"""Models as users export them: torchvision definitions through PyTorch's exporters (random weights, no downloads).

The benchmarks measure the product on the files a user holds, not only on
edgetune's in-code lookalikes (``demo:NAME``). Three exporters, as a PyTorch
user has them:

* ``onnx-torchscript``: ``torch.onnx.export(..., dynamo=False)``, the
  TorchScript-based exporter most deployment scripts still call;
* ``onnx-dynamo``: ``torch.onnx.export(..., dynamo=True)``, the default since
  PyTorch 2.9 (needs ``onnxscript``);
* ``pt2``: ``torch.export.export`` + ``torch.export.save``.

torchvision's wheel carries compiled operators (``torchvision::nms``...) that
do not load against the CPU-only torch the project pins; the model
definitions do not need them, so :func:`torchvision_module` imports the
definitions without the package's operator registration. Needs
``pip install -e ".[bench]"`` (torchvision 0.28 pairs with torch 2.13).

Usage::

  python benchmarks/real_exports.py squeezenet1_1 --res 224 --exporter onnx-torchscript --out edgetune-out/exports
  python benchmarks/real_exports.py resnet18 --qdq    # and its QDQ int8 model, as ONNX Runtime's quantizer writes it
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import types
from pathlib import Path
from typing import Any

EXPORTERS = ("onnx-torchscript", "onnx-dynamo", "pt2")
#: torchvision builder name -> the module that defines it
MODULES = {
    "squeezenet1_0": "squeezenet", "squeezenet1_1": "squeezenet",
    "mobilenet_v2": "mobilenetv2", "mobilenet_v3_small": "mobilenetv3", "mobilenet_v3_large": "mobilenetv3",
    "resnet18": "resnet", "resnet34": "resnet", "resnet50": "resnet", "resnext50_32x4d": "resnet",
    "wide_resnet50_2": "resnet",
    "regnet_x_400mf": "regnet", "regnet_y_400mf": "regnet", "regnet_x_800mf": "regnet",
    "shufflenet_v2_x0_5": "shufflenetv2", "shufflenet_v2_x1_0": "shufflenetv2",
    "mnasnet0_5": "mnasnet", "mnasnet1_0": "mnasnet",
    "efficientnet_b0": "efficientnet", "efficientnet_b1": "efficientnet",
    "googlenet": "googlenet", "densenet121": "densenet",
}


#: the population of issue 52's benchmark: (arch, resolution, exporter, whether the shipped library's zoo holds it)
POPULATION: tuple[tuple[str, int, str, bool], ...] = (
    # architectures and resolutions the zoo was built from (as edgetune's own lookalikes or these exports)
    ("squeezenet1_1", 224, "onnx-torchscript", True), ("squeezenet1_0", 224, "onnx-torchscript", True),
    ("mobilenet_v2", 224, "onnx-torchscript", True), ("resnet18", 224, "onnx-torchscript", True),
    ("resnet50", 224, "onnx-torchscript", True), ("shufflenet_v2_x1_0", 224, "onnx-torchscript", True),
    ("mobilenet_v3_small", 224, "onnx-torchscript", True), ("efficientnet_b0", 224, "onnx-torchscript", True),
    ("mobilenet_v2", 224, "onnx-dynamo", True), ("resnet18", 224, "pt2", True),
    # architectures, widths and resolutions it does not hold
    ("regnet_x_400mf", 224, "onnx-torchscript", False), ("regnet_y_400mf", 224, "onnx-torchscript", False),
    ("resnext50_32x4d", 224, "onnx-torchscript", False), ("mnasnet0_5", 224, "onnx-torchscript", False),
    ("mnasnet1_0", 224, "onnx-torchscript", False), ("mobilenet_v3_large", 224, "onnx-torchscript", False),
    ("shufflenet_v2_x0_5", 224, "onnx-torchscript", False), ("efficientnet_b1", 240, "onnx-torchscript", False),
    ("googlenet", 224, "onnx-torchscript", False), ("densenet121", 224, "onnx-torchscript", False),
    ("mobilenet_v2", 192, "onnx-dynamo", False), ("resnet18", 160, "pt2", False),
)


def torchvision_module(name: str) -> Any:
    """``torchvision.models.NAME`` imported without torchvision's compiled operators (see the module docstring)."""
    if "torchvision.models" in sys.modules:
        return importlib.import_module(f"torchvision.models.{name}")
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        raise SystemExit("real_exports: torchvision is not installed (pip install -e '.[bench]')")
    root = os.path.dirname(spec.origin)
    for package, path in (("torchvision", root), ("torchvision.models", os.path.join(root, "models"))):
        if package not in sys.modules:
            stub = types.ModuleType(package)
            stub.__path__ = [path]
            sys.modules[package] = stub
    return importlib.import_module(f"torchvision.models.{name}")


def torchvision_model(arch: str, seed: int = 0) -> Any:
    """torchvision's ``arch`` in eval mode with random weights (seeded), its normalization layers as after training.

    Freshly initialised, a BatchNorm is the identity (scale 1, shift 0, mean 0, variance 1), so the bias it folds
    into its convolution is all zeros, and an exporter that optimises the graph (the dynamo exporter's) drops it: the
    convolution it writes has no bias, unlike a trained model's, and the library's convolution-plus-bias workloads
    are not found (2026-12-02: 3 of MobileNetV2's 35 tasks). So each BatchNorm gets seeded statistics and affine
    parameters in a trained model's range; only values change, not the graph a trained model exports to.
    """
    import torch

    if arch not in MODULES:
        raise SystemExit(f"real_exports: arch must be one of {', '.join(sorted(MODULES))}, got {arch!r} instead")
    torch.manual_seed(seed)
    builder = getattr(torchvision_module(MODULES[arch]), arch)
    kwargs = {"aux_logits": False, "init_weights": True} if arch == "googlenet" else {}
    model = builder(weights=None, **kwargs).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and module.running_var is not None:
                shape = module.running_mean.shape
                module.running_mean.copy_(0.1 * torch.randn(shape, generator=generator))
                module.running_var.copy_(0.5 + torch.rand(shape, generator=generator))
                if module.affine:
                    module.weight.copy_(0.5 + torch.rand(shape, generator=generator))
                    module.bias.copy_(0.1 * torch.randn(shape, generator=generator))
    return model


def export(arch: str, res: int, exporter: str, out_dir: Path, seed: int = 0) -> Path:
    """``arch`` at ``res`` x ``res`` written by ``exporter`` into ``out_dir`` (kept if already there)."""
    import torch

    if exporter not in EXPORTERS:
        raise SystemExit(f"real_exports: exporter must be one of {', '.join(EXPORTERS)}, got {exporter!r} instead")
    suffix = ".pt2" if exporter == "pt2" else ".onnx"
    path = Path(out_dir) / f"{arch}-{res}-{exporter}{suffix}"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    model = torchvision_model(arch, seed)
    example = (torch.randn(1, 3, res, res),)
    if exporter == "pt2":
        torch.export.save(torch.export.export(model, example), str(path))
    else:
        torch.onnx.export(model, example, str(path), dynamo=exporter == "onnx-dynamo", opset_version=17,
                          input_names=["input"], output_names=["logits"])
    return path


def quantize_qdq(float_path: Path, res: int, calibration: int = 8, seed: int = 0, activations: str = "int8") -> Path:
    """``float_path`` quantized by ONNX Runtime's ``quantize_static`` with its defaults (QDQ format, int8 activations
    and weights, per tensor), calibrated on ``calibration`` seeded standard-normal inputs: ``...-qdq.onnx`` beside it.

    ``activations="uint8"`` (``...-qdq-u8.onnx``) quantizes the activations to uint8 instead, what ONNX Runtime's
    documentation recommends on x86-64 (U8S8): with the default int8 activations its CPU provider ran the QDQ
    ResNet-18 as fast as its float model, no faster."""
    import numpy as np
    from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize_static

    suffix = "-qdq.onnx" if activations == "int8" else f"-qdq-{activations[0]}8.onnx"
    path = float_path.with_name(float_path.stem + suffix)
    if path.exists():
        return path
    rng = np.random.default_rng(seed)
    batches = iter([{"input": rng.standard_normal((1, 3, res, res)).astype("float32")} for _ in range(calibration)])

    class Reader(CalibrationDataReader):
        def get_next(self) -> dict | None:
            return next(batches, None)

    activation_type = {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}[activations]
    quantize_static(str(float_path), str(path), Reader(), activation_type=activation_type)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arch", nargs="*", help=f"torchvision builders: {', '.join(sorted(MODULES))}")
    parser.add_argument("--population", action="store_true", help="every model of POPULATION (issue 52's benchmark)")
    parser.add_argument("--res", type=int, default=224)
    parser.add_argument("--exporter", choices=EXPORTERS, default="onnx-torchscript")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("edgetune-out/exports"))
    parser.add_argument("--qdq", action="store_true",
                        help="also write the ONNX export quantized by ONNX Runtime's quantize_static (its defaults)")
    parser.add_argument("--qdq-activations", choices=("int8", "uint8"), default="int8",
                        help="with --qdq: the activations' type (default int8, the quantizer's default; uint8 is what "
                        "ONNX Runtime recommends on x86-64, written as ...-qdq-u8.onnx)")
    args = parser.parse_args()
    wanted = [(arch, args.res, args.exporter) for arch in args.arch]
    if args.population:
        wanted += [(arch, res, exporter) for arch, res, exporter, _zoo in POPULATION]
    if not wanted:
        parser.error("name at least one arch, or --population")
    for arch, res, exporter in wanted:
        path = export(arch, res, exporter, args.out, args.seed)
        print(f"{path}: {path.stat().st_size / 1e6:.1f} MB")
        if args.qdq and path.suffix == ".onnx":
            quantized = quantize_qdq(path, res, seed=args.seed, activations=args.qdq_activations)
            print(f"{quantized}: {quantized.stat().st_size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
