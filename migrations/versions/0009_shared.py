"""Several nodes on one PostgreSQL (issue 19, docs/scaling.md): the columns and indexes of the
shared storage mode. Harmless for single-node servers: two nullable columns; on PostgreSQL two
sequences.

- `jobs.node`: the node (a jobgate process in shared mode) whose client holds the reserved job;
  NULL in every other state and in single-node mode.
- `jobs.seq`: the claim order among jobs of equal priority (FIFO across nodes): on PostgreSQL
  taken from sequence `jobgate_job_seq` at insert; NULL on SQLite (single node: ids are in
  order there).
- Sequence `jobgate_job_ids` (PostgreSQL): job ids for shared nodes, handed out in blocks
  (INCREMENT BY 1,000,000: one `nextval` is one node's block), so that ids are unique across
  nodes without a round trip per put.
- The shared mode's partial indexes are not made here: the first node that joins creates them
  (core/shared_store.py SHARED_INDEXES), so that single-node servers on PostgreSQL do not pay
  for their upkeep on every write (they would also make every state change a non-HOT update).

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



def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for ix in ("jobs_claim", "jobs_due", "jobs_held", "jobs_uid", "jobs_expiry"):
            op.execute(f"DROP INDEX IF EXISTS {ix}")
        op.execute("ALTER TABLE jobs ALTER COLUMN seq DROP DEFAULT")
        op.execute("DROP SEQUENCE IF EXISTS jobgate_job_seq")
        op.execute("DROP SEQUENCE IF EXISTS jobgate_job_ids")
    op.drop_column("jobs", "seq")
    op.drop_column("jobs", "node")
