"""edgetune as a user installs it: build the sdist and wheel, check them, install, run.

`python -m build --no-isolation` (setuptools, build and twine come with the
`test` extra, so nothing is downloaded) builds both archives, without a single
setuptools warning (pip shows them on `pip install`, a wall of text before
edgetune says anything); `twine check --strict` checks their metadata. The wheel
is then installed, not editable, into a fresh venv, and the console script runs
from a directory outside the checkout: `profiles list`, `profiles show`, a short
`tune` on the embedded loopback board; the bundled MetaTune model loads from the
installed package. The same for an editable install (`pip install -e .`), which
finds the bundled profiles through setuptools' editable finder.

Fast and offline: the fresh venvs get edgetune itself from the wheel (`--no-deps`),
and its dependencies from this interpreter's site-packages through a `.pth`
file, which adds that directory to `sys.path` without running the `.pth` files
in it (so the development install's editable finder stays out).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from conftest import IN_CI, REPO

BUNDLED = sorted(path.stem for path in (REPO / "device_profiles").glob("*.toml"))
MIGRATIONS = sorted(path.name for path in (REPO / "edgetune" / "history" / "migrations" / "versions").glob("0*.py"))
METATUNE = REPO / "edgetune" / "costmodel" / "data" / "metatune.npz"  # the bundled MetaTune model (package data)
#: the schedule libraries shipped in the package (edgetune/schedules/data), as paths in the wheel
SHIPPED_LIBRARIES = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "edgetune" / "schedules" / "data").glob("*.schedules.xz"))

# What a setuptools warning looks like in a build's output: `python -m build` prints a
# backend's warnings as "WARNING <message>", Python as "<file>:<line>: <Category>: <message>"
# (SetuptoolsDeprecationWarning, _Warning, InformationOnly, ...), and setuptools frames the
# details of each between "!!" lines and a row of asterisks. (distutils' lowercase
# "warning: no previously-included files matching ..." log lines are no warnings: the
# wheel built from the sdist, which has no bytecode, always prints one for `global-exclude`.)
SETUPTOOLS_WARNING = ("WARNING", "Warning:", "InformationOnly", "!!", "*****", "is absent from the `packages` configuration",
                      "Package would be ignored", "Editable installation")


def _need(module: str) -> None:
    try:
        __import__(module)
    except ImportError:
        message = f"{module} not installed (pip install -e '.[test]')"
        if IN_CI:
            pytest.fail(message + "; .ci/run should have installed it")
        pytest.skip(message)


def run(*command: object, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    result = subprocess.run([str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{command} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


def assert_no_setuptools_warning(output: str) -> None:
    """No line of a build's output belongs to a setuptools (or other Python) warning."""
    found = [line for line in output.splitlines() if any(mark in line for mark in SETUPTOOLS_WARNING)]
    assert not found, "setuptools warnings:\n" + "\n".join(found) + "\n\nthe whole output:\n" + output


def _fresh_clone(dest: Path) -> Path:
    """The checkout's files as a fresh clone has them (and the files not committed yet).

    Without ``edgetune.egg-info`` above all: setuptools adds every file an existing
    ``SOURCES.txt`` lists to the sdist, so the development install's would hide package
    data that pyproject.toml no longer declares. Nor ``.venv``, ``build/`` or bytecode.
    """
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO, capture_output=True)
    if listed.returncode == 0:
        for name in filter(None, listed.stdout.decode().split("\0")):
            if (REPO / name).is_file():  # not a file deleted but not yet committed
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / name, dest / name)
    else:  # an unpacked sdist
        ignore = shutil.ignore_patterns(".git", ".venv", "*.egg-info", "build", "dist", "__pycache__", "*.py[cod]")
        shutil.copytree(REPO, dest, ignore=ignore, dirs_exist_ok=True)
    return dest


