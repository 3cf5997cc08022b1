"""Baseline runtimes on a provisioned board: installed by ``provision --baseline``, timed by tune and deploy.

A deployment engineer compares against what runs on *their* board, so the
baseline (ONNX Runtime, LiteRT) is timed there, beside the delivered
``model.so``, by the same loop as on the embedded board: the host uploads
:mod:`edgetune.board.baseline` itself as a script, with the model file and
the inputs, and reads back one JSON line (:class:`BaselineResult`).

Installing follows the TVM runtime's way (:mod:`.runtime`): wheels for the
board's architecture and Python come from the host's package index (``pip
download``, cached), go up over SFTP and are unpacked into the board's venv;
the board never goes online. A runtime without a wheel for the board is one
warning line; provisioning itself goes on.
"""

from __future__ import annotations

import io
import json
import posixpath
import re
import shlex
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Callable, Mapping

from ..board import baseline as baseline_module
from ..common.run_dir import RunDir
from ..board.baseline import RUNTIME_NAMES, BaselineResult
from .detect import BoardFacts, normalize_arch
from .runtime import _UNPACK, cache_dir, cache_lock, host_versions, venv_python
from .ssh import BoardConnection

#: the PyPI project and the import name of each baseline runtime
RUNTIME_PACKAGES = {"onnxruntime": ("onnxruntime", "onnxruntime"), "litert": ("ai-edge-litert", "ai_edge_litert")}
#: what the board's venv holds besides TVM, written by provision (runtime -> version)
BASELINES_JSON = "baselines.json"
SCRIPT = "baseline.py"


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _platforms(arch: str) -> list[str]:
    return [f"manylinux_2_{minor}_{arch}" for minor in (28, 27, 17)] + [f"manylinux2014_{arch}"]


def download_baseline_wheels(runtime: str, facts: BoardFacts, log: Callable[[str], None]) -> list[Path]:
    """``runtime``'s wheels and dependencies for the board (cached); those TVM's runtime brings are left out.

    Raises :class:`LookupError` with pip's last line when the index has no wheel for the board.
    """
    project, _ = RUNTIME_PACKAGES[runtime]
    arch, tag = normalize_arch(facts.arch), facts.python_tag
    target = cache_dir() / "wheels" / f"baseline-{runtime}-{arch}-{tag}"
    with cache_lock(target):
        return _download_baseline_wheels(runtime, project, arch, tag, target, log)


def _download_baseline_wheels(
    runtime: str, project: str, arch: str, tag: str, target: Path, log: Callable[[str], None]
) -> list[Path]:
    manifest = target / "manifest.json"
    if manifest.is_file():
        names = json.loads(manifest.read_text())
        if names and all((target / name).is_file() for name in names):
            return [target / name for name in names]
    target.mkdir(parents=True, exist_ok=True)
    version = f"{tag[2]}.{tag[3:]}"
    log(f"downloading {RUNTIME_NAMES[runtime]} ({project}) wheels for {arch}, Python {version} into {target}")
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--dest", str(target),
        "--python-version", version, "--implementation", "cp", "--abi", tag, "--abi", "abi3", "--abi", "none",
        *[arg for platform in [*_platforms(arch), "any"] for arg in ("--platform", platform)], project,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        lines = [line for line in (done.stderr or done.stdout).splitlines()
                 if line.strip() and not line.startswith("WARNING: Location")]
        raise LookupError(lines[-1].removeprefix("ERROR: ") if lines else "pip download failed")
    runtime_projects = set(host_versions())  # TVM's own closure (numpy ...) is in the venv already
    names = sorted(path.name for path in target.glob("*.whl")
                   if _canonical(path.name.split("-", 1)[0]) not in runtime_projects)
    manifest.write_text(json.dumps(names))
    return [target / name for name in names]


