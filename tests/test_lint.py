"""The tree passes the lint configured in pyproject.toml ([tool.ruff])."""

from __future__ import annotations

import subprocess
import sys

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
TORCH_MODULES = {"edgetune/costmodel/net.py", "edgetune/costmodel/meta_model.py", "edgetune/tasks/models.py", "edgetune/api.py"}


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
