"""Schema version 2: hash columns as unique keys.

Adds ``workloads.mod_hash`` (unique with ``shash``: concurrent writers
committing the same new module get one row) and ``records.target_hash`` (the
unique key and the best-record index use the hash, not unbounded TEXT, which
PostgreSQL cannot index beyond about 2.7 kB). Rows of the same serialised
module, which version 1 allowed, are merged: a record both rows hold stays with
the first row.

Revision ID: 0002
Revises: 0001
"""

import hashlib

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_workloads = sa.table(
    "workloads", sa.column("id", sa.Integer), sa.column("shash", sa.String),
    sa.column("mod_hash", sa.String), sa.column("mod_json", sa.Text),
)
_records = sa.table(
    "records", sa.column("id", sa.Integer), sa.column("workload_id", sa.Integer),
    sa.column("target_json", sa.Text), sa.column("target_hash", sa.String),
    sa.column("candidate_hash", sa.String),
)
_meta = sa.table("meta", sa.column("key", sa.String), sa.column("value", sa.Text))


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _fill_hashes(conn: sa.engine.Connection) -> None:
    for row in conn.execute(sa.select(_workloads.c.id, _workloads.c.mod_json)).all():
        conn.execute(_workloads.update().where(_workloads.c.id == row.id).values(mod_hash=_sha256(row.mod_json)))
    for target in conn.execute(sa.select(_records.c.target_json).distinct()).scalars().all():
        conn.execute(
            _records.update().where(_records.c.target_json == target).values(target_hash=_sha256(target))
        )


def _merge_duplicate_workloads(conn: sa.engine.Connection) -> None:
    first: dict[tuple[str, str], int] = {}
    rows = conn.execute(
        sa.select(_workloads.c.id, _workloads.c.shash, _workloads.c.mod_hash).order_by(_workloads.c.id)
    ).all()
    for row in rows:
        keep = first.setdefault((row.shash, row.mod_hash), row.id)
        if keep == row.id:
            continue
        other = _records.alias("other")
        conn.execute(
            _records.update()
            .where(
                _records.c.workload_id == row.id,
                ~sa.exists().where(
                    other.c.workload_id == keep,
                    other.c.target_hash == _records.c.target_hash,
                    other.c.candidate_hash == _records.c.candidate_hash,
                ),
            )
            .values(workload_id=keep)
        )
        conn.execute(_records.delete().where(_records.c.workload_id == row.id))
        conn.execute(_workloads.delete().where(_workloads.c.id == row.id))


def upgrade() -> None:
    conn = op.get_bind()
    op.execute("ALTER TABLE workloads ADD COLUMN mod_hash VARCHAR(64)")
    op.execute("ALTER TABLE records ADD COLUMN target_hash VARCHAR(64)")
    _fill_hashes(conn)
    _merge_duplicate_workloads(conn)
    if conn.dialect.name == "postgresql":
        op.execute("ALTER TABLE records DROP CONSTRAINT uq_records_candidate")
    # SQLite cannot drop version 1's UNIQUE (workload_id, target_json,
    # candidate_hash); it says the same as the new one, so it stays.
    op.execute("DROP INDEX ix_records_best")
    op.execute("CREATE UNIQUE INDEX uq_workloads_module ON workloads (shash, mod_hash)")
    op.execute("CREATE UNIQUE INDEX uq_records_candidate ON records (workload_id, target_hash, candidate_hash)")
    op.execute("CREATE INDEX ix_records_best ON records (workload_id, target_hash, mean_run_sec)")
    conn.execute(_meta.update().where(_meta.c.key == "schema_version").values(value="2"))


def downgrade() -> None:
    raise NotImplementedError("a version-2 history cannot go back to version 1; export it instead")
