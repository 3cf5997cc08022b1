"""What a report shows, read from a run directory: its sessions, the tuning timeline, the evaluator's runs.

Sources, in the order they are trusted:

* ``summary.json``: the last session (tasks, weights, untuned latencies, end to end);
* ``sessions.jsonl``: every session's summary (a resumed run has several);
* the history database: every measurement of the model's tasks with its time,
  matched to the tasks by their workload hash (``TaskResult.workload_hash``);
* ``measurements.jsonl``: how the adaptive evaluator timed each candidate.

Without a readable history the timeline falls back to the sessions' curves
(the model estimate after each batch) and the per-task curves are left out,
with a note saying why. Nothing here imports matplotlib.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..common.run_dir import RunDir
from ..errors import ReportError
from ..tuning.settings import MEASUREMENT_LOG
from ..tuning.summary import TuneSummary, load_sessions

#: seconds of slack when matching a record's time to a session (summary dates have whole seconds)
SLACK_SEC = 1.5


@dataclass
class Session:
    """One ``edgetune tune`` session of the run, or records no session summary accounts for."""

    number: int
    summary: TuneSummary | None  # None: a session stopped hard (no summary written), or records from elsewhere
    start: float  # Unix time its tuning started
    end: float  # Unix time its tuning ended
    first_trial: int = 0  # trials before it, on the report's trial axis
    trials: int = 0
    offset: float = 0.0  # where it starts on the back-to-back tuning-time axis

    @property
    def length(self) -> float:
        return max(0.0, self.end - self.start)

    @property
    def label(self) -> str:
        return f"S{self.number}"

    def contains(self, when: float) -> bool:
        return self.start - SLACK_SEC <= when <= self.end + SLACK_SEC


@dataclass
class TaskSeries:
    """One task's measurements in the order they were taken: each one and the best so far."""

    name: str
    weight: float
    default_sec: float | None
    trials: list[int] = field(default_factory=list)
    measured_sec: list[float | None] = field(default_factory=list)  # None: the candidate failed
    best_sec: list[float | None] = field(default_factory=list)


@dataclass
class Timeline:
    """The model estimate (sum over tasks of weight x best) after each trial or batch."""

    source: str  # "history" (one point per measurement) or "summary" (one per batch, from the curves)
    trials: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)  # on the back-to-back tuning-time axis
    estimate_sec: list[float | None] = field(default_factory=list)
    tasks: list[TaskSeries] = field(default_factory=list)  # empty when the history could not be read


@dataclass
class RunData:
    run_dir: Path
    summary: TuneSummary  # the last session's
    sessions: list[Session]
    timeline: Timeline
    measurements: list[dict[str, Any]]  # measurements.jsonl lines, each with its "session" number (or None)
    notes: list[str] = field(default_factory=list)  # what could not be shown, and why


def load_run(run_dir: Path, db: str | None = None) -> RunData:
    """Everything the report shows about ``run_dir``; :class:`ReportError` when it is not a run directory."""
    run_dir = Path(run_dir)
    summary = load_summary(run_dir)
    notes: list[str] = []
    summaries = session_summaries(run_dir, summary)
    records = history_records(summary, db or _default_history(run_dir, summary), notes, named=bool(db))
    sessions, owners = build_sessions(summaries, [r.created_at for r in records] if records is not None else None)
    if records is not None:
        timeline = history_timeline(summary, records, owners)
    else:
        timeline = curve_timeline(sessions)
    measurements = load_measurements(run_dir, sessions, notes)
    return RunData(run_dir, summary, sessions, timeline, measurements, notes)


def load_summary(run_dir: Path) -> TuneSummary:
    from . import check_run_dir

    path = check_run_dir(run_dir)
    try:
        return TuneSummary.load(path)
    except (ValueError, TypeError, AttributeError, OSError) as error:
        raise ReportError(f"{path} cannot be read: {error}") from None


def session_summaries(run_dir: Path, latest: TuneSummary) -> list[TuneSummary]:
    """The sessions' summaries, oldest first; the last one is summary.json's (an older edgetune kept no others)."""
    summaries = load_sessions(run_dir)
    if not summaries or _identity(summaries[-1]) != _identity(latest):
        summaries.append(latest)
    return sorted(summaries, key=lambda s: _finished_at(s) if math.isfinite(_finished_at(s)) else math.inf)


def _identity(summary: TuneSummary) -> tuple[Any, ...]:
    return summary.date, summary.trials.this_run if summary.trials else None, summary.interrupted


def _finished_at(summary: TuneSummary) -> float:
    """Unix time the session's tuning ended (summary dates are written then, to the second); NaN if unknown."""
    try:
        return datetime.strptime(summary.date, "%Y-%m-%dT%H:%M:%S%z").timestamp() + 0.5
    except (TypeError, ValueError):
        return math.nan


def _default_history(run_dir: Path, summary: TuneSummary) -> str | None:
    """The history summary.json names; the run directory's own history.db when that is gone (a moved run)."""
    named = summary.history or ""
    local = RunDir(run_dir).history
    if named.startswith("sqlite:") and not Path(named.split(":///", 1)[-1]).exists() and local.exists():
        return str(local)
    return named or (str(local) if local.exists() else None)


def history_records(summary: TuneSummary, url: str | None, notes: list[str], named: bool = False) -> list[Any] | None:
    """The history's records of this model's tasks (on the target most recently tuned), oldest first.

    None, with a note, when there is none to read; a history ``named`` by the user
    (``--db``) that cannot be read is a :class:`ReportError` instead.
    """
    try:
        return _read_history(summary, url)
    except _Unreadable as why:
        if named:
            raise ReportError(f"--db {url}: {why.args[0]}") from None
        hint = " (give the history with --db)" if why.args[1:] != (False,) else ""
        notes.append(f"{why.args[0]}: no per-task curves{hint}")
        return None


