"""A task's default schedule: the untuned code, as a candidate the history can store.

The untuned build compiles each fused function as Relax lowered it. As a
candidate that is a trace which only looks up the function's blocks: it
changes nothing, yet makes a valid record (a record needs an instruction).
"""

from __future__ import annotations

from typing import Any

from tvm.s_tir import Schedule

#: the only instructions of a default-schedule trace: block lookups, which change nothing
_LOOKUPS = frozenset({"GetSBlock", "GetChildBlocks"})


def default_schedule(workload_mod: Any) -> Schedule:
    """A schedule of ``workload_mod`` whose trace looks up its blocks and changes nothing."""
    sch = Schedule(workload_mod)
    sch.get_child_blocks(sch.get_sblock("root"))
    return sch


def is_default_trace(trace: Any) -> bool:
    """True for the traces :func:`default_schedule` makes (the untuned code)."""
    kinds = [str(inst.kind.name) for inst in trace.insts]
    return bool(kinds) and all(kind in _LOOKUPS for kind in kinds)


def is_default_json(trace_json: Any) -> bool:
    """:func:`is_default_trace` of a trace as ``Trace.as_json()`` wrote it (``[[instruction...], decisions]``)."""
    try:
        kinds = [str(inst[0]) for inst in trace_json[0]]
    except (TypeError, IndexError, KeyError):
        return False
    return bool(kinds) and all(kind in _LOOKUPS for kind in kinds)


def is_untuned_copy(trace: Any) -> bool:
    """True for a search candidate that is the untuned code again: a default trace, then only postprocessing.

    The search's first population draws the measured default record from the
    database and re-applies the postprocessors (``DecomposeReduction``...): a
    different module, so MetaSchedule does not count it as measured, that runs
    like the untuned code it was made from.
    """
    kinds = [str(inst.kind.name) for inst in trace.insts]
    if "EnterPostproc" in kinds:
        kinds = kinds[: kinds.index("EnterPostproc")]
    return bool(kinds) and all(kind in _LOOKUPS for kind in kinds)


def replayed_candidate(context: Any, trace: Any) -> Any | None:
    """A stored ``trace`` replayed on ``context``'s task as a measure candidate, None if it does not replay.

    The default trace gives the untuned code (built as the default batch builds it); any
    other is applied without its postprocessing, which the task's postprocessors then redo,
    as MetaSchedule does for the candidates it measures.
    """
    import tvm.s_tir.meta_schedule as ms

    if is_default_trace(trace):
        sch = default_schedule(context.mod)
    else:
        try:
            sch = Schedule(context.mod, seed=1, debug_mask="none")
            trace.apply_to_schedule(sch, remove_postproc=True)
            sch.enter_postproc()
            if not all(postproc.apply(sch) for postproc in list(context.space_generator.postprocs or [])):
                return None
        except Exception:  # noqa: BLE001 - TVM raises its own errors for a trace that does not replay
            return None
    return ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True))
