"""Generate benchmarks/RESULTS.md: a summary of the headline figures, then an index of benchmarks/results/.

Every figure in the summary is computed from the measured rows (``benchmarks/*_rows.json``, written by
``vs_onnxruntime.py --raw`` and kept beside this file); the date, host and reproducing command are read from the
section of ``benchmarks/results/`` that reported those rows. Nothing in the summary is typed by hand: a headline
whose rows do not exist yet says "not measured yet".

    python benchmarks/results_summary.py           # rewrite benchmarks/RESULTS.md
    python benchmarks/results_summary.py --check   # exit 1 when RESULTS.md is not what this generates now

Run it after adding a rows file or a section (``tests/test_docs.py`` fails while RESULTS.md is stale). Which rows
file stands for which headline, and which are newer, is the table ``HEADLINES`` below: a new run of a headline
adds its rows file at the end of that headline's sources.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
TOPICS = HERE / "results"
REGENERATE = "python benchmarks/results_summary.py"
START, END = "<!-- generated:start -->", "<!-- generated:end -->"


@dataclass(frozen=True)
class Source:
    """One benchmark run: its rows file and the results section (marker name) that reported it."""

    rows: str  # file name in benchmarks/
    mark: str  # the section's marker in benchmarks/results/*.md


@dataclass(frozen=True)
class Headline:
    name: str
    goal: str
    sources: tuple[Source, ...]  # oldest first: the summary reports the newest one holding rows at `per_task`
    per_task: int | None = None  # trials per task the figure is read at (None: every row)
    reproduce: str = ""  # only for a headline with no rows yet; otherwise read from the section
    #: what the figure is: "ratio" (edgetune / baseline), "untuned" (the delivered model over its untuned build,
    #: the worst row), "host" (host seconds per measured trial)
    measure: str = "ratio"
    only: str = ""  # a regular expression the rows' model must match (one rows file, two headlines)
    in_zoo: bool | None = None  # rows whose ``in_zoo`` is this (population rows; rows without the key always count)


def _lib(name: str) -> Source:
    return Source(f"vs_onnxruntime_{name}_rows.json", f"vs_onnxruntime_{name}")


_ZOO_GOAL = "geometric mean <= 0.9x ONNX Runtime's latency, no model above 1.1x (issue 27)"
_ZOO_1 = tuple(_lib(n) for n in (
    "library", "library_flush", "library_rebuilt", "library_shipped_seed1", "library_shipped_seeds23",
    "library_more_models", "library_deepened", "library_64", "library_bert32", "library_resnet50",
    "library_resnet18_128", "library_zoo128", "library_zoo128b", "efficientnet224", "concat_in_place"))
_ZOO_2 = tuple(_lib(n) for n in ("library", "library_flush", "library_rebuilt"))
_SCRATCH = tuple(_lib(n) for n in ("graph", "graph_bn_scratch", "ceiling", "retime", "ceiling_mobilenetv2"))
_OUTSIDE_GOAL = "at most 32 trials per task: geometric mean <= 1.0x ONNX Runtime, none above 1.3x (issue 27)"
_OUTSIDE = (_lib("not_in_zoo"), _lib("library_transfer_1pt"))
_POPULATION = Source("population_rows.json", "population")
#: the same population after the decisions of other epilogues transfer and ONNX shape arithmetic is folded
_POPULATION_ANCHOR = Source("population_anchor_rows.json", "population_anchor")
#: the 12 outside the zoo at 2 and 8 trials per task, side by side at one commit
_POPULATION_OUTSIDE = Source("population_outside_rows.json", "population_outside")
_POPULATION_GOAL = "at most 8 trials per task: geometric mean <= 0.9x ONNX Runtime, none above 1.25x (issue 52)"

HEADLINES: tuple[Headline, ...] = (
    Headline("vs ONNX Runtime, tuned from scratch, 32 trials per task",
             "at most 1.3x ONNX Runtime's latency (issue 26)", _SCRATCH, 32),
    Headline("vs LiteRT, a .tflite model, 32 trials per task", "edgetune / LiteRT (issue 29; below 1: edgetune faster)",
             (Source("vs_litert_rows.json", "vs_onnxruntime_litert"),), 32),
    Headline("int8 models (full-integer .tflite) vs LiteRT's int8 kernels, 8 trials per task",
             "geometric mean <= 1.0x LiteRT int8, none above 1.2x (issue 54)",
             (Source("int8_vs_litert_rows.json", "int8_vs_litert"),
              Source("int8_vs_litert_fused_rows.json", "int8_fused_vs_litert"),
              Source("int8_vs_litert_warmup_rows.json", "int8_warmup_vs_litert"),
              Source("int8_library_rows.json", "int8_library_vs_litert"),
              Source("int8_zen5_rows.json", "int8_zen5_vs_litert"),
              Source("vm_compiled_rows.json", "vm_compiled"),
              Source("int8_zen4_rows.json", "int8_zen4_vs_litert"),
              Source("int8_zen4_all_rows.json", "int8_zen4_all")), 8, only="int8"),
    Headline("int8 QDQ ONNX models (ONNX Runtime's quantize_static) vs ONNX Runtime, 8 trials per task",
             "geometric mean <= 1.0x ONNX Runtime int8, none above 1.2x (issue 54)",
             (Source("qdq_vs_onnxruntime_rows.json", "qdq_vs_onnxruntime"),
              Source("int8_zen4_all_rows.json", "int8_zen4_all")), 8, only="qdq"),
    Headline("int8 models of issue 54's goal together (the KWS CNN, Keras MobileNet and MobileNetV2 int8, QDQ ResNet-18 "
             "with int8 and with uint8 activations), each against its reference runtime, 8 trials per task",
             "geometric mean <= 1.0x LiteRT int8 / ONNX Runtime int8, none above 1.2x (issue 54)",
             (Source("int8_zen4_all_rows.json", "int8_zen4_all"),), 8, only="int8|qdq"),
    Headline("Keras float models (.tflite) vs LiteRT, 8 trials per task",
             "geometric mean <= 0.9x LiteRT, none above 1.2x (issue 53)",
             (Source("int8_vs_litert_rows.json", "int8_vs_litert"), Source("keras_vs_litert_rows.json", "keras_vs_litert"),
              Source("keras_zen4_rows.json", "keras_zen4_vs_litert")),
             8, only=r"^(?!.*int8)"),
    Headline("Keras float models (.tflite) at a second input size (160x160) vs LiteRT, 2 trials per task",
             "each family imports, tunes and matches LiteRT within 1e-4; at most 1.0x LiteRT at 2 trials per task in "
             "the zoo (issue 53)", (Source("keras160_vs_litert_rows.json", "keras160_vs_litert"),), 2),
    Headline("the zoo, schedule library, 2 trials per task", _ZOO_GOAL, _ZOO_2, 2),
    Headline("the zoo, schedule library, 1 trial per task", _ZOO_GOAL, _ZOO_1, 1),
    Headline("outside the zoo, 1 trial per task", _OUTSIDE_GOAL, _OUTSIDE, 1),
    Headline("outside the zoo, 8 trials per task", _OUTSIDE_GOAL, _OUTSIDE, 8),
    Headline("outside the zoo, 16 trials per task", _OUTSIDE_GOAL, _OUTSIDE, 16),
    Headline("real exports in the zoo (torchvision through PyTorch's exporters), schedule library, 2 trials per task",
             "geometric mean <= 0.9x ONNX Runtime's latency, none above 1.1x (issue 52)",
             (Source("real_exports_library_rows.json", "real_exports_library"), _POPULATION, _POPULATION_ANCHOR,
              Source("population_xeon_rows.json", "real_exports_xeon_library"),
              Source("zen4_exports_padded_rows.json", "real_exports_zen4_padded"),
              Source("zen4_exports_winograd_rows.json", "real_exports_zen4_winograd")), 2, in_zoo=True),
    Headline("real exports in the zoo on an AVX2 CPU (x86-64-avx2 library), schedule library, 2 trials per task",
             "geometric mean <= 0.9x ONNX Runtime's latency, none above 1.1x (issue 52)",
             (Source("population_zen3_rows.json", "real_exports_zen3_avx2_library"),
              Source("zen4guest_exports_rows.json", "real_exports_zen4_guest")), 2, in_zoo=True),
    Headline("real exports outside the zoo (issue 52's population), schedule library, 2 trials per task",
             _POPULATION_GOAL, (_POPULATION, _POPULATION_ANCHOR, _POPULATION_OUTSIDE), 2, in_zoo=False,
             reproduce="python benchmarks/population.py --per-task 2 --rows benchmarks/population_anchor_rows.json"),
    Headline("real exports outside the zoo (issue 52's population), schedule library, 8 trials per task",
             _POPULATION_GOAL, (_POPULATION, _POPULATION_ANCHOR, _POPULATION_OUTSIDE), 8, in_zoo=False,
             reproduce="python benchmarks/population.py --per-task 8 --rows benchmarks/population_anchor_rows.json"),
    Headline("real exports outside the zoo (issue 52's population) on an AVX2 CPU (x86-64-avx2 library), 8 trials per task",
             _POPULATION_GOAL, (Source("population_zen3_outside_rows.json", "population_outside_zen3"),), 8, in_zoo=False),
    Headline("never worse: the delivered model against its untuned build, schedule library, 1 trial per task",
             "at most 1.0x the untuned build of the same model on every row (the untuned floor)", _ZOO_1, 1,
             measure="untuned"),
    Headline("host time per measured trial, 8 trials per task and more",
             "at most 0.2 host seconds per measured trial at 32 trials per task (issue 55)",
             (Source("host_time_rows.json", "host_time_feature_cache"),
              Source("host_time_overlap_rows.json", "host_time_overlap"),
              Source("host_time_effort_rows.json", "host_time_effort"),
              Source("host_time_quiet_rows.json", "host_time_quiet"),
              Source("host_time_zen4guest_rows.json", "host_time_zen4_guest"),
              Source("host_time_proposals_rows.json", "host_time_proposals"),
              Source("host_time_min_return_rows.json", "host_time_min_return"),
              Source("host_time_link_rows.json", "host_time_link"),
              Source("host_time_link_shipped_rows.json", "host_time_link")), measure="host"),
    Headline("host time: reading the library and the history",
             "host seconds a tune spends before and around its first batches (`benchmarks/host_cost.py`)",
             (Source("host_cost_rows.json", "host_cost_history_reads"),),
             reproduce="python benchmarks/host_cost.py --model demo:mobilenetv2@160 --db sqlite:///PATH/history.db"),
)


# --------------------------------------------------------------------------- reading

#: the row key each measure needs
MEASURED = {"ratio": "ratio", "untuned": "untuned_ms", "host": "host_s_per_trial"}


def load_rows(source: Source, per_task: int | None, measure: str = "ratio", only: str = "",
              in_zoo: bool | None = None) -> list[dict]:
    """The rows of one run at ``per_task``, of its last configuration (side-by-side runs list the old one first)."""
    path = HERE / source.rows
    if not path.is_file():
        return []
    rows = [r for r in json.loads(path.read_text()) if r.get(MEASURED[measure])]
    if only:
        rows = [r for r in rows if re.search(only, str(r.get("model")))]
    if in_zoo is not None:
        rows = [r for r in rows if r.get("in_zoo", in_zoo) == in_zoo]
    if measure == "host":  # the product's defaults, not the variants compared against them
        rows = [r for r in rows if str(r.get("feature_cache", "on")) != "off" and str(r.get("overlap", "on")) != "off"
                and str(r.get("effort", "returns")) != "fixed" and int(r.get("proposal_batches", 4)) == 4
                and float(r.get("min_return", 0.02)) == 0.02 and str(r.get("candidate_link", "driver")) == "driver"
                and int(r.get("start_iterations", 4)) == 4]
    if per_task is not None:
        rows = [r for r in rows if r.get("per_task") == per_task]
    if not rows:
        return []
    last = _config(rows[-1])
    return [r for r in rows if _config(r) == last]


def _config(row: dict) -> tuple:
    # real_models.py's rows carry the graph report's first line (a list) there, not the setting: not a configuration
    return tuple(str(row.get(k)) if k != "graph" or isinstance(row.get(k), str) else ""
                 for k in ("variant", "schedules", "graph", "conv_layout", "cache_flush", "prepack_weights",
                           "feature_cache", "overlap", "board"))


def topic_sections() -> dict[str, tuple[Path, str]]:
    """Every marked section of benchmarks/results/: marker -> (file, text)."""
    found = {}
    for path in sorted(TOPICS.glob("*.md")):
        for match in re.finditer(r"<!-- (\w+):start -->\n(.*?)\n<!-- \1:end -->", path.read_text(), re.S):
            found[match.group(1)] = (path, match.group(2))
    return found


def section_facts(text: str, rows: list[dict]) -> tuple[str, str, str]:
    """Date, host and reproducing command as the section states them (the command from the rows when it does not)."""
    date = re.search(r"^Date: (\d{4}-\d{2}-\d{2})", text, re.M) or re.search(r"\d{4}-\d{2}-\d{2}(?:/\d{2})?", text)
    date_text = date.group(1) if date and date.groups() else (date.group(0) if date else "not stated")
    host = re.search(r"Machine: ([^,.;]+)", text)
    host_text = host.group(1).strip() if host else "not stated in the section"
    command = re.search(r"(?:Reproduce|Command).*?`((?:python|benchmarks/|edgetune )[^`]*)`", text, re.S)
    if command:
        command_text = " ".join(command.group(1).split())
    else:
        command_text = _command_from_rows(rows)
    return date_text, host_text, command_text


def _command_from_rows(rows: list[dict]) -> str:
    models = " ".join(dict.fromkeys(str(r["model"]).removeprefix("demo:") for r in rows))
    per_task = " ".join(str(p) for p in sorted({r["per_task"] for r in rows}))
    seeds = " ".join(str(s) for s in sorted({r["seed"] for r in rows}))
    schedules = rows[-1].get("schedules", "auto")
    return f"python benchmarks/vs_onnxruntime.py --models {models} --per-task {per_task} --seeds {seeds} " \
           f"--schedules {schedules}"


# --------------------------------------------------------------------------- figures

def figure(rows: list[dict]) -> str:
    """Geometric mean over models of each model's median ratio over seeds, and the worst model."""
    latest: dict[tuple[str, int], float] = {}
    for row in rows:  # a model timed again in the same run: its last row
        latest[(row["model"], row["seed"])] = row["ratio"]
    per_model: dict[str, list[float]] = {}
    for (model, _), ratio in latest.items():
        per_model.setdefault(model, []).append(ratio)
    medians = {model: statistics.median(ratios) for model, ratios in per_model.items()}
    geomean = math.exp(sum(math.log(r) for r in medians.values()) / len(medians))
    worst = max(medians, key=medians.__getitem__)
    if len(medians) == 1:
        return f"**{geomean:.2f}x** ({worst})"
    return f"**{geomean:.2f}x** geomean of {len(medians)} models; worst {medians[worst]:.2f}x ({worst})"


