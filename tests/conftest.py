"""Shared fixtures: one real loopback tracker + RPC server for the whole session,
and one real PostgreSQL server (``postgres_url``) for the history tests.

System components the tests need (a C++ compiler, the aarch64 cross toolchain)
are skipped when missing on a developer machine, but in CI (``CI=true``) a
missing component is a failure: `.ci/run` installs them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from edgetune.board.local import LocalBoard
from edgetune.board.rpc_tracker import TrackerAddress

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# The tests pick their boards themselves: a developer's exported TVM tracker
# (a default of `edgetune tune --tracker/--key`) must not send them to a real board.
for _name in ("TVM_TRACKER_HOST", "TVM_TRACKER_PORT", "TVM_TRACKER_KEY"):
    os.environ.pop(_name, None)
REPO = Path(__file__).resolve().parent.parent
SESSION_KEY = "pytest-local"


def require_tool(name: str, debian_package: str) -> str:
    """Path of ``name``; skip without it locally, fail without it in CI."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} not found (Debian package {debian_package})"
        if IN_CI:
            pytest.fail(message + "; .ci/run should have installed it")
        pytest.skip(message)
    return path


def _missing(message: str) -> None:
    """Skip without a system component locally, fail without it in CI."""
    if IN_CI:
        pytest.fail(message + "; .ci/run should have installed it")
    pytest.skip(message)


def _postgres_bindir() -> Path | None:
    """Directory of Debian's PostgreSQL server binaries (newest version), if any."""
    found = [path.parent for path in Path("/usr/lib/postgresql").glob("*/bin/initdb")]
    found = [path for path in found if (path / "pg_ctl").exists()]
    if found:
        return max(found, key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0)
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb and shutil.which("pg_ctl") else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """``postgresql://...`` of an empty database on a real PostgreSQL server.

    ``EDGETUNE_TEST_POSTGRES_URL`` names an existing server to use instead.
    Otherwise the session starts its own from Debian's ``postgresql`` package:
    a fresh cluster in a temporary directory (as the ``postgres`` user when
    running as root: initdb refuses root), listening on 127.0.0.1 on a free port
    with its socket in that directory, trust authentication for loopback only,
    durability off (a throwaway cluster), stopped with ``pg_ctl stop -m fast``
    at the end of the session.
    """
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _missing("psycopg not installed (pip install -e '.[test,postgres]')")
    external = os.environ.get("EDGETUNE_TEST_POSTGRES_URL")
    if external:
        yield external
        return
    bindir = _postgres_bindir()
    if bindir is None:
        _missing("PostgreSQL server binaries (initdb, pg_ctl) not found (Debian package postgresql)")
    run_as: list[str] = []
    owner: tuple[int, int] | None = None
    if os.geteuid() == 0:
        import pwd

        try:
            entry = pwd.getpwnam("postgres")
        except KeyError:
            _missing("running as root and no 'postgres' user for initdb (Debian package postgresql)")
        runuser = shutil.which("runuser")
        if runuser is None:
            _missing("running as root and no runuser to start PostgreSQL as 'postgres' (util-linux)")
        run_as = [runuser, "-u", "postgres", "--"]
        owner = (entry.pw_uid, entry.pw_gid)
    base = Path(tempfile.mkdtemp(prefix="edgetune-pg-"))
    data = base / "data"
    log = base / "server.log"
    if owner is not None:
        os.chown(base, *owner)

    def run(*command: object) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*run_as, *map(str, command)], capture_output=True, text=True, timeout=120
        )

    started = False
    try:
        init = run(
            bindir / "initdb", "-D", data, "-U", "edgetune", "--auth=trust", "-E", "UTF8",
            "--locale=C", "--no-sync", "--no-instructions",
        )
        if init.returncode != 0:
            pytest.fail(f"initdb failed: {init.stderr.strip() or init.stdout.strip()}")
        # trust for loopback only; the socket directory is private to the server's user
        hba = data / "pg_hba.conf"
        hba.write_text("local all all trust\nhost all all 127.0.0.1/32 trust\n")
        if owner is not None:
            os.chown(hba, *owner)
        for _attempt in range(3):
            port = _free_port()
            options = (
                f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={base} "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            )
            start = run(bindir / "pg_ctl", "start", "-w", "-t", "60", "-D", data, "-l", log, "-o", options)
            if start.returncode == 0:
                started = True
                break
        if not started:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else start.stderr
            pytest.fail(f"PostgreSQL did not start: {tail.strip()}")
        created = subprocess.run(
            [str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "edgetune", "edgetune_test"],
            capture_output=True, text=True, timeout=60,
        )
        if created.returncode != 0:
            pytest.fail(f"createdb failed: {created.stderr.strip()}")
        yield f"postgresql://edgetune@127.0.0.1:{port}/edgetune_test"
    finally:
        if started:
            run(bindir / "pg_ctl", "stop", "-m", "fast", "-w", "-D", data)
        shutil.rmtree(base, ignore_errors=True)


def reset_postgres(url: str) -> None:
    """Drop every table of the database at ``url`` (the tests own it)."""
    import sqlalchemy as sa

    engine = sa.create_engine(
        "postgresql+psycopg://" + url.split("://", 1)[1],
        connect_args={"options": "-c lock_timeout=20000"},
    )
    try:
        tables = sa.MetaData()
        tables.reflect(engine)
        tables.drop_all(engine)
    finally:
        engine.dispose()


@pytest.fixture(scope="session")
def loopback_board(tmp_path_factory: pytest.TempPathFactory) -> TrackerAddress:
    """A real TVM tracker and RPC server on 127.0.0.1, shared by every test."""
    board = LocalBoard(key=SESSION_KEY, num_threads=2, log_dir=tmp_path_factory.mktemp("board"))
    address = board.start()
    yield address
    board.stop()


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 600, env: dict[str, str] | None = None,
            fresh: bool = False) -> subprocess.CompletedProcess:
    """Run the ``edgetune`` command in its own process, as the console script does.

    The process is forked from a server that imported TVM once (``tests/harness/cli_fork.py``), which
    saves the 3-4 s import per call; ``fresh=True`` starts the real console script in a new interpreter.
    """
    merged = {**os.environ, **(env or {})}
    if not fresh:
        from harness.cli_fork import run_forked_cli

        return run_forked_cli([str(arg) for arg in args], cwd=None if cwd is None else str(cwd), env=merged, timeout=timeout)
    script = Path(sys.executable).parent / "edgetune"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "edgetune.cli"]
    return subprocess.run(
        [*command, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=merged,
    )


class EmptyHistory:
    """A history with no records: ``compile_model`` takes its tuned path, every kernel as Relax legalized it."""

    def for_target(self, _target):
        import tvm.s_tir.meta_schedule as ms

        return ms.database.MemoryDatabase()
