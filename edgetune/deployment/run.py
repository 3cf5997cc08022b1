"""``edgetune deploy`` as a function: check the inputs, find or compile the artifact, ship it (what the CLI and the API call).

:func:`edgetune.api.deploy` and ``edgetune deploy`` both come here, so the
deploy package never reaches up to the API.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from ..common.run_dir import RunDir
from ..common.choices import CONV_LAYOUTS
from ..errors import DeployInputError
from ..common.model_objects import DEFAULT_MODEL_NAME, model_arg, save_model
from .workflow import DeployResult, Tolerance, deploy as deploy_to_board, source_from_model, source_from_run_dir


def deploy_run(
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
    baseline: str | tuple[str, ...] | list[str] = (),
) -> DeployResult:
    """:func:`edgetune.api.deploy` (``edgetune deploy``), whose docstring says what each argument means."""
    from ..provision.inventory import load_inventory

    baselines = _baselines(baseline)
    inventory_data = load_inventory(inventory)
    entry = inventory_data.get(board)
    run_dir = run_directory(run)
    model = None if isinstance(model, str) and not model else model
    if (run_dir is None) == (model is None):
        raise DeployInputError(
            "deploy must be given RUN_DIR or --model M, got "
            + ("both" if run_dir is not None else "neither")
            + " instead; e.g. edgetune deploy --board NAME edgetune-out/RUN"
        )
    if repeat < 1 or warmup < 0:
        raise DeployInputError(f"--repeat must be >= 1 and --warmup >= 0, got {repeat} and {warmup} instead")
    if rtol < 0 or atol < 0:
        raise DeployInputError(f"--rtol and --atol must be >= 0, got {rtol:g} and {atol:g} instead")
    if model is not None and profile:
        from ..profile import load_profile

        wanted, board_profile = load_profile(profile).name, load_profile(entry.profile).name
        if wanted != board_profile:  # refuse before spending minutes compiling for the wrong device
            raise DeployInputError(
                f"the artifact must be built for board {entry.name}'s profile {board_profile}, got one built for {wanted} "
                f"instead; drop --profile or pass --profile {board_profile}"
            )
    if model is None and (profile or db or conv_layout):
        raise DeployInputError("--profile, --db and --conv-layout must come with --model, got them with RUN_DIR "
                               "instead; a tune run already fixes them")
    if conv_layout is not None and conv_layout not in CONV_LAYOUTS:
        raise DeployInputError(f"conv_layout must be one of {', '.join(CONV_LAYOUTS)}, got {conv_layout!r} instead")
    with tempfile.TemporaryDirectory(prefix="edgetune-deploy-") as tmp:
        if run_dir is not None:
            source = source_from_run_dir(run_dir)
            local_dir = Path(out) if out else RunDir(run_dir).deployments
        else:
            local_dir = Path(out) if out else RunDir("edgetune-out").deployments
            spec, obj, suffix = model_arg(model)
            if obj is not None:  # kept beside the manifest, which names it as the model's source
                spec = str(save_model(obj, local_dir / "models" / f"{name or DEFAULT_MODEL_NAME}{suffix}"))
            source = source_from_model(spec, profile or entry.profile, None if db is None else os.fspath(db), Path(tmp),
                                       conv_layout=conv_layout, log=log)
        return deploy_to_board(
            entry, inventory_data, source, local_dir, verify=verify, tolerance=Tolerance(rtol, atol), warmup=warmup,
            repeat=repeat, accept_new_host_key=accept_new_host_key, log=log or (lambda _message: None),
            baselines=baselines,
        )


def _baselines(baseline: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """``"onnxruntime,litert"`` or a sequence of names -> the runtimes; a bad name is a DeployInputError."""
    import argparse

    from ..common.choices import baseline_runtimes

    text = baseline if isinstance(baseline, str) else ",".join(baseline)
    if not text:
        return ()
    try:
        return baseline_runtimes(text)
    except argparse.ArgumentTypeError as error:
        raise DeployInputError(f"baseline {error}") from None


def run_directory(run: Any) -> Path | None:
    """The run directory of a tune summary or path (None for None)."""
    if run is None or (isinstance(run, str) and not run):
        return None
    if isinstance(run, (str, os.PathLike)):
        return Path(run)
    from ..tuning import TuneSummary

    if isinstance(run, TuneSummary):
        if run.artifact is None:
            raise DeployInputError(
                "the tune run must have compiled the model to be deployed, got one run with evaluate=False instead; "
                "tune again with evaluate=True, or deploy model=... with db=... its history"
            )
        return run.artifact.parent
    raise DeployInputError(f"run must be a TuneSummary or a run directory, got {type(run).__name__} instead")
