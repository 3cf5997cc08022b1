"""Where candidates run: a :class:`Board` is opened, gives a tracker address, and is closed.

The tuning loop talks to every board the same way (through a TVM tracker and
a device key) and never asks which kind it has. Two kinds exist today:

* :class:`TrackerBoard`: boards already registered with a tracker under a key
  (``--tracker HOST:PORT --key KEY``, or a provisioned board).
* :class:`EmbeddedBoard`: edgetune's own loopback tracker and RPC server on
  this machine, standing in for a board (the default of ``edgetune tune``).

A farm of several boards under one key is a :class:`TrackerBoard` too: the
tracker hands out its devices.

Lifecycle, in call order: :meth:`Board.check_profile` (before anything is
started: a profile the board cannot run is bad input), :meth:`Board.open`
(returns the tracker address), :meth:`Board.close` (safe to call twice).
Boards are context managers: ``with board as address: ...``. While open, a
board can time a baseline runtime beside the tuned model
(:meth:`Board.time_baseline`) where edgetune can start a process on it.
"""

from __future__ import annotations

import platform
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Mapping

from .baseline import BaselineResult
from ..errors import BoardError
from .rpc_tracker import TrackerAddress, check_device_available


class MeasureHooks:
    """What a board that can be looked after (edgetune.provision.board) is told by the runner.

    Each call is advice: an exception from a hook is recorded in ``stats.errors``, never a failed batch.
    """

    def before_batch(self) -> None:
        """Before a batch: e.g. bring a dead server back, let a hot board cool."""

    def after_batch(self) -> None:
        """After a batch's last result: e.g. read the board's temperature."""

    def session_lost(self, board: str) -> None:
        """A session to ``board`` (host:port) died under a candidate."""


class Board(ABC):
    """Where candidates are measured, as the tuning loop sees it."""

    #: shown in progress and written to the summary's ``board.label``
    label: str = "board"

    def measure_hooks(self) -> MeasureHooks | None:
        """What the runner tells about each batch and lost session; None: a board nobody looks after."""
        return None

    def health_summary(self) -> dict[str, Any] | None:
        """The summary's ``measurement.board_health`` (heat, waits, restarts); None where nothing was watched."""
        return None

    @property
    def awaits_measurements(self) -> bool:
        """True when the device shares this host's CPU, so timing a batch while the next is built skews it."""
        return False

    def check_profile(self, profile: Any) -> None:
        """Raise :class:`~edgetune.errors.BoardError` if this board cannot run the profile's code."""

    def time_baseline(
        self, runtime: str, artifact: str | Path, model_bytes: bytes | None, inputs: Mapping[str, Any], threads: int,
        *, given_as: str = "",
    ) -> BaselineResult:
        """``runtime`` timed beside ``artifact`` on this board (tuning.baseline); never raises: the result says why not.

        Only a board edgetune can run a process on can do it: a tracker's devices cannot.
        """
        return BaselineResult(
            runtime, error=f"runs on the embedded board or on a provisioned board (--board NAME, reached over SSH), "
            f"not on {self.label}, where edgetune cannot start a process"
        )

    @abstractmethod
    def open(self) -> TrackerAddress:
        """Make the board ready; return the tracker address candidates are measured through."""

    def close(self) -> None:
        """Release what :meth:`open` started. Safe to call twice."""

    def __enter__(self) -> TrackerAddress:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


class TrackerBoard(Board):
    """One or more devices already registered with a TVM tracker under a key."""

    def __init__(self, address: TrackerAddress) -> None:
        self.address = address
        self.label = f"tracker {address.host}:{address.port}"

    @classmethod
    def parse(cls, tracker: str, key: str) -> "TrackerBoard":
        """From ``--tracker HOST:PORT`` and ``--key``."""
        return cls(TrackerAddress.parse(tracker, key))

    def open(self) -> TrackerAddress:
        check_device_available(self.address)
        return self.address


