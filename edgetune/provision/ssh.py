"""SSH to a board with paramiko: host keys verified, failures as one-line errors.

Host keys are checked against the entry's known_hosts file. An unknown host is
refused with its SHA256 fingerprint and the command that accepts it; with
``accept_new_host_key`` it is appended to known_hosts (never silently: the
fingerprint is reported). A *changed* key is always refused.
"""

from __future__ import annotations

import base64
import hashlib
import shlex
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import BoardError, HostKeyError, InventoryError
from .inventory import BoardEntry


@dataclass(frozen=True)
class CommandResult:
    """Exit status and output of one remote command."""

    status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.status == 0


def fingerprint(key: Any) -> str:
    """``SHA256:...`` as printed by ``ssh-keygen -lf`` and OpenSSH's prompts."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_hosts_name(host: str, port: int) -> str:
    """How known_hosts names a host: ``host`` on port 22, ``[host]:port`` otherwise."""
    return host if port == 22 else f"[{host}]:{port}"


def keyscan_command(entry: BoardEntry) -> str:
    port = f"-p {entry.port} " if entry.port != 22 else ""
    return f"ssh-keyscan {port}{entry.host} >> {entry.known_hosts}"


class _VerifyHostKey:
    """paramiko policy for hosts missing from known_hosts: refuse, or accept when told to."""

    def __init__(self, entry: BoardEntry, accept_new: bool, log: Callable[[str], None]) -> None:
        self.entry = entry
        self.accept_new = accept_new
        self.log = log

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        shown = f"{key.get_name()} {fingerprint(key)}"
        if not self.accept_new:
            raise HostKeyError(
                f"board {self.entry.name}: host {hostname} is not in {self.entry.known_hosts} "
                f"(it offers {shown}); if that fingerprint is right, run: {keyscan_command(self.entry)} "
                "or pass --accept-new-host-key"
            )
        path = self.entry.known_hosts_path
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(path, "a") as handle:
            handle.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.log(f"added host key of {hostname} ({shown}) to {path}")


class BoardConnection:
    """A lazily opened SSH connection to one board; use as a context manager."""

    def __init__(
        self, entry: BoardEntry, accept_new_host_key: bool = False, log: Callable[[str], None] = lambda _m: None
    ) -> None:
        self.entry = entry
        self.accept_new_host_key = accept_new_host_key
        self.log = log
        self._client: Any = None
        self._sftp: Any = None

    def __enter__(self) -> "BoardConnection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def where(self) -> str:
        return f"{self.entry.destination}:{self.entry.port}"

    def ssh_command(self) -> str:
        """The OpenSSH command a user runs to check the same connection by hand."""
        identity = f"-i {self.entry.identity_file} " if self.entry.identity_file else ""
        return (
            f"ssh {identity}-p {self.entry.port} -o UserKnownHostsFile={self.entry.known_hosts} "
            f"{self.entry.destination} true"
        )

    def client(self) -> Any:
        """The connected paramiko ``SSHClient`` (connects on first use)."""
        if self._client is None:
            self._client = self._connect()
        return self._client

    def _connect(self) -> Any:
        import paramiko

        entry = self.entry
        client = paramiko.SSHClient()
        if entry.known_hosts_path.is_file():
            client.load_host_keys(str(entry.known_hosts_path))
        client.set_missing_host_key_policy(_VerifyHostKey(entry, self.accept_new_host_key, self.log))
        identity = str(Path(entry.identity_file).expanduser()) if entry.identity_file else None
        if identity and not Path(identity).is_file():
            raise InventoryError(f"board {entry.name}: identity_file {identity} does not exist")
        try:
            client.connect(
                entry.host,
                port=entry.port,
                username=entry.user or None,
                key_filename=identity,
                look_for_keys=identity is None,
                allow_agent=identity is None,
                timeout=entry.connect_timeout_sec,
                banner_timeout=entry.connect_timeout_sec,
                auth_timeout=entry.connect_timeout_sec,
            )
        except HostKeyError:
            client.close()
            raise
        except paramiko.BadHostKeyException as error:
            client.close()
            raise HostKeyError(
                f"board {entry.name}: the host key of {self.where} CHANGED: {entry.known_hosts} has "
                f"{fingerprint(error.expected_key)}, the host offers {fingerprint(error.key)} - maybe a "
                "reinstalled board, maybe an attack; if expected, run: "
                f"ssh-keygen -R '{known_hosts_name(entry.host, entry.port)}' -f {entry.known_hosts}"
            ) from None
        except paramiko.AuthenticationException as error:
            client.close()
            how = f"identity_file {entry.identity_file}" if identity else "ssh-agent and default keys"
            raise BoardError(
                f"board {entry.name}: SSH authentication as {entry.user!r} at {self.where} failed with {how} "
                f"({error}); is the public key in the board's authorized_keys? check with: {self.ssh_command()}"
            ) from None
        except (paramiko.SSHException, OSError, EOFError) as error:
            client.close()
            reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
            if isinstance(error, socket.timeout):
                reason = f"no answer within {entry.connect_timeout_sec:g} s"
            elif getattr(error, "errors", None):  # NoValidConnectionsError: one OSError per address
                reason = ", ".join(sorted({e.strerror or str(e) for e in error.errors.values()}))
            raise BoardError(
                f"board {entry.name}: cannot connect to {entry.host}:{entry.port}: {reason}; "
                f"is it up and running sshd? check with: {self.ssh_command()}"
            ) from None
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(15)
        return client

    def run(self, command: str, timeout_sec: float = 120.0, check: bool = False, stdin: str = "") -> CommandResult:
        """Run ``command`` with ``/bin/sh`` on the board, within ``timeout_sec``.

        Reads both streams until the remote side closes them; a detached child
        must therefore redirect its own output (see the server module).
        """
        channel = self.client().get_transport().open_session()
        channel.settimeout(1.0)
        channel.exec_command("/bin/sh -c " + shlex.quote(command))
        if stdin:
            channel.sendall(stdin.encode())
        channel.shutdown_write()
        out, err = bytearray(), bytearray()
        deadline = time.monotonic() + timeout_sec
        while True:
            while channel.recv_ready():
                out += channel.recv(65536)
            while channel.recv_stderr_ready():
                err += channel.recv_stderr(65536)
            if channel.exit_status_ready() and not channel.recv_ready() and not channel.recv_stderr_ready():
                break
            if time.monotonic() > deadline:
                channel.close()
                raise BoardError(
                    f"board {self.entry.name}: command did not finish within {timeout_sec:g} s: {command[:80]}"
                )
            time.sleep(0.02)
        result = CommandResult(channel.recv_exit_status(), out.decode(errors="replace"), err.decode(errors="replace"))
        channel.close()
        if check and not result.ok:
            detail = (result.stderr.strip() or result.stdout.strip()).splitlines()
            raise BoardError(
                f"board {self.entry.name}: `{command[:80]}` failed with status {result.status}: "
                f"{detail[-1] if detail else 'no output'}"
            )
        return result

    def sftp(self) -> Any:
        if self._sftp is None:
            self._sftp = self.client().open_sftp()
        return self._sftp

    def close(self) -> None:
        for item in (self._sftp, self._client):
            if item is not None:
                try:
                    item.close()
                except Exception:  # closing a dead connection
                    pass
        self._sftp = self._client = None
