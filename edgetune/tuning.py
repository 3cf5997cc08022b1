"""The tuning loop: profile -> board -> tasks -> search -> build -> measure -> history -> deploy.

:func:`run_tune` is what ``edgetune tune`` runs. It drives MetaSchedule's own
task scheduler through its extension points: edgetune's builder
(:class:`~edgetune.builder.builder.WarmBuilder`), runner
(:class:`~edgetune.measure.runner.TrackerRunner`), database
(:class:`~edgetune.history.HistoryDatabase`) and measure callbacks. After
tuning it compiles the model with the best records, runs untuned and tuned
builds on the device, checks their outputs agree and writes a summary.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import threading
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import tvm
import tvm.s_tir.meta_schedule as ms
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

from . import __version__
from .board.local import LocalBoard
from .board.tracker import TrackerAddress, check_device_available
from .builder.builder import CACHED_ARTIFACT_PREFIX, WarmBuilder
from .builder.intrinsics import load_tensor_intrinsics
from .deploy.compile import compare_outputs, compile_model, export_model, run_on_board
from .errors import BoardError, EdgetuneError, TargetError, TuningInterrupted
from .history import open_history
from .history.suggest import settings_by_operator, suggest_settings
from .history.warmstart import WarmStartReport, operator_signature, warm_start
from .common.failure import FAILED_RUN_SECS
from .measure.runner import TrackerRunner
from .profile import DeviceProfile
from .search import make_cost_model, make_search_strategy, make_task_scheduler
from .search.adaptive import SearchReport
from .search.factory import auto_population
from .tasks import LoadedModel, load_model, prepare_for_tuning

SUMMARY_NAME = "summary.json"
ARTIFACT_NAME = "model.so"
#: one JSON line per candidate timed by the adaptive evaluator: runs used, final CV
MEASUREMENT_LOG = "measurements.jsonl"
UNTUNED_ARTIFACT_NAME = "model-untuned.so"


# ---------------------------------------------------------------------------
# options and results
# ---------------------------------------------------------------------------
@dataclass
class TuneOptions:
    """Everything ``edgetune tune`` needs; CLI flags override the profile."""

    profile: DeviceProfile
    model: str
    out_dir: Path
    tracker: str | None = None  # "host:port"; None starts the loopback board
    key: str | None = None  # defaults to the profile's rpc.key
    db: str | None = None  # defaults to <out_dir>/history.db
    trials: int | None = None  # defaults to the profile's tuning.trials
    evaluate: bool = True  # compile and measure end to end after tuning
    # "off", "same", "auto" or "similar": cost model trained on history first (see history/warmstart.py)
    warm_start: str = "same"
    suggested: bool = False  # each task gets its type's early-stop and sampling settings from the history
    scheduler: str | None = None  # task scheduler; defaults to the profile's tuning.task_scheduler


@dataclass
class TaskProgress:
    """One tuning task as the progress display and the summary see it."""

    index: int
    name: str
    weight: float
    flops: float
    previous_trials: int = 0  # already in the history when the run started
    trials: int = 0  # measured (or served from history) in this run
    failed: int = 0
    best_sec: float | None = None

    @property
    def best_gflops(self) -> float | None:
        if not self.best_sec or not self.flops:
            return None
        return self.flops / self.best_sec / 1e9

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "weight": self.weight,
            "flops": self.flops,
            "trials_before": self.previous_trials,
            "trials_this_run": self.trials,
            "failed_this_run": self.failed,
            "best_latency_us": None if self.best_sec is None else self.best_sec * 1e6,
            "best_gflops": self.best_gflops,
        }


@dataclass
class TuneProgress:
    """Shared state between the tuning thread's callbacks and the display."""

    budget: int
    tasks: list[TaskProgress]
    started: float = field(default_factory=time.monotonic)
    done: int = 0
    phase: str = "starting"

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


class ProgressSink:
    """Receives progress; the CLI renders it. Hooks are called in this order:
    ``on_phase`` (any time), ``on_batch`` after every measured batch."""

    def on_phase(self, progress: TuneProgress) -> None:  # pragma: no cover - interface
        pass

    def on_batch(self, progress: TuneProgress, task: TaskProgress) -> None:  # pragma: no cover
        pass


