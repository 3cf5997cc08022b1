"""Cross-compile a board's TVM runtime on the host from what the package registries ship.

For boards without an apache-tvm wheel (32-bit armv7). What the registries hold,
checked for apache-tvm 0.27.0.post1 and apache-tvm-ffi 0.1.14.post1:

- apache-tvm-ffi has a source distribution with its CMake build: ``libtvm_ffi``
  (objects, functions, module loading) cross-compiles for any architecture.
- apache-tvm has no source distribution. Its wheel ships ``tvm/src/runtime``
  (every runtime source file of the upstream tree but the device back ends) and
  part of ``tvm/include``, but not headers those sources include
  (``include/tvm/support/io.h``, ``serializer.h``, ``src/support/*.h``,
  ``3rdparty/compiler-rt/builtin_fp16.h``) nor a build script. So
  ``libtvm_runtime`` (RPC server, Relax VM, thread pool) cannot be built from
  registry sources alone: :func:`missing_runtime_sources` lists what is missing,
  from the installed wheel itself, so the report stays true for a later wheel.

``build_runtime`` builds what can be built and says precisely what cannot.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Callable

from ..errors import RuntimeBuildError

#: ``uname -m`` of a board -> GNU triple of the Debian cross toolchain that builds for it
TOOLCHAINS = {"armv7l": "arm-linux-gnueabihf", "aarch64": "aarch64-linux-gnu"}
MIN_CMAKE = (3, 26)  # apache-tvm-ffi's CMakeLists.txt requires it; Debian 12 has 3.25
SOURCE_DOC = "rpc_setup/README.md, section 'Boards without a wheel (32-bit armv7)'"
#: runtime subdirectories outside a CPU libtvm_runtime: device back ends, contrib
#: libraries, the standalone minimal RPC server
_NOT_CPU_RUNTIME = {"extra", "cuda", "hexagon", "opencl", "vulkan", "metal", "rocm", "minrpc"}
#: angle-bracket includes that TVM's build finds in its own 3rdparty tree
_THIRD_PARTY = {"builtin_fp16.h": "3rdparty/compiler-rt/builtin_fp16.h"}
_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.MULTILINE)


@dataclass
class RuntimeBuild:
    """What ``build_runtime`` produced and what it could not."""

    arch: str
    out_dir: Path
    ffi_version: str
    ffi_library: Path
    tvm_version: str
    #: the upstream commit the apache-tvm wheel was built from ("" when the wheel does not say): the
    #: source tree to build libtvm_runtime from
    tvm_commit: str = ""
    #: source files the TVM runtime needs that no registry ships (empty: buildable)
    missing_sources: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.missing_sources


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "edgetune" / "runtime-build"


def _tool(name: str) -> str:
    """A build tool from this Python's environment (the ``runtime-build`` extra) or PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if not found:
        raise RuntimeBuildError(f"{name} is not installed: pip install \"edgetune[runtime-build]\"")
    return found


def _cmake() -> str:
    cmake = _tool("cmake")
    text = subprocess.run([cmake, "--version"], capture_output=True, text=True).stdout
    match = re.search(r"(\d+)\.(\d+)", text)
    version = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    if version < MIN_CMAKE:
        raise RuntimeBuildError(
            f"cmake must be {MIN_CMAKE[0]}.{MIN_CMAKE[1]} or newer, got {version[0]}.{version[1]} ({cmake}) "
            "instead: pip install \"edgetune[runtime-build]\""
        )
    return cmake


def cross_compilers(arch: str) -> tuple[str, str]:
    """(C compiler, C++ compiler) of the Debian cross toolchain for ``arch``."""
    if arch not in TOOLCHAINS:
        raise RuntimeBuildError(f"--arch must be one of {', '.join(TOOLCHAINS)}, got {arch!r} instead")
    triple = TOOLCHAINS[arch]
    found = [shutil.which(f"{triple}-{tool}") for tool in ("gcc", "g++")]
    if not all(found):
        raise RuntimeBuildError(f"the {triple} cross toolchain is not installed: apt-get install g++-{triple}")
    return found[0], found[1]  # type: ignore[return-value]


