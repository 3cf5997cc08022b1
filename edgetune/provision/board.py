"""A provisioned board as the tuning loop sees it: a tracker key, plus SSH to look after the board.

``edgetune tune --board NAME`` measures through the tracker like any
:class:`~edgetune.board.base.TrackerBoard`; what SSH adds is given to the
runner as before/after-batch hooks (see :class:`~edgetune.measure.runner.TrackerRunner`):

* heat: the SoC temperature and CPU clocks are read before and after every
  batch (``board-heat.jsonl`` in the run directory, a summary in
  ``summary.json``); a throttling board gets up to ``measure.cool_wait_sec``
  to cool before the next batch;
* a server that died (gone from the tracker, its process dead) is started
  again the way ``edgetune provision`` starts it, a bounded number of times.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from ..board.baseline import BaselineResult
from ..board.base import Board, EmbeddedBoard, MeasureHooks, TrackerBoard
from ..common.run_dir import RunDir
from ..board.rpc_tracker import TrackerAddress, check_device_available, device_counts, tracker_summary
from ..errors import BoardError, EdgetuneError
from ..profile import load_profile
from .detect import BoardFacts, detect
from .heat import HeatReading, read_heat
from .inventory import BoardEntry, Inventory
from .runtime import installed_runtime, remote_dir
from .server import server_config, server_log_tail, server_pid, start_server, stop_server
from .ssh import BoardConnection

#: log of every heat reading of a run, next to measurements.jsonl
HEAT_LOG = RunDir.BOARD_HEAT
#: how often a throttling board is read again while the batch waits
POLL_SEC = 1.0


class ProvisionedBoard(Board, MeasureHooks):
    """A board of the inventory, measured through the tracker and looked after over SSH."""

    def __init__(self, entry: BoardEntry, inventory: Inventory, profile: Any, address: TrackerAddress,
                 notify: Callable[[str], None] = lambda _m: None, max_restarts: int = 3,
                 register_timeout_sec: float = 120.0) -> None:
        self.entry, self.inventory, self.profile, self.address = entry, inventory, profile, address
        self.label = f"board {entry.name} ({entry.host}, tracker {address.host}:{address.port})"
        self.notify = notify
        self.max_restarts = max_restarts
        self.register_timeout_sec = register_timeout_sec
        self.heat_log: Path | None = None
        self.readings = 0
        self.hottest_c: float | None = None
        self.throttle_waits = 0
        self.waited_sec = 0.0
        self.restarts = 0
        self._gave_up = False
        self._restartable = False
        self._no_ssh = False
        self._connection: BoardConnection | None = None
        self._base = ""
        self._facts: BoardFacts | None = None
        self._lock = threading.RLock()

    # -- Board ---------------------------------------------------------------
    def open(self) -> TrackerAddress:
        """Connect over SSH (without it the board is measured as a plain tracker board), then check the key."""
        with self._lock:
            if self._connection is None and not self._no_ssh:
                connection = BoardConnection(self.entry)
                try:
                    self._facts = detect(connection)
                except EdgetuneError as error:
                    connection.close()
                    self._no_ssh = True
                    self.notify(f"WARNING: board {self.entry.name}: no SSH ({' '.join(str(error).split())}); measuring "
                                "without heat readings or server restarts")
                else:
                    self._base = remote_dir(self.entry.remote_dir, self._facts)
                    self._connection = connection
                    # only the server provision started (its key, at the inventory's tracker) is brought back
                    server_key = self.entry.rpc_key(load_profile(self.entry.profile))
                    self._restartable = (server_key, self.inventory.tracker.port) == (self.address.key, self.address.port)
        self.ensure_server()
        check_device_available(self.address)
        return self.address

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def time_baseline(
        self, runtime: str, artifact: str | Path, model_bytes: bytes | None, inputs: Mapping[str, Any], threads: int,
        *, given_as: str = "",
    ) -> BaselineResult:
        """Over the board's SSH connection, in the venv provision made (``provision --baseline`` installs the runtime)."""
        from .baseline import time_baseline_on_board

        with self._lock:
            if self._connection is None:
                return BaselineResult(runtime, error=f"needs SSH to board {self.entry.name}, which this run has not got")
            return time_baseline_on_board(self._connection, self._base, runtime, artifact, model_bytes, inputs,
                                          threads, given_as=given_as)

    # -- runner hooks ----------------------------------------------------------
    def measure_hooks(self) -> MeasureHooks:
        return self

    def before_batch(self) -> None:
        """Bring a dead server back, then let a throttling board cool (bounded)."""
        self.ensure_server()
        reading = self._read("before")
        measure = self.profile.measure
        reason = reading.throttling(measure.max_temp_c, measure.min_freq_ratio) if reading else ""
        if not reason or measure.cool_wait_sec <= 0:
            return
        self.throttle_waits += 1
        started = time.monotonic()
        self.notify(f"board {self.entry.name} is throttling ({reason}); waiting up to "
                    f"{measure.cool_wait_sec:g} s for it to cool")
        while reason and time.monotonic() - started < measure.cool_wait_sec:
            time.sleep(min(POLL_SEC, max(0.0, measure.cool_wait_sec - (time.monotonic() - started))))
            reading = self._read("cooling")
            reason = reading.throttling(measure.max_temp_c, measure.min_freq_ratio) if reading else ""
        waited = time.monotonic() - started
        self.waited_sec += waited
        self.notify(f"board {self.entry.name} cooled in {waited:.0f} s" if not reason else
                    f"board {self.entry.name} still throttling after {waited:.0f} s ({reason}); measuring anyway")

    def after_batch(self) -> None:
        self._read("after")

    def session_lost(self, board: str) -> None:
        """A session died under a candidate: if the server went with it, start it again."""
        self.ensure_server()

    # -- heat --------------------------------------------------------------------
    def _read(self, when: str) -> HeatReading | None:
        if self._no_ssh:
            return None
        try:
            with self._lock:
                reading = read_heat(self._conn())
        except EdgetuneError as error:  # heat is advice: an unreachable sysfs never stops tuning
            self._log({"when": when, "at": round(time.time(), 3), "error": str(error)})
            return None
        self.readings += 1
        if reading.max_temp_c is not None:
            self.hottest_c = max(self.hottest_c or reading.max_temp_c, reading.max_temp_c)
        self._log({"when": when, **reading.to_dict()})
        return reading

    def _log(self, line: dict[str, Any]) -> None:
        if self.heat_log is not None:
            with open(self.heat_log, "a") as handle:
                handle.write(json.dumps({"board": self.entry.name, **line}) + "\n")

    def health_summary(self) -> dict[str, Any]:
        """The summary's ``measurement.board_health`` entry."""
        return {
            "board": self.entry.name, "readings": self.readings, "hottest_c": self.hottest_c,
            "throttle_waits": self.throttle_waits, "waited_sec": round(self.waited_sec, 3),
            "server_restarts": self.restarts, "log": HEAT_LOG,
        }

    # -- the server --------------------------------------------------------------
    def _conn(self) -> BoardConnection:
        if self._connection is None:
            raise BoardError(f"board {self.entry.name}: not opened")
        return self._connection

    def _registered(self) -> int:
        try:
            return device_counts(tracker_summary(self.address, timeout_sec=10), self.address.key)[0]
        except BoardError:
            return 0

    def ensure_server(self) -> None:
        """Start the board's server again if its process is gone (bounded); a live one is left alone."""
        from .verify import wait_registered

        if not self._restartable:
            return
        with self._lock:
            connection = self._conn()
            if server_pid(connection, self._base):
                if self._registered():
                    return
                try:  # alive: maybe between a lost tracker connection and its re-registration
                    wait_registered(self.address, 15.0, lambda: "", lambda: True)
                    return
                except BoardError:
                    stop_server(connection, self._base)
            if self.restarts >= self.max_restarts:
                if not self._gave_up:  # say it once; the runner gives the batch back unmeasured
                    self._gave_up = True
                    self.notify(f"board {self.entry.name}: the RPC server is gone again after {self.max_restarts} "
                                f"restarts; not restarting it (see {self._base}/server.log on the board, then run: "
                                f"edgetune provision {self.entry.name})")
                return
            self.restarts += 1
            self.notify(f"board {self.entry.name}: the RPC server is gone; restarting it "
                        f"(attempt {self.restarts} of {self.max_restarts})")
            self._restart(connection, wait_registered)

    def _restart(self, connection: BoardConnection, wait_registered: Callable[..., int]) -> None:
        """Start the server as ``provision`` does (same config, tunnel checked) and wait for it."""
        from .tunnel import ensure_tunnel
        from .workflow import _check_direct

        facts = self._facts or BoardFacts(arch="")
        deadline = time.monotonic() + 5.0
        while self._registered() and time.monotonic() < deadline:  # the dead server's entry leaves the tracker
            time.sleep(0.2)
        advertise = _check_direct(self.entry, self.inventory) if self.entry.mode == "direct" else ""
        if self.entry.mode == "tunnel":
            ensure_tunnel(self.entry, self.inventory.tracker.port, self.notify)
        version = installed_runtime(connection, self._base).get("tvm", "")
        # the entry's own profile, as provision used: the same config is the same server
        config = server_config(self.entry, load_profile(self.entry.profile), facts, advertise, self.inventory.tracker.port, version)
        pid, _fresh = start_server(connection, self._base, config, facts, lambda _m: None)

        def hint() -> str:
            return f"server log {self._base}/server.log: {server_log_tail(connection, self._base) or 'empty'}"

        wait_registered(self.address, self.register_timeout_sec, hint, lambda: server_pid(connection, self._base) != 0)
        self.notify(f"board {self.entry.name}: RPC server back (pid {pid})")


