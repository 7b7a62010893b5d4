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

import os
from itertools import chain
from typing import Iterator

import sqlalchemy as sa

from . import schema
from .sqlite_rows import FOLD_MIN_ROWS, Folder, fast_sqlite_binding
from .storage_upkeep import PG_LOCK_KEY, Upkeep  # noqa: F401 (re-exported)
from .store_port import Loaded, StoreLocked, StorePort  # noqa: F401 (re-exported)

def _placeholders(paramstyle: str, n: int) -> list[str]:
    if paramstyle == "qmark":
        return ["?"] * n
    if paramstyle in ("format", "pyformat"):
        return ["%s"] * n
    if paramstyle == "numeric":
        return [f":{i + 1}" for i in range(n)]
    raise ValueError(f"unsupported DB-API paramstyle {paramstyle!r}")


def make_engine(url: str, application_name: str | None = None,
                options: str | None = None) -> sa.Engine:
    """Create the SQLAlchemy engine for `url`. A SQLite file's directory must exist: it is
    never created (a mistyped path is an error, not a new empty database). PostgreSQL sessions
    carry `application_name` (pg_stat_activity) when given, connect within 10 s unless the
    URL sets `connect_timeout`, use TCP keepalives (10 s idle, 3 probes 5 s apart) unless
    the URL sets `keepalives`, and start with libpq `options` (`-c name=value` settings of
    the session) when given, followed by the operator's own: the URL's `options`, else the
    PGOPTIONS environment variable (which libpq ignores once `options` is passed), so a
    setting of theirs with the same name wins."""
    u = sa.make_url(url)
    if u.get_backend_name() == "sqlite":
        fast_sqlite_binding()
        eng = sa.create_engine(u, connect_args={"check_same_thread": False, "timeout": 30})
        return eng
    args = {"application_name": application_name} if application_name else {}
    if "connect_timeout" not in u.query:
        # a host that drops packets must not hold start-up or a commit retry for the
        # system's TCP timeout (minutes); the URL's own connect_timeout wins
        args["connect_timeout"] = 10
    if "keepalives" not in u.query:
        # TCP keepalives: a session whose server (or the path to it) died unseen fails within
        # ~25 s instead of the system default of hours (a claim or a listener would hang)
        args.update(keepalives=1, keepalives_idle=10, keepalives_interval=5,
                    keepalives_count=3)
    if options:
        own = u.query.get("options", os.environ.get("PGOPTIONS", ""))
        own = " ".join(own) if isinstance(own, tuple) else own
        args["options"] = f"{options} {own}".strip()
    return sa.create_engine(u, pool_pre_ping=True, connect_args=args)


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


