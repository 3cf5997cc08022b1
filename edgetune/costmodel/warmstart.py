"""Warm start: train the cost model on the history before measuring anything.

Following the history-database paper (adaptive-early-stop-kmeans-history,
§III), what was measured before is worth something to a new run:

* the same task on the same target and board: full weight;
* the same operator at other shapes (same target): full weight, its own
  feature group (MetaSchedule's XGBoost model normalises costs per group);
* the same task from another board of the same target: down-weighted by
  keeping only a fraction of those records (XGBoost here has no sample
  weights; a deterministic subsample is the weight).

Records of unrelated operators are left out: they would teach the model about
programs this run never sees.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import tvm
import tvm_ffi

from edgetune.common.choices import WARM_START_SCOPES

from ..history.store import HistoryStore
from ..tasks.signature import operator_signature




@dataclass
class WarmStartReport:
    """How many history records trained the cost model, by kind."""

    same_task: int = 0
    similar_task: int = 0
    other_board: int = 0
    skipped_other_board: int = 0
    groups: int = 0
    by_task: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.same_task + self.similar_task + self.other_board

    def to_dict(self) -> dict[str, Any]:
        return {
            "same_task": self.same_task,
            "similar_task": self.similar_task,
            "other_board": self.other_board,
            "skipped_other_board": self.skipped_other_board,
            "groups": self.groups,
        }


def warm_start(
    cost_model: Any,
    task_mods: list[tvm.IRModule],
    history: HistoryStore,
    target: Any,
    *,
    board_id: str,
    scope: str = "same",
    other_board_fraction: float = 0.5,
    max_records: int = 5000,
) -> WarmStartReport:
    """Train ``cost_model`` on the history relevant to ``task_mods``; report what was used.

    ``scope="same"`` uses the same tasks only (this board, and a fraction from
    other boards); ``"auto"`` adds the same operator at other shapes for the
    operators that have no same-task history (the paper's rule);
    ``"similar"`` adds them for every operator. Only ``"same"`` is the
    default of ``edgetune tune``: on the loopback benchmark
    (benchmarks/RESULTS.md, warm_start_similar) a cost model trained on 32x32
    convolutions kept the search on 64x64 ones from reaching the cold run's
    best within the budget in 2 of 3 seeds, with XGBoost and again with the
    random forest (``auto`` = ``similar`` there: no same-task history).
    """
    if scope not in WARM_START_SCOPES:
        raise ValueError(f"scope must be one of {', '.join(WARM_START_SCOPES)}, got {scope!r} instead")
    from tvm.s_tir.meta_schedule import TuneContext
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    if not 0.0 <= other_board_fraction <= 1.0:
        raise ValueError(f"other_board_fraction must be within [0, 1], got {other_board_fraction!r} instead")
    report = WarmStartReport()
    wanted_tasks = {int(tvm_ffi.structural_hash(mod)): mod for mod in task_mods}
    wanted_ops = {operator_signature(mod) for mod in task_mods}
    signatures: dict[int, tuple[str, ...]] = {}
    groups: dict[int, list[Any]] = defaultdict(list)
    seen_other_board = 0

    def is_same_task(mod: tvm.IRModule) -> bool:
        key = int(tvm_ffi.structural_hash(mod))
        return key in wanted_tasks and bool(tvm_ffi.structural_equal(mod, wanted_tasks[key]))

    def relevant(mod: tvm.IRModule) -> bool:
        return is_same_task(mod) or (scope != "same" and operator_signature(mod) in wanted_ops)

    # only the workloads it can use, chosen before their records are read (each read replays a trace)
    history_records = history.successful_records(target, limit=max_records, keep=relevant)

    if scope == "auto":  # similar shapes only for operators with no same-task history
        covered = {operator_signature(r.workload.mod) for r, _ in history_records if is_same_task(r.workload.mod)}
        similar_ops = wanted_ops - covered
    else:
        similar_ops = wanted_ops if scope == "similar" else set()
    for record, board in history_records:
        workload_mod = record.workload.mod
        key = int(tvm_ffi.structural_hash(workload_mod))
        same_task = is_same_task(workload_mod)
        # "<key>@<server>": one board of several under the key is the same kind of board
        if same_task and board.split("@", 1)[0] != board_id:
            seen_other_board += 1
            # keep a deterministic fraction: record k is kept when floor(k*f) advances
            if int(seen_other_board * other_board_fraction) == int((seen_other_board - 1) * other_board_fraction):
                report.skipped_other_board += 1
                continue
            report.other_board += 1
        elif same_task:
            report.same_task += 1
        else:
            if not similar_ops:
                continue
            if key not in signatures:
                signatures[key] = operator_signature(workload_mod)
            if signatures[key] not in similar_ops:
                continue
            report.similar_task += 1
        groups[key].append(record)
    for records in groups.values():
        # XGBModel keys its feature groups by the context's module: one context per workload
        context = TuneContext(mod=records[0].workload.mod, target=target, task_name="warm-start")
        candidates = [r.as_measure_candidate() for r in records]
        results = [RunnerResult([float(x) for x in r.run_secs], None) for r in records]
        cost_model.update(context, candidates, results)
        report.groups += 1
    return report
