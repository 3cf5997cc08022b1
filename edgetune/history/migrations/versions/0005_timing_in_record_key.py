"""Schema version 5: how a record was timed (``records.timing``) is part of its key.

Candidates timed on flushed caches (edgetune's default on CPUs since this
version) and candidates timed warm are on two scales: a weight-heavy kernel
can be several times faster warm. Every record written before this version is
marked ``warm``, which is how the default profile timed them. SQLite cannot
change a table's constraints in place, so its records table is rebuilt (rename,
create, copy, drop); PostgreSQL adds the column and swaps the constraint.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_meta = sa.table("meta", sa.column("key", sa.String), sa.column("value", sa.Text))
_COLUMNS = (
    "id, workload_id, target_json, target_hash, target_kind, trace_json, candidate_hash, run_secs_json, "
    "mean_run_sec, error, args_info_json, board_id, tvm_version, created_at"
)
_NEW_KEY = "workload_id, target_hash, candidate_hash, board_id, timing"


def _rebuild_sqlite() -> None:
    op.execute("ALTER TABLE records RENAME TO records_v4")
    op.execute("DROP INDEX IF EXISTS ix_records_best")
    op.execute("DROP INDEX IF EXISTS uq_records_candidate")
    op.execute(
        "CREATE TABLE records ("
        " id INTEGER NOT NULL, workload_id INTEGER NOT NULL,"
        " target_json TEXT NOT NULL, target_hash VARCHAR(64) NOT NULL, target_kind VARCHAR(64) NOT NULL,"
        " trace_json TEXT NOT NULL, candidate_hash VARCHAR(64) NOT NULL, run_secs_json TEXT,"
        " mean_run_sec DOUBLE, error TEXT, args_info_json TEXT NOT NULL, board_id VARCHAR(255) NOT NULL,"
        " timing VARCHAR(16) NOT NULL,"
        " tvm_version VARCHAR(64) NOT NULL, created_at DOUBLE NOT NULL, PRIMARY KEY (id),"
        f" CONSTRAINT uq_records_candidate UNIQUE ({_NEW_KEY}),"
        " FOREIGN KEY(workload_id) REFERENCES workloads (id) ON DELETE CASCADE)"
    )
    op.execute(f"INSERT INTO records ({_COLUMNS}, timing) SELECT {_COLUMNS}, 'warm' FROM records_v4")
    op.execute("DROP TABLE records_v4")


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "sqlite":
        # claims.record_id references records: with foreign keys on (every edgetune connection),
        # renaming records would point it at records_v4 and dropping that would cascade. So the
        # claims are set aside, their table rebuilt after records, and put back.
        op.execute("CREATE TEMPORARY TABLE claims_v4 AS SELECT * FROM claims")
        op.execute("DROP TABLE claims")
        _rebuild_sqlite()
        op.execute(
            "CREATE TABLE claims ("
            " target_hash VARCHAR(64) NOT NULL, candidate_key VARCHAR(64) NOT NULL,"
            " owner_host VARCHAR(255) NOT NULL, owner_pid INTEGER NOT NULL, owner_run VARCHAR(64) NOT NULL,"
            " claimed_at DOUBLE NOT NULL, expires_at DOUBLE NOT NULL, record_id INTEGER,"
            " CONSTRAINT pk_claims PRIMARY KEY (target_hash, candidate_key),"
            " FOREIGN KEY(record_id) REFERENCES records (id) ON DELETE CASCADE)"
        )
        op.execute("CREATE INDEX ix_claims_owner ON claims (owner_run)")
        op.execute("INSERT INTO claims SELECT * FROM claims_v4")
        op.execute("DROP TABLE claims_v4")
    else:
        op.execute("ALTER TABLE records ADD COLUMN timing VARCHAR(16) NOT NULL DEFAULT 'warm'")
        op.execute("ALTER TABLE records ALTER COLUMN timing DROP DEFAULT")
        op.execute("ALTER TABLE records DROP CONSTRAINT IF EXISTS uq_records_candidate")
        op.execute("DROP INDEX IF EXISTS uq_records_candidate")
        op.execute(f"ALTER TABLE records ADD CONSTRAINT uq_records_candidate UNIQUE ({_NEW_KEY})")
        op.execute("DROP INDEX IF EXISTS ix_records_best")
    op.execute("CREATE INDEX ix_records_best ON records (workload_id, target_hash, mean_run_sec)")
    conn.execute(_meta.update().where(_meta.c.key == "schema_version").values(value="5"))


def downgrade() -> None:
    raise NotImplementedError("a version-5 history cannot go back to version 4; export it instead")
