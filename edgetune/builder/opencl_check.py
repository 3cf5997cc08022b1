"""Run the OpenCL kernels edgetune builds on this host's OpenCL device, to prove they compute the right thing.

The apache-tvm wheels have no OpenCL runtime, so TVM cannot launch the kernels
it generates for a Mali or Adreno profile. :class:`~edgetune.builder.opencl_host.HostOpenCL` does the part
of TVM's OpenCL runtime that a check needs, with pyopencl on whatever OpenCL
implementation the host has (Debian's ``pocl-opencl-icd`` runs them on the CPU):

* the kernels' OpenCL C source and their metadata (argument types, launch
  parameter tags) are read from the built module's serialized OpenCL import,
  the bytes TVM would put into ``model.so`` (:func:`read_opencl_program`);
* the host code TVM generated runs unchanged; its kernel launches, which it
  looks up by name in the module's imports and then in the global function
  registry, reach a Python function that launches the kernel with the grid
  and work-group sizes that host code computed.

So the launch geometry is exactly what TVM records for the board. Every
launch is checked against the OpenCL device's limits first, and
:func:`check_device_limits` makes the same check on a scheduled module before
it is built (the builder uses it to reject a candidate as data). Times taken
here are never GPU performance: pocl runs the kernels on the CPU.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from ..errors import DeviceLimitError

_OPENCL_DEVICE_TYPE = 4  # kDLOpenCL
_PACK_IMPORTS = "runtime.ModulePackImportsToC"
_SET_DEVICE = "__tvm_set_device"
_DTYPE_CODES = {0: "int", 1: "uint", 2: "float", 3: "handle", 4: "bfloat"}
_GPU_TARGET_KINDS = ("opencl", "cuda", "vulkan", "metal", "rocm", "webgpu")


@dataclass(frozen=True)
class KernelInfo:
    """What TVM's runtime knows of one kernel: its arguments and the launch parameters after them."""

    name: str
    arg_types: tuple[str, ...]
    launch_param_tags: tuple[str, ...]


@dataclass(frozen=True)
class OpenCLProgram:
    """The OpenCL C source of a built module and its kernels' metadata."""

    source: str
    kernels: dict[str, KernelInfo]


@dataclass(frozen=True)
class DeviceLimits:
    """What a device allows one work-group: threads, threads per dimension, local (shared) memory."""

    name: str
    max_threads_per_block: int
    max_shared_memory_bytes: int
    max_work_item_sizes: tuple[int, ...] = ()
    source: str = ""  # where the numbers come from, for messages

    @classmethod
    def from_target(cls, target: Any, name: str = "") -> "DeviceLimits":
        """The limits a TVM target (a profile's ``[target]``) declares."""
        attrs = dict(target.attrs)
        return cls(
            name=name or str(attrs.get("device", target.kind.name)),
            max_threads_per_block=int(attrs.get("max_threads_per_block", attrs.get("max_num_threads", 256))),
            max_shared_memory_bytes=int(attrs.get("max_shared_memory_per_block", 16384)),
            source="the profile's target (max_threads_per_block, max_shared_memory_per_block)",
        )

    @classmethod
    def from_opencl_device(cls, device: Any) -> "DeviceLimits":
        """The limits a pyopencl device reports (CL_DEVICE_MAX_WORK_GROUP_SIZE, ...)."""
        return cls(
            name=str(device.name).strip(),
            max_threads_per_block=int(device.max_work_group_size),
            max_shared_memory_bytes=int(device.local_mem_size),
            max_work_item_sizes=tuple(int(n) for n in device.max_work_item_sizes),
            source="the OpenCL device (CL_DEVICE_MAX_WORK_GROUP_SIZE, CL_DEVICE_LOCAL_MEM_SIZE)",
        )

    def tighter(self, other: "DeviceLimits") -> "DeviceLimits":
        """The smaller of both limits: a kernel must fit the profile and the device it runs on."""
        sizes = self.max_work_item_sizes or other.max_work_item_sizes
        if self.max_work_item_sizes and other.max_work_item_sizes:
            sizes = tuple(min(a, b) for a, b in zip(self.max_work_item_sizes, other.max_work_item_sizes))
        threads = min(self.max_threads_per_block, other.max_threads_per_block)
        shared = min(self.max_shared_memory_bytes, other.max_shared_memory_bytes)
        return DeviceLimits(f"{self.name} on {other.name}", threads, shared, sizes, f"{self.source}; {other.source}")


# ---------------------------------------------------------------- reading the built module


