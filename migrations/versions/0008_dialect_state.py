"""A dialect's own small records (issue 17): one row per key, the value a MessagePack `spec`
(core/schema.py dialect_state; core/port_dialect.py). glide-mq keeps its per-queue id
counters, dedup entries, ordering counters and function-library flag here.

Revision ID: 0008
Revises: 0007
"""
from alembic import op
import sqlalchemy as sa

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dialect_state",
        sa.Column("key", sa.String(1024), primary_key=True),
        sa.Column("spec", sa.LargeBinary, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("dialect_state")
