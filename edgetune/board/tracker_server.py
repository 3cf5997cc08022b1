"""TVM's RPC tracker for the loopback board, served in this process.

``python -m tvm.exec.rpc_tracker`` serves the tracker from a popen worker: a
second Python process that imports all of TVM again (torch too, wherever
``edgetune[torch]`` is installed). On a 2-core host that was about 6 s of CPU
and of wall clock before the tracker answered, at the start of every tune on the
embedded board. Here TVM's own tracker (``tvm.rpc.tracker.PopenTrackerServerState``:
the listening socket and ``TrackerServerHandler`` on an event-loop thread, what
the popen worker runs) is served by the process ``orphan_guard`` started, as
``edgetune.board.rpc_server`` does for the server.

Run as ``python -m edgetune.board.tracker_server --host H --port P --port-end E``.
A port it cannot bind exits 1 with one line: the loopback board then tries another.
"""

from __future__ import annotations

import argparse
import logging
import sys

from .rpc_server import add_listen_arguments


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m edgetune.board.tracker_server",
        description="TVM's RPC tracker (the loopback board's), served in this process, not in a popen worker.",
    )
    add_listen_arguments(parser, port=9190, port_end=9199)
    args = parser.parse_args(argv)
    if args.port_end <= args.port:
        parser.error(f"--port-end must be above --port, got {args.port_end} for --port {args.port} instead")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    from tvm.rpc.tracker import PopenTrackerServerState

    try:
        state = PopenTrackerServerState(args.host, args.port, args.port_end)
    except (OSError, ValueError) as error:
        print(f"edgetune tracker: cannot listen on {args.host} in ports [{args.port}, {args.port_end}): {error}",
              file=sys.stderr)
        return 1
    print(f"edgetune tracker: listening on {args.host}:{state.port}", flush=True)
    state.thread.join()  # until the process group is signalled (LocalBoard.stop) or a STOP with the key
    return 0


if __name__ == "__main__":
    sys.exit(main())
