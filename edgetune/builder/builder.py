"""Cross-compile candidate programs with warm, long-lived worker processes.

Stock MetaSchedule's ``LocalBuilder`` starts a new process pool for every batch
and each worker imports all of ``tvm.s_tir.tensor_intrin`` (20-45 s on a small
host), so on a 2-core machine whole batches die at its 30 s timeout. Here the
pool is started once per process and kept between tuning runs (a benchmark, a
zoo build or a test session runs many in one process: each paid about 1 s of
start-up); a worker imports ``tvm`` once (about 1.5 s) and then compiles one
candidate in a fraction of a second. A worker is
recycled after ``max_uses`` builds to bound the memory TVM leaks per build, and
a build that exceeds ``timeout_sec`` is killed and reported as data
(``BuilderResult.error_msg``), never raised.

Artifacts are shared libraries linked on the host by the profile's (cross)
compiler, or with its own ``ld`` (``build.candidate_link = "direct"``: the driver's link
line without the driver and its libraries, about 30 ms less CPU per candidate, which saved
no host time per trial end to end), so the board needs no compiler of its own. A module is built once
per process (:mod:`edgetune.builder.builds`): asked for again, its artifact is
reused. With :attr:`WarmBuilder.defer` set (the search, see
:mod:`edgetune.measure.pending`), ``build`` submits the batch and returns at
once with pending artifacts that the runner resolves in its own thread, so
the tuning thread searches on while the workers compile.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from tvm.s_tir.meta_schedule.builder import BuilderInput, BuilderResult, PyBuilder
from tvm.ir.utils import derived_object
from tvm.support.popen_pool import PopenPoolExecutor

from .builds import BUILT, Build, PendingArtifact, build_key

#: artifact paths with this prefix were not built: their result is already in
#: the history database (see :class:`CachedArtifact`)
CACHED_ARTIFACT_PREFIX = "edgetune-cached:"


@dataclass(frozen=True)
class CachedArtifact:
    """A candidate the history already measured: not built, served from the history by its key.

    MetaSchedule hands only a string from builder to runner (``BuilderResult.artifact_path``), so a
    cached candidate travels as :attr:`path`; builder, runner and callbacks read it with :meth:`parse`.
    """

    key: str

    @property
    def path(self) -> str:
        return CACHED_ARTIFACT_PREFIX + self.key

    @classmethod
    def parse(cls, artifact_path: Any) -> "CachedArtifact | None":
        """The cached candidate ``artifact_path`` names, or None for a built artifact (or none)."""
        text = str(artifact_path) if artifact_path else ""
        return cls(text[len(CACHED_ARTIFACT_PREFIX):]) if text.startswith(CACHED_ARTIFACT_PREFIX) else None


@dataclass
class BuildStats:
    """What the builder did, for progress reports and benchmarks."""

    built: int = 0
    failed: int = 0
    timed_out: int = 0
    cached: int = 0
    reused: int = 0  # candidates built before in this process: their artifact served again
    ahead: int = 0  # builds started for a batch searched ahead (see WarmBuilder.build_ahead)
    build_seconds: float = 0.0  # wall clock the tuning thread spent inside build() calls
    waited_seconds: float = 0.0  # wall clock the runner waited for deferred builds before measuring
    errors: list[str] = field(default_factory=list)


def shared_library_linker(
    cross_compiler: str, flags: tuple[str, ...], direct: bool = False
) -> Callable[..., None]:
    """An ``export_library`` fcompile that links with ``cross_compiler``.

    Written here rather than with ``tvm.support.cc.cross_compiler`` because that
    helper appends per-call options to a list shared between calls, which grows
    without bound in a long-lived worker.

    With ``direct``, objects alone (no flags, no options, no C source) are linked by the
    driver's own ``ld`` on the driver's own link line less its libraries (:func:`direct_link_tools`):
    a candidate's link took about 35 ms through ``g++`` against 5-6 ms this way, on a build of
    about 0.2 CPU s. The start-up files and options stay, so every instruction lands at the address
    the driver's link gives it and a candidate is timed as before. The model a user deploys keeps
    the driver's link.
    """
    from tvm.support import cc

    def fcompile(output: str, objects: list[str], options: list[str] | None = None) -> None:
        all_options = list(flags) + list(options or [])
        tools = direct_link_tools(cross_compiler) if direct and not all_options else None
        if tools is not None and all(str(name).endswith(".o") for name in objects):
            if _link_directly(tools, output, [str(name) for name in objects]):
                return
        cc.create_shared(output, objects, options=all_options, cc=cross_compiler or None)

    fcompile.output_format = "so"  # type: ignore[attr-defined]
    return fcompile


#: stand-ins for the output and the objects in the driver's link line (``-###`` names files it does not open)
_OUTPUT_SLOT, _OBJECTS_SLOT = "@edgetune-output@.so", "@edgetune-objects@.o"


@dataclass(frozen=True)
class DirectLinkTools:
    """How a compiler driver links a shared library, without the driver and the libraries it scans.

    ``arguments``: the driver's ``ld`` line (``-###``) with its start-up files and options and without its
    plugin, ``-L`` and ``-l`` arguments, the output and objects as :data:`_OUTPUT_SLOT`, :data:`_OBJECTS_SLOT`.
    ``support_library``: what takes the libraries' place, linked after the objects (``libgcc.a``: the helpers
    such as ``__divdi3`` that a 32-bit ARM kernel calls; the kernels' libc and libm calls resolve when the
    runtime loads them, as through the driver's link).
    """

    linker: str
    arguments: tuple[str, ...]
    support_library: str | None

    def command(self, output: str, objects: list[str]) -> list[str]:
        command = [self.linker]
        for argument in self.arguments:
            if argument == _OUTPUT_SLOT:
                command.append(output)
            elif argument == _OBJECTS_SLOT:
                command.extend(objects)
                if self.support_library:
                    command.append(self.support_library)
            else:
                command.append(argument)
        return command


@functools.lru_cache(maxsize=None)
def direct_link_tools(cross_compiler: str) -> DirectLinkTools | None:
    """How ``cross_compiler`` (the host's ``g++`` when empty) links a shared library, asked once; None: through it.

    The driver names its own ``ld`` (``-print-prog-name=ld``: the cross ``ld`` for a cross compiler), its
    support library (``-print-libgcc-file-name``) and its link line (``-###``). Most of a driver's link is
    ``ld`` reading ``libstdc++``, ``libm`` and ``libc``, which a kernel's object needs none of.
    """
    import shlex

    from tvm.support import cc

    driver = cross_compiler or cc.get_cc() or "g++"

    def ask(*options: str) -> subprocess.CompletedProcess | None:
        try:
            done = subprocess.run([driver, *options], capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return done if done.returncode == 0 else None

    named = ask("-print-prog-name=ld")
    linker = shutil.which(named.stdout.strip()) if named and named.stdout.strip() else None
    planned = ask("-shared", "-fPIC", "-o", _OUTPUT_SLOT, _OBJECTS_SLOT, "-###")
    if linker is None or planned is None:
        return None
    lines = [line for line in planned.stderr.splitlines() if _OUTPUT_SLOT in line and _OBJECTS_SLOT in line
             and not line.startswith("COLLECT_GCC_OPTIONS")]
    if not lines:
        return None
    arguments: list[str] = []
    words = iter(shlex.split(lines[-1])[1:])  # the linker the driver runs (collect2 or ld), then its arguments
    for word in words:
        if word == "-plugin":
            next(words, None)
        elif not word.startswith(("-plugin-opt", "-L", "-l")):
            arguments.append(word)
    if arguments.count(_OBJECTS_SLOT) != 1 or arguments.count(_OUTPUT_SLOT) != 1:
        return None
    support = ask("-print-libgcc-file-name")
    support_path = support.stdout.strip() if support else ""
    return DirectLinkTools(linker, tuple(arguments), support_path if os.path.isfile(support_path) else None)


def _link_directly(tools: DirectLinkTools, output: str, objects: list[str]) -> bool:
    """Link ``objects`` into ``output`` with ``tools``; False if the linker refused (the driver links them instead)."""
    try:
        return subprocess.run(tools.command(output, objects), capture_output=True, check=False).returncode == 0
    except OSError:
        return False


def _build_in_worker(
    mod: Any,
    target: Any,
    cross_compiler: str,
    flags: tuple[str, ...],
    artifact_dir: str,
    direct_link: bool = False,
) -> str:
    """Compile one scheduled module and link it; runs inside a pool worker."""
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    rt_mod = tvm.compile(mod, target=target)
    if str(target.kind.name) == "opencl":  # a work-group the device refuses fails here, not on the board
        from edgetune.builder.opencl_check import DeviceLimits, check_device_limits

        check_device_limits(mod, rt_mod, DeviceLimits.from_target(target))
    out_dir = tempfile.mkdtemp(prefix="cand-", dir=artifact_dir)
    path = os.path.join(out_dir, "candidate.so")
    rt_mod.export_library(path, fcompile=shared_library_linker(cross_compiler, flags, direct=direct_link))
    return path


def _warm_up() -> None:
    """Pay TVM's import once per worker, before the first real build."""
    import tvm  # noqa: F401
    import tvm.s_tir.transform  # noqa: F401


logger = logging.getLogger(__name__)

#: the started pool no builder uses now (at most one), by how it was started: a closed builder leaves its pool here
#: and the next builder of the same settings takes it, its workers already warm
_idle_pools: dict[tuple[Any, ...], PopenPoolExecutor] = {}
_idle_lock = threading.Lock()


def _pool_key(max_workers: int, timeout_sec: float, max_uses: int) -> tuple[Any, ...]:
    """Pools are shared only between builders whose workers would be started alike, environment included."""
    environment = hashlib.sha256(repr(sorted(os.environ.items())).encode()).hexdigest()
    return (max_workers, timeout_sec, max_uses, environment)


#: pools being started in the background (:func:`start_workers_early`), by key: a builder started alike waits for it
_warming: dict[tuple[Any, ...], threading.Thread] = {}

#: a worker is replaced after this many builds (PopenPoolExecutor's maximum_process_uses)
MAX_USES = 256


def _take_idle_pool(key: tuple[Any, ...]) -> PopenPoolExecutor | None:
    with _idle_lock:
        warming = _warming.get(key)
    if warming is not None:
        warming.join()  # started early: its workers are (nearly) warm
    with _idle_lock:
        return _idle_pools.pop(key, None)


def _warm_pool(max_workers: int, timeout_sec: float, max_uses: int) -> PopenPoolExecutor:
    """A new pool whose workers have all imported TVM (one no-op round trip each, before timing starts)."""
    pool = PopenPoolExecutor(
        max_workers=max_workers, timeout=timeout_sec, initializer=_warm_up, maximum_process_uses=max_uses,
    )
    futures = [pool.submit(_warm_up) for _ in range(max_workers)]
    for future in futures:
        try:
            future.result()
        except Exception:  # a worker that failed warming up is replaced on first use
            pass
    return pool


def start_workers_early(max_workers: int = 0, timeout_sec: float = 60.0, max_uses: int = MAX_USES) -> bool:
    """Start the build workers a :class:`WarmBuilder` of these settings will take, in a background thread, now.

    Each worker imports TVM (3-6 s of CPU); started at the beginning of a run, those imports overlap the
    embedded board's start, the model's preparation and task extraction, instead of following them. The
    pool is left idle for the builder (``WarmBuilder.start`` waits for it to be warm). False when a pool of
    these settings is already idle or starting.
    """
    max_workers = max_workers or host_cores()
    key = _pool_key(max_workers, timeout_sec, max_uses)

    def warm() -> None:
        pool = None
        try:
            pool = _warm_pool(max_workers, timeout_sec, max_uses)
        except Exception:  # the builder starts its own pool as before
            logger.debug("starting build workers early failed", exc_info=True)
        finally:
            if pool is not None:  # idle before it stops warming: a builder that finds neither would start another
                _leave_idle_pool(key, pool)
            with _idle_lock:
                _warming.pop(key, None)

    with _idle_lock:
        if key in _idle_pools or key in _warming:
            return False
        thread = threading.Thread(target=warm, name="edgetune-build-workers", daemon=True)
        _warming[key] = thread
    thread.start()
    return True


def _leave_idle_pool(key: tuple[Any, ...], pool: PopenPoolExecutor) -> None:
    """Keep ``pool`` for the next builder; the one kept before is stopped (idle workers hold memory)."""
    with _idle_lock:
        older = list(_idle_pools.values())
        _idle_pools.clear()
        _idle_pools[key] = pool
    for other in older:
        other.shutdown(wait=False)


@atexit.register
def _shut_idle_pools() -> None:
    with _idle_lock:
        pools = list(_idle_pools.values())
        _idle_pools.clear()
    for pool in pools:
        pool.shutdown(wait=False)


@derived_object
class WarmBuilder(PyBuilder):
    """A MetaSchedule builder that keeps its compile workers across batches.

    Parameters
    ----------
    cross_compiler:
        Compiler driver used to link the shared library (``aarch64-linux-gnu-g++``);
        empty for the host's default ``g++``.
    cross_compiler_flags:
        Extra flags for that link step.
    timeout_sec:
        Per-candidate build timeout; a worker over it is killed and replaced.
    max_workers:
        Worker processes; 0 means one per CPU this process may run on.
    max_uses:
        Builds a worker performs before it is replaced.
    direct_link:
        Link each candidate with the compiler's own ``ld`` and support library, without the
        compiler driver (:func:`shared_library_linker`); False (the default) links through the driver.
    lookup_cached:
        Optional ``f(mod) -> key | None``: when it returns a key, the candidate
        is not built and its artifact path becomes ``CACHED_ARTIFACT_PREFIX + key``.
        This is how a resumed run skips candidates the history already measured.
    claims:
        Optional :class:`~edgetune.tuning.claims.CandidateClaims`: a candidate
        another tuner sharing the history holds is built only if that tuner
        gives it up; otherwise it is served from its result like a cached one.
    """

    def __init__(
        self,
        cross_compiler: str = "",
        cross_compiler_flags: tuple[str, ...] = (),
        timeout_sec: float = 60.0,
        max_workers: int = 0,
        max_uses: int = MAX_USES,
        direct_link: bool = False,
        lookup_cached: Callable[[Any], str | None] | None = None,
        claims: Any = None,
    ) -> None:
        super().__init__()
        if timeout_sec <= 0:
            raise ValueError(f"timeout_sec must be > 0, got {timeout_sec!r} instead")
        self.cross_compiler = cross_compiler
        self.cross_compiler_flags = tuple(cross_compiler_flags)
        self.timeout_sec = float(timeout_sec)
        self.max_workers = max_workers or host_cores()
        self.max_uses = max_uses
        self.direct_link = direct_link
        self.lookup_cached = lookup_cached
        self.claims = claims
        self.artifact_dir = BUILT.directory  # the process's: an artifact outlives its builder, for reuse
        #: True: ``build`` returns pending artifacts at once (the runner must resolve them, measure.pending)
        self.defer = False
        self.stats = BuildStats()
        self._stats_lock = threading.Lock()
        self._pool: PopenPoolExecutor | None = None
        self._pool_key: tuple[Any, ...] = ()
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------
    # (``derived_object`` does not forward dunder methods, so no __enter__:
    # use ``contextlib.closing(WarmBuilder(...))``.)
    def start(self) -> None:
        """Start the workers now (otherwise they start on the first build)."""
        with self._lock:
            if self._pool is None:
                self._pool_key = _pool_key(self.max_workers, self.timeout_sec, self.max_uses)
                self._pool = _take_idle_pool(self._pool_key)
                if self._pool is not None:
                    return  # a pool a closed builder left, its workers warm
                self._pool = _warm_pool(self.max_workers, self.timeout_sec, self.max_uses)

    def close(self, keep_workers: bool = True) -> None:
        """Its workers wait for the next builder of this process; ``keep_workers=False`` stops them instead.

        The artifacts stay with the process's builds (:data:`~edgetune.builder.builds.BUILT`, the newest
        few thousand kept), for the next builder that is asked for the same module.
        """
        with self._lock:
            if self._pool is not None:
                if keep_workers:
                    _leave_idle_pool(self._pool_key, self._pool)
                else:
                    self._pool.shutdown(wait=False)
                self._pool = None

    @contextmanager
    def fresh(self) -> Iterator[None]:
        """Meanwhile, build every candidate, even one the history measured or another tuner holds: to time it again."""
        lookup, claims = self.lookup_cached, self.claims
        self.lookup_cached = self.claims = None
        try:
            yield
        finally:
            self.lookup_cached, self.claims = lookup, claims

    # -- MetaSchedule interface -------------------------------------------
    def build(self, build_inputs: list[BuilderInput]) -> list[BuilderResult]:
        self.start()
        started = time.perf_counter()
        results: list[BuilderResult | None] = [None] * len(build_inputs)
        pending: list[tuple[int, str, Build]] = []
        elsewhere: list[int] = []  # claimed by another tuner: waited for once ours are building
        for index, build_input in enumerate(build_inputs):
            key = self.lookup_cached(build_input.mod) if self.lookup_cached else None
            if key is not None:
                self._count("cached")
                results[index] = BuilderResult(CachedArtifact(key).path, None)
            elif self.claims is not None and not self.claims.claim(build_input.mod):
                elsewhere.append(index)
            else:
                pending.append((index, *self._begin(build_input)))
        for index in elsewhere:
            outcome, value = self.claims.wait(build_inputs[index].mod)
            if outcome == "serve":
                self._count("cached")
                results[index] = BuilderResult(CachedArtifact(str(value)).path, None)
            elif outcome == "skip":
                results[index] = BuilderResult(None, value)
            else:
                pending.append((index, *self._begin(build_inputs[index])))
        for index, key, build in pending:
            if self.defer and not build.done():
                results[index] = BuilderResult(PendingArtifact(key).path, None)
            else:
                results[index] = build.result()
                if results[index].error_msg is None:
                    BUILT.note_path(key, str(results[index].artifact_path))
        with self._stats_lock:
            self.stats.build_seconds += time.perf_counter() - started
        return [r for r in results if r is not None]

    def build_ahead(self, build_inputs: list[BuilderInput]) -> int:
        """Start building candidates the search will hand out next (a batch searched ahead); how many started.

        Nothing is handed out, claimed or waited for: :meth:`build` later finds them among the process's builds.
        A candidate the history serves is not built.
        """
        self.start()
        started = 0
        for build_input in build_inputs:
            if self.lookup_cached is not None and self.lookup_cached(build_input.mod) is not None:
                continue
            key = self._key(build_input)
            if BUILT.get(key) is None:
                BUILT.add(key, Build(self._submit(build_input), self._collect))
                started += 1
            BUILT.release_lease(key)  # only held while a batch uses it
        self._count("ahead", started)
        return started

    def _key(self, build_input: BuilderInput) -> str:
        return build_key(build_input.mod, build_input.target, self.cross_compiler, self.cross_compiler_flags)

    def _begin(self, build_input: BuilderInput) -> tuple[str, Build]:
        """The candidate's build: one of this process's (reused) or a new one submitted to the workers."""
        key = self._key(build_input)
        build = BUILT.get(key)
        if build is not None:
            self._count("reused")
            return key, build
        build = Build(self._submit(build_input), self._collect)
        BUILT.add(key, build)
        return key, build

    def _count(self, name: str, amount: int = 1) -> None:
        with self._stats_lock:
            setattr(self.stats, name, getattr(self.stats, name) + amount)

    def _submit(self, build_input: BuilderInput) -> Any:
        assert self._pool is not None
        return self._pool.submit(
            _build_in_worker,
            build_input.mod,
            build_input.target,
            self.cross_compiler,
            self.cross_compiler_flags,
            self.artifact_dir,
            self.direct_link,
        )

    def _collect(self, future: Any) -> BuilderResult:
        """A finished build as data; called once per build, from the tuning thread or the runner's."""
        try:
            path = future.result()
        except TimeoutError:
            message = f"WarmBuilder: timeout, killed after {self.timeout_sec:g} s (build.timeout_sec)"
            with self._stats_lock:
                self.stats.timed_out += 1
                self.stats.errors.append(message)
            return BuilderResult(None, message)
        except Exception as error:  # a compile error is data, not a crash
            message = f"WarmBuilder: {type(error).__name__}: {error}"
            with self._stats_lock:
                self.stats.failed += 1
                self.stats.errors.append(message.splitlines()[0])
            return BuilderResult(None, message)
        self._count("built")
        return BuilderResult(path, None)


def host_cores() -> int:
    """CPUs this process may run on (a container's or ``taskset``'s limit, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