def installed_baselines(connection: BoardConnection, base: str) -> dict[str, str]:
    """The baseline runtimes in the board's venv (runtime -> version), as provision recorded them."""
    result = connection.run(f"cat {shlex.quote(posixpath.join(base, BASELINES_JSON))} 2>/dev/null", timeout_sec=30)
    try:
        data = json.loads(result.stdout) if result.ok else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def ensure_baselines(
    connection: BoardConnection, facts: BoardFacts, base: str, runtimes: tuple[str, ...],
    log: Callable[[str], None], warn: Callable[[str], None],
) -> dict[str, str]:
    """Install each of ``runtimes`` into the board's venv unless it imports there; runtime -> version.

    A runtime without a wheel for the board, or one that does not import there, is one ``warn`` line.
    """
    board, python = connection.entry.name, venv_python(base)
    present = installed_baselines(connection, base)
    for runtime in runtimes:
        name, (project, module) = RUNTIME_NAMES[runtime], RUNTIME_PACKAGES[runtime]
        probe = connection.run(f"{shlex.quote(python)} -c {shlex.quote(f'import {module}; print({module}.__version__)')}",
                               timeout_sec=600)
        if probe.ok and probe.stdout.strip():
            present[runtime] = probe.stdout.strip().splitlines()[-1]
            log(f"baseline: {name} {present[runtime]} already in {base}/venv")
            continue
        try:
            wheels = download_baseline_wheels(runtime, facts, log)
        except LookupError as error:
            present.pop(runtime, None)
            warn(f"no {name} ({project}) wheel for {facts.arch}, Python {facts.python_version} on this host's "
                 f"package index ({error}); --baseline {runtime} cannot run on board {board}")
            continue
        remote = posixpath.join(base, f"wheels-{runtime}")
        connection.run(f"mkdir -p {shlex.quote(remote)}", timeout_sec=60, check=True)
        sftp = connection.sftp()
        log(f"uploading {len(wheels)} {name} wheels ({sum(p.stat().st_size for p in wheels) / 1e6:.0f} MB) to {remote}")
        for path in wheels:
            sftp.put(str(path), posixpath.join(remote, path.name) + ".part")
            sftp.posix_rename(posixpath.join(remote, path.name) + ".part", posixpath.join(remote, path.name))
        files = " ".join(shlex.quote(posixpath.join(remote, path.name)) for path in wheels)
        connection.run(f"{shlex.quote(python)} - {files}", timeout_sec=900, check=True, stdin=_UNPACK)
        probe = connection.run(f"{shlex.quote(python)} -c {shlex.quote(f'import {module}; print({module}.__version__)')}",
                               timeout_sec=600)
        lines = [line for line in (probe.stdout + probe.stderr).splitlines() if line.strip()]
        if not probe.ok:
            present.pop(runtime, None)
            warn(f"{name} was installed on board {board} but does not import there: {lines[-1] if lines else 'no output'}")
            continue
        present[runtime] = lines[-1].strip()
        log(f"baseline: {name} {present[runtime]} installed in {base}/venv")
    data = json.dumps(present, indent=1).encode()
    connection.sftp().putfo(io.BytesIO(data), posixpath.join(base, BASELINES_JSON), file_size=len(data))
    return present


def time_baseline_on_board(
    connection: BoardConnection, base: str, runtime: str, artifact: str | Path, model_bytes: bytes | None,
    inputs: Mapping[str, Any], threads: int, *, given_as: str = "", rounds: int = 15, number: int = 10,
    remote_artifact: str | None = None, log: Callable[[str], None] = lambda _m: None,
) -> BaselineResult:
    """:func:`~edgetune.board.baseline.compare_with_baseline` run on the board, in its venv; never raises.

    ``remote_artifact``: the model.so already on the board (deploy); else ``artifact`` is uploaded.
    Everything goes into a scratch directory under the board's ``remote_dir``, removed afterwards.
    """
    import numpy as np

    board = connection.entry.name
    if model_bytes is None:  # the same one-line reason as on the embedded board
        return baseline_module.compare_with_baseline(runtime, artifact, None, inputs, threads, given_as=given_as)
    q = shlex.quote
    work = posixpath.join(base, "baseline-runs", uuid.uuid4().hex[:12])
    try:
        connection.run(f"mkdir -p {q(work)}", timeout_sec=60, check=True)
        sftp = connection.sftp()

        def put(name: str, data: bytes) -> str:
            path = posixpath.join(work, name)
            sftp.putfo(io.BytesIO(data), path, file_size=len(data))
            return path

        script = put(SCRIPT, Path(baseline_module.__file__).read_bytes())
        model = put("model." + ("tflite" if runtime == "litert" else "onnx"), model_bytes)
        if remote_artifact is None:
            remote_artifact = posixpath.join(work, RunDir.ARTIFACT)
            sftp.put(str(artifact), remote_artifact)
        args = []
        for index, (name, value) in enumerate(inputs.items()):
            buffer = io.BytesIO()
            np.save(buffer, np.asarray(value))
            args += ["--input", f"{name}={put(f'input_{index}.npy', buffer.getvalue())}"]
        command = " ".join(q(part) for part in [
            venv_python(base), script, runtime, "--artifact", remote_artifact, "--model", model,
            "--threads", str(threads), "--rounds", str(rounds), "--number", str(number), "--given-as", given_as, *args,
        ])
        log(f"timing {RUNTIME_NAMES[runtime]} beside the tuned model on board {board}")
        threads_env = f"TVM_NUM_THREADS={threads} " if threads > 0 else ""
        done = connection.run(f"cd {q(work)} && {threads_env}{command}", timeout_sec=3600)
    except Exception as error:  # noqa: BLE001 - SSH and SFTP failures: the tune's or deploy's results stand
        return BaselineResult(runtime, error=f"on board {board}: {type(error).__name__}: {error}".splitlines()[0])
    finally:
        try:
            connection.run(f"rm -rf {q(work)}", timeout_sec=60)
        except Exception:  # noqa: BLE001 - best effort
            pass
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    try:
        result = BaselineResult.from_dict(json.loads(done.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError, TypeError):
        return BaselineResult(runtime, error=f"on board {board}: the baseline script failed "
                                             f"({lines[-1] if lines else f'status {done.status}'})")
    if result.error and result.error.startswith("not installed here"):
        result.error = f"not installed on board {board}; install it with: edgetune provision {board} --baseline {runtime}"
    if result.protocol:
        result.protocol += f"; on board {board}"
    return result
