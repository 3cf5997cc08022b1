"""Talk to a TVM RPC tracker: check it, find free devices, open sessions.

TVM's own client blocks forever when a key has no free device and prints a
bare ``ConnectionRefusedError`` when the tracker is down. These helpers turn
both into one-line :class:`~edgetune.errors.BoardError` messages that name the
address and the command to diagnose it.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import BoardError, NoFreeDeviceError, TrackerUnreachableError


@dataclass(frozen=True)
class TrackerAddress:
    """Where a tracker listens and which device key to ask it for."""

    host: str
    port: int
    key: str

    @classmethod
    def parse(cls, text: str, key: str) -> "TrackerAddress":
        """Parse ``host:port`` (as given to ``--tracker``)."""
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise BoardError(f"--tracker must be HOST:PORT, got {text!r} instead")
        return cls(host, int(port), key)

    @property
    def query_command(self) -> str:
        return f"{sys.executable} -m tvm.exec.query_rpc_tracker --host {self.host} --port {self.port}"

    def __str__(self) -> str:
        return f"{self.host}:{self.port} (key {self.key!r})"


#: TVM's own variables for the tracker (``python -m tvm.exec.query_rpc_tracker``,
#: MetaSchedule's ``RPCConfig``); edgetune reads them as defaults of --tracker and --key.
TRACKER_HOST_ENV = "TVM_TRACKER_HOST"
TRACKER_PORT_ENV = "TVM_TRACKER_PORT"
TRACKER_KEY_ENV = "TVM_TRACKER_KEY"
#: What ``tvm.exec.query_rpc_tracker`` assumes for a variable that is not set.
ENV_DEFAULT_HOST, ENV_DEFAULT_PORT = "127.0.0.1", 9190


def tracker_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """``HOST:PORT`` from ``TVM_TRACKER_HOST``/``TVM_TRACKER_PORT``, or None when neither is set.

    As in ``python -m tvm.exec.query_rpc_tracker``, an unset host is 127.0.0.1 and an
    unset port 9190. A port that is not a number in 1..65535 is a one-line BoardError.
    """
    env = os.environ if environ is None else environ
    host = env.get(TRACKER_HOST_ENV, "").strip()
    port = env.get(TRACKER_PORT_ENV, "").strip()
    if not host and not port:
        return None
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise BoardError(f"{TRACKER_PORT_ENV} must be a port number (1-65535), got {port!r} instead")
    if host.count(":") == 1:  # HOST:PORT where a host was expected (an IPv6 address has more colons)
        raise BoardError(
            f"{TRACKER_HOST_ENV} must be a host name or address, got {host!r} instead; put the port in {TRACKER_PORT_ENV}"
        )
    return f"{host or ENV_DEFAULT_HOST}:{int(port) if port else ENV_DEFAULT_PORT}"


def tracker_defaults(
    tracker: str | None, key: str | None, environ: Mapping[str, str] | None = None
) -> tuple[str | None, str | None]:
    """``(tracker, key)`` with TVM's variables filling what the command line left open.

    An explicit value always wins. ``TVM_TRACKER_KEY`` is the key only when there is a
    tracker (given or from the environment): the embedded loopback board keeps the
    profile's key, so a run on this machine is never recorded under a board's name.
    """
    env = os.environ if environ is None else environ
    tracker = tracker or tracker_from_env(env)
    if tracker and not key:
        key = env.get(TRACKER_KEY_ENV, "").strip() or None
    return tracker, key


def _with_timeout(func: Any, timeout_sec: float, what: str) -> Any:
    """Run ``func`` in a thread; TVM's socket calls have no timeout of their own."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = func()
        except BaseException as error:  # re-raised in the caller's thread
            box["error"] = error

    thread = threading.Thread(target=target, daemon=True, name=f"edgetune-{what}")
    thread.start()
    thread.join(timeout_sec)
    if thread.is_alive():
        raise TimeoutError(f"{what} did not answer within {timeout_sec:g} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def tracker_summary(address: TrackerAddress, timeout_sec: float = 10.0) -> dict[str, Any]:
    """The tracker's summary dict (``server_info``, ``queue_info``)."""
    from tvm import rpc

    # A plain connect first: TVM's client retries a refused connection for a
    # minute, which is the wrong answer to "is the tracker up?".
    try:
        socket.create_connection((address.host, address.port), timeout=min(timeout_sec, 5.0)).close()
    except OSError as error:
        raise TrackerUnreachableError(
            f"cannot reach the RPC tracker at {address.host}:{address.port}: {error.strerror or error}; "
            f"is it running? check with: {address.query_command}"
        ) from None

    def query() -> dict[str, Any]:
        tracker = rpc.connect_tracker(address.host, address.port)
        try:
            return tracker.summary()
        finally:
            tracker.close()

    try:
        return _with_timeout(query, timeout_sec, "tracker")
    except (OSError, TimeoutError, RuntimeError) as error:
        raise TrackerUnreachableError(
            f"cannot reach the RPC tracker at {address.host}:{address.port}: "
            f"{str(error).splitlines()[0] if str(error) else type(error).__name__}; "
            f"is it running? check with: {address.query_command}"
        ) from None


def device_counts(summary: dict[str, Any], key: str) -> tuple[int, int]:
    """``(registered servers, free servers)`` under ``key`` in a tracker summary."""
    registered = sum(
        1 for item in summary.get("server_info", []) if str(item.get("key", "")).split(":", 1)[-1] == key
    )
    free = int(summary.get("queue_info", {}).get(key, {}).get("free", 0))
    return registered, free


def check_device_available(address: TrackerAddress, timeout_sec: float = 10.0) -> tuple[int, int]:
    """Fail with one clear line unless ``address.key`` has a server registered."""
    summary = tracker_summary(address, timeout_sec)
    registered, free = device_counts(summary, address.key)
    if registered == 0:
        keys = sorted(summary.get("queue_info", {}))
        known = ", ".join(keys) if keys else "none"
        raise NoFreeDeviceError(
            f"the tracker at {address.host}:{address.port} has no device under key "
            f"{address.key!r} (keys with devices: {known}); run: {address.query_command}"
        )
    return registered, free


@dataclass
class BoardSession:
    """An RPC session and the board it reached (``host:port`` of the server the tracker chose)."""

    session: Any
    board: str


def request_board(
    address: TrackerAddress, session_timeout_sec: float = 120.0, wait_sec: float = 60.0
) -> BoardSession:
    """A session on one free device under ``address.key``, waiting at most ``wait_sec``.

    Speaks the tracker's REQUEST exchange as TVM's ``TrackerSession.request``
    does, keeping the server address the tracker answers with: that address
    names the board, so records and the summary can say which board measured
    what. A request still queued at the tracker when ``wait_sec`` ends is
    dropped with its connection, so no session is granted to nobody.
    """
    from tvm import rpc
    from tvm.rpc import base

    holder: dict[str, Any] = {}

    def request() -> BoardSession:
        sock = socket.create_connection((address.host, address.port), timeout=10.0)
        holder["sock"] = sock
        sock.settimeout(None)
        magic = base.struct.pack("<i", base.RPC_TRACKER_MAGIC)
        sock.sendall(magic)
        if base.struct.unpack("<i", base.recvall(sock, 4))[0] != base.RPC_TRACKER_MAGIC:
            raise RuntimeError(f"{address.host}:{address.port} is not an RPC tracker")
        base.sendjson(sock, [base.TrackerCode.REQUEST, address.key, "", 1])
        value = base.recvjson(sock)
        if value[0] != base.TrackerCode.SUCCESS:
            raise RuntimeError(f"tracker refused the request: {value!s}")
        url, port, matchkey = value[1]
        session = rpc.connect(url, port, matchkey, session_timeout_sec)
        return BoardSession(session, f"{url}:{port}")

    try:
        return _with_timeout(request, wait_sec, "tracker request")
    except TimeoutError:
        raise NoFreeDeviceError(
            f"no free device under key {address.key!r} at {address.host}:{address.port} "
            f"after {wait_sec:g} s; run: {address.query_command}"
        ) from None
    except (OSError, RuntimeError) as error:
        raise BoardError(
            f"RPC session to {address} failed: {(str(error).splitlines() or [type(error).__name__])[0]}; "
            f"run: {address.query_command}"
        ) from None
    finally:
        sock = holder.get("sock")
        if sock is not None:
            sock.close()


def request_session(
    address: TrackerAddress, session_timeout_sec: float = 120.0, wait_sec: float = 60.0
) -> Any:
    """An RPC session on a device under ``address.key``, waiting at most ``wait_sec``."""
    return request_board(address, session_timeout_sec, wait_sec).session


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (racy by nature; checked after bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
