"""Concurrency limits across the nodes of one database (issue 19, docs/scaling.md
"Concurrency limits across nodes"): a node in shared mode reserves jobs of a queue with a
concurrency limit only under *slots* it holds in this table, so that the limit counts the
active jobs of every node (core/shared_slots.py).

- `queue`, `node`: one row per queue and node holding slots (node name as in `jobs.node`);
  the row with node `''` holds nothing and is the queue's lock (taken FOR UPDATE while a node
  takes slots, so that two nodes never hand out the same free slot).
- `held`: how many jobs of the queue the node may have reserved at once (never fewer than it
  has reserved).
- `until_ms`: wall ms until which the slots count; the holder moves it forward every second,
  so the slots of a node that died lapse (SLOT_LEASE_MS).

Unused by single-node servers (their concurrency limits count their own reserved jobs).

Revision ID: 0012
Revises: 0011
"""
from alembic import op
import sqlalchemy as sa

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "queue_slots",
        sa.Column("queue", sa.String(256), primary_key=True),
        sa.Column("node", sa.String(256), primary_key=True),
        sa.Column("held", sa.Integer, nullable=False),
        sa.Column("until_ms", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("queue_slots")
