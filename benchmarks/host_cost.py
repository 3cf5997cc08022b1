"""Host time a tune spends reading the schedule library and the history before and around its first batches.

Times, for one model's tasks, the three reads of ``edgetune tune`` that grow with the library and the history
(nothing is measured on a board):
  transfer   each compute task the library lacks: the library's nearest shape, adapted (its first trial)
  seeds      the transfer seeds of each task's first batch, from the library and the history
  warm       the cost model's warm start (``--warm-start same``)

    python benchmarks/host_cost.py --model demo:mobilenetv2@160 --db sqlite:///PATH/history.db

Run it from two checkouts (PYTHONPATH=...) to compare commits; alone on the machine.
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="demo:mobilenetv2@160")
    parser.add_argument("--db", required=True, help="the history to read (read-only)")
    parser.add_argument("--profile", default="host")
    args = parser.parse_args()

    import tvm.s_tir.meta_schedule as ms

    from edgetune.costmodel.warmstart import warm_start
    from edgetune.history import open_history
    from edgetune.profile import load_profile
    from edgetune.schedules.use import choose_library, transferred_library_candidates
    from edgetune.tuning import TuneOptions, TuningPipeline
    from edgetune.tuning.session import make_seed_provider

    profile = load_profile(args.profile)
    pipeline = TuningPipeline(TuneOptions(profile=profile, model=args.model, out_dir="/tmp/edgetune-host-cost"))
    target = profile.tvm_target()
    tasks = pipeline.extract_tasks(target, pipeline.check_inputs()[1])
    library = choose_library("auto", target)
    contexts = [ms.TuneContext(mod=t.dispatched[0], target=target, space_generator="post-order-apply",
                               search_strategy="evolutionary", task_name=t.task_name) for t in tasks]
    print(f"{args.model}: {len(tasks)} tasks; load average {os.getloadavg()[0]:.2f}")

    started = time.monotonic()
    found = sum(len(transferred_library_candidates(c, library.library, target, 1)) for c in contexts)
    print(f"transfer {time.monotonic() - started:.2f} s ({found} tasks)")

    history = open_history(args.db, read_only=True, timing="flushed")
    try:
        seeds = make_seed_provider(history, target, library)
        started = time.monotonic()
        found = sum(len(seeds(c, 2)) for c in contexts)
        print(f"seeds {time.monotonic() - started:.2f} s ({found} seeds)")
        started = time.monotonic()
        report = warm_start(pipeline.make_cost_model(), [t.dispatched[0] for t in tasks], history, target,
                            board_id="host-cost", scope="same")
        print(f"warm {time.monotonic() - started:.2f} s ({report.same_task + report.other_board} records)")
    finally:
        history.close()
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
