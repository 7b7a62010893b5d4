"""The global reads of a node in shared mode (issue 19, item 4; docs/scaling.md,
docs/mapping.md "Shared mode"): beanstalk's stats, stats-tube, list-tubes, peek*, stats-job,
bunqueue's counts, job reads and listings, over the jobs table that every node shares (the
admin changes are in core/shared_changes.py).

Each function takes a DB-API connection (psycopg 3) first, runs on the node's claim thread
through core.shared.SharedNode.query_settled, and commits or rolls back before it returns.
The port (core/port_global.py) merges what they return with the node's own engine: rows held
by this node (`node = <this node>`, reserved here) are left out of the counts, because the
engine counts them itself.

Units: wall ms. Errors: the driver's (psycopg.Error), after a rollback.
"""
from __future__ import annotations

from types import MappingProxyType

import msgpack

from . import schema
from .extras import BLOCKED_MS
from .model import (BURIED, COMPLETED, DELAYED, READY, RESERVED, UID_PREFIX, URGENT_RANK,
                    JobView, LeaseView, derived_uid, parse_derived_uid)

#: the NOTIFY channels of shared mode: a queue got a ready job (payload: the queue name); a
#: job got its result or was deleted (payload: its uid: core/shared_results.py)
READY_CHANNEL = "jobgate_ready"
DONE_CHANNEL = "jobgate_done"

_COLS = tuple(c.name for c in schema.jobs.columns)
_SELECT = "SELECT " + ", ".join(_COLS) + " FROM jobs "
_STATES = {s: s for s in (DELAYED, READY, RESERVED, BURIED, COMPLETED)}
#: SQL of a row's uid as the dialects name it: its client uid, else the uid derived from its
#: id (core.model.derived_uid: UID_PREFIX, the 18 hex digits of the id cut 3-3-12 around
#: "-8"), for rows `u` that returned `id` and `uid` (jobgate_done notifications)
UID_SQL = ("COALESCE(uid, '" + UID_PREFIX + "' || substr(lpad(to_hex(id), 18, '0'), 1, 3) "
           "|| '-8' || substr(lpad(to_hex(id), 18, '0'), 4, 3) || '-' || "
           "substr(lpad(to_hex(id), 18, '0'), 7))")
#: history rows of jobs an UPDATE/DELETE ... RETURNING `u` changed
HISTORY_ROWS = ("INSERT INTO job_events (job_id, queue, dialect, event, at_ms, attempt, uid, "
           "priority, payload_size, worker, error) SELECT id, queue, %s, %s, %s, reserves, uid, "
           "priority, length(payload), NULL, NULL FROM u")


def _run(conn, fn):
    """Run `fn(cur)` in one transaction on `conn`: commit after, roll back on error."""
    cur = conn.cursor()
    try:
        out = fn(cur)
        cur.close()
        conn.commit()
        return out
    except BaseException:
        try:
            conn.rollback()
        except Exception:  # the connection is gone: the caller's error says why
            pass
        raise


# ------------------------------------------------------------------------------ reads
def counts(conn, node: str, queue: str | None, now_ms: int) -> tuple:
    """Job counts of every queue (or of `queue`) in the database, leaving out the rows held
    by `node` (this node counts those itself), and the pauses in force at `now_ms`.

    Returns (rows, pauses): rows [(queue, state, jobs, urgent)] (urgent: ready jobs with rank
    below URGENT_RANK, on the ready row); pauses {queue: (until_ms, pause_ms)}. The
    server-wide form reads the whole jobs table (one sequential scan); the form for one queue
    counts each state beanstalk shows through its partial index (jobs_claim, jobs_due,
    jobs_held, jobs_buried) and leaves out completed jobs (beanstalk does not see them)."""
    def go(cur):
        if queue is None:
            cur.execute("SELECT queue, state, count(*), count(*) FILTER (WHERE state = "
                        "'ready' AND priority < %s) FROM jobs WHERE node IS DISTINCT FROM %s "
                        "GROUP BY queue, state", (URGENT_RANK, node))
            rows = [(q, _STATES.get(s, s), n, u) for q, s, n, u in cur.fetchall()]
            cur.execute("SELECT queue, until_ms, pause_ms FROM queue_pauses "
                        "WHERE until_ms > %s", (now_ms,))
        else:
            cur.execute(_ONE_QUEUE, (queue, queue, node, queue, URGENT_RANK, queue))
            ready, urgent, delayed, reserved, buried = cur.fetchone()
            rows = [(queue, st, n, urgent if st is READY else 0)
                    for st, n in ((READY, ready), (DELAYED, delayed), (RESERVED, reserved),
                                  (BURIED, buried)) if n]
            cur.execute("SELECT queue, until_ms, pause_ms FROM queue_pauses "
                        "WHERE until_ms > %s AND queue = %s", (now_ms, queue))
        pauses = {q: (u, p) for q, u, p in cur.fetchall()}
        return rows, pauses
    return _run(conn, go)


