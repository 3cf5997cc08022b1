"""Exported models through the product, each variant of a setting side by side: tuned latency against ONNX Runtime.

For each model file (``benchmarks/real_exports.py`` writes torchvision's
through PyTorch's exporters), trials per task, seed and variant (profile
overrides such as ``tuning.lagging_trials=0``), ``run_tune`` tunes it from
an empty history with the shipped library (the pipeline of ``edgetune
tune``; only the variant's settings differ) and the delivered ``model.so`` is
timed against ONNX Runtime (LiteRT for a ``.tflite``, ``--baseline``) with the product's one protocol
(:func:`edgetune.board.baseline.compare_with_baseline`: each runtime alone in
alternating blocks after a pause, ONNX Runtime with its default options).

Per row: the ratio (tuned / ONNX Runtime), how many tasks started from an
exact library schedule, an adapted one or the untuned default, the tasks
searched first, import or tune failures (a row with ``error``), and the load
average before and after. Rows go to ``--rows`` (JSON) as they finish, and a
rerun skips the rows it has: resumable. ``--retime`` times the rows' delivered
``model.so`` again with the same protocol, each row in a fresh process
(``python -m edgetune.board.baseline``), and replaces their timing columns
(the first timing is kept under ``first_timing``).

Usage::

  python benchmarks/real_exports.py squeezenet1_1 --out edgetune-out/exports
  python benchmarks/real_models.py edgetune-out/exports/squeezenet1_1-224-onnx-torchscript.onnx \\
      --per-task 2 --seeds 0 1 2 --variant default --variant tuning.lagging_trials=0
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any


def parse_variant(text: str) -> dict[str, dict[str, Any]]:
    """``default`` or ``section.key=value[,section.key=value]`` -> profile overrides by section."""
    overrides: dict[str, dict[str, Any]] = {}
    if text == "default":
        return overrides
    for item in text.split(","):
        key, _, raw = item.partition("=")
        section, _, name = key.partition(".")
        if not name or not raw:
            raise SystemExit(f"real_models: a variant must be 'default' or SECTION.KEY=VALUE[,...], got {text!r} instead")
        value: Any = raw
        for convert in (int, float):
            try:
                value = convert(raw)
                break
            except ValueError:
                continue
        if raw in ("true", "false"):
            value = raw == "true"
        overrides.setdefault(section, {})[name] = value
    return overrides


def run_row(path: Path, per_task: int, seed: int, variant: str, args: argparse.Namespace) -> dict[str, Any]:
    from edgetune.board.baseline import RUNTIME_FORMATS, compare_with_baseline
    from edgetune.profile import load_profile
    from edgetune.tasks import load_model
    from edgetune.tuning import TuneOptions, TuningPipeline, run_tune

    row: dict[str, Any] = {"model": path.name, "per_task": per_task, "seed": seed, "variant": variant}
    profile = load_profile(args.profile)
    overrides = parse_variant(variant)
    profile = profile.with_overrides(**{**overrides, "tuning": {"seed": seed, **overrides.get("tuning", {})}})
    label = variant.replace("=", "_").replace(",", "+").replace("/", "_")
    out_dir = args.out / f"{path.stem}-{per_task}pt-seed{seed}-{label}"
    try:
        model = load_model(str(path))
        pipeline = TuningPipeline(TuneOptions(profile=profile, model=str(path), out_dir=out_dir))
        n_tasks = len(pipeline.extract_tasks(profile.tvm_target(), pipeline.check_inputs()[1]))
    except Exception as error:  # noqa: BLE001 - an import failure is a row of the benchmark, not its end
        return {**row, "error": f"import: {str(error).strip().splitlines()[0]}"}
    row["load_before"] = os.getloadavg()[0]
    started = time.monotonic()
    try:
        summary = run_tune(TuneOptions(profile=profile, model=str(path), out_dir=out_dir, trials=per_task * n_tasks))
    except Exception as error:  # noqa: BLE001
        traceback.print_exc()
        return {**row, "error": f"tune: {str(error).strip().splitlines()[0]}"}
    row["tune_wall_s"] = time.monotonic() - started
    time.sleep(args.pause)
    runtime = args.baseline or ("litert" if model.format == "tflite" else "onnxruntime")
    row["baseline"] = runtime
    timing = compare_with_baseline(runtime, summary.artifact, model.bytes_for(RUNTIME_FORMATS[runtime]),
                                   model.random_inputs(seed=0), profile.device.num_threads, rounds=args.rounds,
                                   given_as=model.format)
    row["load_after"] = os.getloadavg()[0]
    if timing.error is not None:
        return {**row, "error": f"baseline: {timing.error}"}
    tasks = summary.tasks
    row.update({
        "tasks": n_tasks, "trials": summary.trials.this_run,
        "device_s": summary.seconds.device, "tuned_ms": timing.tuned_ms, "ort_ms": timing.baseline_ms,
        "ratio": timing.tuned_ms / timing.baseline_ms, "max_rel_diff": timing.max_rel_diff,
        "tuned_spread_ms": list(timing.tuned_spread_ms), "ort_spread_ms": list(timing.baseline_spread_ms),
        "kernels_ms": summary.kernels_ms(),
        "start_exact": sum(t.library_latency_us is not None for t in tasks),
        "start_adapted": sum(t.transferred_latency_us is not None for t in tasks),
        "start_default": sum(t.library_latency_us is None and t.transferred_latency_us is None for t in tasks),
        "searched_first": [t["name"] for t in (summary.schedules or {}).get("searched_first", [])],
        "graph": summary.graph_lines()[:1],
        "protocol": timing.protocol,
    })
    return row


def retime_row(row: dict[str, Any], path: Path, args: argparse.Namespace) -> dict[str, Any]:
    """``row``'s delivered model timed again against its baseline, in a process of its own; the tune's columns kept."""
    import subprocess
    import tempfile

    import numpy as np

    from edgetune.profile import load_profile
    from edgetune.tasks import load_model

    label = row["variant"].replace("=", "_").replace(",", "+").replace("/", "_")
    artifact = args.out / f"{path.stem}-{row['per_task']}pt-seed{row['seed']}-{label}" / "model.so"
    if "ratio" not in row or not artifact.exists():
        return row
    model = load_model(str(path))
    threads = load_profile(args.profile).device.num_threads
    with tempfile.TemporaryDirectory(prefix="retime-") as tmp:
        feeds = []
        for index, (name, value) in enumerate(model.random_inputs(seed=0).items()):
            np.save(Path(tmp) / f"{index}.npy", np.asarray(value))
            feeds += ["--input", f"{name}={Path(tmp) / f'{index}.npy'}"]
        load_before = os.getloadavg()[0]
        time.sleep(args.pause)
        done = subprocess.run(
            [sys.executable, "-m", "edgetune.board.baseline", row["baseline"], "--artifact", str(artifact),
             "--model", str(path), *feeds, "--threads", str(threads), "--rounds", str(args.rounds),
             "--given-as", model.format],
            check=True, capture_output=True, text=True,
        )
    timing = json.loads(done.stdout.strip().splitlines()[-1])
    first = {key: row[key] for key in ("tuned_ms", "ort_ms", "ratio", "tuned_spread_ms", "ort_spread_ms",
                                       "load_before", "load_after", "protocol") if key in row}
    return {**row, "first_timing": row.get("first_timing", first), "tuned_ms": timing["tuned_ms"],
            "ort_ms": timing["baseline_ms"], "ratio": timing["tuned_ms"] / timing["baseline_ms"],
            "max_rel_diff": timing["max_rel_diff"], "tuned_spread_ms": timing["tuned_spread_ms"],
            "ort_spread_ms": timing["baseline_spread_ms"], "protocol": timing["protocol"],
            "retimed": time.strftime("%Y-%m-%d %H:%M"), "retime_load": [load_before, os.getloadavg()[0]]}


def report(rows: list[dict[str, Any]]) -> str:
    """Per model, trials per task and variant: the median ratio over seeds, its spread, and the failures."""
    lines = ["| model | per task | variant | seeds | tuned / baseline (median) | min-max | exact/adapted/default | searched first |",
             "|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["model"], r["per_task"], r["variant"]) for r in rows})
    for model, per_task, variant in keys:
        group = [r for r in rows if (r["model"], r["per_task"], r["variant"]) == (model, per_task, variant)]
        ok = [r for r in group if "ratio" in r]
        failed = [r["error"] for r in group if "error" in r]
        if not ok:
            lines.append(f"| {model} | {per_task} | {variant} | {len(group)} | failed: {failed[0]} | | | |")
            continue
        ratios = [r["ratio"] for r in ok]
        first = ok[0]
        lines.append(
            f"| {model} | {per_task} | {variant} | {len(ok)} | {statistics.median(ratios):.2f} | "
            f"{min(ratios):.2f}-{max(ratios):.2f} | {first['start_exact']}/{first['start_adapted']}/{first['start_default']} | "
            f"{max(len(r['searched_first']) for r in ok)} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path, help="model files (.onnx, .pt2, .tflite)")
    parser.add_argument("--baseline", choices=["onnxruntime", "litert"], default=None,
                        help="the runtime compared against (default: LiteRT for .tflite, ONNX Runtime otherwise)")
    parser.add_argument("--per-task", type=int, nargs="+", default=[2])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--variant", action="append", default=[], help="'default' or SECTION.KEY=VALUE[,...]; repeatable")
    parser.add_argument("--profile", default="host")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--pause", type=float, default=5.0, help="seconds between a tune and its timing")
    parser.add_argument("--out", type=Path, default=Path("edgetune-out/real_models"))
    parser.add_argument("--rows", type=Path, default=None, help="JSON rows file (default: OUT/rows.json)")
    parser.add_argument("--retime", action="store_true",
                        help="tune nothing: time the rows' delivered models again, each in a fresh process")
    args = parser.parse_args()
    variants = args.variant or ["default"]
    for variant in variants:
        parse_variant(variant)  # a bad one fails now, not after hours
    rows_path = args.rows or args.out / "rows.json"
    rows: list[dict[str, Any]] = json.loads(rows_path.read_text()) if rows_path.exists() else []
    done = {(r["model"], r["per_task"], r["seed"], r["variant"]) for r in rows}
    if args.retime:
        by_name = {path.name: path for path in args.models}
        for index, row in enumerate(rows):
            if row["model"] in by_name and row["per_task"] in args.per_task and row["seed"] in args.seeds \
                    and row["variant"] in variants:
                rows[index] = retime_row(row, by_name[row["model"]], args)
                rows_path.write_text(json.dumps(rows, indent=1))
                print(json.dumps({k: rows[index].get(k) for k in ("model", "tuned_ms", "ort_ms", "ratio", "retime_load")}),
                      flush=True)
        print(report(rows))
        return 0
    for seed in args.seeds:
        for path in args.models:
            for per_task in args.per_task:
                for variant in variants:  # side by side: each seed's variants one after the other
                    if (path.name, per_task, seed, variant) in done:
                        continue
                    row = run_row(path, per_task, seed, variant, args)
                    rows.append(row)
                    rows_path.parent.mkdir(parents=True, exist_ok=True)
                    rows_path.write_text(json.dumps(rows, indent=1))
                    print(json.dumps({k: v for k, v in row.items() if k not in ("protocol", "graph")}), flush=True)
    print(report(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
