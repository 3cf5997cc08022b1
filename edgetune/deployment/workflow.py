"""``edgetune deploy``: upload a tuned artifact, prove it runs on the board, then switch to it.

Order matters: the new version is uploaded and its sha256 checked, then run
through RPC against a host reference and benchmarked by the shipped ``run.py``,
and only when all of that passed does ``current`` move. A model that fails
verification is left in its version directory for inspection, never made current.
"""

from __future__ import annotations

import io
import json
import logging
import os
import posixpath
import shlex
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..common.run_dir import RunDir
from ..board.baseline import RUNTIME_FORMATS, BaselineResult
from ..errors import DeployError, DeployInputError, ModelError, VerificationError
from ..provision.inventory import BoardEntry, Inventory
from ..provision.baseline import time_baseline_on_board
from ..provision.ssh import BoardConnection
from .runner_template import RUN_PY, RUNTIME_JSON
from .ship import ARTIFACT, Deployment, activate, deployments_root, new_version, safe_model_name, sha256_file, upload

if TYPE_CHECKING:
    from ..tasks.recipe import Recipe

_log = logging.getLogger(__name__)
SUMMARY = RunDir.SUMMARY
MANIFEST = "manifest.json"
RUNNER = "run.py"
#: inputs are fixed (seed 0, as `edgetune tune` evaluates), so every deploy is compared on the same data
INPUT_SEED = 0


@dataclass(frozen=True)
class Tolerance:
    """How close the board's outputs must be to the host reference (see ``compare_outputs``)."""

    rtol: float = 1e-3
    atol: float = 1e-4


@dataclass
class DeploySource:
    """What to deploy: the artifact and what is known about how it was made."""

    artifact: Path
    model_source: str
    model_name: str
    model_sha256: str
    profile: str
    target: Any = None
    tvm_version: str = ""
    history: str | None = None
    history_digest: str | None = None
    tuned_latency: dict | None = None
    untuned_latency: dict | None = None
    recipe: dict | None = None  # how the model's graph was prepared (tasks.recipe.Recipe.to_dict); None: an older run


@dataclass
class DeployResult:
    """One finished deployment: where it is, how it was checked, how fast it ran."""

    deployment: Deployment
    manifest: dict[str, Any]
    local_manifest: Path
    verified: bool
    benchmark: dict[str, Any] | None = field(default=None)
    baselines: list[BaselineResult] = field(default_factory=list)


def source_from_run_dir(run_dir: Path) -> DeploySource:
    """The tuned artifact and summary written by ``edgetune tune --out RUN_DIR``."""
    summary_path, artifact = run_dir / SUMMARY, run_dir / ARTIFACT
    if not summary_path.is_file() or not artifact.is_file():
        missing = summary_path if not summary_path.is_file() else artifact
        raise DeployInputError(
            f"RUN_DIR must be the output of `edgetune tune` (with {SUMMARY} and {ARTIFACT}), got no {missing} instead; "
            "create it with: edgetune tune --model M --profile P --out RUN_DIR"
        )
    from ..tuning.summary import TuneSummary

    try:
        summary = TuneSummary.load(summary_path)
        if summary.model is None:
            raise KeyError("model")
    except (ValueError, KeyError, TypeError) as error:
        raise DeployInputError(f"{summary_path} must be a tune summary, got unreadable JSON instead ({error})") from None
    end = summary.end_to_end
    return DeploySource(
        artifact=artifact,
        model_source=summary.model.source,
        model_name=summary.model.name,
        model_sha256=summary.model.sha256,
        profile=summary.profile,
        target=summary.target,
        tvm_version=summary.tvm_version,
        history=summary.history,
        history_digest=history_digest(summary.history),
        tuned_latency=end.tuned_latency if end else None,
        untuned_latency=end.untuned_latency if end else None,
        recipe=summary.recipe,
    )


