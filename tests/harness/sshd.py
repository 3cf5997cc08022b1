"""Real OpenSSH servers for the provisioning tests: loopback, network namespace, arm64 chroot.

Each server has its own ``sshd_config``, host key and ``authorized_keys`` in a
temporary directory (nothing of the machine's own SSH set-up is used), accepts
public keys only, and runs ``sshd -D`` in its own process group.

* loopback: ``ListenAddress 127.0.0.1`` on a free port;
* namespace: sshd runs in a fresh ``ip netns`` joined to the host by a veth
  pair, so the "board" has its own address and loopback: the host's
  127.0.0.1 is unreachable from it except through an SSH forward;
* arm64: a namespace board whose sessions are chrooted (``ChrootDirectory``)
  into a Debian arm64 rootfs, so every command runs as aarch64 code under
  qemu-user. Its /root and /tmp are tmpfs mounts private to the server's mount
  namespace: the cached rootfs stays clean and nothing survives the server.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

SSHD = "/usr/sbin/sshd"
_counter = itertools.count()


def missing_tools() -> list[str]:
    missing = []
    for path, package in ((SSHD, "openssh-server"), ("ssh-keygen", "openssh-client"), ("ssh", "openssh-client")):
        if not (Path(path).exists() if path.startswith("/") else shutil.which(path)):
            missing.append(f"{path} (Debian package {package})")
    return missing


def missing_netns() -> str:
    """Why network namespaces cannot be used here ('' when they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "ip not found (Debian package iproute2)"
    return ""


def keygen(path: Path, comment: str) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True)
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class NetNamespace:
    """A network namespace with a veth link to the host: host .1, board .2 of a /30."""

    name: str
    host_addr: str
    board_addr: str

    @classmethod
    def create(cls) -> "NetNamespace":
        """A fresh namespace on a 10.231.N.0/30 no other one uses (test files run in parallel: pytest-xdist)."""
        with open(os.path.join(tempfile.gettempdir(), "edgetune-test-netns.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            listed = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
            used = {int(n) for n in re.findall(r"inet 10\.231\.(\d+)\.", listed)}
            free = [index for index in range(250) if index not in used]
            if not free:
                raise RuntimeError("every 10.231.N.0/30 subnet is taken by a test network namespace")
            return cls._create(free[(os.getpid() * 7 + next(_counter)) % len(free)])

    @classmethod
    def _create(cls, index: int) -> "NetNamespace":
        name = f"et{os.getpid() % 100000}n{index}"
        subnet = f"10.231.{index}"
        host_if, board_if = f"eth{index}h{os.getpid() % 1000}", f"eth{index}b{os.getpid() % 1000}"
        commands = [
            ["ip", "netns", "add", name],
            ["ip", "link", "add", host_if, "type", "veth", "peer", "name", board_if],
            ["ip", "link", "set", board_if, "netns", name],
            ["ip", "addr", "add", f"{subnet}.1/30", "dev", host_if],
            ["ip", "link", "set", host_if, "up"],
            ["ip", "-n", name, "addr", "add", f"{subnet}.2/30", "dev", board_if],
            ["ip", "-n", name, "link", "set", board_if, "up"],
            ["ip", "-n", name, "link", "set", "lo", "up"],
        ]
        space = cls(name, f"{subnet}.1", f"{subnet}.2")
        try:
            for command in commands:
                subprocess.run(command, check=True, capture_output=True, text=True)
        except subprocess.CalledProcessError as error:
            space.delete()
            raise RuntimeError(f"{shlex.join(error.cmd)} failed: {error.stderr.strip()}") from None
        return space

    def exec_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def kill_all(self) -> None:
        pids = subprocess.run(["ip", "netns", "pids", self.name], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass

    def delete(self) -> None:
        self.kill_all()
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


@dataclass
class SshServer:
    """One running sshd and everything a client needs to log in."""

    workdir: Path
    host: str
    port: int
    user_key: Path
    host_key: Path
    process: subprocess.Popen
    netns: NetNamespace | None = None
    chroot: Path | None = None
    extra: dict = field(default_factory=dict)

    @property
    def host_public_line(self) -> str:
        """The known_hosts line for this server."""
        name = self.host if self.port == 22 else f"[{self.host}]:{self.port}"
        kind, blob = Path(str(self.host_key) + ".pub").read_text().split()[:2]
        return f"{name} {kind} {blob}\n"

    def write_known_hosts(self, path: Path) -> Path:
        with open(path, "a") as handle:
            handle.write(self.host_public_line)
        return path

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)
        if self.netns is not None:
            self.netns.delete()


def start_sshd(
    workdir: Path,
    *,
    user_key: Path | None = None,
    netns: NetNamespace | None = None,
    chroot: Path | None = None,
    cpuinfo: str = "",
    set_path: str = "",
    startup_timeout_sec: float = 20.0,
) -> SshServer:
    """Start sshd (in ``netns``, chrooting sessions into ``chroot`` if given) and wait for its banner.

    ``cpuinfo``: the chroot's /proc/cpuinfo instead of this host's. Under qemu-user a board sees the
    host's x86 cpuinfo; ARM code that reads it to pick kernels (the cpuinfo library in ONNX Runtime
    and XNNPACK) crashes on it, where on a real ARM board it reads the ARM one.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
    host_key = keygen(workdir / "host_ed25519_key", "edgetune-test-host")
    user_key = user_key or keygen(workdir / "user_ed25519_key", "edgetune-test-user")
    (workdir / "authorized_keys").write_text(Path(str(user_key) + ".pub").read_text())
    host = netns.board_addr if netns else "127.0.0.1"
    port = 22 if netns else free_port()
    lines = [
        f"Port {port}", f"ListenAddress {host}", f"HostKey {host_key}", f"PidFile {workdir / 'sshd.pid'}",
        f"AuthorizedKeysFile {workdir / 'authorized_keys'}", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "PubkeyAuthentication yes", "UsePAM no", "StrictModes no",
        "PermitRootLogin prohibit-password", "AllowTcpForwarding yes", "AllowStreamLocalForwarding no",
        "GatewayPorts no", "X11Forwarding no", "PrintMotd no", "Subsystem sftp internal-sftp",
        "LogLevel VERBOSE", "MaxStartups 50", "MaxSessions 50",
    ]
    if set_path:
        lines.append(f"SetEnv PATH={set_path}")
    if chroot is not None:
        lines.append(f"ChrootDirectory {chroot}")
    config = workdir / "sshd_config"
    config.write_text("\n".join(lines) + "\n")
    command = [SSHD, "-D", "-e", "-f", str(config)]
    if cpuinfo:
        (workdir / "cpuinfo").write_text(cpuinfo)
    if chroot is not None:
        # private mount namespace: proc/dev/sys for the chroot, tmpfs over /root and /tmp
        mounts = (
            f"mount -t proc proc {chroot}/proc && "
            + (f"mount --bind {shlex.quote(str(workdir / 'cpuinfo'))} {chroot}/proc/cpuinfo && " if cpuinfo else "")
            + f"mount --rbind /dev {chroot}/dev && "
            f"mount --rbind /sys {chroot}/sys && mount -t tmpfs -o mode=700 tmpfs {chroot}/root && "
            f"mount -t tmpfs -o mode=1777 tmpfs {chroot}/tmp && exec {shlex.join(command)}"
        )
        command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mounts]
    if netns is not None:
        command = netns.exec_prefix() + command
    log = open(workdir / "sshd.log", "ab")  # noqa: SIM115 - owned by the child
    try:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    finally:
        log.close()
    server = SshServer(workdir, host, port, user_key, host_key, process, netns, chroot)
    deadline = time.monotonic() + startup_timeout_sec
    while time.monotonic() < deadline:
        if process.poll() is not None:
            text = (workdir / "sshd.log").read_text(errors="replace").strip()
            raise RuntimeError(f"sshd exited with {process.returncode}: {text[-500:]}")
        try:
            with socket.create_connection((host, port), timeout=1) as sock:
                if sock.recv(64).startswith(b"SSH-2.0"):
                    return server
        except OSError:
            time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"sshd did not answer on {host}:{port} within {startup_timeout_sec:g} s")
