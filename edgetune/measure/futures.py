"""MetaSchedule runner futures: a result already measured, or one a ``concurrent.futures.Future`` will hold.

Every runner that wraps another (awaiting, pending builds, test and benchmark boards) hands MetaSchedule one of
these; they live here so that each does not define its own.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.runner import PyRunnerFuture


@derived_object
class MeasuredFuture(PyRunnerFuture):
    """A candidate's result, measured already."""

    def __init__(self, result: Any) -> None:
        super().__init__()
        self.value = result

    def done(self) -> bool:
        return True

    def result(self) -> Any:
        return self.value


@derived_object
class PromisedFuture(PyRunnerFuture):
    """A candidate's result once ``future`` (set by a measuring thread) holds it."""

    def __init__(self, future: concurrent.futures.Future) -> None:
        super().__init__()
        self.future = future

    def done(self) -> bool:
        return self.future.done()

    def result(self) -> Any:
        return self.future.result()
