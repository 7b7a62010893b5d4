"""SQL storage through SQLAlchemy 2 Core: SQLite (WAL) embedded by default, PostgreSQL alike.

`Store.write(batch)` runs on the writer thread (gateway.writer): one transaction per Batch, each
table written with one executemany. Statements are generated once from core.schema for the
connected dialect's paramstyle and run with Connection.exec_driver_sql, which hands tuples to the
driver without per-row SQLAlchemy processing (the hot path).

SQLite: journal_mode=WAL, synchronous=NORMAL by default. In WAL mode a committed transaction has
been written to the WAL file, so it survives kill -9 of the server; `synchronous="FULL"` also
survives power loss at the cost of an fsync per commit.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import sqlalchemy as sa

from . import schema


@dataclass
class Loaded:
    """What `Store.load()` returns: job rows (dicts, by id) and the next id to hand out."""

    jobs: list
    next_id: int


def _placeholders(paramstyle: str, n: int) -> list[str]:
    if paramstyle == "qmark":
        return ["?"] * n
    if paramstyle in ("format", "pyformat"):
        return ["%s"] * n
    if paramstyle == "numeric":
        return [f":{i + 1}" for i in range(n)]
    raise ValueError(f"unsupported DB-API paramstyle {paramstyle!r}")


def make_engine(url: str) -> sa.Engine:
    """Create the SQLAlchemy engine for `url`; SQLite gets WAL and its parent directory created."""
    u = sa.make_url(url)
    if u.get_backend_name() == "sqlite":
        if u.database and u.database != ":memory:":
            d = os.path.dirname(os.path.abspath(u.database))
            os.makedirs(d, exist_ok=True)
        eng = sa.create_engine(u, connect_args={"check_same_thread": False, "timeout": 30})
        return eng
    return sa.create_engine(u, pool_pre_ping=True)


class Store:
    """The database behind one engine. Raises sqlalchemy.exc.SQLAlchemyError on database errors.

    url: SQLAlchemy URL (sqlite:///path.db, postgresql+psycopg://user@host/db).
    sqlite_synchronous: "NORMAL" (default) or "FULL".
    """

    def __init__(self, url: str, sqlite_synchronous: str = "NORMAL") -> None:
        self.url = url
        self.engine = make_engine(url)
        self.is_sqlite = self.engine.dialect.name == "sqlite"
        if self.is_sqlite:
            sync = sqlite_synchronous.upper()
            if sync not in ("NORMAL", "FULL", "OFF"):
                raise ValueError(f"sqlite_synchronous must be NORMAL or FULL, not {sqlite_synchronous!r}")

            @sa.event.listens_for(self.engine, "connect")
            def _pragmas(dbapi_conn, _record):  # pragma: no cover - exercised by every test
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute(f"PRAGMA synchronous={sync}")
                cur.execute("PRAGMA busy_timeout=30000")
                cur.close()
        ps = self.engine.dialect.paramstyle
        j = schema.jobs.name

        def ins(table, cols):
            return (f"INSERT INTO {table} ({', '.join(cols)}) VALUES "
                    f"({', '.join(_placeholders(ps, len(cols)))})")
        self._sql_insert = ins(j, schema.JOB_INSERT_COLUMNS)
        ph = _placeholders(ps, len(schema.JOB_UPDATE_COLUMNS) + 1)
        sets = ", ".join(f"{c} = {p}" for c, p in zip(schema.JOB_UPDATE_COLUMNS, ph))
        self._sql_update = f"UPDATE {j} SET {sets} WHERE id = {ph[-1]}"
        self._sql_delete = f"DELETE FROM {j} WHERE id = {_placeholders(ps, 1)[0]}"
        self._sql_events = ins(schema.job_events.name, schema.EVENT_COLUMNS)
        p2 = _placeholders(ps, 2)
        self._sql_next_id = f"UPDATE {schema.meta.name} SET value = {p2[0]} WHERE key = {p2[1]}"

    def migrate(self) -> None:
        """Bring the schema to the newest Alembic revision (creates it on an empty database)."""
        from migrations import upgrade
        upgrade(self.engine)

    def load(self) -> Loaded:
        """Read every live job (ordered by id) and the stored next id."""
        with self.engine.connect() as conn:
            rows = [dict(r._mapping) for r in
                    conn.execute(sa.select(schema.jobs).order_by(schema.jobs.c.id))]
            nid = conn.execute(sa.select(schema.meta.c.value)
                               .where(schema.meta.c.key == "next_id")).scalar()
        top = rows[-1]["id"] + 1 if rows else 1
        return Loaded(rows, max(nid or 1, top))

    def write(self, batch) -> None:
        """Commit one core.journal.Batch in a single transaction."""
        with self.engine.begin() as conn:
            if batch.inserts:
                conn.exec_driver_sql(self._sql_insert, batch.inserts)
                conn.exec_driver_sql(self._sql_next_id, [(batch.next_id, "next_id")])
            if batch.updates:
                conn.exec_driver_sql(self._sql_update, batch.updates)
            if batch.deletes:
                conn.exec_driver_sql(self._sql_delete, batch.deletes)
            if batch.events:
                conn.exec_driver_sql(self._sql_events, batch.events)

    def prune_events(self, before_ms: int) -> int:
        """Delete job_events older than `before_ms` (wall ms); returns how many rows went."""
        with self.engine.begin() as conn:
            r = conn.execute(sa.delete(schema.job_events).where(schema.job_events.c.at_ms < before_ms))
            return r.rowcount or 0

    def close(self) -> None:
        """Release the connection pool."""
        self.engine.dispose()
