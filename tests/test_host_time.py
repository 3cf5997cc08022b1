"""Host time (issue 55): feature rows computed once per program, and where a tune's host seconds went."""

from __future__ import annotations

import numpy as np
import tvm
import tvm.s_tir.meta_schedule as ms

from edgetune.costmodel.surrogate import CandidateFeatures, RandomForestModel
from edgetune.tuning.summary import HostTime, TuneSummary, host_time
from test_transfer import context_for, conv_workload, sampled_traces


def candidates_of(mod, traces):
    found = []
    for trace in traces:
        sch = tvm.s_tir.Schedule(mod, debug_mask="none")
        trace.apply_to_schedule(sch, remove_postproc=False)
        found.append(ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)))
    return found


def test_feature_rows_are_computed_once_per_program_and_equal_fresh_ones() -> None:
    mod = conv_workload(16)
    context = context_for(mod)
    candidates = candidates_of(mod, sampled_traces(mod, 4))
    assert len(candidates) >= 3
    cached = CandidateFeatures()
    first = cached(context, candidates)
    assert (cached.hits, cached.misses) == (0, len(candidates))
    # the search scores its elites again: the same programs, in another order, with one repeated
    again = cached(context, [candidates[2], candidates[0], candidates[0]])
    assert (cached.hits, cached.misses) == (3, len(candidates))
    np.testing.assert_array_equal(again, first[[2, 0, 0]])
    fresh = CandidateFeatures()(context, candidates)  # a cache of its own computes the same rows
    np.testing.assert_array_equal(fresh, first)
    assert cached.seconds > 0 and cached.stats()["hits"] == 3


def test_the_random_forest_keeps_its_time_and_reads_cached_rows() -> None:
    mod = conv_workload(16)
    context = context_for(mod)
    candidates = candidates_of(mod, sampled_traces(mod, 3))
    model = RandomForestModel(num_warmup_samples=2, n_estimators=4)
    results = [ms.runner.RunnerResult([1e-3 * (i + 1)], None) for i in range(len(candidates))]
    model.update(context, candidates, results)
    model.predict(context, candidates)
    assert model.features.misses == len(candidates) and model.features.hits == len(candidates)
    assert model.seconds_["update"] > 0 and model.seconds_["predict"] > 0


def test_host_time_splits_the_wall_clock_and_never_goes_negative() -> None:
    model = RandomForestModel()  # its counters, as a tune leaves them
    model.seconds_ = {"predict": 3.0, "update": 1.0}
    model.features.seconds, model.features.hits, model.features.misses = 1.5, 90, 10
    split = host_time(wall=20.0, search=8.0, cost_model=model, build=4.0, board=2.0, measured=10)
    assert (split.search, split.features, split.cost_model, split.build, split.board) == (5.0, 1.5, 2.5, 4.0, 2.0)
    assert split.other == 5.0 and split.host_seconds == 18.0 and split.per_trial == 1.8
    assert split.line().startswith("host time 1.800 s per measured trial (search 0.500, features 0.150")
    assert "feature rows 90 of 100 from the cache" in split.line()
    stock = host_time(wall=5.0, search=8.0, cost_model=object(), build=1.0, board=1.0, measured=4)
    assert stock.features is None and stock.cost_model is None and stock.other == 0.0  # overlapping: clamped
    assert "cost model" not in stock.line()
    summary = TuneSummary.from_dict({"host_time": split.__dict__})
    assert summary.host_time_lines() == [HostTime(**split.__dict__).line()]


def test_host_time_is_the_wall_clock_less_the_board_and_counts_overlapping_work_once() -> None:
    # the runner waited 7 s for builds while the tuning thread searched, and 3 s of the search ran while the board
    # measured: neither is host time twice (summing the runner's wait into build gave 2.1 s per trial here)
    split = host_time(wall=20.0, search=8.0, cost_model=object(), build=1.0, board=6.0, measured=10, ahead=3.0,
                      build_beside=7.0)
    assert split.host_seconds == 14.0 and split.per_trial == 1.4
    assert split.search - split.ahead + split.build + split.other == split.host_seconds  # the parts, ahead hidden
    assert "builds the runner waited for beside the search 0.700" in split.line()
    assert split.line().startswith("host time 1.400 s per measured trial")
    # a summary written before the wall clock was kept: the sum of its parts, as it was written
    old = {k: v for k, v in split.__dict__.items() if k not in ("wall", "build_beside")}
    assert HostTime(**old).host_seconds == 8.0 + 1.0 + split.other
