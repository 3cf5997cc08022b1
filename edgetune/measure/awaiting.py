"""A runner that measures a batch before handing it back: no candidate is timed while the host builds the next.

On the embedded board the "device" is this host's CPU. MetaSchedule's own
task schedulers (gradient, round-robin) search and build the next batch while
the last one is timed; there that overlap times candidates under build load,
so the search keeps whichever candidate was timed in a quiet moment and the
delivered model gets slower as the history grows. On a real board the overlap
is a win, so only boards that share the host's CPU use this wrapper
(:attr:`edgetune.board.base.Board.awaits_measurements`).
"""

from __future__ import annotations

from typing import Any

import tvm.s_tir.meta_schedule as ms
from tvm.ir.utils import derived_object

from .futures import MeasuredFuture


@derived_object
class AwaitingRunner(ms.runner.PyRunner):
    """Wraps a runner; ``run`` returns only once every candidate of the batch is measured."""

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self.inner = inner

    def run(self, runner_inputs: list[Any]) -> list[Any]:
        return [MeasuredFuture(future.result()) for future in self.inner.run(runner_inputs)]