# ---------------------------------------------------------------------------
# resume: serve already-measured candidates from the history
# ---------------------------------------------------------------------------
class CandidateCache:
    """Scheduled-module hash -> stored run times, for the tasks of this run.

    Built from the history before tuning: each stored trace is replayed on its
    workload and the resulting module hashed exactly as the builder hashes the
    candidates it is asked to build. A hit is neither built nor measured.
    """

    def __init__(self) -> None:
        self._run_secs: dict[str, list[float]] = {}

    @staticmethod
    def key(mod: Any) -> str:
        import tvm_ffi

        return str(tvm_ffi.structural_hash(mod))

    def add_history(self, history: Any, workload_mod: Any, target: Any) -> int:
        """Index every record of ``workload_mod`` on ``target``; return how many."""
        from tvm.s_tir import Schedule

        workload = history.commit_workload(workload_mod)
        history.set_target_filter(target)
        try:
            records = history.get_top_k(workload, 1 << 30)
        finally:
            history.set_target_filter(None)
        for record in records:
            sch = Schedule(workload.mod)
            try:
                record.trace.apply_to_schedule(sch, remove_postproc=False)
            except Exception:  # a trace from another TVM version: just measure again
                continue
            self._run_secs[self.key(sch.mod)] = [float(x) for x in record.run_secs]
        return len(records)

    def lookup_mod(self, mod: Any) -> str | None:
        key = self.key(mod)
        return key if key in self._run_secs else None

    def lookup_key(self, key: str) -> list[float] | None:
        return self._run_secs.get(key)

    def __len__(self) -> int:
        return len(self._run_secs)


# ---------------------------------------------------------------------------
# measure callbacks
# ---------------------------------------------------------------------------
@derived_object
class RecordAndReport(PyMeasureCallback):
    """Commit every result (with its error text) and report progress.

    Replaces the stock ``AddToDatabase`` + ``RemoveBuildArtifact`` pair so that
    failures are stored with their message, not only as MetaSchedule's 1e10
    sentinel. Also where a requested stop (Ctrl-C, ``kill``) takes effect: after the
    batch's records are safely committed.
    """

    def __init__(
        self,
        history: Any,
        contexts: list[Any],
        progress: TuneProgress,
        sink: ProgressSink,
        stop: threading.Event,
        runner: Any = None,
        measurement_log: Path | None = None,
    ) -> None:
        super().__init__()
        self.history = history
        self.contexts = contexts
        self.progress = progress
        self.sink = sink
        self.stop = stop
        self.runner = runner
        self.measurement_log = measurement_log

    def apply(self, task_scheduler: Any, task_id: int, measure_candidates: Any, builder_results: Any, runner_results: Any) -> None:
        ctx = self.contexts[task_id]
        task = self.progress.tasks[task_id]
        workload = self.history.commit_workload(ctx.mod)
        for candidate, built, ran in zip(measure_candidates, builder_results, runner_results):
            error = built.error_msg or ran.error_msg
            run_secs = None if error else [float(x) for x in ran.run_secs]
            record = ms.database.TuningRecord(
                candidate.sch.trace,
                workload,
                run_secs if run_secs is not None else [FAILED_RUN_SECS],
                ctx.target,
                candidate.args_info,
            )
            if error:
                self.history.commit_tuning_record_with_error(record, str(error))
                task.failed += 1
            else:
                self.history.commit_tuning_record(record)
                mean = float(np.mean(run_secs))
                if task.best_sec is None or mean < task.best_sec:
                    task.best_sec = mean
            task.trials += 1
            self.progress.done += 1
            artifact = built.artifact_path
            if artifact and not str(artifact).startswith(CACHED_ARTIFACT_PREFIX):
                self._log_measurement(task, str(artifact), run_secs)
                _remove_artifact(str(artifact))
        self.sink.on_batch(self.progress, task)
        if self.stop.is_set():
            raise _StopRequested("stop requested")


    def _log_measurement(self, task: TaskProgress, artifact: str, run_secs: list[float] | None) -> None:
        """Append how the adaptive evaluator measured this candidate (runs used, final CV)."""
        adaptive = self.runner.adaptive_log.pop(artifact, None) if self.runner is not None else None
        if adaptive is None or self.measurement_log is None:
            return
        line = {
            "task": task.name,
            "runs": adaptive.runs,
            "micro_batches": adaptive.micro_batches,
            "cv": round(adaptive.cv, 5) if math.isfinite(adaptive.cv) else None,
            "stopped_by": adaptive.stopped_by,
            "mean_us": round(adaptive.mean_sec * 1e6, 3),
            "recorded": run_secs is not None,
        }
        with open(self.measurement_log, "a") as handle:
            handle.write(json.dumps(line) + "\n")


