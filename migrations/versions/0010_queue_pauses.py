"""Pauses shared by the nodes of one database (issue 19, docs/scaling.md): one row per paused
queue, written by a node in shared mode when a client pauses a queue (beanstalk pause-tube);
the claim (core/shared_store.py) skips a queue whose row has `until_ms` in the future, and the
leading node deletes the rows that ran out and notifies their queues (core/shared_reads.py
`end_pauses`). Unused by single-node servers (their pauses live in memory, as beanstalkd's).

- `queue`: the queue name; `until_ms`: wall ms when the pause ends; `pause_ms`: its length
  (stats-tube `pause`).

On PostgreSQL also a partial index `jobs_buried (queue, seq) WHERE state = 'buried'` for the
global `kick` and `peek-buried` (an entry is written only when a job is buried: the put,
reserve and delete path does not touch it; without it each kick scans the jobs table: 32 ms at
111,000 rows, benchmarks/shared_admin.py).

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
    if op.get_bind().dialect.name == "postgresql":
        op.execute("CREATE INDEX jobs_buried ON jobs (queue, seq) WHERE state = 'buried'")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX IF EXISTS jobs_buried")
    op.drop_table("queue_pauses")
