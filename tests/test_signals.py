"""Ctrl-C and kill during tuning: the first one sets the stop flag, whatever signal mask the run inherited."""

from __future__ import annotations

import os
import signal
import time

import pytest

from edgetune.common.interrupts import StopSignal, stop_on_signals


def _wait_for(event, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not event.is_set():
        time.sleep(0.01)  # the Python handler runs between bytecodes of the main thread
    return event.is_set()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_first_signal_sets_the_flag_and_handlers_are_restored(signum: int) -> None:
    before = signal.getsignal(signum)
    stop = StopSignal()
    with stop_on_signals(stop):
        os.kill(os.getpid(), signum)
        assert _wait_for(stop.event)
        assert stop.signum == signum
    assert signal.getsignal(signum) == before


def test_a_signal_blocked_by_the_parent_still_stops_the_run() -> None:
    """A run started with SIGINT blocked (the mask is inherited) must still hear Ctrl-C; the mask comes back after."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        stop = StopSignal()
        with stop_on_signals(stop):
            assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())
            os.kill(os.getpid(), signal.SIGINT)
            assert _wait_for(stop.event)
        assert signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


# A child Python that installs, as TVM's Z3 does around each proof, a native SIGINT
# handler that swallows the signal (here libc's getpid: called with the signal
# number, it does nothing), then waits in a blocking call for a Ctrl-C.
_SWALLOWED_CTRL_C = """
import contextlib, ctypes, signal, sys, threading, time
from edgetune.common.interrupts import forward_sigint_to_main_thread

# Python's own SIGINT handler, as in an interactive start: a child of a process that had SIGINT ignored
# inherits SIG_IGN, Python leaves it so, and interrupt_main() then does nothing (a suite started with `&` from
# a non-interactive shell spawns it so: POSIX starts such background jobs with SIGINT ignored)
signal.signal(signal.SIGINT, signal.default_int_handler)
libc = ctypes.CDLL(None)
libc.signal.restype = ctypes.c_void_p
libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
forwarded = sys.argv[1] == "forwarded"
started = time.monotonic()
try:
    with forward_sigint_to_main_thread() if forwarded else contextlib.nullcontext():
        libc.signal(signal.SIGINT, ctypes.cast(libc.getpid, ctypes.c_void_p).value)
        print("ready", flush=True)
        threading.Event().wait(float(sys.argv[2]))  # a lock wait: only a signal cuts it short
        print("not interrupted", flush=True)
except KeyboardInterrupt:
    print(f"interrupted after {time.monotonic() - started:.1f} s", flush=True)
"""


@pytest.mark.parametrize("mode, wait_sec", [("forwarded", 60.0), ("control", 2.0)])
def test_ctrl_c_reaches_python_even_when_native_code_swallows_sigint(mode: str, wait_sec: float) -> None:
    """Z3 (linked into TVM) replaces SIGINT's handler during each proof; the CLI's forwarding thread must not care.

    The control shows the failure it prevents: without forwarding, the same Ctrl-C is lost.
    """
    import subprocess
    import sys

    child = subprocess.Popen(
        [sys.executable, "-c", _SWALLOWED_CTRL_C, mode, str(wait_sec)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert child.stdout.readline().strip() == "ready", child.stderr.read()
    sent = time.monotonic()
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=wait_sec + 30)
    if mode == "forwarded":
        assert out.startswith("interrupted"), (out, err)
        assert time.monotonic() - sent < 10, "the Ctrl-C waited for the blocking call to end"
    else:
        assert out.strip() == "not interrupted", (out, err)


def test_forwarding_keeps_sigint_blocked_for_the_tuning_loop_and_restores_the_mask() -> None:
    """Inside the CLI's forwarding, stop_on_signals must not unblock SIGINT (that would hand it back to Z3's race)."""
    from edgetune.common.interrupts import forward_sigint_to_main_thread, sigint_is_forwarded

    before = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    with forward_sigint_to_main_thread():
        assert sigint_is_forwarded()
        stop = StopSignal()
        with stop_on_signals(stop):
            assert signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set())
            os.kill(os.getpid(), signal.SIGINT)  # taken by the forwarding thread, handled in this one
            assert _wait_for(stop.event)
            assert stop.signum == signal.SIGINT
    assert not sigint_is_forwarded()
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == before


# The main thread in native code (GIL released) that is busy when the wake-up signal
# arrives and only then blocks: the first wake-up interrupts nothing, as when it lands
# between a lock wait's release of the GIL and the wait itself.
_GAP_THEN_SLEEP_C = r"""
#include <time.h>
#include <unistd.h>
void gap_then_sleep(double gap, unsigned secs) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do clock_gettime(CLOCK_MONOTONIC, &b); while ((b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9 < gap);
    sleep(secs);
}
"""
_LOST_WAKE_UP = """
import ctypes, signal, sys, time
from edgetune.common.interrupts import forward_sigint_to_main_thread