def source_from_model(
    model_spec: str, profile_name: str, db: str | None, out_dir: Path, *, conv_layout: str | None = None,
    log: Callable[[str], None] | None = None,
) -> DeploySource:
    """Compile ``model_spec`` for the profile (with the history's best schedules when ``db`` is given).

    With ``db``, the model is prepared as the history's recorded recipe says (the layout, graph
    optimization, fast-math and prepacking it was tuned with: :mod:`.recorded_recipe`), whatever the
    profile's settings are now, or its records would match none of the graph's workloads; ``conv_layout``
    must then be the recorded layout, if given. Without ``db``, as the profile asks, in ``conv_layout``
    if given. ``log`` gets the warning lines (default: this module's logger).
    """
    import tvm

    from ..profile import load_profile
    from ..tasks import load_model
    from ..artifact.compile import compile_model, export_model
    from ..tasks.recipe import prepare_model, recipe_from_settings

    say = log or _log.warning
    profile = load_profile(profile_name)
    target = profile.tvm_target()
    loaded = load_model(model_spec)
    history = None
    if db:
        from ..history import open_history
        from ..measure.runner import timing_of
        from .recorded_recipe import recipe_of_history

        # the profile's timing first; a workload never timed that way is compiled with the other's best
        history = open_history(db, read_only=True, timing=timing_of(profile))
    try:
        if history is not None:
            recipe = recipe_of_history(history, db, loaded, target, profile.tuning, conv_layout, say)
        else:
            from ..schedules.use import recipe_library

            recipe = recipe_from_settings(profile.tuning, target, conv_layout, recipe_library(profile.tuning, target))
        model = prepare_model(loaded, recipe, target)
        _check_passes(recipe, model.recipe, say)
        executable = compile_model(model.mod, target, history, prepack_weights=model.recipe.prepack_weights)
    finally:
        if history is not None:
            history.close()
    artifact = export_model(executable, out_dir / ARTIFACT, profile)
    return DeploySource(
        artifact=artifact, model_source=model.source, model_name=model.name, model_sha256=model.sha256,
        profile=profile.name, target=target.export() if hasattr(target, "export") else str(target),
        tvm_version=tvm.__version__, history=history.url if history is not None else None,
        history_digest=history_digest(db), recipe=model.recipe.to_dict(),
    )


def _check_passes(recorded: "Recipe", built: "Recipe", say: Callable[[str], None]) -> None:
    """One warning line when the graph's passes went otherwise than when it was tuned (another edgetune or TVM)."""
    before = [(p.name, p.status) for p in recorded.passes]
    after = [(p.name, p.status) for p in built.passes]
    if before and before != after:
        changed = sorted(set(before) ^ set(after))
        say(f"warning: the graph's passes went otherwise than when it was tuned (TVM {recorded.tvm_version or '?'}): "
            + ", ".join(f"{name} {status}" for name, status in changed) + "; some kernels may not match the history")


def history_digest(url: str | None) -> str | None:
    """sha256 of a local SQLite history (the records the artifact was compiled from), else None."""
    if not url:
        return None
    path = Path(url[len("sqlite:///"):] if url.startswith("sqlite:///") else url)
    if "://" in url and not url.startswith("sqlite:///"):
        return None
    return sha256_file(path) if path.is_file() else None


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def deploy(
    entry: BoardEntry,
    inventory: Inventory,
    source: DeploySource,
    local_dir: Path,
    *,
    verify: bool = True,
    tolerance: Tolerance = Tolerance(),
    warmup: int = 3,
    repeat: int = 20,
    accept_new_host_key: bool = False,
    log: Callable[[str], None] = lambda _m: None,
    progress: Callable[[int, int], None] | None = None,
    baselines: tuple[str, ...] = (),
) -> DeployResult:
    """Upload, verify, benchmark, time ``baselines`` beside it, write the manifest, then make the new version current."""
    from ..profile import load_profile
    from ..provision.runtime import venv_python

    profile = load_profile(entry.profile)
    if source.profile and source.profile != profile.name:
        raise DeployInputError(
            f"the artifact must be built for board {entry.name}'s profile {profile.name}, got one built for "
            f"{source.profile} instead; tune for it with: edgetune tune --board {entry.name} --model {source.model_source}"
        )
    artifact_sha = sha256_file(source.artifact)
    model_dirname = safe_model_name(source.model_name)
    version = new_version(artifact_sha)

    model = _tuned_model(source) if verify or baselines else None
    inputs, reference = _reference(model) if verify else (None, None)
    files: dict[str, Path | bytes] = {
        ARTIFACT: source.artifact,
        RUNNER: RUN_PY.encode(),
        # the profile's threads: without them TVM takes half the CPUs of an x86 board
        RUNTIME_JSON: json.dumps({"threads": profile.device.num_threads}).encode(),
    }
    if inputs is not None:
        files.update({f"input_{i}.npy": _npy(x) for i, x in enumerate(inputs)})

    with BoardConnection(entry, accept_new_host_key=accept_new_host_key, log=log) as connection:
        root = deployments_root(connection, entry)
        model_dir = posixpath.join(root, model_dirname)
        log(f"uploading {source.artifact.name} ({source.artifact.stat().st_size} bytes) to {entry.name}:{model_dir}/{version}")
        directory = upload(connection, model_dir, version, files, progress)
        log(f"sha256 verified on the board: {artifact_sha[:16]}...")

        verification: dict[str, Any] | None = None
        benchmark: dict[str, Any] | None = None
        if verify:
            verification = _verify_rpc(entry, inventory, profile, source.artifact, inputs, reference, tolerance, log)
            benchmark = _bench_on_board(connection, directory, venv_python(_base(root)), len(inputs), reference,
                                        tolerance, warmup, repeat, log)
        compared = [_time_baseline(connection, _base(root), runtime, model, source.artifact, posixpath.join(directory, ARTIFACT),
                                   profile.device.num_threads, log) for runtime in baselines]

        manifest = _manifest(source, entry.name, profile.name, artifact_sha, version, verification, benchmark)
        manifest["baselines"] = [result.to_dict() for result in compared]
        text = json.dumps(manifest, indent=2, default=str) + "\n"
        _write_remote_atomic(connection, posixpath.join(directory, MANIFEST), text.encode())
        local = local_dir / entry.name / version / MANIFEST
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(text)
        previous = activate(connection, model_dir, version)
        log(f"current -> {version}" + (f" (previous: {previous})" if previous else ""))
    return DeployResult(Deployment(entry.name, model_dirname, version, directory, previous), manifest, local,
                        verification is not None, benchmark, compared)


