"""Run the OpenCL kernels edgetune builds on this host's OpenCL device (pyopencl; Debian's pocl on the CPU).

The host code TVM generated runs unchanged; its kernel launches reach a Python
function that launches the kernel with the grid and work-group sizes that host
code computed, after a check against the device's limits. The kernels and their
metadata come from :func:`~edgetune.builder.opencl_check.read_opencl_program`.
Times taken here are never GPU performance.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..errors import DeviceLimitError, OpenCLUnavailableError
from .opencl_check import DeviceLimits, KernelInfo, _OPENCL_DEVICE_TYPE, _SET_DEVICE, _kernel_parameters, intermediate_buffers, read_opencl_program

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
