"""The shared storage mode's statements (issue 19, docs/scaling.md): several jobgate nodes on
one PostgreSQL. `SharedStore` is the SQL store of core/storage.py plus what a node needs to
share the jobs table with other nodes:

- `join()`: take the database in shared mode (a shared advisory lock: single-node servers take
  it exclusively, so the two modes exclude each other), get this node's name and its first
  block of job ids from sequence jobgate_job_ids (migration 0009).
- `write()`: the group commit as in single-node mode, then one statement that marks the rows
  written in the batch: reserved rows held by this node (with a lease deadline), every other
  row held by nobody, and `NOTIFY jobgate_ready, '<queue>'` for each queue that got a ready
  row. Its commit mark is this node's own `jobgate_meta` row (`commit_seq:<node>`): no row
  that all nodes update on the hot path.
- `claim()`: `FOR UPDATE SKIP LOCKED` over partial index jobs_claim, one LIMIT per queue;
  queues paused across nodes (table queue_pauses, migration 0010) are skipped.
- `promote()`, `evict()`, `rescue()`, `sweep()` (core/shared_duties.py): the leader's and
  each node's upkeep statements.
- `listen()`, `try_lead()`: the listener session's LISTEN, liveness lock and leader lock.

Each method that takes `conn` runs on the caller's DB-API connection (psycopg 3, from
`raw()`), on the caller's thread, and commits. Times are wall ms. Errors: the driver's
(psycopg.Error) from the methods that take `conn`; StoreLocked from `join()`.
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager

import sqlalchemy as sa

from . import schema
from .shared import ID_BLOCK
from .shared_duties import NODE_LOCK_CLASS, LeaderDuties
from .shared_calls import CALLS_CHANNEL
from .shared_events import EVENTS_CHANNEL, SUBS_CHANNEL
from .shared_figures import delete_figures
from .shared_settings import SETTINGS_CHANNEL
from .shared_slots import SLOTS_CHANNEL
from .shared_reads import DONE_CHANNEL, READY_CHANNEL, UID_SQL
from .storage import Store
from .storage_upkeep import PG_LOCK_KEY
from .store_port import StoreLocked

#: the leader's advisory lock (one int8 key): "jglead" in ASCII
LEADER_KEY = int.from_bytes(b"jglead", "big")
#: serialises nodes joining (the id sequence catching up with single-node ids)
JOIN_KEY = int.from_bytes(b"jgjoin", "big")

_COLS = tuple(c.name for c in schema.jobs.columns)

#: The shared mode's partial indexes (PostgreSQL), created by the first node that joins
#: (`ensure_indexes`), not by the migrations: single-node servers do not pay for them.
#: jobs_claim: the claim query; jobs_due: promoting due delayed jobs; jobs_held: the rescuer
#: and the sweep; jobs_uid: reading a job by uid (results, job reads); jobs_expiry: evictions;
#: jobs_buried: beanstalk's global kick and peek-buried (core/shared_changes.py, shared_reads.py).
SHARED_INDEXES = (
    ("jobs_claim", "(queue, priority, seq) WHERE state = 'ready'"),
    ("jobs_due", "(ready_at_ms) WHERE state = 'delayed'"),
    ("jobs_held", "(lease_until_ms) WHERE state = 'reserved'"),
    ("jobs_uid", "(uid) WHERE uid IS NOT NULL"),
    ("jobs_expiry", "(expires_at_ms) WHERE expires_at_ms IS NOT NULL"),
    ("jobs_buried", "(queue, seq) WHERE state = 'buried'"),
    ("jobs_dedup", "(queue, dedup_key) WHERE dedup_key IS NOT NULL"),
)


#: ms a node's session may stay inside a transaction without a statement (the default)
IDLE_IN_TRANSACTION_MS = 10_000


class SharedStore(LeaderDuties, Store):
    """core.storage.Store for a node in shared mode (see the module docstring). PostgreSQL
    only: raises ValueError for another database. `node` (after `join()`): this node's name,
    `<host>:<pid>:<number>`; `number`: its int4 key; `first_block`: its first id block.
    `idle_in_transaction_ms`: PostgreSQL ends a session of this node that stays inside a
    transaction without a statement for that long (its `idle_in_transaction_session_timeout`;
    0: not set, the server's own setting applies): a node frozen mid-transaction (SIGSTOP, a
    stalled VM) then lets go of the row locks that would hold the other nodes' takes of its
    queues (docs/scaling.md)."""

    def __init__(self, url: str, idle_in_transaction_ms: int = IDLE_IN_TRANSACTION_MS) -> None:
        super().__init__(url, pg_options=(
            f"-c idle_in_transaction_session_timeout={int(idle_in_transaction_ms)}"
            if idle_in_transaction_ms else None))
        if self.is_sqlite or self.engine.dialect.name != "postgresql":
            raise ValueError("database.mode shared needs PostgreSQL")
        self.node = ""
        self.number = 0
        self.first_block = 0
        self._join_conn = None
        self._batch = None
        self.gone_rounds: dict = {}   # release_gone: node number -> rounds found gone
        self.released: set = set()    # release_gone: node numbers whose rows were given back
        self._mine = ""
        ret = ", ".join(f"j.{c}" for c in _COLS)
        self._sql_claim = (
            "WITH w AS (SELECT * FROM unnest(%s::text[], %s::int[]) AS w(q, n) "
            # a queue paused across nodes (migration 0010, core/shared_changes.py) is skipped
            "WHERE NOT EXISTS (SELECT 1 FROM queue_pauses p WHERE p.queue = w.q "
            "AND p.until_ms > %s)), "
            "c AS (SELECT x.id FROM w CROSS JOIN LATERAL (SELECT id FROM jobs "
            "WHERE queue = w.q AND state = 'ready' AND node IS NULL "
            "ORDER BY priority, seq LIMIT w.n "
            "FOR UPDATE SKIP LOCKED) x) "
            "UPDATE jobs j SET state = 'reserved', node = %s, reserves = j.reserves + 1, "
            "lease_until_ms = %s + j.ttr_ms FROM c WHERE j.id = c.id "
            f"RETURNING {ret}")

    # ---------------------------------------------------------------- joining
    def lock(self, wait_s: float = 5.0) -> None:
        """Shared mode takes the database with join(), not the single-node lock."""

    @contextmanager
    def serialized(self):
        """Hold the join lock (one node at a time) for the block: start-up's migration check,
        so that nodes starting together do not migrate one schema twice."""
        conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            # tried, not waited for: a session blocked in pg_advisory_lock keeps a statement
            # (a virtual transaction) open, and the holder's CREATE INDEX CONCURRENTLY waits
            # for every such transaction to end: two nodes starting together would deadlock
            while not conn.exec_driver_sql(f"SELECT pg_try_advisory_lock({JOIN_KEY})").scalar():
                time.sleep(0.05)
            yield
        finally:
            try:
                conn.exec_driver_sql(f"SELECT pg_advisory_unlock({JOIN_KEY})")
            finally:
                conn.close()

    def ensure_indexes(self) -> list:
        """Create the shared mode's indexes that are missing or invalid (SHARED_INDEXES), with
        CREATE INDEX CONCURRENTLY (writers of other nodes go on meanwhile). Call it inside
        `serialized()`. Returns the names created."""
        made = []
        with self.engine.connect() as c:
            c = c.execution_options(isolation_level="AUTOCOMMIT")
            for name, spec in SHARED_INDEXES:
                valid = c.exec_driver_sql(
                    "SELECT i.indisvalid FROM pg_index i JOIN pg_class x ON x.oid = "
                    "i.indexrelid WHERE x.relname = %s", (name,)).scalar()
                if valid:
                    continue
                if valid is not None:   # an interrupted build left it invalid
                    c.exec_driver_sql(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
                c.exec_driver_sql(f"CREATE INDEX CONCURRENTLY {name} ON jobs {spec}")
                made.append(name)
        return made

    def join(self) -> None:
        """Take the database in shared mode and name this node. Raises StoreLocked when a
        single-node server holds the database."""
        conn = self.engine.connect()
        got = conn.exec_driver_sql(
            f"SELECT pg_try_advisory_lock_shared({PG_LOCK_KEY})").scalar()
        conn.commit()
        if not got:
            conn.close()
            raise StoreLocked(
                f"a single-node jobgate server is using {self.describe()} (it holds advisory "
                f"lock {PG_LOCK_KEY}); stop it before starting nodes in shared mode")
        self._join_conn = conn
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({JOIN_KEY})")
        # ids stored by a single-node server (or a node of an older schema) stay below the
        # blocks: move the sequence past them
        top = conn.exec_driver_sql(
            "SELECT GREATEST(COALESCE((SELECT max(id) FROM jobs), 0), "
            "COALESCE((SELECT value FROM jobgate_meta WHERE key = 'next_id'), 1))").scalar()
        last, called = conn.exec_driver_sql(
            "SELECT last_value, is_called FROM jobgate_job_ids").one()
        if (last + ID_BLOCK if called else last) <= top:
            conn.exec_driver_sql("SELECT setval('jobgate_job_ids', %s, false)",
                                 ((top // ID_BLOCK + 1) * ID_BLOCK + 1,))
        start = conn.exec_driver_sql("SELECT nextval('jobgate_job_ids')").scalar()
        self.first_block = start
        self.number = (start // ID_BLOCK) & 0x7FFFFFFF
        self.node = f"{os.uname().nodename}:{os.getpid()}:{self.number}"
        self._seq_key = f"commit_seq:{self.number}"   # the node number is unique
        conn.exec_driver_sql(
            "INSERT INTO jobgate_meta (key, value) VALUES (%s, 0) ON CONFLICT (key) DO NOTHING",
            (self._seq_key,))
        conn.commit()
        self._sql_read_seq = f"SELECT value FROM jobgate_meta WHERE key = '{self._seq_key}'"
        # a row another node holds now (its reservation here expired and was rescued while
        # this node was cut off) is never overwritten or deleted from here
        self._mine = f" AND (node IS NULL OR node = '{self.node}')"
        for name in ("_sql_move", "_sql_reservation", "_sql_result", "_sql_payload"):
            setattr(self, name, getattr(self, name) + self._mine)

    def close(self) -> None:
        """Give back the rows this node holds without a reservation (taken for a command or a
        flow note whose answer the stopping node did not wait for: core/shared_flows.py) and
        its concurrency slots (core/shared_slots.py), forget this node's commit mark row and
        its figures (core/shared_figures.py), and release the shared lock and connections.
        Its reservations come back after their deadline (the rescuer)."""
        if self._join_conn is not None:
            try:
                self._join_conn.exec_driver_sql(
                    "WITH u AS (UPDATE jobs SET node = NULL WHERE node = %s AND state <> "
                    "'reserved' RETURNING queue, state) SELECT count(pg_notify(%s, q)) FROM "
                    "(SELECT DISTINCT queue AS q FROM u WHERE state = 'ready') s",
                    (self.node, READY_CHANNEL))
                self._join_conn.exec_driver_sql("DELETE FROM jobgate_meta WHERE key = %s",
                                                (self._seq_key,))
                delete_figures(self._join_conn, self.number)   # core/shared_figures.py
                # its concurrency slots (core/shared_slots.py): free for the other nodes now
                self._join_conn.exec_driver_sql(
                    "WITH d AS (DELETE FROM queue_slots WHERE node = %s RETURNING queue) "
                    "SELECT count(pg_notify(%s, queue)) FROM d", (self.node, SLOTS_CHANNEL))
                self._join_conn.commit()
                self._join_conn.close()
            except Exception:  # the server is stopping; the row is only a mark
                pass
            self._join_conn = None
        super().close()

    def raw(self):
        """A new DB-API connection (psycopg 3) of this store's pool, for a thread of its own."""
        return self.engine.raw_connection()

    # ---------------------------------------------------------------- writes
    def write(self, batch, verify: bool = False) -> None:
        """Store.write, then the shared-mode marks (module docstring) in the same
        transaction."""
        self._batch = batch
        try:
            if verify or self._seq_base is None:
                super().write(batch, verify)   # reads its commit mark back: one at a time
                return
            raw = self._wconn
            if raw is None:
                raw = self._wconn = self.engine.raw_connection()
            # psycopg 3 pipeline mode: the batch's statements go out without waiting for
            # each other's answers, one round trip to the commit instead of one per statement
            try:
                with raw.driver_connection.pipeline():
                    super().write(batch, verify)
            except sa.exc.SQLAlchemyError:
                raise
            except Exception as e:   # the pipeline's own sync failed (Store.write's contract)
                self._wconn = None
                try:
                    raw.invalidate()
                except Exception:  # pragma: no cover - gone anyway
                    pass
                base = self.engine.dialect.loaded_dbapi.Error
                if isinstance(e, base):
                    raise sa.exc.DBAPIError.instance(None, None, e, base) from e
                raise
        finally:
            self._batch = None

    def set_next_id(self, conn, next_id: int, commit_seq: int) -> None:
        """Only this node's commit mark: ids come from sequence jobgate_job_ids."""
        conn.exec_driver_sql("UPDATE jobgate_meta SET value = %s WHERE key = %s",
                             (commit_seq, self._seq_key))

    def write_records(self, conn, records: list) -> None:
        super().write_records(conn, records)
        b = self._batch
        if b is None:
            return
        ids = [r[0] for r in b.inserts]
        ids += [r[0] for r in b.inserts_full]
        ids += [r[-1] for r in b.moves]
        ids += [r[-1] for r in b.reservations]
        ids += [r[-1] for r in b.results]
        if ids:
            conn.exec_driver_sql(
                "WITH l AS (SELECT * FROM unnest(%s::bigint[], %s::bigint[]) AS l(id, until)), "
                "u AS (UPDATE jobs SET "
                "node = CASE WHEN state = 'reserved' THEN %s END, "
                "lease_until_ms = CASE WHEN state = 'reserved' THEN COALESCE("
                "(SELECT until FROM l WHERE l.id = jobs.id), lease_until_ms, %s + ttr_ms) END "
                f"WHERE id = ANY(%s){self._mine} "
                "RETURNING id, queue, state, uid, result IS NOT NULL AS fin, node) "
                f"SELECT count(pg_notify('{READY_CHANNEL}', q)) FROM "
                "(SELECT DISTINCT queue AS q FROM u WHERE state = 'ready' AND node IS NULL) s "
                f"UNION ALL SELECT count(pg_notify('{DONE_CHANNEL}', {UID_SQL})) FROM u "
                "WHERE fin",
                (list(b.leases[0]), list(b.leases[1]), self.node, _wall_ms(), ids))

    def delete_jobs(self, conn, ids: list) -> None:
        """Remove deleted jobs' rows and NOTIFY jobgate_done with each client uid (a result
        waiter on another node learns that the job is gone: core/shared_results.py). Jobs
        without one (beanstalk's, named by a derived uid) are not announced: a notification
        per beanstalk delete would wake every node's listener for nothing; a wait for such a
        job on another node ends at its timeout."""
        if ids:
            conn.exec_driver_sql(
                f"WITH d AS (DELETE FROM jobs WHERE id = ANY(%s){self._mine} RETURNING uid) "
                f"SELECT count(pg_notify('{DONE_CHANNEL}', uid)) FROM d "
                "WHERE uid IS NOT NULL", (ids,))

    # ---------------------------------------------------------- node's reads
    def claim(self, conn, demand: dict, now_ms: int) -> list:
        """Reserve for this node up to demand[queue] ready jobs of each queue, most urgent
        first (priority, then seq), skipping rows other nodes are claiming. Returns the rows
        as dicts of the jobs columns (state 'reserved', reserves counted)."""
        if not demand:
            return []
        names = list(demand)
        cur = conn.cursor()
        cur.execute(self._sql_claim, (names, [demand[n] for n in names], now_ms, self.node,
                                      now_ms))
        rows = [dict(zip(_COLS, r)) for r in cur.fetchall()]
        cur.close()
        conn.commit()
        rows.sort(key=lambda r: (r["priority"], r["seq"] or 0))
        return rows

    def next_block(self, conn) -> int:
        """The start of a new block of ID_BLOCK job ids."""
        cur = conn.cursor()
        cur.execute("SELECT nextval('jobgate_job_ids')")
        v = cur.fetchone()[0]
        cur.close()
        conn.commit()
        return v

    # ------------------------------------------------------------ listener
    def listen(self, conn) -> None:
        """On the listener session `conn` (autocommit): LISTEN for ready jobs, finished ones,
        other nodes' events and their subscribers' wants (core/shared_events.py), commands
        forwarded to this node (core/shared_calls.py), queue settings changed on other nodes
        (core/shared_settings.py), concurrency slots given back (core/shared_slots.py), and
        hold
        this node's liveness lock for as long as the session lives."""
        cur = conn.cursor()
        for channel in (READY_CHANNEL, DONE_CHANNEL, EVENTS_CHANNEL, SUBS_CHANNEL,
                        CALLS_CHANNEL, SETTINGS_CHANNEL, SLOTS_CHANNEL):
            cur.execute(f"LISTEN {channel}")
        cur.execute("SELECT pg_advisory_lock(%s, %s)", (NODE_LOCK_CLASS, self.number))
        cur.close()

    def try_lead(self, conn) -> bool:
        """On the listener session: True when this node took the leader lock (it keeps it
        while the session lives; call it only while not leading: session locks stack)."""
        cur = conn.cursor()
        cur.execute("SELECT pg_try_advisory_lock(%s)", (LEADER_KEY,))
        got = cur.fetchone()[0]
        cur.close()
        return bool(got)


def _wall_ms() -> int:
    return int(time.time() * 1000)


__all__ = ["SharedStore", "NODE_LOCK_CLASS", "LEADER_KEY", "READY_CHANNEL", "DONE_CHANNEL"]
