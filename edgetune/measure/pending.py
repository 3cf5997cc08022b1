"""Builds beside the search: the runner waits for a batch's builds in its own thread, not the tuning thread.

MetaSchedule calls the builder and then the runner from its tuning thread,
and ``PyBuilder.build`` is synchronous: the search of the next batch waited
for every build of this one. With :attr:`WarmBuilder.defer <edgetune.builder.builder.WarmBuilder.defer>`
set, the builder returns pending artifacts at once
(:class:`~edgetune.builder.builds.PendingArtifact`); :class:`PendingBuildRunner`
hands MetaSchedule its futures at once too, and a thread of its own waits for
the batch's builds, then gives the built candidates to the runner it wraps.
A failed build comes back as that candidate's runner error (its builder's
message, recorded as before). Once the run is stopping (Ctrl-C), a batch not
yet sent to the board is not sent: its candidates come back unmeasured
(:data:`~edgetune.common.failure.STOPPED_BEFORE_BOARD`), and are not stored.

Its futures are also where the tuning thread is seen to wait for a batch
still on the board: with a lookahead (:mod:`edgetune.search.lookahead`), the
batch's task searches its next batch first.

On a board that shares the host's CPU (the embedded board), the runner is
*quiet* (``quiet=True``): that search ahead runs while the batch builds, and
the batch goes to the board only once the search is done and the tuning thread
waits, with no build in flight: nothing of the host's runs beside a timing.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

import tvm.s_tir.meta_schedule as ms
from tvm.ir.utils import derived_object

from ..builder.builder import WarmBuilder
from ..builder.builds import PendingArtifact, resolve
from ..common.failure import STOPPED_BEFORE_BOARD


class _Batch:
    """One batch handed to the runner: whose it is, and whether its task searched ahead already."""

    def __init__(self, task: str | None, lookahead: Any, quiet: bool = False) -> None:
        self.task = task
        self.lookahead = lookahead
        self._fired = False
        self._lock = threading.Lock()
        #: set once the batch may go to the board; a quiet runner's batch waits for its search ahead first
        self.ready = threading.Event()
        if not quiet or task is None or lookahead is None:
            self.ready.set()

    def before_wait(self) -> None:
        """The tuning thread is about to wait for this batch: its task's next batch is searched first (once)."""
        with self._lock:
            if self._fired or self.task is None or self.lookahead is None:
                return
            self._fired = True
        try:
            self.lookahead.search_ahead(self.task)
        finally:
            self.ready.set()  # the tuning thread waits from here on: the host is quiet


@derived_object
class _Later(ms.runner.PyRunnerFuture):
    """A candidate's result once its build is resolved: a runner error, or the wrapped runner's future."""

    def __init__(self, stage: concurrent.futures.Future, batch: _Batch) -> None:
        super().__init__()
        self.stage = stage
        self.batch = batch

    def done(self) -> bool:
        if not self.stage.done():
            return False
        value = self.stage.result()
        return isinstance(value, ms.runner.RunnerResult) or bool(value.done())

    def result(self) -> Any:
        if not self.done():
            self.batch.before_wait()
        value = self.stage.result()
        return value if isinstance(value, ms.runner.RunnerResult) else value.result()


