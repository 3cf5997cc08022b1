"""Every closed set of names a user can choose from, in one place.

The profile schema validates against these, the CLI offers them as
``choices=``, and the components that branch on a name import the same
tuple, so a new option is added once and cannot be accepted by one layer
and refused by the next.
"""

from __future__ import annotations

#: ``tvm.runtime.Device`` kinds a board can expose over RPC.
RPC_DEVICES = ("cpu", "cuda", "opencl", "vulkan", "metal")
#: How a candidate's library is linked: "direct" with the compiler's own ld (no driver), or through the "driver".
CANDIDATE_LINKS = ("direct", "driver")
#: Cost models ``edgetune tune`` knows how to build.
COST_MODELS = ("xgb", "rf", "random", "meta")
#: How candidates are timed on the board.
EVALUATORS = ("adaptive", "fixed")
#: What ends the adaptive evaluator's timing: the paper's throughput CV, the mean's confidence interval, or by kernel length.
STOP_RULES = ("auto", "cv", "ci")
#: Candidate sampling before measurement (K-means: measure one per cluster).
SAMPLERS = ("kmeans", "none")
#: How a history record was timed: ``flushed`` (CPU caches flushed before every run, as inside a model) or
#: ``warm`` (back-to-back runs; GPUs, and every record of a history older than schema version 5).
TIMINGS = ("flushed", "warm")
#: Per-task early stop rules.
EARLY_STOPS = ("adaptive", "fixed", "none")
#: How the share of random candidates in a batch is chosen.
EXPLORATIONS = ("contextual", "fixed")
#: Where a task's first batch takes candidates from besides the search: "similar" workloads' best traces.
TRANSFERS = ("similar", "off")
#: The layout 2-D convolutions are tuned and built in (see edgetune.tasks.graph); "auto": the one measured
#: best for the target's CPU family (edgetune.tasks.graph.CONV_LAYOUT_BY_FAMILY), as imported where none was.
#: "NCHWc" blocks by the target's float32 vector lanes; "NCHW{4,8,16}c" fix the block (a model whose channel
#: counts do not divide by the lanes, such as MobileNetV2's 24, blocks every layer at 8).
CONV_LAYOUTS = ("auto", "as-is", "NHWC", "NCHWc", "NCHW4c", "NCHW8c", "NCHW16c")
#: ``tuning.winograd``: 3x3 stride-1 convolutions in the Winograd form where the schedule library measured it faster
#: (auto), everywhere it applies (on) or nowhere (off); a profile's ``true``/``false`` read as on/off
WINOGRAD_MODES = ("auto", "on", "off")
#: How much of ONNX Runtime's graph preparation runs before task extraction (see edgetune.tasks.graph):
#: "full" folds batch norms and constants, "none" tunes the graph as the frontend imported it.
GRAPH_OPTIMIZATIONS = ("full", "none")
#: tuning.baseline: the runtime the delivered model is timed against after a tune (edgetune/board/baseline.py)
BASELINES = ("none", "onnxruntime", "litert")
#: MetaSchedule search strategies.
SEARCH_STRATEGIES = ("evolutionary", "replay-trace", "replay-func")
#: Task schedulers: MetaSchedule's own two, then edgetune's (search.scheduler).
STOCK_SCHEDULERS = ("gradient", "round-robin")
TASK_SCHEDULERS = (*STOCK_SCHEDULERS, "ucb", "epsilon-greedy", "softmax")
#: Which history records train the cost model before tuning (costmodel.warmstart).
WARM_START_SCOPES = ("same", "auto", "similar")
#: ``--warm-start``: off, or one of the scopes.
WARM_START_MODES = ("off", *WARM_START_SCOPES)
#: ``db dedupe --by``: which result of a repeated configuration survives.
DEDUPE_METHODS = ("date", "average")


def baseline_runtimes(text: str) -> tuple[str, ...]:
    """``--baseline onnxruntime,litert`` of provision and deploy: the runtimes named, or () for ``none``.

    An argparse ``type``: a bad name is argparse's one-line usage error, with the closest name.
    """
    import argparse
    import difflib

    names = [name.strip() for name in text.split(",")]
    if names == ["none"]:
        return ()
    runtimes = tuple(b for b in BASELINES if b != "none")
    for name in names:
        if name not in runtimes:
            close = difflib.get_close_matches(name, runtimes, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise argparse.ArgumentTypeError(
                f"must be 'none' or a comma-separated list of {', '.join(runtimes)}, got {text!r} instead{hint}"
            )
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"must name each runtime once, got {text!r} instead")
    return tuple(names)
