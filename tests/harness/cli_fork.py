"""Run the ``edgetune`` CLI as a process forked from one that has TVM imported already.

Importing TVM takes 3-4 s on the CI machine, and the suite runs the CLI a few
hundred times: a fresh interpreter per call spent minutes on imports alone.
A multiprocessing *forkserver* imports TVM and edgetune once; every call forks
it, so each run is still its own process (its own exit code, environment,
working directory, file descriptors 0-2 and signal handlers, its children
in its own tree), only without the import. A test that must see a cold start
(what ``--help`` imports, how long it takes) runs its own interpreter.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import tempfile
from typing import Any

#: imported once by the fork server: what most commands import before they do anything
PRELOAD = ["numpy", "onnx", "tvm", "tvm.relax", "tvm.s_tir.meta_schedule", "edgetune.cli", "edgetune.tuning.pipeline",
           "edgetune.history"]

_context: Any = None


def _server() -> Any:
    global _context
    if _context is None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        _context = context
    return _context


def _child(args: list[str], cwd: str | None, env: dict[str, str], out: str, err: str) -> None:
    """In the forked process: the console script's ``sys.exit(main())`` with the caller's fds, env and cwd."""
    import atexit
    import sys
    import traceback

    os.environ.clear()
    os.environ.update(env)
    if cwd:
        os.chdir(cwd)
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, out, os.O_WRONLY), (2, err, os.O_WRONLY)):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    sys.argv = ["edgetune", *args]
    code = 1
    try:
        from edgetune.cli import main

        code = main(args)
    except SystemExit as done:  # argparse's usage errors and --help
        if done.code is None or isinstance(done.code, int):
            code = done.code or 0
        else:
            print(done.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - as the interpreter would: the traceback on stderr, status 1
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()  # what a normal interpreter exit runs; os._exit below would skip it
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)


def run_forked_cli(args: list[str], *, cwd: str | None, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """``subprocess.run(["edgetune", *args], capture_output=True, text=True, ...)``, from the fork server."""
    with tempfile.TemporaryDirectory(prefix="edgetune-cli-") as tmp:
        out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
        for path in (out, err):
            open(path, "wb").close()
        process = _server().Process(target=_child, args=(list(args), cwd, env, out, err))
        process.start()
        process.join(timeout)
        if process.is_alive():
            process.kill()
            process.join(10)
            raise subprocess.TimeoutExpired(["edgetune", *args], timeout, output=_read(out), stderr=_read(err))
        return subprocess.CompletedProcess(["edgetune", *args], process.exitcode, _read(out), _read(err))


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()
