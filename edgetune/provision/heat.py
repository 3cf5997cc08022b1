"""SoC temperature and CPU frequency of a board, read from its sysfs over SSH.

A board that heats up clocks itself down, and candidates timed then look slow
for reasons that have nothing to do with their schedule. The readings come
from the kernel's thermal zones (``class/thermal/thermal_zone*/temp``, in
millidegrees) and cpufreq (``devices/system/cpu/cpu*/cpufreq``) under the
entry's ``sysfs_root``; a board without them reads as "unknown", never as an
error.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from .ssh import BoardConnection

#: one SSH round trip: a line per thermal zone and per CPU with cpufreq
_SCRIPT = r"""
root={root}
for z in "$root"/class/thermal/thermal_zone*; do
  [ -r "$z/temp" ] || continue
  t=$(cat "$z/type" 2>/dev/null | tr -c 'A-Za-z0-9_.\n-' _)
  echo "zone ${z##*/} ${t:-unknown} $(cat "$z/temp" 2>/dev/null)"
done
for c in "$root"/devices/system/cpu/cpu[0-9]*; do
  f="$c/cpufreq"
  [ -r "$f/scaling_cur_freq" ] || continue
  echo "cpu ${c##*/cpu} $(cat "$f/scaling_cur_freq") $(cat "$f/cpuinfo_max_freq" 2>/dev/null || echo 0) $(cat "$f/scaling_governor" 2>/dev/null || echo -)"
done
"""


@dataclass(frozen=True)
class Zone:
    name: str
    type: str
    temp_c: float


@dataclass(frozen=True)
class CpuFreq:
    cpu: int
    cur_khz: int
    max_khz: int
    governor: str


@dataclass(frozen=True)
class HeatReading:
    """One look at the board's thermal zones and CPU clocks (empty tuples: nothing there)."""

    at: float
    zones: tuple[Zone, ...] = ()
    cpus: tuple[CpuFreq, ...] = ()

    @property
    def max_temp_c(self) -> float | None:
        return max((z.temp_c for z in self.zones), default=None)

    @property
    def governors(self) -> str:
        return ",".join(sorted({c.governor for c in self.cpus})) or "unknown"

    @property
    def freq_ratio(self) -> float | None:
        """Lowest current/maximum clock over the CPUs that report both."""
        ratios = [c.cur_khz / c.max_khz for c in self.cpus if c.max_khz > 0]
        return min(ratios) if ratios else None

    def temperature_text(self) -> str:
        hottest = max(self.zones, key=lambda z: z.temp_c, default=None)
        return f"{hottest.temp_c:.1f} C ({hottest.type})" if hottest else "unknown"

    def frequency_text(self) -> str:
        if not self.cpus:
            return "unknown"
        cur = [c.cur_khz // 1000 for c in self.cpus]
        top = max(c.max_khz for c in self.cpus) // 1000
        span = f"{min(cur)}" if min(cur) == max(cur) else f"{min(cur)}-{max(cur)}"
        return f"{span}/{top} MHz" if top else f"{span} MHz"

    def throttling(self, max_temp_c: float, min_freq_ratio: float) -> str:
        """Why the board counts as throttling ('' when it does not).

        Above ``max_temp_c``; or, under the ``performance`` governor (where the
        clock should sit at its maximum), a CPU below ``min_freq_ratio`` of its
        maximum. Other governors lower the clock of an idle CPU on purpose.
        """
        hottest = self.max_temp_c
        if hottest is not None and max_temp_c > 0 and hottest > max_temp_c:
            return f"SoC at {hottest:.1f} C, above {max_temp_c:g} C"
        slow = [c for c in self.cpus if c.governor == "performance" and c.max_khz > 0
                and c.cur_khz < min_freq_ratio * c.max_khz]
        if slow and min_freq_ratio > 0:
            worst = min(slow, key=lambda c: c.cur_khz / c.max_khz)
            return (f"cpu{worst.cpu} at {worst.cur_khz // 1000} of {worst.max_khz // 1000} MHz under the "
                    f"performance governor")
        return ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "at": round(self.at, 3),
            "max_temp_c": self.max_temp_c,
            "zones": [{"zone": z.name, "type": z.type, "temp_c": z.temp_c} for z in self.zones],
            "cpus": [{"cpu": c.cpu, "cur_khz": c.cur_khz, "max_khz": c.max_khz, "governor": c.governor}
                     for c in self.cpus],
        }


def _millidegrees(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    # the kernel reports millidegrees; a few drivers report whole degrees
    return value / 1000.0 if abs(value) >= 1000 else value


def parse_heat(text: str, at: float | None = None) -> HeatReading:
    """Parse the script's output; unreadable lines are skipped."""
    zones, cpus = [], []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "zone":
            temp = _millidegrees(parts[3])
            if temp is not None:
                zones.append(Zone(parts[1], parts[2], temp))
        elif len(parts) == 5 and parts[0] == "cpu" and parts[1].isdigit() and parts[2].isdigit():
            max_khz = int(parts[3]) if parts[3].isdigit() else 0
            cpus.append(CpuFreq(int(parts[1]), int(parts[2]), max_khz, parts[4]))
    return HeatReading(time.time() if at is None else at, tuple(zones), tuple(sorted(cpus, key=lambda c: c.cpu)))


def read_heat(connection: BoardConnection, sysfs_root: str | None = None) -> HeatReading:
    """The board's temperatures and clocks now (one SSH command)."""
    root = sysfs_root or connection.entry.sysfs_root
    result = connection.run(_SCRIPT.replace("{root}", root.rstrip("/") or "/"), timeout_sec=30)
    return parse_heat(result.stdout)
