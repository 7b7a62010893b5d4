"""Alembic environment and versions for jobgate's SQL schema (core.schema).

`upgrade(engine)` runs every migration up to head on that engine; `jobgate migrate` calls it, and
`jobgate serve` calls it on start.
"""
from __future__ import annotations

import os

HERE = os.path.dirname(os.path.abspath(__file__))


def config(url: str | None = None):
    """An alembic.config.Config pointing at this folder (script_location) and `url`."""
    from alembic.config import Config
    cfg = Config()
    cfg.set_main_option("script_location", HERE)
    if url:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(engine, revision: str = "head") -> None:
    """Upgrade the database behind SQLAlchemy `engine` to `revision`."""
    from alembic import command
    cfg = config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


#: The newest revision in versions/ (tests/test_storage.py keeps it equal to Alembic's head).
HEAD = "0013"


def current(engine) -> str | None:
    """The revision stored in the database behind `engine` (None: no schema yet). One small
    read, no Alembic import."""
    import sqlalchemy as sa
    try:
        with engine.connect() as conn:
            row = conn.exec_driver_sql("SELECT version_num FROM alembic_version").first()
    except sa.exc.DBAPIError:
        return None
    return None if row is None else row[0]


def upgrade_if_needed(engine) -> bool:
    """Start-up's migration check: when the schema is already at HEAD (the usual case) only
    `current()` runs, and Alembic is never imported (issue 14: start-up in milliseconds);
    otherwise `upgrade(engine)`. Returns True when it migrated."""
    if current(engine) == HEAD:
        return False
    upgrade(engine)
    return True
