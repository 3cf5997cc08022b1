"""Ctrl-C and ``kill`` during tuning: finish the batch in flight, keep it, stop."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterator

from ..common.interrupts import sigint_is_forwarded


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
    # common.interrupts' thread (the CLI's) is blocked on purpose and reaches this handler from there.
    unblock = {signum for signum in handled if not (signum == signal.SIGINT and sigint_is_forwarded())}
    blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, unblock) if hasattr(signal, "pthread_sigmask") else set()
    try:
        yield
    finally:
        if blocked & unblock:
            signal.pthread_sigmask(signal.SIG_BLOCK, blocked & unblock)
        for signum, old in previous.items():
            signal.signal(signum, old)