def untuned_figure(rows: list[dict]) -> str:
    """The worst row's delivered latency over its untuned build's (the floor: never above 1)."""
    ratios = {f"{r['model']} seed {r['seed']}": (r.get("tuned_ms_on_board") or r["tvm_ms"]) / r["untuned_ms"]
              for r in rows if r.get("tuned_ms_on_board") or r.get("tvm_ms")}
    worst = max(ratios, key=ratios.__getitem__)
    return f"**{ratios[worst]:.2f}x** at worst over {len(ratios)} rows ({worst})"


def host_figure(rows: list[dict]) -> str:
    """Per model and trials per task: the median host seconds per measured trial over seeds; the best and worst."""
    per: dict[tuple[str, int], list[float]] = {}
    for row in rows:
        per.setdefault((str(row["model"]).removeprefix("demo:"), row["per_task"]), []).append(row["host_s_per_trial"])
    medians = {f"{model} at {per_task}/task": statistics.median(v) for (model, per_task), v in per.items()}
    low, high = min(medians, key=medians.__getitem__), max(medians, key=medians.__getitem__)
    if low == high:
        return f"**{medians[low]:.2f} s** ({low})"
    return f"**{medians[low]:.2f}-{medians[high]:.2f} s** ({low} to {high})"


FIGURES = {"ratio": figure, "untuned": untuned_figure, "host": host_figure}


