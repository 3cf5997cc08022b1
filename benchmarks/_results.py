"""Shared by the benchmark scripts: replace one marked section of RESULTS.md."""

from __future__ import annotations

from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")


def write_section(text: str, mark: str, path: Path = RESULTS) -> None:
    """Put ``text`` between ``<!-- mark:start -->`` and ``<!-- mark:end -->`` (appended if absent)."""
    start, end = f"<!-- {mark}:start -->", f"<!-- {mark}:end -->"
    current = path.read_text() if path.exists() else "# edgetune benchmark results\n"
    block = f"{start}\n{text}\n{end}"
    if start in current and end in current:
        before, rest = current.split(start, 1)
        current = before + block + rest.split(end, 1)[1]
    else:
        current = current.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(current)
