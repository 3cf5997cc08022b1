"""Checks of a profile against the installed TVM and toolchain.

Kept apart from the schema because ``import tvm`` costs seconds: loading and
listing profiles must stay fast, and only these checks pay for TVM.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from edgetune.errors import TargetError

if TYPE_CHECKING:
    import tvm

    from edgetune.profile.schema import DeviceProfile

# "aarch64-linux-gnu-g++" / "arm-linux-gnueabihf-gcc-12": Debian ships these as
# "g++-aarch64-linux-gnu" / "gcc-12-arm-linux-gnueabihf".
_GNU_CROSS_RE = re.compile(r"(?P<triple>.+-linux-gnu\w*)-(?P<tool>g\+\+|c\+\+|gcc)(?:-(?P<version>\d+))?")


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def build_target(profile: DeviceProfile) -> tvm.target.Target:
    """Construct the profile's ``Target``, turning any TVM failure into a one-line ``TargetError``."""
    try:
        import tvm
    except ImportError as exc:
        raise TargetError(f"profile '{profile.name}': cannot import tvm: {_first_line(exc)}") from exc
    described = json.dumps(profile.target)
    if profile.host_target is not None:
        described += f" with host {json.dumps(profile.host_target)}"
    try:
        return tvm.target.Target(profile.target, host=profile.host_target)
    except Exception as exc:  # TVM raises ValueError, TypeError or its own FFI errors
        raise TargetError(f"profile '{profile.name}': TVM rejects target {described}: {_first_line(exc)}") from exc


def check_target(profile: DeviceProfile) -> tvm.target.Target:
    """Build the target and reject LLVM options that TVM would only warn about and ignore."""
    target = build_target(profile)
    _check_llvm_options(profile, target, "target")
    if target.host is not None:
        _check_llvm_options(profile, target.host, "host_target")
    return target


def _check_llvm_options(profile: DeviceProfile, target: tvm.target.Target, role: str) -> None:
    """An unknown ``mcpu`` or ``mattr`` silently yields generic code: make it an error instead."""
    if target.kind.name != "llvm":
        return
    from tvm.target import codegen

    llvm = f"LLVM {codegen.llvm_version_major()}"
    triple = str(target.attrs["mtriple"]) if "mtriple" in target.attrs else codegen.llvm_get_system_triple()
    float_abi = str(target.attrs["mfloat-abi"]) if "mfloat-abi" in target.attrs else ""
    if _is_arm32_hard_float(triple) and float_abi != "hard":
        # TVM does not derive the float ABI from the triple: its objects pass floats in
        # integer registers, and a gnueabihf linker refuses to mix them with the C library's.
        raise TargetError(
            f"profile '{profile.name}': {role} mtriple '{triple}' is a hard-float ABI, so {role}.mfloat-abi "
            f"must be \"hard\", got {float_abi or 'nothing'} instead (TVM would emit soft-float calls)"
        )
    if "mcpu" in target.attrs:
        mcpu = str(target.attrs["mcpu"])
        if not codegen.llvm_is_valid_cpu(mcpu, triple):
            raise TargetError(
                f"profile '{profile.name}': {llvm} does not know {role}.mcpu '{mcpu}' for mtriple "
                f"'{triple}' (TVM would fall back to a generic CPU)"
            )
    if "mattr" in target.attrs:
        enabled = set(codegen.llvm_get_cpu_features(target))
        unknown = [str(a) for a in target.attrs["mattr"] if str(a).startswith("+") and str(a)[1:] not in enabled]
        if unknown:
            raise TargetError(
                f"profile '{profile.name}': {llvm} does not recognise {role}.mattr "
                f"{', '.join(unknown)} for mtriple '{triple}' (TVM would ignore them)"
            )


def debian_package_for(compiler: str) -> str | None:
    """The Debian package that provides a GNU cross compiler, if the name follows the GNU scheme."""
    match = _GNU_CROSS_RE.fullmatch(Path(compiler).name)
    if match is None:
        return None
    tool = "gcc" if match["tool"] == "gcc" else "g++"
    version = f"-{match['version']}" if match["version"] else ""
    return f"{tool}{version}-{match['triple']}"


def check_buildable(profile: DeviceProfile) -> None:
    """Raise ``TargetError`` unless this TVM and toolchain can build candidates for the profile."""
    target = check_target(profile)  # first: it turns a failing `import tvm` into a TargetError
    import tvm

    kinds = [target.kind.name] + ([target.host.kind.name] if target.host is not None else [])
    for kind in kinds:
        if tvm.get_global_func(f"target.build.{kind}", allow_missing=True) is None:
            raise TargetError(
                f"profile '{profile.name}': the installed TVM {tvm.__version__} has no code generator "
                f"for target kind '{kind}' (target.build.{kind} is missing); use a TVM built with it"
            )
    compiler = profile.build.cross_compiler
    if compiler and shutil.which(compiler) is None:
        package = debian_package_for(compiler)
        hint = f"install it with: apt-get install {package}" if package else "install it or fix build.cross_compiler"
        raise TargetError(
            f"profile '{profile.name}': cross compiler '{compiler}' (build.cross_compiler) is not on PATH; {hint}"
        )


def _is_arm32_hard_float(triple: str) -> bool:
    """A 32-bit ARM triple whose environment is hard-float (``armv7l-linux-gnueabihf``)."""
    arch, _, rest = triple.partition("-")
    return arch.startswith(("arm", "thumb")) and not arch.startswith("arm64") and rest.endswith("hf")
