"""This machine's CPU, as LLVM and the kernel see it: what ``mcpu = "native"`` resolves to.

A profile for the host that names no ``mcpu`` compiles for a generic x86-64
(or armv8) CPU: no AVX2/AVX-512 or dot-product instructions, whatever the
machine has. ``mcpu = "native"`` and ``num-cores = "auto"`` in a profile's
``[target]`` resolve, when the profile is loaded, to LLVM's name for this CPU
and the cores this process may run on; an unset ``device.peak_gflops`` is then
estimated from the vector width, the FMA units and the clock.

LLVM names the CPU model from its family and model numbers, and a model
implies its instructions. A virtual machine may hide some of them: a Zen 4
(``znver4``) guest whose hypervisor masks AVX-512. Code for ``znver4`` then
dies on its first AVX-512 instruction (SIGILL): every candidate fails. So the
model's instructions are checked against the ones this machine
offers (``/proc/cpuinfo``'s flags, what CPUID says here): those it lacks are
turned off with ``mattr`` (``-avx512f``), keeping LLVM's name and tuning for
the model (the instructions checked:
:data:`edgetune.common.cpu_family.X86_INSTRUCTION_FLAGS`). A profile for the
embedded board that asks for instructions this machine lacks is refused
before tuning (:func:`edgetune.board.base.check_instructions_offered`).
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..common import cpu_family
from ..common.cpu_family import unavailable_instructions

#: the spelling in a profile that means "this machine's CPU" / "the cores this process may use"
NATIVE_CPU = "native"
AUTO_CORES = "auto"


@dataclass(frozen=True)
class HostCPU:
    """The CPU this process runs on."""

    name: str  # LLVM's CPU name, e.g. "znver4", "cortex-a72"
    arch: str  # platform.machine()
    cores: int  # usable by this process (its affinity mask)
    features: frozenset[str]  # LLVM feature names that are enabled
    ghz: float | None  # nominal or maximum clock, when the kernel says
    mattr: tuple[str, ...] = ()  # the model's instructions this machine does not offer, turned off ("-avx512f")

    @property
    def fp32_flops_per_cycle(self) -> int:
        """FP32 FLOPs one core can retire per cycle with FMA: lanes x 2 (multiply-add) x FMA units."""
        if "avx512f" in self.features and self.name != "znver4":
            return 64  # 16 lanes x 2 x 2 units
        if "avx512f" in self.features:
            return 32  # Zen 4 runs 512-bit FMAs on its two 256-bit units
        if "avx2" in self.features and "fma" in self.features:
            return 32  # 8 lanes x 2 x 2 units
        if "avx" in self.features:
            return 16
        if self.arch in ("aarch64", "arm64") or "neon" in self.features:
            return 16  # 4 lanes x 2 x 2 units (Cortex-A72/A76 class)
        return 8

    @property
    def peak_gflops(self) -> float | None:
        """A roofline ceiling for FP32 compute; None when the clock is unknown."""
        if self.ghz is None:
            return None
        return round(self.cores * self.ghz * self.fp32_flops_per_cycle, 1)

    def describe(self) -> str:
        clock = f"{self.ghz:.2f} GHz" if self.ghz else "clock unknown"
        peak = f"~{self.peak_gflops:g} GFLOPS FP32 peak" if self.peak_gflops else "peak unknown"
        without = f" without {', '.join(m[1:] for m in self.mattr)} (not offered here)" if self.mattr else ""
        return (f"{self.name}{without} ({self.arch}), {self.cores} usable core{'s' if self.cores != 1 else ''}, "
                f"{clock}, {peak}")


@lru_cache(maxsize=1)
def host_cpu() -> HostCPU:
    """Detect this machine's CPU once per process (LLVM through TVM, the kernel for cores and clock)."""
    import tvm
    from tvm.target import codegen

    name = str(codegen.llvm_get_system_cpu())

    def features_of(mattr: list[str]) -> frozenset[str]:
        target = {"kind": "llvm", "mcpu": name, **({"mattr": mattr} if mattr else {})}
        return frozenset(str(f) for f in codegen.llvm_get_cpu_features(tvm.target.Target(target)))

    mattr: list[str] = []
    try:
        features = features_of(mattr)
        for feature in unavailable_instructions(features):
            if feature in features:  # not yet turned off with one before it
                mattr.append(f"-{feature}")
                features = features_of(mattr)
    except Exception:  # an LLVM without feature introspection: estimate from /proc/cpuinfo flags
        features, mattr = cpu_family.cpuinfo_flags(), []
    return HostCPU(name=name, arch=platform.machine(), cores=usable_cores(), features=features, ghz=_clock_ghz(),
                   mattr=tuple(mattr))


def usable_cores() -> int:
    """Cores this process may run on: its affinity mask (a container's CPU set), not the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _clock_ghz() -> float | None:
    """Maximum clock from cpufreq, else the current one from /proc/cpuinfo."""
    try:
        khz = int(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text().strip())
        return khz / 1e6
    except (OSError, ValueError):
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("cpu mhz"):
                return float(line.split(":", 1)[1]) / 1e3
    except (OSError, ValueError, IndexError):
        pass
    return None


def cpu_disagreement(profile_mcpu: str | None, board_cpu: str | None) -> str | None:
    """A one-line warning when a board's detected CPU is not the one its profile compiles for."""
    if not board_cpu:
        return None
    if not profile_mcpu:
        return f"the board's CPU is {board_cpu} but the profile names no mcpu: code is compiled for a generic CPU"
    if profile_mcpu.lower() not in board_cpu.lower():
        return f"the board's CPU is {board_cpu} but the profile compiles for mcpu '{profile_mcpu}'"
    return None
