"""The MetaTune model file: weights and what they were trained on, in one ``.npz``.

A model file is a numpy archive (no pickle, so loading one never runs code):
the network's parameters as named float32 arrays, the node-feature scaling,
and ``info``, a JSON string with :data:`FORMAT_VERSION`, the graph template's
sizes, the training histories, targets, task and record counts and the
hyperparameters. Reading it needs neither PyTorch nor TVM, so ``costmodel
info`` works on any install. A file that is not such an archive, or was written
for another format version or template, is a one-line :class:`CostModelError`.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CostModelError
from . import graph

#: bumped whenever the parameters, their shapes or the graph template change meaning
FORMAT_VERSION = 1
#: the model edgetune ships (made by benchmarks/metatune_pretrain.py)
BUNDLED = "metatune.npz"


def template() -> dict[str, int]:
    """The graph template a model's input layer is shaped for."""
    return {"max_for": graph.MAX_FOR, "max_interval": graph.MAX_INTERVAL, "node_features": graph.NODE_FEATURES}


@dataclass
class ModelFile:
    """Parameters (``name -> array``), feature scaling and the ``info`` dictionary of a MetaTune model."""

    params: dict[str, np.ndarray]
    feature_mean: np.ndarray
    feature_std: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        info = {**self.info, "format_version": FORMAT_VERSION, "template": template()}
        arrays = {f"param/{k}": np.asarray(v, dtype=np.float32) for k, v in self.params.items()}
        arrays["feature_mean"] = self.feature_mean.astype(np.float32)
        arrays["feature_std"] = self.feature_std.astype(np.float32)
        arrays["info"] = np.frombuffer(json.dumps(info, sort_keys=True).encode(), dtype=np.uint8)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as handle:
            np.savez_compressed(handle, **arrays)
        self.info = info
        return path

    @classmethod
    def load(cls, path: str | Path) -> "ModelFile":
        path = Path(path)
        try:
            data = path.read_bytes()
        except OSError as error:
            raise CostModelError(f"cannot read MetaTune model file {path}: {error.strerror or error}") from None
        return cls.from_bytes(data, str(path))

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> "ModelFile":
        if not data.startswith(b"PK"):
            raise CostModelError(f"{where} is not a MetaTune model file (not a .npz archive)")
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as archive:
                arrays = {name: archive[name] for name in archive.files}
            info = json.loads(bytes(arrays.pop("info")).decode())
            mean, std = arrays.pop("feature_mean"), arrays.pop("feature_std")
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, UnicodeDecodeError) as error:
            raise CostModelError(f"{where} is not a MetaTune model file ({type(error).__name__}: {error})") from None
        version = info.get("format_version") if isinstance(info, dict) else None
        if version != FORMAT_VERSION:
            raise CostModelError(
                f"{where} is a MetaTune model of format version {version}, this edgetune reads version {FORMAT_VERSION}: "
                "pre-train it again with `edgetune costmodel pretrain`"
            )
        if info.get("template") != template():
            raise CostModelError(f"{where} was trained for graph template {info.get('template')}, this edgetune uses {template()}")
        params = {name.split("/", 1)[1]: value for name, value in arrays.items() if name.startswith("param/")}
        return cls(params, mean, std, info)

    @property
    def num_parameters(self) -> int:
        return int(sum(v.size for v in self.params.values()))


def bundled_model() -> ModelFile:
    """The pre-trained model shipped in the package (package data, read with importlib.resources)."""
    resource = resources.files("edgetune.costmodel") / "data" / BUNDLED
    try:
        data = resource.read_bytes()
    except (FileNotFoundError, OSError):
        raise CostModelError(f"the bundled MetaTune model ({BUNDLED}) is missing from this edgetune install") from None
    return ModelFile.from_bytes(data, f"bundled {BUNDLED}")


def load_model_file(path: str | Path | None) -> ModelFile:
    """The model at ``path``, or the bundled one when ``path`` is None or empty."""
    return ModelFile.load(path) if path else bundled_model()


def describe(model: ModelFile, where: str) -> str:
    """What ``costmodel info`` prints: where from, trained on what, how big."""
    info = model.info
    lines = [
        f"MetaTune model {where}",
        f"  format version {info.get('format_version')}, edgetune {info.get('edgetune_version', '?')}, "
        f"created {info.get('created', '?')}",
        f"  {model.num_parameters} parameters; graph template: {info['template']['max_for']} loop slots, "
        f"{info['template']['max_interval']} interval slots, {info['template']['node_features']} node features",
    ]
    data = info.get("training", {})
    if data:
        lines.append(f"  trained on {data.get('records', 0)} records of {data.get('tasks', 0)} tasks "
                     f"({data.get('meta_tasks', 0)} meta-training tasks usable)")
        for source in data.get("histories", []):
            lines.append(f"  history: {source}")
        for target in data.get("targets", []):
            lines.append(f"  target: {target}")
    hyper = info.get("hyperparameters", {})
    if hyper:
        lines.append("  hyperparameters: " + ", ".join(f"{k}={v}" for k, v in sorted(hyper.items())))
    return "\n".join(lines)


__all__ = ["BUNDLED", "FORMAT_VERSION", "ModelFile", "bundled_model", "describe", "load_model_file", "template"]
