"""The rule that no task ends at an inherited schedule its class beats by far (tuning/lagging.py), and the
search budget it keeps for such tasks (search/strategy.py TaskLimits); and which library schedules are measured again
for running far slower than their record (tuning/library_phase.py)."""

from __future__ import annotations

from edgetune.search.strategy import TaskLimits
from edgetune.tuning.lagging import TaskStanding, choose_lagging, describe_lagging, reserve_for_lagging


def test_only_heavy_tasks_far_below_their_class_lag_the_costliest_first() -> None:
    standings = [
        TaskStanding("classifier", weighted_sec=5.7e-3, gflops=30.0, class_gflops=150.0),  # SqueezeNet 1.1's
        TaskStanding("close", weighted_sec=3.0e-3, gflops=120.0, class_gflops=150.0),  # near its class
        TaskStanding("tiny", weighted_sec=0.1e-3, gflops=10.0, class_gflops=150.0),  # far below, but 1% of the model
        TaskStanding("stem", weighted_sec=1.0e-3, gflops=20.0, class_gflops=150.0),
        TaskStanding("unknown", weighted_sec=2.0e-3, gflops=1.0, class_gflops=None),  # no reference: not judged
    ]
    lagging = choose_lagging(standings, 11e-3, ratio=0.5, share=0.05)
    assert [s.name for s in lagging] == ["classifier", "stem"]
    assert choose_lagging(standings, 11e-3, ratio=0.1, share=0.05) == []  # 30 of 150 is not under a tenth
    assert choose_lagging(standings, 0.0, ratio=0.5, share=0.05) == []


def test_kept_trials_go_to_their_task_whatever_order_tasks_ask_in() -> None:
    limits = TaskLimits()
    limits.set_search_budget(10)
    limits.set_cap("classifier", 2)
    limits.add_measured_before("classifier")
    lagging = [TaskStanding("classifier", 5.7e-3, 30.0, 150.0), TaskStanding("stem", 1e-3, 20.0, 150.0)]
    kept = reserve_for_lagging(lagging, limits, 11e-3, trials=4)
    assert [(k.name, k.reserved) for k in kept] == [("classifier", 4), ("stem", 4)]
    assert limits.cap("classifier") == 5 and limits.cap("stem") is None  # raised over the per-task cap; none stays none
    # the other tasks ask first and often: they get only the 2 trials nobody kept
    assert limits.take(8, "other") == 2 and limits.take(1, "another") == 0
    assert limits.take(3, "classifier") == 3 and limits.take(3, "classifier") == 1  # its own 4, then nothing left
    assert limits.take(5, "stem") == 4
    assert limits.search_left == 0
    line = describe_lagging([k.to_dict() for k in kept])
    assert line.startswith("searched first") and "classifier (30 of its class's 150 GFLOPS, 52% of the model, 4 trials)" in line


def test_a_task_whose_search_ends_gives_its_kept_trials_back() -> None:
    limits = TaskLimits()
    limits.set_search_budget(6)
    assert limits.reserve("classifier", 4) == 4 and limits.reserve("stem", 4) == 2  # only what is left is kept
    assert limits.take(6, "other") == 0
    limits.release("classifier")
    assert limits.reserved("classifier") == 0 and limits.take(6, "other") == 4
    assert limits.take(6, "stem") == 2 and limits.search_left == 0


def test_without_a_run_budget_nothing_is_kept() -> None:
    limits = TaskLimits()
    assert limits.reserve("classifier", 4) == 0 and limits.take(7, "other") == 7