@derived_object
class PendingBuildRunner(ms.runner.PyRunner):
    """Wraps a runner; resolves pending builds in its own thread, batch after batch, before the wrapped runner runs them.

    ``builder`` (a :class:`WarmBuilder`) has its :attr:`~WarmBuilder.stats` told how long the runner
    waited for builds; ``stop``: once set, batches not yet resolved are not sent to the board.
    ``lookahead`` (a :class:`~edgetune.search.lookahead.Lookahead`, read for its ``handed_out`` task and
    asked to ``search_ahead``): a batch's task searches its next batch when the tuning thread would wait.
    ``quiet``: a batch goes to the board only after that search ahead (the board shares the host's CPU;
    the task scheduler must wait for every batch, as edgetune's does there).
    """

    def __init__(
        self, inner: Any, builder: Any = None, stop: threading.Event | None = None, lookahead: Any = None, quiet: bool = False,
    ) -> None:
        super().__init__()
        self.inner = inner
        self.builder = builder
        self.stop = stop or threading.Event()
        self.lookahead = lookahead
        self.quiet = quiet
        self._waiting: set[_Batch] = set()  # quiet batches not yet sent to the board
        self._waiting_lock = threading.Lock()
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="edgetune-builds")

    def run(self, runner_inputs: list[Any]) -> list[Any]:
        task = None
        if self.lookahead is not None:
            task, self.lookahead.handed_out = self.lookahead.handed_out, None
        if task is None and not any(PendingArtifact.parse(inp.artifact_path) for inp in runner_inputs):
            return self.inner.run(runner_inputs)
        batch = _Batch(task, self.lookahead, self.quiet)
        stages = [concurrent.futures.Future() for _ in runner_inputs]
        with self._waiting_lock:
            self._waiting.add(batch)
        self._executor.submit(self._resolve_then_run, list(runner_inputs), stages, batch)
        return [_Later(stage, batch) for stage in stages]

    def close(self) -> None:
        """Wait for the batches handed over (a stopped run's come back unmeasured at once)."""
        with self._waiting_lock:  # nobody waits for them any more: a quiet batch need not wait for a search
            for batch in self._waiting:
                batch.ready.set()
        self._executor.shutdown(wait=True)

    def _resolve_then_run(self, inputs: list[Any], stages: list[concurrent.futures.Future], batch: _Batch) -> None:
        try:
            started = time.perf_counter()
            ready: list[tuple[int, Any]] = []
            for index, inp in enumerate(inputs):
                built = resolve(inp.artifact_path)
                if built.error_msg is not None:
                    stages[index].set_result(ms.runner.RunnerResult(None, built.error_msg))
                else:
                    ready.append((index, ms.runner.RunnerInput(built.artifact_path, inp.device_type, inp.args_info)))
            if isinstance(self.builder, WarmBuilder):
                waited = time.perf_counter() - started
                with self.builder._stats_lock:  # noqa: SLF001 - the builder's own counters, under its lock
                    self.builder.stats.waited_seconds += waited
            batch.ready.wait()  # a quiet batch: until the search ahead is done and the tuning thread waits
            with self._waiting_lock:
                self._waiting.discard(batch)
            if self.stop.is_set():
                for index, _inp in ready:
                    stages[index].set_result(ms.runner.RunnerResult(None, f"{STOPPED_BEFORE_BOARD} (stop requested)"))
                return
            futures = self.inner.run([inp for _index, inp in ready]) if ready else []
            for (index, _inp), future in zip(ready, futures):
                stages[index].set_result(future)
        except BaseException as error:  # never leave MetaSchedule waiting forever
            for stage in stages:
                if not stage.done():
                    stage.set_result(ms.runner.RunnerResult(None, f"PendingBuildRunner: {type(error).__name__}: {error}"))
            raise


@contextmanager
def builds_beside_search(
    builder: Any, runner: Any, stop: threading.Event | None, defer: bool = True, lookahead: Any = None, quiet: bool = False,
) -> Iterator[Any]:
    """Within it, ``builder`` (a :class:`WarmBuilder`) returns at once and the runner to use resolves its builds.

    Any other builder (stock MetaSchedule's, passed in) or ``defer=False``: builds awaited by the tuning
    thread, as before. With neither deferred builds nor a ``lookahead``: ``runner`` as it is. ``quiet``:
    see :class:`PendingBuildRunner`.
    """
    defer = defer and isinstance(builder, WarmBuilder)
    if not defer and lookahead is None:
        yield runner
        return
    wrapped = PendingBuildRunner(runner, builder, stop, lookahead, quiet)
    if defer:
        builder.defer = True
    try:
        yield wrapped
    finally:
        if defer:
            builder.defer = False
        wrapped.close()
