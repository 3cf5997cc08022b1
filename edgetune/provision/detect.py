"""Find out what a board is (one SSH round trip) and whether it fits its profile.

Provisioning the wrong board silently is the expensive failure: a profile for
an aarch64 Cortex-A72 tuned on an armv7l board gives schedules that never run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import ProvisionError
from .ssh import BoardConnection

#: ARM "CPU part" ids (from /proc/cpuinfo) of common cores, to name big.LITTLE clusters
ARM_PARTS = {
    "0xc07": "Cortex-A7", "0xc09": "Cortex-A9", "0xc0f": "Cortex-A15", "0xd03": "Cortex-A53",
    "0xd04": "Cortex-A35", "0xd05": "Cortex-A55", "0xd07": "Cortex-A57", "0xd08": "Cortex-A72",
    "0xd09": "Cortex-A73", "0xd0a": "Cortex-A75", "0xd0b": "Cortex-A76", "0xd0d": "Cortex-A77",
    "0xd41": "Cortex-A78", "0xd42": "Cortex-A78AE", "0xd44": "Cortex-X1", "0xd46": "Cortex-A510",
    "0xd47": "Cortex-A710", "0xd48": "Cortex-X2", "0xd4b": "Cortex-A78C", "0xd80": "Cortex-A520",
    "0xd81": "Cortex-A720",
}
_ARCH_ALIASES = {"arm64": "aarch64", "armv8": "aarch64", "amd64": "x86_64", "x64": "x86_64",
                 "armhf": "armv7l", "armv7": "armv7l", "armv8l": "armv7l", "arm": "armv7l"}

_PROBE = r"""
echo "arch=$(uname -m)"
echo "kernel=$(uname -r)"
if [ -r /etc/os-release ]; then . /etc/os-release; echo "os=$PRETTY_NAME"; fi
echo "home=$HOME"
echo "path=$PATH"
py=$(command -v {python} 2>/dev/null)
echo "python=$py"
if [ -n "$py" ]; then echo "python_version=$("$py" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null)"; fi
echo "cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc)"
echo "online=$(cat /sys/devices/system/cpu/online 2>/dev/null)"
while read -r k v _rest; do [ "$k" = "MemTotal:" ] && echo "mem_kb=$v"; done < /proc/meminfo
grep -E '^(processor|CPU part|model name)[[:space:]]*:' /proc/cpuinfo 2>/dev/null | sed 's/^/cpuinfo=/'
ocl=""
for f in /etc/OpenCL/vendors/*.icd /usr/lib/*/libOpenCL.so* /usr/lib/libOpenCL.so* /usr/lib/*/libmali.so* /dev/mali0; do
  [ -e "$f" ] && ocl="$ocl $f"
done
echo "opencl=$ocl"
cuda=""
for f in /usr/local/cuda /dev/nvidia0 /dev/nvhost-ctrl /dev/nvhost-ctrl-gpu; do [ -e "$f" ] && cuda="$cuda $f"; done
echo "cuda=$cuda"
[ -d /run/systemd/system ] && echo "systemd=yes"
command -v taskset >/dev/null 2>&1 && echo "taskset=yes"
echo "governor=$(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null)"
"""


def normalize_arch(arch: str) -> str:
    arch = arch.strip().lower()
    return _ARCH_ALIASES.get(arch, arch)


@dataclass(frozen=True)
class BoardFacts:
    """What the board reported about itself."""

    arch: str
    os: str = ""
    kernel: str = ""
    home: str = ""
    path: str = ""
    python: str = ""
    python_version: str = ""
    cores: int = 0
    online: str = ""
    mem_mb: int = 0
    #: (core name or part id, cpu ids) per cluster, biggest part id first
    clusters: tuple[tuple[str, tuple[int, ...]], ...] = ()
    opencl: tuple[str, ...] = ()
    cuda: tuple[str, ...] = ()
    systemd: bool = False
    taskset: bool = False
    governor: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def python_tag(self) -> str:
        """``cp311`` for Python 3.11.x (empty without python)."""
        parts = self.python_version.split(".")
        return f"cp{parts[0]}{parts[1]}" if len(parts) >= 2 else ""

    def describe(self) -> str:
        clusters = " + ".join(f"{len(cpus)}x {name}" for name, cpus in self.clusters) or f"{self.cores} cores"
        accel = [name for name, present in (("OpenCL", self.opencl), ("CUDA", self.cuda)) if present]
        return (
            f"{self.arch}, {self.os or 'unknown OS'}, Python {self.python_version or 'none'}, {clusters}, "
            f"{self.mem_mb} MB" + (f", {'+'.join(accel)}" if accel else "")
        )


def parse_facts(text: str) -> BoardFacts:
    values: dict[str, str] = {}
    cpuinfo: list[str] = []
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key == "cpuinfo":
            cpuinfo.append(value)
        else:
            values[key] = value.strip()
    return BoardFacts(
        arch=values.get("arch", ""),
        os=values.get("os", ""),
        kernel=values.get("kernel", ""),
        home=values.get("home", ""),
        path=values.get("path", ""),
        python=values.get("python", ""),
        python_version=values.get("python_version", ""),
        cores=int(values["cores"]) if values.get("cores", "").isdigit() else 0,
        online=values.get("online", ""),
        mem_mb=int(values["mem_kb"]) // 1024 if values.get("mem_kb", "").isdigit() else 0,
        clusters=_clusters(cpuinfo),
        opencl=tuple(values.get("opencl", "").split()),
        cuda=tuple(values.get("cuda", "").split()),
        systemd=values.get("systemd") == "yes",
        taskset=values.get("taskset") == "yes",
        governor=values.get("governor", ""),
    )


def _clusters(cpuinfo: list[str]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Group CPUs by ARM part id (big.LITTLE), or by model name elsewhere."""
    groups: dict[str, list[int]] = {}
    cpu = -1
    for line in cpuinfo:
        key, _sep, value = (part.strip() for part in line.partition(":"))
        if key == "processor" and value.isdigit():
            cpu = int(value)
        elif key in ("CPU part", "model name") and cpu >= 0:
            name = ARM_PARTS.get(value.lower(), value) if key == "CPU part" else value
            groups.setdefault(name, [])
            if cpu not in groups[name]:
                groups[name].append(cpu)
    return tuple((name, tuple(cpus)) for name, cpus in groups.items())


def detect(connection: BoardConnection) -> BoardFacts:
    """Probe the board with one shell script (POSIX sh, no python needed)."""
    result = connection.run(_PROBE.replace("{python}", connection.entry.python), timeout_sec=60)
    facts = parse_facts(result.stdout)
    if not facts.arch:
        raise ProvisionError(
            f"board {connection.entry.name}: the probe printed no architecture "
            f"(status {result.status}: {result.stderr.strip()[:200]}); is /bin/sh usable there?"
        )
    return facts


def check_profile(facts: BoardFacts, profile: Any, board: str) -> list[str]:
    """Refuse a board that cannot run its profile's code; return warnings for softer mismatches."""
    want = normalize_arch(profile.device.arch)
    have = normalize_arch(facts.arch)
    if want != have:
        raise ProvisionError(
            f"board {board} is {facts.arch} but its profile {profile.name} expects {profile.device.arch}; "
            "fix the profile in the inventory (edgetune profiles list) or point the entry at the right host"
        )
    warnings = []
    if facts.cores and profile.device.num_threads > facts.cores:
        warnings.append(
            f"profile {profile.name} uses {profile.device.num_threads} threads but the board has {facts.cores} cores"
        )
    missing = [c for c in profile.device.core_affinity if facts.cores and c >= facts.cores]
    if missing:
        warnings.append(f"profile {profile.name} pins cores {missing} the board does not have ({facts.cores} cores)")
    if getattr(profile.rpc, "device", "cpu") in ("opencl", "mali") and not facts.opencl:
        warnings.append(f"profile {profile.name} measures on OpenCL but no OpenCL driver was found on the board")
    if getattr(profile.rpc, "device", "cpu") == "cuda" and not facts.cuda:
        warnings.append(f"profile {profile.name} measures on CUDA but no CUDA device was found on the board")
    mismatch = _cpu_mismatch(facts, profile)
    if mismatch:
        warnings.append(f"{mismatch}; set [target] mcpu in profile {profile.name} to the board's core")
    return warnings


def _cpu_mismatch(facts: BoardFacts, profile: Any) -> str | None:
    """The board's ARM cores (named from /proc/cpuinfo part ids) against the mcpu its profile compiles for."""
    from edgetune.profile.host import cpu_disagreement

    known = set(ARM_PARTS.values())
    cores = [name for name, _cpus in facts.clusters if name in known]
    if not cores:
        return None  # x86 "model name"s do not map to LLVM CPU names
    target = getattr(profile, "target", {}) or {}
    cpu_target = target if target.get("kind") == "llvm" else (getattr(profile, "host_target", None) or {})
    return cpu_disagreement(cpu_target.get("mcpu"), " + ".join(cores))


def require_python(facts: BoardFacts, entry: Any) -> None:
    if not facts.python or not facts.python_version:
        raise ProvisionError(
            f"board {entry.name}: {entry.python} not found on the board (PATH={facts.path or 'empty'}); "
            "install it there (Debian/Ubuntu: sudo apt-get install python3 python3-venv) "
            "or set python = \"/path/to/python3\" in the inventory entry"
        )
    major, _, rest = facts.python_version.partition(".")
    if major != "3" or int(rest.split(".")[0] or 0) < 8:
        raise ProvisionError(
            f"board {entry.name}: {facts.python} is Python {facts.python_version}; the TVM runtime needs Python >= 3.8"
        )
