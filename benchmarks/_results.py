"""Shared by the benchmark scripts: replace one marked section of the results in benchmarks/results/.

Each topic has one file in ``benchmarks/results/`` (its newest run first, older runs under "## History");
``benchmarks/RESULTS.md`` is the generated summary and index (``benchmarks/results_summary.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
TOPICS = HERE / "results"

#: where a section with a new marker goes: the first prefix that matches names its topic file
TOPIC_OF_PREFIX: tuple[tuple[str, str], ...] = (
    ("vs_onnxruntime_litert", "vs-litert"), ("vs_onnxruntime_meta", "metatune"), ("metatune", "metatune"),
    ("vs_onnxruntime_prepack", "prepack"), ("vs_onnxruntime_not_in_zoo", "outside-the-zoo"),
    ("vs_onnxruntime_layout", "layouts"), ("layout_classes", "layouts"),
    ("vs_onnxruntime_library", "schedule-library"), ("vs_onnxruntime", "vs-onnxruntime"),
    ("baseline_fairness", "baseline-fairness"), ("board_farm", "board-farm"), ("farm_", "board-farm"),
    ("task_scheduling", "task-scheduling"), ("measurement_reduction", "measurement-reduction"),
    ("evaluator_cost", "measurement-reduction"), ("warm_start", "warm-start"),
    ("real_exports", "real-exports"), ("baseline_protocol", "baseline-fairness"),
)
DEFAULT_TOPIC = "host-time"


def topic_file(mark: str) -> Path:
    """The file that holds ``mark``'s section, or the topic a new one goes to."""
    start = f"<!-- {mark}:start -->"
    for path in sorted(TOPICS.glob("*.md")):
        if start in path.read_text():
            return path
    topic = next((name for prefix, name in TOPIC_OF_PREFIX if mark.startswith(prefix)), DEFAULT_TOPIC)
    return TOPICS / f"{topic}.md"


def _demote(text: str) -> str:
    """Headings one level down (a section under "## History"), code blocks left alone."""
    out, fence = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        out.append("#" + line if not fence and line.startswith("#") else line)
    return "\n".join(out)


def write_section(text: str, mark: str, path: Path | None = None) -> None:
    """Put ``text`` between ``<!-- mark:start -->`` and ``<!-- mark:end -->`` in its topic file.

    A section already there is replaced in place (under History its headings are moved one level down); a new one
    goes first, before the topic's earlier runs. Run ``python benchmarks/results_summary.py`` afterwards.
    """
    path = path or topic_file(mark)
    start, end = f"<!-- {mark}:start -->", f"<!-- {mark}:end -->"
    current = path.read_text() if path.exists() else f"# {mark}\n"
    if start in current and end in current:
        before, rest = current.split(start, 1)
        if "\n## History\n" in before:
            text = _demote(text)
        current = before + f"{start}\n{text}\n{end}" + rest.split(end, 1)[1]
    else:
        first = re.search(r"^<!-- \w+:start -->$|^## History$", current, re.M)
        block = f"{start}\n{text}\n{end}\n\n"
        current = (current[:first.start()] + block + current[first.start():] if first
                   else current.rstrip("\n") + "\n\n" + block.rstrip("\n") + "\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(current)
    print(f"wrote section '{mark}' of {path}; regenerate the summary: python benchmarks/results_summary.py")