class _Reader:
    """Little-endian reader of TVM's serialized module bytes (u64 lengths, strings, arrays)."""

    def __init__(self, data: bytes, offset: int = 0) -> None:
        self.data, self.offset = data, offset

    def u64(self) -> int:
        (value,) = struct.unpack_from("<Q", self.data, self.offset)
        self.offset += 8
        return int(value)

    def string(self) -> str:
        size = self.u64()
        if size > len(self.data) - self.offset:
            raise ValueError("string runs past the end")
        text = self.data[self.offset : self.offset + size].decode()
        self.offset += size
        return text

    def raw(self, size: int) -> bytes:
        chunk = self.data[self.offset : self.offset + size]
        self.offset += size
        return chunk


def _packed_imports(module: Any) -> bytes:
    """The bytes TVM packs into a shared library for ``module``'s imports (its serialized device modules)."""
    import tvm

    text = tvm.get_global_func(_PACK_IMPORTS)(module, False, "")
    body = text[text.index("__tvm_ffi__library_bin[") :]
    body = body[body.index("{") + 1 : body.index("}")]
    return bytes(int(h, 16) for h in re.findall(r"0x([0-9a-fA-F]{2})", body))


def _parse_opencl_payload(payload: bytes) -> OpenCLProgram:
    reader = _Reader(payload)
    fmt = reader.string()
    if fmt != "cl":
        raise ValueError(f"OpenCL module holds format {fmt!r}, not OpenCL C source ('cl')")
    kernels: dict[str, KernelInfo] = {}
    for _ in range(reader.u64()):
        key = reader.string()
        name = reader.string()
        arg_types = []
        for _arg in range(reader.u64()):
            code, bits, lanes = struct.unpack("<BBH", reader.raw(4))
            arg_types.append(f"{_DTYPE_CODES.get(code, code)}{bits}" + (f"x{lanes}" if lanes > 1 else ""))
        tags = tuple(reader.string() for _tag in range(reader.u64()))
        reader.raw(4 * reader.u64())  # arg_extra_tags (tensor maps; CUDA only)
        kernels[key] = KernelInfo(name, tuple(arg_types), tags)
    source = reader.string()
    if reader.offset != len(payload):
        raise ValueError(f"{len(payload) - reader.offset} bytes left after the source")
    return OpenCLProgram(source, kernels)


def read_opencl_program(module: Any) -> OpenCLProgram:
    """The OpenCL source and kernel metadata serialized in a module built for an OpenCL target.

    ``module`` is the host module ``tvm.compile`` returns (or its ``.mod``).
    The metadata is read from the bytes TVM serializes into the shared library,
    so the check sees what the board's runtime would load.
    """
    module = getattr(module, "mod", module)
    if not any(m.kind == "opencl" for m in module.imports):
        kinds = ", ".join(m.kind for m in module.imports) or "none"
        raise ValueError(f"module must import an OpenCL module (built for an opencl target), got imports: {kinds} instead")
    blob = _packed_imports(module)
    marker = struct.pack("<Q", len(b"opencl")) + b"opencl"
    at = blob.find(marker)
    if at < 0:
        raise ValueError("no serialized OpenCL module in the packed imports")
    reader = _Reader(blob, at + len(marker))
    size = reader.u64()
    try:
        return _parse_opencl_payload(reader.raw(size))
    except (ValueError, struct.error, UnicodeDecodeError) as error:
        raise ValueError(f"cannot read the serialized OpenCL module ({error}); TVM's format may have changed") from error


# ---------------------------------------------------------------- static limits of a scheduled module


def _thread_bound_loop(stmt: Any) -> str | None:
    import tvm.tirx as tirx

    if isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.THREAD_BINDING and stmt.thread_binding is not None:
        return str(stmt.thread_binding.thread_tag)
    return None


def _children(stmt: Any) -> Iterator[Any]:
    import tvm.tirx as tirx

    if isinstance(stmt, tirx.SeqStmt):
        yield from stmt.seq
        return
    for name in ("block", "body", "init", "then_case", "else_case"):
        child = getattr(stmt, name, None)
        if isinstance(child, tirx.Stmt):
            yield child


def _buffer_bytes(buffer: Any) -> int:
    elements = int(np.prod([int(n) for n in buffer.shape], dtype=np.int64))
    return elements * buffer.dtype.bits * buffer.dtype.lanes // 8


def _collect_threads(stmt: Any, extents: dict[str, int]) -> None:
    tag = _thread_bound_loop(stmt)
    if tag is not None and tag.startswith("threadIdx"):
        extents[tag] = max(extents.get(tag, 1), int(stmt.extent))
    for child in _children(stmt):
        _collect_threads(child, extents)


def _find_kernels(stmt: Any, found: list[dict[str, int]]) -> None:
    if _thread_bound_loop(stmt) is not None:  # the outermost thread-bound loop starts a kernel
        extents: dict[str, int] = {}
        _collect_threads(stmt, extents)
        found.append(extents)
        return
    for child in _children(stmt):
        _find_kernels(child, found)


