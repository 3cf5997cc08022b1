"""Tunnels for tunnel-mode boards, kept alive after ``edgetune provision`` exits.

The keeper is the system OpenSSH client (``ssh -N``) started detached with a
pid file, not a paramiko transport: a transport dies with the provisioning
process, and a long-lived keeper needs OpenSSH's keepalives and robust
forwarding. It verifies the host key against the same known_hosts file that
paramiko checked (``StrictHostKeyChecking=yes``, ``BatchMode=yes``: it never
prompts and never adds keys). Two forwards per board:

* ``-R 127.0.0.1:T:127.0.0.1:T``: the board's server reaches the host tracker
  at its own loopback port T;
* ``-L 127.0.0.1:P:127.0.0.1:P``: the tracker reports the server as
  127.0.0.1:P (``--custom-addr 127.0.0.1``), so the host reaches the board's
  RPC server on the same port number on its own loopback.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..common.process import log_tail, pid_alive, port_open, spawn_group, stop_group, wait_for_port
from ..errors import ProvisionError
from .inventory import BoardEntry
from .state import board_dir, read_record, stop_recorded, write_record

MARKER = "edgetune-tunnel"


@dataclass(frozen=True)
class Tunnel:
    pid: int
    command: tuple[str, ...]
    started: bool


def tunnel_command(entry: BoardEntry, tracker_port: int) -> list[str]:
    ssh = shutil.which("ssh")
    if ssh is None:
        raise ProvisionError(
            "tunnel mode needs the OpenSSH client (ssh) on this host to keep the tunnel: "
            "apt-get install openssh-client, or use mode = \"direct\""
        )
    command = [
        ssh, "-N", "-T",
        "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "CheckHostIP=no",
        "-o", f"UserKnownHostsFile={entry.known_hosts_path}", "-o", "ExitOnForwardFailure=yes",
        "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=3",
        "-o", f"ConnectTimeout={int(entry.connect_timeout_sec)}",
        # a marker in the command line so `pid_alive` can tell the keeper from a reused pid
        "-o", f"SetEnv=EDGETUNE_TUNNEL={MARKER}-{entry.name}",
        "-p", str(entry.port),
        "-R", f"127.0.0.1:{tracker_port}:127.0.0.1:{tracker_port}",
        "-L", f"127.0.0.1:{entry.rpc_port}:127.0.0.1:{entry.rpc_port}",
    ]
    if entry.identity_file:
        command += ["-o", "IdentitiesOnly=yes", "-i", str(Path(entry.identity_file).expanduser())]
    if entry.user:
        command += ["-l", entry.user]
    return command + [entry.host]


def _record(entry: BoardEntry) -> Path:
    return board_dir(entry.name) / "tunnel.json"


def running_tunnel(entry: BoardEntry) -> Tunnel | None:
    record = read_record(_record(entry))
    pid = int(record.get("pid", 0))
    if pid and pid_alive(pid, f"{MARKER}-{entry.name}"):
        return Tunnel(pid, tuple(record.get("command", ())), started=False)
    return None


def ensure_tunnel(entry: BoardEntry, tracker_port: int, log: Callable[[str], None]) -> Tunnel:
    """Reuse the board's keeper if it runs with the same forwards, else (re)start it."""
    command = tunnel_command(entry, tracker_port)
    current = running_tunnel(entry)
    if current is not None:
        if list(current.command) == command:
            return current
        log(f"tunnel settings changed; restarting the keeper (pid {current.pid})")
        stop_group(current.pid)
    elif port_open("127.0.0.1", entry.rpc_port):
        raise ProvisionError(
            f"board {entry.name}: host port 127.0.0.1:{entry.rpc_port} (rpc_port, forwarded to the board) is "
            f"already in use; find it with: ss -ltnp 'sport = :{entry.rpc_port}' - or give the board another rpc_port"
        )
    logfile = board_dir(entry.name) / "tunnel.log"
    process = spawn_group(command, logfile, error=ProvisionError)
    # settle: the remote forward is requested right after the local one, and ssh
    # exits (ExitOnForwardFailure) if the board refuses it
    if not wait_for_port("127.0.0.1", entry.rpc_port, entry.connect_timeout_sec + 10, process=process,
                         settle_sec=0.5):
        if process.poll() is not None:
            raise ProvisionError(
                f"board {entry.name}: the SSH tunnel exited at start ({log_tail(logfile) or 'no output'}); "
                f"see {logfile}"
            )
        stop_group(process)
        raise ProvisionError(f"board {entry.name}: the SSH tunnel did not come up; see {logfile}")
    write_record(_record(entry), {"pid": process.pid, "command": command, "log": str(logfile)})
    log(f"tunnel up (ssh pid {process.pid}): board 127.0.0.1:{tracker_port} -> host tracker, "
        f"host 127.0.0.1:{entry.rpc_port} -> board RPC server")
    return Tunnel(process.pid, tuple(command), started=True)


def stop_tunnel(entry: BoardEntry) -> bool:
    current = running_tunnel(entry)
    return stop_recorded(_record(entry), current.pid if current else None)
