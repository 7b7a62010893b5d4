"""Dedup keys across the nodes of one database (issue 19, docs/scaling.md "Dedup keys across
nodes"): a job's bunqueue `uniqueKey` in a column of its own, so that a node in shared mode can
ask the database whether an unfinished job of the queue holds the key, whichever node put it or
holds it now (the key is also in the `extras` MessagePack, which SQL cannot read).

- `jobs.dedup_key`: the key as text (core.model.dedup_text: a string as is, any other value
  as `#` and the hex of its MessagePack, so that 5 and "5" stay two keys as they are on one
  server); NULL for jobs without a key. Written at insert; the key never changes afterwards.
  A job holds its key while `result IS NULL` (unfinished), as core/extras.py does in memory.

The partial index `jobs_dedup (queue, dedup_key) WHERE dedup_key IS NOT NULL` is created by the
first node that joins, with the shared mode's other indexes (core/shared_store.py
SHARED_INDEXES), so single-node servers pay nothing for it; the downgrade drops it.

Revision ID: 0011
Revises: 0010
"""
from alembic import op
import sqlalchemy as sa

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("dedup_key", sa.Text, nullable=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX IF EXISTS jobs_dedup")
    op.drop_column("jobs", "dedup_key")
