"""Settings the run derives from the profile and the history: combined checks, ``--suggested``, the measurement report."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tvm.s_tir.meta_schedule import TuneContext

from ..common.run_dir import RunDir
from ..errors import ProfileError
from ..search.suggest import settings_by_operator, suggest_settings
from ..tasks.signature import operator_signature
from ..profile import DeviceProfile
from ..search.strategy import SearchReport
from ..measure.runner import MeasureStats, TrackerRunner
from .summary import Json

if TYPE_CHECKING:
    from tvm.ir import IRModule
    from tvm.s_tir.meta_schedule.runner import Runner
    from tvm.target import Target
    
    from ..board.base import Board
    from .components import TuningHistory

#: one JSON line per candidate timed by the adaptive evaluator: runs used, final CV
MEASUREMENT_LOG = RunDir.MEASUREMENTS
#: ``--suggested``: the summary's entry (its ``message``; ``tasks``, what each task got)
Suggested = Json
#: ``--suggested``: the settings per operator signature, for the adaptive search
PerType = dict[tuple[str, ...], Json]


def check_combined_settings(profile: DeviceProfile) -> None:
    """Settings that are valid one by one but not together fail here, as profile errors."""
    from ..measure.evaluator import AdaptiveEvaluator
    from ..search.early_stop import make_early_stop
    from ..search.strategy import early_stop_params

    m = profile.measure
    if m.evaluator == "adaptive":
        try:
            AdaptiveEvaluator(
                m.micro_batch, m.max_runs, m.cv_threshold, m.min_runs, m.micro_batch_ms, m.budget_ms, m.stop_rule, m.ci_threshold
            )
        except ValueError as error:
            raise ProfileError(f"{profile.origin}: [measure] {error}") from None
    try:
        make_early_stop(profile.tuning.early_stop, **early_stop_params(profile.tuning))
    except ValueError as error:
        raise ProfileError(f"{profile.origin}: [tuning] early stop: {error}") from None


def suggested_settings(
    history: TuningHistory, target: Target, profile: DeviceProfile, workloads: list[IRModule], batch: int
) -> tuple[Suggested, PerType | None]:
    """``--suggested``: the settings per task type of this model from the history, for the search strategy.

    Returns the summary's ``suggested`` entry (its ``message`` says which task
    types keep the profile's settings) and ``{operator: settings}`` for
    :class:`~edgetune.search.strategy.AdaptiveSearch` (None when the profile's
    search strategy cannot take them).
    """
    tuning = profile.tuning
    operators = []
    for mod in workloads:
        signature = operator_signature(mod)
        if signature not in operators:
            operators.append(signature)
    suggestions = suggest_settings(
        history, target=target, batch=batch, operators=operators, sampling=tuning.sampler == "kmeans", seed=tuning.seed
    )
    per_type = settings_by_operator(suggestions)
    without = ["+".join(op) for op in operators if op not in per_type]
    entry: Json = {
        "batch": batch,
        "early_stop": tuning.early_stop,
        "sampler": tuning.sampler,
        "task_types": [s.to_dict() for s in suggestions],
        "task_types_without_history": without,
        "tasks": [],
    }
    if tuning.search_strategy != "evolutionary":
        entry["message"] = f"--suggested: not applied, the {tuning.search_strategy} search takes no per-task settings"
        return entry, None
    how = "initial maximum trials (adaptive early stop)" if tuning.early_stop == "adaptive" else "trial cap"
    if tuning.sampler == "kmeans":
        how += " and K-means distance ratio"
    entry["message"] = (
        f"--suggested: {len(operators) - len(without)} of {len(operators)} task types get their {how} from the history"
        + (f"; profile settings for the types without history: {', '.join(without)}" if without else "")
    )
    return entry, per_type


def with_applied(suggested: Suggested | None, report: SearchReport, contexts: list[TuneContext]) -> Suggested | None:
    """The summary's ``suggested`` entry with what each task got, in task order."""
    if suggested is None:
        return None
    names = [str(ctx.task_name) for ctx in contexts]
    suggested["tasks"] = [report.suggested[name] for name in names if name in report.suggested]
    return suggested


def measurement_summary(profile: DeviceProfile, runner: Runner, board: Board | None = None) -> Json:
    """How candidates were timed, and the runs the adaptive evaluator saved against its cap.

    A provisioned board adds ``board_health``: heat readings, waits to cool, server restarts.
    """
    m = profile.measure
    own = isinstance(runner, TrackerRunner)  # a runner passed in (stock MetaSchedule's) keeps no stats
    stats = runner.stats if own else MeasureStats()
    health = board.health_summary() if board is not None else None
    boards = {
        **({"board_health": health} if health is not None else {}),
        "by_board": dict(stats.by_board),  # candidates measured per board (host:port)
        "sessions_lost": stats.sessions_lost,
        "unmeasured": stats.unmeasured,  # no board answered: not stored, measured on resume
        "batch_wall_seconds": round(stats.batch_wall_seconds, 3),  # runner busy, all boards
    }
    if m.evaluator != "adaptive" or not own:
        return {"evaluator": "fixed", "number": m.number, "repeat": m.repeat, "min_repeat_ms": m.min_repeat_ms, **boards}
    timed = stats.stopped_by_cv + stats.stopped_by_cap + stats.stopped_by_budget + stats.stopped_by_ci
    return {
        **boards,
        "evaluator": "adaptive",
        "micro_batch": m.micro_batch,
        "max_runs": m.max_runs,
        "cv_threshold": m.cv_threshold,
        "candidates": timed,
        "runs": stats.runs,
        "mean_runs_per_candidate": stats.runs / timed if timed else None,
        "stop_rule": m.stop_rule,
        "ci_threshold": m.ci_threshold,
        "stopped_by_cv": stats.stopped_by_cv,
        "stopped_by_ci": stats.stopped_by_ci,
        "stopped_by_cap": stats.stopped_by_cap,
        "stopped_by_budget": stats.stopped_by_budget,
        "budget_ms": m.budget_ms,
        "runs_saved_vs_cap": 1 - stats.runs / (timed * m.max_runs) if timed else None,
        "log": MEASUREMENT_LOG,
    }
