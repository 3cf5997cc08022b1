"""The farm simulation's core (benchmarks/farm_simulation.py): no TVM, no board, no timing; seconds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from farm_simulation import Params, simulate  # noqa: E402

#: a short horizon keeps every case well under a second
SHORT = 200.0


def farm(**overrides: float) -> Params:
    base = dict(
        boards=8, hosts=1, workers_per_host=2, batch=8, build_sec=0.2, search_sec=0.05, device_sec=0.5,
        session_sec=0.02, tracker_sec=0.001, tracker_request_sec=0.001, tracker_latency_sec=0.01, db_sec=0.002, horizon_sec=SHORT,
    )
    base.update(overrides)
    return Params(**base)


def test_builds_free_scale_with_boards_until_the_database_binds():
    free = dict(build_sec=0.0, search_sec=0.0, session_sec=0.0, jobs=16)
    small, big = simulate(farm(boards=8, **free)), simulate(farm(boards=32, **free))
    assert small.bottleneck == big.bottleneck == "boards"
    assert big.per_min / small.per_min == pytest.approx(4.0, rel=0.05)
    assert small.per_min == pytest.approx(small.bounds["boards"], rel=0.05)
    # a slow history caps the farm whatever its size
    slow_db = dict(free, db_sec=0.05)
    capped = [simulate(farm(boards=b, **slow_db)) for b in (32, 128)]
    assert all(r.bottleneck == "database" for r in capped)
    assert capped[1].per_min == pytest.approx(capped[0].per_min, rel=0.02)
    assert capped[1].per_min == pytest.approx(capped[1].bounds["database"], rel=0.03)


def test_tracker_binds_when_its_service_time_dominates():
    result = simulate(farm(boards=128, build_sec=0.0, search_sec=0.0, tracker_sec=0.02, tracker_request_sec=0.02))
    assert result.bottleneck == "tracker"
    assert result.util["tracker"] > 0.95
    assert result.per_min <= result.bounds["tracker"] * 1.02


def test_boards_free_scale_with_hosts():
    free = dict(device_sec=0.0, session_sec=0.0, boards=32)
    one, four = simulate(farm(hosts=1, **free)), simulate(farm(hosts=4, **free))
    assert one.bottleneck == four.bottleneck == "hosts"
    assert four.per_min / one.per_min == pytest.approx(4.0, rel=0.05)
    assert one.per_min == pytest.approx(one.bounds["hosts"], rel=0.05)
    shared = simulate(farm(hosts=4, shared_builds=True, **free))  # one queue across hosts: same capacity
    assert shared.per_min == pytest.approx(four.per_min, rel=0.05)


@pytest.mark.parametrize("boards,hosts", [(8, 1), (32, 2), (128, 4)])
def test_conservation_and_bounds(boards: int, hosts: int):
    p = farm(boards=boards, hosts=hosts)
    r = simulate(p)
    # every committed candidate was measured, every measured one built; at most every job's batch is in flight
    assert r.built >= r.measured >= r.committed > 0
    assert r.built - r.committed <= p.job_count() * p.batch
    assert r.committed % 1 == 0 and r.per_min == pytest.approx(r.committed / SHORT * 60)
    # the tracker served one query per batch plus one request per board asked for; the history one row per
    # candidate plus one workload write per batch
    batches = r.db_writes // (p.batch + 1)
    assert r.db_writes >= r.committed + batches
    assert r.tracker_requests >= 2 * batches
    assert all(0.0 <= u <= 1.0 + 1e-9 for u in r.util.values())
    assert r.per_min <= min(r.bounds[k] for k in ("boards", "hosts", "database")) * 1.01
    # the most utilised resource is named as the bottleneck once it is saturated
    top = max(r.util, key=r.util.get)
    assert r.bottleneck == top or r.bottleneck.startswith("jobs")


def test_deterministic():
    assert simulate(farm(boards=32, hosts=2)).committed == simulate(farm(boards=32, hosts=2)).committed
