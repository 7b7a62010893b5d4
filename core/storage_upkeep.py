"""The parts of the SQL store (core/storage.py) that are not the job write path: the database's
lock (one server per database, kept through connection losses), SQLite WAL checkpoints and
history pruning. A mixin of `Store`, which provides `engine`, `url`, `is_sqlite`, `describe()`
and the lock attributes (`_lock_fd`, `_lock_conn`, `_lock_key_held`).
"""
from __future__ import annotations

import fcntl
import os
import time

import sqlalchemy as sa

from . import schema
from .store_port import StoreLocked

#: The PostgreSQL advisory lock key of a jobgate server ("jobgate" in ASCII, as an int64).
PG_LOCK_KEY = int.from_bytes(b"jobgate", "big")


class Upkeep:
    """Lock, checkpoint and pruning operations of core.storage.Store (see the module
    docstring)."""

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
                self._lock_key_held = True
                return
            if self._lock_key_held and self._end_own_holder(conn):
                continue          # our own lost session held it: ended, try again
            if time.monotonic() >= deadline:
                conn.close()
                raise StoreLocked(
                    f"another jobgate server is using {self.describe()} (it holds advisory "
                    f"lock {PG_LOCK_KEY}); stop it first, or give this server its own "
                    "database: several nodes on one PostgreSQL are not supported yet")
            time.sleep(0.05)


    def _end_own_holder(self, conn) -> bool:
        """PostgreSQL, re-taking the lock: when the session holding it is one of this
        server's own (same application_name: a connection lost in a partition that PostgreSQL
        has not noticed yet, still holding the lock), terminate it and return True; another
        server's holder is left alone (False)."""
        rows = conn.execute(sa.text(
            "SELECT a.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = :hi AND l.objid = :lo "
            "AND a.application_name = :app AND a.pid <> pg_backend_pid()"),
            {"hi": PG_LOCK_KEY >> 32, "lo": PG_LOCK_KEY & 0xFFFFFFFF,
             "app": self.application_name}).scalars().all()
        for pid in rows:
            conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        conn.commit()
        if rows:
            time.sleep(0.05)      # the terminated backend releases its locks as it exits
        return bool(rows)

    def ensure_lock(self) -> None:
        """PostgreSQL: check that the session holding the server's advisory lock is alive
        (`SELECT 1` on it); when it was lost (terminated, a failover, idle_session_timeout),
        connect again and take the lock again. Raises StoreLocked when another server took it
        meanwhile, and the database error when PostgreSQL cannot be reached. SQLite: nothing
        (the flock is held by this process's descriptor)."""
        if self.is_sqlite or not self._lock_key_held:
            return
        conn = self._lock_conn
        if conn is not None:
            try:
                conn.exec_driver_sql("SELECT 1").scalar()
                conn.commit()
                return
            except Exception:
                try:
                    conn.invalidate()
                    conn.close()
                except Exception:  # pragma: no cover - gone anyway
                    pass
                self._lock_conn = None
        self.lock(wait_s=0)

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