@pytest.fixture(scope="module")
def dist_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The sdist and the wheel (built from the sdist, so the sdist is complete enough to build), and what the build printed."""
    for module in ("build", "twine", "setuptools"):
        _need(module)
    source = _fresh_clone(tmp_path_factory.mktemp("source"))
    out = tmp_path_factory.mktemp("dist")
    result = run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, source, cwd=source, timeout=600)
    return out, result.stdout + result.stderr


@pytest.fixture(scope="module")
def dist(dist_build: tuple[Path, str]) -> Path:
    return dist_build[0]


def test_build_prints_no_setuptools_warning(dist_build: tuple[Path, str]) -> None:
    """Every warning setuptools prints here, pip prints too: on `make demo`, before edgetune starts."""
    _, output = dist_build
    assert_no_setuptools_warning(output)
    assert "Successfully built edgetune-" in output, output  # the output checked is the build's


def test_build_and_twine_check(dist: Path) -> None:
    sdists, wheels = sorted(dist.glob("edgetune-*.tar.gz")), sorted(dist.glob("edgetune-*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, sorted(p.name for p in dist.iterdir())
    checked = run(sys.executable, "-m", "twine", "check", "--strict", *sdists, *wheels, cwd=dist)
    assert checked.stdout.count("PASSED") == 2, checked.stdout

    with zipfile.ZipFile(wheels[0]) as wheel:
        names = set(wheel.namelist())
        metadata = wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    for stem in BUNDLED:
        assert f"edgetune/device_profiles/{stem}.toml" in names, stem
    for name in ("README.md", "__init__.py"):
        assert f"edgetune/device_profiles/{name}" in names
    for name in MIGRATIONS:
        assert f"edgetune/history/migrations/versions/{name}" in names
    for name in ("edgetune/history/migrations/env.py", "edgetune/history/migrations/script.py.mako", "edgetune/py.typed",
                 "edgetune/costmodel/data/metatune.npz", *SHIPPED_LIBRARIES):
        assert name in names, name
    assert not any(name.startswith(("device_profiles/", "tests/")) for name in names)  # nothing at the top level
    for line in ("License-Expression: Apache-2.0", "Requires-Python: >=3.10", "Description-Content-Type: text/markdown",
                 "Classifier: Operating System :: POSIX :: Linux", "Provides-Extra: test", "Project-URL: "):
        assert line in metadata, line
    assert any(name.endswith("licenses/LICENSE") for name in names)

    with tarfile.open(sdists[0]) as sdist:
        members = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    for name in ("setup.py", "pyproject.toml", "LICENSE", "README.md", "MANIFEST.in", "Makefile", "device_profiles/__init__.py",
                 "device_profiles/host.toml", "rpc_setup/boards.example.toml", "tests/conftest.py",
                 "edgetune/costmodel/data/metatune.npz", *SHIPPED_LIBRARIES):
        assert name in members, name
    assert not any("__pycache__" in name for name in members)


def _site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def _fresh_venv(root: Path, install: list[str]) -> tuple[Path, dict[str, str]]:
    """A new venv with edgetune from ``install`` (pip arguments) and the dependencies of this one.

    pip runs without PYTHONPATH and before the ``.pth`` exists, so it sees an empty
    environment: it can neither take the checkout or the development install for
    edgetune already installed, nor touch them (``--ignore-installed`` besides).
    """
    venv = root / "venv"
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "EDGETUNE_PROFILE_PATH", "EDGETUNE_DEBUG")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=root, env=env)
    python = venv / "bin" / "python"
    run(sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps", "--no-index", "--ignore-installed",
        *install, cwd=root, env=env, timeout=300)
    site = _site_packages(python)
    assert (site / "edgetune").is_dir() or any(site.glob("__editable__*edgetune*")), sorted(p.name for p in site.iterdir())
    ours = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}
    (site / "_edgetune_test_dependencies.pth").write_text("".join(f"{path}\n" for path in sorted(ours)))
    return venv, env


WHERE = """\
import hashlib, json, sys, importlib.resources
import edgetune
from edgetune.costmodel import bundled_model
from edgetune.profile.loader import BUNDLED_DIR
from edgetune.history.migrate import MIGRATIONS
from alembic.script import ScriptDirectory
metatune = importlib.resources.files("edgetune.costmodel") / "data" / "metatune.npz"
model = bundled_model()  # what --cost-model meta and `edgetune costmodel info` load
from edgetune.schedules.use import shipped_libraries
print(json.dumps({
    "libraries": [str(p) for p in shipped_libraries()],
    "edgetune": edgetune.__file__,
    "bundled": str(BUNDLED_DIR),
    "resources": str(importlib.resources.files("edgetune.device_profiles")),
    "editable_finders": [repr(f) for f in sys.meta_path if "editable" in repr(f).lower()],
    "migrations": str(MIGRATIONS),
    "revisions": sorted(r.revision for r in ScriptDirectory(str(MIGRATIONS)).walk_revisions()),
    "metatune": str(metatune),
    "metatune_sha256": hashlib.sha256(metatune.read_bytes()).hexdigest(),
    "metatune_parameters": model.num_parameters,
    "metatune_format": model.info["format_version"],
}))
"""


def _where(venv: Path, env: dict[str, str], cwd: Path) -> dict:
    return json.loads(run(venv / "bin" / "python", "-c", WHERE, cwd=cwd, env=env).stdout)


def _check_metatune(where: dict, installed: Path) -> None:
    """bundled_model() read the model at ``installed``, the same bytes as the checkout's."""
    from edgetune.costmodel.modelfile import FORMAT_VERSION, ModelFile

    assert Path(where["metatune"]) == installed, where
    assert where["metatune_sha256"] == hashlib.sha256(METATUNE.read_bytes()).hexdigest(), where
    assert where["metatune_format"] == FORMAT_VERSION, where
    assert where["metatune_parameters"] == ModelFile.load(METATUNE).num_parameters > 0, where


