"""Fixtures and helpers for the ``edgetune provision`` tests (real sshd, netns, arm64 chroot).

Import the fixtures a module needs from here; each expensive one is used by a
single test module, so module-level imports do not start it twice. Locally a
missing system component skips; in CI (``CI=true``) it fails (see conftest).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from conftest import IN_CI, _missing, run_cli
from harness import arm64_rootfs
from harness.sshd import NetNamespace, SshServer, free_port, missing_netns, missing_tools, start_sshd

#: wheels downloaded once per machine and shared by every run (pip download is the slow part offline)
WHEEL_CACHE = arm64_rootfs.cache_root() / "cache"


def _require_sshd() -> None:
    missing = missing_tools()
    if missing:
        _missing("OpenSSH not available: " + ", ".join(missing))


def _require_netns() -> None:
    why = missing_netns()
    if why:
        _missing(why)


def _require_rootfs() -> None:
    missing = arm64_rootfs.missing_components()
    if missing:
        _missing("cannot build the emulated arm64 board: " + ", ".join(missing))
    try:
        arm64_rootfs.ensure_binfmt()
    except RuntimeError as error:
        _missing(str(error))


@pytest.fixture(scope="module")
def loopback_sshd(tmp_path_factory: pytest.TempPathFactory) -> SshServer:
    """A real sshd on 127.0.0.1 (a board sharing the host's network)."""
    _require_sshd()
    server = start_sshd(tmp_path_factory.mktemp("sshd-loopback"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def netns_sshd(tmp_path_factory: pytest.TempPathFactory) -> SshServer:
    """A board with its own address: sshd in a network namespace behind a veth pair."""
    _require_sshd()
    _require_netns()
    server = start_sshd(tmp_path_factory.mktemp("sshd-netns"), netns=NetNamespace.create())
    yield server
    server.stop()


@pytest.fixture(scope="module")
def nopython_sshd(tmp_path_factory: pytest.TempPathFactory) -> SshServer:
    """A board without python3: sessions chroot into a minimal Debian amd64 rootfs."""
    _require_sshd()
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        _missing("the no-python board needs root and debootstrap (Debian package debootstrap)")
    rootfs = arm64_rootfs.build_rootfs(arch="amd64", include=())
    server = start_sshd(tmp_path_factory.mktemp("sshd-nopython"), chroot=rootfs)
    yield server
    server.stop()


#: the emulated arm64 board's /proc/cpuinfo: two Cortex-A72 cores (CPU part 0xd08), as on a Raspberry Pi 4
ARM64_CPUINFO = "".join(
    f"processor\t: {core}\nBogoMIPS\t: 108.00\nFeatures\t: fp asimd evtstrm crc32 cpuid\nCPU implementer\t: 0x41\n"
    "CPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd08\nCPU revision\t: 3\n\n"
    for core in range(2)
)


@pytest.fixture(scope="module")
def arm64_sshd(tmp_path_factory: pytest.TempPathFactory) -> SshServer:
    """The emulated arm64 board: netns + sshd chrooting into a Debian arm64 rootfs (qemu-user)."""
    _require_sshd()
    _require_netns()
    _require_rootfs()
    rootfs = arm64_rootfs.build_rootfs()
    server = start_sshd(tmp_path_factory.mktemp("sshd-arm64"), netns=NetNamespace.create(), chroot=rootfs,
                        cpuinfo=ARM64_CPUINFO)
    yield server
    server.stop()


def board_toml(name: str, server: SshServer, profile: str, **extra: Any) -> str:
    """One ``[boards.NAME]`` table for ``server`` (its key defaults to the board name)."""
    values: dict[str, Any] = {
        "host": server.host, "port": server.port, "user": "root", "identity_file": str(server.user_key),
        "profile": profile, "key": name, "rpc_port": free_port(),
    }
    values.update(extra)
    body = "\n".join(f"{key} = {_toml(value)}" for key, value in values.items())
    return f"[boards.{name}]\n{body}\n"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


class Site:
    """One test's inventory, known_hosts, state dir and CLI environment."""

    def __init__(self, root: Path, tracker_port: int | None = None, tracker_host: str = "127.0.0.1",
                 advertise: str = "") -> None:
        self.root = root
        self.tracker_port = tracker_port or free_port()
        self.known_hosts = root / "known_hosts"
        self.known_hosts.touch()
        self.inventory = root / "boards.toml"
        self.state = root / "state"
        self.tracker_host = tracker_host
        self.advertise = advertise
        self.boards: list[str] = []

    def trust(self, server: SshServer) -> "Site":
        server.write_known_hosts(self.known_hosts)
        return self

    def add(self, name: str, server: SshServer, profile: str = "host", **extra: Any) -> "Site":
        extra.setdefault("known_hosts", str(self.known_hosts))
        if server.chroot is None:
            # boards that share this machine's filesystem get their own remote_dir
            extra.setdefault("remote_dir", str(self.root / f"remote-{name}"))
        self.boards.append(board_toml(name, server, profile, **extra))
        self.write()
        return self

    def write(self) -> None:
        tracker = f"[tracker]\nhost = {_toml(self.tracker_host)}\nport = {self.tracker_port}\n"
        if self.advertise:
            tracker += f"advertise = {_toml(self.advertise)}\n"
        self.inventory.write_text(tracker + "\n" + "\n".join(self.boards))

    @property
    def env(self) -> dict[str, str]:
        return {"EDGETUNE_INVENTORY": str(self.inventory), "EDGETUNE_STATE_DIR": str(self.state),
                "EDGETUNE_CACHE_DIR": str(WHEEL_CACHE)}

    def cli(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        return run_cli(*args, env=self.env, timeout=timeout)

    def teardown(self) -> None:
        """Stop whatever the tests left running (servers, tunnels, tracker)."""
        if self.boards:
            self.cli("boards", "teardown", "--all", "--tracker", timeout=300)


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("edgetune: error:")]


def assert_one_error(result: subprocess.CompletedProcess, exit_code: int, *phrases: str) -> str:
    """The command failed with ``exit_code`` and exactly one error line containing ``phrases``."""
    lines = error_lines(result)
    assert result.returncode == exit_code, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    for phrase in phrases:
        assert phrase in lines[0], f"{phrase!r} not in {lines[0]!r}"
    return lines[0]


def port_refuses(host: str, port: int, netns: NetNamespace | None = None) -> bool:
    """Whether a TCP connect to host:port fails (from inside ``netns`` if given)."""
    if netns is None:
        try:
            socket.create_connection((host, port), timeout=2).close()
            return False
        except OSError:
            return True
    probe = textwrap.dedent(f"""
        import socket, sys
        try:
            socket.create_connection(({host!r}, {port}), timeout=2).close()
        except OSError:
            sys.exit(1)
    """)
    done = subprocess.run([*netns.exec_prefix(), sys.executable, "-c", probe], capture_output=True, timeout=30)
    return done.returncode != 0


__all__ = [
    "IN_CI", "Site", "WHEEL_CACHE", "arm64_sshd", "assert_one_error", "board_toml", "error_lines", "free_port",
    "loopback_sshd", "netns_sshd", "nopython_sshd", "port_refuses",
]
