"""Tables of the tuning history, in portable SQLAlchemy Core.

Only portable column types are used so that the same tables work on SQLite and
PostgreSQL. Times are Unix seconds (``Double``), which every backend stores and
compares the same way. JSON is stored as canonical text
(``json.dumps(..., sort_keys=True)``) rather than a JSON column type, because
equality on the text is what the unique constraints and the target filter need;
they compare SHA-256 hex digests of the text (bounded VARCHARs, indexable on
every backend) rather than the TEXT itself.
"""

from __future__ import annotations

import sqlalchemy as sa

from edgetune.common.choices import TIMINGS  # noqa: F401  (how a record was timed; re-exported beside the schema)

#: Bump when a table or the meaning of a column changes; a history file written
#: with another version is refused instead of being misread.
SCHEMA_VERSION = 5
# Version 2 added ``workloads.mod_hash`` (unique with ``shash``: concurrent writers
# committing the same new module get one row) and ``records.target_hash`` (the
# unique key and the best-record index use the hash, not unbounded TEXT, which
# PostgreSQL cannot index beyond about 2.7 kB). Version 3 added ``board_id`` to
# the unique key of a record: two boards measuring one candidate keep two rows.
# Version 4 added ``claims``: tuners sharing a history lease a candidate before
# measuring it, so two of them never measure one candidate at once. Version 5
# added ``records.timing`` to the key: a candidate timed on flushed caches and the
# same one timed warm are two measurements on two scales, never compared.


metadata = sa.MetaData()

#: Key/value facts about the file itself: ``schema_version``, ``created_at``,
#: ``created_by``.
meta = sa.Table(
    "meta",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

#: One row per distinct IRModule. ``shash`` is only a bucket: two rows are the
#: same workload when their modules are structurally equal. ``mod_hash`` is the
#: SHA-256 of ``mod_json``; (shash, mod_hash) is unique, so writers committing
#: the same module at once insert-or-select one row. Structurally equal modules
#: serialised differently (another TVM version) may still have two rows.
workloads = sa.Table(
    "workloads",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("shash", sa.String(32), nullable=False),
    sa.Column("mod_hash", sa.String(64), nullable=False),
    sa.Column("mod_json", sa.Text, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.UniqueConstraint("shash", "mod_hash", name="uq_workloads_module"),
)

#: One row per measured candidate (workload, target, trace, board, timing). ``mean_run_sec`` is
#: NULL for records MetaSchedule must never pick: failed measurements and traces
#: without any scheduling instruction (TVM's ``TuningRecord::IsValid``).
records = sa.Table(
    "records",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "workload_id",
        sa.Integer,
        sa.ForeignKey("workloads.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("target_json", sa.Text, nullable=False),
    # SHA-256 of target_json: the indexed stand-in for the unbounded text
    sa.Column("target_hash", sa.String(64), nullable=False),
    sa.Column("target_kind", sa.String(64), nullable=False),
    sa.Column("trace_json", sa.Text, nullable=False),
    sa.Column("candidate_hash", sa.String(64), nullable=False),
    sa.Column("run_secs_json", sa.Text, nullable=True),
    sa.Column("mean_run_sec", sa.Double, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("args_info_json", sa.Text, nullable=False),
    sa.Column("board_id", sa.String(255), nullable=False),
    sa.Column("timing", sa.String(16), nullable=False),
    sa.Column("tvm_version", sa.String(64), nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.UniqueConstraint(
        "workload_id", "target_hash", "candidate_hash", "board_id", "timing", name="uq_records_candidate"
    ),
    sa.Index("ix_records_best", "workload_id", "target_hash", "mean_run_sec"),
)


#: Leases on candidates being measured (see :mod:`edgetune.tuning.claims`). One row
#: per (target, candidate): ``candidate_key`` is the structural hash of the
#: scheduled module, which names the workload and the schedule together (it is
#: all a builder sees). The unique key makes claiming insert-or-fail; an expired
#: row (``expires_at``, the database's clock) is taken over in the same
#: statement. ``record_id`` set: measured, the row points at the result and holds
#: no lease any more.
claims = sa.Table(
    "claims",
    metadata,
    sa.Column("target_hash", sa.String(64), nullable=False),
    sa.Column("candidate_key", sa.String(64), nullable=False),
    sa.Column("owner_host", sa.String(255), nullable=False),
    sa.Column("owner_pid", sa.Integer, nullable=False),
    sa.Column("owner_run", sa.String(64), nullable=False),
    sa.Column("claimed_at", sa.Double, nullable=False),
    sa.Column("expires_at", sa.Double, nullable=False),
    sa.Column("record_id", sa.Integer, sa.ForeignKey("records.id", ondelete="CASCADE"), nullable=True),
    sa.PrimaryKeyConstraint("target_hash", "candidate_key", name="pk_claims"),
    sa.Index("ix_claims_owner", "owner_run"),
)


#: Alembic's own bookkeeping table, created with the others so that a new history
#: is already "stamped" at the newest revision (see :mod:`edgetune.history.migrate`).
alembic_version = sa.Table(
    "alembic_version",
    metadata,
    sa.Column("version_num", sa.String(32), primary_key=True),
)


def revision_of(version: int) -> str:
    """The Alembic revision that brings a history to schema ``version``."""
    return f"{version:04d}"
