"""The documentation stays true: README.md is a front door, generated references match their sources, links resolve."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def _documents() -> list[Path]:
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "benchmarks" / "RESULTS.md",
            *sorted((REPO / "benchmarks" / "results").glob("*.md")), REPO / "device_profiles" / "README.md",
            REPO / "rpc_setup" / "README.md"]
    return [path for path in docs if path.is_file()]


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every heading anchor of a markdown text, repeated headings numbered as GitHub numbers them."""
    found: set[str] = set()
    counts: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} (.+)$", _without_fences(markdown), re.M):
        slug = github_slug(heading)
        n = counts.get(slug, 0)
        counts[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def _without_fences(markdown: str) -> str:
    """Fenced code blocks blanked out: a heading in code is not one."""
    return re.sub(r"^```.*?^```", "", markdown, flags=re.M | re.S)


def _without_code(markdown: str) -> str:
    """Fenced code blocks and inline code blanked out: a link in code is not one."""
    return re.sub(r"`[^`\n]*`", "", _without_fences(markdown))


def relative_links(markdown: str) -> list[str]:
    links = re.findall(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", _without_code(markdown))
    return [link for link in links if not re.match(r"[a-z][a-z0-9+.-]*:", link)]


def test_every_relative_link_resolves() -> None:
    problems = []
    for document in _documents():
        for link in relative_links(document.read_text(encoding="utf-8")):
            target, _, anchor = link.partition("#")
            path = (document.parent / target).resolve() if target else document
            name = f"{document.relative_to(REPO)}: ({link})"
            if not path.exists():
                problems.append(f"{name}: no file {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path.read_text(encoding="utf-8")):
                problems.append(f"{name}: no heading with anchor #{anchor} in {path.relative_to(REPO)}")
    assert not problems, "links that do not resolve:\n" + "\n".join(problems)


def test_the_link_check_sees_a_broken_link_and_anchor() -> None:
    text = "# A title\n\n## Set-up: two `make` commands\n\nsee [x](missing.md) and [y](#set-up-two-make-commands)\n"
    assert relative_links(text) == ["missing.md", "#set-up-two-make-commands"]
    assert anchors(text) == {"a-title", "set-up-two-make-commands"}
    assert relative_links("[web](https://example.org) `[not](a-link.md)`") == []


def test_readme_is_a_front_door() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300, "README.md is the front door: at most 300 lines, the rest goes to docs/"
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    for target in ("demo", "test"):
        assert f"make {target}" in readme and re.search(rf"^{target}:", makefile, re.M), target
    assert "make test" in (REPO / ".ci" / "run").read_text(encoding="utf-8")


def test_results_summary_is_current() -> None:
    """benchmarks/RESULTS.md's summary and index are what benchmarks/results_summary.py generates from the rows now."""
    script = REPO / "benchmarks" / "results_summary.py"
    if not script.is_file():
        pytest.skip("no benchmarks/ here (an sdist carries the tests, not the benchmarks)")
    module = _load(script)
    current = module.RESULTS.read_text(encoding="utf-8")
    assert module.render(current) == current, f"benchmarks/RESULTS.md is stale: run `{module.REGENERATE}`"


def test_cli_reference_is_current() -> None:
    """docs/cli.md is what docs/gen_cli.py writes from the argparse parsers now."""
    module = _load(REPO / "docs" / "gen_cli.py")
    current = module.CLI_MD.read_text(encoding="utf-8")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    if module.written_version(current) != version:
        pytest.skip(f"docs/cli.md was written with Python {module.written_version(current)}, argparse's help "
                    f"differs under {version}")
    assert module.render() == current, f"docs/cli.md is stale: run `{module.REGENERATE}`"
