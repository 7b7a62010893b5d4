"""Leases that outlive a restart (core/leases.py): the lease token, the worker holding it and
its deadline (wall ms) on the job row of a reserved job whose lock is kept across a restart
(a bunqueue PULL with `owner`). NULL for every other job.

Revision ID: 0005
Revises: 0004
"""
from alembic import op
import sqlalchemy as sa

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("lease_token", sa.String(64)),
    ("lease_owner", sa.String(128)),
    ("lease_until_ms", sa.BigInteger),
)


def upgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        for name, type_ in _COLUMNS:
            b.add_column(sa.Column(name, type_, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        for name, _ in reversed(_COLUMNS):
            b.drop_column(name)
