"""Better starting points than random: schedules of the same operator at other shapes, replayed on this one.

MetaSchedule seeds its evolutionary search only from records of the exact
same workload. A ResNet has a dozen convolutions that differ only in shape,
and the history of other models holds more: the best traces of those
*similar* workloads (same operator signature, other shapes) are replayed on
the new workload. A trace's tile sizes (``SamplePerfectTile`` decisions) were
chosen for the old loop extents: each is adapted to the new extent, keeping
the inner factors where they still divide it (:func:`adapt_tile`); the other
decisions are kept. A trace that still does not apply (a block the new
workload lacks, a compute location that no longer exists) or that a
postprocessor rejects is skipped: transfer never fails a task.

A trace names its blocks, so it does not replay on the same operator with
another epilogue (a convolution with hard-swish where the trace had ReLU, a
convolution without a bias where the trace inlined one). There its
*decisions* are carried instead (:func:`transfer_decisions`): the new
workload's own design space, from the same schedule rules, draws the same
tiles and unroll in the same order, and takes the trace's values for them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import tvm.s_tir.meta_schedule as ms
from tvm.s_tir import Schedule

from ..common.failure import is_failed
from .default_schedule import is_default_trace


def adapt_tile(factors: Sequence[int], extent: int) -> list[int]:
    """Tile ``extent`` like ``factors`` tiled another extent.

    From the innermost out, each factor is kept, or lowered to the largest
    divisor of what is left of ``extent``; the outermost takes the rest.

    >>> adapt_tile([4, 8, 2], 64)  # already valid
    [4, 8, 2]
    >>> adapt_tile([8, 8, 2], 56)  # 2 divides 56, 8 does not divide 28: 7 does
    [4, 7, 2]
    """
    if extent <= 0 or not factors:
        return list(factors)
    remaining = int(extent)
    inner: list[int] = []
    for factor in reversed([int(f) for f in factors[1:]]):
        factor = max(1, factor)
        while remaining % factor:
            factor -= 1
        inner.append(factor)
        remaining //= factor
    return [remaining, *reversed(inner)]


def transfer_trace(trace: Any, workload_mod: Any, postprocs: Sequence[Any], seed: int = 1) -> Schedule | None:
    """``trace`` (from another shape) replayed on ``workload_mod`` with adapted tiles; None when it does not apply."""
    sch = Schedule(workload_mod, seed=max(1, seed), debug_mask="none")

    def provider(inst: Any, inputs: list[Any], attrs: list[Any], decision: Any) -> Any:
        if decision is not None and inst.kind.name == "SamplePerfectTile":
            extent = sch.get(inputs[0]).extent
            if hasattr(extent, "value"):
                return adapt_tile([int(d) for d in decision], int(extent.value))
        return decision

    try:
        trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=provider)
        sch.enter_postproc()
        if not all(postproc.apply(sch) for postproc in postprocs):
            return None
    except Exception:  # noqa: BLE001 - TVM raises its own errors for every kind of mismatch; skip the trace
        return None
    return sch


#: instructions that only look blocks or loops up, inline an epilogue or give a convolution without one a write
#: cache where the epilogue was computed: they differ with the epilogue, not the schedule
_LOOKUPS = frozenset({"GetSBlock", "GetBlock", "GetLoops", "GetConsumers", "GetProducers", "GetChildBlocks",
                      "ComputeInline", "ReverseComputeInline", "CacheWrite"})


def _structure(trace: Any) -> list[str]:
    """The kinds of a trace's scheduling instructions before its postprocessing, lookups and inlining left out."""
    kinds: list[str] = []
    for inst in trace.insts:
        name = inst.kind.name
        if name == "EnterPostproc":
            break
        if name not in _LOOKUPS:
            kinds.append(name)
    return kinds


def _sampled(trace: Any) -> list[tuple[str, Any]]:
    """A trace's random draws in order: (instruction kind, decision)."""
    out = []
    for inst in trace.insts:
        if inst.kind.name == "EnterPostproc":
            break
        decision = trace.get_decision(inst)
        if decision is not None:
            out.append((inst.kind.name, decision))
    return out


def transfer_decisions(trace: Any, workload_mod: Any, spaces: Sequence[Any], postprocs: Sequence[Any],
                       seed: int = 1) -> Schedule | None:
    """``trace``'s decisions, tiles adapted, drawn by the design space of ``workload_mod`` that is built like it.

    ``spaces``: the workload's design spaces (``space_generator.generate_design_space``). One whose scheduling
    instructions, lookups and inlining aside, are ``trace``'s and whose draws are of the same kinds in the same
    order replays with ``trace``'s values; None where no space is built like ``trace`` or the result is rejected.
    """
    wanted, draws = _structure(trace), _sampled(trace)
    for space in spaces:
        own = space.trace
        if _structure(own) != wanted or [kind for kind, _ in _sampled(own)] != [kind for kind, _ in draws]:
            continue
        sch = Schedule(workload_mod, seed=max(1, seed), debug_mask="none")
        pending = iter(draws)

        def provider(inst: Any, inputs: list[Any], attrs: list[Any], decision: Any) -> Any:
            if decision is None:
                return decision
            _kind, theirs = next(pending)
            if inst.kind.name == "SamplePerfectTile":
                extent = sch.get(inputs[0]).extent
                if hasattr(extent, "value") and len(theirs) == len(decision):
                    return adapt_tile([int(d) for d in theirs], int(extent.value))
                return decision
            if inst.kind.name == "SampleCategorical":
                return theirs if 0 <= int(theirs) < len(attrs[0]) else decision
            return theirs

        try:
            own.apply_to_schedule(sch, remove_postproc=True, decision_provider=provider)
            sch.enter_postproc()
            if all(postproc.apply(sch) for postproc in postprocs):
                return sch
        except Exception:  # noqa: BLE001 - TVM raises its own errors for every kind of mismatch; try the next space
            continue
    return None


