"""Run the OpenCL kernels edgetune builds on this host's OpenCL device, to prove they compute the right thing.

The apache-tvm wheels have no OpenCL runtime, so TVM cannot launch the kernels
it generates for a Mali or Adreno profile. :class:`HostOpenCL` does the part
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

import contextlib
import ctypes
import re
import struct
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..errors import DeviceLimitError, OpenCLUnavailableError

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


# ---------------------------------------------------------------- running on the host's OpenCL device


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


@_DELETER
def _keep_buffer(_handle: int) -> None:
    """The OpenCL buffer belongs to :class:`HostOpenCL`, which releases it."""


_NUMPY_CODES = {"i": 0, "u": 1, "f": 2}


def _device_tensor(handle: int, array: np.ndarray, keep: list[Any]) -> Any:
    """A TVM tensor on OpenCL device 0 whose data pointer is the cl_mem ``handle`` (no copy, no allocation)."""
    import tvm_ffi

    shape = (ctypes.c_int64 * array.ndim)(*array.shape)
    managed = _DLManagedTensor()
    managed.dl_tensor.data = handle
    managed.dl_tensor.device = _DLDevice(_OPENCL_DEVICE_TYPE, 0)
    managed.dl_tensor.ndim = array.ndim
    managed.dl_tensor.dtype = _DLDataType(_NUMPY_CODES[array.dtype.kind], array.dtype.itemsize * 8, 1)
    managed.dl_tensor.shape = shape
    managed.dl_tensor.byte_offset = 0
    managed.deleter = _keep_buffer
    keep.extend([shape, managed])
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype, new_capsule.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    capsule = new_capsule(ctypes.addressof(managed), b"dltensor", None)

    class _Exporter:
        def __dlpack__(self, stream: Any = None, **_kwargs: Any) -> Any:
            return capsule

        def __dlpack_device__(self) -> tuple[int, int]:
            return (_OPENCL_DEVICE_TYPE, 0)

    return tvm_ffi.from_dlpack(_Exporter())


@dataclass(frozen=True)
class KernelLaunch:
    """One launch as TVM's host code asked for it."""

    name: str
    global_size: tuple[int, ...]
    local_size: tuple[int, ...]


