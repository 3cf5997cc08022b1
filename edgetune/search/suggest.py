"""Suggest tuning settings per task type from the history (history-database paper, §IV).

Workloads computing the same operator (same compute blocks, any shapes; see
:func:`~edgetune.tasks.signature.operator_signature`) on one target form a
task type. Per type, two settings are read off the history, records in the
order they were committed:

* early stop: the measurement at which each workload found its best; the
  suggested per-task trial count covers where 90% of the type's workloads
  found theirs, with a margin, rounded up to whole batches;
* K-means sampling: each workload's first records (``sampling_records``) are
  replayed in windows of one batch; every window's candidates get the
  features :class:`~edgetune.search.strategy.AdaptiveSearch` gives the sampler
  (the traces re-applied to the workload,
  :class:`~edgetune.costmodel.surrogate.CandidateFeatures`), and
  :class:`~edgetune.search.sampling.KMeansSampler` picks its subset at each
  distance ratio of ``SAMPLING_GRID``. A ratio is safe for a workload when
  the subset holds a candidate within 3% of the window's best latency in at
  least 90% of the windows; the workload's value is the largest safe ratio
  (0: none is safe, measure every candidate) and the type's is the minimum
  over its workloads.

``edgetune db suggest`` shows the suggestions; ``edgetune tune --suggested``
applies each task's own type's settings (:func:`settings_by_operator`, read
by :class:`~edgetune.search.strategy.AdaptiveSearch` per task): with the
adaptive early stop the count is the task's initial maximum ``im``, with the
fixed or no early stop a hard cap; the ratio replaces the profile's
``kmeans_distance_ratio`` when the profile samples with K-means.

The replay measures what sampling would have removed from batches that were
measured; in a history tuned with sampling on, those batches were already
sampled once.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..history.store import HistoryStore
from ..history.maintenance import _target_label
from ..tasks.signature import operator_signature


@dataclass
class Suggestion:
    """Suggested settings for one task type on one target."""

    operator: tuple[str, ...]
    target: str
    best_found_at: list[int] = field(default_factory=list)  # per workload, 1-based
    trials: list[int] = field(default_factory=list)  # per workload
    max_trials_per_task: int = 0
    #: per workload replayed: the largest safe K-means distance ratio (0: none), and windows replayed
    sampling_ratios: list[float] = field(default_factory=list)
    sampling_windows: list[int] = field(default_factory=list)
    #: the type's suggestion: the minimum of ``sampling_ratios`` (None: nothing replayed)
    kmeans_distance_ratio: float | None = None

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
            "sampling_ratios": self.sampling_ratios,
            "sampling_windows": self.sampling_windows,
            "kmeans_distance_ratio": self.kmeans_distance_ratio,
        }


#: K-means distance ratios the replay tries (the profile default, 0.3, among them)
SAMPLING_GRID = (0.1, 0.2, 0.3, 0.5)
#: a window is covered when the sampled subset holds a candidate this close to its best latency
SAMPLING_TOLERANCE = 0.03
#: a ratio is safe for a workload when this share of its windows is covered
SAMPLING_COVERAGE = 0.9
#: records replayed per workload (the first ones committed), to keep ``db suggest`` fast
SAMPLING_RECORDS = 64


def _cap(best_found_at: list[int], batch: int, margin: float) -> int:
    p90 = float(np.quantile(np.asarray(best_found_at, dtype=float), 0.9))
    return max(batch, int(math.ceil(p90 * margin / batch)) * batch)


def sampling_ratio(
    windows: list[tuple[np.ndarray, list[float | None]]],
    *,
    grid: tuple[float, ...] = SAMPLING_GRID,
    tolerance: float = SAMPLING_TOLERANCE,
    coverage: float = SAMPLING_COVERAGE,
    seed: int = 0,
) -> tuple[float | None, int]:
    """The largest safe distance ratio of ``grid`` for one workload, and the windows that counted.

    ``windows`` are (features, latencies) of consecutive batches, features as
    the search strategy gives :class:`~edgetune.search.sampling.KMeansSampler`
    (one row per candidate), latencies in seconds (None: failed). Windows of
    fewer than two candidates or without a valid latency do not count. The
    ratio is 0.0 when no ratio of the grid is safe, None when no window counts.
    """
    from edgetune.search.sampling import KMeansSampler

    sampler = KMeansSampler(min(grid), seed=seed)
    covered = dict.fromkeys(grid, 0)
    counted = 0
    for features, latencies in windows:
        valid = [v for v in latencies if v is not None]
        if len(latencies) < 2 or not valid:
            continue
        counted += 1
        goal = min(valid) * (1 + tolerance)
        for ratio, keep in sampler.select_for_ratios(features, grid).items():
            if any(latencies[i] is not None and latencies[i] <= goal for i in keep):
                covered[ratio] += 1
    if not counted:
        return None, 0
    safe = [ratio for ratio in grid if covered[ratio] >= coverage * counted - 1e-9]
    return (max(safe) if safe else 0.0), counted


def _replay_windows(tuning_records: list[Any], latencies: list[float | None], batch: int) -> list[tuple[np.ndarray, list[float | None]]]:
    """Features of each window of ``batch`` records, as AdaptiveSearch computes them for a proposed batch."""
    from tvm.s_tir.meta_schedule import TuneContext

    from edgetune.builder.intrinsics import load_tensor_intrinsics
    from edgetune.costmodel.surrogate import CandidateFeatures

    if not tuning_records:
        return []
    features = CandidateFeatures()
    first = tuning_records[0]
    # only the target's intrinsics (traces may tensorize with them); TuneContext would import them all
    load_tensor_intrinsics(first.target)
    context = TuneContext(mod=first.workload.mod, target=first.target, task_name="suggest")
    windows = []
    for start in range(0, len(tuning_records), batch):
        chunk = tuning_records[start : start + batch]
        if len(chunk) < 2:
            continue
        # the trace re-applied to the workload: the program that was measured
        candidates = [r.as_measure_candidate() for r in chunk]
        windows.append((features(context, candidates), list(latencies[start : start + batch])))
    return windows


def suggest_settings(
    db: HistoryStore,
    *,
    target: Any = None,
    batch: int = 8,
    margin: float = 1.25,
    min_trials: int = 8,
    sampling: bool = True,
    sampling_records: int = SAMPLING_RECORDS,
    operators: Any = None,
    seed: int = 0,
) -> list[Suggestion]:
    """Per task type (and target): where the best was found, a trial count, and a sampling ratio.

    ``sampling=False`` skips the replay (``kmeans_distance_ratio`` stays None);
    ``operators`` (operator signatures) limits the result to those task types;
    ``seed`` is the K-means seed (the profile's ``tuning.seed`` in a run).
    """
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch!r} instead")
    if margin < 1.0:
        raise ValueError(f"margin must be >= 1, got {margin!r} instead")
    if sampling and sampling_records < 2:
        raise ValueError(f"sampling_records must be >= 2, got {sampling_records!r} instead")
    wanted = None if operators is None else {tuple(op) for op in operators}
    rows = db.bulk.record_summaries(target)
    runs: dict[tuple[int, str], list[float | None]] = defaultdict(list)
    ids: dict[tuple[int, str], list[int]] = defaultdict(list)
    labels: dict[tuple[int, str], str] = {}
    signatures: dict[int, tuple[str, ...]] = {}
    for row in rows:
        entry = row.workload
        key = (id(entry), row.target_hash)
        runs[key].append(row.mean_run_sec)
        ids[key].append(row.id)
        labels[key] = _target_label(row.target_json)
        if id(entry) not in signatures:
            signatures[id(entry)] = operator_signature(entry.workload.mod)
    by_type: dict[tuple[tuple[str, ...], str], Suggestion] = {}
    for key, values in runs.items():
        measured = [(i, v) for i, v in enumerate(values, start=1) if v is not None]
        if len(values) < min_trials or not measured:
            continue
        if wanted is not None and signatures[key[0]] not in wanted:
            continue
        best_at = min(measured, key=lambda item: item[1])[0]
        type_key = (signatures[key[0]], labels[key])
        suggestion = by_type.setdefault(type_key, Suggestion(operator=type_key[0], target=type_key[1]))
        suggestion.best_found_at.append(best_at)
        suggestion.trials.append(len(values))
        if sampling:
            chosen = ids[key][:sampling_records]
            ratio, windows = sampling_ratio(
                _replay_windows(db.bulk.records_by_id(chosen), values[: len(chosen)], batch), seed=seed
            )
            if ratio is not None:
                suggestion.sampling_ratios.append(ratio)
                suggestion.sampling_windows.append(windows)
    for suggestion in by_type.values():
        suggestion.max_trials_per_task = _cap(suggestion.best_found_at, batch, margin)
        if suggestion.sampling_ratios:
            suggestion.kmeans_distance_ratio = min(suggestion.sampling_ratios)  # conservative
    return sorted(by_type.values(), key=lambda s: (s.target, s.operator))


def settings_by_operator(suggestions: list[Suggestion]) -> dict[tuple[str, ...], dict[str, Any]]:
    """What :class:`~edgetune.search.strategy.AdaptiveSearch` applies per task type:
    ``{operator signature: {"max_trials": n, "kmeans_distance_ratio": r or None}}``.

    The suggestions must be of one target (``suggest_settings(target=...)``).
    """
    settings: dict[tuple[str, ...], dict[str, Any]] = {}
    for s in suggestions:
        if s.operator in settings:
            raise ValueError(f"suggestions of several targets for {'+'.join(s.operator)}; pass target= to suggest_settings")
        settings[s.operator] = {"max_trials": s.max_trials_per_task, "kmeans_distance_ratio": s.kmeans_distance_ratio}
    return settings