def _check_profiles(venv: Path, env: dict[str, str], cwd: Path, bundled_source: Path) -> None:
    listed = run(venv / "bin" / "edgetune", "profiles", "list", cwd=cwd, env={**env, "COLUMNS": "200"})
    for name in BUNDLED:
        assert f" {name} " in listed.stdout, (name, listed.stdout)
    shown = run(venv / "bin" / "edgetune", "profiles", "show", "host", cwd=cwd, env=env).stdout
    assert shown.startswith("host: ") and f"source:      {bundled_source / 'host.toml'}" in shown, shown

    # EDGETUNE_PROFILE_PATH still comes before the bundled profiles
    mine = cwd / "my-profiles"
    mine.mkdir(exist_ok=True)
    text = (bundled_source / "host.toml").read_text()
    (mine / "host.toml").write_text(text.replace('description = "', 'description = "my copy: ', 1))
    shadowed = run(venv / "bin" / "edgetune", "profiles", "show", "host", cwd=cwd, env={**env, "EDGETUNE_PROFILE_PATH": str(mine)})
    assert shadowed.stdout.startswith("host: my copy: ") and str(mine / "host.toml") in shadowed.stdout, shadowed.stdout


def test_wheel_installs_and_runs_outside_the_checkout(dist: Path, tmp_path: Path) -> None:
    wheel = next(dist.glob("edgetune-*.whl"))
    venv, env = _fresh_venv(tmp_path, [str(wheel)])
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = _where(venv, env, work)
    site = _site_packages(venv / "bin" / "python")
    assert Path(where["edgetune"]).is_relative_to(site), where  # the wheel's copy, not the checkout
    assert where["editable_finders"] == [], where
    assert Path(where["bundled"]) == Path(where["resources"]) == site / "edgetune" / "device_profiles", where
    assert Path(where["migrations"]) == site / "edgetune" / "history" / "migrations", where
    assert len(where["revisions"]) == len(MIGRATIONS), where  # Alembic reads the installed scripts
    _check_metatune(where, site / "edgetune" / "costmodel" / "data" / "metatune.npz")
    assert where["libraries"] == [str(site / name) for name in SHIPPED_LIBRARIES], where  # what --schedules auto finds
    _check_profiles(venv, env, work, site / "edgetune" / "device_profiles")

    out = work / "run"
    tuned = run(venv / "bin" / "edgetune", "tune", "--model", "demo:tiny-cnn", "--trials", "4", "--profile", "host",
                "--out", out, "--quiet", cwd=work, env=env, timeout=600)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["profile"] == "host" and summary["board"]["key"] == "local", summary  # the embedded loopback board
    assert summary["trials"]["this_run"] >= 4 and summary["end_to_end"]["outputs_match"] is True, summary
    assert Path(summary["end_to_end"]["artifact"]).is_file()
    assert summary["edgetune_version"] and "end to end on the device" in tuned.stdout


def test_editable_install_finds_the_profiles(tmp_path: Path) -> None:
    """`pip install -e .`: setuptools' finder maps edgetune.device_profiles to the repository's directory."""
    _need("setuptools")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    # pip install -e --no-build-isolation, split in two so that pip never runs with the development install visible
    built = run(sys.executable, "-c", f"import setuptools.build_meta as b; print(b.build_editable({str(wheels)!r}))",
                cwd=REPO, timeout=300)
    wheel = wheels / built.stdout.strip().splitlines()[-1]
    # the warnings pip would print on `pip install -e .` (make demo, make test)
    assert_no_setuptools_warning(built.stdout + built.stderr)
    venv, env = _fresh_venv(tmp_path, [str(wheel)])
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = _where(venv, env, work)
    assert Path(where["edgetune"]) == REPO / "edgetune" / "__init__.py", where
    assert Path(where["bundled"]) == Path(where["resources"]) == REPO / "device_profiles", where
    _check_metatune(where, METATUNE)
    _check_profiles(venv, env, work, REPO / "device_profiles")
