"""Models given as Python objects (an ``onnx.ModelProto``, a ``torch.export.ExportedProgram``) instead of files.

``edgetune.tune()`` and ``edgetune.deploy()`` accept either; an object is
saved to a file first, which the run's summary and the deployment manifest
then name as the model's source. torch is never imported here unless the
object is a torch program (its module is already loaded then).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from ..errors import ModelError

#: the name an in-memory model is saved under when none is given
DEFAULT_MODEL_NAME = "model"


def model_arg(model: Any) -> tuple[str | None, Any, str]:
    """``(spec, None, "")`` for a path or demo spec, ``(None, object, suffix)`` for a model object to save first."""
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model), None, ""
    onnx = sys.modules.get("onnx")  # an object of these types means its package is imported already
    if onnx is not None and isinstance(model, onnx.ModelProto):
        return None, model, ".onnx"
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(model, torch.export.ExportedProgram):
        return None, model, ".pt2"
    if torch is not None and isinstance(model, torch.nn.Module):
        raise ModelError(
            f"model must be exported before tuning, got a torch.nn.Module ({type(model).__name__}) instead; "
            "pass torch.export.export(module, (example_input,))"
        )
    raise ModelError(
        "model must be an ONNX or .pt2 file path, a demo:NAME spec, an onnx.ModelProto or a "
        f"torch.export.ExportedProgram, got {type(model).__name__} instead"
    )


def save_model(model: Any, path: Path) -> Path:
    """Write an in-memory model where the run keeps it (the summary names it as the model's source)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        if path.suffix == ".pt2":
            import torch

            torch.export.save(model, path)
        else:
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_bytes(model.SerializeToString())
            os.replace(tmp, path)
    except Exception as exc:  # noqa: BLE001 - serializers raise anything; one line names it
        detail = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
        raise ModelError(f"cannot save the model to {path}: {type(exc).__name__}: {detail}") from exc
    return path
