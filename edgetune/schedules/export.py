"""Export the fastest schedules a history measured as a schedule library (``edgetune schedules export``).

Per workload: the ``top_k`` fastest distinct traces, the untuned default's latency beside them, and a header
that says how the library was built (target, CPU family, timing, budget, layout, zoo).
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from typing import Any, Iterable

from ..errors import LibraryError
from .library import DEFAULT_TOP_K, LIBRARY_FORMAT, LIBRARY_VERSION, LibrarySchedule, LibraryWorkload, ScheduleLibrary, write_library


def export_library(
    history: Any,
    path: str | os.PathLike[str],
    target: Any,
    *,
    top_k: int = DEFAULT_TOP_K,
    budget_per_workload: int | None = None,
    zoo: Iterable[str] = (),
    min_records: int = 1,
    measured_on: str | None = None,
    conv_layout: str | None = None,
) -> ScheduleLibrary:
    """The ``top_k`` fastest distinct successful traces of each workload measured on ``target`` in ``history``.

    Only records of the history handle's timing are read (open it with
    ``timing=timing_of(profile)``); the library says which timing it holds.
    A workload's untuned default schedule is kept among them where it ranks (a tune measures the library's
    schedule instead of its own default, so the library must say where the default is the fastest), and its
    latency is written beside the workload either way.
    ``min_records``: leave out workloads with fewer records than that (not yet tuned).
    ``measured_on``: the CPU the boards have, when the target's ``mcpu`` does not say it (a
    ``host-avx2`` build measures AVX2 code on an AVX-512 host).
    ``budget_per_workload`` counts measured trials (``tuning.max_trials_per_task``).
    ``conv_layout``: the layout the zoo's convolutions were tuned in (``NCHW16c``...): a tune in another
    layout finds few of the library's workloads.
    """
    import tvm

    from .._version import __version__
    from ..profile.host import usable_cores
    from ..tasks.flops import task_flops
    from ..tasks.signature import operator_signature
    from ..history.sql import target_json as target_json_of
    from ..common.cpu_family import family_of

    if top_k < 1:
        raise LibraryError(f"top_k must be >= 1, got {top_k} instead")
    target_json = target_json_of(target)
    groups, mods, counts, defaults = _group_records(history, target)
    workloads = []
    for shash, entries in groups.items():
        if counts[shash] < min_records:
            continue
        mod = mods[shash]
        flops = task_flops(mod)
        schedules = _fastest_distinct(entries, flops, top_k, target_json, counts[shash])
        workloads.append(LibraryWorkload(shash, tvm.ir.save_json(mod), list(operator_signature(mod)), flops, schedules,
                                         defaults.get(shash)))
    family = family_of(target)
    header = {
        "edgetune_version": __version__,
        "tvm_version": tvm.__version__,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "family": family.to_dict(),
        "target": json.loads(target_json),
        "cores": int(target.attrs.get("num-cores", 0) or 0) or usable_cores(),
        "top_k": top_k,
        "timing": getattr(history, "timing", None) or "warm",
        "budget_per_workload": budget_per_workload,
        # libraries made before edgetune counted the budget in measured trials have no such key: theirs was the
        # candidates the search proposed, of which K-means sampling measured some
        "budget_counts": "measured" if budget_per_workload else None,  # no budget stated: nothing to count
        "measured_on": measured_on,
        "conv_layout": conv_layout,
        "zoo": list(zoo),
        "source": getattr(history, "url", ""),
    }
    write_library(path, header, workloads)
    return ScheduleLibrary({**header, "format": LIBRARY_FORMAT, "version": LIBRARY_VERSION}, workloads, str(path))


def _group_records(history: Any, target: Any) -> tuple[dict[str, list[tuple[Any, str]]], dict[str, Any], dict[str, int], dict[str, float]]:
    """The history's successful records of ``target`` by workload: (records, workload module, record count,
    the untuned default's latency in us), each keyed by the workload's structural hash."""
    import tvm_ffi

    from ..common.failure import is_failed
    from ..search.default_schedule import is_default_trace
    from ..tasks.models import comparable_workload

    groups: dict[str, list[tuple[Any, str]]] = defaultdict(list)
    mods: dict[str, Any] = {}
    counts: dict[str, int] = defaultdict(int)
    defaults: dict[str, float] = {}
    for record, board in history.successful_records(target, limit=10**7):
        mod = record.workload.mod
        shash = str(tvm_ffi.structural_hash(comparable_workload(mod)))
        mods.setdefault(shash, mod)
        counts[shash] += 1
        secs = [float(x) for x in record.run_secs]
        if is_failed(secs):
            continue
        if is_default_trace(record.trace):
            defaults[shash] = min(_mean(secs) * 1e6, defaults.get(shash, float("inf")))
        groups[shash].append((record, board))
    return groups, mods, counts, defaults


def _fastest_distinct(
    entries: list[tuple[Any, str]], flops: float | None, top_k: int, target_json: str, records: int
) -> list[LibrarySchedule]:
    """The ``top_k`` fastest records of one workload, one per distinct trace."""
    from ..history.trace_codec import trace_as_json

    seen: set[str] = set()
    schedules = []
    for record, board in sorted(entries, key=lambda rb: _mean(rb[0].run_secs)):
        trace_json = trace_as_json(record.trace)
        key = json.dumps(trace_json, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        latency = _mean(record.run_secs)
        schedules.append(LibrarySchedule(
            trace_json=trace_json,
            latency_us=latency * 1e6,
            gflops=flops / latency / 1e9 if flops and latency > 0 else None,
            target_json=target_json, board=board, records=records,
        ))
        if len(schedules) >= top_k:
            break
    return schedules


def _mean(run_secs: Any) -> float:
    values = [float(x) for x in run_secs]
    return sum(values) / len(values) if values else float("inf")


# --------------------------------------------------------------------------- reading
