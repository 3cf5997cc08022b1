"""The tuning pipeline: profile -> board -> tasks -> search -> build -> measure -> history -> deploy.

:class:`TuningPipeline` runs one tune from a profile and the run's options;
:func:`run_tune` is what ``edgetune tune`` and every benchmark call. A
benchmark that compares one component passes it in through :class:`Components`
and keeps the rest of the product as it is.

A run, in order, each stage handing a frozen record to the next:
:func:`~.inputs.check_inputs` (bad input fails before anything starts), the
board (:func:`~.inputs.make_board`) and the history are opened,
:func:`~.plan.plan_tasks` (a :class:`~.plan.TaskPlan`),
:func:`~.session.open_session` (a :class:`~.session.TuneSession` and the
:class:`~.plan.FirstMeasurements`), :func:`~.run.tune` (the first
measurements, then the one ``ms.tune_tasks`` call: a :class:`~.run.TuneOutcome`),
:func:`~.summarize.summarize` (a :class:`TuneSummary`), and end-to-end evaluation.
"""

from __future__ import annotations

import logging
from contextlib import ExitStack
from pathlib import Path

from tvm.s_tir.meta_schedule import ExtractedTask
from tvm.target import Target

from ..board.base import Board
from ..common.interrupts import StopSignal
from ..common.run_dir import RunDir
from ..errors import TuningInterrupted
from ..history import open_history
from ..measure.runner import TrackerRunner, timing_of
from ..builder.builder import WarmBuilder, start_workers_early
from ..schedules.use import LibraryChoice, choose_library
from ..tasks import LoadedModel
from .components import Components, CostModel, TuningHistory
from .evaluate import evaluate_end_to_end
from .inputs import RunSettings, TuneOptions, check_inputs, make_board
from .plan import TaskPlan, extract_tasks, plan_tasks
from .progress import ProgressSink, TuneProgress, announce
from .run import TuneOutcome, tune
from .session import TuneSession, make_cost_model, open_session
from .summarize import summarize, time_baseline
from .summary import TuneSummary, append_session

__all__ = ["Components", "TaskPlan", "TuneOptions", "TuneOutcome", "TuneSession", "TuningPipeline", "run_tune"]


