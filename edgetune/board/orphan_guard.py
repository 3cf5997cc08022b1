"""Run a Python module as ``__main__``; take its process group down if edgetune dies.

``LocalBoard`` starts the loopback tracker and RPC server through this, each as
the leader of its own process group. ``LocalBoard.stop()`` signals those groups
at exit and on Ctrl-C or SIGTERM, but a parent killed with SIGKILL, or a script
that lacks edgetune's signal handlers, never gets to run it, and the board
would keep its ports until someone found it. A daemon thread here notices that
the parent has gone (this process was re-parented) and SIGKILLs the whole
group: the tracker and server hold nothing worth a clean exit. The thread only
sleeps and reads the parent pid, so the server's per-session ``fork()`` (which
copies the calling thread only) is as safe as without it.

Usage: ``python -m edgetune.board.orphan_guard PARENT_PID MODULE [ARG ...]``
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import threading
import time

POLL_SEC = 0.5


def watch_parent(parent_pid: int, poll_sec: float = POLL_SEC) -> None:
    """Block until this process is no longer ``parent_pid``'s child, then kill its group."""
    while os.getppid() == parent_pid:
        time.sleep(poll_sec)
    if os.getpgid(0) == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)  # the server's session workers go too
    os.kill(os.getpid(), signal.SIGKILL)  # not a group leader: take only this process


def main(argv: list[str]) -> None:
    if len(argv) < 2 or not argv[0].isdigit():
        sys.exit("usage: python -m edgetune.board.orphan_guard PARENT_PID MODULE [ARG ...]")
    parent_pid, module = int(argv[0]), argv[1]
    threading.Thread(target=watch_parent, args=(parent_pid,), name="edgetune-orphan-guard", daemon=True).start()
    sys.argv = [module, *argv[2:]]
    if module.startswith(("tvm.exec.", "edgetune.board.rpc_server", "edgetune.board.tracker_server")):
        # tvm_ffi imports torch whenever it is installed (edgetune[torch]): 2-3 s and
        # 250 MB per process that a tracker or RPC server never uses
        sys.modules.setdefault("torch", None)  # type: ignore[arg-type]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
