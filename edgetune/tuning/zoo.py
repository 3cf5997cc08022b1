"""``edgetune schedules build``: tune a zoo of models through the product pipeline into one history, export a library.

The library format and its use in a tune are :mod:`edgetune.schedules` (below
tuning); building one drives :func:`run_tune`, so it lives here, above both.

Many hours of tuning on a 2-core host, so it is resumable: the history is
the working store. Every model is tuned by :func:`edgetune.tuning.run_tune`
(what ``edgetune tune`` runs) with ``--no-evaluate``, each task given the
budget per workload in measured trials (``tuning.max_trials_per_task``, no early stop), and a
workload shared by several models is tuned once. Interrupted (Ctrl-C, a closed session), the
same command resumes where the history stops; models whose tasks all have
their budget are skipped at once. With a library to extend (``missing_from``), only the tasks whose
exact workload it lacks are tuned: a model's new layers (a new resolution, a graph change) are built
without tuning again what the library holds, and the result merged into it. A build stopped part-way (Ctrl-C, or ``hours``, a time
limit for a night or a session) still writes the library of what it measured, and its zoo
says how far the model it stopped in got.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from ..errors import OptionError, TuningInterrupted
from ..schedules.export import export_library
from ..schedules.library import DEFAULT_TOP_K, ScheduleLibrary, target_cpu
from ..tasks.provenance import model_writer, zoo_entry
from .progress import ProgressSink, TaskProgress, TuneProgress

if TYPE_CHECKING:
    from tvm.s_tir.meta_schedule import ExtractedTask
    from tvm.target import Target

    from ..common.interrupts import StopSignal
    from ..profile import DeviceProfile

#: seconds between two progress lines of one model (a model of the zoo can take an hour)
PROGRESS_EVERY_SEC = 60.0


@dataclass
class ModelBuilt:
    spec: str
    tasks: int
    trials_this_run: int
    in_history_before: int
    seconds: float
    #: tasks of the model with the whole budget in the history
    tasks_at_budget: int = 0
    #: the build stopped in this model (Ctrl-C or its time limit): the rest of its tasks wait for a rerun
    stopped: bool = False
    #: with a library to extend: the model's tasks in all, of which only ``tasks`` (those it lacked) were tuned
    of_tasks: int | None = None
    #: the tool that wrote a model file ("torch.onnx.export (dynamo exporter), PyTorch 2.13.0"); None for a demo
    writer: str | None = None
    #: which of its tasks were tuned when not all ("the 4 heaviest of its 120 tasks"); None: all of them
    chosen: str | None = None

    def label(self, missing_from: str = "the library", cpu: str = "") -> str:
        """How the library's zoo names it: a model stopped part-way, or tuned only in part, says so."""
        notes = []
        if self.chosen is not None:
            notes.append(self.chosen)
        elif self.of_tasks is not None:
            notes.append(f"{'the ' + str(self.tasks) if self.tasks > 1 else 'the one'} of its {self.of_tasks} tasks "
                         f"{missing_from} lacked{_for(cpu)}")
        if self.stopped:
            notes.append(f"{self.tasks_at_budget} of {'them' if self.of_tasks is not None else f'its {self.tasks} tasks'} "
                         "at the budget")
        entry = zoo_entry(self.spec, self.writer)  # a real export says which exporter wrote it (issue 52)
        return f"{entry} ({'; '.join(notes)})" if notes else entry


class _BuildProgress(ProgressSink):
    """One line a minute while a model tunes; asks the run to stop (after the batch in flight) at the deadline."""

    def __init__(self, label: str, say: Callable[[str], None], deadline: float | None, clock: Callable[[], float]) -> None:
        self.label, self.say, self.deadline, self.clock = label, say, deadline, clock
        self.stop: StopSignal | None = None  # the run's, set once the pipeline exists
        self.timed_out = False
        self._last = clock()

    def on_batch(self, progress: TuneProgress, task: TaskProgress) -> None:
        now = self.clock()
        if now - self._last >= PROGRESS_EVERY_SEC:
            self._last = now
            self.say(f"{self.label}: {progress.done} of up to {progress.budget} trials, {progress.elapsed / 60:.0f} min")
        if self.deadline is not None and now >= self.deadline and self.stop is not None and not self.stop.event.is_set():
            self.timed_out = True
            self.stop.event.set()