signal.signal(signal.SIGINT, signal.default_int_handler)  # as in an interactive start (see above)
helper = ctypes.CDLL(sys.argv[1])
helper.gap_then_sleep.argtypes = [ctypes.c_double, ctypes.c_uint]
started = time.monotonic()
try:
    with forward_sigint_to_main_thread():
        print("ready", flush=True)
        helper.gap_then_sleep(0.5, 20)  # the Ctrl-C arrives during the 0.5 s gap
        print(f"not interrupted after {time.monotonic() - started:.1f} s", flush=True)
except KeyboardInterrupt:
    print(f"interrupted after {time.monotonic() - started:.1f} s", flush=True)
"""


def test_a_wake_up_that_lands_before_the_wait_is_sent_again(tmp_path) -> None:
    """The forwarded Ctrl-C must not wait out a blocking call that began after the first wake-up, nor a wake-up
    signal blocked in the mask the process inherited."""
    import subprocess
    import sys

    from conftest import require_tool

    gcc = require_tool("gcc", "gcc")
    source, library = tmp_path / "gap.c", tmp_path / "libgap.so"
    source.write_text(_GAP_THEN_SLEEP_C)
    subprocess.run([gcc, "-shared", "-fPIC", "-O0", "-o", str(library), str(source)], check=True)
    # started with the wake-up signal blocked (an inherited mask): the forwarding must unblock it
    child = subprocess.Popen([sys.executable, "-c", _LOST_WAKE_UP, str(library)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGURG}))
    assert child.stdout.readline().strip() == "ready", child.stderr.read()
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert out.startswith("interrupted"), (out, err)
    assert float(out.split()[2]) < 5, out  # the gap (0.5 s) and one more wake-up, not the 20 s sleep


# The tune command's body replaced by a probe that imports numpy (whose OpenBLAS
# starts threads, as the real command's imports do) and lists the threads that
# could be handed a Ctrl-C: those with SIGINT unblocked.
_CLI_THREADS = """
import json, os, signal, sys, threading
import edgetune.cli as cli

def probe(args):
    import numpy  # noqa: F401
    unblocked = []
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/status") as status:
            mask = int(next(line for line in status if line.startswith("SigBlk")).split()[1], 16)
        if not mask & (1 << (signal.SIGINT - 1)):
            unblocked.append(int(tid))
    forwarder = [t.native_id for t in threading.enumerate() if t.name == "edgetune-sigint"]
    print(json.dumps({"threads": len(os.listdir("/proc/self/task")), "unblocked": unblocked, "forwarder": forwarder}))
    return 0

cli._run_tune = probe
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.parametrize("command", [["tune", "--model", "demo:tiny-cnn"], ["schedules", "build", "--db", "sqlite:///unused.db", "--budget", "2"]])
def test_commands_that_tune_leave_ctrl_c_to_the_forwarding_thread_alone(command: list[str]) -> None:
    """Every thread of a tuning command blocks SIGINT but the one that forwards it, threads of libraries included.

    A CI run lost a Ctrl-C this way: OpenBLAS's thread (started when numpy was
    imported, before the forwarding began) had SIGINT unblocked, the kernel
    handed the signal to it, and Z3's handler swallowed it there.
    """
    import json
    import subprocess
    import sys

    script = _CLI_THREADS
    if command[0] == "schedules":
        script = script.replace("cli._run_tune = probe", "cli._schedules_build = probe")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2"}  # at least one thread beside the main one on any host
    done = subprocess.run([sys.executable, "-c", script, *command], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["threads"] >= 3, seen  # main, the forwarder and OpenBLAS's: else this proves nothing
    assert len(seen["forwarder"]) == 1, seen
    assert set(seen["unblocked"]) <= set(seen["forwarder"]), seen
