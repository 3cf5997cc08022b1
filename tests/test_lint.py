"""The tree passes the lint configured in pyproject.toml ([tool.ruff]), imports torch only where optional, and has no import loops between packages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import IN_CI, REPO


def test_ruff_finds_nothing() -> None:
    try:
        import ruff  # noqa: F401
    except ImportError:
        if IN_CI:
            pytest.fail("ruff is not installed; it is in the test extra (pip install -e '.[test]')")
        pytest.skip("ruff not installed (pip install -e '.[test]')")
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "edgetune", "tests", "benchmarks"], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


#: modules that may import torch: MetaTune's network (edgetune[meta]) and the PyTorch model frontend (edgetune[torch])
TORCH_MODULES = {"edgetune/costmodel/net.py", "edgetune/costmodel/meta_model.py", "edgetune/tasks/models.py", "edgetune/common/model_objects.py"}


def test_only_the_optional_modules_import_torch() -> None:
    """torch is an optional extra: every other module must import without it."""
    import ast

    offenders = []
    for path in sorted((REPO / "edgetune").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(name == "torch" or name.startswith("torch.") for name in names):
                relative = path.relative_to(REPO).as_posix()
                if relative not in TORCH_MODULES:
                    offenders.append(f"{relative}:{node.lineno}")
    assert not offenders, "torch imported outside the optional modules: " + ", ".join(offenders)
    # the cost model imports torch only inside require_torch(), so that its absence is a one-line error
    meta = ast.parse((REPO / "edgetune" / "costmodel" / "meta_model.py").read_text())
    assert not any(isinstance(n, (ast.Import, ast.ImportFrom)) and "torch" in ast.dump(n) for n in meta.body)


def package_imports(root: Path) -> dict[str, dict[str, list[str]]]:
    """edgetune's package -> the packages it imports -> where (every import, function-level ones too).

    A top-level module (``api.py``, ``cli.py``, ``progress.py``) counts as a package of its own.
    """
    import ast
    from collections import defaultdict

    edges: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted((root / "edgetune").rglob("*.py")):
        rel = path.relative_to(root)
        source = rel.parts[1] if len(rel.parts) > 2 else rel.stem
        module = list(rel.with_suffix("").parts)
        if rel.name == "__init__.py":
            module = module[:-1] + ["__init__"]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module[: len(module) - node.level]
                    targets = [".".join(base + [node.module])] if node.module else [".".join(base + [a.name]) for a in node.names]
                elif node.module and node.module.startswith("edgetune."):
                    targets = [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("edgetune.")]
            for target in targets:
                parts = target.split(".")
                if len(parts) >= 2 and parts[1] != source:
                    edges[source][parts[1]].append(f"{rel.as_posix()}:{node.lineno}")
    return edges


def import_loops(edges: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """Groups of packages that import each other, directly or around a circle (strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    loops: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in edges.get(node, {}):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                loops.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return loops


def test_no_import_loops_between_packages() -> None:
    """Layers only look down: no two of edgetune's packages import each other, however indirectly.

    The lower package of each pair broken so far: measure imports builder (the OpenCL check is
    the builder's); search imports costmodel (every cost model is there) and history (the
    suggestions are search policy); tuning and deploy import artifact (compile, export, run);
    tuning imports schedules (a library is used by a tune, built by tuning.zoo); api imports deploy.
    """
    edges = package_imports(REPO)
    loops = import_loops(edges)
    detail = [
        f"{a} -> {b} ({', '.join(edges[a][b][:2])})" for loop in loops for a in loop for b in loop if b in edges.get(a, {})
    ]
    assert not loops, f"import loops between packages: {loops}; imports: " + "; ".join(detail)


def test_the_loop_check_finds_a_loop(tmp_path: Path) -> None:
    """The check above can fail: two packages importing each other, one at function level, are a loop."""
    (tmp_path / "edgetune" / "low").mkdir(parents=True)
    (tmp_path / "edgetune" / "high").mkdir()
    (tmp_path / "edgetune" / "low" / "a.py").write_text("def f():\n    from ..high.b import g\n")
    (tmp_path / "edgetune" / "high" / "b.py").write_text("from edgetune.low.a import f\n")
    (tmp_path / "edgetune" / "top.py").write_text("from .high import b\n")
    assert import_loops(package_imports(tmp_path)) == [["high", "low"]]


def test_the_run_directorys_file_names_are_spelled_only_in_run_dir() -> None:
    """RunDir (edgetune/common/run_dir.py) names every file of a run directory; code elsewhere reaches them through it."""
    import ast

    from edgetune.common.run_dir import RunDir

    # file names; plain words ("report", "logs") are also command names and other directories' names
    names = {value for key, value in vars(RunDir).items() if key.isupper() and isinstance(value, str) and "." in value}
    assert {"summary.json", "model.so", "history.db"} <= names
    # the board-side runner is a standalone script copied to the board: it cannot import edgetune
    allowed = {"edgetune/common/run_dir.py", "edgetune/deployment/runner_template.py"}
    offenders = []
    for path in sorted((REPO / "edgetune").rglob("*.py")):
        relative = path.relative_to(REPO).as_posix()
        if relative in allowed:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        docstrings = {
            id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in docstrings:
                offenders.append(f"{relative}:{node.lineno}: {node.value!r}")
    assert not offenders, "use edgetune.common.run_dir.RunDir instead of spelling:\n" + "\n".join(offenders)


def _layers() -> dict[str, int]:
    """docs/architecture.md's table: package -> layer."""
    import re

    layers = {}
    for line in (REPO / "docs" / "architecture.md").read_text().splitlines():
        row = re.match(r"\|\s*(\d+)\s*\|([^|]*)\|", line)
        if row:
            for name in re.findall(r"`([\w.]+)`", row.group(2)):
                layers[name] = int(row.group(1))
    return layers


def _imported_packages(source: str, relative: Path, package: str) -> list[tuple[int, str]]:
    """(line, edgetune package) for every import in ``source`` of the module ``edgetune/relative`` (function-level too)."""
    import ast

    parts = list(relative.parts[:-1])  # the module's package path below edgetune: resolves relative imports
    found = []
    for node in ast.walk(ast.parse(source, filename=str(relative))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name.split(".")[1]) for a in node.names if a.name.startswith("edgetune.")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = parts[: len(parts) - (node.level - 1)]
                module = base + (node.module.split(".") if node.module else [])
            elif node.module == "edgetune" or (node.module or "").startswith("edgetune."):
                module = node.module.split(".")[1:]
            else:
                continue
            if module:
                found.append((node.lineno, module[0]))
            else:  # from edgetune import X: a subpackage or module, else something of edgetune/__init__.py
                found += [(node.lineno, a.name) for a in node.names]
    return [(line, name.removesuffix(".py")) for line, name in found if name.removesuffix(".py") != package]


def test_packages_import_only_lower_layers() -> None:
    """The rule of docs/architecture.md: a package imports only packages of lower layers."""
    layers = _layers()
    assert layers["errors"] == 0 and layers["tuning"] > layers["search"] > layers["history"], "the table must parse"
    problems = []
    for path in sorted((REPO / "edgetune").rglob("*.py")):
        relative = path.relative_to(REPO / "edgetune")
        package = relative.parts[0].removesuffix(".py")
        if package not in layers:
            problems.append(f"edgetune/{relative}: package '{package}' has no row in docs/architecture.md's layer table")
            continue
        for line, imported in _imported_packages(path.read_text(), relative, package):
            target = imported if imported in layers else "__init__"
            if layers[target] >= layers[package]:
                problems.append(
                    f"edgetune/{relative}:{line}: {package} (layer {layers[package]}) imports {imported} (layer {layers[target]})"
                )
    assert not problems, "imports against docs/architecture.md's layers:\n" + "\n".join(problems)


def test_the_layer_check_finds_an_upward_import() -> None:
    """The check above can fail: history importing tuning (in a function, relatively) is an upward import."""
    relative = Path("history/store.py")
    source = (REPO / "edgetune" / relative).read_text() + "\n\ndef _probe():\n    from ..tuning import run_tune\n"
    layers = _layers()
    upward = [name for _line, name in _imported_packages(source, relative, "history") if layers[name] >= layers["history"]]
    assert upward == ["tuning"]


def test_the_version_is_pyprojects() -> None:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    from edgetune._version import __version__

    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"] == __version__


def test_the_run_asks_its_components_through_their_types() -> None:
    """tuning/ (the run) never probes a component with hasattr/getattr: each has a declared type or protocol."""
    import ast

    offenders = []
    for path in sorted((REPO / "edgetune" / "tuning").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr"):
                offenders.append(f"{path.relative_to(REPO).as_posix()}:{node.lineno}: {node.func.id}")
    assert not offenders, "\n".join(offenders)
