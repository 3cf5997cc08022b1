"""Issue 52's population: real exports tuned through the product at 2, 8 and 32 trials per task, against ONNX Runtime.

Every model of :data:`real_exports.POPULATION` (torchvision definitions with random weights, written by the
exporter the entry names: ``torch.onnx.export``'s TorchScript-based or dynamo exporter, or ``torch.export``),
each tuned by :func:`real_models.run_row`: ``run_tune`` from an empty history with the shipped schedule library
(the product's defaults, ``--profile host``), then the delivered ``model.so`` timed against ONNX Runtime with the
product's one protocol (each runtime alone in alternating blocks after a pause, ONNX Runtime with its default
options). A model that fails to export, import, tune or time is a row with ``error``, not the end of the run.

Per row: the ratio (tuned / ONNX Runtime), how many tasks started from an exact library schedule, an adapted one
or the untuned default, and whether the library's zoo holds the architecture at that resolution (``in_zoo``, from
the population's own list). Rows go to ``--rows`` as they finish and a rerun skips those it has: resumable. The
report gives, per trials per task and for the zoo's models and the others apart: the median, geometric mean and
worst ratio and the failures; ``--plot`` draws the distribution.

Usage::

  python benchmarks/population.py --per-task 2 8 32 --rows benchmarks/population_rows.json --plot benchmarks/results/population.png
  python benchmarks/population.py --report-only --rows benchmarks/population_rows.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import real_exports  # noqa: E402
import real_models  # noqa: E402


def label(arch: str, res: int, exporter: str) -> str:
    return f"{arch}-{res}-{exporter}"


def run_population(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(args.rows.read_text()) if args.rows.exists() else []
    done = {(r["entry"], r["per_task"], r["seed"], r.get("variant", "default")) for r in rows}
    entries = [e for e in real_exports.POPULATION if not args.only or any(o in label(*e[:3]) for o in args.only)]
    for per_task in args.per_task:  # the cheapest budget over the whole population first: a reading early
        for seed in args.seeds:
            for arch, res, exporter, in_zoo in entries:
                entry = label(arch, res, exporter)
                variants = [v for v in args.variant if (entry, per_task, seed, v) not in done]
                if not variants:
                    continue
                base = {"entry": entry, "arch": arch, "res": res, "exporter": exporter, "in_zoo": in_zoo}
                try:  # once for every variant: they tune the same file
                    path, failure = real_exports.export(arch, res, exporter, args.exports, seed=0), None
                except (Exception, SystemExit) as error:  # noqa: BLE001 - an exporter's failure is a row
                    text = str(error).strip()
                    path, failure = None, f"export: {text.splitlines()[0] if text else type(error).__name__}"
                for variant in variants:  # side by side, model by model, in the order given
                    row = (real_models.run_row(path, per_task, seed, variant, args) if path is not None else
                           {"model": entry, "per_task": per_task, "seed": seed, "variant": variant, "error": failure})
                    rows.append({**base, **row})
                    args.rows.parent.mkdir(parents=True, exist_ok=True)
                    args.rows.write_text(json.dumps(rows, indent=1))
                    print(json.dumps({k: v for k, v in rows[-1].items() if k not in ("protocol", "graph")}), flush=True)
    return rows


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def per_model_ratios(rows: list[dict[str, Any]], per_task: int, in_zoo: bool | None) -> tuple[dict[str, float], list[str]]:
    """Median ratio over seeds per model at ``per_task`` (zoo models, the others, or all), and the failed models."""
    group = [r for r in rows if r["per_task"] == per_task and (in_zoo is None or r["in_zoo"] == in_zoo)]
    ratios: dict[str, list[float]] = {}
    failed: list[str] = []
    for row in group:
        if "ratio" in row:
            ratios.setdefault(row["entry"], []).append(row["ratio"])
        elif row["entry"] not in failed:
            failed.append(row["entry"])
    return {entry: statistics.median(values) for entry, values in ratios.items()}, [f for f in failed if f not in ratios]


def report(rows: list[dict[str, Any]]) -> str:
    variants = list(dict.fromkeys(r.get("variant", "default") for r in rows))
    if len(variants) > 1:  # side by side: one report per variant
        return "\n\n".join(f"Variant `{variant}`:\n\n" + report([r for r in rows if r.get("variant", "default") == variant])
                           for variant in variants)
    lines = ["| trials per task | models | tuned | failed | median | geomean | worst (model) |", "|---|---|---|---|---|---|---|"]
    for per_task in sorted({r["per_task"] for r in rows}):
        for name, in_zoo in (("in the zoo", True), ("outside the zoo", False), ("all", None)):
            ratios, failed = per_model_ratios(rows, per_task, in_zoo)
            if not ratios and not failed:
                continue
            if ratios:
                worst = max(ratios, key=ratios.get)
                stats = (f"{statistics.median(ratios.values()):.2f} | {geomean(list(ratios.values())):.2f} | "
                         f"{ratios[worst]:.2f} ({worst})")
            else:
                stats = "- | - | -"
            lines.append(f"| {per_task} | {name} | {len(ratios)} | {len(failed)} | {stats} |")
    lines += ["", "| model | in zoo | trials per task | seeds | tuned / ONNX Runtime | exact/adapted/default | error |",
              "|---|---|---|---|---|---|---|"]
    for entry in dict.fromkeys(r["entry"] for r in rows):
        for per_task in sorted({r["per_task"] for r in rows if r["entry"] == entry}):
            group = [r for r in rows if r["entry"] == entry and r["per_task"] == per_task]
            ok = [r for r in group if "ratio" in r]
            ratio = f"{statistics.median(r['ratio'] for r in ok):.2f}" if ok else "-"
            starts = f"{ok[0]['start_exact']}/{ok[0]['start_adapted']}/{ok[0]['start_default']}" if ok else "-"
            error = next((r["error"] for r in group if "error" in r), "")
            lines.append(f"| {entry} | {'yes' if group[0]['in_zoo'] else 'no'} | {per_task} | {len(ok)} | {ratio} | "
                         f"{starts} | {error} |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    budgets = sorted({r["per_task"] for r in rows})
    fig, ax = plt.subplots(figsize=(7, 4))
    for offset, (name, in_zoo, marker) in enumerate((("in the zoo", True, "o"), ("outside the zoo", False, "s"))):
        for index, per_task in enumerate(budgets):
            ratios, _failed = per_model_ratios(rows, per_task, in_zoo)
            xs = [index + (offset - 0.5) * 0.3] * len(ratios)
            ax.scatter(xs, list(ratios.values()), marker=marker, alpha=0.7,
                       label=name if index == 0 else None, color=f"C{offset}")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.axhline(0.9, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(budgets)), [f"{b} per task" for b in budgets])
    ax.set_yscale("log")
    ax.set_ylabel("tuned / ONNX Runtime (log)")
    ax.set_title("Real exports through edgetune tune (issue 52's population)")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-task", type=int, nargs="+", default=[2, 8, 32])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--only", nargs="+", default=[], help="entries whose label contains one of these")
    parser.add_argument("--profile", default="host")
    parser.add_argument("--baseline", default=None)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--pause", type=float, default=5.0, help="seconds between a tune and its timing")
    parser.add_argument("--exports", type=Path, default=Path("edgetune-out/exports"))
    parser.add_argument("--out", type=Path, default=Path("edgetune-out/population"))
    parser.add_argument("--rows", type=Path, default=Path("benchmarks/population_rows.json"))
    parser.add_argument("--variant", action="append", default=None,
                        help="profile overrides compared side by side, model by model (real_models.py's syntax: "
                             "default or SECTION.KEY=VALUE[,...]; repeat it; default: default only). The summary "
                             "reads the last one given")
    parser.add_argument("--plot", type=Path, default=None, help="a PNG of the ratios' distribution")
    parser.add_argument("--report-only", action="store_true", help="the report of the rows there, nothing run")
    args = parser.parse_args()
    args.variant = args.variant or ["default"]
    for variant in args.variant:  # a malformed one is one line before any tune, not an exit mid-run
        real_models.parse_variant(variant)
    if args.report_only:
        if not args.rows.exists():
            parser.error(f"--rows must name an existing rows file, got {args.rows} instead")
        rows = json.loads(args.rows.read_text())
    else:
        rows = run_population(args)
    print(report(rows))
    if args.plot is not None and rows:  # the last variant's (side by side, the one the summary reads)
        plot([r for r in rows if r.get("variant", "default") == rows[-1].get("variant", "default")], args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
