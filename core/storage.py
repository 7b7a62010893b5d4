"""SQL storage through SQLAlchemy 2 Core: SQLite (WAL) embedded by default, PostgreSQL alike.

The storage port (`StorePort`) is the set of named operations the engine needs; `Store` is its
single-node SQL implementation, and the multi-node PostgreSQL store will be a second one
(DESIGN.md, "Storage and durability"). The writer (gateway/writer.py) calls `write(batch)` on its
thread: one transaction per core.journal.Batch, in which each named operation is one statement
(executemany or multi-row VALUES) or a few. Statements are generated once from core.schema for
the connected dialect's paramstyle and run with Connection.exec_driver_sql, which hands tuples to
the driver without per-row SQLAlchemy processing (the hot path).

The schema is created and upgraded by Alembic (migrations/), run by the gateway before a Store is
used; core never imports the migrations.

SQLite: journal_mode=WAL, synchronous=NORMAL by default, no automatic checkpoints (the server
calls `checkpoint()` from a worker thread every second). In WAL mode a committed transaction has
been written to the WAL file, so it survives kill -9 of the server; `synchronous="FULL"` also
survives power loss at the cost of an fsync per commit.

One server per database: `lock()` takes an exclusive lock for the server's lifetime (SQLite: an
flock on the database file; PostgreSQL: a session advisory lock), so a second server on the same
database refuses to start (StoreLocked) until multi-node support exists.
"""
from __future__ import annotations

import fcntl
import os
import time
from itertools import chain
from typing import Iterator

import sqlalchemy as sa

from . import schema
from .store_port import Loaded, StoreLocked, StorePort  # noqa: F401 (re-exported)

#: The PostgreSQL advisory lock key of a jobgate server ("jobgate" in ASCII, as an int64).
PG_LOCK_KEY = int.from_bytes(b"jobgate", "big")


def _placeholders(paramstyle: str, n: int) -> list[str]:
    if paramstyle == "qmark":
        return ["?"] * n
    if paramstyle in ("format", "pyformat"):
        return ["%s"] * n
    if paramstyle == "numeric":
        return [f":{i + 1}" for i in range(n)]
    raise ValueError(f"unsupported DB-API paramstyle {paramstyle!r}")


def make_engine(url: str) -> sa.Engine:
    """Create the SQLAlchemy engine for `url`. A SQLite file's directory must exist: it is
    never created (a mistyped path is an error, not a new empty database)."""
    u = sa.make_url(url)
    if u.get_backend_name() == "sqlite":
        eng = sa.create_engine(u, connect_args={"check_same_thread": False, "timeout": 30})
        return eng
    return sa.create_engine(u, pool_pre_ping=True)


class _Cursor:
    """A DB-API cursor with the one method the named write operations call:
    `exec_driver_sql(sql, params)`, params a tuple (one execution) or a list of tuples
    (executemany)."""

    __slots__ = ("cur",)

    def __init__(self, cur) -> None:
        self.cur = cur

    def exec_driver_sql(self, sql: str, params) -> None:
        if params.__class__ is list:
            self.cur.executemany(sql, params)
        else:
            self.cur.execute(sql, params)

    def close(self) -> None:
        self.cur.close()


