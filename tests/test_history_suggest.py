"""Suggested settings per task type (issue 7): the sampling replay, and each task getting its own type's settings."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
import tvm
import tvm.s_tir.meta_schedule as ms
from tvm import te
from tvm.s_tir.meta_schedule.runner import RunnerResult

from conftest import run_cli
from edgetune.builder.intrinsics import load_tensor_intrinsics
from edgetune.history import open_history
from edgetune.search.suggest import _replay_windows, sampling_ratio, settings_by_operator, suggest_settings
from edgetune.search.strategy import AdaptiveSearch, SearchReport, SearchSettings
from edgetune.search.sampling import KMeansSampler
from edgetune.costmodel.surrogate import CandidateFeatures
from test_warmstart import TARGET, add, candidates, matmul

# -- the replay rule on windows with known features ---------------------------------------------------------

#: 8 candidates on a line; seed-0 K-means keeps [1, 3, 5, 7] at 0.1, [1, 3, 6] at 0.2, [1, 5] at 0.3 and 0.5
LINE = np.stack([[0, 1.1, 2, 3.3, 4, 5.2, 6, 7.5], np.zeros(8)], axis=1)


def window(best: int, features: np.ndarray = LINE, near: dict[int, float] | None = None) -> tuple[np.ndarray, list]:
    latencies = [2e-3] * len(features)
    latencies[best] = 1e-3
    for index, value in (near or {}).items():
        latencies[index] = value
    return features, latencies


def test_the_line_clusters_as_the_tests_assume():
    kept = KMeansSampler(0.1, seed=0).select_for_ratios(LINE, (0.1, 0.2, 0.3, 0.5))
    assert kept == {0.1: [1, 3, 5, 7], 0.2: [1, 3, 6], 0.3: [1, 5], 0.5: [1, 5]}
    # select() at one ratio keeps what the shared-fit replay says it keeps
    for ratio, indices in kept.items():
        assert KMeansSampler(ratio, seed=0).select(LINE) == indices


def test_largest_ratio_whose_subset_keeps_the_best():
    assert sampling_ratio([window(best=1)] * 4) == (0.5, 4)  # kept at every ratio
    assert sampling_ratio([window(best=3)] * 4) == (0.2, 4)  # dropped from 0.3 on
    assert sampling_ratio([window(best=7)] * 4) == (0.1, 4)
    # every window's best is a candidate no ratio keeps: the conservative answer, measure everything
    assert sampling_ratio([window(best=0)] * 4) == (0.0, 4)
    # a kept candidate within 3% of the best covers the window; 4% does not
    assert sampling_ratio([window(best=0, near={1: 1.03e-3})] * 4) == (0.5, 4)
    assert sampling_ratio([window(best=0, near={1: 1.04e-3})] * 4) == (0.0, 4)


def test_ninety_percent_of_windows_must_be_covered():
    assert sampling_ratio([window(best=1)] * 9 + [window(best=3)]) == (0.5, 10)  # 9 of 10 at 0.5
    assert sampling_ratio([window(best=1)] * 8 + [window(best=3)] * 2) == (0.2, 10)  # 8 of 10: not enough
    # failed candidates never cover; windows without a valid latency or of one candidate do not count
    failed = (LINE, [None] * 8)
    single = (LINE[:1], [1e-3])
    assert sampling_ratio([window(best=1), failed, single]) == (0.5, 1)
    assert sampling_ratio([failed]) == (None, 0)
    only_failed_kept = window(best=0, near={1: None, 5: None})
    assert sampling_ratio([only_failed_kept]) == (0.0, 1)


# -- a real history: traces re-applied, per-type values ------------------------------------------------------


def transposed_matmul(n: int) -> tvm.IRModule:
    """Another task type (block ``E``) with a search space as large as the matmul's."""
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    e = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[j, k], axis=k), name="E")
    return tvm.IRModule({"main": te.create_prim_func([a, b, e])})


def commit(path: str, mod, latencies: list[float], seed: int, found: list | None = None) -> list:
    """Commit one candidate per latency, in order; return the candidates.

    ``found``: the candidates to commit (generation with two threads is not
    reproducible from the seed alone), else new ones."""
    history = open_history(path, board_id="b")
    workload = history.commit_workload(mod)
    found = found if found is not None else candidates(mod, len(latencies), seed)
    assert len({str(c.sch.trace) for c in found}) == len(latencies)
    for cand, seconds in zip(found, latencies):
        history.commit_tuning_record(ms.database.TuningRecord(cand.sch.trace, workload, [seconds], TARGET, cand.args_info))
    history.close()
    return found


