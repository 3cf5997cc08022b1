"""The embedded loopback board never outlives the process that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil

STARTER = textwrap.dedent(
    """
    import sys, time
    from edgetune.board.local import LocalBoard

    board = LocalBoard(key="orphan-test", log_dir=sys.argv[1])
    board.start()
    print(*board.pids, flush=True)
    time.sleep(600)
    """
)


def _live_members(pgids: list[int]) -> list[str]:
    """Command lines of the non-zombie processes in these process groups."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.info["pid"]) in pgids:
                found.append(" ".join(proc.info["cmdline"] or []))
        except (psutil.Error, ProcessLookupError):
            continue
    return found


def test_board_dies_with_a_parent_killed_by_sigkill(tmp_path):
    """``kill -9`` skips every exit handler; the orphan guard still stops tracker and server."""
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    pgids: list[int] = []
    try:
        line = starter.stdout.readline()
        pgids = [int(word) for word in line.split()]
        assert len(pgids) == 2, f"starter printed {line!r}"
        members = _live_members(pgids)
        assert any("edgetune.board.tracker_server" in m for m in members), members
        assert any("edgetune.board.rpc_server" in m for m in members), members
        # both serve TVM's code in the process started: no popen worker importing TVM (and torch) a second time
        assert not any("popen_worker" in m for m in members), members

        starter.kill()
        starter.wait(timeout=10)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and _live_members(pgids):
            time.sleep(0.2)
        assert _live_members(pgids) == []
    finally:
        starter.kill()
        for pgid in pgids:  # never leak a board from a failed run of this test
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_orphan_guard_rejects_a_missing_parent_pid():
    result = subprocess.run(
        [sys.executable, "-m", "edgetune.board.orphan_guard", "tvm.exec.rpc_tracker"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode != 0
    assert "usage: python -m edgetune.board.orphan_guard PARENT_PID MODULE" in result.stderr


def test_tracker_server_on_a_taken_port_exits_with_one_line():
    """The loopback board tries another port when its tracker cannot bind: that needs an exit, not a hang."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "edgetune.board.tracker_server", "--port", str(port), "--port-end", str(port + 1)],
            capture_output=True, text=True, timeout=60,
        )
    assert result.returncode == 1, result
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"edgetune tracker: cannot listen on 127.0.0.1 in ports [{port}, {port + 1})"), line
