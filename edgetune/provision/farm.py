"""``edgetune boards status``: the farm at a glance: the tracker's keys, who measured what, the boards' health.

Three independent sources, each optional: the tracker's summary (servers per
key, free, queued requests), the history database (records per ``board_id``,
``KEY@host:port``, and per workload), and the inventory's boards over SSH
(reachable, server, tunnel, SoC temperature and CPU clocks).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ..board.rpc_tracker import TrackerAddress, device_counts, tracker_summary
from ..errors import BoardError


@dataclass
class KeyRow:
    key: str
    registered: int
    free: int
    queue: int


@dataclass
class TrackerStatus:
    """What the tracker at ``address`` has, or why it could not be asked."""

    address: str
    source: str  # "--tracker", "TVM_TRACKER_HOST/PORT", "host tracker (pid N)", "inventory"
    keys: list[KeyRow] = field(default_factory=list)
    error: str = ""


def tracker_status(address: TrackerAddress, source: str, key: str | None, strict: bool) -> TrackerStatus:
    """Each key's servers from the tracker's summary; ``strict``: an unreachable tracker raises."""
    status = TrackerStatus(f"{address.host}:{address.port}", source)
    try:
        summary = tracker_summary(address, timeout_sec=10)
    except BoardError as error:
        if strict:
            raise
        status.error = "not running" if source == "inventory" else str(error)
        return status
    keys = set(summary.get("queue_info", {}))
    keys |= {str(item.get("key", "")).split(":", 1)[-1] for item in summary.get("server_info", [])}
    for name in sorted(k for k in keys if k and (key is None or k == key)):
        registered, free = device_counts(summary, name)
        queue = int(summary.get("queue_info", {}).get(name, {}).get("pending", 0))
        status.keys.append(KeyRow(name, registered, free, queue))
    return status


@dataclass
class WorkloadRow:
    task: str
    workload_id: int
    records: int
    failed: int
    best_sec: float | None
    last: float


@dataclass
class BoardHistory:
    """What one ``board_id`` measured."""

    board_id: str
    records: int = 0
    failed: int = 0
    last: float = 0.0
    workloads: list[WorkloadRow] = field(default_factory=list)


def history_status(url: str, key: str | None) -> tuple[str, list[BoardHistory]]:
    """Records per board_id and workload in the history at ``url`` (read only; the schema as it is)."""
    from ..history import open_history
    from ..history.maintenance import history_stats

    history = open_history(url, read_only=True)  # checks the file exists and its schema version
    try:
        names = {wid: group.task for group in history_stats(history) for wid in group.workload_ids}
        shown = history.url
        rows = [(s.board_id, s.workload_id, s.count, s.successful, s.best_sec, s.last) for s in history.bulk.board_summaries()]
    finally:
        history.close()
    boards: dict[str, BoardHistory] = {}
    for board_id, workload_id, count, successful, best, last in rows:
        if key is not None and board_id != key and not str(board_id).startswith(f"{key}@"):
            continue
        entry = boards.setdefault(board_id, BoardHistory(board_id))
        failed = int(count) - int(successful or 0)
        entry.records += int(count)
        entry.failed += failed
        entry.last = max(entry.last, float(last))
        entry.workloads.append(WorkloadRow(names.get(workload_id, f"workload {workload_id}"), int(workload_id),
                                           int(count), failed, best, float(last)))
    for entry in boards.values():
        entry.workloads.sort(key=lambda w: (-w.records, w.task))
    return shown, sorted(boards.values(), key=lambda b: b.board_id)


def when(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(stamp)) if stamp else "-"


def latency(sec: float | None) -> str:
    if sec is None:
        return "-"
    return f"{sec * 1e6:.1f} us" if sec < 1e-3 else f"{sec * 1e3:.2f} ms"


def table(rows: list[list[str]], header: list[str]) -> list[str]:
    """Fixed-width columns, two spaces apart."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    return ["  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip()
            for row in [header, *rows]]


def to_json(tracker: TrackerStatus | None, history: tuple[str, list[BoardHistory]] | None,
            boards: list[Any] | None) -> dict[str, Any]:
    return {
        "tracker": asdict(tracker) if tracker else None,
        "history": {"url": history[0], "boards": [asdict(b) for b in history[1]]} if history else None,
        "boards": [asdict(b) for b in boards] if boards is not None else None,
    }


def render(tracker: TrackerStatus | None, history: tuple[str, list[BoardHistory]] | None,
           boards: list[Any] | None) -> list[str]:
    """The text form: a section per source, each a fixed-width table."""
    lines: list[str] = []
    if boards is not None:
        rows = [[s.name, s.reachable, s.tvm, s.server, s.registered, s.temperature, s.governor, s.frequency, s.tunnel]
                for s in boards]
        lines += table(rows, ["BOARD", "REACHABLE", "TVM", "SERVER", "REGISTERED", "TEMP", "GOVERNOR", "FREQ",
                              "TUNNEL"])
        lines += [f"{s.name}: {' '.join(s.detail.split())}" for s in boards if s.detail]
        lines.append("")
    if tracker is not None:
        if tracker.error == "not running":
            lines.append(f"tracker: not running ({tracker.source}: {tracker.address})")
        else:
            lines.append(f"tracker: {tracker.address} ({tracker.source})" + (f": {tracker.error}" if tracker.error else ""))
        if not tracker.error:
            rows = [[k.key, str(k.registered), str(k.free), str(k.queue)] for k in tracker.keys]
            lines += table(rows, ["KEY", "REGISTERED", "FREE", "QUEUE"]) if rows else ["  no servers registered"]
        lines.append("")
    if history is not None:
        url, entries = history
        lines.append(f"history: {url}")
        rows = [[b.board_id, str(b.records), str(b.failed), str(len(b.workloads)), when(b.last)] for b in entries]
        lines += table(rows, ["BOARD", "RECORDS", "FAILED", "WORKLOADS", "LAST MEASURED (UTC)"]) if rows \
            else ["  no records"]
        detail = [[b.board_id, f"{w.task} #{w.workload_id}", str(w.records), str(w.failed), latency(w.best_sec), when(w.last)]
                  for b in entries for w in b.workloads]
        if detail:
            lines.append("")
            lines += table(detail, ["BOARD", "WORKLOAD", "RECORDS", "FAILED", "BEST", "LAST (UTC)"])
        lines.append("")
    while lines and not lines[-1]:
        lines.pop()
    return lines
