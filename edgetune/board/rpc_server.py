"""TVM's RPC server for the loopback board, kept serving when a session's process dies.

TVM 0.27's server runs each RPC session in a forked process. When that
process dies (a candidate that segfaults, or one with an instruction the CPU
lacks), ``tvm.rpc.server._serving`` raises ``RuntimeError("Child process ...
exited unsuccessfully")`` in the thread of the listen loop, and the loop ends:
the server drops its tracker registration and never serves again while its
process lives on. With one server, the embedded board, every later candidate
then waited a minute for a free device and the tune stopped. The runner
already records that candidate as failed (its session ended); here the server
logs the death and goes on to the next session.

Run as ``python -m edgetune.board.rpc_server`` with the arguments of
``python -m tvm.exec.rpc_server`` that the loopback board uses (``--tracker``,
``--key``, ``--host``, ``--port``, ``--port-end``, ``--custom-addr``). The
listen loop runs in this process rather than in TVM's popen worker, so that the
wrapped ``_serving`` is the one it calls.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
from typing import Any, Callable

logger = logging.getLogger("edgetune.board.rpc_server")
#: how long a server waits for its tracker's port before TVM's own retries (every 5 s, for a minute) take over
TRACKER_WAIT_SEC = 60.0


def surviving(serving: Callable[..., None]) -> Callable[..., None]:
    """``tvm.rpc.server._serving`` that logs a session process's death instead of ending the listen loop."""

    def serve(sock: socket.socket, addr: Any, opts: Any, load_library: Any) -> None:
        cwd = os.getcwd()  # _serving changes into the session's directory and, on the error, does not change back
        try:
            serving(sock, addr, opts, load_library)
        except RuntimeError as error:
            logger.warning("the session from %s ended with its process: %s; serving the next one", addr, error)
            os.chdir(cwd)
            try:
                sock.close()
            except OSError:
                pass

    serve.__wrapped__ = serving  # type: ignore[attr-defined]
    return serve


def add_listen_arguments(parser: argparse.ArgumentParser, port: int, port_end: int) -> None:
    """``--host``, ``--port`` and ``--port-end``, as TVM's ``tvm.exec`` commands name them (the server's, the tracker's)."""
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    parser.add_argument("--port", type=int, default=port, help="first port to try")
    parser.add_argument("--port-end", type=int, default=port_end, help="end of the ports to try (exclusive)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m edgetune.board.rpc_server",
        description="TVM's RPC server (the loopback board's), kept serving when a session's process dies.",
    )
    add_listen_arguments(parser, port=9090, port_end=9199)
    parser.add_argument("--tracker", default="", help="HOST:PORT of the RPC tracker to register with")
    parser.add_argument("--key", default="", help="device key to register under")
    parser.add_argument("--custom-addr", default=None, help="address the tracker hands out for this server")
    args = parser.parse_args(argv)
    if args.tracker and not args.key:
        parser.error("--tracker needs --key: the tracker hands devices out by key")
    return args


def main(argv: list[str] | None = None) -> None:
    from tvm.rpc import server

    from ..common.process import wait_for_port

    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    server._serving = surviving(server._serving)  # pylint: disable=protected-access
    tracker = None
    if args.tracker:
        host, port = args.tracker.rsplit(":", 1)
        tracker = (host, int(port))
        # started beside its tracker (LocalBoard): TVM's first connection, refused, would retry only after 5 s
        wait_for_port(host, int(port), TRACKER_WAIT_SEC, interval=0.05)
    state = server.PopenRPCServerState(
        args.host, args.port, args.port_end, False, tracker, args.key, None, args.custom_addr,
    )
    state.thread.join()


if __name__ == "__main__":
    main()