def _launch_sizes(info: KernelInfo, values: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    grid, block = [1, 1, 1], [1, 1, 1]
    for tag, value in zip(info.launch_param_tags, values):
        if tag.startswith("blockIdx."):
            grid["xyz".index(tag[-1])] = int(value)
        elif tag.startswith("threadIdx."):
            block["xyz".index(tag[-1])] = int(value)
        else:
            raise ValueError(f"kernel {info.name}: launch parameter {tag!r} is not supported by the OpenCL check")
    dims = 3 if grid[2] > 1 or block[2] > 1 else 2 if grid[1] > 1 or block[1] > 1 else 1
    return tuple(g * b for g, b in zip(grid, block))[:dims], tuple(block)[:dims]


_LAUNCH_LOCK = threading.Lock()  # kernel names and __tvm_set_device are process-wide registry entries


@dataclass
class HostOpenCL:
    """An OpenCL device of this host (pocl) that runs modules built for an OpenCL target.

    ``limits`` (e.g. the profile's, :meth:`DeviceLimits.from_target`) are
    checked as well as the device's own. Connects lazily; use as a context
    manager or call :meth:`close`.
    """

    limits: DeviceLimits | None = None
    platform: str = ""
    launches: list[KernelLaunch] = field(default_factory=list)
    _context: Any = None
    _queue: Any = None

    def _open(self) -> None:
        if self._context is not None:
            return
        try:
            import pyopencl as cl
        except ImportError as error:
            raise OpenCLUnavailableError("the OpenCL check needs pyopencl: pip install pyopencl") from error
        try:
            platforms = [p for p in cl.get_platforms() if self.platform.lower() in p.name.lower()]
        except cl.Error as error:
            raise OpenCLUnavailableError(f"no OpenCL platform ({error}); install an ICD, e.g. apt-get install pocl-opencl-icd") from error
        devices = [d for p in platforms for d in p.get_devices()]
        if not devices:
            raise OpenCLUnavailableError(
                f"no OpenCL device{' on platform ' + repr(self.platform) if self.platform else ''}; "
                "install an ICD, e.g. apt-get install pocl-opencl-icd"
            )
        self._context = cl.Context([devices[0]])
        self._queue = cl.CommandQueue(self._context)

    @property
    def device_limits(self) -> DeviceLimits:
        self._open()
        return DeviceLimits.from_opencl_device(self._context.devices[0])

    @property
    def effective_limits(self) -> DeviceLimits:
        device = self.device_limits
        return self.limits.tighter(device) if self.limits is not None else device

    def close(self) -> None:
        self._context = self._queue = None

    def __enter__(self) -> "HostOpenCL":
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.close()

    def run(
        self, module: Any, arrays: Sequence[np.ndarray], scheduled: Any = None, entry: str = "main"
    ) -> list[np.ndarray]:
        """Call ``entry`` of a module built for OpenCL on copies of ``arrays``; return them after the call.

        ``scheduled`` is the module before it was built: kernels that pass data
        between each other through a global buffer need it, for the buffer's size.
        """
        import pyopencl as cl
        import tvm_ffi

        self._open()
        program_info = read_opencl_program(module)
        try:
            program = cl.Program(self._context, program_info.source).build()
        except cl.Error as error:
            raise DeviceLimitError(f"the OpenCL device cannot compile the kernels: {str(error).splitlines()[0]}") from error
        host = getattr(module, "mod", module)
        flags = cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR
        arrays = [np.require(np.asarray(a), requirements="C") for a in arrays]  # keeps 0-d arrays 0-d
        buffers = [cl.Buffer(self._context, flags, hostbuf=a if a.nbytes else np.zeros(1, a.dtype)) for a in arrays]
        by_handle = {b.int_ptr: b for b in buffers}
        params = _kernel_parameters(program_info.source)
        workspace_bytes = intermediate_buffers(scheduled) if scheduled is not None else {}

        def buffer_for(pointer: int, kernel_name: str, position: int) -> Any:
            """Our buffers by cl_mem handle; TVM's workspaces (host memory, see _host_workspaces) by parameter name."""
            if pointer in by_handle:
                return by_handle[pointer]
            name = params.get(kernel_name, [])[position] if position < len(params.get(kernel_name, [])) else "?"
            size = workspace_bytes.get(name.removesuffix("_ptr"))
            if size is None:
                raise ValueError(
                    f"kernel {kernel_name} argument {position} ({name}) is a buffer TVM allocated between kernels; "
                    "pass the scheduled module (scheduled=...) so its size is known"
                )
            memory = (ctypes.c_char * size).from_address(pointer)
            by_handle[pointer] = cl.Buffer(self._context, cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR, hostbuf=memory)
            return by_handle[pointer]
        keep: list[Any] = []
        tensors = [_device_tensor(b.int_ptr, a, keep) for b, a in zip(buffers, arrays)]
        limits = self.effective_limits
        failures: list[Exception] = []

        def launcher(info: KernelInfo) -> Any:
            kernel = getattr(program, info.name)

            def launch(*args: Any) -> None:
                try:
                    _launch(*args)
                except Exception as error:  # crosses TVM's C frames as a plain error: keep the original
                    failures.append(error)
                    raise

            def _launch(*args: Any) -> None:
                count = len(info.arg_types)
                global_size, local_size = _launch_sizes(info, args[count:])
                self._check_launch(kernel, info.name, local_size, limits)
                cl_args = [
                    buffer_for(int(getattr(value, "value", value) or 0), info.name, position)
                    if kind.startswith("handle") else np.dtype(kind).type(value)
                    for position, (kind, value) in enumerate(zip(info.arg_types, args[:count]))
                ]
                kernel(self._queue, global_size, local_size, *cl_args)
                self.launches.append(KernelLaunch(info.name, global_size, local_size))

            return launch

        imports = list(host.imports)
        with _LAUNCH_LOCK, _registered({name: launcher(info) for name, info in program_info.kernels.items()}, tvm_ffi):
            host.clear_imports()  # kernel lookups fall through to the registry entries above
            try:
                host[entry](*tensors)
            except Exception:
                if failures:
                    raise failures[0] from None
                raise
            finally:
                for imported in imports:  # the module stays whole (TVM caches the lookups made above)
                    host.import_module(imported)
        self._queue.finish()
        tensors.clear()  # release TVM's views (their deleter lives in ``keep``) before ``keep`` goes
        outputs = [np.empty_like(a) for a in arrays]
        for buffer, out in zip(buffers, outputs):
            cl.enqueue_copy(self._queue, out, buffer)
        return outputs

    def _check_launch(self, kernel: Any, name: str, local_size: tuple[int, ...], limits: DeviceLimits) -> None:
        import pyopencl as cl

        threads = int(np.prod(local_size))
        device = self._context.devices[0]
        kernel_max = int(kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, device))
        allowed = min(limits.max_threads_per_block, kernel_max)
        if threads > allowed:
            raise DeviceLimitError(
                f"kernel {name} is launched with {threads} work-items per work-group {local_size}; "
                f"{limits.name} allows at most {allowed} ({limits.source}; CL_KERNEL_WORK_GROUP_SIZE {kernel_max})"
            )
        local_bytes = int(kernel.get_work_group_info(cl.kernel_work_group_info.LOCAL_MEM_SIZE, device))
        if local_bytes > limits.max_shared_memory_bytes:
            raise DeviceLimitError(
                f"kernel {name} uses {local_bytes} bytes of local memory; {limits.name} allows at most "
                f"{limits.max_shared_memory_bytes} ({limits.source})"
            )


