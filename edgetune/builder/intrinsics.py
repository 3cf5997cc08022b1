"""Register only the tensor intrinsics a target family needs.

``import tvm.s_tir.tensor_intrin`` registers every family TVM knows (CUDA,
ROCm, ARM, Hexagon, x86, RISC-V) and takes 20-45 s on a small host, almost
all of it in ``cuda``. MetaSchedule's ``TuneContext`` and stock ``LocalBuilder``
workers import the whole package. A CPU target only ever looks up the
intrinsics of its own family, so edgetune installs the package object itself
(without running its ``__init__``) and imports just the submodules needed.
Once the real package has been imported nothing here changes anything.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

_PACKAGE = "tvm.s_tir.tensor_intrin"


def families_for_target(target: Any) -> tuple[str, ...]:
    """Tensor-intrinsic submodules a target (``tvm.target.Target``) can refer to."""
    kind = target.kind.name
    if kind in ("cuda", "nvptx"):
        return ("cuda",)
    if kind == "rocm":
        return ("rocm",)
    if kind == "hexagon":
        return ("hexagon",)
    if kind == "metal":
        return ("metal",)
    if kind in ("opencl", "vulkan", "webgpu"):
        return ()
    if kind == "llvm":
        triple = str(target.attrs.get("mtriple", "") or "")
        if not triple:
            import platform

            triple = platform.machine()
        if triple.startswith(("aarch64", "arm64", "arm", "thumb")):
            return ("arm_cpu",)
        if triple.startswith("riscv"):
            return ("riscv_cpu",)
        return ("x86",)
    return ()


def _install_bare_package() -> None:
    """Put ``tvm.s_tir.tensor_intrin`` in ``sys.modules`` without its ``__init__``."""
    if _PACKAGE in sys.modules:
        return
    import tvm.s_tir  # noqa: F401  (parent package must exist)

    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or spec.submodule_search_locations is None:  # pragma: no cover
        return
    package = types.ModuleType(_PACKAGE)
    package.__path__ = list(spec.submodule_search_locations)
    package.__package__ = _PACKAGE
    package.__file__ = spec.origin
    package.__spec__ = spec
    package.__edgetune_partial__ = True  # type: ignore[attr-defined]
    sys.modules[_PACKAGE] = package
    setattr(sys.modules["tvm.s_tir"], "tensor_intrin", package)


def load_tensor_intrinsics(target: Any) -> tuple[str, ...]:
    """Register the intrinsics ``target`` may use; return the families loaded."""
    _install_bare_package()
    families = families_for_target(target)
    for family in families:
        importlib.import_module(f"{_PACKAGE}.{family}")
    if "x86" in families:
        register_vnni_intrinsics()  # int8 tasks' traces name them (edgetune.search.int8_space)
    return families


#: edgetune's x86 VNNI intrinsics: (name, output lanes, LLVM intrinsic). TVM 0.27's own ``dot_16x4_vnni`` passes
#: ``<16 x i32>`` operands to ``llvm.x86.avx512.vpdpbusd.512``, whose signature takes ``<64 x i8>`` since LLVM 22
#: (the wheel's): every candidate it tensorizes fails to build ("Call parameter type does not match function
#: signature"). These have the same description (u8 x i8 -> i32, 4 products per lane) and pass bytes.
VNNI_INTRINSICS: tuple[tuple[str, int, str], ...] = (
    ("edgetune_dot_16x4_vnni", 16, "llvm.x86.avx512.vpdpbusd.512"),
    ("edgetune_dot_8x4_avxvnni", 8, "llvm.x86.avx512.vpdpbusd.256"),
)


def _vnni_intrinsic(lanes: int, llvm_name: str) -> tuple[Any, Any]:
    """The (description, implementation) PrimFuncs of ``lanes`` int32 sums of 4 u8 x i8 products each."""
    from tvm.script import tirx as T
    from tvm.target.codegen import llvm_version_major

    bytes_ = lanes * 4
    # LLVM 22 typed the byte operands as bytes; before, as the int32 lanes they are packed into
    operand = f"int8x{bytes_}" if llvm_version_major() >= 22 else f"int32x{lanes}"

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (4,), "uint8", offset_factor=1)
        B = T.match_buffer(b, (lanes, 4), "int8", offset_factor=1)
        C = T.match_buffer(c, (lanes,), "int32", offset_factor=1)
        with T.sblock("root"):
            T.reads(C[0:lanes], A[0:4], B[0:lanes, 0:4])
            T.writes(C[0:lanes])
            for i in T.serial(0, lanes):
                for k in T.serial(0, 4):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        C[vi] = C[vi] + T.cast(A[vk], "int32") * T.cast(B[vi, vk], "int32")

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (4,), "uint8", offset_factor=1)
        B = T.match_buffer(b, (lanes, 4), "int8", offset_factor=1)
        C = T.match_buffer(c, (lanes,), "int32", offset_factor=1)
        with T.sblock("root"):
            T.reads(C[0:lanes], A[0:4], B[0:lanes, 0:4])
            T.writes(C[0:lanes])
            a_i32 = T.reinterpret(A.vload([0], "uint8x4"), dtype="int32")
            C[T.ramp(T.int32(0), 1, lanes)] = T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id(llvm_name),
                C.vload([0], dtype=f"int32x{lanes}"),
                T.reinterpret(T.broadcast(a_i32, lanes), dtype=operand),
                T.reinterpret(B.vload([0, 0], dtype=f"int8x{bytes_}"), dtype=operand),
                dtype=f"int32x{lanes}",
            )

    return desc, impl


def register_vnni_intrinsics() -> tuple[str, ...]:
    """Register :data:`VNNI_INTRINSICS` (once per process); return their names."""
    from tvm.s_tir import TensorIntrin

    for name, lanes, llvm_name in VNNI_INTRINSICS:
        if TensorIntrin.get(name, allow_missing=True) is None:
            TensorIntrin.register(name, *_vnni_intrinsic(lanes, llvm_name))
    return tuple(name for name, _, _ in VNNI_INTRINSICS)
