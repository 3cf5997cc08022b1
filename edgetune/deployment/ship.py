"""Ship files to a board into a versioned directory and switch ``current`` atomically.

Layout on the board, under the entry's ``remote_dir`` (``~/.edgetune``)::

    deployments/<model>/<version>/      model.so, run.py, inputs, manifest.json
    deployments/<model>/current  -> <version>
    deployments/<model>/previous -> <older version>

Files are uploaded into a hidden staging directory, their sha256 checked on the
board with ``sha256sum``, and only then is the directory renamed to its version
name. ``current`` is switched with ``ln -s`` to a temporary link + ``mv -T``
(one ``rename(2)``), so an interrupted upload or a failed check never leaves
``current`` pointing at a partial file.
"""

from __future__ import annotations

import hashlib
import io
import posixpath
import re
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..common.run_dir import RunDir
from ..errors import DeployError
from ..provision.inventory import BoardEntry
from ..provision.ssh import BoardConnection

ARTIFACT = RunDir.ARTIFACT  # the same name on the board as in the run directory
CURRENT = "current"
PREVIOUS = "previous"


@dataclass(frozen=True)
class Deployment:
    """Where one version of a model lives on the board, and what it replaced."""

    board: str
    model: str
    version: str
    directory: str  # absolute path on the board
    previous: str | None  # version ``current`` pointed at before, if any


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def new_version(artifact_sha256: str) -> str:
    """``YYYYmmddTHHMMSS.mmmZ-<sha12>``: sorts by time, names the artifact, unique per deploy."""
    now = time.time()
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(now))}.{int(now * 1000) % 1000:03d}Z-{artifact_sha256[:12]}"


def safe_model_name(name: str) -> str:
    """A model name usable as one directory name on the board."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip(".-")
    if not cleaned:
        raise DeployError(f"model name must contain letters or digits, got {name!r} instead")
    return cleaned


def deployments_root(connection: BoardConnection, entry: BoardEntry) -> str:
    """``<remote_dir>/deployments`` as an absolute path (SFTP does not expand ``~``)."""
    base = entry.remote_dir
    if base == "~" or base.startswith("~/"):
        home = connection.run('printf %s "$HOME"', timeout_sec=30, check=True).stdout.strip()
        if not home.startswith("/"):
            raise DeployError(f"board {entry.name}: $HOME must be an absolute path, got {home!r} instead")
        base = home + base[1:]
    return posixpath.join(posixpath.normpath(base), "deployments")


def read_link(connection: BoardConnection, path: str) -> str | None:
    """The target of a symlink on the board, or None when there is none."""
    result = connection.run(f"readlink {shlex.quote(path)}", timeout_sec=30)
    return result.stdout.strip() or None if result.ok else None


def switch_link(connection: BoardConnection, model_dir: str, name: str, target: str) -> None:
    """Point ``model_dir/name`` at ``target`` atomically (a rename over the old link)."""
    tmp = f".{name}.tmp-{time.monotonic_ns()}"
    q = shlex.quote
    connection.run(
        f"cd {q(model_dir)} && test -d {q(target)} && ln -s {q(target)} {q(tmp)} && mv -T {q(tmp)} {q(name)}",
        timeout_sec=60, check=True,
    )


def upload(
    connection: BoardConnection,
    model_dir: str,
    version: str,
    files: dict[str, Path | bytes],
    progress: Callable[[int, int], None] | None = None,
) -> str:
    """Upload ``files`` into ``model_dir/<version>`` via a staging directory; return its path.

    Every file's sha256 is checked on the board before the staging directory is
    renamed; on any failure the staging directory is removed and nothing else
    on the board has changed.
    """
    q = shlex.quote
    final = posixpath.join(model_dir, version)
    staging = posixpath.join(model_dir, f".{version}.partial")
    expected = {
        name: hashlib.sha256(data).hexdigest() if isinstance(data, bytes) else sha256_file(data)
        for name, data in files.items()
    }
    connection.run(f"mkdir -p {q(model_dir)} && rm -rf {q(staging)} && mkdir {q(staging)}", timeout_sec=60, check=True)
    try:
        sftp = connection.sftp()
        for name, data in files.items():
            remote = posixpath.join(staging, name)
            if isinstance(data, bytes):
                sftp.putfo(io.BytesIO(data), remote, file_size=len(data), callback=progress, confirm=True)
            else:
                sftp.put(str(data), remote, callback=progress, confirm=True)
        result = connection.run(
            f"cd {q(staging)} && sha256sum -- " + " ".join(q(n) for n in files), timeout_sec=300, check=True
        )
        found = {}
        for line in result.stdout.splitlines():
            digest, _, name = line.partition("  ")
            found[name.strip()] = digest.strip()
        for name, digest in expected.items():
            if found.get(name) != digest:
                raise DeployError(
                    f"board {connection.entry.name}: sha256 of {name} on the board must be {digest[:16]}..., "
                    f"got {(found.get(name) or 'nothing')[:16]}... instead; the upload was corrupted, run the deploy again"
                )
        connection.run(f"test ! -e {q(final)} && mv -T {q(staging)} {q(final)}", timeout_sec=60, check=True)
    except BaseException as error:
        try:
            connection.run(f"rm -rf {q(staging)}", timeout_sec=60)
        except Exception:  # the connection itself may be what failed
            pass
        if isinstance(error, DeployError) or not isinstance(error, Exception):
            raise
        reason = " ".join(str(error).split()) or type(error).__name__
        raise DeployError(
            f"board {connection.entry.name}: upload to {final} failed ({reason}); `current` was not changed, "
            "run the deploy again"
        ) from error
    return final


def activate(connection: BoardConnection, model_dir: str, version: str) -> str | None:
    """Make ``version`` current, keeping the old current as ``previous``; return the old one."""
    old = read_link(connection, posixpath.join(model_dir, CURRENT))
    if old and old != version:
        switch_link(connection, model_dir, PREVIOUS, old)
    switch_link(connection, model_dir, CURRENT, version)
    return old if old != version else None


def rollback(connection: BoardConnection, root: str, model: str) -> Deployment:
    """Switch ``current`` back to ``previous`` (and ``previous`` to the version left)."""
    model_dir = posixpath.join(root, model)
    current = read_link(connection, posixpath.join(model_dir, CURRENT))
    previous = read_link(connection, posixpath.join(model_dir, PREVIOUS))
    board = connection.entry.name
    if not current:
        raise DeployError(
            f"board {board}: {model_dir}/current must exist to roll back, got nothing there instead; "
            f"deploy first with: edgetune deploy --board {board} RUN_DIR"
        )
    if not previous or previous == current:
        raise DeployError(
            f"board {board}: rollback needs a previous version of {model}, got only {current} instead; "
            "a rollback is possible after a second deploy"
        )
    check = connection.run(f"test -f {shlex.quote(posixpath.join(model_dir, previous, ARTIFACT))}", timeout_sec=30)
    if not check.ok:
        raise DeployError(f"board {board}: previous version {previous} must hold {ARTIFACT}, got a missing file instead")
    switch_link(connection, model_dir, CURRENT, previous)
    switch_link(connection, model_dir, PREVIOUS, current)
    return Deployment(board, model, previous, posixpath.join(model_dir, previous), current)

