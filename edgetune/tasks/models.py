"""Load a model spec (``demo:NAME[@RES]``, an ``.onnx`` or a ``.pt2`` path) into a Relax module.

Everything downstream (task extraction, tuning, building, checking results)
starts from a :class:`LoadedModel`: the Relax module as TVM's frontend returns
it (``from_onnx``, or ``from_exported_program`` for a PyTorch ``torch.export``
program saved with ``torch.export.save``) with weights as constants, its static
input signature, and the model file's bytes and their hash, which identify the
model in the tuning history and let ``edgetune deploy`` check it is the same.

torch is optional (``pip install 'edgetune[torch]'``): it is imported only when
a ``.pt2`` file is loaded.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import re
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import tvm
from google.protobuf.message import DecodeError
from onnx.external_data_helper import load_external_data_for_model, uses_external_data
from tvm import relax
from tvm.relax import pipeline as relax_pipeline
from tvm.relax.frontend.onnx import from_onnx

from edgetune.errors import ModelError
from edgetune.tasks.demo import build_demo
from edgetune.tasks.onnx_shapes import fold_shape_arithmetic

DEMO_PREFIX = "demo:"
#: suffix of a PyTorch ``torch.export.save`` archive
PT2_SUFFIX = ".pt2"
#: how to get torch when a ``.pt2`` model is given without it
TORCH_EXTRA = "pip install 'edgetune[torch]'"
TFLITE_SUFFIX = ".tflite"
TFLITE_EXTRA = "pip install 'edgetune[tflite]'"
#: TFLite tensor types the importer takes (TensorType enum of the schema -> numpy dtype)
_TFLITE_TYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 6: "bool", 9: "int8"}


@dataclass(frozen=True)
class InputSpec:
    """One model input; static shapes only, since tuning tasks are shape-specific."""

    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass
class LoadedModel:
    """A model ready for task extraction, plus what is needed to check results.

    ``inputs`` keep the model's input names, in the order of ``mod["main"]``'s
    parameters (Relax may rename them, e.g. ``input.1`` -> ``input_1``), so
    feed the VM positionally. ``data`` is the model file as hashed: ONNX bytes
    (self-contained, external weights pulled in) or the ``.pt2`` archive.
    """

    name: str
    source: str
    sha256: str
    inputs: list[InputSpec]
    mod: tvm.IRModule
    data: bytes
    format: str = "onnx"  # "onnx", "pt2" or "tflite"
    graph: Any = None  # what edgetune.tasks.graph.prepare_graph did to ``mod`` (a GraphReport); None: as imported
    recipe: Any = None  # the edgetune.tasks.recipe.Recipe ``mod`` was prepared with (prepare_model); None: as imported
    _reference_vm: relax.VirtualMachine | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _onnx_export: bytes | None = field(default=None, init=False, repr=False, compare=False)

    def bytes_for(self, runtime_format: str) -> bytes | None:
        """The model file in ``runtime_format`` ("onnx", "tflite"), or None when it cannot be had.

        A ``.pt2`` program is exported to ONNX (``torch.onnx.export``, once per model) so that ONNX
        Runtime can be the baseline of a PyTorch model; an export that fails is a one-line ModelError.
        """
        if self.format == runtime_format:
            return self.data
        if self.format == "pt2" and runtime_format == "onnx":
            if self._onnx_export is None:
                self._onnx_export = export_onnx_from_pt2(self.data, f"'{self.source}'")
            return self._onnx_export
        return None

    @property
    def onnx_bytes(self) -> bytes:
        """The ONNX model (serialized ``ModelProto``); only for ONNX and demo models."""
        if self.format != "onnx":
            raise ModelError(f"{self.name}: a {self.format} model has no ONNX bytes")
        return self.data

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Deterministic inputs: standard normal floats, small non-negative ints.

        Integers stay in [0, 10) so they are valid as indices (token ids,
        gather positions) in any model that takes integer inputs.
        """
        rng = np.random.default_rng(seed)
        arrays: dict[str, np.ndarray] = {}
        for spec in self.inputs:
            dtype = np.dtype(spec.dtype)
            if dtype.kind == "f":
                arrays[spec.name] = rng.standard_normal(spec.shape).astype(dtype)
            elif dtype.kind == "b":
                arrays[spec.name] = rng.integers(0, 2, spec.shape).astype(dtype)
            else:
                arrays[spec.name] = rng.integers(0, 10, spec.shape).astype(dtype)
        return arrays

    def reference_outputs(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run the untuned model on the host CPU; the ground truth for tuned builds."""
        args = []
        for spec in self.inputs:
            if spec.name not in inputs:
                raise ModelError(f"{self.name}: no value given for input '{spec.name}'")
            array = np.ascontiguousarray(inputs[spec.name], dtype=spec.dtype)
            if array.shape != spec.shape:
                raise ModelError(
                    f"{self.name}: input '{spec.name}' has shape {array.shape}, "
                    f"expected {spec.shape}"
                )
            args.append(tvm.runtime.tensor(array, tvm.cpu()))
        if self._reference_vm is None:
            executable = relax.build(self.mod, target=tvm.target.Target({"kind": "llvm"}))
            self._reference_vm = relax.VirtualMachine(executable, tvm.cpu())
        return _flatten_outputs(self._reference_vm["main"](*args))


def _flatten_outputs(value: Any) -> list[np.ndarray]:
    """VM results are a Tensor or (nested) tuples of them; ONNX outputs are flat."""
    if isinstance(value, tvm.runtime.Tensor):
        return [value.numpy()]
    return [array for item in value for array in _flatten_outputs(item)]


def load_model(spec: str) -> LoadedModel:
    """Load ``demo:NAME[@RES]``, an ONNX file, a ``.pt2`` or a ``.tflite`` file; every failure is a one-line ModelError."""
    if spec.startswith(DEMO_PREFIX):
        name, res = _parse_demo_spec(spec)
        model = build_demo(name, res)
        data = model.SerializeToString()
        label = spec
    else:
        path = Path(spec).expanduser()
        name = path.stem
        if path.suffix.lower() == PT2_SUFFIX:
            return _load_exported_program(path, spec)
        if path.suffix.lower() == TFLITE_SUFFIX:
            return _load_tflite(path, spec)
        model, data = _read_onnx(path, spec)
        label = f"'{spec}'"
    inputs = _input_specs(model, label)
    model, _folded = fold_shape_arithmetic(model)  # static input shapes: torch.chunk's Shape arithmetic is constant
    try:
        mod = from_onnx(model, keep_params_in_input=False)
    except Exception as exc:  # noqa: BLE001 - the frontend raises anything; report it in one line
        raise ModelError(
            f"{label}: TVM {tvm.__version__} cannot import the model: {_first_line(exc)}"
        ) from exc
    return LoadedModel(
        name=name,
        source=spec,
        sha256=hashlib.sha256(data).hexdigest(),
        inputs=inputs,
        mod=mod,
        data=data,
    )


def _parse_demo_spec(spec: str) -> tuple[str, int | None]:
    name, sep, res = spec[len(DEMO_PREFIX) :].partition("@")
    if not sep:
        return name, None
    if not res.isdigit():
        raise ModelError(
            f"bad resolution suffix in '{spec}': expected demo:NAME@SIZE with SIZE "
            f"the input height and width in pixels, e.g. demo:{name}@96"
        )
    return name, int(res)


def _read_bytes(path: Path, spec: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ModelError(f"model file '{spec}' not found") from None
    except OSError as exc:
        raise ModelError(f"cannot read model file '{spec}': {exc.strerror}") from exc


def _read_onnx(path: Path, spec: str) -> tuple[onnx.ModelProto, bytes]:
    """Parse the file; weights stored beside it are pulled in so the bytes are self-contained."""
    data = _read_bytes(path, spec)
    try:
        model = onnx.load_model_from_string(data)
    except (DecodeError, ValueError) as exc:
        hint = f" (it is a zip archive: a torch.export program must be named *{PT2_SUFFIX})" if data[:4] == b"PK\x03\x04" else ""
        raise ModelError(f"'{spec}' is not a valid ONNX model: {_first_line(exc)}{hint}") from exc
    if not model.graph.node or not model.graph.output:
        raise ModelError(f"'{spec}' is not a valid ONNX model: its graph has no nodes or outputs")
    if any(uses_external_data(t) for t in model.graph.initializer):
        try:
            load_external_data_for_model(model, os.fspath(path.parent))
        except (OSError, ValueError, onnx.checker.ValidationError) as exc:
            raise ModelError(
                f"'{spec}': cannot read its external weight data: {_first_line(exc)}"
            ) from exc
        # drop the explicit DEFAULT marker so the bytes (and hash) equal the inline model's
        for tensor in model.graph.initializer:
            tensor.ClearField("data_location")
        data = model.SerializeToString()
    return model, data


def _input_specs(model: onnx.ModelProto, label: str) -> list[InputSpec]:
    """Graph inputs that are not initializers, with static shapes enforced."""
    initializers = {t.name for t in model.graph.initializer}
    specs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        if not value.type.HasField("tensor_type"):
            raise ModelError(f"model input '{value.name}' of {label} is not a tensor")
        tensor_type = value.type.tensor_type
        if not tensor_type.HasField("shape"):
            raise ModelError(
                f"model input '{value.name}' of {label} has no shape (unknown rank); "
                "edgetune needs static shapes"
            )
        dims: list[int | str] = [
            d.dim_value if d.HasField("dim_value") else d.dim_param or "?"
            for d in tensor_type.shape.dim
        ]
        dynamic = [d for d in dims if isinstance(d, str)]
        if dynamic:
            raise ModelError(
                f"model input '{value.name}' of {label} has a dynamic dimension "
                f"'{dynamic[0]}' (shape [{', '.join(map(str, dims))}]); edgetune needs "
                "static shapes: re-export the model with fixed input sizes"
            )
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        specs.append(InputSpec(value.name, tuple(int(d) for d in dims), str(dtype)))
    return specs


def _load_tflite(path: Path, spec: str) -> LoadedModel:
    """A TensorFlow Lite flatbuffer through TVM's Relax TFLite frontend (the ``tflite`` parser package)."""
    label = f"'{spec}'"
    data = _read_bytes(path, spec)
    try:
        import tflite
        from tvm.relax.frontend.tflite import from_tflite

        from edgetune.tasks.tflite_import import StaticShapeConverter
    except ImportError:
        raise ModelError(
            f"{label} is a TensorFlow Lite model: reading it needs the tflite package, which is not installed; "
            f"install it with: {TFLITE_EXTRA}"
        ) from None
    if data[4:8] != b"TFL3":
        raise ModelError(f"{label} is not a TensorFlow Lite model: no TFL3 flatbuffer identifier")
    try:
        model = tflite.Model.GetRootAsModel(data, 0)
        graph = model.Subgraphs(0)
        inputs = []
        for position in range(graph.InputsLength()):
            tensor = graph.Tensors(graph.Inputs(position))
            name = tensor.Name().decode()
            if tensor.Type() not in _TFLITE_TYPES:
                raise ModelError(f"{label}: input '{name}' has TFLite tensor type {tensor.Type()}, which edgetune does not feed")
            shape = tuple(int(d) for d in tensor.ShapeAsNumpy())
            inputs.append(InputSpec(name, shape, _TFLITE_TYPES[tensor.Type()]))
    except ModelError:
        raise
    except Exception as exc:  # noqa: BLE001 - a damaged flatbuffer fails anywhere in the generated reader
        raise ModelError(f"{label} is not a readable TensorFlow Lite model: {_first_line(exc)}") from exc
    if any(d <= 0 for spec_ in inputs for d in spec_.shape):
        raise ModelError(f"{label}: dynamic input shapes are not supported; tasks are shape-specific")
    try:  # shape arithmetic (SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE) becomes constants: the inputs are static
        mod = from_tflite(model, {i.name: i.shape for i in inputs}, {i.name: i.dtype for i in inputs},
                          op_converter=StaticShapeConverter)
    except Exception as exc:  # noqa: BLE001 - the frontend raises anything: an operator or quantization it lacks
        raise ModelError(f"{label}: TVM {tvm.__version__} cannot import the TensorFlow Lite model: {_first_line(exc)}") from exc
    # the frontend also lists the weights in an attribute of main, beside the constants it uses: one copy is enough
    mod["main"] = mod["main"].without_attr("params")
    return LoadedModel(
        name=path.stem, source=spec, sha256=hashlib.sha256(data).hexdigest(), inputs=inputs, mod=mod, data=data,
        format="tflite",
    )


def _load_exported_program(path: Path, spec: str) -> LoadedModel:
    """A ``torch.export.save`` archive through TVM's ``from_exported_program``; torch is imported here only."""
    label = f"'{spec}'"
    data = _read_bytes(path, spec)
    try:
        import torch
    except ImportError:
        raise ModelError(
            f"{label} is a PyTorch ExportedProgram: loading it needs torch, which is not installed; "
            f"install it with: {TORCH_EXTRA}"
        ) from None
    what = "a torch.export ExportedProgram (a .pt2 file written by torch.export.save)"
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = [name.rsplit("/", 1)[-1] for name in archive.namelist()]
    except zipfile.BadZipFile:
        raise ModelError(f"{label} is not {what}: it is not a zip archive") from None
    if "archive_format" not in names and "serialized_exported_program.json" not in names:  # the latter: torch < 2.7
        raise ModelError(
            f"{label} is not {what}: the zip archive has no archive_format record "
            "(torch.save writes such files; save the program with torch.export.save)"
        )
    # torch logs a failed read as a warning with a traceback, then raises a generic error: keep the cause, drop the log
    logged = _KeepErrors()
    torch_log = logging.getLogger("torch.export")
    torch_log.addFilter(logged)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch's own deprecations while unpickling specs
            program = torch.export.load(io.BytesIO(data))
    except Exception as exc:  # noqa: BLE001 - torch raises anything on a foreign archive
        if logged.errors:
            detail = _first_line(logged.errors[0])
        elif "check the warnings above" in str(exc):
            detail = "the archive holds no exported program"
        else:
            detail = _first_line(exc)
        raise ModelError(f"{label} is not {what}: {detail}") from exc
    finally:
        torch_log.removeFilter(logged)
    if not isinstance(program, torch.export.ExportedProgram):
        raise ModelError(f"{label} is not {what}: torch.export.load gave a {type(program).__name__}")
    inputs = _program_input_specs(program, label)
    mod = _import_exported_program(program, label)
    return LoadedModel(
        name=path.stem,
        source=spec,
        sha256=hashlib.sha256(data).hexdigest(),
        inputs=inputs,
        mod=mod,
        data=data,
        format="pt2",
    )


def export_onnx_from_pt2(data: bytes, label: str) -> bytes:
    """An ONNX file of a ``torch.export`` archive (torch's dynamo exporter, which needs onnxscript).

    For the ONNX Runtime baseline of a PyTorch model: the same program, weights and input names,
    so the baseline runs what was tuned. Raises a one-line :class:`ModelError` when it cannot.
    """
    import torch

    try:
        import onnxscript  # noqa: F401 - torch's exporter imports it lazily and fails deep inside
    except ImportError:
        raise ModelError(
            f"{label}: exporting a PyTorch program to ONNX needs onnxscript, which is not installed; "
            f"install it with: {TORCH_EXTRA}"
        ) from None
    quiet = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript")]
    levels = [log.level for log in quiet]
    for log in quiet:  # the exporter logs each skipped optional op and its progress
        log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.export.load(io.BytesIO(data))
            sample = tuple(
                torch.zeros(tuple(value.shape), dtype=value.dtype)
                for value in (node.meta["val"] for node in program.graph.nodes
                              if node.op == "placeholder" and node.name in _user_input_names(program))
            )
            exported = torch.onnx.export(program, sample, dynamo=True, verbose=False, optimize=True)
            return exported.model_proto.SerializeToString()
    except ModelError:
        raise
    except Exception as exc:  # noqa: BLE001 - the exporter raises anything; one line
        raise ModelError(f"{label}: torch {torch.__version__} cannot export the program to ONNX: {_first_line(exc)}") from exc
    finally:
        for log, level in zip(quiet, levels):
            log.setLevel(level)


def _user_input_names(program: Any) -> list[str]:
    from torch.export.graph_signature import InputKind

    return [getattr(spec.arg, "name", "") for spec in program.graph_signature.input_specs if spec.kind == InputKind.USER_INPUT]


class _KeepErrors(logging.Filter):
    """A log filter that swallows records and keeps the exceptions they carry."""

    def __init__(self) -> None:
        super().__init__()
        self.errors: list[BaseException] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            self.errors.append(record.exc_info[1])
        return False


def _program_input_specs(program: Any, label: str) -> list[InputSpec]:
    """The program's user inputs (not its weights), with static shapes enforced."""
    import torch
    from torch.export.graph_signature import InputKind, TensorArgument

    placeholders = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
    specs = []
    for spec in program.graph_signature.input_specs:
        if spec.kind != InputKind.USER_INPUT:
            continue
        name = getattr(spec.arg, "name", str(spec.arg))
        node = placeholders.get(name)
        value = node.meta.get("val") if node is not None else None
        if not isinstance(spec.arg, TensorArgument) or not isinstance(value, torch.Tensor):
            raise ModelError(
                f"model input '{name}' of {label} is not a tensor; edgetune tunes models whose inputs are all "
                "tensors: fix the other arguments inside the module before torch.export.export"
            )
        dims: list[int | str] = [d if isinstance(d, int) else str(d) for d in value.shape]
        dynamic = [d for d in dims if isinstance(d, str)]
        if dynamic:
            raise ModelError(
                f"model input '{name}' of {label} has a dynamic dimension '{dynamic[0]}' "
                f"(shape [{', '.join(map(str, dims))}]); edgetune needs static shapes: re-export the "
                "model with fixed input sizes (torch.export.export without dynamic_shapes)"
            )
        dtype = str(value.dtype).removeprefix("torch.")
        try:
            dtype = str(np.dtype(dtype))
        except TypeError:
            raise ModelError(
                f"model input '{name}' of {label} has dtype {dtype}, which edgetune cannot feed (no numpy dtype)"
            ) from None
        specs.append(InputSpec(name, tuple(int(d) for d in dims), dtype))
    return specs


def _import_exported_program(program: Any, label: str) -> tvm.IRModule:
    """``from_exported_program`` with weights as constants; a single output is returned bare, as from ONNX.

    An exported program keeps each batch norm as its own operator;
    :func:`edgetune.tasks.graph.prepare_graph` folds them, as for every format.
    """
    from tvm.relax.frontend.torch import from_exported_program

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            return from_exported_program(program, keep_params_as_input=False, unwrap_unit_return_tuple=True)
    except Exception as exc:  # noqa: BLE001 - the frontend raises anything; report it in one line
        missing = re.match(r"Unsupported function types \[(.*)\]", str(exc))
        if isinstance(exc, AssertionError) and missing:
            raise ModelError(
                f"{label}: TVM {tvm.__version__}'s PyTorch frontend has no converter for "
                f"{missing.group(1).replace(chr(39), '')}: replace the operator in the model and export it again"
            ) from exc
        raise ModelError(
            f"{label}: TVM {tvm.__version__} cannot import the model: {_first_line(exc)}"
        ) from exc


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


#: the PrimFunc attribute that lets MetaSchedule rewrite a weight's layout (``tuning.prepack_weights``)
LAYOUT_FREE = "layout_free_buffers"


def comparable_workload(mod: Any) -> Any:
    """``mod`` without what ``tuning.prepack_weights`` adds: the library keys a workload by this."""
    from tvm import tirx

    functions = dict(mod.functions_items())
    if not any(isinstance(f, tirx.PrimFunc) and f.attrs is not None and LAYOUT_FREE in f.attrs for f in functions.values()):
        return mod
    return tvm.IRModule(
        {gv: f.without_attr(LAYOUT_FREE) if isinstance(f, tirx.PrimFunc) and f.attrs is not None and LAYOUT_FREE in f.attrs else f
         for gv, f in functions.items()},
        attrs=mod.attrs,
    )


def prepacks_weights(setting: bool, target: tvm.target.Target) -> bool:
    """Whether ``tuning.prepack_weights`` applies to ``target``: MetaSchedule rewrites weight layouts on CPUs only."""
    return bool(setting) and str(target.kind.name) == "llvm"


def prepare_for_tuning(
    mod: tvm.IRModule, target: tvm.target.Target | None = None, prepack_weights: bool = False
) -> tvm.IRModule:
    """Lower and fuse exactly as the tuned build does (:func:`edgetune.artifact.compile.compile_model`).

    Task extraction must see the same fused PrimFuncs that the build later
    looks up in the tuning database, or tuned schedules are silently not
    applied. With ``target`` given, its library-dispatch passes run first, as in
    ``compile_relax``; they only change models with sort/scan/sampling ops.
    ``prepack_weights`` (``tuning.prepack_weights``, CPU targets): each kernel
    says which of its inputs are constant weights, so that a schedule may store
    them in the layout its loops read (MetaSchedule's ``RewriteLayout``).
    """
    passes = [
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
        *([relax.transform.AttachAttrLayoutFreeBuffers()] if prepack_weights else []),
    ]
    with tvm.transform.PassContext(opt_level=3):
        if target is None:
            return tvm.transform.Sequential(passes)(mod)
        with target:
            try:
                dispatch = relax_pipeline.library_dispatch_passes(target)
            except ValueError:  # targets compile_relax also runs without dispatch passes
                dispatch = []
            return tvm.transform.Sequential([*dispatch, *passes])(mod)