def headline_row(headline: Headline, sections: dict[str, tuple[Path, str]]) -> str:
    for source in reversed(headline.sources):
        rows = load_rows(source, headline.per_task, headline.measure, headline.only, headline.in_zoo)
        if rows:
            break
    else:
        where = sections.get(headline.sources[-1].mark)
        link = f" ([earlier, by hand]({where[0].relative_to(HERE).as_posix()}))" if where else ""
        rows_file = headline.sources[-1].rows
        missing = (f"no rows at {headline.per_task} trials per task in `benchmarks/{rows_file}`"
                   if (HERE / rows_file).is_file() and headline.per_task is not None else f"no `benchmarks/{rows_file}`")
        return (f"| {headline.name} | {headline.goal} | not measured yet: {missing}"
                f"{link} | - | - | - | `{headline.reproduce}` |")
    path, text = sections.get(source.mark, (None, ""))
    date, host, command = section_facts(text, rows)
    seeds = ", ".join(str(s) for s in sorted({r["seed"] for r in rows}))
    where = f"[{source.mark}]({path.relative_to(HERE).as_posix()})" if path else f"`{source.mark}`"
    value = f"{FIGURES[headline.measure](rows)}; rows `benchmarks/{source.rows}`, section {where}"
    return f"| {headline.name} | {headline.goal} | {value} | {date} | {host} | {seeds} | `{command}` |"