def provisioned_board(name: str, inventory_file: str | None, profile: Any, address: TrackerAddress,
                      notify: Callable[[str], None]) -> ProvisionedBoard:
    """The inventory's board ``name`` for ``edgetune tune --board``."""
    from .inventory import load_inventory

    inventory = load_inventory(inventory_file)
    return ProvisionedBoard(inventory.get(name), inventory, profile, address, notify)


@dataclass(frozen=True)
class BoardChoice:
    """Where a tune measures, resolved once from ``--board``, ``--inventory``, ``--tracker``, ``--key`` and TVM's variables.

    ``profile`` is the inventory's profile of a named board (the default of ``--profile``);
    :func:`resolve_board` makes the :class:`Board` from it.
    """

    name: str | None = None  # a board of the inventory: measured through its tracker, looked after over SSH
    tracker: str | None = None  # "host:port"; None: the embedded board on this machine
    key: str | None = None  # None: the profile's rpc.key
    profile: str | None = None
    entry: BoardEntry | None = None
    inventory: Inventory | None = None


def choose_board(
    name: str | None = None, inventory_file: str | None = None, tracker: str | None = None, key: str | None = None
) -> BoardChoice:
    """Read the inventory (once) for ``name``; explicit ``tracker``/``key`` win over the board's, then TVM_TRACKER_*."""
    from ..board.rpc_tracker import tracker_defaults

    if not name:
        tracker, key = tracker_defaults(tracker, key)  # TVM_TRACKER_HOST/PORT/KEY, as TVM's RPC tools read them
        return BoardChoice(tracker=tracker, key=key)
    from .inventory import load_inventory

    inventory = load_inventory(inventory_file)
    entry = inventory.get(name)
    host = "127.0.0.1" if inventory.tracker.host in ("0.0.0.0", "") else inventory.tracker.host
    tracker, key = tracker_defaults(tracker or f"{host}:{inventory.tracker.port}", key or entry.rpc_key(load_profile(entry.profile)))
    return BoardChoice(name=name, tracker=tracker, key=key, profile=entry.profile, entry=entry, inventory=inventory)


def resolve_board(choice: BoardChoice, profile: Any, key: str, run_dir: RunDir, notify: Callable[[str], None]) -> Board:
    """The :class:`Board` a tune measures on: a provisioned board, a tracker's devices, or the embedded board."""
    if choice.tracker and choice.entry is not None and choice.inventory is not None:
        board = ProvisionedBoard(choice.entry, choice.inventory, profile, TrackerAddress.parse(choice.tracker, key), notify)
        board.heat_log = run_dir.board_heat
        return board
    if choice.tracker:
        return TrackerBoard.parse(choice.tracker, key)
    return EmbeddedBoard(key=key, num_threads=profile.device.num_threads, log_dir=run_dir.board_logs)
