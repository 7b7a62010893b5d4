"""Initial schema: jobs, queues, job_events history, jobgate_meta.

Revision ID: 0001
Revises:
"""
from alembic import op
import sqlalchemy as sa

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", BigId, primary_key=True, autoincrement=False),
        sa.Column("uid", sa.String(64), nullable=True),
        sa.Column("queue", sa.String(256), nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=False),
        sa.Column("priority", sa.BigInteger, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("created_ms", sa.BigInteger, nullable=False),
        sa.Column("ready_at_ms", sa.BigInteger, nullable=True),
        sa.Column("delay_ms", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("ttr_ms", sa.BigInteger, nullable=False),
        sa.Column("reserves", sa.Integer, nullable=False, server_default="0"),
        sa.Column("timeouts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("releases", sa.Integer, nullable=False, server_default="0"),
        sa.Column("buries", sa.Integer, nullable=False, server_default="0"),
        sa.Column("kicks", sa.Integer, nullable=False, server_default="0"),
        sa.Column("dialect", sa.String(16), nullable=False),
    )
    op.create_index("ux_jobs_uid", "jobs", ["uid"], unique=True,
                    sqlite_where=sa.text("uid IS NOT NULL"),
                    postgresql_where=sa.text("uid IS NOT NULL"))
    op.create_table(
        "queues",
        sa.Column("name", sa.String(256), primary_key=True),
        sa.Column("created_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "job_events",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.BigInteger, nullable=False),
        sa.Column("queue", sa.String(256), nullable=False),
        sa.Column("dialect", sa.String(16), nullable=False),
        sa.Column("event", sa.String(16), nullable=False),
        sa.Column("at_ms", sa.BigInteger, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
    )
    meta = op.create_table(
        "jobgate_meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.BigInteger, nullable=False),
    )
    op.bulk_insert(meta, [{"key": "next_id", "value": 1}])


def downgrade() -> None:
    op.drop_table("jobgate_meta")
    op.drop_table("job_events")
    op.drop_table("queues")
    op.drop_index("ux_jobs_uid", "jobs")
    op.drop_table("jobs")