def _host_workspaces(tvm_ffi: Any) -> None:
    """Let TVM's host code allocate OpenCL workspaces in host memory, for the life of this process.

    Buffers passed between a function's kernels come from
    ``TVMBackendAllocWorkspace``, which asks the runtime's OpenCL device API;
    the wheels have none. This registers the CPU device API under the OpenCL
    name (TVM caches it per process), so such buffers are host memory, which
    pocl's CPU device uses in place (``CL_MEM_USE_HOST_PTR``). A process that
    loaded a real OpenCL runtime keeps it.
    """
    if tvm_ffi.get_global_func("device_api.opencl", allow_missing=True) is None:
        cpu_api = tvm_ffi.get_global_func("device_api.cpu")
        tvm_ffi.register_global_func("device_api.opencl", lambda *_args: cpu_api())


#: kernel name -> the launcher of the run in progress; TVM caches a module's kernel lookups, so the
#: registry holds one stable dispatcher per name and every run swaps its launchers in here
_ACTIVE_LAUNCHERS: dict[str, Callable[..., None]] = {}


def _dispatcher(name: str) -> Callable[..., None]:
    def dispatch(*args: Any) -> None:
        _ACTIVE_LAUNCHERS[name](*args)

    return dispatch


@contextlib.contextmanager
def _registered(launchers: dict[str, Callable[..., None]], tvm_ffi: Any) -> Iterator[None]:
    """Route kernel launches (and the device switch, a no-op) to this run; restore the registry after."""
    entries: dict[str, Callable[..., None]] = {name: _dispatcher(name) for name in launchers}
    entries[_SET_DEVICE] = lambda *_args: None  # the OpenCL device is the one HostOpenCL opened
    _host_workspaces(tvm_ffi)
    previous = {name: tvm_ffi.get_global_func(name, allow_missing=True) for name in entries}
    for name, function in entries.items():
        tvm_ffi.register_global_func(name, function, override=True)
    _ACTIVE_LAUNCHERS.update(launchers)
    try:
        yield
    finally:
        for name in launchers:
            _ACTIVE_LAUNCHERS.pop(name, None)
        for name, function in previous.items():
            if function is not None:
                tvm_ffi.register_global_func(name, function, override=True)
            else:
                tvm_ffi.remove_global_func(name)
