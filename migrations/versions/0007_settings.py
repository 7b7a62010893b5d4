"""Engine settings kept across restarts (issue 16): cron schedules, queue settings (rate limit,
concurrency limit, stall config) and webhook registrations. Each table has its key, the columns
an operator queries, and the rest of the record as a MessagePack map in `spec` (core/schema.py).

Revision ID: 0007
Revises: 0006
"""
from alembic import op
import sqlalchemy as sa

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cron_schedules",
        sa.Column("name", sa.String(256), primary_key=True),
        sa.Column("queue", sa.String(256), nullable=False),
        sa.Column("next_run_ms", sa.BigInteger, nullable=True),
        sa.Column("executions", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("spec", sa.LargeBinary, nullable=False),
    )
    op.create_table(
        "queue_settings",
        sa.Column("queue", sa.String(256), primary_key=True),
        sa.Column("spec", sa.LargeBinary, nullable=False),
    )
    op.create_table(
        "webhooks",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("created_ms", sa.BigInteger, nullable=False),
        sa.Column("spec", sa.LargeBinary, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("webhooks")
    op.drop_table("queue_settings")
    op.drop_table("cron_schedules")
