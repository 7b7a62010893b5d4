"""Several nodes on one PostgreSQL (issue 19, docs/scaling.md): the columns and indexes of the
shared storage mode. Harmless for single-node servers: two nullable columns; on PostgreSQL two
sequences and three partial indexes.

- `jobs.node`: the node (a jobgate process in shared mode) whose client holds the reserved job;
  NULL in every other state and in single-node mode.
- `jobs.seq`: the claim order among jobs of equal priority (FIFO across nodes): on PostgreSQL
  taken from sequence `jobgate_job_seq` at insert; NULL on SQLite (single node: ids are in
  order there).
- Sequence `jobgate_job_ids` (PostgreSQL): job ids for shared nodes, handed out in blocks
  (INCREMENT BY 1,000,000: one `nextval` is one node's block), so that ids are unique across
  nodes without a round trip per put.
- Partial indexes (PostgreSQL): `jobs_claim (queue, priority, seq) WHERE state = 'ready'` for
  the claim query, `jobs_due (ready_at_ms) WHERE state = 'delayed'` for promoting due delayed
  jobs, `jobs_held (lease_until_ms) WHERE state = 'reserved'` for the rescuer,
  `jobs_uid (uid)` for a node reading a job it does not hold by its uid (workq, bunqueue),
  `jobs_expiry (expires_at_ms)` for the leader's evictions (TTL, result retention).

Revision ID: 0009
Revises: 0008
"""
from alembic import op
import sqlalchemy as sa

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("node", sa.String(128), nullable=True))
    op.add_column("jobs", sa.Column("seq", sa.BigInteger, nullable=True))
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("CREATE SEQUENCE jobgate_job_seq")
    op.execute("ALTER TABLE jobs ALTER COLUMN seq SET DEFAULT nextval('jobgate_job_seq')")
    op.execute("UPDATE jobs SET seq = id")
    op.execute("SELECT setval('jobgate_job_seq', GREATEST((SELECT max(id) FROM jobs), 1))")
    op.execute("CREATE SEQUENCE jobgate_job_ids INCREMENT BY 1000000 MINVALUE 1 START WITH 1")
    op.execute("CREATE INDEX jobs_claim ON jobs (queue, priority, seq) WHERE state = 'ready'")
    op.execute("CREATE INDEX jobs_due ON jobs (ready_at_ms) WHERE state = 'delayed'")
    op.execute("CREATE INDEX jobs_held ON jobs (lease_until_ms) WHERE state = 'reserved'")
    op.execute("CREATE INDEX jobs_uid ON jobs (uid) WHERE uid IS NOT NULL")
    op.execute("CREATE INDEX jobs_expiry ON jobs (expires_at_ms) WHERE expires_at_ms IS NOT NULL")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for ix in ("jobs_claim", "jobs_due", "jobs_held", "jobs_uid", "jobs_expiry"):
            op.execute(f"DROP INDEX IF EXISTS {ix}")
        op.execute("ALTER TABLE jobs ALTER COLUMN seq DROP DEFAULT")
        op.execute("DROP SEQUENCE IF EXISTS jobgate_job_seq")
        op.execute("DROP SEQUENCE IF EXISTS jobgate_job_ids")
    op.drop_column("jobs", "seq")
    op.drop_column("jobs", "node")
