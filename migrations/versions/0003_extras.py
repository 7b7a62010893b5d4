"""bunqueue: the payload's encoding (0 raw bytes, 1 MessagePack) and the dialect extras (name,
backoff, tags, progress, logs, dependencies, ...) as one MessagePack map per job.

Revision ID: 0003
Revises: 0002
"""
from alembic import op
import sqlalchemy as sa

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("payload_fmt", sa.SmallInteger, nullable=False,
                               server_default="0"))
        b.add_column(sa.Column("extras", sa.LargeBinary, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.drop_column("extras")
        b.drop_column("payload_fmt")
