"""edgetune's tuned model against ONNX Runtime on the same CPU (issue 13).

For each model (built in code with random weights, no downloads) and seed, the
model is tuned through ``edgetune.tuning.run_tune``, exactly what
``edgetune tune --profile host --model demo:NAME`` runs (embedded loopback
board, the profile's default components), at an increasing budget of measured
trials per task: the run at 16 per task resumes the history of the run at 8,
and so on, so the points are one tuning curve. After each point the delivered
``model.so`` is loaded in this process beside an ONNX Runtime session of the
same ONNX file and timed by the product's own comparison
(:func:`edgetune.board.baseline.compare_with_baseline`, what ``edgetune tune
--baseline onnxruntime`` runs): same threads, interleaved rounds (each round:
TVM's ``time_evaluator`` over ``--number`` calls, then ONNX Runtime over as
many calls, its threads not spinning between runs), medians over rounds.
Outputs are compared on one fixed input: max |tvm - ort| / max |ort| must stay
below 1e-4.

Usage::

  python benchmarks/vs_onnxruntime.py                                   # 4 models, 8 16 32 per task, seed 0
  python benchmarks/vs_onnxruntime.py --models transformer --per-task 8 --seeds 0 1
  python benchmarks/vs_onnxruntime.py --write-results                   # also update RESULTS.md
  python benchmarks/vs_onnxruntime.py --models mobilenetv1 --res 96 --graph-optimization none full   # graphs side by side
  python benchmarks/vs_onnxruntime.py --models resnet18 --per-task 1 2 --schedules off auto   # from the shipped library
  python benchmarks/vs_onnxruntime.py --models resnet18 --per-task 8 16 --schedules off --conv-layout as-is NCHWc   # layouts
  python benchmarks/vs_onnxruntime.py --models resnet18 --per-task 8 16 --schedules off --cache-flush off on   # cold-cache timing
  python benchmarks/vs_onnxruntime.py --models mobilenetv2 edgetune-out/tflite/mobilenet_v2-224.tflite --per-task 8   # + LiteRT
  python benchmarks/vs_onnxruntime.py --models transformer-bert@128 --per-task 1 --prepack-weights off on   # weight prepacking
  python benchmarks/vs_onnxruntime.py --from-raw rows.json --retime --raw retimed.json   # time the kept models again, quietly

A ``.tflite`` model (written by ``benchmarks/make_tflite.py``, Keras applications
with random weights) is tuned from that file and timed against LiteRT with its
XNNPACK kernels (``edgetune tune --baseline litert``) instead of ONNX Runtime.

``demo:mobilenetv1`` keeps BatchNormalization and Clip nodes as Keras/TensorFlow
exporters emit them; the other demos have batch norms folded in code. With
several ``--graph-optimization`` levels each model is tuned once per level (its
own run directory, same seed and trials per task) and the rows sit side by
side. Each row also gives the sum of the tuned kernels (weight x best latency,
as measured while tuning) beside the whole model on the board, and the load
average (1 min) before and after the row.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

MARK = "vs_onnxruntime"
MODELS = ("resnet18", "mobilenetv2", "squeezenet", "transformer", "mobilenetv1")


def time_interleaved(
    artifact: Path, model_bytes: bytes, inputs: dict[str, Any], threads: int, rounds: int, number: int,
    runtime: str = "onnxruntime",
) -> dict[str, Any]:
    """Median latency (ms) of the tuned module and of the baseline runtime: the product's comparison (``--baseline``).

    ONNX Runtime for an ONNX model (keys ``ort_*``), LiteRT for a ``.tflite`` one (keys ``litert_*``).
    """
    from edgetune.board.baseline import compare_with_baseline

    result = compare_with_baseline(runtime, artifact, model_bytes, inputs, threads, rounds=rounds, number=number)
    if result.error is not None:
        raise SystemExit(f"vs_onnxruntime: {result.error}")
    key = "ort" if runtime == "onnxruntime" else runtime
    return {
        "baseline": runtime, "baseline_ms": result.baseline_ms, "tvm_ms": result.tuned_ms, f"{key}_ms": result.baseline_ms,
        "tvm_spread_ms": list(result.tuned_spread_ms), f"{key}_spread_ms": list(result.baseline_spread_ms),
        "max_rel_diff": result.max_rel_diff, "protocol": result.protocol,
    }


def run_model(
    name: str, seed: int, per_task: list[int], args: argparse.Namespace, graph: str | None = None, schedules: str | None = None,
    layout: str | None = None, flush: str | None = None, prepack: str | None = None,
) -> list[dict[str, Any]]:
    from edgetune.profile import load_profile
    from edgetune.tasks import load_model
    from edgetune.tuning import TuneOptions, TuningPipeline, run_tune

    tflite = name.endswith(".tflite")  # a model file as a TensorFlow user has it: LiteRT is its baseline
    sized = "@" in name or name == "transformer"  # an explicit size; --res is the CNNs' resolution
    spec = name if tflite else f"demo:{name}" + (f"@{args.res}" if args.res and not sized else "")
    profile = load_profile(args.profile)
    overrides = {"seed": seed, **({"cost_model": args.cost_model} if args.cost_model else {})}
    if graph is not None:
        overrides["graph_optimization"] = graph
    if schedules is not None:
        overrides["schedules"] = schedules
    if layout is not None:
        overrides["conv_layout"] = layout
    if prepack is not None:
        overrides["prepack_weights"] = prepack == "on"
    profile = profile.with_overrides(tuning=overrides)
    if flush is not None:
        profile = profile.with_overrides(measure={"enable_cpu_cache_flush": flush == "on"})
    model = load_model(spec)
    inputs = {s.name: model.random_inputs(seed=0)[s.name] for s in model.inputs}
    out_dir = args.out / (
        f"{Path(name).stem if tflite else name}-seed{seed}" + (f"-graph-{graph}" if graph else "") + (f"-schedules-{_label(schedules)}" if schedules else "")
        + (f"-layout-{layout}" if layout else "") + (f"-flush-{flush}" if flush else "")
        + (f"-prepack-{prepack}" if prepack else "")
    )
    # a run directory left by an earlier invocation holds its history: the first row would resume it, its trials
    # served from there (device time 0), and time that run's schedules, not this code's
    earlier = (out_dir / "history.db").exists()
    if earlier:
        print(f"warning: {out_dir} holds an earlier run's history: its rows resume it (pass a fresh --out to tune "
              "from scratch)", file=sys.stderr, flush=True)
    options = TuneOptions(profile=profile, model=spec, out_dir=out_dir)
    pipeline = TuningPipeline(options)
    n_tasks = len(pipeline.extract_tasks(profile.tvm_target(), pipeline.check_inputs()[1]))
    rows = []
    for per in per_task:
        options = TuneOptions(profile=profile, model=spec, out_dir=out_dir, trials=per * n_tasks)
        load_before = os.getloadavg()[0]
        started = time.monotonic()
        summary = run_tune(options)
        wall = time.monotonic() - started
        runtime = "litert" if tflite else "onnxruntime"
        # the next point resumes into the same run directory and replaces model.so: keep this point's, for --retime
        kept = out_dir / f"model-{per}-per-task{Path(str(summary.artifact)).suffix}"
        shutil.copy2(summary.artifact, kept)
        timing = time_interleaved(summary.artifact, model.bytes_for("tflite" if tflite else "onnx"), inputs,
                                  profile.device.num_threads, args.rounds, args.number, runtime)
        rows.append({
            "model": spec, "graph": profile.tuning.graph_optimization, "conv_layout": profile.tuning.conv_layout, "schedules": _label(profile.tuning.schedules),
            "cache_flush": profile.measure.enable_cpu_cache_flush, "prepack_weights": profile.tuning.prepack_weights,
            "library_used": bool(summary.schedules and summary.schedules.get("used")),
            "library_tasks": sum(t.library_latency_us is not None for t in summary.tasks),
            "seed": seed, "per_task": per, "tasks": n_tasks,
            "kernels_ms": summary.end_to_end.tuned_kernels_ms,
            "load_before": load_before, "load_after": os.getloadavg()[0],
            "trials": summary.trials.in_history_before + summary.trials.this_run,
            "tune_wall_s": wall, "device_s": summary.seconds.device,
            "untuned_ms": summary.end_to_end.untuned_ms, "tuned_ms_on_board": summary.end_to_end.tuned_ms,
            "kept_default": [t.name for t in summary.tasks if getattr(t, "kept_default", False)],
            "resumed_earlier_run": earlier, "artifact_kept": str(kept),
            **timing, "ratio": timing["tvm_ms"] / timing["baseline_ms"],
        })
        print(json.dumps(rows[-1]), flush=True)
    return rows


def retime(rows: list[dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Time each row's kept model again against its baseline, now: rows tuned beside other work are re-timed quietly."""
    from edgetune.profile import load_profile
    from edgetune.tasks import load_model

    threads = load_profile(args.profile).device.num_threads
    os.environ.setdefault("TVM_NUM_THREADS", str(threads))  # as the run that tuned them: set before TVM's pool starts
    retimed = []
    for row in rows:
        artifact = Path(row.get("artifact_kept") or "")
        if not artifact.is_file():
            raise SystemExit(f"vs_onnxruntime: --retime needs each row's kept model, got {str(artifact)!r} instead "
                             "(rows written before artifact_kept cannot be re-timed)")
        tflite = row["model"].endswith(".tflite")
        model = load_model(row["model"])
        inputs = {s.name: model.random_inputs(seed=0)[s.name] for s in model.inputs}
        load_before = os.getloadavg()[0]
        timing = time_interleaved(artifact, model.bytes_for("tflite" if tflite else "onnx"), inputs, threads,
                                  args.rounds, args.number, row.get("baseline", "onnxruntime"))
        retimed.append({**row, **timing, "ratio": timing["tvm_ms"] / timing["baseline_ms"], "retimed": True,
                        "load_before": load_before, "load_after": os.getloadavg()[0],
                        "tuned_load": [row.get("load_before"), row.get("load_after")]})
        print(json.dumps(retimed[-1]), flush=True)
    return retimed