def features_of(mod, found: list, batch: int) -> list[np.ndarray]:
    context = ms.TuneContext(mod=mod, target=TARGET, task_name="t")
    return [CandidateFeatures()(context, found[i : i + batch]) for i in range(0, len(found), batch)]


@pytest.fixture(scope="module")
def real_history(tmp_path_factory):
    """matmul at 64 (uniform latencies: any subset covers) and at 32 (every window's best is a candidate
    K-means drops at every ratio); a transposed matmul, another type (best found at 3 of 4)."""
    load_tensor_intrinsics(TARGET)
    path = str(tmp_path_factory.mktemp("suggest7") / "history.db")
    commit(path, matmul(64), [1e-3] * 16, seed=21)
    # pick, per window, a best the sampler drops, from the features the proposals had
    found = candidates(matmul(32), 16, 22)
    latencies = []
    for features in features_of(matmul(32), found, 8):
        kept = set().union(*KMeansSampler(0.1, seed=0).select_for_ratios(features, (0.1, 0.2, 0.3, 0.5)).values())
        dropped = [i for i in range(8) if i not in kept]
        assert dropped, "every candidate of the window is kept at some ratio; pick another seed"
        window_latencies = [2e-3] * 8
        window_latencies[dropped[0]] = 1e-3
        latencies += window_latencies
    commit(path, matmul(32), latencies, seed=22, found=found)
    commit(path, transposed_matmul(64), [3e-3, 2e-3, 1e-3, 2e-3], seed=23)
    return {"path": path, "matmul32": found}


def test_replay_recomputes_the_features_the_sampler_saw(real_history):
    with sqlite3.connect(real_history["path"]) as conn:  # the matmul(32) rows in committed order
        ids = [row[0] for row in conn.execute("select id from records where workload_id = 2 order by created_at, id")]
    history = open_history(real_history["path"], read_only=True)
    records = history.bulk.records_by_id(ids)
    assert len(records) == 16 and records[0].workload.mod.script() == matmul(32).script()
    windows = _replay_windows(records, [1e-3] * len(records), 8)
    expected = features_of(matmul(32), real_history["matmul32"], 8)
    assert len(windows) == len(expected) == 2
    for (replayed, _), proposed in zip(windows, expected):
        np.testing.assert_array_equal(replayed, proposed)
    history.close()


def test_per_type_values_from_the_history(real_history):
    history = open_history(real_history["path"], read_only=True)
    matmul_type, add_type = suggest_settings(history, batch=8, min_trials=4)
    assert matmul_type.operator == ("C",) and add_type.operator == ("E",)
    # records in committed order: the first of the uniform workload is its best; the other's best is in window 1
    assert matmul_type.sampling_windows == [2, 2]
    assert sorted(matmul_type.sampling_ratios) == [0.0, 0.5]
    assert matmul_type.kmeans_distance_ratio == 0.0  # the minimum over the type's workloads
    assert add_type.best_found_at == [3] and add_type.max_trials_per_task == 8  # ceil(3 x 1.25 / 8) batches
    assert add_type.sampling_windows == [1]
    # the replay only reads the first records of a workload
    (capped,) = suggest_settings(history, batch=8, sampling_records=8)  # min_trials 8: the add is left out
    assert capped.sampling_windows == [1, 1]
    skipped = suggest_settings(history, batch=8, min_trials=4, sampling=False)
    assert [s.kmeans_distance_ratio for s in skipped] == [None, None]
    only_add = suggest_settings(history, batch=8, min_trials=4, operators=[("E",)])
    assert [s.operator for s in only_add] == [("E",)]
    assert settings_by_operator([matmul_type, add_type]) == {
        ("C",): {"max_trials": matmul_type.max_trials_per_task, "kmeans_distance_ratio": 0.0},
        ("E",): {"max_trials": 8, "kmeans_distance_ratio": add_type.kmeans_distance_ratio},
    }
    history.close()


