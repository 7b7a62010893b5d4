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
