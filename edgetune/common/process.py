"""Helper processes edgetune starts and stops: trackers, RPC servers, SSH tunnels.

Each one runs as the leader of its own session (process group) with its output
in a log file, so that stopping it can signal the whole group: TVM's RPC
server and tracker fork ``popen_worker`` children, and killing only the
parent would leave them holding ports and memory. Readiness is polled, and a
helper that exits during the wait ends the wait at once instead of after the
whole timeout.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ..errors import EdgetuneError

#: seconds to wait for a group to go after SIGKILL (it cannot refuse; it may be in the kernel)
KILL_WAIT_SEC = 2.0


def spawn_group(
    args: Sequence[str],
    log_path: str | Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    error: type[EdgetuneError] | None = None,
) -> subprocess.Popen:
    """Start ``args`` in a new session, stdin from /dev/null, stdout and stderr appended to ``log_path``.

    ``env`` adds to this process's environment. A new session makes the child
    a process-group leader (its pid is the group id, see :func:`stop_group`)
    and detaches it from the terminal, so Ctrl-C reaches edgetune only and
    edgetune decides how the helper stops. An ``OSError`` (no such program, an
    unwritable log) is raised as ``error`` when given, else as it is.
    """
    try:
        log = open(log_path, "ab")  # noqa: SIM115 - closed below; the child keeps its own copy
    except OSError as failure:
        if error is None:
            raise
        raise error(f"cannot write the log {log_path}: {failure.strerror or failure}") from None
    with log:
        try:
            return subprocess.Popen(
                list(args),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env={**os.environ, **env} if env else None,
                start_new_session=True,
            )
        except OSError as failure:
            if error is None:
                raise
            raise error(f"cannot start {args[0]}: {failure.strerror or failure}; log: {log_path}") from None


def wait_until(
    predicate: Callable[[], object],
    timeout: float,
    interval: float = 0.2,
    process: subprocess.Popen | None = None,
    retry_on: type[BaseException] | tuple[type[BaseException], ...] = (),
) -> bool:
    """Poll ``predicate`` until it is truthy (True) or ``timeout`` seconds pass (False).

    With ``process``, return False as soon as it has exited: a helper that died
    at start never becomes ready, and its exit code (``process.returncode``)
    and log say more than a timeout would. An exception of a ``retry_on`` type
    from ``predicate`` counts as "not ready yet"; any other propagates.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            return False
        try:
            if predicate():
                return True
        except retry_on:
            pass
        time.sleep(interval)
    return False


def wait_for_port(
    host: str,
    port: int,
    timeout: float,
    process: subprocess.Popen | None = None,
    interval: float = 0.1,
    settle_sec: float = 0.0,
) -> bool:
    """Wait until ``host:port`` accepts connections; False on timeout or when ``process`` exits.

    ``settle_sec``: once the port answers, ``process`` must still run that much
    later (ssh opens its local forward before it learns that a remote one failed).
    """

    def ready() -> bool:
        if not port_open(host, port):
            return False
        if settle_sec and process is not None:
            time.sleep(settle_sec)
            return process.poll() is None
        return True

    return wait_until(ready, timeout, interval, process)


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections at ``host:port``."""
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return True
    except OSError:
        return False


def port_in_use(host: str, port: int) -> bool:
    """Whether ``host:port`` is bound by someone (bound but not listening counts too).

    Binding finds what a connect would miss; another bind failure (an address
    this host does not have) is raised as the ``OSError`` for the caller to word.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as failure:
            if failure.errno == errno.EADDRINUSE:
                return True
            raise
    return False


def log_tail(path: str | Path, lines: int = 1) -> str:
    """The last ``lines`` non-blank lines of a helper's log ('' when there are none)."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join([line for line in text.splitlines() if line.strip()][-lines:])


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` still runs.

    Zombies do not count: members orphaned by the leader's exit are reaped by
    init (or a subreaper) at its pace, and a group of zombies holds no port.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - someone else's group, alive
        return True
    proc = Path("/proc")
    if not proc.is_dir():  # pragma: no cover - not Linux: the signal test is all there is
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def stop_group(target: int | subprocess.Popen, grace_sec: float = 5.0) -> None:
    """SIGTERM the process group, SIGKILL what is left after ``grace_sec``, reap the leader.

    ``target`` is a :class:`subprocess.Popen` from :func:`spawn_group` or the
    pid of a group leader started earlier (by a previous edgetune run, say):
    its pid is the group id. The whole group is signalled because TVM's
    server and tracker fork ``popen_worker`` children that outlive a parent
    killed alone. Returns once nothing of the group runs, or after the
    SIGKILL wait if something still does.
    """
    process = target if isinstance(target, subprocess.Popen) else None
    pgid = target.pid if isinstance(target, subprocess.Popen) else int(target)

    def reap() -> None:
        if process is not None:
            process.poll()
            return
        try:  # our own child from an int pid: collect it so it does not linger as a zombie
            os.waitpid(pgid, os.WNOHANG)
        except ChildProcessError:
            pass

    for sig, wait in ((signal.SIGTERM, grace_sec), (signal.SIGKILL, KILL_WAIT_SEC)):
        reap()
        if not group_alive(pgid):
            break
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        if _gone_within(pgid, wait, reap):
            break
    # the leader may have died as a zombie while the group was polled: collect it
    if process is not None:
        process.wait(timeout=KILL_WAIT_SEC)
    else:
        reap()


def _gone_within(pgid: int, wait: float, reap: Callable[[], None]) -> bool:
    """Whether group ``pgid`` stops running within ``wait`` seconds (reaping our leader meanwhile)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        reap()
        if not group_alive(pgid):
            return True
        time.sleep(0.05)
    return False


def pid_alive(pid: int, marker: str) -> bool:
    """Whether ``pid`` runs and its command line contains ``marker``.

    The marker guards against pid reuse: a pid read from a record written by an
    earlier run may belong to an unrelated process by now.
    """
    if pid <= 0:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return marker in cmdline
