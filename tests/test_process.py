"""edgetune.common.process against real processes: spawn, readiness, group stop."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from edgetune.common.process import (
    group_alive,
    log_tail,
    pid_alive,
    port_in_use,
    port_open,
    spawn_group,
    stop_group,
    wait_for_port,
    wait_until,
)
from edgetune.errors import BoardError, ProvisionError

# a parent that forks a grandchild (as TVM's server forks popen workers), prints its pid, then sleeps
FORKER = textwrap.dedent(
    """
    import signal, subprocess, sys, time
    if sys.argv[1] == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print("grandchild", child.pid, flush=True)
    time.sleep(600)
    """
)

LISTENER = textwrap.dedent(
    """
    import socket, sys, time
    time.sleep(0.3)
    server = socket.socket()
    server.bind(("127.0.0.1", int(sys.argv[1])))
    server.listen(1)
    print("listening", flush=True)
    time.sleep(600)
    """
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _grandchild_pid(log: Path, process: subprocess.Popen) -> int:
    assert wait_until(lambda: "grandchild" in log_tail(log), 30, 0.05, process), log.read_text()
    return int(log_tail(log).split()[1])


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture
def cleanup():
    """Groups a failed test must not leave behind."""
    pgids: list[int] = []
    yield pgids
    for pgid in pgids:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("mode", ["polite", "stubborn"])
def test_stop_group_takes_the_grandchild_too(tmp_path: Path, cleanup: list[int], mode: str) -> None:
    log = tmp_path / "forker.log"
    process = spawn_group([sys.executable, "-c", FORKER, mode], log)
    cleanup.append(process.pid)
    assert os.getpgid(process.pid) == process.pid  # its own group
    grandchild = _grandchild_pid(log, process)
    assert os.getpgid(grandchild) == process.pid
    assert group_alive(process.pid)

    started = time.monotonic()
    stop_group(process, grace_sec=0.5)  # stubborn ignores SIGTERM: SIGKILL after the grace
    assert time.monotonic() - started < 10
    assert process.returncode == (-signal.SIGKILL if mode == "stubborn" else -signal.SIGTERM)
    assert not _running(grandchild)
    assert not group_alive(process.pid)
    stop_group(process)  # a second stop is a no-op


def test_stop_group_by_pid_reaps_our_own_child(tmp_path: Path, cleanup: list[int]) -> None:
    """The record path: only the pid of a group leader is known (it may be our child or not)."""
    log = tmp_path / "forker.log"
    process = spawn_group([sys.executable, "-c", FORKER, "polite"], log)
    cleanup.append(process.pid)
    grandchild = _grandchild_pid(log, process)
    stop_group(process.pid)
    assert not _running(process.pid)  # reaped, not a zombie
    assert not _running(grandchild)
    assert not group_alive(process.pid)
    stop_group(process.pid)  # the group is gone: nothing to do


def test_wait_for_port_fails_fast_when_the_process_exits(tmp_path: Path, cleanup: list[int]) -> None:
    log = tmp_path / "dies.log"
    process = spawn_group([sys.executable, "-c", "import sys; print('first'); print('bind failed'); sys.exit(3)"], log)
    cleanup.append(process.pid)
    started = time.monotonic()
    assert not wait_for_port("127.0.0.1", _free_port(), 60, process=process)
    assert time.monotonic() - started < 10
    assert process.returncode == 3
    assert log_tail(log) == "bind failed"
    assert log_tail(log, 2) == "first\nbind failed"


def test_wait_for_port_sees_a_real_listener(tmp_path: Path, cleanup: list[int]) -> None:
    port = _free_port()
    log = tmp_path / "listener.log"
    process = spawn_group([sys.executable, "-c", LISTENER, str(port)], log, env={"EDGETUNE_TEST_MARK": "x"})
    cleanup.append(process.pid)
    assert not port_open("127.0.0.1", port)
    assert wait_for_port("127.0.0.1", port, 30, process=process, settle_sec=0.2)
    # read only now: Popen returns when exec closes the child's close-on-exec pipe, before the kernel
    # has set up the new program's environment, and /proc/PID/environ then reads empty (CI saw b"")
    environ = Path(f"/proc/{process.pid}/environ").read_bytes().split(b"\0")
    assert b"EDGETUNE_TEST_MARK=x" in environ and any(v.startswith(b"PATH=") for v in environ)  # env adds
    assert port_open("127.0.0.1", port)
    assert port_in_use("127.0.0.1", port)
    assert log_tail(log) == "listening"
    stop_group(process)
    assert not port_open("127.0.0.1", port)


def test_wait_for_port_times_out_while_the_process_runs(tmp_path: Path, cleanup: list[int]) -> None:
    process = spawn_group([sys.executable, "-c", "import time; time.sleep(600)"], tmp_path / "idle.log")
    cleanup.append(process.pid)
    started = time.monotonic()
    assert not wait_for_port("127.0.0.1", _free_port(), 0.5, process=process)
    assert 0.4 < time.monotonic() - started < 5
    assert process.poll() is None  # a timeout leaves the process to the caller
    stop_group(process)


def test_wait_until_retries_only_the_named_errors() -> None:
    calls: list[int] = []

    def flaky() -> bool:
        calls.append(1)
        if len(calls) < 3:
            raise BoardError("not yet")
        return True

    assert wait_until(flaky, 10, 0.01, retry_on=BoardError)
    assert len(calls) == 3
    with pytest.raises(ValueError):
        wait_until(lambda: int("x"), 10, 0.01, retry_on=BoardError)
    assert not wait_until(lambda: False, 0.1, 0.01)


def test_spawn_errors_become_the_callers_type(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-program")
    with pytest.raises(FileNotFoundError):
        spawn_group([missing], tmp_path / "x.log")
    with pytest.raises(ProvisionError, match=r"cannot start .*no-such-program: No such file or directory; log: "):
        spawn_group([missing], tmp_path / "x.log", error=ProvisionError)
    with pytest.raises(BoardError, match="cannot write the log"):
        spawn_group([sys.executable, "-c", "pass"], tmp_path / "no-dir" / "x.log", error=BoardError)


def test_port_in_use_sees_a_bound_socket_that_does_not_listen() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        assert port_in_use("127.0.0.1", port)
        assert not port_open("127.0.0.1", port)
    assert not port_in_use("127.0.0.1", port)
    with pytest.raises(OSError):
        port_in_use("192.0.2.1", port)  # TEST-NET: not an address of this host


def test_pid_alive_needs_the_marker(tmp_path: Path, cleanup: list[int]) -> None:
    process = spawn_group([sys.executable, "-c", "import time; time.sleep(600)", "edgetune-marker-42"], tmp_path / "m.log")
    cleanup.append(process.pid)
    # between fork and exec the child still shows this process's command line
    assert wait_until(lambda: pid_alive(process.pid, "edgetune-marker-42"), 30, 0.02, process)
    assert not pid_alive(process.pid, "edgetune-marker-43")  # a reused pid runs something else
    assert not pid_alive(0, "edgetune-marker-42")
    stop_group(process)
    assert not pid_alive(process.pid, "edgetune-marker-42")