def _label(schedules: str | None) -> str:
    """``off``, ``auto`` or a library file's name: how a row's tasks started."""
    return Path(schedules).name.removesuffix(".schedules.gz") if schedules and schedules not in ("off", "auto") else str(schedules)


def _cpu_name() -> str:
    from edgetune.profile.host import host_cpu

    return host_cpu().name


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def report(rows: list[dict[str, Any]], args: argparse.Namespace, load: tuple[float, float]) -> str:
    per_task = sorted({r["per_task"] for r in rows})
    seeds = sorted({r["seed"] for r in rows})
    graphs = sorted({r.get("graph", "-") for r in rows})
    variants = sorted({(_graph_cell(r), r.get("schedules", "-")) for r in rows})
    layouts = {r.get("conv_layout", "as-is") for r in rows}
    flushes = {r.get("cache_flush", False) for r in rows}
    prepacks = {r.get("prepack_weights", False) for r in rows}
    lines = [
        "## edgetune vs LiteRT on the same CPU: .tflite models as a TensorFlow user has them (issue 29)"
        if any(r.get("baseline") == "litert" for r in rows)
        else "## edgetune vs ONNX Runtime: convolution layouts side by side at equal trials (issue 26)"
        if len(layouts) > 1
        else "## edgetune vs ONNX Runtime: weights as imported and prepacked in each schedule's layout, side by side"
        if len(prepacks) > 1
        else "## edgetune vs ONNX Runtime: candidates timed with warm and with flushed caches, side by side (issue 26)"
        if len(flushes) > 1
        else "## edgetune vs ONNX Runtime: tunes that start from the schedule library (issue 27)"
        if any(v[1] not in ("-", "None") for v in variants)
        else "## edgetune vs ONNX Runtime on the same CPU (issue 13)" if len(graphs) < 2
        else "## edgetune vs ONNX Runtime: the graph as imported against the prepared graph (issue 26)",
        "",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Machine: {os.cpu_count()} CPUs ({_cpu_name()}), "
        f"{platform.platform()}, Python {platform.python_version()}; "
        + (f"load average {load[0]:.2f} at start, {load[1]:.2f} at end." if not math.isnan(load[0]) else "load average not recorded."),
        "",
        f"Reproduce: `python benchmarks/vs_onnxruntime.py --models {' '.join(args.models)} --per-task "
        f"{' '.join(map(str, args.per_task))} --seeds {' '.join(map(str, args.seeds))}"
        + (f" --res {args.res}" if args.res else "") + (f" --cost-model {args.cost_model}" if args.cost_model else "")
        + (f" --graph-optimization {' '.join(g for g in args.graph_optimization if g)}" if any(args.graph_optimization) else "")
        + (f" --schedules {' '.join(s for s in args.schedules if s)}" if any(args.schedules) else "")
        + (f" --conv-layout {' '.join(x for x in args.conv_layout if x)}" if any(args.conv_layout) else "")
        + (f" --cache-flush {' '.join(x for x in args.cache_flush if x)}" if any(args.cache_flush) else "")
        + (f" --prepack-weights {' '.join(x for x in args.prepack_weights if x)}" if any(args.prepack_weights) else "")
        + " --write-results`",
        "",
        f"Each model tuned by `run_tune` with profile `{args.profile}` (what `edgetune tune` runs), budgets resumed "
        "one from the other; then the delivered `model.so` and ONNX Runtime timed in one process, same threads, "
        f"{args.rounds} interleaved rounds of {args.number} calls; latency = median of rounds. Ratio = edgetune / ONNX Runtime "
        "(below 1: edgetune faster); a `.tflite` model is timed against LiteRT (XNNPACK) instead, the same way. "
        "Max rel diff = max |tvm - baseline| / max |baseline| on one input.",
        "",
        "On the board = the tuned model as `edgetune tune` measured it on its (loopback) board, alone, without ONNX "
        "Runtime in the process. Graph = `tuning.graph_optimization` (and `tuning.conv_layout` when not as-is; "
        "`flush` when candidates were timed with `measure.enable_cpu_cache_flush`; `prepack` with `tuning.prepack_weights`). Kernels = sum over tasks of weight x best latency as measured while tuning; "
        "whole / kernels = the tuned model on the board over that sum (above 1: time outside the kernels). Load = 1-minute "
        "load average before / after the row.",
        "",
        "Library = `tuning.schedules` (off, auto or a library file) and how many tasks started from the library's schedule.",
        "",
        "| model | graph | library | tasks | trials/task | trials | tuning wall (s) | untuned (ms) | edgetune (ms) | on the board (ms) "
        "| kernels (ms) | whole / kernels | baseline (ms) | ratio | max rel diff | tasks kept default | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        kernels = r.get("kernels_ms")
        overhead = f"{r['tuned_ms_on_board'] / kernels:.2f}" if kernels else "-"
        load = f"{r['load_before']:.2f} / {r['load_after']:.2f}" if "load_before" in r else "-"
        lines.append(
            f"| {r['model']} (seed {r['seed']}) | {_graph_cell(r)} | {_library_cell(r)} | {r['tasks']} | {r['per_task']} | {r['trials']} | "
            f"{r['tune_wall_s']:.0f} | {r['untuned_ms']:.3f} | {r['tvm_ms']:.3f} | {r['tuned_ms_on_board']:.3f} | "
            f"{kernels or 0:.3f} | {overhead} | "
            f"{_baseline_cell(r)} | {r['ratio']:.2f} | {r['max_rel_diff']:.1e} | {len(r['kept_default'])} | {load} |"
        )
    lines += [
        "", "Geometric mean of the ratio over models (median over seeds, [min-max]):", "",
        "| graph | library | trials/task | geomean ratio | worst model |", "|---|---|---|---|---|",
    ]
    for graph, library in variants:
        for per in per_task:
            by_seed = []
            worst = None
            for seed in seeds:
                ratios = {
                    r["model"]: r["ratio"] for r in rows
                    if r["per_task"] == per and r["seed"] == seed and _graph_cell(r) == graph
                    and r.get("schedules", "-") == library
                }
                if ratios:
                    by_seed.append(geomean(list(ratios.values())))
                    name, value = max(ratios.items(), key=lambda kv: kv[1])
                    worst = (name, value) if worst is None or value > worst[1] else worst
            if by_seed:
                lines.append(
                    f"| {graph} | {library} | {per} | {statistics.median(by_seed):.2f} [{min(by_seed):.2f}-{max(by_seed):.2f}] | "
                    f"{worst[0]} {worst[1]:.2f} |"
                )
    return "\n".join(lines)


def _baseline_cell(row: dict[str, Any]) -> str:
    """``12.345`` for ONNX Runtime (the table's default), ``LiteRT 12.345`` for a .tflite model's row."""
    if row.get("baseline", "onnxruntime") == "onnxruntime":
        return f"{row['ort_ms']:.3f}"
    return f"LiteRT {row['baseline_ms']:.3f}"


def _model_name(value: str) -> str:
    """A demo's name, or a .tflite file (tuned from the file, timed against LiteRT)."""
    from edgetune.tasks.demo import demo_model_names

    name, _, size = value.partition("@")
    if (name in demo_model_names() and (not size or size.isdigit())) or value.endswith(".tflite"):
        return value
    raise argparse.ArgumentTypeError(
        f"must be a demo ({', '.join(demo_model_names())}; NAME@SIZE for a resolution or a transformer's tokens) "
        f"or a .tflite file, got {value!r} instead")


def _graph_cell(row: dict[str, Any]) -> str:
    layout = row.get("conv_layout", "as-is")
    return (
        row.get("graph", "-") + ("" if layout == "as-is" else f", {layout}") + (", flush" if row.get("cache_flush") else "")
        + (", prepack" if row.get("prepack_weights") else "")
    )


def _library_cell(row: dict[str, Any]) -> str:
    if "schedules" not in row:
        return "-"
    return f"{row['schedules']} ({row['library_tasks']} tasks)" if row.get("library_used") else row["schedules"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), type=_model_name,
                        help="demos (default: resnet18 mobilenetv2 squeezenet transformer mobilenetv1; any edgetune demo, e.g. the zoo's; NAME@SIZE: a CNN's resolution or a transformer's tokens), or .tflite files (benchmarks/make_tflite.py) timed against LiteRT instead of ONNX Runtime")
    parser.add_argument("--per-task", type=int, nargs="+", default=[8, 16, 32], help="measured trials per task, ascending")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--res", type=int, default=None, help="input resolution of the CNNs (default: each demo's 224)")
    parser.add_argument("--profile", default="host")
    parser.add_argument("--cost-model", default=None, help="override the profile's tuning.cost_model")
    parser.add_argument(
        "--graph-optimization", nargs="+", default=[None], choices=["full", "none"],
        help="tune each model once per level (tuning.graph_optimization), side by side; default: the profile's",
    )
    parser.add_argument(
        "--schedules", nargs="+", default=[None],
        help="tune each model once per tuning.schedules setting (off, auto or a library file), side by side; "
        "default: the profile's",
    )
    parser.add_argument(
        "--conv-layout", nargs="+", default=[None], choices=["auto", "as-is", "NHWC", "NCHWc", "NCHW4c", "NCHW8c", "NCHW16c"],
        help="tune each model once per tuning.conv_layout, side by side; default: the profile's",
    )
    parser.add_argument(
        "--cache-flush", nargs="+", default=[None], choices=["on", "off"],
        help="tune each model once per measure.enable_cpu_cache_flush (candidates timed with flushed caches, as inside "
        "a model, or warm), side by side; default: the profile's",
    )
    parser.add_argument(
        "--prepack-weights", nargs="+", default=[None], choices=["on", "off"],
        help="tune each model once per tuning.prepack_weights (weights stored in the layout each schedule reads, "
        "or as imported), side by side; default: the profile's",
    )
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("edgetune-out/vs-onnxruntime"))
    parser.add_argument("--raw", type=Path, help="also write every row as JSON here")
    parser.add_argument("--from-raw", type=Path, help="report the rows of an earlier --raw file instead of running")
    parser.add_argument("--retime", action="store_true",
                        help="with --from-raw: time each row's kept model against its baseline again, now (tune beside "
                        "other work, time on a quiet machine); with --raw, the re-timed rows are written there")
    parser.add_argument("--write-results", action="store_true")
    parser.add_argument("--section", help="the RESULTS.md section to replace (default: named after the options compared)")
    args = parser.parse_args()
    if args.retime and not args.from_raw:
        parser.error("--retime needs --from-raw FILE: the rows whose kept models it times again")
    if args.per_task != sorted(args.per_task):
        parser.error(f"--per-task must be ascending, got {args.per_task} instead")
    if args.from_raw:
        rows = json.loads(args.from_raw.read_text())
        if args.retime:
            rows = retime(rows, args)
            if args.raw:
                args.raw.write_text(json.dumps(rows, indent=1))
        # the load of the run that measured them (rows written before per-row loads have none)
        loads = (rows[0].get("load_before", math.nan), rows[-1].get("load_after", math.nan)) if rows else (math.nan, math.nan)
        # the reproducing command is the one that measured the rows, not this one's defaults
        args.models = list(dict.fromkeys(row["model"].removeprefix("demo:") for row in rows)) or args.models
        args.per_task = sorted({int(row["per_task"]) for row in rows}) or args.per_task
        args.seeds = sorted({int(row["seed"]) for row in rows}) or args.seeds
        prepacks = list(dict.fromkeys(row["prepack_weights"] for row in rows if "prepack_weights" in row))
        if len(prepacks) > 1:
            args.prepack_weights = ["on" if p else "off" for p in prepacks]
        schedules = list(dict.fromkeys(str(row.get("schedules")) for row in rows if row.get("schedules") not in (None, "")))
        if schedules:  # a library file is reported by its name: the path it had is not in the rows
            args.schedules = [s if s in ("off", "auto") else f"{s}.schedules.gz" for s in schedules]
        text = report(rows, args, loads)
    else:
        from edgetune.profile import load_profile

        os.environ.setdefault("TVM_NUM_THREADS", str(load_profile(args.profile).device.num_threads))
        load_start = os.getloadavg()[0]
        rows = []
        for seed in args.seeds:
            for name in args.models:
                for graph in args.graph_optimization:
                    for schedules in args.schedules:
                        for layout in args.conv_layout:
                            for flush in args.cache_flush:
                                for prepack in args.prepack_weights:
                                    rows += run_model(name, seed, args.per_task, args, graph, schedules, layout, flush, prepack)
                if args.raw:
                    args.raw.write_text(json.dumps(rows, indent=1))
        text = report(rows, args, (load_start, os.getloadavg()[0]))
    print(text)
    if args.write_results:
        sys.path.insert(0, str(Path(__file__).parent))
        from _results import write_section

        write_section(
            text, args.section or MARK + ("_graph" if len(args.graph_optimization) > 1 else "") + ("_library" if any(args.schedules) else "")
            + ("_layout" if len(args.conv_layout) > 1 else "") + ("_flush" if len(args.cache_flush) > 1 else "")
            + ("_prepack" if len(args.prepack_weights) > 1 else "")
            + ("_litert" if any(str(name).endswith(".tflite") for name in args.models) else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
