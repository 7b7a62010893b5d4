"""Alembic environment: runs migrations on the connection given by the caller
(config.attributes["connection"]) or on the URL in sqlalchemy.url."""
from alembic import context
import sqlalchemy as sa

from core.schema import metadata

config = context.config
target_metadata = metadata


def run() -> None:
    conn = config.attributes.get("connection")
    if conn is not None:
        context.configure(connection=conn, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = sa.create_engine(config.get_main_option("sqlalchemy.url"))
    with engine.begin() as c:
        context.configure(connection=c, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata,
                      literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    run()
