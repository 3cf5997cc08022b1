"""Schema version 4: claims (leases) on candidates being measured.

Several tuners sharing one history claim a candidate before measuring it, so
two of them never measure the same one at once. A new table only; existing
rows are untouched.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_meta = sa.table("meta", sa.column("key", sa.String), sa.column("value", sa.Text))


def upgrade() -> None:
    conn = op.get_bind()
    op.create_table(
        "claims",
        sa.Column("target_hash", sa.String(64), nullable=False),
        sa.Column("candidate_key", sa.String(64), nullable=False),
        sa.Column("owner_host", sa.String(255), nullable=False),
        sa.Column("owner_pid", sa.Integer, nullable=False),
        sa.Column("owner_run", sa.String(64), nullable=False),
        sa.Column("claimed_at", sa.Double, nullable=False),
        sa.Column("expires_at", sa.Double, nullable=False),
        sa.Column("record_id", sa.Integer, sa.ForeignKey("records.id", ondelete="CASCADE"), nullable=True),
        sa.PrimaryKeyConstraint("target_hash", "candidate_key", name="pk_claims"),
    )
    op.create_index("ix_claims_owner", "claims", ["owner_run"])
    conn.execute(_meta.update().where(_meta.c.key == "schema_version").values(value="4"))


def downgrade() -> None:
    raise NotImplementedError("a version-4 history cannot go back to version 3; export it instead")
