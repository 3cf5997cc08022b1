"""Schema version 3: the board is part of a record's key.

Two boards under one key measuring the same candidate keep two rows (one
per board) instead of overwriting each other. SQLite cannot change a table's
constraints in place, so its records table is rebuilt (rename, create,
copy, drop); PostgreSQL swaps the constraint.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_meta = sa.table("meta", sa.column("key", sa.String), sa.column("value", sa.Text))
_COLUMNS = (
    "id, workload_id, target_json, target_hash, target_kind, trace_json, candidate_hash, run_secs_json, "
    "mean_run_sec, error, args_info_json, board_id, tvm_version, created_at"
)
_NEW_KEY = "workload_id, target_hash, candidate_hash, board_id"


def _rebuild_sqlite() -> None:
    op.execute("ALTER TABLE records RENAME TO records_v2")
    op.execute("DROP INDEX IF EXISTS ix_records_best")
    op.execute("DROP INDEX IF EXISTS uq_records_candidate")
    op.execute(
        "CREATE TABLE records ("
        " id INTEGER NOT NULL, workload_id INTEGER NOT NULL,"
        " target_json TEXT NOT NULL, target_hash VARCHAR(64) NOT NULL, target_kind VARCHAR(64) NOT NULL,"
        " trace_json TEXT NOT NULL, candidate_hash VARCHAR(64) NOT NULL, run_secs_json TEXT,"
        " mean_run_sec DOUBLE, error TEXT, args_info_json TEXT NOT NULL, board_id VARCHAR(255) NOT NULL,"
        " tvm_version VARCHAR(64) NOT NULL, created_at DOUBLE NOT NULL, PRIMARY KEY (id),"
        f" CONSTRAINT uq_records_candidate UNIQUE ({_NEW_KEY}),"
        " FOREIGN KEY(workload_id) REFERENCES workloads (id) ON DELETE CASCADE)"
    )
    op.execute(f"INSERT INTO records ({_COLUMNS}) SELECT {_COLUMNS} FROM records_v2")
    op.execute("DROP TABLE records_v2")


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "sqlite":
        _rebuild_sqlite()
    else:
        op.execute("ALTER TABLE records DROP CONSTRAINT IF EXISTS uq_records_candidate")
        op.execute("DROP INDEX IF EXISTS uq_records_candidate")
        op.execute(f"ALTER TABLE records ADD CONSTRAINT uq_records_candidate UNIQUE ({_NEW_KEY})")
        op.execute("DROP INDEX IF EXISTS ix_records_best")
    op.execute("CREATE INDEX ix_records_best ON records (workload_id, target_hash, mean_run_sec)")
    conn.execute(_meta.update().where(_meta.c.key == "schema_version").values(value="3"))


def downgrade() -> None:
    raise NotImplementedError("a version-3 history cannot go back to version 2; export it instead")
