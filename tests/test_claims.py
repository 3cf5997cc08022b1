"""The tuning side of claims (edgetune.tuning.claims) over a real SQLite history: wait, serve, take over, skip."""

from __future__ import annotations

import threading

from edgetune.common.failure import is_claimed_elsewhere
from edgetune.history import open_history
from edgetune.tuning.cache import CandidateCache
from edgetune.tuning.claims import CandidateClaims
from test_history import ARM, MOD, _record, _schedule


def _pair(tmp_path, **kwargs):
    url = f"sqlite:///{tmp_path / 'tuning.db'}"
    stores = [open_history(url, board_id="k"), open_history(url, board_id="k")]
    return stores, [CandidateClaims(db, ARM, CandidateCache(), poll_sec=0.05, **kwargs) for db in stores]


def test_a_waiter_is_served_from_the_owners_record(tmp_path):
    stores, (first, second) = _pair(tmp_path)
    try:
        mod = _schedule(4).mod
        assert first.claim(mod) and not second.claim(mod)
        got: list = []
        waiter = threading.Thread(target=lambda: got.append(second.wait(mod)))
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive()  # the owner has not measured it yet
        record_id = stores[0].commit_measurement(_record(stores[0].commit_workload(MOD), 4, [2e-3]))
        first.finish(mod, record_id)
        waiter.join(10)
        assert got == [("serve", CandidateCache.key(mod))]
        assert second.cache.lookup_key(CandidateCache.key(mod)) == [2e-3]
        assert (second.waited, first.waited) == (1, 0)
        assert not second.claim(mod)  # measured: a later claim is served too, not measured again
    finally:
        for claims in (first, second):
            claims.close()
        for db in stores:
            db.close()


def test_a_claim_released_without_a_record_is_taken_over(tmp_path):
    stores, (first, second) = _pair(tmp_path)
    try:
        mod = _schedule(8).mod
        assert first.claim(mod) and not second.claim(mod)
        first.close()  # the owner's run ended (interrupted) before measuring
        assert second.wait(mod) == ("build", None)
        assert second.held == 1 and second.waited == 0
        assert stores[0].claims.claim_of(ARM, CandidateCache.key(mod)).owner == second.owner
    finally:
        second.close()
        for db in stores:
            db.close()


def test_a_stopped_waiter_skips_and_a_bounded_wait_measures(tmp_path):
    stores, (first, second) = _pair(tmp_path, wait_sec=0.3)
    try:
        mod, other = _schedule(2).mod, _schedule(16).mod
        assert first.claim(mod) and first.claim(other)
        assert second.wait(mod) == ("build", None)  # the owner kept it past wait_sec
        assert second.wait_timeouts == 1
        second.stop.set()
        outcome, error = second.wait(other)
        assert outcome == "skip" and is_claimed_elsewhere(error)
    finally:
        for claims in (first, second):
            claims.close()
        for db in stores:
            db.close()


def test_runs_holding_claims_never_wait_for_each_other(tmp_path):
    """Two runs that each claimed part of the other's batch: each skips the other's, neither blocks.

    Before, each waited wait_sec (900 s by default) for the other's record, which the
    other could only write after its own wait ended; CI timed out on it.
    """
    stores, (first, second) = _pair(tmp_path, wait_sec=30)
    try:
        mine, theirs = _schedule(2).mod, _schedule(4).mod
        assert first.claim(mine) and second.claim(theirs)
        results: list = []
        waiters = [
            threading.Thread(target=lambda: results.append(first.wait(theirs))),
            threading.Thread(target=lambda: results.append(second.wait(mine))),
        ]
        for waiter in waiters:
            waiter.start()
        for waiter in waiters:
            waiter.join(5)
        assert not any(waiter.is_alive() for waiter in waiters), "a run holding claims waited for another"
        assert [outcome for outcome, _ in results] == ["skip", "skip"]
        assert all(is_claimed_elsewhere(error) for _, error in results)
        assert (first.held, second.held) == (1, 1)  # their own claims stay theirs to measure
    finally:
        for claims in (first, second):
            claims.close()
        for db in stores:
            db.close()


def test_tuners_timing_another_way_claim_apart(tmp_path):
    """A warm tuner's finished claim must not hand its warm time to a flushed tuner: each measures its own."""
    url = f"sqlite:///{tmp_path / 'tuning.db'}"
    warm, flushed = open_history(url, board_id="k", timing="warm"), open_history(url, board_id="k", timing="flushed")
    first = CandidateClaims(warm, ARM, CandidateCache(), poll_sec=0.05)
    second = CandidateClaims(flushed, ARM, CandidateCache(), poll_sec=0.05)
    try:
        mod = _schedule(4).mod
        assert first.claim(mod)
        first.finish(mod, warm.commit_measurement(_record(warm.commit_workload(MOD), 4, [2e-3])))
        assert second.claim(mod)  # not served the warm record: this tuner measures it
        assert second.cache.lookup_key(CandidateCache.key(mod)) is None
        third = CandidateClaims(warm, ARM, CandidateCache(), poll_sec=0.05)  # another warm run is served
        assert not third.claim(mod)
        third.close()
    finally:
        for claims in (first, second):
            claims.close()
        for db in (warm, flushed):
            db.close()
