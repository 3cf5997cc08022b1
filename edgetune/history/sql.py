"""Small SQL helpers the history's SQL modules share: hashes, canonical JSON, the dialect's INSERT."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import sqlalchemy as sa
import tvm_ffi
from sqlalchemy.engine import Connection
from tvm.target import Target

from edgetune.history.schema import records

#: The columns a TuningRecord is rebuilt from.
RECORD_COLUMNS = (
    records.c.id,
    records.c.workload_id,
    records.c.trace_json,
    records.c.run_secs_json,
    records.c.target_json,
    records.c.args_info_json,
    records.c.error,
)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def insert_statement(conn: Connection, table: sa.Table) -> Any:
    """The dialect's INSERT, which has ``on_conflict_do_nothing/update`` on both backends."""
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table)


def canonical(obj: Any) -> str:
    """JSON text that is equal exactly when the values are equal."""
    return json.dumps(obj, sort_keys=True)


def plain(obj: Any) -> Any:
    """Turn TVM containers (``Target.export()`` output) into plain JSON values."""
    if isinstance(obj, tvm_ffi.Map | dict):
        return {str(key): plain(value) for key, value in obj.items()}
    if isinstance(obj, tvm_ffi.Array | list | tuple):
        return [plain(value) for value in obj]
    return obj


def target_json(target: Target) -> str:
    """Canonical JSON of a target, as TuningRecord.as_json() writes it."""
    return canonical(plain(target.export()))


def has_schedule(trace_json: Any) -> bool:
    """Mirror TVM's TuningRecord::IsValid: a trace needs an instruction before postprocessing."""
    insts = trace_json[0]
    return bool(insts) and insts[0][0] != "EnterPostproc"


def one_line(err: BaseException) -> str:
    """The driver's own message, first line only, for a one-line HistoryError."""
    cause = getattr(err, "orig", None) or err
    text = str(cause).strip()
    return text.splitlines()[0] if text else type(cause).__name__
