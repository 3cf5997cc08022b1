"""The CPU family of a target (a schedule library is built for one; conv layouts are chosen per family), and whether a target belongs to it.

A library's traces are tuned for a vector ISA, not for one CPU name: an AVX2
library serves every x86-64 CPU with AVX2 and FMA and no AVX-512 (Haswell to
Zen 3); an AVX-512 CPU is its own family (wider vectors, other tiles). The
family is read from the target's CPU features as LLVM reports them, not from
its ``mcpu`` name.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

#: (family name, architecture, required LLVM features); the first a target satisfies is its family
FAMILIES: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("x86-64-avx512", "x86_64", frozenset({"avx512f", "avx512bw", "avx512vl", "fma"})),
    ("x86-64-avx2", "x86_64", frozenset({"avx2", "fma"})),
    ("x86-64", "x86_64", frozenset()),
    ("aarch64-dotprod", "aarch64", frozenset({"neon", "dotprod"})),
    ("aarch64-neon", "aarch64", frozenset({"neon"})),
    ("aarch64", "aarch64", frozenset()),
)


@dataclass(frozen=True)
class CpuFamily:
    """A target's CPU as far as schedules care: architecture, vector family, and the features behind it."""

    name: str  # e.g. "x86-64-avx2"
    arch: str  # "x86_64", "aarch64", or the target kind for non-CPU targets
    mcpu: str  # the target's mcpu ("" when it names none): informative only
    features: tuple[str, ...]  # the family's required features the target has

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arch": self.arch, "mcpu": self.mcpu, "features": list(self.features)}


def family_of(target: Any) -> CpuFamily:
    """The family of a TVM target (an llvm target's triple and CPU features; other kinds are their own family)."""
    kind = str(target.kind.name)
    if kind != "llvm":
        device = str(target.attrs.get("device", "") or target.attrs.get("arch", "") or "")
        return CpuFamily(f"{kind}-{device}" if device else kind, kind, "", ())
    triple = str(target.attrs.get("mtriple", "") or "")
    mcpu = str(target.attrs.get("mcpu", "") or "")
    arch = _arch_of(triple)
    features = _llvm_features(target)
    for name, family_arch, required in FAMILIES:
        if family_arch == arch and required <= features:
            return CpuFamily(name, arch, mcpu, tuple(sorted(required)))
    return CpuFamily(arch, arch, mcpu, ())


def _arch_of(triple: str) -> str:
    if triple:
        head = triple.split("-", 1)[0]
    else:
        head = platform.machine()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(head, head)


def _llvm_features(target: Any) -> frozenset[str]:
    from tvm.target import codegen

    try:
        return frozenset(str(f) for f in codegen.llvm_get_cpu_features(target))
    except Exception:  # noqa: BLE001 - an LLVM without this target's backend: no features known
        return frozenset()


#: x86 instruction sets as LLVM features, each with the /proc/cpuinfo flag that says a machine offers it;
#: in the order they are turned off (a feature off turns off those that need it: -avx512f all of AVX-512)
X86_INSTRUCTION_FLAGS: dict[str, str] = {
    "avx": "avx",
    "avx2": "avx2",
    "fma": "fma",
    "f16c": "f16c",
    "avx512f": "avx512f",
    "avx512bw": "avx512bw",
    "avx512dq": "avx512dq",
    "avx512vl": "avx512vl",
    "avx512cd": "avx512cd",
    "avx512vnni": "avx512_vnni",
    "avx512bf16": "avx512_bf16",
    "avx512fp16": "avx512_fp16",
    "avx512ifma": "avx512ifma",
    "avx512vbmi": "avx512vbmi",
    "avx512vbmi2": "avx512_vbmi2",
    "avx512bitalg": "avx512_bitalg",
    "avx512vpopcntdq": "avx512_vpopcntdq",
    "avxvnni": "avx_vnni",
    "amx-tile": "amx_tile",
    "amx-int8": "amx_int8",
    "amx-bf16": "amx_bf16",
}


def unavailable_instructions(features: Iterable[str], flags: Iterable[str] | None = None) -> list[str]:
    """The x86 instruction sets among LLVM ``features`` that this machine does not offer, in turning-off order.

    ``flags``: the CPU's flags (default: this machine's ``/proc/cpuinfo``). Empty when they are unknown or the
    machine is not x86: nothing is assumed missing that cannot be read.
    """
    if flags is None:
        if platform.machine() not in ("x86_64", "AMD64", "i686"):
            return []
        flags = cpuinfo_flags()
    offered = frozenset(flags)
    if not offered:
        return []
    wanted = frozenset(features)
    return [feature for feature, flag in X86_INSTRUCTION_FLAGS.items() if feature in wanted and flag not in offered]


def cpuinfo_flags() -> frozenset[str]:
    """This machine's CPU flags as the kernel lists them in ``/proc/cpuinfo`` (empty when it cannot be read)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return frozenset(line.split(":", 1)[1].split())
    except (OSError, IndexError):
        pass
    return frozenset()