def _tuned_model(source: DeploySource) -> Any:
    """The model file the artifact was made from (a :class:`~edgetune.tasks.models.LoadedModel`), checked by its sha256."""
    from ..tasks import load_model

    model = load_model(source.model_source)
    if model.sha256 != source.model_sha256:
        raise DeployError(
            f"model {source.model_source} must have sha256 {source.model_sha256[:16]}... as when it was tuned, "
            f"got {model.sha256[:16]}... instead; re-tune or deploy the matching model file"
        )
    return model


def _reference(model: Any) -> tuple[list[Any], list[Any]]:
    """The model's seeded random inputs and the host reference outputs."""
    feeds = model.random_inputs(seed=INPUT_SEED)
    return [feeds[spec.name] for spec in model.inputs], model.reference_outputs(feeds)


def _time_baseline(connection: BoardConnection, base: str, runtime: str, model: Any, artifact: Path, remote_artifact: str,
                   threads: int, log: Callable[[str], None]) -> BaselineResult:
    """``runtime`` beside the deployed ``model.so`` on the board, on the inputs the verification used; never raises."""
    try:
        model_bytes = model.bytes_for(RUNTIME_FORMATS[runtime])
    except ModelError as error:
        result = BaselineResult(runtime, error=str(error))
    else:
        result = time_baseline_on_board(connection, base, runtime, artifact, model_bytes, model.random_inputs(seed=INPUT_SEED),
                                        threads, given_as=model.format, remote_artifact=remote_artifact, log=log)
    log(result.line())
    return result


