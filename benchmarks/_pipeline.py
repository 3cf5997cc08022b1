"""Shared by the benchmark scripts: the product's tuning pipeline, with only the compared component changed (issue 15).

Every benchmark tunes through :func:`edgetune.tuning.run_tune`, exactly what
``edgetune tune`` runs; a benchmark that compares one component changes that
component only, through the profile's settings (:func:`bench_profile`) or
:class:`edgetune.tuning.Components`. ``tests/test_single_tune_tasks.py``
checks that nothing else calls ``ms.tune_tasks``.

* :func:`bench_profile`: a device profile (``host`` by default) with the
  benchmark's overrides, validated like a profile file, on the target the
  earlier figures were measured with.
* :class:`SharedBoard` / :func:`shared_board`: one embedded loopback board
  (tracker + RPC server) for the whole benchmark process; every run measures
  on it (``TuneOptions.board``) and none stops it.
* :class:`TuningClock`: seconds since the pipeline started tuning, for curves
  drawn by a benchmark's own measure callback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from pathlib import Path
from typing import Any, Iterator

from edgetune.board.base import EmbeddedBoard
from edgetune.profile import DeviceProfile, load_profile
from edgetune.tuning import ProgressSink, TuneProgress

#: the target the earlier figures in RESULTS.md were measured with: generic x86-64 code for 2 cores
#: (the host profile's ``mcpu = "native"`` makes faster kernels, so latencies would not compare)
BENCH_TARGET = {"kind": "llvm", "num-cores": 2}
#: what the earlier figures were measured without: no untuned default-schedule trial, no transferred seeds
AS_BEFORE = {"default_schedule": False, "transfer": "off"}
#: stock MetaSchedule's evolutionary search: no sampling, no early stop, its fixed 5 % random share
STOCK_SEARCH = {"sampler": "none", "early_stop": "none", "exploration": "fixed"}


def bench_profile(name: str = "host", *, target: dict[str, Any] | None = BENCH_TARGET, **sections: dict[str, Any]) -> DeviceProfile:
    """Profile ``name`` with ``sections`` merged key by key (``tuning={"cost_model": "xgb"}``), then ``target``.

    The overrides are validated like a profile file; ``target`` (None keeps
    the profile's) replaces the ``[target]`` table as a whole. A peak GFLOPS
    the profile estimated for this machine's CPU (``mcpu = "native"``) does
    not describe another target's code, so it is dropped with it (unknown, as
    in the earlier figures).
    """
    profile = load_profile(name)
    if sections:
        profile = profile.with_overrides(**sections)
    if target is not None:
        device = profile.device
        if "device.peak_gflops" in profile.resolved and "peak_gflops" not in sections.get("device", {}):
            device = dataclasses.replace(device, peak_gflops=None)
        profile = dataclasses.replace(profile, target=dict(target), device=device)
    return profile


class SharedBoard(EmbeddedBoard):
    """The embedded loopback board, started once for a benchmark process.

    ``run_tune`` opens its board and closes it when the run ends; this one
    stays up when a run closes it, so every configuration is measured on the
    same tracker and RPC server. :meth:`stop` stops it.
    """

    def close(self) -> None:
        """A run is over, the board is not: see :meth:`stop`."""

    def stop(self) -> None:
        super().close()


@contextlib.contextmanager
def shared_board(profile: DeviceProfile, log_dir: str | Path | None = None) -> Iterator[SharedBoard]:
    """A started :class:`SharedBoard` for ``profile`` (its key and threads), stopped on exit."""
    board = SharedBoard(
        key=profile.rpc.key,
        num_threads=profile.device.num_threads,
        log_dir=log_dir or tempfile.mkdtemp(prefix="bench-board-"),
    )
    board.check_profile(profile)
    try:
        board.open()
        yield board
    finally:
        board.stop()


def fresh_dir(prefix: str) -> Path:
    """A new, empty run directory (its ``history.db`` is the run's fresh history)."""
    return Path(tempfile.mkdtemp(prefix=prefix))


class TuningClock(ProgressSink):
    """Progress sink that keeps the run's progress: :meth:`elapsed` is seconds since tuning started."""

    def __init__(self) -> None:
        self.progress: TuneProgress | None = None

    def on_phase(self, progress: TuneProgress) -> None:
        if progress.tasks:  # the run's own record, not an announcement before the tasks exist
            self.progress = progress

    def elapsed(self) -> float:
        return self.progress.elapsed if self.progress is not None else 0.0
