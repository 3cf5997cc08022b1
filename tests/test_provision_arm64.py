"""The emulated arm64 board: provisioned over SSH, verified with real aarch64 code.

sshd runs in its own network namespace and chroots every session into a
Debian arm64 rootfs, so the probe, the venv, the RPC server and the verify
kernel (cross-compiled on this host with aarch64-linux-gnu-g++) all execute as
aarch64 code under qemu-user. The rootfs is built once and cached under
/var/cache/edgetune-test (about 30 s cold); the board's /root is a tmpfs, so
every run installs the runtime from scratch (about a minute under emulation).

Run it alone:  pytest tests/test_provision_arm64.py -q
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from conftest import require_tool
from provision_fixtures import Site, arm64_sshd  # noqa: F401

pytestmark = pytest.mark.integration


def _elf_machine(path: Path) -> int:
    header = path.read_bytes()[:20]
    assert header[:4] == b"\x7fELF", path
    return int.from_bytes(header[18:20], "little")


def test_arm64_board_end_to_end(arm64_sshd, tmp_path: Path) -> None:
    require_tool("aarch64-linux-gnu-g++", "g++-aarch64-linux-gnu")
    python = (arm64_sshd.chroot / "usr/bin/python3").resolve()
    assert _elf_machine(python) == 183  # EM_AARCH64: the board's interpreter is arm64 code
    # rpi4 as written, pinned to core 1 with one thread (this machine has 2 cores)
    profile = tmp_path / "emu-rpi4.toml"
    rpi4 = (Path(__file__).resolve().parent.parent / "device_profiles" / "rpi4.toml").read_text()
    profile.write_text(rpi4.replace('name = "rpi4"', 'name = "emu-rpi4"')
                       .replace("num_threads = 4", "num_threads = 1\ncore_affinity = [1]"))
    site = Site(tmp_path).trust(arm64_sshd).add("emu-arm64", arm64_sshd, profile=str(profile), governor="performance")
    try:
        started = time.monotonic()
        result = site.cli("provision", "emu-arm64", timeout=1500)
        cold = time.monotonic() - started
        assert result.returncode == 0, result.stdout + result.stderr
        out = result.stdout
        assert "detected aarch64" in out
        assert "uploading" in out and "/root/.edgetune/wheels" in out and "(installed)" in out
        assert "tunnel up" in out and "verified ok (max error 0.0e+00" in out
        row = next(line for line in out.splitlines() if line.startswith("emu-arm64"))
        assert "emu-rpi4" in row and "aarch64" in row and "0.27.0.post1" in row
        assert "cores 1" in out  # pinned with taskset
        assert "WARNING: could not set the 'performance' CPU governor" in out  # no cpufreq here

        started = time.monotonic()
        again = site.cli("provision", "emu-arm64", timeout=900)
        warm = time.monotonic() - started
        assert again.returncode == 0, again.stdout + again.stderr
        assert "(already there)" in again.stdout and "RPC server already running" in again.stdout

        status = site.cli("boards", "status")
        assert status.returncode == 0, status.stdout + status.stderr
        pid = int(re.search(r"running \((\d+)\)", status.stdout).group(1))
        assert os.sched_getaffinity(pid) == {1}  # the emulated server really runs pinned
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert b"TVM_NUM_THREADS=1" in environ
        print(f"arm64 board: cold provision {cold:.0f} s, warm {warm:.0f} s")
    finally:
        site.teardown()
