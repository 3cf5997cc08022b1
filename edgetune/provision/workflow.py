"""The provisioning steps in order, for one board or several in parallel.

Every step is idempotent: a second ``provision`` reuses the tracker, tunnel,
runtime and server that are already right and restarts only what is missing
or stale (a killed server comes back, a changed TVM version is reinstalled).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from ..board.rpc_tracker import device_counts, tracker_summary
from ..errors import BoardError, EdgetuneError, ProvisionError
from ..profile import load_profile
from .detect import BoardFacts, check_profile, detect, require_python
from .heat import read_heat
from .inventory import BoardEntry, Inventory
from .baseline import ensure_baselines
from .runtime import check_device_runtime, check_preinstalled, ensure_runtime, installed_runtime, remote_dir
from .server import server_config, server_log_tail, server_pid, set_governor, start_server, stop_server
from .ssh import BoardConnection
from .host_tracker import HostTracker, ensure_tracker, running_tracker
from .tunnel import ensure_tunnel, running_tunnel, stop_tunnel
from .verify import round_trip, wait_registered

Log = Callable[[str], None]


@dataclass(frozen=True)
class ProvisionOptions:
    accept_new_host_key: bool = False
    verify: bool = True
    register_timeout_sec: float = 180.0
    baselines: tuple[str, ...] = ()  # runtimes to install beside TVM (provision --baseline), for tune and deploy


@dataclass
class BoardResult:
    """What provisioning one board did (``error`` is set when it failed)."""

    name: str
    profile: str = ""
    key: str = ""
    mode: str = ""
    facts: BoardFacts | None = None
    tvm_version: str = ""
    server_pid: int = 0
    tracker: str = ""
    verified: str = ""
    baselines: dict[str, str] = field(default_factory=dict)  # baseline runtime -> version in the board's venv
    warnings: list[str] = field(default_factory=list)
    error: EdgetuneError | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class GroupResult:
    results: list[BoardResult]

    @property
    def succeeded(self) -> list[BoardResult]:
        return [r for r in self.results if r.ok]

    @property
    def failed(self) -> list[BoardResult]:
        return [r for r in self.results if not r.ok]


def _check_direct(entry: BoardEntry, inventory: Inventory) -> str:
    """The address a direct-mode board dials for the tracker."""
    tracker = inventory.tracker
    advertise = tracker.advertise or ("" if tracker.host in ("127.0.0.1", "0.0.0.0", "localhost") else tracker.host)
    if tracker.host in ("127.0.0.1", "localhost", "::1") or not advertise:
        raise ProvisionError(
            f"board {entry.name} uses mode = \"direct\": the board must reach the tracker over the network, "
            f"but [tracker] host is {tracker.host!r}{' and advertise is unset' if not advertise else ''}; set "
            "[tracker] host = \"0.0.0.0\" and advertise = \"<this host's LAN address>\" (or use tunnel mode)"
        )
    return advertise


def provision_board(entry: BoardEntry, inventory: Inventory, options: ProvisionOptions, log: Log) -> BoardResult:
    """Run every step for one board; failures become ``result.error``, never exceptions."""
    started = time.monotonic()
    result = BoardResult(name=entry.name, mode=entry.mode)

    def step(message: str) -> None:
        log(f"[{entry.name}] {message}")

    def warn(message: str) -> None:
        result.warnings.append(message)
        step(f"WARNING: {message}")

    try:
        profile = load_profile(entry.profile)
        result.profile, result.key = profile.name, entry.rpc_key(profile)
        advertise = _check_direct(entry, inventory) if entry.mode == "direct" else ""
        with BoardConnection(entry, options.accept_new_host_key, step) as connection:
            step(f"connecting to {connection.where}")
            facts = detect(connection)
            result.facts = facts
            step(f"detected {facts.describe()}")
            for message in check_profile(facts, profile, entry.name):
                warn(message)
            require_python(facts, entry)
            # the host tracker before the (slow) runtime upload: a port conflict fails in seconds
            tracker = ensure_tracker(inventory.tracker, step)
            result.tracker = f"{tracker.host}:{tracker.port}"
            base = remote_dir(entry.remote_dir, facts)
            if entry.runtime == "preinstalled":
                result.tvm_version = check_preinstalled(connection, base)
                step(f"runtime: TVM {result.tvm_version} in {base}/venv (preinstalled, version matches)")
            else:
                result.tvm_version, installed = ensure_runtime(connection, facts, base, step)
                step(f"runtime: TVM {result.tvm_version} in {base}/venv" + (" (installed)" if installed else " (already there)"))
            check_device_runtime(connection, base, profile.rpc.device)
            if options.baselines:
                result.baselines = ensure_baselines(connection, facts, base, options.baselines, step, warn)
            if entry.mode == "tunnel":
                ensure_tunnel(entry, tracker.port, step)
            else:
                step(f"WARNING: direct mode: the board's RPC server listens on the network at port {entry.rpc_port}")
            config = server_config(entry, profile, facts, advertise, tracker.port, result.tvm_version)
            if entry.governor:
                set_governor(connection, entry.governor, config.cores, facts, warn)
            result.server_pid, fresh = start_server(connection, base, config, facts, step)
            if not fresh:
                step(f"RPC server already running (pid {result.server_pid})")
            address = tracker.address(result.key)
            step(f"waiting for key {result.key!r} at the tracker")

            def hint() -> str:
                return f"server log {base}/server.log: {server_log_tail(connection, base) or 'empty'}"

            def alive() -> bool:
                return server_pid(connection, base) != 0

            try:
                wait_registered(address, options.register_timeout_sec if fresh else 15.0, hint, alive)
            except ProvisionError:
                if fresh:
                    raise
                step("the running server is not registered; restarting it")
                stop_server(connection, base)
                result.server_pid, _ = start_server(connection, base, config, facts, step)
                wait_registered(address, options.register_timeout_sec, hint, alive)
            if options.verify:
                step("verifying: a kernel built on this host runs on the board")
                trip = round_trip(address, profile)
                result.verified = f"ok (max error {trip.max_error:.1e}, {trip.seconds:.1f} s)"
                step(f"verified {result.verified}")
    except EdgetuneError as error:
        if f"board {entry.name}" not in str(error):  # say which board, also in --all output
            try:
                error = type(error)(f"board {entry.name}: {error}")
            except TypeError:  # pragma: no cover - an error class with another signature
                pass
        result.error = error
        step(f"FAILED: {error}")
    except Exception as error:  # an unexpected failure of one board must not hide the others
        result.error = BoardError(f"board {entry.name}: {type(error).__name__}: {error}")
        step(f"FAILED: {result.error}")
    result.seconds = time.monotonic() - started
    return result


def provision_many(entries: list[BoardEntry], inventory: Inventory, options: ProvisionOptions, log: Log) -> GroupResult:
    """Provision boards in parallel (the tracker is started once, before the threads)."""
    lock = threading.Lock()

    def locked(message: str) -> None:
        with lock:
            log(message)

    if len(entries) > 1:
        try:
            ensure_tracker(inventory.tracker, locked)
        except EdgetuneError as error:
            return GroupResult([BoardResult(name=e.name, mode=e.mode, error=error) for e in entries])
    with ThreadPoolExecutor(max_workers=min(8, len(entries)) or 1, thread_name_prefix="provision") as pool:
        results = list(pool.map(lambda e: provision_board(e, inventory, options, locked), entries))
    return GroupResult(results)


# ----------------------------------------------------------------------------- status / teardown


@dataclass
class BoardStatus:
    name: str
    reachable: str = "?"
    tvm: str = "-"
    server: str = "-"
    registered: str = "-"
    tunnel: str = "-"
    temperature: str = "-"
    governor: str = "-"
    frequency: str = "-"
    detail: str = ""

    @property
    def healthy(self) -> bool:
        return self.reachable == "yes" and self.server.startswith("running") and self.registered.startswith("yes") \
            and self.tunnel in ("up", "n/a")


def board_status(entry: BoardEntry, inventory: Inventory, tracker: HostTracker | None) -> BoardStatus:
    status = BoardStatus(entry.name)
    key = entry.key
    try:
        key = entry.rpc_key(load_profile(entry.profile))
    except EdgetuneError as error:
        status.detail = str(error)
    if entry.mode == "tunnel":
        keeper = running_tunnel(entry)
        status.tunnel = "up" if keeper else "down"
    else:
        status.tunnel = "n/a"
    if tracker is None:
        status.registered = "no tracker"
    else:
        try:
            summary = tracker_summary(tracker.address(key), timeout_sec=5)
            registered, free = device_counts(summary, key)
            status.registered = f"yes ({free} free)" if registered else "no"
        except BoardError:
            status.registered = "tracker down"
    try:
        with BoardConnection(entry) as connection:
            probe = connection.run("echo $HOME", timeout_sec=30, check=True)
            status.reachable = "yes"
            base = remote_dir(entry.remote_dir, BoardFacts(arch="", home=probe.stdout.strip()))
            runtime = installed_runtime(connection, base)
            status.tvm = runtime.get("tvm", "none")
            pid = server_pid(connection, base)
            if pid:
                status.server = f"running ({pid})"
            else:
                # a pid file without its process: the server died (or was killed) since provisioning
                had_pid = connection.run(f"test -s {base}/server.pid", timeout_sec=30).ok
                status.server = "dead" if had_pid else "stopped"
            heat = read_heat(connection)
            status.temperature, status.frequency = heat.temperature_text(), heat.frequency_text()
            status.governor = heat.governors
    except EdgetuneError as error:
        status.reachable = "no"
        status.detail = str(error)
    return status


def teardown_board(entry: BoardEntry, log: Log) -> list[str]:
    """Stop the board's server and tunnel; returns what was stopped. Unreachable boards only lose the tunnel."""
    stopped = []
    try:
        with BoardConnection(entry) as connection:
            probe = connection.run("echo $HOME", timeout_sec=30, check=True)
            base = remote_dir(entry.remote_dir, BoardFacts(arch="", home=probe.stdout.strip()))
            if stop_server(connection, base):
                stopped.append("server")
    except EdgetuneError as error:
        log(f"[{entry.name}] WARNING: cannot reach the board to stop its server: {error}")
    if stop_tunnel(entry):
        stopped.append("tunnel")
    log(f"[{entry.name}] stopped {', '.join(stopped) if stopped else 'nothing (nothing was running)'}")
    return stopped


def current_tracker() -> HostTracker | None:
    return running_tracker()
