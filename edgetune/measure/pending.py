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


@derived_object
class _Later(ms.runner.PyRunnerFuture):
    """A candidate's result once its build is resolved: a runner error, or the wrapped runner's future."""

    def __init__(self, stage: concurrent.futures.Future) -> None:
        super().__init__()
        self.stage = stage

    def done(self) -> bool:
        if not self.stage.done():
            return False
        value = self.stage.result()
        return isinstance(value, ms.runner.RunnerResult) or bool(value.done())

    def result(self) -> Any:
        value = self.stage.result()
        return value if isinstance(value, ms.runner.RunnerResult) else value.result()


@derived_object
class PendingBuildRunner(ms.runner.PyRunner):
    """Wraps a runner; resolves pending builds in its own thread, batch after batch, before the wrapped runner runs them.

    ``builder`` (a :class:`WarmBuilder`) has its :attr:`~WarmBuilder.stats` told how long the runner
    waited for builds; ``stop``: once set, batches not yet resolved are not sent to the board.
    """

    def __init__(self, inner: Any, builder: Any = None, stop: threading.Event | None = None) -> None:
        super().__init__()
        self.inner = inner
        self.builder = builder
        self.stop = stop or threading.Event()
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="edgetune-builds")

    def run(self, runner_inputs: list[Any]) -> list[Any]:
        if not any(PendingArtifact.parse(inp.artifact_path) for inp in runner_inputs):
            return self.inner.run(runner_inputs)
        stages = [concurrent.futures.Future() for _ in runner_inputs]
        self._executor.submit(self._resolve_then_run, list(runner_inputs), stages)
        return [_Later(stage) for stage in stages]

    def close(self) -> None:
        """Wait for the batches handed over (a stopped run's come back unmeasured at once)."""
        self._executor.shutdown(wait=True)

    def _resolve_then_run(self, inputs: list[Any], stages: list[concurrent.futures.Future]) -> None:
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
def builds_beside_search(builder: Any, runner: Any, stop: threading.Event | None, enabled: bool = True) -> Iterator[Any]:
    """Within it, ``builder`` (a :class:`WarmBuilder`) returns at once and the runner to use resolves its builds.

    Any other builder (stock MetaSchedule's, passed in) or ``enabled=False``: ``runner`` as it is, builds awaited.
    """
    if not enabled or not isinstance(builder, WarmBuilder):
        yield runner
        return
    wrapped = PendingBuildRunner(runner, builder, stop)
    builder.defer = True
    try:
        yield wrapped
    finally:
        builder.defer = False
        wrapped.close()
