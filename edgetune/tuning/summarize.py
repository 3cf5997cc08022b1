"""The run's summary: every stage's record read into :class:`~edgetune.tuning.summary.TuneSummary`; the baselines timed beside it."""

from __future__ import annotations

import dataclasses
import time
from typing import Sequence

import tvm
import tvm_ffi
from tvm.ir import IRModule

from .._version import __version__
from ..board.baseline import RUNTIME_FORMATS, RUNTIME_NAMES, BaselineResult
from ..builder.builder import BuildStats, WarmBuilder
from ..common.int8_isa import int8_instruction
from ..errors import ModelError
from ..measure.runner import MeasureStats, TrackerRunner
from ..search.factory import auto_population
from ..search.scheduler import SLOT_SCHEDULERS
from ..tasks import LoadedModel
from ..tasks.inventory import KernelInventory
from .baseline import is_default_trace
from .inputs import RunSettings
from .plan import TaskPlan
from .run import TuneOutcome
from .session import TuneSession
from .settings import Json, measurement_summary, with_applied
from .summary import BoardInfo, ModelInfo, SearchInfo, Seconds, TrialCounts, TuneSummary, host_time


def summarize(run: RunSettings, plan: TaskPlan, session: TuneSession, outcome: TuneOutcome) -> TuneSummary:
    """The run's typed result (``summary.json``), from every stage's record."""
    tuning, progress = run.profile.tuning, session.progress
    # components passed in (stock MetaSchedule's) keep no stats: zeros
    builder_stats = session.builder.stats if isinstance(session.builder, WarmBuilder) else BuildStats()
    runner_stats = session.runner.stats if isinstance(session.runner, TrackerRunner) else MeasureStats()
    evolutionary = tuning.search_strategy == "evolutionary"
    report, library = session.search_report, session.library
    retimed = {task.name: task.to_dict() for task in outcome.confirmed}
    per_iter = outcome.search.per_iter if outcome.search is not None else plan.per_iter  # the batches the search used
    return TuneSummary(
        edgetune_version=__version__,
        tvm_version=tvm.__version__,
        date=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(outcome.ended_at)),
        model=model_info(session.model, run.components.tasks),
        profile=run.profile.name,
        target=session.target.export(),
        int8_instruction=int8_instruction(session.target),
        board=BoardInfo(session.board.label, f"{session.address.host}:{session.address.port}", run.key),
        history=session.history.url,
        trials=TrialCounts(
            budget=plan.budget,
            in_history_before=sum(plan.previous),
            this_run=progress.done,
            served_from_history=builder_stats.cached,
            measured_on_device=runner_stats.measured - sum(task.retimed for task in outcome.confirmed),  # trials only
            failed=sum(t.failed for t in progress.tasks),
            build_timeouts=builder_stats.timed_out,
            default_schedules=outcome.defaults_measured,
            library_schedules=outcome.library_measured,
            waited_for_others=session.claims.waited if session.claims is not None else 0,
            retimed=sum(task.retimed for task in outcome.confirmed),
        ),
        seconds=Seconds(
            tuning_wall=outcome.seconds,
            device=runner_stats.device_seconds,
            upload=runner_stats.upload_seconds,
            build=builder_stats.build_seconds,
            session=runner_stats.session_seconds,
        ),
        search=SearchInfo(
            strategy=tuning.search_strategy,
            population_size=(tuning.population_size or auto_population(per_iter)) if evolutionary else None,
            num_trials_per_iter=per_iter,
            cost_model=tuning.cost_model,
            task_scheduler=session.scheduler_name,
            scheduler_awaits_measurements=session.awaits,
            scheduler_decision_seconds=(
                outcome.scheduler.decision_seconds_ if isinstance(outcome.scheduler, SLOT_SCHEDULERS) else None
            ),
            effort=report.effort.to_dict() if report.effort is not None and report.effort.classes else None,
        ),
        measurement=measurement_summary(run.profile, session.runner, session.board),
        measurement_reduction={
            "sampler": tuning.sampler,
            "early_stop": tuning.early_stop,
            "exploration": tuning.exploration,
            **report.to_dict(),
        }
        if report.tasks
        else None,
        warm_start={"scope": run.options.warm_start, **outcome.warm.to_dict()},
        suggested=with_applied(session.suggested, report, session.contexts),
        interrupted=outcome.interrupted,
        tasks=[
            t.to_result(kept_default(session, i), session.limits.cap(t.name), str(tvm_ffi.structural_hash(session.contexts[i].mod)),
                         library.exact.get(t.name) if library is not None else None, retimed.get(t.name),
                         library.transferred.get(t.name) if library is not None else None)
            for i, t in enumerate(progress.tasks)
        ],
        curve=[point.to_dict() for point in progress.curve],
        graph=graph_info(session.model, plan.inventory),
        recipe=session.model.recipe.to_dict() if session.model is not None else None,
        schedules=library.to_dict() if library is not None else None,
        host_time=dataclasses.asdict(host_time(
            outcome.seconds, report.seconds, session.cost_model, builder_stats.build_seconds,
            runner_stats.device_seconds + runner_stats.upload_seconds + runner_stats.session_seconds,
            runner_stats.measured, report.lookahead.seconds if report.lookahead is not None else 0.0,
            builder_stats.waited_seconds,
        )),
    )


def time_baseline(run: RunSettings, session: TuneSession, model: LoadedModel, artifact: str, runtime: str) -> BaselineResult:
    """One runtime of tuning.baseline: the same model file beside ``model.so``, on the board; never fails the tune."""
    session.progress.phase = f"timing {RUNTIME_NAMES.get(runtime, runtime)} beside the tuned model on {session.board.label}"
    run.sink.on_phase(session.progress)
    try:
        model_bytes = model.bytes_for(RUNTIME_FORMATS[runtime])
    except ModelError as error:
        return BaselineResult(runtime, error=str(error))
    return session.board.time_baseline(
        runtime, artifact, model_bytes, model.random_inputs(seed=0), run.profile.device.num_threads,
        given_as=model.format,
    )


def kept_default(session: TuneSession, index: int) -> bool:
    """True when the task's best record is its default schedule: no tuned candidate beat the untuned code."""
    best = session.history.best_record(session.contexts[index].mod, session.target)
    return best is not None and is_default_trace(best.trace)


def graph_info(model: LoadedModel | None, inventory: KernelInventory | None) -> Json | None:
    if model is None or model.graph is None:
        return None
    return {**model.graph.to_dict(), "kernels": inventory.to_dict() if inventory is not None else None}


def model_info(model: LoadedModel | None, tasks: Sequence[tuple[str, IRModule, int]] | None) -> ModelInfo:
    if model is not None:
        return ModelInfo(model.source, model.name, model.sha256)
    names = ",".join(name for name, _mod, _weight in tasks or ())
    return ModelInfo("tasks", names, "")
