"""Rate limits across the nodes of one database (issue 19, docs/scaling.md "Rate limits
across nodes"): a node in shared mode takes the tokens of a queue's rate limit from its
bucket in this table, so that the limit counts the reservations of every node
(core/shared_tokens.py).

- `queue`: one row per rate-limited queue a node took tokens of.
- `tokens`: what the bucket held at `refilled_ms` (a float: a window refills continuously).
- `rate_max`, `window_ms`: the limit the bucket is for (a node taking under another limit
  starts it full again: a new limit); floats, as bunqueue takes any finite number for both
  (a window of 60000.5 ms stays that, 1e19 ms fits).
- `refilled_ms`: the database's wall ms of the last refill.

Unused by single-node servers (their buckets are in memory).

Revision ID: 0013
Revises: 0012
"""
from alembic import op
import sqlalchemy as sa

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "queue_tokens",
        sa.Column("queue", sa.String(256), primary_key=True),
        sa.Column("tokens", sa.Float, nullable=False),
        sa.Column("rate_max", sa.Float, nullable=False),
        sa.Column("window_ms", sa.Float, nullable=False),
        sa.Column("refilled_ms", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("queue_tokens")
