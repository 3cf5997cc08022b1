"""How a failed measurement is spelled: MetaSchedule's stub run time, and the test for it.

MetaSchedule's ``AddToDatabase`` commits ``[1e10]`` for a candidate that did not
build or run; anything at or above :data:`FAILURE_THRESHOLD_SECS` (or not finite,
or missing) is such a stub, never a measurement. Every role (history, runner,
cost models, task schedulers) tests run times with :func:`is_failed`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: MetaSchedule's stub run time for "no valid measurement" (seconds).
FAILED_RUN_SECS = 1e10
#: Any run time (seconds) at or above this is a failure stub, not a measurement.
FAILURE_THRESHOLD_SECS = 1e9
#: Error text stored when a failed record is committed without a message.
UNKNOWN_FAILURE = "failed"


def is_failed(run_secs: Sequence[float] | None) -> bool:
    """True when ``run_secs`` is missing, empty or holds a failure stub."""
    return not run_secs or any(not math.isfinite(float(sec)) or float(sec) >= FAILURE_THRESHOLD_SECS for sec in run_secs)


def is_valid_secs(sec: float) -> bool:
    """True for one run time (seconds) that is a real measurement."""
    return math.isfinite(sec) and 0 < sec < FAILURE_THRESHOLD_SECS


#: The task schedulers work in milliseconds: a failed trial is this latency ...
FAILED_RUN_MS = 1e9
#: ... and any latency at or above this (over a day) is a failure, not a measurement.
FAILURE_THRESHOLD_MS = 1e8


def is_valid_ms(ms: float) -> bool:
    """True for one latency (milliseconds) that is a real measurement."""
    return math.isfinite(ms) and 0 < ms < FAILURE_THRESHOLD_MS

#: Prefix of the error of a candidate no board could measure (every session lost,
#: none came back in time). Not a property of the program: it is not stored in
#: the history, so a resumed run measures the candidate again.
BOARD_UNAVAILABLE = "edgetune: no board measured this candidate"


def is_board_unavailable(error: str | None) -> bool:
    """Whether a runner error says the board was missing, not that the program failed."""
    return bool(error) and str(error).startswith(BOARD_UNAVAILABLE)

#: Prefix of the error of a candidate left to another tuner that holds its claim
#: (this run was stopped while waiting for it). Not stored, like a missing board.
CLAIMED_ELSEWHERE = "edgetune: another process is measuring this candidate"


def is_claimed_elsewhere(error: str | None) -> bool:
    """Whether a builder error says another tuner measures the candidate (see tuning.claims)."""
    return bool(error) and str(error).startswith(CLAIMED_ELSEWHERE)

#: Prefix of the error of a candidate not sent to the board because the run was stopping (Ctrl-C during a
#: batch built beside the search, see measure.pending). Not stored: a resumed run measures it.
STOPPED_BEFORE_BOARD = "edgetune: not measured, the run was stopping"


def is_stopped_before_board(error: str | None) -> bool:
    """Whether a runner error says the candidate was left unmeasured by a stop, not that the program failed."""
    return bool(error) and str(error).startswith(STOPPED_BEFORE_BOARD)