def build_library(
    zoo: Sequence[str],
    profile: DeviceProfile,
    db: str,
    *,
    budget_per_workload: int,
    work_dir: Path,
    out: Path | None = None,
    top_k: int = DEFAULT_TOP_K,
    tracker: str | None = None,
    key: str | None = None,
    hours: float | None = None,
    missing_from: ScheduleLibrary | None = None,
    for_this_cpu: bool = False,
    heaviest: int | None = None,
    start_from: ScheduleLibrary | None = None,
    operator: str | None = None,
    say: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[list[ModelBuilt], ScheduleLibrary | None]:
    """Tune every model of ``zoo`` at ``budget_per_workload`` trials per task into ``db``; export to ``out``.

    ``tracker``/``key`` name a board (farm) to measure on; without them the loopback board of this host.
    ``hours``: stop measuring after that long (the batch in flight finishes), write the library of what the
    history holds and return; the same call resumes. Ctrl-C writes it too, then raises as a tune does.
    ``missing_from``: tune only the tasks whose exact workload that library lacks (a model it holds whole is skipped),
    each starting from that library's schedules of other shapes and epilogues, adapted.
    ``for_this_cpu`` (with ``missing_from``): a workload that library holds only as other CPU models' schedules counts
    as lacked too (the target's ``mcpu``): a family shares instructions, not the best tiles, so a new CPU model builds
    its own schedules for the zoo, each starting from the other models' schedules of its own workload.
    ``heaviest``: tune only each model's ``heaviest`` tasks by floating-point work (FLOPs times the times the model
    runs the task), of those ``missing_from`` lacks when given: a deeper budget where the model's time is.
    ``start_from``: every task starts from that library's schedules (its own workload's, else its neighbours',
    adapted), so the build deepens what the library gives instead of starting from scratch; merge the result
    into it (``schedules merge`` keeps each workload's fastest).
    ``operator``: tune only the tasks that compute this operator (a block name of their workload, such as
    ``depthwise_conv2d_NCHWc``), before the other selections: an operator's entries built again after its search
    space changed (a model without one is skipped).
    """
    from .pipeline import TuneOptions, TuningPipeline
    from .summary import TuneSummary

    say = say or _print_now

    cpu = _check_options(zoo, profile, budget_per_workload, hours, heaviest, missing_from, for_this_cpu, start_from)
    # each task given the whole budget: the adaptive early stop (which saves a user's trials) would leave most
    # workloads far below the budget; nor is a task minor (tuning.minor_task_share): a reshape minor in one model can
    # be a model's slowest. A zoo is tuned from scratch (a library must not depend on a library); the tasks a library
    # lacks (missing_from) start from that library's schedules of their neighbours, adapted, as a user's tune of them
    # does: the build's search then begins where a user's tune would, never below what the library already gives;
    # a deepening build (start_from) starts every task there
    origin = missing_from if missing_from is not None else start_from
    start = str(origin.path) if origin is not None and origin.path else "off"
    profile = profile.with_overrides(
        tuning={"max_trials_per_task": budget_per_workload, "schedules": start, "early_stop": "none",
                "minor_task_share": 0}
    )
    deadline = None if hours is None else clock() + hours * 3600
    built: list[ModelBuilt] = []
    operators_seen: set[str] = set()  # what the zoo's tasks compute: named when ``operator`` is none of them
    operator_found, models_read = False, 0
    stopped: TuningInterrupted | None = None
    timed_out = False
    for number, spec in enumerate(zoo, start=1):
        if deadline is not None and clock() >= deadline:
            say(f"time limit of {hours:g} h reached before {spec}: run the same command again to go on")
            break
        out_dir = work_dir / _safe(spec)
        options = TuneOptions(profile=profile, model=spec, out_dir=out_dir, db=db, evaluate=False, tracker=tracker, key=key)
        sink = _BuildProgress(f"[{number}/{len(zoo)}] {spec}", say, deadline, clock)
        pipeline = TuningPipeline(options, sink)
        sink.stop = pipeline.stop
        target, model = pipeline.check_inputs()
        writer = None if model is None or spec.startswith("demo:") else model_writer(model.format, model.data)
        extracted = pipeline.extract_tasks(target, model)
        computing = extracted
        if operator is not None:
            computing, anchors = _computing(extracted, operator)
            operators_seen.update(anchors)
            operator_found, models_read = operator_found or bool(computing), models_read + 1
            if not computing:
                say(f"[{number}/{len(zoo)}] {spec}: none of its {len(extracted)} tasks computes {operator}: skipped")
                continue
        selection = _select_tasks(computing, missing_from, heaviest, start_from, cpu)
        if selection is None:
            which = f" computing {operator}" if operator is not None else ""
            say(f"[{number}/{len(zoo)}] {spec}: all its {len(computing)} tasks{which} are in {_held(missing_from, cpu)}: "
                "skipped")
            continue
        if operator is not None:
            selection = selection.of_operator(operator, len(extracted), f"those {_name(missing_from)} lacked{_for(cpu)}")
        tasks, of_tasks, chosen = len(selection.wanted), selection.of_tasks, selection.chosen
        if tasks < len(extracted):
            options.task_names = [task.task_name for task in selection.wanted]  # the pipeline tunes these only
        options.trials = pipeline.trials = budget_per_workload * tasks
        say(f"[{number}/{len(zoo)}] {spec}: {_tasks(tasks)}{selection.detail(missing_from, cpu)}, up to {options.trials} trials")
        started = time.monotonic()
        try:
            summary = pipeline.run()
        except TuningInterrupted as interrupted:
            summary, stopped = TuneSummary.load(out_dir), interrupted
        at_budget = sum(t.trials_before + t.trials_this_run >= budget_per_workload for t in summary.tasks)
        built.append(ModelBuilt(spec, tasks, summary.trials.this_run, summary.trials.in_history_before,
                                time.monotonic() - started, at_budget, stopped is not None, of_tasks, writer, chosen))
        say(
            f"[{number}/{len(zoo)}] {spec}: {summary.trials.this_run} trials this run, "
            f"{summary.trials.in_history_before} in the history before, {built[-1].seconds:.0f} s"
            + (f"; stopped with {at_budget} of its {tasks} tasks at the budget" if stopped else "")
        )
        if stopped is not None:
            # the time limit's stop, unless a Ctrl-C or kill came too: that one exits as a tune does
            timed_out = sink.timed_out and pipeline.stop.signum is None
            if timed_out:
                say(f"time limit of {hours:g} h reached in {spec}: run the same command again to go on")
            break
    library = None
    if operator is not None and not operator_found and models_read == len(zoo):
        raise OptionError(f"--operator must name an operator of the zoo's tasks ({', '.join(sorted(operators_seen))}), "
                          f"got {operator!r} instead")
    if out is not None and not built and missing_from is not None:
        say(f"nothing to build: {_name(missing_from)} holds every task of the zoo{_for(cpu)}; {out} not written")
    if out is not None and built:
        # a model the build stopped in is named with how far it got: a library user must not take it as done
        covered = [b.label(_name(missing_from), cpu) for b in built]
        library = _export(profile, db, out, covered, top_k=top_k, budget_per_workload=budget_per_workload, tracker=tracker)
        say(f"wrote {out}: {len(library.workloads)} workloads"
            + (f" (the build stopped part-way; zoo: {', '.join(covered)})" if len(built) < len(zoo) or stopped else ""))
    if stopped is not None and not timed_out:
        raise stopped
    return built, library


def _check_options(
    zoo: Sequence[str], profile: DeviceProfile, budget_per_workload: int, hours: float | None, heaviest: int | None,
    missing_from: ScheduleLibrary | None, for_this_cpu: bool, start_from: ScheduleLibrary | None,
) -> str:
    """One line on the first bad option (nothing tuned, nothing written); the CPU model ``for_this_cpu`` reads, or ""."""
    if budget_per_workload < 1:
        raise OptionError(f"--budget must be >= 1 trial per workload, got {budget_per_workload} instead")
    if hours is not None and not hours > 0:
        raise OptionError(f"--hours must be > 0, got {hours} instead")
    if not zoo:
        raise OptionError("the zoo must name at least one model, got none instead")
    if heaviest is not None and heaviest < 1:
        raise OptionError(f"--heaviest must be >= 1 task per model, got {heaviest} instead")
    cpu = target_cpu(profile.tvm_target()) if for_this_cpu else ""
    if for_this_cpu and missing_from is None:
        raise OptionError("--for-this-cpu must come with --missing-from (the library whose CPU models it reads), got "
                          "it alone instead")
    if for_this_cpu and not cpu:
        raise OptionError(f"--for-this-cpu needs a target that names its CPU model (mcpu), got "
                          f"{profile.tvm_target().export()} instead")
    if missing_from is not None and start_from is not None:
        raise OptionError("--start-from must be left out with --missing-from (whose tasks start from its library "
                          "already), got both instead")
    return cpu


def _export(
    profile: DeviceProfile, db: str, out: Path, covered: list[str], *, top_k: int, budget_per_workload: int, tracker: str | None
) -> ScheduleLibrary:
    """Write the library of what ``db`` holds for the profile's target, its header naming the ``covered`` zoo."""
    from ..history import open_history
    from ..measure.runner import timing_of
    from ..tasks.graph import layout_name

    history = open_history(db, read_only=True, timing=timing_of(profile))
    try:
        target = profile.tvm_target()
        return export_library(history, out, target, top_k=top_k, budget_per_workload=budget_per_workload,
                              zoo=covered, measured_on=_measured_on(target, tracker),
                              conv_layout=layout_name(profile.tuning.conv_layout, target))
    finally:
        history.close()


@dataclass(frozen=True)
class _Selection:
    """The tasks of one model a build tunes, and how its zoo entry and progress line say which."""

    wanted: list[ExtractedTask]
    of_tasks: int | None  # the model's tasks in all, where only those a library lacked (or the heaviest) are tuned
    chosen: str | None  # "the 3 heaviest of its 137 tasks; started from ...", where that is how they were chosen

    def detail(self, missing_from: ScheduleLibrary | None, cpu: str = "") -> str:
        if self.chosen is not None:
            return f" ({self.chosen})"
        if self.of_tasks:
            return (f" ({_name(missing_from)} lacks them{_for(cpu)}; it holds the other "
                    f"{self.of_tasks - len(self.wanted)})")
        return ""

    def of_operator(self, operator: str, in_all: int, lacked: str) -> _Selection:
        """This selection among a model's tasks that compute ``operator``, said out of its ``in_all`` tasks;
        ``lacked``: how the tasks a library lacked are named, where that is how they were chosen."""
        count = len(self.wanted)
        chosen = f"{'the ' + str(count) if count > 1 else 'the one'} of its {in_all} tasks computing {operator}"
        if self.chosen is not None:
            chosen += f"; {self.chosen}"
        elif self.of_tasks is not None:
            chosen += f", {lacked}"
        return _Selection(self.wanted, in_all, chosen)


def _computing(extracted: Sequence[ExtractedTask], operator: str) -> tuple[list[ExtractedTask], set[str]]:
    """Those of ``extracted`` whose workload computes ``operator`` (one of its block names), and the operators all of
    them compute (:func:`~edgetune.tasks.signature.anchor_block`), to name where ``operator`` is none of them."""
    from ..tasks.signature import anchor_block, operator_signature

    signatures = [operator_signature(task.dispatched[0]) for task in extracted]  # each serialises its module: once
    computing = [task for task, signature in zip(extracted, signatures) if operator in signature]
    return computing, {anchor_block(signature) or "?" for signature in signatures}


def _select_tasks(
    extracted: Sequence[ExtractedTask], missing_from: ScheduleLibrary | None, heaviest: int | None,
    start_from: ScheduleLibrary | None, cpu: str = "",
) -> _Selection | None:
    """Those of ``extracted`` that ``missing_from`` lacks (with ``cpu``: lacks that CPU model's schedules of; all
    without it; None: it holds every one), then the ``heaviest`` of them."""
    wanted, of_tasks, chosen = list(extracted), None, None
    if missing_from is not None:
        wanted = [task for task in extracted if not _holds(missing_from, task, cpu)]
        if not wanted:
            return None
        of_tasks = len(extracted)
    if heaviest is not None and heaviest < len(wanted):
        lacked = f" {_name(missing_from)} lacked{_for(cpu)}" if missing_from is not None else ""
        chosen = f"the {_count(heaviest, 'heaviest')} of its {len(wanted)} tasks{lacked}"
        wanted, of_tasks = heaviest_tasks(wanted, heaviest), len(extracted)
    if start_from is not None:
        chosen = (f"{chosen}; " if chosen else "") + f"started from {_name(start_from)}"
    return _Selection(wanted, of_tasks, chosen)


def _holds(library: ScheduleLibrary, task: ExtractedTask, cpu: str) -> bool:
    """Whether ``library`` holds ``task``'s exact workload (with ``cpu``: schedules of it that CPU model measured)."""
    workload = library.find(task.dispatched[0])
    return workload is not None and (not cpu or any(schedule.mcpu == cpu for schedule in workload.schedules))


def _for(cpu: str) -> str:
    return f" for {cpu}" if cpu else ""


def _held(library: ScheduleLibrary | None, cpu: str) -> str:
    return f"{_name(library)} with {cpu} schedules" if cpu else _name(library)


def heaviest_tasks(extracted: Sequence[ExtractedTask], count: int) -> list[ExtractedTask]:
    """The ``count`` tasks with the most floating-point work in the model (FLOPs x how often it runs each), in model order.

    The compute-bound convolutions and dense layers that hold most of a model's time: where a deeper budget pays.
    """
    from ..tasks.flops import task_flops

    work = [task_flops(task.dispatched[0]) * float(task.weight) for task in extracted]
    kept = sorted(sorted(range(len(extracted)), key=lambda i: work[i], reverse=True)[:count])
    return [extracted[i] for i in kept]


def _count(count: int, what: str) -> str:
    return f"{what} one" if count == 1 else f"{count} {what}"


def _print_now(message: str) -> None:
    """A build runs for hours, often into a log file: each line there at once, not when the buffer fills."""
    print(message, flush=True)


def _measured_on(target: Target, tracker: str | None) -> str | None:
    """This host's CPU when the build measured on the loopback board (whatever mcpu the code was made for)."""
    if tracker is not None or str(target.kind.name) != "llvm":
        return None  # the boards of a farm: their names are in every schedule
    from ..profile.host import host_cpu

    return f"{host_cpu().name} (this host, the loopback board)"


def _tasks(count: int) -> str:
    return f"{count} task" + ("s" if count != 1 else "")


def _name(library: ScheduleLibrary | None) -> str:
    return Path(library.path).name if library is not None and library.path else "the library"


def _safe(spec: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in spec.removeprefix("demo:"))


def build_command(args: argparse.Namespace) -> int:
    """``edgetune schedules build``: the zoo (or ``--zoo``) at ``--budget`` into ``--db``, the library to ``--out``."""
    from ..profile import load_profile
    from ..tasks.demo import ZOO

    profile = load_profile(args.profile)
    if args.missing_from and args.start_from:
        raise OptionError("--start-from must be left out with --missing-from (whose tasks start from its library "
                          "already), got both instead")
    build_library(list(args.zoo or ZOO), profile, args.db, budget_per_workload=args.budget,
                  work_dir=Path(args.work), out=Path(args.out) if args.out else None, tracker=args.tracker, key=args.key,
                  hours=args.hours, missing_from=_library_option("--missing-from", args.missing_from, profile),
                  for_this_cpu=args.for_this_cpu,
                  heaviest=args.heaviest, start_from=_library_option("--start-from", args.start_from, profile),
                  operator=args.operator)
    return 0


def _library_option(option: str, value: str | None, profile: DeviceProfile) -> ScheduleLibrary | None:
    """The library a ``--missing-from``/``--start-from`` names (a file or auto), or one line on why it cannot be used."""
    if not value:
        return None
    from ..schedules.use import choose_library

    choice = choose_library(value, profile.tvm_target())
    if choice.library is None:
        raise OptionError(f"{option} must name a library of this profile's family, got '{value}' instead ({choice.message})")
    return choice.library
