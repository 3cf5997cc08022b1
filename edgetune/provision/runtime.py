"""Give the board a TVM runtime of exactly the host's version, without the board going online.

The host downloads wheels for the board's platform (``pip download`` with the
board's platform, Python and ABI tags) into a local cache, uploads them over
SFTP, and unpacks them into a venv under the board's ``remote_dir``
(``~/.edgetune/venv``). Unpacking is done by a few lines of Python on the board
instead of pip: the venv needs no pip, and under emulation or on a slow board
it takes seconds instead of minutes. A ``runtime.json`` next to the venv
records what is installed, so a second provision skips all of it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import posixpath
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable, Iterator

from ..errors import ProvisionError
from .detect import BoardFacts, normalize_arch
from .ssh import BoardConnection

#: The roots of the board runtime: TVM with the extras its RPC server imports.
RUNTIME_ROOTS = ("apache-tvm[rpc,popen-pool]", "apache-tvm-ffi")
#: Architectures with apache-tvm wheels on the registry; others must build from source.
WHEEL_ARCHES = ("aarch64", "x86_64")
SOURCE_BUILD_DOC = "rpc_setup/README.md, section 'Boards without a wheel (32-bit armv7)'"

_UNPACK = r"""
import json, os, stat, sys, sysconfig, zipfile
purelib = sysconfig.get_paths()["purelib"]
scripts = sysconfig.get_paths()["scripts"]
for wheel in sys.argv[1:]:
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            name = info.filename
            head, _, rest = name.partition("/")
            if head.endswith(".data"):
                kind, _, rest = rest.partition("/")
                if kind in ("purelib", "platlib"):
                    dest = os.path.join(purelib, rest)
                elif kind == "scripts":
                    dest = os.path.join(scripts, rest)
                else:
                    continue
            else:
                dest = os.path.join(purelib, name)
            if name.endswith("/"):
                os.makedirs(dest, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with archive.open(info) as src, open(dest, "wb") as out:
                while True:
                    block = src.read(1 << 20)
                    if not block:
                        break
                    out.write(block)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                os.chmod(dest, mode | stat.S_IRUSR | stat.S_IWUSR)
print(purelib)
"""


@dataclass(frozen=True)
class RuntimeSpec:
    """The exact runtime a board gets: pinned packages for one platform and Python."""

    arch: str
    python_tag: str
    requirements: tuple[str, ...]

    @property
    def tvm_version(self) -> str:
        return self.requirements[0].split("==", 1)[1]

    def platforms(self) -> list[str]:
        return [f"manylinux_2_{minor}_{self.arch}" for minor in (28, 27, 17)] + [f"manylinux2014_{self.arch}"]

    @property
    def cache_name(self) -> str:
        return f"{self.arch}-{self.python_tag}-tvm{self.tvm_version}"


_REQ_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[([^\]]*)\])?")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def host_versions() -> dict[str, str]:
    """The runtime's dependency closure with this host's installed versions (what the board gets).

    Walked from the installed metadata so a new TVM release that adds a
    dependency is picked up without a code change.
    """
    versions: dict[str, str] = {}
    pending = [(_REQ_RE.match(root).group(1), set((_REQ_RE.match(root).group(2) or "").split(","))) for root in RUNTIME_ROOTS]
    while pending:
        name, extras = pending.pop(0)
        key = _canonical(name)
        if key in versions:
            continue
        try:
            versions[key] = metadata.version(name)
        except metadata.PackageNotFoundError:
            if key.startswith("apache-tvm"):
                raise ProvisionError(f"{name} is not installed on this host; pip install apache-tvm") from None
            continue  # an optional dependency the host does not have: the board does without it too
        for requirement in metadata.requires(name) or []:
            spec, _, marker = requirement.partition(";")
            wanted_extra = re.search(r"extra\s*==\s*[\"']([^\"']+)", marker)
            if wanted_extra and wanted_extra.group(1) not in extras:
                continue
            match = _REQ_RE.match(spec)
            if match:
                pending.append((match.group(1), set()))
    return versions


def runtime_spec(facts: BoardFacts, board: str) -> RuntimeSpec:
    arch = normalize_arch(facts.arch)
    versions = host_versions()
    if arch not in WHEEL_ARCHES:
        raise ProvisionError(
            f"board {board} is {facts.arch}: there is no apache-tvm {versions['apache-tvm']} wheel for it "
            f"(wheels exist for {', '.join(WHEEL_ARCHES)}); build the runtime from source on the board "
            f"and set runtime = \"preinstalled\" in its inventory entry, see {SOURCE_BUILD_DOC}"
        )
    return RuntimeSpec(arch, facts.python_tag, tuple(f"{name}=={ver}" for name, ver in versions.items()))


def cache_dir() -> Path:
    return Path(os.environ.get("EDGETUNE_CACHE_DIR") or Path.home() / ".cache" / "edgetune")


@contextlib.contextmanager
def cache_lock(target: Path) -> Iterator[None]:
    """``target`` (a cache directory) to this process alone: two provisions at once download into it once."""
    target.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def download_wheels(spec: RuntimeSpec, log: Callable[[str], None]) -> list[Path]:
    """Board wheels from the local cache, downloading them once with ``pip download``."""
    target = cache_dir() / "wheels" / spec.cache_name
    with cache_lock(target):
        return _download_wheels(spec, target, log)


def _download_wheels(spec: RuntimeSpec, target: Path, log: Callable[[str], None]) -> list[Path]:
    manifest = target / "manifest.json"
    if manifest.is_file():
        names = json.loads(manifest.read_text()).get(",".join(spec.requirements))
        if names and all((target / name).is_file() for name in names):
            return [target / name for name in names]
    target.mkdir(parents=True, exist_ok=True)
    version = f"{spec.python_tag[2]}.{spec.python_tag[3:]}"
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
        "--dest", str(target), "--python-version", version, "--implementation", "cp",
        "--abi", spec.python_tag, "--abi", "abi3", "--abi", "none",
        *[arg for platform in spec.platforms() for arg in ("--platform", platform)],
        *spec.requirements,
    ]
    log(f"downloading {spec.arch} wheels for Python {version} into {target}")
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        raise ProvisionError(
            f"cannot download the board runtime ({', '.join(spec.requirements)}) for {spec.arch}, "
            f"Python {version}: {lines[-1] if lines else 'pip failed'}; for boards without a wheel see {SOURCE_BUILD_DOC}"
        )
    names = _match_wheels(target, spec)
    data = json.loads(manifest.read_text()) if manifest.is_file() else {}
    data[",".join(spec.requirements)] = names
    manifest.write_text(json.dumps(data, indent=1))
    return [target / name for name in names]


def _match_wheels(target: Path, spec: RuntimeSpec) -> list[str]:
    names = []
    for requirement in spec.requirements:
        project, _, version = requirement.partition("==")
        prefix = f"{project.replace('-', '_')}-{version}-"
        found = sorted(path.name for path in target.glob("*.whl") if path.name.lower().startswith(prefix.lower()))
        if not found:
            raise ProvisionError(f"pip download left no wheel for {requirement} in {target}")
        names.append(found[-1])
    return names


def remote_dir(entry_dir: str, facts: BoardFacts) -> str:
    """The entry's ``remote_dir`` as an absolute path on the board (SFTP does not expand ``~``)."""
    if entry_dir == "~" or entry_dir.startswith("~/"):
        return posixpath.normpath(facts.home + entry_dir[1:])
    return posixpath.normpath(entry_dir)


def installed_runtime(connection: BoardConnection, base: str) -> dict:
    """The board's ``runtime.json`` (empty when nothing is installed)."""
    result = connection.run(f"cat {base}/runtime.json 2>/dev/null", timeout_sec=30)
    try:
        return json.loads(result.stdout) if result.ok else {}
    except ValueError:
        return {}


def venv_python(base: str) -> str:
    return f"{base}/venv/bin/python"


def ensure_runtime(
    connection: BoardConnection, facts: BoardFacts, base: str, log: Callable[[str], None]
) -> tuple[str, bool]:
    """Install the runtime unless already there; return (TVM version, whether it was installed)."""
    spec = runtime_spec(facts, connection.entry.name)
    wanted = {"requirements": list(spec.requirements), "python": facts.python, "python_version": facts.python_version}
    current = installed_runtime(connection, base)
    if {k: current.get(k) for k in wanted} == wanted:
        probe = connection.run(f"test -x {venv_python(base)}", timeout_sec=30)
        if probe.ok:
            return spec.tvm_version, False
    wheels = download_wheels(spec, log)
    connection.run(f"mkdir -p {base}/wheels && rm -rf {base}/venv {base}/runtime.json", timeout_sec=60, check=True)
    sftp = connection.sftp()
    total = sum(path.stat().st_size for path in wheels)
    log(f"uploading {len(wheels)} wheels ({total / 1e6:.0f} MB) to {base}/wheels")
    present = set(sftp.listdir(f"{base}/wheels"))
    for path in wheels:
        remote = f"{base}/wheels/{path.name}"
        if path.name in present and sftp.stat(remote).st_size == path.stat().st_size:
            continue
        sftp.put(str(path), remote + ".part")
        sftp.posix_rename(remote + ".part", remote)
    for stale in present - {path.name for path in wheels}:
        sftp.remove(f"{base}/wheels/{stale}")
    log(f"creating the venv {base}/venv with {facts.python} {facts.python_version} and unpacking the wheels")
    connection.run(f"{facts.python} -m venv --without-pip {base}/venv", timeout_sec=300, check=True)
    files = " ".join(f"{base}/wheels/{path.name}" for path in wheels)
    connection.run(f"{venv_python(base)} - {files}", timeout_sec=900, check=True, stdin=_UNPACK)
    with sftp.open(f"{base}/runtime.json", "w") as handle:
        handle.write(json.dumps({**wanted, "tvm": spec.tvm_version}, indent=1))
    return spec.tvm_version, True


def check_preinstalled(connection: BoardConnection, base: str) -> str:
    """For ``runtime = "preinstalled"``: the board's own TVM must import and match the host's version."""
    board = connection.entry.name
    host = host_versions()["apache-tvm"]
    python = venv_python(base)
    result = connection.run(f"{python} -c 'import tvm; print(tvm.__version__)'", timeout_sec=600)
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    if not result.ok:
        raise ProvisionError(
            f"board {board}: runtime = \"preinstalled\" but {python} cannot import tvm "
            f"({lines[-1] if lines else 'no output'}); build and install it as in {SOURCE_BUILD_DOC}"
        )
    version = lines[-1].strip() if lines else ""
    # a ".postN" release repackages the same sources: a build from the tag matches it
    if re.sub(r"\.post\d+$", "", version) != re.sub(r"\.post\d+$", "", host):
        raise ProvisionError(
            f"board {board} has TVM {version or 'unknown'} in {python} but this host has {host}; host and board "
            f"must run the same TVM version: rebuild the board's runtime from the v{host} sources ({SOURCE_BUILD_DOC})"
        )
    connection.run(
        f"printf '%s' {shlex.quote(json.dumps({'tvm': version, 'preinstalled': True}))} > {base}/runtime.json",
        timeout_sec=30, check=True,
    )
    return version


#: where the board's runtime gets a GPU device API from, per RPC device
_GPU_RUNTIME_HINTS = {
    "opencl": "the apache-tvm wheels are built with OpenCL off; build the board's runtime from a TVM source tree "
              "with USE_OPENCL=ON and set runtime = \"preinstalled\" for the board",
    "vulkan": "the apache-tvm wheels are built with Vulkan off; build the board's runtime from a TVM source tree "
              "with USE_VULKAN=ON and set runtime = \"preinstalled\" for the board",
    "cuda": "install a TVM runtime built with CUDA for the board (the x86-64 wheels have it; the aarch64 ones "
            "may not) and set runtime = \"preinstalled\" for the board",
}

_DEVICE_PROBE = (
    "import sys, tvm; kind = sys.argv[1]; enabled = tvm.runtime.enabled(kind); "
    "print(int(enabled), int(enabled and tvm.device(kind, 0).exist))"
)


def check_device_runtime(connection: BoardConnection, base: str, device: str) -> None:
    """For a GPU profile: the board's TVM runtime must open the profile's device (OpenCL, CUDA, Vulkan).

    A runtime without the device API would start its RPC server fine and then
    fail every measurement; this says so before the server starts.
    """
    if device not in _GPU_RUNTIME_HINTS:
        return
    board = connection.entry.name
    python = venv_python(base)
    result = connection.run(f"{python} -c '{_DEVICE_PROBE}' {device}", timeout_sec=600)
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    fields = lines[-1].split() if result.ok and lines else []
    if len(fields) != 2:
        raise ProvisionError(f"board {board}: cannot ask {python} for a {device} device ({lines[-1] if lines else 'no output'})")
    if fields[0] != "1":
        raise ProvisionError(
            f"board {board}: the TVM runtime in {base}/venv has no {device} support (tvm.runtime.enabled"
            f"({device!r}) is False), so no candidate could run on the GPU: {_GPU_RUNTIME_HINTS[device]} "
            f"({SOURCE_BUILD_DOC})"
        )
    if fields[1] != "1":
        raise ProvisionError(
            f"board {board}: the TVM runtime supports {device} but opens no {device} device 0 "
            f"(tvm.device({device!r}, 0).exist is False): check the board's GPU driver"
            + (" and its ICD file in /etc/OpenCL/vendors" if device == "opencl" else "")
        )