class EmbeddedBoard(Board):
    """A loopback tracker and RPC server on this machine (see :mod:`edgetune.board.local`)."""

    label = "loopback board (embedded)"

    def __init__(
        self, key: str = "local", num_threads: int = 0, log_dir: str | Path | None = None, servers: int = 1
    ) -> None:
        self.key = key
        self.num_threads = num_threads
        self.log_dir = log_dir
        self.servers = servers  # several stand in for a farm of boards under one key
        self._local: Any = None

    @property
    def awaits_measurements(self) -> bool:
        return True

    def check_profile(self, profile: Any) -> None:
        check_runnable_on_host(profile)

    def open(self) -> TrackerAddress:
        from .local import LocalBoard

        if self._local is None:
            self._local = LocalBoard(
                key=self.key, num_threads=self.num_threads, log_dir=self.log_dir, servers=self.servers
            )
        return self._local.start()

    def close(self) -> None:
        if self._local is not None:
            self._local.stop()

    def time_baseline(
        self, runtime: str, artifact: str | Path, model_bytes: bytes | None, inputs: Mapping[str, Any], threads: int,
        *, given_as: str = "",
    ) -> BaselineResult:
        """In this process: the embedded board is this machine."""
        from .baseline import compare_with_baseline

        return compare_with_baseline(runtime, artifact, model_bytes, inputs, threads, given_as=given_as)

    @property
    def pids(self) -> list[int]:
        """Process-group ids of the running tracker and server (empty when closed)."""
        return self._local.pids if self._local is not None else []


def check_runnable_on_host(profile: Any) -> None:
    """The embedded board runs code for this host's CPU, and for its CUDA GPU when it has one."""
    same_host = not profile.is_cross_compiled and profile.device.arch in ("", platform.machine())
    if same_host and profile.rpc.device == "cpu":
        check_instructions_offered(profile)
        return
    if same_host and profile.rpc.device == "cuda":
        if host_has_cuda_gpu():
            return
        raise BoardError(
            f"profile '{profile.name}' measures on a CUDA GPU and this host has none that TVM can open "
            f"(tvm.cuda(0).exist is False: no NVIDIA GPU or driver): pass --tracker HOST:PORT (and --key) "
            f"of a GPU machine's RPC server, or use --profile host"
        )
    raise BoardError(
        f"profile '{profile.name}' targets {profile.device.arch} ({profile.rpc.device}); the built-in "
        f"loopback board runs {platform.machine()} CPU code (and CUDA code on a host with an NVIDIA GPU) only: "
        f"pass --tracker HOST:PORT (and --key) of a real board, or use --profile host"
    )


def check_instructions_offered(profile: Any) -> None:
    """Refuse, in one line, a profile whose code uses instructions this machine's CPU does not offer.

    Its first candidate would kill the loopback board's server with SIGILL, and the tune would wait a minute for
    a board that no longer serves before it stopped.
    """
    from ..common.cpu_family import _llvm_features, unavailable_instructions

    target = profile.tvm_target()
    missing = unavailable_instructions(_llvm_features(target))
    if missing:
        mcpu = str(target.attrs.get("mcpu", "") or "a generic CPU")
        raise BoardError(
            f"profile '{profile.name}' compiles for {mcpu} with {', '.join(missing)}, which this machine's CPU does "
            f"not offer (its /proc/cpuinfo flags): the loopback board would crash on the first candidate (illegal "
            f"instruction); use --profile host (mcpu \"native\": this CPU, less what it lacks) or add "
            f"\"-{missing[0]}\" to the profile's target.mattr"
        )


def host_has_cuda_gpu() -> bool:
    """Whether TVM's runtime opens CUDA device 0 here (the wheels are built with CUDA; a driver and GPU are needed)."""
    try:
        import tvm

        return bool(tvm.cuda(0).exist)
    except Exception:  # no libcuda, or a runtime without CUDA: no GPU for the embedded board
        return False


