"""Pauses shared by the nodes of one database (issue 19, docs/scaling.md): one row per paused
queue, written by a node in shared mode when a client pauses a queue (beanstalk pause-tube);
the claim (core/shared_store.py) skips a queue whose row has `until_ms` in the future, and the
leading node deletes the rows that ran out and notifies their queues (core/shared_reads.py
`end_pauses`). Unused by single-node servers (their pauses live in memory, as beanstalkd's).

- `queue`: the queue name; `until_ms`: wall ms when the pause ends; `pause_ms`: its length
  (stats-tube `pause`).

The partial index `jobs_buried (queue, seq) WHERE state = 'buried'` for the global `kick` and
`peek-buried` (without it each kick scans the jobs table: 32 ms at 111,000 rows,
benchmarks/shared_admin.py) is created by the first node that joins, with the shared mode's
other indexes (core/shared_store.py SHARED_INDEXES); the downgrade drops it.

Revision ID: 0010
Revises: 0009
"""
from alembic import op
import sqlalchemy as sa

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "queue_pauses",
        sa.Column("queue", sa.String(256), primary_key=True),
        sa.Column("until_ms", sa.BigInteger, nullable=False),
        sa.Column("pause_ms", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX IF EXISTS jobs_buried")
    op.drop_table("queue_pauses")
