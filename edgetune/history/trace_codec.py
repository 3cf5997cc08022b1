"""Tuning records as plain JSON, layout rewrites included.

``TuningRecord.as_json()`` fails on a trace that rewrote a weight's layout
(MetaSchedule's ``RewriteLayout`` postprocessor, ``tuning.prepack_weights``): in
TVM 0.27 the record's JSON keeps the ``TransformLayout`` instruction's
``IndexMap`` as an object, which its Python unpacking cannot handle, while the
trace's own JSON (``Trace.as_json()``) writes the map as text that
``TuningRecord.from_json`` reads back. So a record's trace is taken from there;
every other trace is the same either way, and stored hashes do not change.
"""

from __future__ import annotations

from typing import Any

import tvm_ffi
from tvm.tirx import FloatImm, IntImm


def plain_json(obj: Any) -> Any:
    """TVM FFI containers and immediates as Python JSON."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, (IntImm, FloatImm)):
        return obj.value
    if isinstance(obj, (tvm_ffi.Array, list, tuple)):
        return [plain_json(item) for item in obj]
    if isinstance(obj, (tvm_ffi.Map, dict)):
        return {plain_json(key): plain_json(value) for key, value in obj.items()}
    raise TypeError(f"a tuning record's JSON must hold JSON values, got {type(obj).__name__} instead")


def trace_as_json(trace: Any) -> Any:
    """``trace.as_json()`` as plain JSON, a layout rewrite's index map as text."""
    return plain_json(trace.as_json())


def record_as_json(record: Any) -> list[Any]:
    """``record.as_json()`` that also holds a layout rewrite: ``[trace, run_secs, target, args_info]``."""
    whole = tvm_ffi.get_global_func("s_tir.meta_schedule.TuningRecordAsJSON")(record)
    return [trace_as_json(record.trace), *(plain_json(part) for part in list(whole)[1:])]


def candidate_hash(trace: Any) -> str:
    """The key the history stores a candidate under (``records.candidate_hash``): what ``retime_candidate`` takes."""
    from .sql import canonical, sha256

    return sha256(canonical(trace_as_json(trace)))
