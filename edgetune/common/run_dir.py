"""The run directory (``edgetune tune --out DIR``): every file in it named once.

``tune`` writes it, ``report`` and ``deploy`` read it; each reaches a file
through :class:`RunDir` instead of spelling its name again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunDir:
    """One tune run's output directory and the paths of what it holds."""

    path: Path

    SUMMARY = "summary.json"  # the run's TuneSummary (tuning/summary.py)
    SESSIONS = "sessions.jsonl"  # one summary per session of a resumed run
    ARTIFACT = "model.so"  # the delivered model: what deploy ships
    UNTUNED_ARTIFACT = "model-untuned.so"
    SLOWER_TUNED_ARTIFACT = "model-tuned-slower.so"  # kept when the tuned build measured slower than the untuned
    HISTORY = "history.db"  # the default history (--db)
    MEASUREMENTS = "measurements.jsonl"  # every measurement of the run, one JSON line each
    REPORT = "report.html"
    PLOTS = "report"  # report.html's images
    BUILD_LOGS = "logs"  # MetaSchedule's per-task logs
    BOARD_LOGS = "board-logs"  # the loopback tracker's and RPC server's output
    BOARD_HEAT = "board-heat.jsonl"  # a provisioned board's temperature and clock readings
    DEPLOYMENTS = "deployments"  # local copies of deploy manifests

    def __init__(self, path: str | os.PathLike[str]) -> None:
        object.__setattr__(self, "path", Path(path))

    @property
    def summary(self) -> Path:
        return self.path / self.SUMMARY

    @property
    def sessions(self) -> Path:
        return self.path / self.SESSIONS

    @property
    def artifact(self) -> Path:
        return self.path / self.ARTIFACT

    @property
    def untuned_artifact(self) -> Path:
        return self.path / self.UNTUNED_ARTIFACT

    @property
    def slower_tuned_artifact(self) -> Path:
        return self.path / self.SLOWER_TUNED_ARTIFACT

    @property
    def history(self) -> Path:
        return self.path / self.HISTORY

    @property
    def measurements(self) -> Path:
        return self.path / self.MEASUREMENTS

    @property
    def report(self) -> Path:
        return self.path / self.REPORT

    @property
    def plots(self) -> Path:
        return self.path / self.PLOTS

    @property
    def build_logs(self) -> Path:
        return self.path / self.BUILD_LOGS

    @property
    def board_logs(self) -> Path:
        return self.path / self.BOARD_LOGS

    @property
    def board_heat(self) -> Path:
        return self.path / self.BOARD_HEAT

    @property
    def deployments(self) -> Path:
        return self.path / self.DEPLOYMENTS