class Store(Upkeep):
    """The SQL implementation of StorePort. Raises sqlalchemy.exc.SQLAlchemyError on database
    errors (a write's driver error is re-raised as SQLAlchemy's class for it).

    url: SQLAlchemy URL (sqlite:///path.db, postgresql+psycopg://user@host/db).
    sqlite_synchronous: "NORMAL" (default) or "FULL". `pg_options`: libpq options of each
    PostgreSQL session (make_engine). `engine`: the SQLAlchemy engine (the gateway runs the
    Alembic migrations on it).
    """

    def __init__(self, url: str, sqlite_synchronous: str = "NORMAL",
                 pg_options: str | None = None) -> None:
        self.url = url
        #: this server's sessions in pg_stat_activity: lets a lost session that still holds
        #: the lock (a partition PostgreSQL has not noticed) be told from another server's
        self.application_name = f"jobgate {os.getpid()} {os.urandom(4).hex()}"
        self.engine = make_engine(url, self.application_name, pg_options)
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
        self._many_sql: dict = {}   # (head, rows) -> multi-row INSERT text (_many)
        #: SQLite: chunks of many rows bind a column alike in every row once (sqlite_rows.py)
        self._folder = Folder() if self.is_sqlite else None
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
        m = schema.meta.name
        self._sql_meta = (f"UPDATE {m} SET value = CASE WHEN key = 'next_id' THEN {p2[0]} "
                          f"ELSE {p2[1]} END WHERE key IN ('next_id', 'commit_seq')")
        self._sql_next_id = f"UPDATE {m} SET value = {p2[0]} WHERE key = {p2[1]}"
        self._sql_read_seq = f"SELECT value FROM {m} WHERE key = 'commit_seq'"
        #: commit sequence marks (see write()): over a network only. A SQLite COMMIT is a
        #: call into the library in this process: when it raises, the transaction did not
        #: commit, so its outcome is never unknown, and the mark's page write would cost a
        #: third of a small commit (measured 35 of 75 us).
        self._marks = not self.is_sqlite
        self._seq_base = None if self._marks else 0   # commit_seq when first connected
        self._lock_key_held = None   # PostgreSQL: True once lock() succeeded

    # ------------------------------------------------------------------ lock
    def describe(self) -> str:
        """The database as an operator names it (the URL without a password)."""
        return sa.make_url(self.url).render_as_string(hide_password=True)

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
    def write(self, batch, verify: bool = False) -> None:
        """Commit one core.journal.Batch in a single transaction (StorePort's order).

        The hot path: one long-lived DB-API connection from the engine's pool (its connect
        events, such as SQLite's pragmas, applied) and plain cursor calls with SQL prepared in
        __init__ for the driver's paramstyle; no SQLAlchemy statement execution per call
        (about 23 us each, most of a one-job commit: docs/performance.md). After a failure
        the connection is rolled back and discarded, and the driver's error re-raised as
        SQLAlchemy's class for it (sqlalchemy.exc.IntegrityError, OperationalError, ...).

        Over a network (PostgreSQL) every batch also sets `jobgate_meta.commit_seq` to the base
        read on the first connection plus `batch.number`, in the same transaction (SQLite: no
        mark, see `_marks`). `verify=True` (the writer's
        retry after a failure, on a fresh connection): first make sure this server still holds
        the database (`ensure_lock`, raises StoreLocked), then read commit_seq back; when it
        already shows this batch, the earlier attempt did commit (the connection was lost
        during COMMIT) and nothing is written again.
        """
        if verify:
            self.ensure_lock()
        raw = self._wconn
        if raw is None:
            raw = self._wconn = self.engine.raw_connection()
        cur = _Cursor(raw.cursor())
        try:
            if self._marks and (verify or self._seq_base is None):
                stored = self._read_seq(cur.cur)
                if self._seq_base is None:
                    self._seq_base = stored
                elif stored == self._seq_base + batch.number:
                    cur.close()
                    raw.rollback()
                    self._stored_next_id = max(self._stored_next_id, batch.next_id)
                    return
            self.note_queues(cur, batch.queues)
            self.insert_jobs(cur, batch.inserts, batch.inserts_full)
            self.set_next_id(cur, batch.next_id, self._seq_base + batch.number)
            self.move_states(cur, batch.moves)
            self.record_reservations(cur, batch.reservations)
            self.record_results(cur, batch.results)
            self.replace_payloads(cur, batch.payloads)
            self.delete_jobs(cur, batch.deletes)
            self.append_history(cur, batch.events)
            self.write_records(cur, batch.records)
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
            try:
                raw.invalidate()
            except Exception:  # pragma: no cover - already invalid
                pass
            base = self.engine.dialect.loaded_dbapi.Error
            if isinstance(e, base):   # the StorePort contract: SQLAlchemy's error classes
                raise sa.exc.DBAPIError.instance(None, None, e, base) from e
            raise

    def _read_seq(self, cur) -> int:
        """The stored commit_seq (0 when the row is missing: a schema older than 0006)."""
        cur.execute(self._sql_read_seq)
        row = cur.fetchone()
        return row[0] if row else 0

    def _many(self, conn, head: str, width: int, rows: list) -> None:
        """INSERT `rows` (tuples of `width`) as multi-row VALUES statements of <= 500 rows:
        one statement step instead of one per row (SQLite: ~15% faster than executemany).
        SQLite: a chunk of FOLD_MIN_ROWS or more binds each column that is alike in every
        row once (core/sqlite_rows.py)."""
        folder = self._folder
        for i in range(0, len(rows), 500):
            chunk = rows[i:i + 500]
            if folder is not None and len(chunk) >= FOLD_MIN_ROWS:
                conn.exec_driver_sql(*folder.folded(head, width, chunk))
                continue
            k = (head, len(chunk))
            sql = self._many_sql.get(k)
            if sql is None:   # the same few texts every batch: made once, hashed once
                if len(self._many_sql) > 2048:
                    self._many_sql.clear()
                sql = self._many_sql[k] = head + ", ".join([self._row_ph[width]] * len(chunk))
            conn.exec_driver_sql(sql, tuple(chain.from_iterable(chunk)))

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

    def set_next_id(self, conn, next_id: int, commit_seq: int) -> None:
        """Store the next job id to hand out when it grew (also when the jobs that used the
        ids were coalesced away) and, over a network, the batch's commit sequence (write()):
        then one statement for both rows, every batch."""
        if self._marks:
            conn.exec_driver_sql(self._sql_meta, (max(next_id, self._stored_next_id),
                                                  commit_seq))
        elif next_id > self._stored_next_id:
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

    def write_records(self, conn, records: list) -> None:
        """Replace or delete rows of the keyed record tables: (table, key, row dict | None)
        (core.schema.RECORD_TABLES). Per table, one executemany DELETE of every key, then one
        executemany INSERT of the rows (a cron tick updates 100 schedules in two statements);
        portable (no upsert dialect), and these rows are few. The rows of one table carry the
        same columns (each table has one writer: core/cron.py, core/limits.py, core/webhooks.py)."""
        by_table: dict = {}
        for table, key, row in records:
            keys, rows = by_table.setdefault(table, ([], []))
            keys.append((key,))
            if row is not None:
                rows.append(row)
        ps = self.engine.dialect.paramstyle
        for table, (keys, rows) in by_table.items():
            conn.exec_driver_sql(
                f"DELETE FROM {table} WHERE {schema.RECORD_TABLES[table]} = {self._ph1}", keys)
            if rows:
                cols = list(rows[0])
                conn.exec_driver_sql(
                    f"INSERT INTO {table} ({', '.join(cols)}) VALUES "
                    f"({', '.join(_placeholders(ps, len(cols)))})",
                    [tuple(r[c] for c in cols) for r in rows])

    def load_records(self, table: str) -> list[dict]:
        """Every row of keyed record table `table` (core.schema.RECORD_TABLES) as dicts,
        ordered by key; `spec` columns as bytes."""
        t = schema.metadata.tables[table]
        keycol = schema.RECORD_TABLES[table]
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t).order_by(t.c[keycol])).mappings().all()
        return [{k: (bytes(v) if isinstance(v, memoryview) else v) for k, v in r.items()}
                for r in rows]

    def append_history(self, conn, rows: list) -> None:
        """Append job_events rows (EVENT_COLUMNS order)."""
        if rows:
            self._many(conn, self._sql_events, len(schema.EVENT_COLUMNS), rows)

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
