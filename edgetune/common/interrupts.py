"""Ctrl-C that always arrives: SIGINT taken by one thread with ``sigwait``, handed to the main thread.

TVM 0.27's wheels link the Z3 solver, and TVM leaves Z3's ``ctrl_c`` option on:
around every proof that reaches Z3 (``Analyzer.can_prove`` from schedule
primitives such as ``split``), Z3 installs its own SIGINT handler, which
cancels the proof and swallows the signal. MetaSchedule's search runs those
proofs on several threads at once (measured on the demo CNN: Z3's handler was
in place about 1 % of a whole run, about 5 % of the first search round right
after the default schedules are measured; a thread preempted inside a proof
keeps it installed, so a loaded CPU can only make it worse), so a Ctrl-C could do nothing and
the run went on to its end. No handler can win that race, since Z3 replaces
whatever handler is installed. A *blocked* signal is not handled at all,
though: ``sigwait`` takes it whatever the handler is. So SIGINT is blocked in
the main thread (and so in every thread started after it: the mask is
inherited), one thread waits for it, and forwards it to the main thread's
Python handler with ``_thread.interrupt_main``; Python's own handler
(``KeyboardInterrupt``) or the tuning loop's (:func:`stop_on_signals`) then
runs exactly as it would have.

Every signal edgetune handles is here: the forwarded Ctrl-C, the tuning
loop's "finish the batch, then stop" (:func:`stop_on_signals`), and the CLI's
``kill`` (:func:`exit_cleanly_on_sigterm`) and ``kill -USR1`` stack dump
(:func:`dump_stacks_on_sigusr1`).

Used around ``edgetune tune`` and ``edgetune.tune()``. Child processes started
meanwhile inherit the blocked SIGINT: a terminal's Ctrl-C no longer kills
build workers or compilers mid-batch (the batch in flight finishes, as the
first Ctrl-C asks); edgetune stops its children itself (SIGTERM, see
``common.process``).
"""

from __future__ import annotations

import _thread
import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterator

#: a signal sent to the main thread to cut short a blocking wait (a lock,
#: ``sleep``) so that the forwarded Ctrl-C runs at once; its handler only notes
#: that it ran, and its default action is to ignore it, so a stray one is harmless
_WAKE = getattr(signal, "SIGURG", None)

_active = threading.Event()
#: how often, and how far apart, the wake-up is sent until the main thread has run its handlers
_WAKE_TRIES, _WAKE_INTERVAL = 200, 0.05


def sigint_is_forwarded() -> bool:
    """Whether SIGINT is taken by the forwarding thread (then it stays blocked in every other thread)."""
    return _active.is_set()


@contextmanager
def forward_sigint_to_main_thread() -> Iterator[None]:
    """Deliver every Ctrl-C to the main thread's Python handler, whatever native code did to SIGINT's handler.

    Enter it in the main thread before other threads start (they inherit the
    blocked mask). Elsewhere, or without ``sigwait``, it does nothing.
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or _active.is_set()
        or not hasattr(signal, "sigwait")
        or _WAKE is None
    ):
        yield
        return
    woken = threading.Event()  # set by the wake-up signal's Python handler: the main thread ran its handlers
    previous_wake = signal.signal(_WAKE, lambda signum, frame: woken.set())
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    # a wake-up blocked in this thread (a mask inherited from the parent process) would never
    # arrive; the previous mask comes back at the end
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {_WAKE})
    closing = threading.Event()
    main_thread = threading.main_thread().ident

    def forward() -> None:
        while True:
            signal.sigwait({signal.SIGINT})
            if closing.is_set():
                return
            woken.clear()
            _thread.interrupt_main(signal.SIGINT)  # runs the handler the main thread has for SIGINT
            # The wake-up can be lost: this thread gets the GIL when the main thread releases it to
            # block in a lock wait, and a signal landing before the wait begins interrupts nothing
            # (a constructed case in tests/test_signals.py; not seen in a real run). So wake it again until
            # its Python handlers have run (SIGINT's first, then the wake-up's), for at most 10 s.
            for _ in range(_WAKE_TRIES):
                signal.pthread_kill(main_thread, _WAKE)
                if woken.wait(_WAKE_INTERVAL) or closing.is_set():
                    break

    forwarder = threading.Thread(target=forward, name="edgetune-sigint", daemon=True)
    forwarder.start()  # inherits the blocked SIGINT, as sigwait needs
    _active.set()
    try:
        yield
    finally:
        _active.clear()
        closing.set()
        signal.pthread_kill(forwarder.ident, signal.SIGINT)  # ends its sigwait
        forwarder.join(timeout=5)
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
        signal.signal(_WAKE, previous_wake)


@contextmanager
def sigint_blocked() -> Iterator[None]:
    """SIGINT blocked in this thread meanwhile, and so in every thread started meanwhile (they keep it blocked)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class StopSignal:
    """Which signal asked the run to stop (SIGINT from Ctrl-C, SIGTERM from ``kill``)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signum: int | None = None


class StopRequested(Exception):
    """Raised in a callback to unwind MetaSchedule's C++ loop after a Ctrl-C."""


@contextmanager
def stop_on_signals(stop: StopSignal) -> Iterator[None]:
    """First Ctrl-C or ``kill``: finish the batch in flight, keep it, stop. Second: stop now.

    The stop has to be a flag checked between batches, not an exception raised
    where the signal lands: the handler runs inside whichever Python callback
    MetaSchedule's C++ loop is calling, and the task scheduler catches errors
    from those callbacks, marks that one task failed and carries on tuning.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handled = (signal.SIGINT, signal.SIGTERM)
    previous = {signum: signal.getsignal(signum) for signum in handled}

    def handler(signum: int, frame: Any) -> None:
        if stop.event.is_set():
            for each, old in previous.items():
                signal.signal(each, old)
            if signum == signal.SIGTERM:
                raise SystemExit(128 + signum)
            raise KeyboardInterrupt
        stop.signum = signum
        stop.event.set()

    for signum in handled:
        signal.signal(signum, handler)
    # A blocked signal is never delivered, handler or not, and the mask is inherited: a
    # parent that had SIGINT blocked when it started us would
    # make Ctrl-C and kill do nothing until the run ended on its own. A SIGINT taken by
    # forward_sigint_to_main_thread's thread is blocked on purpose and reaches this handler from there.
    unblock = {signum for signum in handled if not (signum == signal.SIGINT and sigint_is_forwarded())}
    blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, unblock) if hasattr(signal, "pthread_sigmask") else set()
    try:
        yield
    finally:
        if blocked & unblock:
            signal.pthread_sigmask(signal.SIG_BLOCK, blocked & unblock)
        for signum, old in previous.items():
            signal.signal(signum, old)


def exit_cleanly_on_sigterm() -> None:
    """``kill PID`` unwinds like Ctrl-C twice: the embedded board's processes are stopped.

    Python runs no cleanup on SIGTERM by default, which would leave the loopback
    tracker and RPC server (their own process groups) running.
    """
    if threading.current_thread() is not threading.main_thread():
        return

    def terminate(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)


def dump_stacks_on_sigusr1() -> None:
    """``kill -USR1 PID`` prints every thread's stack to stderr: how to see where a stuck run waits."""
    import faulthandler

    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
