"""The Python API: ``edgetune.tune(...)`` and ``edgetune.deploy(...)``.

They run what ``edgetune tune`` and ``edgetune deploy`` run: :func:`tune_options`
turns the arguments into :class:`~edgetune.tuning.TuneOptions` for both the CLI
and :func:`tune` (a board's defaults, the profile with its overrides, the
output directory), and :func:`tune` hands them to
:func:`~edgetune.tuning.run_tune`. Failures raise the
:class:`~edgetune.errors.EdgetuneError` subclasses the CLI turns into exit codes.

A model is an ONNX file, a ``.pt2`` file written by ``torch.export.save``, a
``demo:NAME[@RES]`` spec, an ``onnx.ModelProto`` or a
``torch.export.ExportedProgram``. An object is saved into the output directory
first (``NAME.onnx`` or ``NAME.pt2``) and tuned from there, so the run summary
names a file that ``deploy`` can load again to check its outputs.

Nothing heavy (TVM, torch, onnx) is imported until a function is called.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from .common.choices import TASK_SCHEDULERS, WARM_START_MODES
from .common.interrupts import forward_sigint_to_main_thread
from .errors import OptionError, ProfileError, TuningInterrupted
from .common.model_objects import DEFAULT_MODEL_NAME, model_arg, save_model
from .profile.schema import PROFILE_FLAGS

if TYPE_CHECKING:
    from .deployment.workflow import DeployResult
    from .tuning import ProgressSink, TuneOptions, TuneSummary

def default_out(model: str, profile: str) -> Path:
    """``./edgetune-out/MODEL-PROFILE``: where a run goes without ``--out``."""
    stem = model.split(":", 1)[1] if model.startswith("demo:") else Path(model).stem
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in f"{stem}-{profile}")
    return Path("edgetune-out") / safe


def tune_options(
    model: str,
    profile: Any = None,
    *,
    board: str | None = None,
    inventory: str | None = None,
    tracker: str | None = None,
    key: str | None = None,
    trials: int | None = None,
    db: str | None = None,
    out: str | os.PathLike[str] | None = None,
    evaluate: bool = True,
    warm_start: str = "same",
    suggested: bool = False,
    scheduler: str | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    **flags: str | None,
) -> "TuneOptions":
    """The options of one tuning run, as ``edgetune tune`` builds them from its flags.

    ``board`` names a board of the inventory: its profile, tracker and key are
    the defaults of ``profile``, ``tracker`` and ``key``. ``profile`` is a name,
    a TOML file or a :class:`~edgetune.profile.DeviceProfile`. ``flags`` are
    the profile keys declared with a flag (:data:`~edgetune.profile.schema.PROFILE_FLAGS`:
    ``sampler``, ``cost_model``, ``schedules``...; None keeps the profile's) and
    ``overrides`` any other profile keys by section
    (``{"tuning": {"num_trials_per_iter": 8}}``), validated like the file.
    """
    from .profile import DeviceProfile, load_profile

    unknown = sorted(set(flags) - set(PROFILE_FLAGS))
    if unknown:
        raise OptionError(f"tuning overrides must be among {', '.join(PROFILE_FLAGS)}, got {', '.join(unknown)} instead")
    _check_choice("warm_start", warm_start, WARM_START_MODES)
    if scheduler is not None:
        _check_choice("scheduler", scheduler, TASK_SCHEDULERS)
    for name, value in flags.items():
        if value is not None and PROFILE_FLAGS[name].choices:
            _check_choice(name, value, PROFILE_FLAGS[name].choices)
    if trials is not None and (isinstance(trials, bool) or not isinstance(trials, int) or trials < 0):
        raise OptionError(f"--trials must be >= 0, got {trials} instead")
    from .provision.board import choose_board

    where = choose_board(board, inventory, tracker, key)  # the inventory read once, TVM_TRACKER_* applied
    profile = profile or where.profile
    if not profile:
        raise ProfileError("tune needs --profile NAME or --board NAME (see `edgetune profiles list`)")
    loaded = profile if isinstance(profile, DeviceProfile) else load_profile(os.fspath(profile))
    sections: dict[str, dict[str, Any]] = {section: dict(values) for section, values in (overrides or {}).items()}
    for name, value in flags.items():
        if value is not None:
            flag = PROFILE_FLAGS[name]
            sections.setdefault(flag.section, {})[flag.key] = value
    if sections:
        loaded = loaded.with_overrides(**sections)
    from .tuning import TuneOptions  # TVM: imported once the options are known to be valid

    return TuneOptions(
        profile=loaded,
        model=model,
        out_dir=Path(out) if out else default_out(model, loaded.name),
        tracker=where.tracker,
        key=where.key,
        db=None if db is None else os.fspath(db),
        trials=trials,
        evaluate=evaluate,
        warm_start=warm_start,
        suggested=suggested,
        scheduler=scheduler,
        board_name=board or None,
        inventory=inventory,
        where=where,
    )


def tune(
    model: Any,
    profile: Any = None,
    *,
    trials: int | None = None,
    board: Any = None,
    inventory: str | None = None,
    tracker: str | None = None,
    key: str | None = None,
    db: str | os.PathLike[str] | None = None,
    out: str | os.PathLike[str] | None = None,
    name: str | None = None,
    evaluate: bool = True,
    warm_start: str = "same",
    suggested: bool = False,
    scheduler: str | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    progress: "bool | ProgressSink" = False,
    report: bool = True,
    **flags: Any,
) -> "TuneSummary":
    """Tune ``model`` for a device profile, measuring on the device; return the run summary.

    The same run as ``edgetune tune``, argument for flag: ``board`` is a board
    of the inventory (``edgetune provision``) or a
    :class:`~edgetune.board.base.Board`; ``tracker`` (``"host:port"``) and
    ``key`` reach a board through an RPC tracker; with neither, a loopback
    tracker and RPC server on this machine stand in for the board.
    ``profile`` defaults to the board's profile, else ``"host"``. ``trials``
    is the model's total budget on this target (the profile's by default);
    re-running resumes from the history database ``db`` (``OUT/history.db``).
    ``name`` names an ``onnx.ModelProto`` or ``ExportedProgram`` passed in
    (its file in ``out`` and the default ``out``). ``progress`` is False
    (quiet), True (the CLI's progress display on stderr) or a
    :class:`~edgetune.tuning.ProgressSink`. Every profile key that ``edgetune
    tune`` takes as a flag is a keyword argument too (``sampler="none"``,
    ``library_schedules=2``...; None keeps the profile's; listed below), and
    ``overrides`` sets any other key by section (``{"tuning": {"seed": 3}}``).

    The summary is also written to ``OUT/summary.json``; with ``evaluate``
    (the default) ``summary.artifact`` is the compiled ``model.so`` and
    ``summary.end_to_end`` its latency against the untuned build. With
    ``report`` (the default) ``OUT/report.html`` is written too, as by the
    CLI, also when the run is interrupted; a report that cannot be written is
    a warning, never a failed tune.
    """
    from .board.base import Board

    for flag in flags:
        if flag not in PROFILE_FLAGS:
            raise TypeError(f"tune() got an unexpected keyword argument {flag!r}")
    spec, obj, suffix = model_arg(model)
    label = spec if spec is not None else f"{name or DEFAULT_MODEL_NAME}{suffix}"
    board_name = board if isinstance(board, str) else None
    if board is not None and board_name is None and not isinstance(board, Board):
        raise OptionError(f"board must be an inventory board name or a Board, got {type(board).__name__} instead")
    if profile is None and board_name is None:
        profile = "host"
    options = tune_options(
        label, profile, board=board_name, inventory=inventory, tracker=tracker, key=key, trials=trials, db=db, out=out,
        evaluate=evaluate, warm_start=warm_start, suggested=suggested, scheduler=scheduler, overrides=overrides,
        **flags,
    )
    if board is not None and board_name is None:
        options.board = board
    if obj is not None:
        options.model = str(save_model(obj, Path(options.out_dir) / label))
    return run_and_report(options, progress, report=report)


def run_and_report(
    options: "TuneOptions",
    progress: "bool | ProgressSink" = False,
    *,
    report: bool = True,
    finished: Callable[["TuneSummary"], None] | None = None,
    say: Callable[[str], None] | None = None,
) -> "TuneSummary":
    """What :func:`tune` and ``edgetune tune`` both run: the tune with Ctrl-C forwarded, then its report.

    The report is written after an interrupted run too (of what it measured). ``finished`` sees the summary
    before the report is written (the CLI prints it); ``say`` gets the report's ``report: PATH`` line.
    """
    from .tuning import run_tune

    sink = _progress_sink(progress)
    try:
        with forward_sigint_to_main_thread(), sink as shown:  # first: the display's thread inherits its mask
            summary = run_tune(options, sink=shown)
    except TuningInterrupted:
        if report:
            _write_report(Path(options.out_dir), say)
        raise
    if finished is not None:
        finished(summary)
    if report:
        _write_report(Path(options.out_dir), say)
    return summary


def _with_flag_keywords(function: Callable[..., Any]) -> None:
    """Show the declared profile flags as ``function``'s keyword-only parameters (``help()``, IDEs) and in its docstring."""
    import inspect

    signature = inspect.signature(function)
    params = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    declared = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=f"{flag.type.__name__ if flag.type else 'Any'} | None")
        for name, flag in PROFILE_FLAGS.items()
    ]
    function.__signature__ = signature.replace(parameters=params + declared)  # type: ignore[attr-defined]
    lines = [f"    ``{name}``: {flag.help.replace('%%', '%')} [{flag.dotted}]" for name, flag in PROFILE_FLAGS.items()]
    function.__doc__ = (function.__doc__ or "").rstrip() + "\n\n    Profile keys as keyword arguments:\n\n" + "\n".join(lines) + "\n"