#: the counts of one queue, one state at a time so that each is a scan of its partial index
_ONE_QUEUE = (
    "SELECT r.n, r.u, "
    "(SELECT count(*) FROM jobs WHERE queue = %s AND state = 'delayed'), "
    "(SELECT count(*) FROM jobs WHERE queue = %s AND state = 'reserved' "
    "AND node IS DISTINCT FROM %s), "
    "(SELECT count(*) FROM jobs WHERE queue = %s AND state = 'buried') "
    "FROM (SELECT count(*) AS n, count(*) FILTER (WHERE priority < %s) AS u FROM jobs "
    "WHERE queue = %s AND state = 'ready') r")


def job_counts(conn, node: str, queue: str, now_ms: int) -> tuple:
    """Every state's count of `queue`'s rows not held by `node` (this node counts those), for
    a bunqueue GetJobCounts / Count: ({state: jobs, "prioritized": ready jobs with a rank
    below 0, "blocked": delayed rows parked for flow children (in `delayed` too)}, pause
    {queue: (until_ms, pause_ms)} in force at `now_ms`). The states beanstalk
    sees are index scans (as counts()); `completed` reads the table (no index has it)."""
    def go(cur):
        cur.execute(_ALL_STATES, (queue, node, queue, now_ms + BLOCKED_MS // 2, node, queue,
                                  node, queue, node, queue, node, queue, node))
        ready, prio, delayed, blocked, reserved, buried, completed = cur.fetchone()
        cur.execute("SELECT queue, until_ms, pause_ms FROM queue_pauses "
                    "WHERE until_ms > %s AND queue = %s", (now_ms, queue))
        pauses = {q: (u, p) for q, u, p in cur.fetchall()}
        return ({READY: ready, "prioritized": prio, DELAYED: delayed, "blocked": blocked,
                 RESERVED: reserved, BURIED: buried, COMPLETED: completed}, pauses)
    return _run(conn, go)


_ALL_STATES = (
    "SELECT r.n, r.p, "
    "(SELECT count(*) FROM jobs WHERE queue = %s AND state = 'delayed' "
    "AND node IS DISTINCT FROM %s), "
    "(SELECT count(*) FROM jobs WHERE queue = %s AND state = 'delayed' AND ready_at_ms > %s "
    "AND node IS DISTINCT FROM %s), "
    "(SELECT count(*) FROM jobs WHERE queue = %s AND state = 'reserved' "
    "AND node IS DISTINCT FROM %s), "
    "(SELECT count(*) FROM jobs WHERE queue = %s AND state = 'buried' "
    "AND node IS DISTINCT FROM %s), "
    "(SELECT count(*) FROM jobs WHERE queue = %s AND state = 'completed' "
    "AND node IS DISTINCT FROM %s) "
    "FROM (SELECT count(*) AS n, count(*) FILTER (WHERE priority < 0) AS p FROM jobs "
    "WHERE queue = %s AND state = 'ready' AND node IS DISTINCT FROM %s) r")