def ffi_source(cache: Path, log: Callable[[str], None]) -> Path:
    """The apache-tvm-ffi source tree of exactly the installed version (downloaded once)."""
    version = metadata.version("apache-tvm-ffi")
    tree = cache / f"apache_tvm_ffi-{version}"
    if (tree / "CMakeLists.txt").exists():
        return tree
    cache.mkdir(parents=True, exist_ok=True)
    log(f"downloading the apache-tvm-ffi {version} source distribution")
    # only this package from source: with ":all:" pip also builds the sdist's build
    # requirements from source to read its metadata (CMake itself: half an hour on 2 cores)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", "apache-tvm-ffi",
         "--dest", str(cache), f"apache-tvm-ffi=={version}"],
        capture_output=True, text=True,
    )
    archives = sorted(cache.glob(f"apache_tvm_ffi-{version}.tar.gz"))
    if done.returncode != 0 or not archives:
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise RuntimeBuildError(
            f"cannot download the apache-tvm-ffi {version} sdist: {lines[-1] if lines else 'pip failed'}"
        )
    with tarfile.open(archives[0]) as archive:
        archive.extractall(cache, filter="data")
    return tree


def build_ffi(arch: str, out_dir: Path, cache: Path, log: Callable[[str], None]) -> Path:
    """Cross-compile ``libtvm_ffi.so`` for ``arch`` into ``out_dir/lib`` (about 40 s on 2 cores)."""
    cc, cxx = cross_compilers(arch)
    cmake, ninja = _cmake(), _tool("ninja")
    source = ffi_source(cache, log)
    build = cache / f"build-ffi-{arch}-{source.name}"
    library = build / "lib" / "libtvm_ffi.so"
    if not library.exists():
        log(f"cross-compiling libtvm_ffi for {arch} with {Path(cxx).name}")
        started = time.monotonic()
        configure = [
            cmake, "-G", "Ninja", "-S", str(source), "-B", str(build), f"-DCMAKE_MAKE_PROGRAM={ninja}",
            "-DCMAKE_SYSTEM_NAME=Linux", f"-DCMAKE_SYSTEM_PROCESSOR={arch}", f"-DCMAKE_C_COMPILER={cc}",
            f"-DCMAKE_CXX_COMPILER={cxx}", "-DCMAKE_BUILD_TYPE=Release",
            # libbacktrace's configure step runs target binaries; a board needs no C++ backtraces
            "-DTVM_FFI_USE_LIBBACKTRACE=OFF", "-DTVM_FFI_BACKTRACE_ON_SEGFAULT=OFF",
        ]
        for step in (configure, [cmake, "--build", str(build), "--target", "tvm_ffi_shared", "-j2"]):
            done = subprocess.run(step, capture_output=True, text=True)
            if done.returncode != 0:
                errors = [ln for ln in (done.stdout + done.stderr).splitlines() if "error" in ln.lower()]
                raise RuntimeBuildError(
                    f"building libtvm_ffi for {arch} failed: {errors[0].strip() if errors else 'see ' + str(build)}"
                )
        log(f"libtvm_ffi built in {time.monotonic() - started:.0f} s")
    (out_dir / "lib").mkdir(parents=True, exist_ok=True)
    shutil.copy2(library, out_dir / "lib" / "libtvm_ffi.so")
    for include in (source / "include", source / "3rdparty" / "dlpack" / "include"):
        shutil.copytree(include, out_dir / "include", dirs_exist_ok=True)
    return out_dir / "lib" / "libtvm_ffi.so"


