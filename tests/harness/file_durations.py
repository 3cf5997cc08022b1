"""Seconds each test file took, from a pytest log run with ``--durations=0``: writes ``tests/durations.json``.

The suite hands whole files to its workers (``--dist loadfile``), heaviest first by these
figures (``conftest.pytest_collection_modifyitems``), so the longest files start early and
no worker is left running one alone at the end. Refresh it after a CI run whose files
changed weight::

  make test PYTEST_ARGS="-q --durations=0" | tee /tmp/suite.log
  python tests/harness/file_durations.py /tmp/suite.log
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

LINE = re.compile(r"^\s*([0-9.]+)s\s+(?:setup|call|teardown)\s+(tests/[^:\s]+\.py)")
OUT = Path(__file__).resolve().parent.parent / "durations.json"


def file_seconds(log: str) -> dict[str, float]:
    seconds: dict[str, float] = defaultdict(float)
    for line in log.splitlines():
        match = LINE.match(line)
        if match:
            seconds[match.group(2)] += float(match.group(1))
    return {name: round(total, 1) for name, total in sorted(seconds.items(), key=lambda item: -item[1])}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python tests/harness/file_durations.py PYTEST_LOG", file=sys.stderr)
        return 2
    seconds = file_seconds(Path(argv[0]).read_text(errors="replace"))
    if not seconds:
        print(f"no --durations=0 lines in {argv[0]}", file=sys.stderr)
        return 1
    OUT.write_text(json.dumps(seconds, indent=1) + "\n")
    print(f"{len(seconds)} files, {sum(seconds.values()) / 60:.1f} min in all -> {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