def test_a_library_schedule_is_rechecked_only_when_far_slower_than_its_record_at_the_boards_pace() -> None:
    """tuning/library_phase.py: a board that runs every library schedule 1.4x slower than the machine that built the
    library is not suspect; schedules at 3x and 4.5x their record, among others at the board's pace, are."""
    from edgetune.tuning.library_phase import slow_against_record

    at_pace = {"a": (140.0, 100.0), "b": (280.0, 200.0), "c": (70.0, 50.0)}
    assert slow_against_record(at_pace, 1.5) == []
    one_slow = {"a": (100.0, 100.0), "b": (600.0, 200.0), "c": (52.0, 50.0), "d": (90.0, 20.0), "e": (33.0, 30.0)}
    assert slow_against_record(one_slow, 1.5) == ["d", "b"]  # the slowest against its record first
    slower_board = {name: (first * 2, recorded) for name, (first, recorded) in one_slow.items()}
    assert slow_against_record(slower_board, 1.5) == ["d", "b"]  # the same two, at a board twice as slow
    assert slow_against_record({"a": (300.0, 100.0)}, 1.5) == ["a"]  # under three tasks, the records' own pace
    assert slow_against_record({"a": (300.0, 100.0)}, 0.0) == []  # off


def test_a_class_is_judged_by_the_tuned_cpu_models_records_where_the_library_has_them() -> None:
    import json
    import types

    from edgetune.schedules.library import LibrarySchedule
    from edgetune.tuning.lagging import class_gflops

    def schedule(mcpu: str, gflops: float) -> LibrarySchedule:
        target = json.dumps({"kind": "llvm", "mcpu": mcpu})
        return LibrarySchedule(trace_json=[], latency_us=1.0, gflops=gflops, target_json=target, board="b", records=8)

    # the exact workload, measured on a Zen 5 (300 GFLOPS) and on the Xeon being tuned (150 GFLOPS)
    workload = types.SimpleNamespace(schedules=[schedule("znver5", 300.0), schedule("rocketlake", 150.0)])
    library = types.SimpleNamespace(find=lambda mod: workload)
    assert class_gflops(library, mod=None, mcpu="rocketlake") == 150.0  # its own CPU model's bar
    assert class_gflops(library, mod=None, mcpu="znver5") == 300.0
    assert class_gflops(library, mod=None, mcpu="skylake-avx512") == 300.0  # none of its own: the family's best
    assert class_gflops(library, mod=None) == 300.0


def test_a_task_proposes_nothing_once_the_runs_search_budget_is_spent_or_kept_for_others() -> None:
    """A short run: the defaults, the library's schedules and the tasks searched first took the budget. Every other
    task's search used to propose a batch (a whole evolutionary search each) that could not be measured."""
    import tvm
    import tvm.s_tir.meta_schedule as ms
    from tvm import te

    from edgetune.costmodel.surrogate import RandomForestModel
    from edgetune.search.strategy import AdaptiveSearch, SearchReport, SearchSettings
    from edgetune.builder.intrinsics import load_tensor_intrinsics

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    load_tensor_intrinsics(target)  # only this target's: TuneContext would import every one of TVM's (a minute)
    a, b = te.placeholder((32, 32), name="A"), te.placeholder((32, 32), name="B")
    k = te.reduce_axis((0, 32), name="k")
    mod = tvm.IRModule({"main": te.create_prim_func([a, b, te.compute((32, 32), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k))])})
    limits = TaskLimits()
    limits.set_search_budget(2)
    assert limits.reserve("classifier", 2) == 2  # searched first: the 2 trials left are its own
    report = SearchReport()
    model = RandomForestModel(num_warmup_samples=2, seed=0)
    strategy = AdaptiveSearch(SearchSettings(population_size=16, init_min_unmeasured=8, sampler="none", seed=0),
                              surrogate=model, limits=limits, report=report)
    ctx = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply", search_strategy=strategy,
                         task_name="other", num_threads=2)
    strategy = ctx.search_strategy  # the context holds a clone: drive it through MetaSchedule's own hooks
    strategy.pre_tuning(8, 1, ctx.space_generator.generate_design_space(mod), ms.database.MemoryDatabase(), model)
    assert strategy.generate_measure_candidates() is None
    assert report.to_dict()["tasks"][0]["proposed"] == 0  # no search was made for it
    strategy.post_tuning()
    limits.release("classifier")  # its search ended: the 2 trials are anyone's again
    strategy.pre_tuning(8, 1, ctx.space_generator.generate_design_space(mod), ms.database.MemoryDatabase(), model)
    assert len(strategy.generate_measure_candidates()) == 1 and limits.search_left == 1
