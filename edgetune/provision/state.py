"""Host-side state of provisioned boards: pid files of the tracker and tunnel keepers.

``edgetune provision`` exits while the tracker and the tunnels it started keep
running; these records let a later ``provision`` reuse them and ``boards
status`` / ``boards teardown`` find them. Everything lives under
``$EDGETUNE_STATE_DIR`` (default ``~/.local/state/edgetune``). A recorded
process is checked with :func:`edgetune.common.process.pid_alive` and stopped,
record and all, with :func:`stop_recorded`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..common.process import stop_group


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


def stop_recorded(path: Path, pid: int | None) -> bool:
    """Forget the record at ``path`` and stop the process group ``pid`` leads; whether one ran.

    ``pid`` is the caller's check of the record (alive, with its marker), made before it goes.
    """
    path.unlink(missing_ok=True)
    if pid is None:
        return False
    stop_group(pid)
    return True