def transferred_candidates(context: Any, records: Iterable[Any], limit: int) -> list[Any]:
    """Up to ``limit`` distinct candidates for ``context``'s workload from ``records`` of similar workloads, in order.

    A record whose trace does not replay on the workload (another epilogue) gives its decisions instead
    (:func:`transfer_decisions`).
    """
    import tvm_ffi

    from ..tasks.signature import operator_signature

    postprocs = list(context.space_generator.postprocs or [])
    found: list[Any] = []
    seen: set[int] = set()
    spaces: list[Any] | None = None
    own_signature = cached_signature(operator_signature, context.mod)
    for i, record in enumerate(records):
        if len(found) >= limit:
            break
        # a trace of another epilogue may still replay, its extra epilogue blocks left as loops of their own
        same_operator = own_signature == cached_signature(operator_signature, record.workload.mod)
        sch = transfer_trace(record.trace, context.mod, postprocs, seed=i + 1) if same_operator else None
        if sch is None:
            if spaces is None:
                try:
                    spaces = list(context.space_generator.generate_design_space(context.mod))
                except Exception:  # noqa: BLE001 - no design space: nothing to carry decisions into
                    spaces = []
            sch = transfer_decisions(record.trace, context.mod, spaces, postprocs, seed=i + 1)
        if sch is None:
            continue
        key = int(tvm_ffi.structural_hash(sch.mod))
        if key in seen:
            continue
        seen.add(key)
        found.append(ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)))
    return found


_SIGNATURES: dict[Any, dict[int, Any]] = {}  # signature function -> structural hash -> signature
_SIGNATURES_KEPT = 20000


def cached_signature(signature_of: Any, mod: Any, key: int | None = None) -> Any:
    """``signature_of(mod)``, computed once per workload and process (it serialises the module).

    ``key``: ``mod``'s structural hash where the caller has it.
    """
    import tvm_ffi

    signatures = _SIGNATURES.setdefault(signature_of, {})
    if len(signatures) > _SIGNATURES_KEPT:
        signatures.clear()
    key = int(tvm_ffi.structural_hash(mod)) if key is None else key
    if key not in signatures:
        signatures[key] = signature_of(mod)
    return signatures[key]


def best_similar_records(
    records: Iterable[Any], workload_mod: Any, signature_of: Any, per_workload: int = 2
) -> list[Any]:
    """The ``per_workload`` fastest records of each other workload with ``workload_mod``'s operator signature.

    Default schedules (the untuned code) are left out: replayed, they give this
    workload's own default, which is measured anyway.

    Interleaved across workloads (best of each first, the nearest shape first:
    :func:`shape_distance`), so a few seeds already come from several shapes.
    """
    import tvm_ffi

    wanted = signature_of(workload_mod)
    own = int(tvm_ffi.structural_hash(workload_mod))
    groups: dict[int, list[Any]] = defaultdict(list)
    for record in records:
        mod = record.workload.mod
        key = int(tvm_ffi.structural_hash(mod))
        if key == own:
            continue
        if (cached_signature(signature_of, mod, key) == wanted and not is_failed([float(x) for x in record.run_secs])
                and not is_default_trace(record.trace)):
            groups[key].append(record)
    ranked = [sorted(group, key=lambda r: float(np.mean([float(x) for x in r.run_secs])))[:per_workload] for group in groups.values()]
    # the nearest shapes first: the first batch (and a one-trial tune, which measures only the first) gets
    # the schedule whose tiles needed the least adapting
    own_shapes = buffer_shapes(workload_mod)
    ranked.sort(key=lambda group: shape_distance(own_shapes, buffer_shapes(group[0].workload.mod)))
    return [group[i] for i in range(per_workload) for group in ranked if i < len(group)]


def buffer_shapes(mod: Any) -> list[tuple[int, ...]]:
    """The shapes of a workload's arguments (its entry function's buffers), symbolic dimensions as -1."""
    try:
        args = ms.arg_info.ArgInfo.from_entry_func(mod, remove_preproc=True)
    except Exception:  # noqa: BLE001 - a module without one entry function: no shape to compare
        return []
    return [tuple(int(d) if hasattr(d, "value") or isinstance(d, int) else -1 for d in getattr(a, "shape", ())) for a in args]


def shape_distance(a: Sequence[tuple[int, ...]], b: Sequence[tuple[int, ...]]) -> float:
    """How far two workloads' buffer shapes are: the sum of ``|log(x / y)|`` over matching dimensions.

    0 for the same shapes; infinite where the buffers do not pair up (another rank or count).

    >>> shape_distance([(1, 64, 56, 56)], [(1, 64, 28, 28)]) == 2 * math.log(2)
    True
    """
    if len(a) != len(b) or any(len(x) != len(y) for x, y in zip(a, b)):
        return math.inf
    total = 0.0
    for x, y in zip(a, b):
        for p, q in zip(x, y):
            if p <= 0 or q <= 0:
                total += 0.0 if p == q else 1.0
            else:
                total += abs(math.log(p / q))
    return total