def queue_jobs(conn, node: str, queue: str, where, newest_first: bool, limit: int,
               now_ms: int) -> list:
    """Up to `limit` rows of `queue` not held by `node`, as JobViews, by id (descending with
    `newest_first`); `where`: None (every state) or a list of (state, rank) filters, OR-ed:
    rank None (any), "neg" (priority below 0), "nonneg", "blocked" (a delayed row parked for
    its flow children: ready_at_ms past now + BLOCKED_MS / 2) or "free" (not parked) (bunqueue
    GetJobs across nodes).
    Index scans by id (the primary key) filtered by queue: a listing, not a worker's path."""
    def go(cur):
        cond, args = [], [queue, node]
        for state, rank in where or ():
            c = "state = %s"
            args.append(state)
            if rank == "neg":
                c += " AND priority < 0"
            elif rank == "nonneg":
                c += " AND priority >= 0"
            elif rank == "blocked":
                c += " AND ready_at_ms > %s"
                args.append(now_ms + BLOCKED_MS // 2)
            elif rank == "free":
                c += " AND (ready_at_ms IS NULL OR ready_at_ms <= %s)"
                args.append(now_ms + BLOCKED_MS // 2)
            cond.append(f"({c})")
        if where is not None and not cond:
            return []
        sql = _SELECT + "WHERE queue = %s AND node IS DISTINCT FROM %s"
        if cond:
            sql += " AND (" + " OR ".join(cond) + ")"
        sql += f" ORDER BY id {'DESC' if newest_first else 'ASC'} LIMIT %s"
        cur.execute(sql, (*args, limit))
        return [row_view(dict(zip(_COLS, r)), now_ms) for r in cur.fetchall()]
    return _run(conn, go)


def uids_present(conn, uids: list) -> set:
    """The ones of `uids` that a row has (custom ids across nodes), through `jobs_uid`."""
    def go(cur):
        cur.execute("SELECT uid FROM jobs WHERE uid = ANY(%s)", (list(uids),))
        return {r[0] for r in cur.fetchall()}
    return _run(conn, go)


def priority_counts(conn, node: str, queue: str, now_ms: int) -> dict:
    """{priority rank: rows} of the ready and delayed rows of `queue` not held by `node`,
    leaving out delayed rows parked for dependencies (a ready_at_ms past now + BLOCKED_MS / 2,
    as Flows.is_parked tells them); ready rows through `jobs_claim`, delayed through
    `jobs_due`."""
    def go(cur):
        cur.execute("SELECT priority, count(*) FROM jobs WHERE queue = %s AND node IS "
                    "DISTINCT FROM %s AND (state = 'ready' OR (state = 'delayed' AND "
                    "ready_at_ms < %s)) GROUP BY priority",
                    (queue, node, now_ms + BLOCKED_MS // 2))
        return dict(cur.fetchall())
    return _run(conn, go)


def keys_present(conn, pairs: list) -> dict:
    """{(queue, dedup text): uid} for those of `pairs` ((queue, core.journal.dedup_text of a
    key)) that an unfinished job (`result IS NULL`) holds, whichever node put it: dedup keys
    across nodes, through `jobs_dedup`."""
    def go(cur):
        cur.execute(f"SELECT queue, dedup_key, {UID_SQL} FROM jobs WHERE dedup_key = ANY(%s) "
                    "AND queue = ANY(%s) AND result IS NULL",
                    ([k for _, k in pairs], list({q for q, _ in pairs})))
        want = set(pairs)
        return {(q, k): u for q, k, u in cur.fetchall() if (q, k) in want}
    return _run(conn, go)


def queue_names(conn, now_ms: int) -> list:
    """The names of the queues with jobs in the database or a pause in force, sorted."""
    def go(cur):
        cur.execute("SELECT DISTINCT queue FROM jobs UNION "
                    "SELECT queue FROM queue_pauses WHERE until_ms > %s", (now_ms,))
        return sorted(r[0] for r in cur.fetchall())
    return _run(conn, go)


def job(conn, id: int, now_ms: int) -> JobView | None:
    """Job `id` as a JobView (see row_view), or None when it has no row."""
    def go(cur):
        cur.execute(_SELECT + "WHERE id = %s", (id,))
        r = cur.fetchone()
        return None if r is None else row_view(dict(zip(_COLS, r)), now_ms)
    return _run(conn, go)


def job_uid(conn, uid: str, now_ms: int) -> JobView | None:
    """The job whose uid is `uid` as a JobView (see row_view), or None when it has no row
    (result waits and job reads of a job another node holds)."""
    id = parse_derived_uid(uid)

    def go(cur):
        if id is None:
            cur.execute(_SELECT + "WHERE uid = %s", (uid,))
        else:   # a job created without a client uid (beanstalk) is named by its id
            cur.execute(_SELECT + "WHERE id = %s AND uid IS NULL", (id,))
        r = cur.fetchone()
        return None if r is None else row_view(dict(zip(_COLS, r)), now_ms)
    return _run(conn, go)


def jobs_uids(conn, uids: list, now_ms: int) -> dict:
    """{uid: JobView} of the jobs named `uids` that have rows (see row_view; a job created
    without a client uid is named by its derived uid): a flow parent's children on any node."""
    ids = [i for i in map(parse_derived_uid, uids) if i is not None]
    real = [u for u in uids if parse_derived_uid(u) is None]

    def go(cur):
        cur.execute(_SELECT + "WHERE uid = ANY(%s) OR (id = ANY(%s) AND uid IS NULL)",
                    (real, ids))
        out = {}
        for r in cur.fetchall():
            v = row_view(dict(zip(_COLS, r)), now_ms)
            out[v.uid] = v
        return out
    return _run(conn, go)


#: peek-ready / peek-delayed / peek-buried: the order each takes its first job in. The
#: database keeps no bury time: the buried job put first (seq) stands for the oldest buried.
_TOP = {READY: "ORDER BY priority, seq", DELAYED: "ORDER BY ready_at_ms, id",
        BURIED: "ORDER BY seq"}


def top(conn, queue: str, state: str, now_ms: int) -> JobView | None:
    """The first job of `queue` in `state` (ready, delayed or buried) in the order of _TOP,
    as a JobView; None when there is none."""
    def go(cur):
        cur.execute(_SELECT + f"WHERE queue = %s AND state = %s {_TOP[state]} LIMIT 1",
                    (queue, state))
        r = cur.fetchone()
        return None if r is None else row_view(dict(zip(_COLS, r)), now_ms)
    return _run(conn, go)


def row_view(r: dict, now_ms: int) -> JobView:
    """A JobView of a jobs row `r` (a dict of its columns) at wall time `now_ms`: `left_ms` /
    `due_ms` from ready_at_ms (delayed) or lease_until_ms (reserved on a node: its lease is
    a LeaseView whose owner is the lease owner, else the node)."""
    st = _STATES.get(r["state"], r["state"])
    left = due = 0
    lease = None
    if st is DELAYED and r["ready_at_ms"] is not None:
        due = r["ready_at_ms"]
        left = due - now_ms
    elif st is RESERVED and r["lease_until_ms"] is not None:
        due = r["lease_until_ms"]
        left = due - now_ms
        lease = LeaseView(r["lease_token"] or "", 0, r["lease_owner"] or r["node"] or "",
                          left, due)
    ext = None
    if r["extras"] is not None:
        ext = msgpack.unpackb(bytes(r["extras"]), raw=False, strict_map_key=False)
    uid = r["uid"]
    res = r["result"]
    return JobView(
        r["id"], uid if uid is not None else derived_uid(r["id"]), uid is not None, r["queue"],
        bytes(r["payload"]), r["payload_fmt"], r["priority"], st, r["dialect"],
        r["created_ms"], r["delay_ms"], r["ttr_ms"], r["ttl_ms"], r["sched_ms"],
        r["max_attempts"], r["max_fails"], r["reserves"], r["timeouts"], r["releases"],
        r["buries"], r["kicks"], r["fails"], None if res is None else bytes(res),
        bool(r["result_ok"]), None if ext is None else MappingProxyType(ext),
        ext is not None and bool(ext.get("deps")), left, due, lease)


__all__ = ["counts", "job", "job_counts", "job_uid", "jobs_uids", "keys_present",
           "priority_counts", "queue_jobs", "queue_names", "row_view", "top", "uids_present"]
