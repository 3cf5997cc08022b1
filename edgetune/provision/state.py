"""Host-side state of provisioned boards: pid files of the tracker and tunnel keepers.

``edgetune provision`` exits while the tracker and the tunnels it started keep
running; these records let a later ``provision`` reuse them and ``boards
status`` / ``boards teardown`` find them. Everything lives under
``$EDGETUNE_STATE_DIR`` (default ``~/.local/state/edgetune``).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any


def state_dir() -> Path:
    base = os.environ.get("EDGETUNE_STATE_DIR") or Path.home() / ".local" / "state" / "edgetune"
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True)
    return path


def board_dir(name: str) -> Path:
    path = state_dir() / "boards" / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def read_record(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def write_record(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def pid_alive(pid: int, marker: str) -> bool:
    """Whether ``pid`` runs and its command line contains ``marker`` (guards against pid reuse)."""
    if pid <= 0:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return marker in cmdline


def terminate_group(pgid: int, grace_sec: float = 5.0) -> None:
    """SIGTERM then SIGKILL a detached process group we started (its pid is its group id)."""
    for sig, wait in ((signal.SIGTERM, grace_sec), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            _reap(pgid)
            if not _group_running(pgid):
                return
            time.sleep(0.05)


def _group_running(pgid: int) -> bool:
    """Whether any process of the group still runs (zombies waiting for init to reap them do not)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _reap(pid: int) -> None:
    """Collect our own exited child so it does not linger as a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