class TuningPipeline:
    """One tune: the stages of :mod:`edgetune.tuning` run in order by :meth:`run`.

    ``trials`` and ``options`` may be changed between construction and :meth:`run`
    (a zoo build sets them once it knows the model's tasks); each stage reads them
    through the :class:`~.inputs.RunSettings` made when it starts.
    """

    def __init__(self, options: TuneOptions, sink: ProgressSink | None = None, components: Components | None = None) -> None:
        self.options = options
        self.profile = options.profile
        self.sink = sink or ProgressSink()
        self.components = components or Components()
        self.trials = options.trials if options.trials is not None else self.profile.tuning.trials
        self.key = options.key or self.profile.rpc.key
        self.stop = StopSignal()
        self._progress: TuneProgress | None = None  # the run's, once it exists (for board messages)
        self._library: LibraryChoice | None = None  # tuning.schedules, once loaded

    def settings(self) -> RunSettings:
        """What every stage reads, as this pipeline stands now."""
        return RunSettings(self.options, self.profile, self.sink, self.components, self.trials, self.key, self.stop,
                           self.choose_library)

    def choose_library(self, target: Target) -> LibraryChoice:
        """The schedule library (tuning.schedules), loaded once per run."""
        if self._library is None:
            self._library = choose_library(self.profile.tuning.schedules, target)
        return self._library

    # -- the stages a caller may run alone (a zoo build, benchmarks, tests) ----------
    def check_inputs(self) -> tuple[Target, LoadedModel | None]:
        """Profile, settings and model first: bad input fails before anything is started."""
        return check_inputs(self.settings())

    def make_board(self, out_dir: Path) -> Board:
        return make_board(self.settings(), out_dir, self.notify)

    def extract_tasks(self, target: Target, model: LoadedModel | None) -> list[ExtractedTask]:
        """The model's tunable tasks (or the ones passed in), as MetaSchedule ``ExtractedTask``s."""
        return extract_tasks(self.settings(), target, model)[0]

    def plan_tasks(self, history: TuningHistory, target: Target, model: LoadedModel | None) -> TaskPlan:
        return plan_tasks(self.settings(), history, target, model)

    def make_cost_model(self) -> CostModel:
        return make_cost_model(self.settings())

    def notify(self, message: str) -> None:
        """A one-line message about the board (throttling, a restarted server) on the progress display."""
        progress = self._progress
        if progress is None:
            announce(self.sink, self.trials, message)
            return
        phase, progress.phase = progress.phase, message
        try:
            self.sink.on_phase(progress)
        finally:
            progress.phase = phase

    def _seen(self, progress: TuneProgress) -> None:
        self._progress = progress

    # -- the run ----------------------------------------------------------------
    def run(self) -> TuneSummary:
        """Tune the model for the profile; return (and write) the run summary."""
        run = self.settings()
        target, model = check_inputs(run)
        if run.components.builder is None:  # the build workers' imports overlap the board's start and the planning
            start_workers_early(run.profile.build.workers, run.profile.build.timeout_sec)
        out_dir = Path(self.options.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        with ExitStack() as stack:
            board = make_board(run, out_dir, self.notify)
            if board.awaits_measurements:
                announce(self.sink, self.trials, "starting loopback tracker and RPC server")
            address = stack.enter_context(board)
            history = open_history(
                self.options.db or str(RunDir(out_dir).history), board_id=self.key, timing=timing_of(self.profile)
            )
            stack.callback(history.close)
            if model is not None:  # before any measurement: an interrupted run's records have their recipe too
                history.recipes.store(model.sha256, target, model.recipe)
            # MetaSchedule's console handler takes the level its logger has right
            # now: keep its per-round tables in the log files, off the terminal.
            logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
            plan = plan_tasks(run, history, target, model)
            session, first = open_session(run, stack, plan, target, model, out_dir, board, address, history, self._seen)
            outcome = tune(run, plan, first, session) if plan.remaining > 0 and session.contexts else TuneOutcome()
            if isinstance(session.runner, TrackerRunner):
                session.runner.wait_idle()
            summary = summarize(run, plan, session, outcome)
            if outcome.interrupted:
                summary.write(out_dir)
                append_session(out_dir, summary)
                reason = outcome.stop_reason
                raise TuningInterrupted(
                    ("stopped: " + reason.split(": ", 1)[-1] + "; " if reason else "interrupted: ")
                    + f"{session.progress.done} measurements of this run are kept in {history.url}; "
                    f"run the same command again to resume",
                    signum=self.stop.signum,
                )
            if isinstance(session.builder, WarmBuilder):
                session.builder.close()  # its artifacts go; its workers wait idle for this process's next run
            if self.options.evaluate:
                self._evaluate(run, session, summary)
            summary.write(out_dir)
            append_session(out_dir, summary)
            return summary

    def _evaluate(self, run: RunSettings, session: TuneSession, summary: TuneSummary) -> None:
        """The tuned model compiled and timed end to end on the board, and each of tuning.baseline's runtimes beside it."""
        model = session.model
        assert model is not None  # tasks passed in are refused with evaluate=True (check_inputs)
        session.progress.phase = "compiling and measuring the whole model on the device"
        self.sink.on_phase(session.progress)
        summary.end_to_end = evaluate_end_to_end(
            model, self.profile, session.target, session.history, session.address, session.out_dir,
        )
        summary.end_to_end.tuned_kernels_ms = summary.kernels_ms()
        runtimes = [name for name in self.profile.tuning.baseline.split(",") if name != "none"]
        summary.end_to_end.baselines = [
            time_baseline(run, session, model, summary.end_to_end.artifact, runtime).to_dict() for runtime in runtimes
        ]


def run_tune(options: TuneOptions, sink: ProgressSink | None = None, components: Components | None = None) -> TuneSummary:
    """Tune ``options.model`` for ``options.profile``; return the run summary (also written to ``summary.json``)."""
    return TuningPipeline(options, sink, components).run()