def work_group_shapes(mod: Any) -> list[dict[str, int]]:
    """The work-group shape (threadIdx extents) of each kernel of a scheduled module with static shapes.

    Thread extents are final before lowering; buffer sizes are not (lowering
    compacts them), so local memory is read from the built source instead
    (:func:`local_memory_bytes`).
    """
    import tvm.tirx as tirx

    found: list[dict[str, int]] = []
    functions = [mod] if isinstance(mod, tirx.PrimFunc) else [f for f in mod.functions.values() if isinstance(f, tirx.PrimFunc)]
    for func in functions:
        _find_kernels(func.body, found)
    return found


_CL_SCALAR_BYTES = {"char": 1, "uchar": 1, "short": 2, "ushort": 2, "half": 2, "int": 4, "uint": 4, "float": 4,
                    "long": 8, "ulong": 8, "double": 8, "bool": 1}


def local_memory_bytes(source: str) -> dict[str, int]:
    """Bytes of ``__local`` arrays each kernel of OpenCL C source declares, by kernel name."""
    found: dict[str, int] = {}
    bodies = re.split(r"__kernel\s+void\s+(\w+)\s*\([^)]*\)\s*\{", source)
    for name, body in zip(bodies[1::2], bodies[2::2]):
        total = 0
        for ctype, count in re.findall(r"__local\s+(?:volatile\s+)?([a-z]+\d*)\s+\w+\s*\[(\d+)\]", body):
            base = ctype.rstrip("0123456789")
            lanes = int(ctype[len(base):] or 1)
            total += _CL_SCALAR_BYTES.get(base, 4) * lanes * int(count)
        found[name] = max(found.get(name, 0), total)
    return found


def intermediate_buffers(mod: Any) -> dict[str, int]:
    """Bytes of each global-memory buffer a scheduled module allocates between its kernels, by name."""
    import tvm.tirx as tirx

    sizes: dict[str, int] = {}

    def visit(stmt: Any) -> None:
        for buffer in getattr(stmt, "alloc_buffers", ()) or ():
            if str(buffer.scope()) == "global":
                sizes[str(buffer.name)] = _buffer_bytes(buffer)
        for child in _children(stmt):
            visit(child)

    functions = [mod] if isinstance(mod, tirx.PrimFunc) else [f for f in mod.functions.values() if isinstance(f, tirx.PrimFunc)]
    for func in functions:
        visit(func.body)
    return sizes


def _kernel_parameters(source: str) -> dict[str, list[str]]:
    """Parameter names of every ``__kernel`` in OpenCL C source (TVM names a buffer's pointer ``NAME_ptr``)."""
    found: dict[str, list[str]] = {}
    for name, params in re.findall(r"__kernel\s+void\s+(\w+)\s*\(([^)]*)\)", source):
        found[name] = [p.split()[-1].lstrip("*") for p in params.split(",") if p.strip()]
    return found


def check_device_limits(scheduled: Any, built: Any, limits: DeviceLimits) -> None:
    """Raise :class:`DeviceLimitError` when a kernel needs more than ``limits`` allow.

    ``scheduled`` is the candidate's scheduled module (its work-group shapes),
    ``built`` what ``tvm.compile`` made of it for an OpenCL target (its local
    memory, from the kernels' source).
    """
    for index, extents in enumerate(work_group_shapes(scheduled)):
        threads = int(np.prod(list(extents.values()), dtype=np.int64)) if extents else 1
        shape = ", ".join(f"{tag}={n}" for tag, n in sorted(extents.items()))
        if threads > limits.max_threads_per_block:
            raise DeviceLimitError(
                f"kernel {index} needs {threads} threads per work-group ({shape}); "
                f"{limits.name} allows at most {limits.max_threads_per_block} ({limits.source})"
            )
        for axis, tag in enumerate(("threadIdx.x", "threadIdx.y", "threadIdx.z")):
            if axis < len(limits.max_work_item_sizes) and extents.get(tag, 1) > limits.max_work_item_sizes[axis]:
                raise DeviceLimitError(
                    f"kernel {index} needs {tag}={extents[tag]}; {limits.name} allows at most "
                    f"{limits.max_work_item_sizes[axis]} work-items in dimension {axis} ({limits.source})"
                )
    for name, size in local_memory_bytes(read_opencl_program(built).source).items():
        if size > limits.max_shared_memory_bytes:
            raise DeviceLimitError(
                f"kernel {name} needs {size} bytes of local memory; {limits.name} allows at most "
                f"{limits.max_shared_memory_bytes} ({limits.source})"
            )


def is_gpu_target(target: Any) -> bool:
    return str(target.kind.name) in _GPU_TARGET_KINDS