class _StopRequested(Exception):
    """Raised in a callback to unwind MetaSchedule's C++ loop after a Ctrl-C."""


def _remove_artifact(path: str) -> None:
    try:
        os.unlink(path)
        os.rmdir(os.path.dirname(path))
    except OSError:
        pass


class _StopSignal:
    """Which signal asked the run to stop (SIGINT from Ctrl-C, SIGTERM from ``kill``)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signum: int | None = None


@contextmanager
def _stop_on_signals(stop: _StopSignal) -> Iterator[None]:
    """First Ctrl-C or ``kill``: finish the batch in flight, keep it, stop. Second: stop now.

    The stop has to be a flag checked between batches, not an exception raised
    where the signal lands: the handler runs inside whichever Python callback
    MetaSchedule's C++ loop is calling, and the task scheduler catches errors
    from those callbacks, marks that one task failed and carries on tuning.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handled = (signal.SIGINT, signal.SIGTERM)
    previous = {signum: signal.getsignal(signum) for signum in handled}

    def handler(signum: int, frame: Any) -> None:
        if stop.event.is_set():
            for each, old in previous.items():
                signal.signal(each, old)
            if signum == signal.SIGTERM:
                raise SystemExit(128 + signum)
            raise KeyboardInterrupt
        stop.signum = signum
        stop.event.set()

    for signum in handled:
        signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


# ---------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------
def _task_flops(mod: Any) -> float:
    from tvm.s_tir.analysis import estimate_tir_flops

    try:
        return float(estimate_tir_flops(mod))
    except Exception:  # some fused functions have no countable loops
        return 0.0


def _check_combined_settings(profile: DeviceProfile) -> None:
    """Settings that are valid one by one but not together fail here, as profile errors."""
    from .errors import ProfileError
    from .measure.adaptive import AdaptiveEvaluator

    from .search.early_stop import make_early_stop
    from .search.factory import early_stop_params

    m = profile.measure
    if m.evaluator == "adaptive":
        try:
            AdaptiveEvaluator(m.micro_batch, m.max_runs, m.cv_threshold, m.min_runs, m.micro_batch_ms)
        except ValueError as error:
            raise ProfileError(f"{profile.origin}: [measure] {error}") from None
    try:
        make_early_stop(profile.tuning.early_stop, **early_stop_params(profile.tuning))
    except ValueError as error:
        raise ProfileError(f"{profile.origin}: [tuning] early stop: {error}") from None


def check_runnable_on_host(profile: DeviceProfile) -> None:
    """The loopback board runs code for this host's CPU only."""
    import platform

    if profile.rpc.device != "cpu" or profile.is_cross_compiled or profile.device.arch not in ("", platform.machine()):
        raise BoardError(
            f"profile '{profile.name}' targets {profile.device.arch} ({profile.rpc.device}); the built-in "
            f"loopback board runs {platform.machine()} CPU code only: pass --tracker HOST:PORT "
            f"(and --key) of a real board, or use --profile host"
        )


