"""``edgetune schedules build``: tune a zoo of models through the product pipeline into one history, export a library.

The library format and its use in a tune are :mod:`edgetune.schedules` (below
tuning); building one drives :func:`run_tune`, so it lives here, above both.

Many hours of tuning on a 2-core host, so it is resumable: the history is
the working store. Every model is tuned by :func:`edgetune.tuning.run_tune`
(what ``edgetune tune`` runs) with ``--no-evaluate``, each task given the
budget per workload in measured trials (``tuning.max_trials_per_task``, no early stop), and a
workload shared by several models is tuned once. Interrupted (Ctrl-C, a closed session), the
same command resumes where the history stops; models whose tasks all have
their budget are skipped at once.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import OptionError
from ..schedules.library import DEFAULT_TOP_K, ScheduleLibrary, export_library


@dataclass
class ModelBuilt:
    spec: str
    tasks: int
    trials_this_run: int
    in_history_before: int
    seconds: float


def build_library(
    zoo: Sequence[str],
    profile: Any,
    db: str,
    *,
    budget_per_workload: int,
    work_dir: Path,
    out: Path | None = None,
    top_k: int = DEFAULT_TOP_K,
    tracker: str | None = None,
    key: str | None = None,
    say: Callable[[str], None] = print,
) -> tuple[list[ModelBuilt], ScheduleLibrary | None]:
    """Tune every model of ``zoo`` at ``budget_per_workload`` trials per task into ``db``; export to ``out``.

    ``tracker``/``key`` name a board (farm) to measure on; without them the loopback board of this host.
    """
    from .pipeline import TuneOptions, TuningPipeline, run_tune

    if budget_per_workload < 1:
        raise OptionError(f"--budget must be >= 1 trial per workload, got {budget_per_workload} instead")
    if not zoo:
        raise OptionError("the zoo must name at least one model, got none instead")
    # tuned from scratch, each task given the whole budget: the library must not depend on a library, and
    # the adaptive early stop (which saves a user's trials) would leave most workloads far below the budget;
    # nor is a task minor (tuning.minor_task_share): a reshape minor in one model can be a model's slowest
    profile = profile.with_overrides(
        tuning={"max_trials_per_task": budget_per_workload, "schedules": "off", "early_stop": "none",
                "minor_task_share": 0}
    )
    built = []
    for number, spec in enumerate(zoo, start=1):
        out_dir = work_dir / _safe(spec)
        options = TuneOptions(profile=profile, model=spec, out_dir=out_dir, db=db, evaluate=False, tracker=tracker, key=key)
        pipeline = TuningPipeline(options)
        target, model = pipeline.check_inputs()
        tasks = len(pipeline.extract_tasks(target, model))
        options.trials = budget_per_workload * tasks
        say(f"[{number}/{len(zoo)}] {spec}: {tasks} tasks, up to {options.trials} trials")
        started = time.monotonic()
        summary = run_tune(options)
        built.append(ModelBuilt(spec, tasks, summary.trials.this_run, summary.trials.in_history_before,
                                time.monotonic() - started))
        say(
            f"[{number}/{len(zoo)}] {spec}: {summary.trials.this_run} trials this run, "
            f"{summary.trials.in_history_before} in the history before, {built[-1].seconds:.0f} s"
        )
    library = None
    if out is not None:
        from ..history import open_history
        from ..measure.runner import timing_of

        history = open_history(db, read_only=True, timing=timing_of(profile))
        try:
            target = profile.tvm_target()
            library = export_library(history, out, target, top_k=top_k, budget_per_workload=budget_per_workload,
                                     zoo=zoo, measured_on=_measured_on(target, tracker),
                                     conv_layout=_layout_of(profile.tuning.conv_layout, target))
        finally:
            history.close()
        say(f"wrote {out}: {len(library.workloads)} workloads")
    return built, library


def _layout_of(conv_layout: str, target: Any) -> str:
    """The layout the zoo's convolutions were tuned in, as a tune would name it (``NCHWc`` with its block)."""
    from ..tasks.graph import block_of, resolve_conv_layout

    layout = resolve_conv_layout(conv_layout, target)
    if layout.startswith("NCHW") and layout.endswith("c"):
        return f"NCHW{block_of(layout, target)}c"
    return "NCHW (as imported)" if layout == "as-is" else layout


def _measured_on(target: Any, tracker: str | None) -> str | None:
    """This host's CPU when the build measured on the loopback board (whatever mcpu the code was made for)."""
    if tracker is not None or str(target.kind.name) != "llvm":
        return None  # the boards of a farm: their names are in every schedule
    from ..profile.host import host_cpu

    return f"{host_cpu().name} (this host, the loopback board)"


def _safe(spec: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in spec.removeprefix("demo:"))


def build_command(args: argparse.Namespace) -> int:
    """``edgetune schedules build``: the zoo (or ``--zoo``) at ``--budget`` into ``--db``, the library to ``--out``."""
    from ..profile import load_profile
    from ..tasks.demo import ZOO

    build_library(list(args.zoo or ZOO), load_profile(args.profile), args.db, budget_per_workload=args.budget,
                  work_dir=Path(args.work), out=Path(args.out) if args.out else None, tracker=args.tracker, key=args.key)
    return 0