def missing_runtime_sources(tvm_dir: Path, ffi_include: Path) -> list[str]:
    """Headers that the wheel's TVM runtime sources include and that nothing installed provides.

    Scans ``tvm/src/runtime`` (device back ends and contrib libraries aside) and
    resolves each include as the compiler would: quoted ones beside the file
    first, then against ``tvm/include``, tvm-ffi's headers and dlpack's.
    """
    runtime = tvm_dir / "src" / "runtime"
    roots = [tvm_dir / "include", ffi_include, ffi_include.parent / "3rdparty" / "dlpack" / "include"]
    missing: set[str] = set()
    for path in sorted(runtime.rglob("*")):
        if path.suffix not in (".cc", ".h") or set(path.relative_to(runtime).parts) & _NOT_CPU_RUNTIME:
            continue
        for quote, name in _INCLUDE_RE.findall(path.read_text(errors="replace")):
            if name in _THIRD_PARTY:
                if not (tvm_dir / _THIRD_PARTY[name]).exists():
                    missing.add(_THIRD_PARTY[name])
                continue
            if quote == "<" and not name.startswith(("tvm/", "dlpack/")):
                continue  # the C++ library and the system's headers
            if "cuda/" in name or "opencl" in name:
                continue  # device back ends, included only when they are enabled
            candidates = ([path.parent / name] if quote == '"' else []) + [root / name for root in roots]
            if not any(c.exists() for c in candidates):
                missing.add(_upstream_path(path, quote, name, tvm_dir))
    if not (tvm_dir / "CMakeLists.txt").exists():
        missing.add("CMakeLists.txt and cmake/ (TVM's build of libtvm_runtime)")
    return sorted(missing)


def _upstream_path(including: Path, quote: str, name: str, tvm_dir: Path) -> str:
    """Where a missing header lives in TVM's source tree, as a path a user can look up."""
    if quote == "<" or name.startswith("tvm/"):
        return f"include/{name}"
    resolved = (including.parent / name).resolve()
    try:
        return str(resolved.relative_to(tvm_dir.resolve()))
    except ValueError:
        return name


def wheel_commit() -> str:
    """The upstream TVM commit the installed wheel was built from (its ``_version.__commit_id__``), or ""."""
    try:
        from tvm import _version
    except ImportError:
        return ""
    commit = getattr(_version, "__commit_id__", None) or ""
    return commit[1:] if re.fullmatch(r"g[0-9a-f]{7,40}", commit) else commit


def build_runtime(arch: str, out_dir: str | Path, cache: str | Path | None = None,
                  log: Callable[[str], None] = print) -> RuntimeBuild:
    """Build everything of a runtime for ``arch`` that registry sources allow into ``out_dir``.

    Always builds ``lib/libtvm_ffi.so`` (plus the headers to compile against it);
    the result lists the TVM runtime sources no registry ships, and writes it to
    ``out_dir/runtime-build.json``.
    """
    import tvm
    import tvm_ffi

    out = Path(out_dir)
    cache_dir = Path(cache) if cache else default_cache_dir()
    library = build_ffi(arch, out, cache_dir, log)
    tvm_dir = Path(tvm.__file__).parent
    ffi_include = Path(tvm_ffi.__file__).parent / "include"
    result = RuntimeBuild(
        arch=arch, out_dir=out, ffi_version=metadata.version("apache-tvm-ffi"), ffi_library=library,
        tvm_version=tvm.__version__, tvm_commit=wheel_commit(), missing_sources=missing_runtime_sources(tvm_dir, ffi_include),
    )
    if (tvm_dir / "include" / "tvm" / "runtime").is_dir():  # for code that calls the backend API
        shutil.copytree(tvm_dir / "include" / "tvm" / "runtime", out / "include" / "tvm" / "runtime",
                        dirs_exist_ok=True)
    (out / "runtime-build.json").write_text(json.dumps({
        "arch": arch, "tvm_ffi": result.ffi_version, "libtvm_ffi": str(library.relative_to(out)),
        "apache_tvm": result.tvm_version, "apache_tvm_commit": result.tvm_commit, "libtvm_runtime": None if result.missing_sources else "buildable",
        "missing_sources": result.missing_sources,
    }, indent=2) + "\n")
    return result