class _Unreadable(Exception):
    """Why the history gives no records: ``args`` = (reason, whether --db could help)."""


def _read_history(summary: TuneSummary, url: str | None) -> list[Any]:
    hashes = {task.workload_hash for task in summary.tasks if task.workload_hash}
    if not hashes:
        raise _Unreadable("summary.json names no task workloads (an older edgetune wrote it)", False)
    if not url:
        raise _Unreadable("summary.json names no history database")
    if "://" not in url or url.startswith("sqlite:"):
        if not Path(url.split(":///", 1)[1] if url.startswith("sqlite:") else url).exists():
            raise _Unreadable(f"history {url} not found")
    try:
        from ..history import open_history

        history = open_history(url, read_only=True)
        try:
            records = [r for r in history.bulk.record_summaries() if r.workload.shash in hashes]
        finally:
            history.close()
    except Exception as error:  # whatever the backend raises: the report goes on without per-task curves
        raise _Unreadable(f"history {url} could not be read ({_one_line(error)})") from None
    if records:
        # other targets' records of the same workloads are another run's, and so are those timed another way
        scale = (records[-1].target_hash, records[-1].timing)
        records = [r for r in records if (r.target_hash, r.timing) == scale]
    return sorted(records, key=lambda r: (r.created_at, r.id))


def build_sessions(summaries: list[TuneSummary], times: list[float] | None) -> tuple[list[Session], list[Session]]:
    """The run's sessions on one trial axis and one tuning-time axis, and the session of each record time.

    A record belongs to the session whose tuning interval holds its time; records
    outside every interval (a session stopped before it wrote a summary, or
    another run's on a shared history) form sessions of their own.
    """
    known = []
    for summary in summaries:
        end = _finished_at(summary)
        wall = summary.seconds.tuning_wall if summary.seconds else 0.0
        known.append(Session(0, summary, end - wall, end))
    owners: list[Session] = []
    unknown: list[Session] = []
    for when in times or ():
        owner = next((s for s in known if s.contains(when)), None)
        if owner is None:
            if not unknown or owners[-1] is not unknown[-1]:
                unknown.append(Session(0, None, when, when))
            owner = unknown[-1]
            owner.end = when
        owners.append(owner)
    sessions = sorted(known + unknown, key=lambda s: s.start if math.isfinite(s.start) else math.inf)
    _place(sessions, owners if times is not None else None)
    return sessions, owners


def _place(sessions: list[Session], owners: list[Session] | None) -> None:
    """Number the sessions and lay them back to back on the trial and time axes."""
    trials, offset = 0, 0.0
    for number, session in enumerate(sessions, start=1):
        session.number = number
        if owners is None:  # no history: the summaries' counts
            counts = session.summary.trials if session.summary else None
            trials = counts.in_history_before if counts else trials
            session.trials = counts.this_run if counts else 0
        else:
            session.trials = sum(1 for owner in owners if owner is session)
        session.first_trial, session.offset = trials, offset
        trials += session.trials
        offset += session.length


def history_timeline(summary: TuneSummary, records: list[Any], owners: list[Session]) -> Timeline:
    """One point per measurement: each task's best so far and the model estimate."""
    tasks = {t.workload_hash: t for t in summary.tasks if t.workload_hash}
    series = {
        key: TaskSeries(t.name, t.weight, None if t.default_latency_us is None else t.default_latency_us * 1e-6)
        for key, t in tasks.items()
    }
    timeline = Timeline("history", tasks=list(series.values()))
    best: dict[str, float] = {}
    for trial, (record, owner) in enumerate(zip(records, owners), start=1):
        key, sec = record.workload.shash, record.mean_run_sec
        if sec is not None and math.isfinite(sec) and (key not in best or sec < best[key]):
            best[key] = sec
        task = series[key]
        task.trials.append(trial)
        task.measured_sec.append(sec)
        task.best_sec.append(best.get(key))
        timeline.trials.append(trial)
        timeline.seconds.append(owner.offset + min(max(0.0, record.created_at - owner.start), owner.length))
        complete = len(best) == len(series)
        timeline.estimate_sec.append(sum(series[k].weight * best[k] for k in series) if complete else None)
    return timeline


def curve_timeline(sessions: list[Session]) -> Timeline:
    """One point per batch, from each session's curve (no history to read)."""
    timeline = Timeline("summary")
    for session in sessions:
        if session.summary is None:
            continue
        for point in session.summary.curve:
            timeline.trials.append(session.first_trial + int(point.get("trials", 0)))
            timeline.seconds.append(session.offset + float(point.get("seconds", 0.0)))
            timeline.estimate_sec.append(point.get("estimate_sec"))
    return timeline


def load_measurements(run_dir: Path, sessions: list[Session], notes: list[str]) -> list[dict[str, Any]]:
    """measurements.jsonl, each line with the number of the session that timed it (None when it has no time)."""
    path = run_dir / MEASUREMENT_LOG
    if not path.exists():
        return []
    lines = []
    for text in path.read_text().splitlines():
        try:
            line = json.loads(text)
            int(line["runs"])
        except (ValueError, TypeError, KeyError):
            continue
        when = line.get("time")
        owner = next((s for s in sessions if when is not None and s.contains(float(when))), None)
        line["session"] = owner.number if owner else None
        lines.append(line)
    if not lines:
        notes.append(f"{MEASUREMENT_LOG} has no readable lines")
    return lines


def _one_line(error: BaseException) -> str:
    text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    return text[:200] or type(error).__name__