def _manifest(
    source: DeploySource, board: str, profile: str, artifact_sha: str, version: str,
    verification: dict[str, Any] | None, benchmark: dict[str, Any] | None,
) -> dict[str, Any]:
    """What was deployed, from which tuning run, and what the board showed."""
    return {
        "model": {"name": source.model_name, "source": source.model_source, "sha256": source.model_sha256},
        "artifact": {"file": ARTIFACT, "sha256": artifact_sha, "bytes": source.artifact.stat().st_size},
        "version": version,
        "board": board,
        "profile": profile,
        "target": source.target,
        "tvm_version": source.tvm_version,
        "history": source.history,
        "history_digest": source.history_digest,
        "tuned_latency_at_tune_time": source.tuned_latency,
        "untuned_latency_at_tune_time": source.untuned_latency,
        "recipe": source.recipe,
        "verification": verification,
        "benchmark": benchmark,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _base(root: str) -> str:
    return posixpath.dirname(root)


def _write_remote_atomic(connection: BoardConnection, path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    connection.sftp().putfo(io.BytesIO(data), tmp, file_size=len(data), confirm=True)
    connection.run(f"mv -T {shlex.quote(tmp)} {shlex.quote(path)}", timeout_sec=60, check=True)


def _verify_rpc(entry: BoardEntry, inventory: Inventory, profile: Any, artifact: Path, inputs: Any, reference: Any,
                tolerance: Tolerance, log: Callable[[str], None]) -> dict[str, Any]:
    """Load the same bytes through the board's RPC server and compare outputs with the host."""
    from ..board.rpc_tracker import TrackerAddress
    from ..artifact.compile import compare_outputs, run_on_board

    host = "127.0.0.1" if inventory.tracker.host in ("0.0.0.0", "") else inventory.tracker.host
    address = TrackerAddress(host, inventory.tracker.port, entry.rpc_key(profile))
    run = run_on_board(address, profile.rpc.device, artifact, inputs, number=1, repeat=1,
                       session_timeout_sec=profile.rpc.session_timeout_sec)
    ok, worst = compare_outputs(reference, run.outputs, rtol=tolerance.rtol, atol=tolerance.atol)
    if not ok:
        raise VerificationError(
            f"board {entry.name}: outputs through RPC must match the host reference within rtol {tolerance.rtol:g} "
            f"atol {tolerance.atol:g}, got max abs diff {worst:.3g} instead; `current` was not changed"
        )
    log(f"RPC verification ok on {entry.name}: max abs diff {worst:.3g} (rtol {tolerance.rtol:g}, atol {tolerance.atol:g})")
    return {"rpc_max_abs_diff": worst, "rtol": tolerance.rtol, "atol": tolerance.atol, "input_seed": INPUT_SEED}


def _bench_on_board(connection: BoardConnection, directory: str, python: str, n_inputs: int, reference: Any,
                    tolerance: Tolerance, warmup: int, repeat: int, log: Callable[[str], None]) -> dict[str, Any]:
    """Run the shipped ``run.py`` on the board: its output is checked too, then its latency and peak RSS."""
    from ..artifact.compile import compare_outputs

    q = shlex.quote
    out_name = "output.npz"
    args = " ".join(f"--input input_{i}.npy" for i in range(n_inputs))
    command = (f"cd {q(directory)} && {q(python)} {RUNNER} {args} --output {out_name} --bench "
               f"--warmup {warmup} --repeat {repeat}")
    result = connection.run(command, timeout_sec=1800)
    if not result.ok:
        detail = (result.stderr.strip() or result.stdout.strip()).splitlines()
        raise DeployError(
            f"board {connection.entry.name}: run.py must run with the board's TVM runtime, got status {result.status} "
            f"instead ({detail[-1] if detail else 'no output'}); repair the runtime with: edgetune provision {connection.entry.name}"
        )
    try:
        bench = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise DeployError(f"board {connection.entry.name}: run.py must print JSON, got {result.stdout[-200:]!r} instead") from None
    with tempfile.TemporaryDirectory() as tmp:
        local = os.path.join(tmp, out_name)
        connection.sftp().get(posixpath.join(directory, out_name), local)
        with np.load(local) as data:
            outputs = [data[f"output_{i}"] for i in range(len(data.files))]
    connection.run(f"rm -f {q(posixpath.join(directory, out_name))}", timeout_sec=30)
    ok, worst = compare_outputs(reference, outputs, rtol=tolerance.rtol, atol=tolerance.atol)
    if not ok:
        raise VerificationError(
            f"board {connection.entry.name}: run.py outputs must match the host reference within rtol {tolerance.rtol:g} "
            f"atol {tolerance.atol:g}, got max abs diff {worst:.3g} instead; `current` was not changed"
        )
    bench["run_py_max_abs_diff"] = worst
    log(f"benchmark on the board: mean {bench['mean_ms']:.3f} ms, p50 {bench['p50_ms']:.3f} ms, "
        f"p90 {bench['p90_ms']:.3f} ms, CV {bench['cv']:.3f}, peak RSS {bench['peak_rss_kib'] / 1024:.1f} MiB")
    return bench


__all__ = ["DeploySource", "DeployResult", "Tolerance", "deploy", "source_from_run_dir", "source_from_model"]
