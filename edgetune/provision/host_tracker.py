"""The host tracker boards register with: started once, detached, reused afterwards.

Bound to 127.0.0.1 by default: tunnel-mode boards reach it through an SSH
remote forward, so TVM's unauthenticated RPC never listens on the network.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable

from ..board.rpc_tracker import TrackerAddress, tracker_summary
from ..common.process import pid_alive, port_in_use, spawn_group, stop_group, wait_until
from ..errors import BoardError, ProvisionError
from .inventory import TrackerSettings
from .state import read_record, state_dir, stop_recorded, write_record

MARKER = "tvm.exec.rpc_tracker"


@dataclass(frozen=True)
class HostTracker:
    """A running tracker: where it listens, its pid, and whether this call started it."""

    host: str
    port: int
    pid: int
    started: bool

    def address(self, key: str) -> TrackerAddress:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return TrackerAddress(host, self.port, key)


def _record_path():
    return state_dir() / "tracker.json"


def running_tracker() -> HostTracker | None:
    """The tracker recorded in the state dir, if its process is still alive."""
    record = read_record(_record_path())
    pid = int(record.get("pid", 0))
    if pid and pid_alive(pid, MARKER):
        return HostTracker(record["host"], int(record["port"]), pid, started=False)
    return None


def _port_in_use(host: str, port: int) -> bool:
    try:
        return port_in_use(host, port)
    except OSError as error:
        raise BoardError(f"cannot bind the tracker to {host}:{port}: {error.strerror}") from None


def ensure_tracker(settings: TrackerSettings, log: Callable[[str], None] = lambda _m: None) -> HostTracker:
    """Reuse the recorded tracker if it listens where the inventory says, else start one."""
    current = running_tracker()
    if current is not None:
        if (current.host, current.port) == (settings.host, settings.port):
            try:
                tracker_summary(current.address("-"), timeout_sec=10)
                return current
            except BoardError:
                log(f"recorded tracker pid {current.pid} does not answer; restarting it")
        else:
            log(f"tracker moves from {current.host}:{current.port} to {settings.host}:{settings.port}")
        stop_group(current.pid)
    if _port_in_use(settings.host, settings.port):
        raise ProvisionError(
            f"tracker port {settings.port} on {settings.host} is in use by another program, not an edgetune "
            f"tracker; find it with: ss -ltnp 'sport = :{settings.port}' - stop it or set [tracker] port "
            "in the inventory"
        )
    if settings.host not in ("127.0.0.1", "localhost", "::1"):
        log(
            f"WARNING: the tracker listens on {settings.host}: TVM's RPC is unauthenticated, anyone on "
            "that network can use it; keep direct mode to a trusted lab LAN"
        )
    logfile = state_dir() / "tracker.log"
    process = spawn_group(
        [sys.executable, "-m", MARKER, "--host", settings.host, "--port", str(settings.port),
         "--port-end", str(settings.port + 1)],
        logfile, error=ProvisionError,
    )
    tracker = HostTracker(settings.host, settings.port, process.pid, started=True)
    # the summary is a non-empty dict once the tracker answers
    if not wait_until(lambda: tracker_summary(tracker.address("-"), timeout_sec=2), 30, process=process,
                      retry_on=BoardError):
        if process.poll() is not None:
            raise ProvisionError(
                f"the host tracker exited with code {process.returncode} at start; see {logfile}"
            )
        stop_group(process)
        raise ProvisionError(f"the host tracker did not answer within 30 s; see {logfile}")
    write_record(_record_path(), {"pid": process.pid, "host": settings.host, "port": settings.port,
                                  "log": str(logfile)})
    log(f"started the host tracker on {settings.host}:{settings.port} (pid {process.pid}, log {logfile})")
    return tracker


def stop_tracker() -> bool:
    """Stop the recorded tracker; whether one was running."""
    current = running_tracker()
    return stop_recorded(_record_path(), current.pid if current else None)
