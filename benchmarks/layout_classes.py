"""Convolution layouts per class at equal trials (issue 26, point 2): NCHW against blocked NCHWc.

The measurements are those of two runs of the product's ``run_tune`` on the
same model in two layouts (``tuning.conv_layout = "as-is"`` and ``"NCHWc"``):
``benchmarks/vs_onnxruntime.py --conv-layout as-is NCHWc`` (each run its own
history, timed one after the other on a quiet machine) or two ``edgetune
schedules build`` runs into one history (``--db``; each task given the same
budget per workload and no early stop). For every task of each
run (``summary.json``: name, weight, workload hash) this reads the task's
records from the history in the order they were measured and takes the best
latency among its first ``k`` trials, for each ``k`` of ``--points`` (``0``:
all of them, the run's budget: a product run's early stop and sampling leave
tasks with unequal counts under the same per-task budget). Tasks
are put in a class by the convolution they compute, read from the workload's
weight and output buffers: ``3x3``, ``3x3 strided``, ``1x1``, ``1x1 strided``,
``depthwise``, ``depthwise strided``, ``other conv``; the rest are
``layout transform`` (which only the blocked model has, and pays for) and
``other``. A class's time is the sum over its tasks of weight x best latency.

Usage::

  python benchmarks/layout_classes.py --db sqlite:///.schedules-build/history.db \\
      --pair resnet18 .schedules-build/runs/resnet18-224 .schedules-build/runs-nchwc/resnet18-224 \\
      --pair mobilenetv2 .schedules-build/runs/mobilenetv2-224 .schedules-build/runs-nchwc/mobilenetv2-224 \\
      --points 8 16 32 64 [--write-results]

Reads a history; times nothing itself, so it may run beside other work.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

MARK = "layout_classes"
CLASSES = ("3x3", "3x3 strided", "1x1", "1x1 strided", "depthwise", "depthwise strided", "other conv",
           "layout transform", "other")
# layout transforms and small memory-bound kernels have few distinct schedules: the history keeps each once, so
# they end with fewer records than the budget; they do not make a point unequal
_FEW_SCHEDULES = {"layout transform", "other"}


def conv_class(mod: Any) -> str:
    """The class of the convolution a workload computes, from its data, weight and output buffers' shapes.

    Data is the first parameter, the output the last; the weight is the first 4-D (OIHW) or 6-D (blocked)
    parameter between them. Depthwise: one input channel per group (``OIHW`` ``(C, 1, kh, kw)``, blocked
    ``OIHW1i{b}o`` ``(C/b, 1, kh, kw, 1, b)``); strided: the output's rows are at most half the input's.
    """
    import tvm

    func = next(f for _gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc))
    text = func.script()
    if "conv2d" not in text:
        return "layout transform" if "layout_transform" in text else "other"
    shapes = [[int(d) for d in p.shape] for p in func.params]
    data, out = shapes[0], shapes[-1]
    weights = [shape for shape in shapes[1:-1] if len(shape) in (4, 6) and shape[0] > 1]
    if not weights or len(data) not in (4, 5):
        return "other conv"
    weight = weights[0]
    depthwise = weight[1] == 1 and (len(weight) == 4 or weight[4] == 1) and "depthwise" in text or (
        len(weight) == 4 and weight[1] == 1 and data[1] == weight[0] > 1)
    if depthwise:
        name = "depthwise"
    elif weight[2:4] == [3, 3]:
        name = "3x3"
    elif weight[2:4] == [1, 1]:
        name = "1x1"
    else:
        return "other conv"
    return f"{name} strided" if out[2] * 2 <= data[2] else name


def class_times(db: str | None, run_dir: Path, points: list[int]) -> tuple[dict[str, dict[int, float]], dict[str, int], dict[str, int]]:
    """class -> {k: sum of weight x best latency (ms) among a task's first k trials}; tasks per class; and the
    fewest trials any task of the class has (a point above it would compare unequal trials)."""
    from edgetune.history import open_history

    summary = json.loads((run_dir / "summary.json").read_text())
    db = db or summary["history"]  # without --db: the history the run measured into
    history = open_history(db, read_only=True)
    try:
        by_hash: dict[str, list[float]] = defaultdict(list)
        mods: dict[str, Any] = {}
        for record in history.bulk.record_summaries():
            shash = record.workload.shash
            by_hash[shash].append(record.mean_run_sec if record.mean_run_sec is not None else float("inf"))
            mods.setdefault(shash, record.workload.workload.mod)
    finally:
        history.close()
    times: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    counts: dict[str, int] = defaultdict(int)
    fewest: dict[str, int] = {}
    for task in summary["tasks"]:
        seconds = by_hash.get(task["workload_hash"])
        if not seconds:
            raise SystemExit(f"{run_dir}: task {task['name']} has no records in {db}")
        klass = conv_class(mods[task["workload_hash"]])
        counts[klass] += 1
        fewest[klass] = min(fewest.get(klass, len(seconds)), len(seconds))
        for k in points:
            best = min(seconds[:k] if k else seconds)  # k = 0: every trial the run gave the task
            times[klass][k] += task["weight"] * best * 1e3
    return times, counts, fewest


def report(pairs: list[tuple[str, Path, Path]], db: str | None, points: list[int]) -> str:
    lines = [
        "| model | class | tasks NCHW / NCHWc | " + " | ".join(_point(k) + ": NCHW / NCHWc (ms), ratio" for k in points) + " |",
        "|---|---|---|" + "---|" * len(points),
    ]
    totals: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
    for model, nchw_dir, nchwc_dir in pairs:
        nchw, nchw_counts, nchw_fewest = class_times(db, nchw_dir, points)
        nchwc, nchwc_counts, nchwc_fewest = class_times(db, nchwc_dir, points)
        equal = {k: k == 0 or all(n >= k for c, n in [*nchw_fewest.items(), *nchwc_fewest.items()] if c not in _FEW_SCHEDULES)
                 for k in points}
        model_sum = {k: [0.0, 0.0] for k in points}
        for klass in CLASSES:
            if not nchw_counts.get(klass) and not nchwc_counts.get(klass):
                continue
            cells = []
            few = 10**9 if klass in _FEW_SCHEDULES else min(nchw_fewest.get(klass, 10**9), nchwc_fewest.get(klass, 10**9))
            for k in points:
                a, b = nchw.get(klass, {}).get(k, 0.0), nchwc.get(klass, {}).get(k, 0.0)
                model_sum[k][0] += a
                model_sum[k][1] += b
                if few >= k or k == 0:
                    totals[klass][k][0] += a
                    totals[klass][k][1] += b
                ratio = f"{b / a:.2f}" if a and b else "-"
                cells.append(f"{a:.3f} / {b:.3f}, {ratio}" if few >= k or k == 0 else f"(a task has {few} trials)")
            lines.append(f"| {model} | {klass} | {nchw_counts.get(klass, 0)} / {nchwc_counts.get(klass, 0)} | "
                         + " | ".join(cells) + " |")
        lines.append(f"| {model} | **all kernels** | {sum(nchw_counts.values())} / {sum(nchwc_counts.values())} | "
                     + " | ".join(f"{a:.3f} / {b:.3f}, **{b / a:.2f}**" if equal[k] else "(unequal trials)"
                                  for k, (a, b) in model_sum.items()) + " |")
    lines += ["", "Over all models, per class (NCHWc / NCHW kernel time at equal trials):", "",
              "| class | " + " | ".join(_point(k) for k in points) + " |", "|---|" + "---|" * len(points)]
    for klass in CLASSES:
        if klass in totals:
            lines.append(f"| {klass} | " + " | ".join(
                f"{totals[klass][k][1] / totals[klass][k][0]:.2f}" if totals[klass][k][0] and totals[klass][k][1]
                else "-" for k in points) + " |")
    return "\n".join(lines)


def _point(k: int) -> str:
    return f"{k} trials" if k else "all trials of the run"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--db", help="the history both runs measured into (default: each run's own, from its summary)")
    parser.add_argument("--pair", nargs=3, action="append", required=True, metavar=("MODEL", "NCHW_RUN", "NCHWC_RUN"),
                        help="a model's run directories (summary.json) as imported and blocked")
    parser.add_argument("--points", nargs="+", type=int, default=[8, 16, 32, 64],
                        help="trials per task to compare at; 0: every trial each run gave the task (a product run's "
                        "adaptive early stop and sampling give tasks unequal counts under the same budget)")
    parser.add_argument("--write-results", action="store_true", help="replace this section of benchmarks/RESULTS.md")
    parser.add_argument("--section", default=MARK, help=f"the RESULTS.md section to replace (default {MARK})")
    args = parser.parse_args(argv)
    pairs = [(m, Path(a), Path(b)) for m, a, b in args.pair]
    table = report(pairs, args.db, args.points)
    command = "python benchmarks/layout_classes.py" + (f" --db {args.db}" if args.db else "") + "".join(
        f" --pair {m} {a} {b}" for m, a, b in args.pair) + " --points " + " ".join(map(str, args.points))
    if args.section != MARK:
        command += f" --section {args.section}"
    target = json.loads((pairs[0][1] / "summary.json").read_text()).get("target", "?")
    text = (
        "## Convolution layouts per class at equal trials: NCHW vs NCHWc (issue 26)\n\n"
        f"Reproduce: `{command}` (reads the histories of the two runs; times nothing). Target: `{target}`.\n\n"
        "Each task's best latency among its first k measured trials (all: every trial its run gave it), as the "
        "product's `run_tune` measured them in each layout at the same budget per task, weighted by how often the "
        "model runs the task and summed per class of convolution. A point where some task of a class has fewer "
        "than k trials in either run (the adaptive early stop and K-means sampling measure fewer than the budget) "
        "is not compared. Ratio = NCHWc / NCHW (below 1: blocked faster). Layout transforms are kernels only the "
        "blocked model has; they count against it.\n\n" + table + "\n"
    )
    print(text)
    if args.write_results:
        sys.path.insert(0, str(Path(__file__).parent))
        from _results import write_section

        write_section(text, args.section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
