"""A loopback tracker and RPC server on this machine, standing in for a board.

This is the embedded default of ``edgetune tune``: with no ``--tracker`` given,
edgetune starts both here, measures through them exactly as through a real
board, and stops them at exit. Both listen on 127.0.0.1 only (TVM's RPC is
unauthenticated). Each runs in its own session (process group), and is stopped
by signalling the whole group: killing only the parent would leave the server's
per-session children behind. Both serve TVM's own code in the process started
(``tracker_server``, ``rpc_server``), not in a popen worker that imports TVM
again. Both run under ``orphan_guard``, which kills the group if edgetune dies
without stopping them (``kill -9``).
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ..common.process import spawn_group, stop_group, wait_until
from ..errors import BoardError
from .rpc_tracker import TrackerAddress, device_counts, free_port, tracker_summary

LOOPBACK = "127.0.0.1"


class LocalBoard:
    """Start a loopback tracker plus one RPC server registered under ``key``.

    Use as a context manager; ``stop()`` is also registered with ``atexit``.

    Parameters
    ----------
    key:
        Device key the server registers under (``local`` for the host profile).
    num_threads:
        ``TVM_NUM_THREADS`` for the server, like the profile's device threads.
    log_dir:
        Where ``tracker.log`` and ``server.log`` go; a temporary dir by default.
    startup_timeout_sec:
        How long to wait for the server to register.
    servers:
        RPC servers registered under ``key``: several stand in for a farm of
        boards (they share this host's cores, so only board-bound time, such
        as the profile's ``cooldown_sec``, overlaps).
    """

    def __init__(
        self,
        key: str = "local",
        num_threads: int = 0,
        log_dir: str | Path | None = None,
        startup_timeout_sec: float = 60.0,
        servers: int = 1,
    ) -> None:
        if servers < 1:
            raise ValueError(f"servers must be >= 1, got {servers!r} instead")
        self.servers = servers
        self.key = key
        self.num_threads = num_threads
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="edgetune-board-"))
        self.startup_timeout_sec = startup_timeout_sec
        self.address: TrackerAddress | None = None
        self._tracker: subprocess.Popen | None = None
        self._servers: list[subprocess.Popen] = []

    # -- lifecycle -------------------------------------------------------
    def __enter__(self) -> "LocalBoard":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> TrackerAddress:
        """Start the tracker and server; return the tracker's address."""
        if self.address is not None:
            return self.address
        self.log_dir.mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        try:
            # the first server starts beside the tracker (each imports TVM, about 3 s) and waits for its port
            self.address = self._start_tracker(with_server=True)
            for _ in range(self.servers - 1):
                self.add_server()
        except BaseException:
            self.stop()
            raise
        return self.address

    def stop(self) -> None:
        """Stop server and tracker (whole process groups). Safe to call twice."""
        for process in (*self._servers, self._tracker):
            if process is not None:
                stop_group(process)
        self._servers = []
        self._tracker = None
        self.address = None

    @property
    def pids(self) -> list[int]:
        """Process-group ids of the running tracker and server."""
        return [p.pid for p in (self._tracker, *self._servers) if p is not None]

    @property
    def server_processes(self) -> list[subprocess.Popen]:
        """The RPC servers, in start order (a test may kill one to play a board that goes away)."""
        return list(self._servers)

    # -- internals -------------------------------------------------------
    def _spawn(self, args: list[str], log_name: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        return spawn_group(
            # orphan_guard: the group dies with this process even if stop() never runs
            [sys.executable, "-m", "edgetune.board.orphan_guard", str(os.getpid()), *args],
            self.log_dir / log_name,
            env=env,
            cwd=self.log_dir,
            error=BoardError,
        )

    def restart_tracker(self) -> None:
        """Stop the tracker and start a new one on the same port (the servers register again by themselves)."""
        if self.address is None or self._tracker is None:
            raise BoardError("the loopback board is not started")
        stop_group(self._tracker)
        self._tracker = None
        self._start_tracker(port=self.address.port)

    def _start_tracker(self, port: int | None = None, with_server: bool = False) -> TrackerAddress:
        """Start the tracker (on ``port`` or a free one) and wait until it answers.

        ``with_server``: the first RPC server is started at once beside it, and waited for until it registers.
        """
        for _attempt in range(5 if port is None else 1):
            port = port or free_port(LOOPBACK)
            # --port-end port+1: never let TVM silently bind a different port
            process = self._spawn(
                ["edgetune.board.tracker_server", "--host", LOOPBACK, "--port", str(port), "--port-end", str(port + 1)],
                "tracker.log",
            )
            self._tracker = process
            address = TrackerAddress(LOOPBACK, port, self.key)
            server = self._spawn_server(address) if with_server else None
            # the summary is a non-empty dict once it answers; an exit during the wait
            # means the port raced away: try another one
            if wait_until(lambda: tracker_summary(address, timeout_sec=2), 30, process=process, retry_on=BoardError):
                if server is not None:
                    self._await_registration(address, server, before=0)
                return address
            stop_group(process)
            if server is not None:
                stop_group(server)
                self._servers.remove(server)
        raise BoardError(f"could not start a loopback RPC tracker; see {self.log_dir / 'tracker.log'}")

    def add_server(self) -> subprocess.Popen:
        """Start one more RPC server under the key and wait until the tracker lists it."""
        if self.address is None:
            raise BoardError("the loopback board is not started")
        address = self.address
        before = device_counts(tracker_summary(address), self.key)[0]
        server = self._spawn_server(address)
        self._await_registration(address, server, before)
        return server

    def _spawn_server(self, address: TrackerAddress) -> subprocess.Popen:
        """One more RPC server process, registering with ``address`` once it answers (not waited for)."""
        log_name = self._server_log(len(self._servers))
        port = free_port(LOOPBACK)
        env = {"TVM_NUM_THREADS": str(self.num_threads)} if self.num_threads else {}
        server = self._spawn(
            [
                "edgetune.board.rpc_server",
                "--tracker",
                f"{address.host}:{address.port}",
                "--key",
                self.key,
                "--host",
                LOOPBACK,
                "--port",
                str(port),
                "--port-end",
                str(port + 100),
            ],
            log_name,
            env,
        )
        self._servers.append(server)
        return server

    @staticmethod
    def _server_log(index: int) -> str:
        return "server.log" if not index else f"server-{index}.log"

    def _await_registration(self, address: TrackerAddress, server: subprocess.Popen, before: int) -> None:
        """Wait until the tracker lists one more server under the key than ``before``; BoardError if it never does."""
        log_name = self._server_log(self._servers.index(server))

        def registered() -> bool:
            return device_counts(tracker_summary(address), self.key)[0] > before

        if wait_until(registered, self.startup_timeout_sec, process=server, retry_on=BoardError):
            return
        if server.poll() is not None:
            raise BoardError(
                f"the loopback RPC server exited with code {server.returncode}; see {self.log_dir / log_name}"
            )
        raise BoardError(
            f"the loopback RPC server did not register under key {self.key!r} within "
            f"{self.startup_timeout_sec:g} s; see {self.log_dir / log_name}"
        )
