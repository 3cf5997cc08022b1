"""Ctrl-C and kill during tuning: the first one sets the stop flag, whatever signal mask the run inherited."""

from __future__ import annotations

import os
import signal
import time

import pytest

from edgetune.tuning.signals import StopSignal, stop_on_signals


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
