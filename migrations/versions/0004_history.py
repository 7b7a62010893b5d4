"""History for the pipeline: job_events also records the job's uid, its canonical priority, the
payload size (bytes), the worker (connection or lock owner) and the error text of failures.

Revision ID: 0004
Revises: 0003
"""
from alembic import op
import sqlalchemy as sa

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("uid", sa.String(64)),
    ("priority", sa.BigInteger),
    ("payload_size", sa.Integer),
    ("worker", sa.String(128)),
    ("error", sa.Text),
)


def upgrade() -> None:
    with op.batch_alter_table("job_events") as b:
        for name, type_ in _COLUMNS:
            b.add_column(sa.Column(name, type_, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job_events") as b:
        for name, _ in reversed(_COLUMNS):
            b.drop_column(name)
