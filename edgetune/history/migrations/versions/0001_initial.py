"""Schema version 1: meta, workloads and records (the first released history).

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )
    op.create_table(
        "workloads",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("shash", sa.String(20), nullable=False, index=True),
        sa.Column("mod_json", sa.Text, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
    )
    op.create_table(
        "records",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("workload_id", sa.Integer, sa.ForeignKey("workloads.id", ondelete="CASCADE"), nullable=False),
        sa.Column("target_json", sa.Text, nullable=False),
        sa.Column("target_kind", sa.String(64), nullable=False),
        sa.Column("trace_json", sa.Text, nullable=False),
        sa.Column("candidate_hash", sa.String(64), nullable=False),
        sa.Column("run_secs_json", sa.Text, nullable=True),
        sa.Column("mean_run_sec", sa.Double, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("args_info_json", sa.Text, nullable=False),
        sa.Column("board_id", sa.String(255), nullable=False),
        sa.Column("tvm_version", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.UniqueConstraint("workload_id", "target_json", "candidate_hash", name="uq_records_candidate"),
    )
    op.create_index("ix_records_best", "records", ["workload_id", "target_json", "mean_run_sec"])
    op.bulk_insert(
        sa.table("meta", sa.column("key", sa.String), sa.column("value", sa.Text)),
        [{"key": "schema_version", "value": "1"}],
    )


def downgrade() -> None:
    op.drop_table("records")
    op.drop_table("workloads")
    op.drop_table("meta")