def test_cli_shows_the_sampling_column(real_history):
    wide = {"COLUMNS": "250"}
    result = run_cli("db", "suggest", "--db", real_history["path"], "--batch", "8", env=wide)
    assert result.returncode == 0, result.stderr
    assert "kmeans_distance_ratio" in result.stdout and "0 (off)" in result.stdout
    plain = run_cli("db", "suggest", "--db", real_history["path"], "--no-sampling", env=wide)
    assert plain.returncode == 0 and "0 (off)" not in plain.stdout


def test_cli_default_replay_size_is_the_librarys():
    from edgetune.search import cli
    from edgetune.search.suggest import SAMPLING_RECORDS

    assert cli._SAMPLING_RECORDS == SAMPLING_RECORDS  # kept apart so `edgetune db` starts without TVM


# -- AdaptiveSearch applies each task's own type's entry ------------------------------------------------------

SUGGESTED = {("C",): {"max_trials": 16, "kmeans_distance_ratio": 0.2}}


def start_task(strategy: AdaptiveSearch, mod, name: str, max_trials: int = 64):
    context = ms.TuneContext(
        mod=mod, target=TARGET, space_generator="post-order-apply", search_strategy=strategy.clone(),
        task_name=name, num_threads=2, rand_state=1,
    )
    context.pre_tuning(
        max_trials=max_trials, num_trials_per_iter=8, design_spaces=context.generate_design_space(),
        database=ms.database.MemoryDatabase(), cost_model=ms.cost_model.RandomModel(),
    )
    return context


def test_each_task_gets_its_own_types_settings():
    load_tensor_intrinsics(TARGET)
    report = SearchReport()
    strategy = AdaptiveSearch(
        SearchSettings(population_size=16, init_min_unmeasured=8, early_stop="adaptive", sampler="kmeans",
                       kmeans_distance_ratio=0.3, exploration="fixed"),
        suggested=SUGGESTED, report=report,
    )
    start_task(strategy, matmul(64), "mm")
    start_task(strategy, add(64), "add")
    assert report.suggested["mm"] == {
        "task": "mm", "operator": "C", "from_history": True, "early_stop": "adaptive",
        "early_stop_initial": 16, "max_trials": None, "kmeans_distance_ratio": 0.2,
    }
    assert report.suggested["add"] == {
        "task": "add", "operator": "D", "from_history": False, "early_stop": "adaptive",
        # the profile's: im = 0 means half the task's share (64), and the profile's ratio
        "early_stop_initial": 32, "max_trials": None, "kmeans_distance_ratio": 0.3,
    }
    # a ratio of 0 (no ratio was safe) turns sampling off for that type
    off = AdaptiveSearch(SearchSettings(population_size=16, init_min_unmeasured=8, exploration="fixed"), report=SearchReport(),
                         suggested={("D",): {"max_trials": 24, "kmeans_distance_ratio": 0.0}})
    start_task(off, add(64), "add")
    assert off.report.suggested["add"]["kmeans_distance_ratio"] is None
    assert off.report.suggested["add"]["early_stop_initial"] == 24
    # without suggestions nothing is recorded
    plain = AdaptiveSearch(SearchSettings(population_size=16, init_min_unmeasured=8, exploration="fixed"), report=SearchReport())
    start_task(plain, add(64), "add")
    assert plain.report.suggested == {}


def test_fixed_early_stop_gets_a_hard_cap_per_type():
    load_tensor_intrinsics(TARGET)
    report = SearchReport()
    strategy = AdaptiveSearch(
        SearchSettings(population_size=16, init_min_unmeasured=8, early_stop="none", sampler="none", exploration="fixed"),
        suggested={("C",): {"max_trials": 12, "kmeans_distance_ratio": None}}, report=report,
    )
    context = start_task(strategy, matmul(32), "mm")
    measured = 0
    for _ in range(10):
        batch = context.generate_measure_candidates()
        if batch is None:
            break
        measured += len(batch)
        context.notify_runner_results(batch, [RunnerResult([1e-3], None) for _ in batch])
    assert measured == 12  # one batch of 8, then 4: the cap counts measured candidates
    assert report.tasks["mm"].stopped_early and report.tasks["mm"].early_stop_limit == 12
    assert report.suggested["mm"]["max_trials"] == 12 and report.suggested["mm"]["early_stop_initial"] is None
