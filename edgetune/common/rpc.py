"""A module uploaded to a board through an RPC session, removed again whatever happens.

Measuring a candidate, checking a deployed model and verifying a provisioned
board all upload a shared library, load it and run it. If running it raised,
the uploaded file used to stay on the board; :func:`remote_module` removes it
in every case (a dead session's failure to remove is ignored: the server's
temporary directory goes with the session).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def unique_remote_name(prefix: str) -> str:
    """A file name no other process or thread of this host uploads at the same time."""
    return f"{prefix}-{os.getpid()}-{threading.get_ident()}-{time.monotonic_ns()}.so"


@contextmanager
def remote_module(session: Any, artifact: str | Path, remote_name: str | None = None) -> Iterator[Any]:
    """Upload ``artifact`` through ``session``, yield the loaded remote module, always remove the upload."""
    name = remote_name or unique_remote_name("edgetune")
    session.upload(str(artifact), name)
    try:
        yield session.load_module(name)
    finally:
        try:
            session.remove(name)
        except Exception:  # noqa: BLE001 - best effort: a dead session's temp dir goes with it
            pass