_with_flag_keywords(tune)


def _write_report(out_dir: Path, say: Callable[[str], None] | None = None) -> None:
    """The run's HTML report; one warning line (never a failed tune) when it cannot be written."""
    from .report import report_after_tune

    page = report_after_tune(out_dir)
    if page is not None and say is not None:
        say(f"report: {page}")


def deploy(
    run: Any = None,
    *,
    board: str,
    model: Any = None,
    profile: str | None = None,
    db: str | os.PathLike[str] | None = None,
    conv_layout: str | None = None,
    inventory: str | None = None,
    name: str | None = None,
    verify: bool = True,
    rtol: float = 1e-3,
    atol: float = 1e-4,
    warmup: int = 3,
    repeat: int = 20,
    out: str | os.PathLike[str] | None = None,
    accept_new_host_key: bool = False,
    log: Callable[[str], None] | None = None,
    baseline: str | Sequence[str] = (),
) -> "DeployResult":
    """Ship a tuned model to a provisioned board, verify it there and make it current; as ``edgetune deploy``.

    ``run`` is what :func:`tune` returned (its :class:`~edgetune.tuning.TuneSummary`)
    or a run directory; or, instead of ``run``, ``model`` (anything :func:`tune`
    accepts) is compiled for the board's profile with the best schedules of the
    history ``db``, prepared as the recipe the history recorded when it was
    tuned (layout, graph optimization, fast-math, prepacking), not as the
    profile's settings are now; ``conv_layout`` is the layout of a history
    tuned by an older edgetune, which records no recipe (it is inferred, with a
    warning).
    ``board`` names a board of the inventory. With ``verify`` (the default)
    the board's outputs are checked against a host reference within
    ``rtol``/``atol`` and the model benchmarked there. ``log`` receives
    the progress lines the CLI prints. The local copy of the manifest goes to
    ``out`` (default: ``RUN_DIR/deployments``, or ``edgetune-out/deployments``).
    ``baseline`` (``"onnxruntime,litert"`` or a list) times those runtimes on
    the board beside the deployed model (``result.baselines``, and the manifest).
    """
    from .deployment.run import deploy_run

    return deploy_run(
        run, board=board, model=model, profile=profile, db=db, conv_layout=conv_layout, inventory=inventory, name=name,
        verify=verify, rtol=rtol, atol=atol, warmup=warmup, repeat=repeat, out=out,
        accept_new_host_key=accept_new_host_key, log=log, baseline=baseline,
    )


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise OptionError(f"{name} must be one of {', '.join(choices)}, got {value!r} instead")


class _Quiet:
    """No progress shown: the sink every hook of which does nothing."""

    def __enter__(self) -> Any:
        from .tuning import ProgressSink

        return ProgressSink()

    def __exit__(self, *exc: object) -> None:
        return None


def _progress_sink(progress: Any) -> Any:
    """A context manager giving the run's ProgressSink: none shown, the CLI's display, or the caller's sink."""
    from contextlib import nullcontext

    if progress is False or progress is None:
        return _Quiet()
    if progress is True:
        from .display import RichProgress

        return RichProgress()
    if callable(getattr(progress, "on_phase", None)) and callable(getattr(progress, "on_batch", None)):
        return progress if hasattr(progress, "__enter__") else nullcontext(progress)
    raise OptionError(f"progress must be True, False or a ProgressSink, got {type(progress).__name__} instead")


__all__ = ["default_out", "deploy", "run_and_report", "tune", "tune_options"]
