"""Finding and reading profile files.

Profiles are looked up by name on a search path (the user's directories from
``EDGETUNE_PROFILE_PATH`` first, then the bundled ``device_profiles/``), so a
user can shadow a bundled profile without editing the package.

The bundled profiles live in ``device_profiles/`` at the repository root and are
installed as the package data of ``edgetune.device_profiles`` (see setup.py), so
a wheel carries them; they are read through ``importlib.resources``.
"""

from __future__ import annotations

import atexit
import difflib
import importlib.resources
import os
import shutil
import sys
import tempfile
from pathlib import Path

import edgetune
from edgetune.errors import ProfileError
from edgetune.profile import tvm_support
from edgetune.profile.parser import parse_profile
from edgetune.profile.schema import DeviceProfile

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: Environment variable holding extra profile directories (``os.pathsep``-separated).
PATH_ENV = "EDGETUNE_PROFILE_PATH"
#: The package whose data files are the profiles shipped with edgetune.
BUNDLED_PACKAGE = "edgetune.device_profiles"


def _bundled_dir() -> Path:
    """The directory of the bundled profiles.

    A source tree on ``sys.path`` without an install (``PYTHONPATH=checkout``) uses
    its own ``device_profiles/``, beside the ``edgetune`` package that was imported,
    rather than whatever ``edgetune.device_profiles`` an install elsewhere maps to.
    Otherwise (wheel, ``pip install .`` or ``-e .``) the installed package's files.
    """
    checkout = Path(edgetune.__file__).resolve().parent.parent / "device_profiles"
    if (checkout / "__init__.py").is_file():
        return checkout
    try:
        files = importlib.resources.files(BUNDLED_PACKAGE)
    except ModuleNotFoundError:  # a broken install: the search finds no bundled profiles, and says where it looked
        return checkout
    if isinstance(files, Path):
        return files
    # Not plain files (imported from a zip archive): copy the few small files out once per process.
    target = Path(tempfile.mkdtemp(prefix="edgetune-profiles-"))
    for item in files.iterdir():
        if item.is_file() and item.name.endswith((".toml", ".md")):
            (target / item.name).write_bytes(item.read_bytes())
    atexit.register(shutil.rmtree, target, ignore_errors=True)
    return target


#: The profiles shipped with edgetune (the last directory of the search path).
BUNDLED_DIR = _bundled_dir()


def profile_search_path() -> list[Path]:
    """Directories searched for ``<name>.toml``, highest priority first."""
    extra = os.environ.get(PATH_ENV, "")
    return [Path(entry).expanduser() for entry in extra.split(os.pathsep) if entry] + [BUNDLED_DIR]


def _profile_files() -> dict[str, Path]:
    """Profile name -> file, the first directory on the search path winning."""
    found: dict[str, Path] = {}
    for directory in profile_search_path():
        if directory.is_dir():
            for path in sorted(directory.glob("*.toml")):
                found.setdefault(path.stem, path)
    return found


def _display(path: Path) -> str:
    """The path as messages show it: relative to the working directory when under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _read(path: Path) -> DeviceProfile:
    origin = _display(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(f"{origin}: cannot read profile: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{origin}: malformed TOML: {exc}") from None
    profile = parse_profile(data, origin=origin, source=path.resolve())
    # On the search path the file name *is* the lookup key: a different name would
    # make `load_profile(stem).name` differ from what the user asked for.
    on_search_path = path.resolve().parent in {d.resolve() for d in profile_search_path()}
    if on_search_path and profile.name != path.stem:
        raise ProfileError(
            f"{origin}: key 'name' is '{profile.name}' but must equal the file name '{path.stem}' "
            "for profiles on the search path"
        )
    return profile


def load_profile(name_or_path: str) -> DeviceProfile:
    """Load a profile by file path (existing file, or anything ending in .toml) or by name."""
    candidate = Path(name_or_path).expanduser()
    has_directory = Path(name_or_path).name != name_or_path
    if name_or_path.endswith(".toml") or has_directory or candidate.is_file():
        if not candidate.is_file():
            raise ProfileError(f"{name_or_path}: profile file does not exist")
        return _read(candidate)
    files = _profile_files()
    if name_or_path in files:
        return _read(files[name_or_path])
    if not files:
        searched = ", ".join(str(d) for d in profile_search_path())
        raise ProfileError(f"unknown profile '{name_or_path}'; no profiles found in {searched}")
    close = difflib.get_close_matches(name_or_path, list(files), n=1)
    suggestion = f" (did you mean '{close[0]}'?)" if close else ""
    raise ProfileError(f"unknown profile '{name_or_path}'{suggestion}; available: {', '.join(sorted(files))}")


def list_profiles() -> list[DeviceProfile]:
    """Every profile on the search path, sorted by name; a broken file raises ``ProfileError``."""
    return [_read(path) for _, path in sorted(_profile_files().items())]


def validate_profile_file(path: str | os.PathLike[str]) -> DeviceProfile:
    """Load one file and check that TVM accepts its target (``TargetError`` otherwise).

    Unlike :meth:`DeviceProfile.check_buildable` this does not depend on the local
    toolchain, so a profile for any board validates on any machine.
    """
    profile = _read(Path(path))
    tvm_support.check_target(profile)
    return profile
