"""The commit sequence (issue 15, storage faults): a `jobgate_meta` row `commit_seq` that every
group commit over a network (PostgreSQL; SQLite's commit outcome is never unknown) sets to the writer's running batch count, in the same transaction as its rows. A
commit whose outcome is unknown (the connection was lost during COMMIT) is resolved on the next
connection by reading it back: equal to the batch's value means the batch is stored and must not
be written twice (core/storage.py, Store.write with `verify`).

Revision ID: 0006
Revises: 0005
"""
from alembic import op
import sqlalchemy as sa

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    meta = sa.table("jobgate_meta", sa.column("key", sa.String), sa.column("value", sa.BigInteger))
    op.bulk_insert(meta, [{"key": "commit_seq", "value": 0}])


def downgrade() -> None:
    op.execute("DELETE FROM jobgate_meta WHERE key = 'commit_seq'")
