"""Shared pytest fixtures: database URLs (SQLite file, PostgreSQL when configured) and servers."""
from __future__ import annotations

import pytest

from .support import Server, make_pg_database, pg_admin_url

PG_SKIP = ("PostgreSQL tests need JOBGATE_TEST_PG_URL "
           "(e.g. postgresql+psycopg://postgres@127.0.0.1:5432/test); .ci/run sets it")


@pytest.fixture
def sqlite_url(tmp_path):
    """A SQLite database file URL in a fresh temporary directory."""
    return f"sqlite:///{tmp_path}/jobgate.db"


def _fresh_pg():
    """Yield a fresh PostgreSQL database URL, dropped afterwards; skip without the env var."""
    admin = pg_admin_url()
    if not admin:
        pytest.skip(PG_SKIP)
    url, drop = make_pg_database(admin)
    yield url
    drop()


@pytest.fixture
def pg_url():
    """A fresh, empty PostgreSQL database (dropped afterwards); skips without JOBGATE_TEST_PG_URL."""
    yield from _fresh_pg()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """Each storage backend in turn: a SQLite file, then a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/jobgate.db"
        return
    yield from _fresh_pg()


@pytest.fixture
def server(sqlite_url):
    """A running jobgate server (SQLite, durability commit) on a free port."""
    s = Server(sqlite_url)
    yield s
    s.stop()


@pytest.fixture
def mem_server():
    """A running jobgate server with durability memory."""
    s = Server(None, durability="memory")
    yield s
    s.stop()
