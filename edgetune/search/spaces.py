"""Which design space each task is searched in: MetaSchedule's default for its target, or one of edgetune's.

Two kinds of task get their own space (each module says why): depthwise convolutions on CPUs (blocked float
ones and int8 ones), tiled with their vector lanes whole and innermost (:mod:`edgetune.search.depthwise_space`),
and the other int8 reductions, tensorized with the target's dot-product instruction
(:mod:`edgetune.search.int8_space`). Every other task keeps the context MetaSchedule made for it.
"""

from __future__ import annotations

from typing import Any

from .depthwise_space import depthwise_space, is_depthwise_workload
from .int8_space import int8_space, is_int8_workload


def task_space(context: Any, depthwise_tiling: bool = True) -> Any | None:
    """The space ``context``'s task is searched in where it is not MetaSchedule's default, else None.

    ``depthwise_tiling`` (``tuning.depthwise_tiling``): depthwise convolutions on an LLVM target (blocked float
    ones, and int8 ones, which no dot-product instruction takes) get
    :func:`~edgetune.search.depthwise_space.depthwise_space`.
    """
    if depthwise_tiling and str(context.target.kind.name) == "llvm" and is_depthwise_workload(context.mod):
        from ..tasks.graph import vector_lanes

        return depthwise_space(int32_lanes=vector_lanes(context.target))
    if is_int8_workload(context.mod):
        return int8_space(context.target)
    return None


def with_task_spaces(contexts: list[Any], strategy: Any, depthwise_tiling: bool = True) -> list[Any]:
    """``contexts`` with each task's space replaced by :func:`task_space`'s, where it has one.

    A context whose task keeps MetaSchedule's default space is returned as it was (the same object).
    """
    from tvm.s_tir import meta_schedule as ms

    out = []
    for index, context in enumerate(contexts):
        space = task_space(context, depthwise_tiling)
        if space is None:
            out.append(context)
            continue
        out.append(ms.TuneContext(
            mod=context.mod, target=context.target, space_generator=space, search_strategy=strategy,
            task_name=context.task_name, logger=task_logger(index, len(contexts), str(context.task_name)),
            rand_state=int(context.rand_state), num_threads=int(context.num_threads),
        ).clone())
    return out


def task_logger(index: int, count: int, task_name: str) -> Any:
    """The per-task logger MetaSchedule made for the context (its file under the run's build logs), else None.

    A ``TuneContext`` keeps only a logging function, not its logger: the logger is found again by the name
    ``get_loggers_from_work_dir`` gives it (the task's index among ``count``, then its name); where none has
    that name, MetaSchedule's default logger (None) is used.
    """
    import logging

    from tvm.s_tir.meta_schedule import logging as ms_logging

    name = f"{ms_logging.__name__}.task_{index:0{len(str(count - 1))}d}_{task_name[:100]}"
    return logging.getLogger(name) if name in logging.Logger.manager.loggerDict else None
