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
    return families
