"""Builds kept by module: a candidate built once per process, and builds the tuning thread does not wait for.

A build is keyed by the scheduled module's structural hash, the target and
the link settings (:func:`build_key`). :class:`BuiltModules` keeps the
process's builds under that key, in flight or finished, so a module built
before (a candidate timed again after the search, a second tune in one
process) reuses its artifact instead of being compiled again. The newest
``keep`` finished artifacts stay on disk; an older one is deleted once no
batch holds it (a lease, from hand-out to :meth:`BuiltModules.release`).

MetaSchedule hands only a string from builder to runner, so a build the
builder did not wait for travels as a :class:`PendingArtifact` path; the
runner (:class:`edgetune.measure.pending.PendingBuildRunner`) resolves it with
:func:`resolve` in its own thread before the candidate goes to the board.
A build that failed resolves to its error (``BuilderResult.error_msg``), as data.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

from tvm.s_tir.meta_schedule.builder import BuilderResult

#: artifact paths with this prefix name a build that may still be running (see :class:`PendingArtifact`)
PENDING_ARTIFACT_PREFIX = "edgetune-pending:"
#: finished artifacts a process keeps on disk for reuse (a candidate's library is tens of KB)
KEEP_ARTIFACTS = 2048


@dataclass(frozen=True)
class PendingArtifact:
    """A candidate whose build was submitted and not waited for: resolved by its build key."""

    key: str

    @property
    def path(self) -> str:
        return PENDING_ARTIFACT_PREFIX + self.key

    @classmethod
    def parse(cls, artifact_path: Any) -> "PendingArtifact | None":
        """The pending build ``artifact_path`` names, or None for any other path (or none)."""
        text = str(artifact_path) if artifact_path else ""
        return cls(text[len(PENDING_ARTIFACT_PREFIX):]) if text.startswith(PENDING_ARTIFACT_PREFIX) else None


def build_key(mod: Any, target: Any, cross_compiler: str, flags: tuple[str, ...]) -> str:
    """Same key, same artifact: the module's structure, the target and how the library is linked."""
    import tvm_ffi

    settings = repr((str(target.export()), cross_compiler, tuple(flags)))
    return f"{tvm_ffi.structural_hash(mod)}-{hashlib.sha256(settings.encode()).hexdigest()[:16]}"


class Build:
    """One module's build: a future of the worker pool until :meth:`result` collects it (once, thread-safe)."""

    def __init__(self, future: Any, collect: Callable[[Any], BuilderResult]) -> None:
        self._future = future
        self._collect = collect
        self._result: BuilderResult | None = None
        self._lock = threading.Lock()

    @classmethod
    def finished(cls, result: BuilderResult) -> "Build":
        build = cls(None, lambda _future: result)
        build._result = result
        return build

    def done(self) -> bool:
        return self._result is not None or (self._future is not None and self._future.done())

    def result(self) -> BuilderResult:
        with self._lock:
            if self._result is None:
                self._result = self._collect(self._future)
                self._future = None
            return self._result

    @property
    def ok(self) -> bool:
        """Finished with an artifact."""
        return self._result is not None and self._result.error_msg is None


