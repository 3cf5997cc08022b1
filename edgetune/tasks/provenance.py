"""Which tool wrote a model file: the exporter a library's zoo entry and a summary name.

The same network exported by two tools is two sets of workloads: PyTorch's
TorchScript exporter and its dynamo exporter write batch norms, biases and
clips differently, and a torchvision model differs from edgetune's in-code
lookalike by its pooling. So a schedule library says which exporter wrote
each model it was built from (issue 52), read from the file itself:

- ONNX: ``producer_name``/``producer_version``; the dynamo exporter also tags
  its nodes with ``pkg.torch.onnx.*`` metadata, the TorchScript one does not;
- ``.pt2``: a ``torch.export`` archive;
- ``.tflite``: the converter's description (``MLIR Converted.``).
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

#: the TFLite description TensorFlow's MLIR-based converter writes (TFLiteConverter since TF 2.2)
_MLIR_DESCRIPTION = "MLIR Converted."


def model_writer(model_format: str, data: bytes) -> str | None:
    """How the file was written, in words ("torch.onnx.export (dynamo exporter), PyTorch 2.13.0"); None: unknown.

    ``model_format`` is a :class:`~edgetune.tasks.models.LoadedModel`'s ("onnx", "pt2", "tflite", "demo"),
    ``data`` its file's bytes. Never raises: a file it cannot read says nothing.
    """
    try:
        if model_format == "onnx":
            import onnx

            return _onnx_writer(onnx.load_from_string(data))
        if model_format == "pt2":
            return _pt2_writer(data)
        if model_format == "tflite":
            return _tflite_writer(data)
    except Exception:  # noqa: BLE001 - provenance is a label; a file that loaded for tuning must not fail on it
        return None
    return None


def file_writer(path: str | Path) -> str | None:
    """:func:`model_writer` of a model file on disk (an ONNX file's external weights are not read); None: unknown."""
    path = Path(path)
    suffix = path.suffix.lower()
    try:
        if suffix == ".onnx":
            import onnx

            return _onnx_writer(onnx.load(str(path), load_external_data=False))
        if suffix in (".pt2", ".tflite"):
            return model_writer(suffix[1:], path.read_bytes())
    except Exception:  # noqa: BLE001 - a label, as above
        return None
    return None


def _onnx_writer(model: Any) -> str | None:
    producer, version = model.producer_name.strip(), model.producer_version.strip()
    if producer == "pytorch":
        dynamo = any(prop.key.startswith("pkg.torch.onnx") for node in model.graph.node for prop in node.metadata_props)
        exporter = "dynamo exporter" if dynamo else "TorchScript exporter"
        return f"torch.onnx.export ({exporter}), PyTorch {version}" if version else f"torch.onnx.export ({exporter})"
    if producer == "onnx.quantize":
        return f"ONNX Runtime's quantizer {version}".strip()
    if producer:
        return f"{producer} {version}".strip()
    return None


def _pt2_writer(data: bytes) -> str | None:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        names = archive.namelist()
    if any(name.endswith("/archive_format") or name == "archive_format" for name in names):
        return "torch.export (.pt2 archive)"
    return None


def _tflite_writer(data: bytes) -> str | None:
    import tflite

    model = tflite.Model.GetRootAsModel(data, 0)
    description = (model.Description() or b"").decode("utf-8", "replace").strip()
    if description == _MLIR_DESCRIPTION:
        return "the TensorFlow Lite converter (MLIR)"
    return f"a TensorFlow Lite writer ({description})" if description else None


def zoo_entry(spec: str, writer: str | None) -> str:
    """A library's zoo entry for a model spec: a file is named by its file name and its writer; a demo as given."""
    if spec.startswith("demo:") or writer is None:
        return spec
    name = spec.replace("\\", "/").rsplit("/", 1)[-1]
    return f"{name} via {writer}"