def summary() -> str:
    sections = topic_sections()
    lines = [
        "## Summary",
        "",
        f"Generated by `{REGENERATE}` from the measured rows; do not edit by hand. A ratio is edgetune's latency over "
        "the baseline's on the same CPU (below 1: edgetune faster); per model the median over seeds, then the "
        "geometric mean over models. Each figure is the newest run of its headline.",
        "",
        "| headline | goal | latest measured | date | host | seeds | reproduce |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [headline_row(h, sections) for h in HEADLINES]
    return "\n".join(lines)


# --------------------------------------------------------------------------- index

def index() -> str:
    lines = ["## Topics", "",
             "One file per topic in `benchmarks/results/`: its newest run first, older runs under History. Each "
             "benchmark script (`--write-results`) rewrites its own marked section in place.", ""]
    for path in sorted(TOPICS.glob("*.md")):
        text = path.read_text()
        title = text.splitlines()[0].removeprefix("# ")
        history = text.split("\n## History\n", 1)
        latest = re.findall(r"<!-- (\w+):start -->", history[0])
        older = re.findall(r"<!-- (\w+):start -->", history[1]) if len(history) > 1 else []
        lines.append(f"* [{title}](results/{path.name}): " + ", ".join(f"`{m}`" for m in latest)
                     + (f"; history: {', '.join(f'`{m}`' for m in older)}" if older else ""))
    return "\n".join(lines)


def generated() -> str:
    return f"{START}\n{summary()}\n\n{index()}\n{END}"


def render(current: str) -> str:
    """RESULTS.md with its generated part replaced (the whole file when it has none)."""
    head = ("# edgetune benchmark results\n\nThe reproduce commands run from the checkout's root in the project's venv: "
            "`make install && .venv/bin/pip install -e \".[bench]\" && . .venv/bin/activate`.\n\n")
    if START in current and END in current:
        before, rest = current.split(START, 1)
        return before + generated() + rest.split(END, 1)[1]
    return head + generated() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when RESULTS.md is stale, writing nothing")
    args = parser.parse_args(argv)
    current = RESULTS.read_text() if RESULTS.exists() else ""
    wanted = render(current)
    if args.check:
        if wanted != current:
            print(f"benchmarks/RESULTS.md is stale: run `{REGENERATE}`", file=sys.stderr)
            return 1
        return 0
    RESULTS.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
