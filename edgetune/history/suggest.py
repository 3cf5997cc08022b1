"""Suggest tuning settings per task type from the history (history-database paper, §IV).

For every workload and target with enough records, the measurement at which
its best was found is read off the history (records in the order they were
committed). Workloads computing the same operator (same compute blocks, any
shapes; see :func:`~edgetune.history.warmstart.operator_signature`) form a task
type. The suggestion for a type is an early stop: a per-task trial cap that
covers where 90% of its workloads found their best, with a margin, rounded up
to whole batches.

``edgetune db suggest`` shows the suggestions; ``edgetune tune --suggested``
applies them (MetaSchedule takes one per-task cap, so a model gets the largest
cap among its task types).
Sampling settings (issue 3's K-means sampling) are not suggested yet.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sqlalchemy as sa

from .database import HistoryDatabase
from .maintenance import _target_label
from .schema import records
from .warmstart import operator_signature


@dataclass
class Suggestion:
    """Suggested settings for one task type on one target."""

    operator: tuple[str, ...]
    target: str
    best_found_at: list[int] = field(default_factory=list)  # per workload, 1-based
    trials: list[int] = field(default_factory=list)  # per workload
    max_trials_per_task: int = 0

    @property
    def workloads(self) -> int:
        return len(self.best_found_at)

    def to_dict(self) -> dict[str, Any]:
        return {
            "operator": "+".join(self.operator),
            "target": self.target,
            "workloads": self.workloads,
            "best_found_at": self.best_found_at,
            "trials": self.trials,
            "max_trials_per_task": self.max_trials_per_task,
        }


def _cap(best_found_at: list[int], batch: int, margin: float) -> int:
    p90 = float(np.quantile(np.asarray(best_found_at, dtype=float), 0.9))
    return max(batch, int(math.ceil(p90 * margin / batch)) * batch)


def suggest_settings(
    db: HistoryDatabase,
    *,
    target: Any = None,
    batch: int = 8,
    margin: float = 1.25,
    min_trials: int = 8,
) -> list[Suggestion]:
    """Per task type (and target): where the best was found, and a trial cap."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch!r} instead")
    if margin < 1.0:
        raise ValueError(f"margin must be >= 1, got {margin!r} instead")
    stmt = sa.select(
        records.c.workload_id, records.c.target_hash, records.c.target_json, records.c.mean_run_sec
    ).order_by(records.c.created_at, records.c.id)
    if target is not None:
        from .database import _sha256, _target_json

        stmt = stmt.where(records.c.target_hash == _sha256(_target_json(target)))
    with db._access("read tuning records") as engine, engine.connect() as conn:
        rows = conn.execute(stmt).all()
        entries = db._entries(conn, {row.workload_id for row in rows})
    runs: dict[tuple[int, str], list[float | None]] = defaultdict(list)
    labels: dict[tuple[int, str], str] = {}
    signatures: dict[int, tuple[str, ...]] = {}
    for row in rows:
        entry = entries[row.workload_id]
        key = (id(entry), row.target_hash)
        runs[key].append(row.mean_run_sec)
        labels[key] = _target_label(row.target_json)
        if id(entry) not in signatures:
            signatures[id(entry)] = operator_signature(entry.workload.mod)
    by_type: dict[tuple[tuple[str, ...], str], Suggestion] = {}
    for key, values in runs.items():
        measured = [(i, v) for i, v in enumerate(values, start=1) if v is not None]
        if len(values) < min_trials or not measured:
            continue
        best_at = min(measured, key=lambda item: item[1])[0]
        type_key = (signatures[key[0]], labels[key])
        suggestion = by_type.setdefault(type_key, Suggestion(operator=type_key[0], target=type_key[1]))
        suggestion.best_found_at.append(best_at)
        suggestion.trials.append(len(values))
    for suggestion in by_type.values():
        suggestion.max_trials_per_task = _cap(suggestion.best_found_at, batch, margin)
    return sorted(by_type.values(), key=lambda s: (s.target, s.operator))


def cap_for_model(suggestions: list[Suggestion], task_mods: list[Any]) -> tuple[int | None, list[str]]:
    """One per-task cap for a model's tasks, and the operators with no history.

    The cap is the largest suggestion among the model's task types, so no
    task stops earlier than its own type suggests. Types without history
    (often tiny tasks whose whole space is a handful of programs) get the same
    cap; they are returned so the caller can say so. ``None`` without any.
    """
    known = {s.operator: s.max_trials_per_task for s in suggestions}
    missing: list[str] = []
    caps = []
    for mod in task_mods:
        signature = operator_signature(mod)
        if signature in known:
            caps.append(known[signature])
        elif "+".join(signature) not in missing:
            missing.append("+".join(signature))
    return (max(caps) if caps else None), missing