class BuiltModules:
    """The process's builds by key, in flight or finished; the newest ``keep`` finished artifacts stay on disk."""

    def __init__(self, keep: int = KEEP_ARTIFACTS) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep!r} instead")
        self.keep = keep
        self._builds: OrderedDict[str, Build] = OrderedDict()
        self._leases: dict[str, int] = {}
        self._by_path: dict[str, str] = {}  # artifact path -> key, for release
        self._lock = threading.Lock()
        self._directory: str | None = None

    @property
    def directory(self) -> str:
        """Where this process's artifacts are written (made on first use, deleted at exit)."""
        with self._lock:
            if self._directory is None:
                self._directory = tempfile.mkdtemp(prefix="edgetune-build-")
            return self._directory

    def get(self, key: str) -> Build | None:
        """The build of ``key`` if one is kept (a failed or timed-out one is not): leased to the caller."""
        with self._lock:
            build = self._builds.get(key)
            if build is None:
                return None
            if build.done():
                result = build.result()
                if result.error_msg is not None or not os.path.exists(str(result.artifact_path)):
                    del self._builds[key]  # a failure may pass next time (a timeout); a lost file is built again
                    return None
            self._builds.move_to_end(key)
            self._leases[key] = self._leases.get(key, 0) + 1
            return build

    def add(self, key: str, build: Build) -> None:
        """A new build, leased to the caller; the oldest unleased artifacts beyond ``keep`` are deleted."""
        with self._lock:
            self._builds[key] = build
            self._leases[key] = self._leases.get(key, 0) + 1
            evicted = self._evict()
        for path in evicted:
            _remove(path)

    def resolve(self, key: str) -> BuilderResult:
        """The build's result, waited for; an unknown key is an error result (never raised)."""
        with self._lock:
            build = self._builds.get(key)
        if build is None:
            return BuilderResult(None, f"WarmBuilder: build {key} is not known in this process")
        result = build.result()
        if result.error_msg is None:
            with self._lock:
                self._by_path[str(result.artifact_path)] = key
        return result

    def release(self, artifact_path: str) -> bool:
        """A batch is done with ``artifact_path``; True: it is kept here (do not delete it)."""
        with self._lock:
            key = self._by_path.get(str(artifact_path))
            if key is None or key not in self._builds:
                return False
            self._leases[key] = max(0, self._leases.get(key, 0) - 1)
            evicted = self._evict()
        for path in evicted:
            _remove(path)
        return str(artifact_path) not in evicted

    def release_lease(self, key: str) -> None:
        """Give back a lease taken by :meth:`get` or :meth:`add` without handing the artifact out."""
        with self._lock:
            if key in self._leases:
                self._leases[key] = max(0, self._leases[key] - 1)

    def note_path(self, key: str, artifact_path: str) -> None:
        with self._lock:
            self._by_path[str(artifact_path)] = key

    def __len__(self) -> int:
        with self._lock:
            return len(self._builds)

    def _evict(self) -> list[str]:
        """Drop the oldest finished, unleased builds beyond ``keep``; their paths (deleted by the caller, unlocked)."""
        evicted: list[str] = []
        excess = len(self._builds) - self.keep
        for key in list(self._builds):
            if excess <= 0:
                break
            build = self._builds[key]
            if self._leases.get(key, 0) > 0 or not build.done():
                continue
            result = build.result()
            del self._builds[key]
            self._leases.pop(key, None)
            excess -= 1
            if result.error_msg is None and result.artifact_path:
                self._by_path.pop(str(result.artifact_path), None)
                evicted.append(str(result.artifact_path))
        return evicted

    def clear(self) -> None:
        """Forget every build and delete the directory (process exit, tests)."""
        with self._lock:
            self._builds.clear()
            self._leases.clear()
            self._by_path.clear()
            directory, self._directory = self._directory, None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


def _remove(path: str) -> None:
    """Delete an artifact and its per-candidate directory; already gone is fine."""
    try:
        os.unlink(path)
        os.rmdir(os.path.dirname(path))
    except OSError:
        pass


#: this process's builds (every WarmBuilder of the process shares them)
BUILT = BuiltModules()
atexit.register(BUILT.clear)


def resolve(artifact_path: Any) -> BuilderResult:
    """The finished build an artifact path names: a pending build waited for, any other path as it is."""
    pending = PendingArtifact.parse(artifact_path)
    if pending is None:
        return BuilderResult(str(artifact_path) if artifact_path else None, None)
    return BUILT.resolve(pending.key)


def resolved_path(artifact_path: Any) -> Any:
    """The artifact path a pending one became (None if its build failed); any other path as it is."""
    if PendingArtifact.parse(artifact_path) is None:
        return artifact_path
    return resolve(artifact_path).artifact_path


def release_artifact(artifact_path: Any) -> bool:
    """A batch is done with a built artifact; True: the process keeps it for reuse (do not delete it)."""
    return bool(artifact_path) and BUILT.release(str(resolved_path(artifact_path)))
