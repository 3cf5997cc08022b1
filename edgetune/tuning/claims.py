"""Claims: several tuners sharing one history never measure one candidate at once.

Before a candidate is built, this run claims it in the history (a lease the
database grants to one owner at a time, see
:meth:`~edgetune.history.store.HistoryStore.claim_candidate`). A candidate
another live owner holds is not built here: the builder first starts its own
candidates, then waits (at most ``wait_sec``) for the other owner's record and
serves the candidate from it like one cached from the history. When that claim
expires or is released without a record, this run claims it and measures it
itself. A heartbeat renews this run's leases while it holds any; the measure
callback finishes a claim once the result is committed (pointing the claim at
the record, so waiters find it), and :meth:`CandidateClaims.close` releases the
rest when the run ends, interrupted or not. A process killed outright leaves
claims that expire after one lease.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from ..common.failure import CLAIMED_ELSEWHERE, is_failed
from ..errors import HistoryError
from ..history.store import ClaimOwner
from .cache import CandidateCache

if TYPE_CHECKING:
    from tvm.ir import IRModule
    from tvm.target import Target
    
    from ..history.store import Claim
    from .components import TuningHistory

#: shortest lease: a heartbeat late by a few seconds (a busy host) must not lose a claim
MIN_LEASE_SEC = 60.0
#: the lease is this many measure timeouts
LEASE_TIMEOUTS = 4
#: how long a run waits for another owner's measurement before measuring the candidate itself
WAIT_SEC = 900.0


def lease_for(measure_timeout_sec: float) -> float:
    """A lease long enough for one candidate's measurement several times over."""
    return max(MIN_LEASE_SEC, LEASE_TIMEOUTS * float(measure_timeout_sec))


class CandidateClaims:
    """This run's claims on candidates of one target; what the builder and the measure callback call."""

    def __init__(
        self,
        history: TuningHistory,
        target: Target,
        cache: CandidateCache,
        *,
        lease_sec: float = MIN_LEASE_SEC,
        wait_sec: float = WAIT_SEC,
        poll_sec: float = 0.5,
        stop: threading.Event | None = None,
    ) -> None:
        self.history = history
        self.target = target
        self.cache = cache
        self.lease_sec = float(lease_sec)
        self.wait_sec = float(wait_sec)
        self.poll_sec = float(poll_sec)
        self.stop = stop or threading.Event()
        self.owner = ClaimOwner.this_process()
        self.waited = 0  # candidates served from another process's measurement instead of measured here
        self.wait_timeouts = 0  # candidates measured here after waiting wait_sec for a live owner
        self._held: set[str] = set()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._heartbeat = threading.Thread(target=self._renew, name="edgetune-claims", daemon=True)
        self._heartbeat.start()

    # -- the builder's side ------------------------------------------------------
    def claim(self, mod: IRModule) -> bool:
        """Claim a candidate about to be built; False: another process measures (or measured) it."""
        key = CandidateCache.key(mod)
        claim = self.history.claims.claim_candidate(self.target, key, self.owner, self.lease_sec)
        if claim.record_id is not None and is_failed(self._run_secs(claim.record_id)):
            # measured before and failed (or pruned since): measure again, as a resumed run does
            claim = self.history.claims.claim_candidate(self.target, key, self.owner, self.lease_sec, take_measured=True)
        return self._won(key, claim)

    def wait(self, mod: IRModule) -> tuple[str, str | None]:
        """After :meth:`claim` lost: ``("serve", cache key)``, ``("build", None)`` or ``("skip", error)``.

        Serve: another process's record holds the result (added to the cache).
        Build: the claim is this run's now (expired or released without a record),
        or its owner kept it past ``wait_sec``. Skip: this run was stopped meanwhile, or
        holds claims of its own (then it never waits; the search may propose it again).
        """
        key = CandidateCache.key(mod)
        deadline = time.monotonic() + self.wait_sec
        while True:
            claim = self.history.claims.claim_of(self.target, key)
            if claim is not None and claim.record_id is not None:
                run_secs = self._run_secs(claim.record_id)
                if run_secs is not None:
                    self.cache.add(key, run_secs)
                    if claim.owner.run != self.owner.run:  # not this run's own earlier result
                        with self._lock:
                            self.waited += 1
                    return "serve", key
            if claim is None or not claim.live:
                # a claim measured meanwhile is not taken (the next look serves it), unless its record is unreadable
                unreadable = claim is not None and claim.record_id is not None
                claim = self.history.claims.claim_candidate(
                    self.target, key, self.owner, self.lease_sec, take_measured=unreadable
                )
                if self._won(key, claim):
                    return "build", None
            if self.stop.is_set() or self.held:
                # Holding claims of our own, we must not wait: the owner may be waiting for one of
                # ours (two runs that each claimed part of the other's batch waited wait_sec for
                # each other). A run that waits holds nothing, so no wait closes a cycle.
                return "skip", f"{CLAIMED_ELSEWHERE} (run {claim.owner.run[:8]} on {claim.owner.host})"
            if time.monotonic() > deadline:
                with self._lock:
                    self.wait_timeouts += 1
                return "build", None
            time.sleep(self.poll_sec)

    # -- the measure callback's side ---------------------------------------------------
    def finish(self, mod: IRModule, record_id: int) -> None:
        """The candidate's result is committed as ``record_id``: the claim now points at it."""
        key = self._drop(mod)
        if key is not None:
            self.history.claims.finish_claim(self.target, key, self.owner, record_id)

    def release(self, mod: IRModule) -> None:
        """The candidate was not measured after all (no board): another run may take it."""
        key = self._drop(mod)
        if key is not None:
            self.history.claims.release_claim(self.target, key, self.owner)

    def close(self) -> None:
        """Stop renewing and release every claim still held (the run ends, finished or not)."""
        self._closing.set()
        self._heartbeat.join(timeout=10)
        with self._lock:
            self._held.clear()
        try:
            self.history.claims.release_claims(self.owner)
        except HistoryError:
            pass  # the database is gone: the leases expire by themselves, and the run's own error says more

    @property
    def held(self) -> int:
        with self._lock:
            return len(self._held)

    # -- internals -------------------------------------------------------------------
    def _won(self, key: str, claim: Claim | None) -> bool:
        if claim.owner.run != self.owner.run or not claim.live:
            return False
        with self._lock:
            self._held.add(key)
        return True

    def _drop(self, mod: IRModule) -> str | None:
        with self._lock:
            if not self._held:
                return None
            key = CandidateCache.key(mod)
            if key not in self._held:
                return None
            self._held.discard(key)
            return key

    def _run_secs(self, record_id: int) -> list[float] | None:
        """Run times of a stored record (``[1e10]`` if it failed); None if it is gone."""
        try:
            (record,) = self.history.bulk.records_by_id([record_id])
        except Exception:  # noqa: BLE001 - pruned meanwhile, or a trace this TVM cannot replay
            return None
        return [float(sec) for sec in record.run_secs]

    def _renew(self) -> None:
        """Heartbeat: extend this run's leases every quarter lease while it holds any."""
        while not self._closing.wait(self.lease_sec / 4):
            if self.held:
                try:
                    self.history.claims.renew_claims(self.owner, self.lease_sec)
                except HistoryError:
                    pass  # a database hiccup; the next beat tries again, the lease has slack