def run_tune(options: TuneOptions, sink: ProgressSink | None = None) -> dict[str, Any]:
    """Tune ``options.model`` for ``options.profile``; return the run summary."""
    sink = sink or ProgressSink()
    profile = options.profile
    trials = options.trials if options.trials is not None else profile.tuning.trials
    if trials < 0:
        raise EdgetuneError(f"--trials must be >= 0, got {trials} instead")
    key = options.key or profile.rpc.key

    # profile and model first: bad input fails before anything is started
    profile.check_buildable()
    _check_combined_settings(profile)
    target = profile.tvm_target()
    model = load_model(options.model)
    out_dir = Path(options.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    db_url = options.db or str(out_dir / "history.db")

    with ExitStack() as stack:
        # -- board ---------------------------------------------------------
        if options.tracker:
            address = TrackerAddress.parse(options.tracker, key)
            check_device_available(address)
            board_label = f"tracker {address.host}:{address.port}"
        else:
            check_runnable_on_host(profile)
            _announce(sink, trials, "starting loopback tracker and RPC server")
            board = stack.enter_context(
                LocalBoard(key=key, num_threads=profile.device.num_threads, log_dir=out_dir / "board-logs")
            )
            address = board.start()
            board_label = "loopback board (embedded)"

        history = open_history(db_url, board_id=key)
        stack.callback(history.close)

        # -- tasks ---------------------------------------------------------
        load_tensor_intrinsics(target)
        prepared = prepare_for_tuning(model.mod, target)
        extracted = [
            task
            for task in ms.relax_integration.extract_tasks(prepared, target)
            if not task.mod.attrs.get("tirx.is_scheduled", False)  # nothing to tune
        ]
        workloads = [task.dispatched[0] for task in extracted]
        previous = [history.count_records(workload=mod, target=target) for mod in workloads]
        already = sum(previous)
        remaining = max(0, trials - already)
        # A budget smaller than one batch per task would starve the tasks
        # picked last (often the biggest convolutions): shrink the batches.
        per_iter = min(profile.tuning.num_trials_per_iter, max(1, remaining // max(1, len(extracted))))
        # MetaSchedule's console handler takes the level its logger has right
        # now: keep its per-round tables in the log files, off the terminal.
        logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
        cost_model = make_cost_model(profile.tuning.cost_model, seed=profile.tuning.seed, num_cores=os.cpu_count() or 1)
        search_report = SearchReport()
        suggested: dict[str, Any] | None = None
        per_type: dict[tuple[str, ...], dict[str, Any]] | None = None
        if options.suggested and remaining > 0 and workloads:
            _announce(sink, remaining, "reading suggested settings per task type from the history")
            suggested, per_type = _suggested_settings(history, target, profile, workloads, per_iter)
            _announce(sink, remaining, suggested["message"])
        contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
            extracted,
            work_dir=str(out_dir / "logs"),
            strategy=make_search_strategy(
                profile.tuning.search_strategy,
                num_trials_per_iter=per_iter,
                population_size=profile.tuning.population_size,
                tuning=profile.tuning,
                surrogate=cost_model,
                expected_trials_per_task=math.ceil(remaining / max(1, len(extracted))),
                report=search_report,
                suggested=per_type,
            ),
            num_threads=os.cpu_count() or 1,
            seed=profile.tuning.seed,
        )
        tasks = [
            TaskProgress(index=i, name=ctx.task_name, weight=float(w), flops=_task_flops(ctx.mod), previous_trials=n)
            for i, (ctx, w, n) in enumerate(zip(contexts, weights, previous))
        ]
        cache = CandidateCache()
        for ctx, task in zip(contexts, tasks):
            cache.add_history(history, ctx.mod, target)
            best = history.best_record(ctx.mod, target)
            if best is not None:
                task.best_sec = float(np.mean([float(x) for x in best.run_secs]))
        progress = TuneProgress(budget=remaining, tasks=tasks)

        # -- search, build, measure, history ----------------------------------
        stop = _StopSignal()
        builder = WarmBuilder(
            cross_compiler=profile.build.cross_compiler,
            cross_compiler_flags=tuple(profile.build.cross_compiler_flags),
            timeout_sec=profile.build.timeout_sec,
            max_workers=profile.build.workers,
            lookup_cached=cache.lookup_mod,
        )
        stack.callback(builder.close)
        runner = TrackerRunner(
            address,
            device=profile.rpc.device,
            config=profile.measure,
            session_timeout_sec=profile.rpc.session_timeout_sec,
            lookup_cached=cache.lookup_key,
        )
        stack.callback(runner.close)
        interrupted = False
        tune_seconds = 0.0
        warm = WarmStartReport()
        scheduler_name = options.scheduler or profile.tuning.task_scheduler
        # The embedded board is this host's CPU: a batch timed while the next one is
        # searched and built comes out slow, so edgetune's schedulers never overlap them
        # there. MetaSchedule's own schedulers cannot be told (None in the summary).
        awaits = None if scheduler_name in ("gradient", "round-robin") else not options.tracker
        if remaining > 0 and contexts:
            progress.phase = "starting build workers"
            sink.on_phase(progress)
            builder.start()
            progress.phase = "tuning"
            progress.started = time.monotonic()
            sink.on_phase(progress)
            per_task = profile.tuning.max_trials_per_task or remaining
            tune_started = time.monotonic()
            try:
                with _stop_on_signals(stop):
                    if options.warm_start != "off":
                        progress.phase = "training the cost model on the history (warm start)"
                        sink.on_phase(progress)
                        warm = warm_start(
                            cost_model, [ctx.mod for ctx in contexts], history, target, board_id=key, scope=options.warm_start
                        )
                        progress.phase = "tuning"
                        sink.on_phase(progress)
                    if stop.event.is_set():
                        raise _StopRequested("stop requested during the warm start")
                    ms.tune_tasks(
                        tasks=contexts,
                        task_weights=weights,
                        work_dir=str(out_dir / "logs"),
                        max_trials_global=remaining,
                        max_trials_per_task=per_task,
                        num_trials_per_iter=per_iter,
                        builder=builder,
                        runner=runner,
                        database=history,
                        cost_model=cost_model,
                        measure_callbacks=[
                            RecordAndReport(
                                history, contexts, progress, sink, stop.event, runner=runner, measurement_log=out_dir / MEASUREMENT_LOG
                            ),
                            ms.measure_callback.UpdateCostModel(),
                        ],
                        task_scheduler=make_task_scheduler(
                            scheduler_name, peak_gflops=profile.device.peak_gflops, seed=profile.tuning.seed, wait_for_results=awaits
                        ),
                    )
            except BaseException:
                # whatever TVM turned our _StopRequested into on its way back
                if not stop.event.is_set():
                    raise
                interrupted = True
            tune_seconds = time.monotonic() - tune_started

        summary: dict[str, Any] = {
            "edgetune_version": __version__,
            "tvm_version": tvm.__version__,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "model": {"source": model.source, "name": model.name, "sha256": model.sha256},
            "profile": profile.name,
            "target": target.export() if hasattr(target, "export") else str(target),
            "board": {"label": board_label, "tracker": f"{address.host}:{address.port}", "key": key},
            "history": history.url,
            "trials": {
                "budget": trials,
                "in_history_before": already,
                "this_run": progress.done,
                "served_from_history": builder.stats.cached,
                "measured_on_device": runner.stats.measured,
                "failed": sum(t.failed for t in tasks),
                "build_timeouts": builder.stats.timed_out,
            },
            "seconds": {
                "tuning_wall": tune_seconds,
                "device": runner.stats.device_seconds,
                "upload": runner.stats.upload_seconds,
                "build": builder.stats.build_seconds,
            },
            "search": {
                "strategy": profile.tuning.search_strategy,
                "population_size": (profile.tuning.population_size or auto_population(per_iter))
                if profile.tuning.search_strategy == "evolutionary"
                else None,
                "num_trials_per_iter": per_iter,
                "cost_model": profile.tuning.cost_model,
                "task_scheduler": scheduler_name,
                "scheduler_awaits_measurements": awaits,
            },
            "measurement": _measurement_summary(profile, runner),
            "measurement_reduction": {
                "sampler": profile.tuning.sampler,
                "early_stop": profile.tuning.early_stop,
                "exploration": profile.tuning.exploration,
                **search_report.to_dict(),
            }
            if search_report.tasks
            else None,
            "warm_start": {"scope": options.warm_start, **warm.to_dict()},
            "suggested": _with_applied(suggested, search_report, contexts),
            "interrupted": interrupted,
            "tasks": [t.to_dict() for t in tasks],
        }
        if interrupted:
            _write_summary(out_dir, summary)
            raise TuningInterrupted(
                f"interrupted: {progress.done} measurements of this run are kept in {history.url}; "
                f"run the same command again to resume",
                signum=stop.signum,
            )

        # -- deploy: compile with the best records, run on the device ------------
        builder.close()  # free the workers' memory before whole-model builds
        if options.evaluate:
            progress.phase = "compiling and measuring the whole model on the device"
            sink.on_phase(progress)
            summary["end_to_end"] = _evaluate(model, profile, target, history, address, out_dir)
        _write_summary(out_dir, summary)
        return summary


def _announce(sink: ProgressSink, budget: int, phase: str) -> None:
    """Show a phase before the tasks (and so the run's progress record) exist."""
    progress = TuneProgress(budget=budget, tasks=[])
    progress.phase = phase
    sink.on_phase(progress)


def _suggested_settings(
    history: Any, target: Any, profile: DeviceProfile, workloads: list[Any], batch: int
) -> tuple[dict[str, Any], dict[tuple[str, ...], dict[str, Any]] | None]:
    """``--suggested``: the settings per task type of this model from the history, for the search strategy.

    Returns the summary's ``suggested`` entry (its ``message`` says which task
    types keep the profile's settings) and ``{operator: settings}`` for
    :class:`~edgetune.search.adaptive.AdaptiveSearch` (None when the profile's
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
    entry: dict[str, Any] = {
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


def _with_applied(suggested: dict[str, Any] | None, report: SearchReport, contexts: list[Any]) -> dict[str, Any] | None:
    """The summary's ``suggested`` entry with what each task got, in task order."""
    if suggested is None:
        return None
    names = [str(ctx.task_name) for ctx in contexts]
    suggested["tasks"] = [report.suggested[name] for name in names if name in report.suggested]
    return suggested


def _measurement_summary(profile: DeviceProfile, runner: TrackerRunner) -> dict[str, Any]:
    """How candidates were timed, and the runs the adaptive evaluator saved against its cap."""
    m, stats = profile.measure, runner.stats
    if m.evaluator != "adaptive":
        return {"evaluator": "fixed", "number": m.number, "repeat": m.repeat, "min_repeat_ms": m.min_repeat_ms}
    timed = stats.stopped_by_cv + stats.stopped_by_cap
    return {
        "evaluator": "adaptive",
        "micro_batch": m.micro_batch,
        "max_runs": m.max_runs,
        "cv_threshold": m.cv_threshold,
        "candidates": timed,
        "runs": stats.runs,
        "mean_runs_per_candidate": stats.runs / timed if timed else None,
        "stopped_by_cv": stats.stopped_by_cv,
        "stopped_by_cap": stats.stopped_by_cap,
        "runs_saved_vs_cap": 1 - stats.runs / (timed * m.max_runs) if timed else None,
        "log": MEASUREMENT_LOG,
    }


def _evaluate(
    model: LoadedModel, profile: DeviceProfile, target: Any, history: Any, address: TrackerAddress, out_dir: Path
) -> dict[str, Any]:
    tuned_path = export_model(compile_model(model.mod, target, history), out_dir / ARTIFACT_NAME, profile)
    untuned_path = export_model(compile_model(model.mod, target), out_dir / UNTUNED_ARTIFACT_NAME, profile)
    inputs = [model.random_inputs(seed=0)[spec.name] for spec in model.inputs]
    timing = dict(number=profile.measure.number, repeat=max(profile.measure.repeat, 3), min_repeat_ms=profile.measure.min_repeat_ms)
    untuned = run_on_board(address, profile.rpc.device, untuned_path, inputs, **timing)
    tuned = run_on_board(address, profile.rpc.device, tuned_path, inputs, **timing)
    match, max_diff = compare_outputs(untuned.outputs, tuned.outputs)
    if not match:
        raise TargetError(
            f"tuned build's outputs differ from the untuned build's on the device (max abs diff {max_diff:.3g}); "
            f"the artifact is kept at {tuned_path} for inspection"
        )
    return {
        "artifact": str(tuned_path),
        "untuned_artifact": str(untuned_path),
        "untuned_latency": untuned.latency.to_dict(),
        "tuned_latency": tuned.latency.to_dict(),
        "speedup": untuned.latency.median_ms / tuned.latency.median_ms if tuned.latency.median_ms else math.nan,
        "outputs_match": match,
        "max_abs_diff": max_diff,
    }


def _write_summary(out_dir: Path, summary: dict[str, Any]) -> Path:
    path = out_dir / SUMMARY_NAME
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    os.replace(tmp, path)
    return path