class Store:
    """The SQL implementation of StorePort. Raises sqlalchemy.exc.SQLAlchemyError on database
    errors (a write's driver error is re-raised as SQLAlchemy's class for it).

    url: SQLAlchemy URL (sqlite:///path.db, postgresql+psycopg://user@host/db).
    sqlite_synchronous: "NORMAL" (default) or "FULL". `engine`: the SQLAlchemy engine (the
    gateway runs the Alembic migrations on it).
    """

    def __init__(self, url: str, sqlite_synchronous: str = "NORMAL") -> None:
        self.url = url
        self.engine = make_engine(url)
        self.is_sqlite = self.engine.dialect.name == "sqlite"
        self._lock_fd = None
        self._lock_conn = None
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
                # Checkpoints run from `checkpoint()` on another thread, never inside a commit
                # (an automatic checkpoint stalls the committing event loop: p99 7 ms -> 2 ms).
                cur.execute("PRAGMA wal_autocheckpoint=0")
                cur.close()
        ps = self.engine.dialect.paramstyle
        if ps == "numeric":
            raise ValueError("DB-API paramstyle 'numeric' is not supported")
        j = schema.jobs.name

        def ins(table, cols):
            return f"INSERT INTO {table} ({', '.join(cols)}) VALUES "

        def update(cols, fixed=""):
            ph = _placeholders(ps, len(cols) + 1)
            sets = ", ".join(f"{c} = {p}" for c, p in zip(cols, ph))
            return f"UPDATE {j} SET {sets}{fixed} WHERE id = {ph[-1]}"

        self._row_ph = {n: "(" + ", ".join(_placeholders(ps, n)) + ")" for n in
                        {len(schema.JOB_NEW_COLUMNS), len(schema.JOB_INSERT_COLUMNS),
                         len(schema.EVENT_COLUMNS)}}
        self._ph1 = _placeholders(ps, 1)[0]
        self._sql_insert = ins(j, schema.JOB_NEW_COLUMNS)
        self._sql_insert_full = ins(j, schema.JOB_INSERT_COLUMNS)
        no_lease = ", lease_token = NULL, lease_owner = NULL, lease_until_ms = NULL"
        no_result = ", result = NULL, result_ok = 0"
        self._sql_move = update(schema.JOB_UPDATE_COLUMNS, no_result + no_lease)
        self._sql_reservation = update(schema.JOB_UPDATE_COLUMNS + schema.LEASE_COLUMNS,
                                       no_result)
        self._sql_result = update(schema.JOB_UPDATE_COLUMNS + schema.RESULT_COLUMNS, no_lease)
        self._sql_payload = update(schema.JOB_PAYLOAD_COLUMNS)
        self._sql_delete = f"DELETE FROM {j} WHERE id IN "
        self._sql_events = ins(schema.job_events.name, schema.EVENT_COLUMNS)
        p2 = _placeholders(ps, 2)
        self._wconn = None
        self._stored_next_id = 0
        # both SQLite (3.24+) and PostgreSQL know ON CONFLICT DO NOTHING
        self._sql_queue_upsert = (f"INSERT INTO {schema.queues.name} (name, created_ms) "
                                  f"VALUES ({p2[0]}, {p2[1]}) ON CONFLICT (name) DO NOTHING")
        self._sql_next_id = f"UPDATE {schema.meta.name} SET value = {p2[0]} WHERE key = {p2[1]}"

    # ------------------------------------------------------------------ lock
    def describe(self) -> str:
        """The database as an operator names it (the URL without a password)."""
        return sa.make_url(self.url).render_as_string(hide_password=True)

    def lock(self, wait_s: float = 5.0) -> None:
        """Hold this database for one server until close(). Raises StoreLocked when another
        server holds it: at once for SQLite (an flock on the database file, released by the
        kernel when its holder dies); for PostgreSQL after `wait_s` seconds of retries (the
        advisory lock of a server killed a moment ago goes once its backend sees the closed
        connection). An in-memory SQLite database is never shared: no lock."""
        if self.is_sqlite:
            path = sa.make_url(self.url).database
            if not path or path == ":memory:":
                return
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise StoreLocked(
                    f"another jobgate server is using {path} (it holds the database's lock); "
                    "stop it first, or give this server its own database") from None
            self._lock_fd = fd
            return
        conn = self.engine.connect()
        deadline = time.monotonic() + wait_s
        while True:
            got = conn.exec_driver_sql(f"SELECT pg_try_advisory_lock({PG_LOCK_KEY})").scalar()
            conn.commit()
            if got:
                self._lock_conn = conn
                return
            if time.monotonic() >= deadline:
                conn.close()
                raise StoreLocked(
                    f"another jobgate server is using {self.describe()} (it holds advisory "
                    f"lock {PG_LOCK_KEY}); stop it first, or give this server its own "
                    "database: several nodes on one PostgreSQL are not supported yet")
            time.sleep(0.05)

    # ------------------------------------------------------------------ reads
    def scan_jobs(self, chunk: int = 10_000) -> Iterator[dict]:
        """Every live job row as a dict, in id order, fetched `chunk` rows at a time (a
        server-side cursor on PostgreSQL), so recovery never holds the whole table twice."""
        cols = tuple(c.name for c in schema.jobs.columns)
        # plain SQL: rows come as the driver gives them, without SQLAlchemy's per-value
        # result processing (every column here is a driver-native int, str or bytes)
        sql = f"SELECT {', '.join(cols)} FROM jobs ORDER BY id"
        with self.engine.connect() as conn:
            res = conn.execution_options(stream_results=True, yield_per=chunk).exec_driver_sql(
                sql)
            for r in res:      # zip over the row tuple: a third of the cost of r._mapping
                yield dict(zip(cols, r))

    def load_next_id(self) -> int:
        """The stored next job id (1 on an empty database)."""
        with self.engine.connect() as conn:
            nid = conn.execute(sa.select(schema.meta.c.value)
                               .where(schema.meta.c.key == "next_id")).scalar()
        self._stored_next_id = max(self._stored_next_id, nid or 0)
        return nid or 1

    def load(self) -> Loaded:
        """Every live job (a list of dicts, ordered by id) and the next id to hand out."""
        nid = self.load_next_id()
        rows = list(self.scan_jobs())
        top = rows[-1]["id"] + 1 if rows else 1
        return Loaded(rows, max(nid, top))

    def stream(self) -> Loaded:
        """For recovery (core/recovery.py): the stored next id and the rows as a stream."""
        return Loaded(self.scan_jobs(), self.load_next_id())

    # ----------------------------------------------------------------- writes
    def write(self, batch) -> None:
        """Commit one core.journal.Batch in a single transaction (StorePort's order).

        The hot path: one long-lived DB-API connection from the engine's pool (its connect
        events, such as SQLite's pragmas, applied) and plain cursor calls with SQL prepared in
        __init__ for the driver's paramstyle; no SQLAlchemy statement execution per call
        (about 23 us each, most of a one-job commit: docs/performance.md). After a failure
        the connection is rolled back and discarded, and the driver's error re-raised as
        SQLAlchemy's class for it (sqlalchemy.exc.IntegrityError, OperationalError, ...).
        """
        raw = self._wconn
        if raw is None:
            raw = self._wconn = self.engine.raw_connection()
        cur = _Cursor(raw.cursor())
        try:
            self.note_queues(cur, batch.queues)
            self.insert_jobs(cur, batch.inserts, batch.inserts_full)
            self.set_next_id(cur, batch.next_id)
            self.move_states(cur, batch.moves)
            self.record_reservations(cur, batch.reservations)
            self.record_results(cur, batch.results)
            self.replace_payloads(cur, batch.payloads)
            self.delete_jobs(cur, batch.deletes)
            self.append_history(cur, batch.events)
            cur.close()
            raw.commit()
            self._stored_next_id = max(self._stored_next_id, batch.next_id)
        except Exception as e:
            self._wconn = None
            for step in (cur.close, raw.rollback):
                try:
                    step()
                except Exception:  # the connection may be gone; it is discarded either way
                    pass
            raw.invalidate()
            base = self.engine.dialect.loaded_dbapi.Error
            if isinstance(e, base):   # the StorePort contract: SQLAlchemy's error classes
                raise sa.exc.DBAPIError.instance(None, None, e, base) from e
            raise

    def _many(self, conn, head: str, width: int, rows: list) -> None:
        """INSERT `rows` (tuples of `width`) as multi-row VALUES statements of <= 500 rows:
        one statement step instead of one per row (SQLite: ~15% faster than executemany)."""
        ph = self._row_ph[width]
        for i in range(0, len(rows), 500):
            chunk = rows[i:i + 500]
            conn.exec_driver_sql(head + ", ".join([ph] * len(chunk)),
                                 tuple(chain.from_iterable(chunk)))

    def note_queues(self, conn, rows: list) -> None:
        """Remember queues first used: (name, created_ms) rows; known names are kept."""
        if rows:
            conn.exec_driver_sql(self._sql_queue_upsert, rows)

    def insert_jobs(self, conn, new_rows: list, full_rows: list) -> None:
        """Insert new jobs: `new_rows` in JOB_NEW_COLUMNS order (counters zero), `full_rows`
        in JOB_INSERT_COLUMNS order."""
        if new_rows:
            self._many(conn, self._sql_insert, len(schema.JOB_NEW_COLUMNS), new_rows)
        if full_rows:
            self._many(conn, self._sql_insert_full, len(schema.JOB_INSERT_COLUMNS), full_rows)

    def set_next_id(self, conn, next_id: int) -> None:
        """Store the next job id to hand out, when it grew (also when the jobs that used the
        ids were coalesced away)."""
        if next_id > self._stored_next_id:
            conn.exec_driver_sql(self._sql_next_id, (next_id, "next_id"))

    def move_states(self, conn, rows: list) -> None:
        """Unfinished jobs' new state, priority, times, counters and extras
        (JOB_UPDATE_COLUMNS + id); no result, no stored lease."""
        if rows:
            conn.exec_driver_sql(self._sql_move, rows)

    def record_reservations(self, conn, rows: list) -> None:
        """Reserved jobs whose lease outlives a restart (JOB_UPDATE_COLUMNS + LEASE_COLUMNS +
        id): token, worker and deadline (wall ms)."""
        if rows:
            conn.exec_driver_sql(self._sql_reservation, rows)

    def record_results(self, conn, rows: list) -> None:
        """Finished jobs with their result (JOB_UPDATE_COLUMNS + RESULT_COLUMNS + id)."""
        if rows:
            conn.exec_driver_sql(self._sql_result, rows)

    def replace_payloads(self, conn, rows: list) -> None:
        """Payloads replaced in place: (payload, payload_fmt, id) rows."""
        if rows:
            conn.exec_driver_sql(self._sql_payload, rows)

    def delete_jobs(self, conn, ids: list) -> None:
        """Remove deleted jobs' rows (ids), 500 per statement."""
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            conn.exec_driver_sql(self._sql_delete + "(" + ", ".join([self._ph1] * len(chunk))
                                 + ")", tuple(chunk))

    def append_history(self, conn, rows: list) -> None:
        """Append job_events rows (EVENT_COLUMNS order)."""
        if rows:
            self._many(conn, self._sql_events, len(schema.EVENT_COLUMNS), rows)

    # ------------------------------------------------------------ upkeep
    def checkpoint(self, mode: str = "PASSIVE") -> tuple | None:
        """SQLite only: copy committed WAL frames into the database file (`mode` PASSIVE never
        blocks the writer; TRUNCATE at shutdown also empties the WAL). Returns SQLite's
        (busy, wal frames, checkpointed frames), or None for other databases."""
        if not self.is_sqlite:
            return None
        if mode not in ("PASSIVE", "FULL", "RESTART", "TRUNCATE"):
            raise ValueError(f"unknown checkpoint mode {mode!r}")
        with self.engine.connect() as conn:
            return tuple(conn.exec_driver_sql(f"PRAGMA wal_checkpoint({mode})").one())

    def prune_events(self, before_ms: int, chunk: int = 50_000) -> int:
        """Delete job_events older than `before_ms` (wall ms); returns how many rows went.

        Rows are appended in time order, so the cut is found by binary search over id (the
        primary key) and removed by id range in chunks: no index on at_ms is needed.
        """
        ev = schema.job_events
        with self.engine.connect() as conn:
            lo, hi = conn.execute(sa.select(sa.func.min(ev.c.id), sa.func.max(ev.c.id))).one()
            if lo is None:
                return 0
            top = hi
            hi += 1
            while lo < hi:   # first id whose row is at or after the cut (or a gap after it)
                mid = (lo + hi) // 2
                at = conn.execute(sa.select(ev.c.at_ms).where(ev.c.id >= mid)
                                  .order_by(ev.c.id).limit(1)).scalar()
                if at is not None and at < before_ms:
                    lo = mid + 1
                else:
                    hi = mid
        # The newest row always stays: SQLite hands out max(id) + 1, so an emptied table would
        # reuse ids, and `jobgate export`'s watermark (an id) relies on ids only growing.
        lo = min(lo, top)
        total = 0
        with self.engine.connect() as conn:
            start = conn.execute(sa.select(sa.func.min(ev.c.id))).scalar() or lo
        for a in range(start, lo, chunk):
            with self.engine.begin() as conn:
                r = conn.execute(sa.delete(ev).where(ev.c.id >= a, ev.c.id < min(a + chunk, lo)))
                total += r.rowcount or 0
        return total

    def close(self) -> None:
        """Close the writer connection, release the server lock and the connection pool."""
        if self._wconn is not None:
            self._wconn.close()
            self._wconn = None
        if self._lock_conn is not None:
            try:
                self._lock_conn.close()   # the session ends: its advisory lock goes with it
            except Exception:  # pragma: no cover - the server is stopping anyway
                pass
            self._lock_conn = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)   # closing the descriptor releases the flock
            self._lock_fd = None
        self.engine.dispose()
