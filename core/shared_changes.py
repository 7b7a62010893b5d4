"""The admin changes of a node in shared mode (issue 19, item 4; docs/scaling.md,
docs/mapping.md "Shared mode"): beanstalk's kick, kick-job, delete of an unheld job and
pause-tube, workq's delete of a job another node holds, and the end of pauses across nodes,
over the jobs table that every node shares (the reads are in core/shared_reads.py).

Each function takes a DB-API connection (psycopg 3) first, runs on the node's claim thread
through core.shared.SharedNode.query_settled, and commits or rolls back before it returns.

Changes are conditional statements, so that two nodes never change one row twice: a kick
locks the rows it moves with `FOR UPDATE SKIP LOCKED` (two concurrent kicks share the buried
jobs, never kick one twice); a delete or kick-job names the states it accepts in its WHERE
clause (a row claimed meanwhile by another node no longer matches: PostgreSQL re-checks the
clause on the row's newest version). Jobs made ready are announced with
`NOTIFY jobgate_ready, '<queue>'` as the store does (core/shared_store.py), and history rows
(job_events) are written when `history` is on, as the engine's journal would.

Units: wall ms. Errors: the driver's (psycopg.Error), after a rollback.
"""
from __future__ import annotations

from .extras import BLOCKED_MS
from .model import parse_derived_uid
from .shared_reads import DONE_CHANNEL, HISTORY_ROWS, READY_CHANNEL, UID_SQL, _run
from .shared_settings import SETTINGS_CHANNEL

#: what a kick does to a row: ready now, one more kick, a failed job's result voided (a
#: dead letter taken back, as core/moves.py `_revive`)
_KICK_SET = ("SET state = 'ready', kicks = j.kicks + 1, ready_at_ms = NULL, node = NULL, "
             "result = NULL, result_ok = 0, expires_at_ms = CASE WHEN j.result IS NOT NULL "
             "AND j.ttl_ms = 0 THEN NULL ELSE j.expires_at_ms END")


def _kick_rows(cur, pick: str, args: tuple, dialect: str, now_ms: int, history: bool) -> int:
    """Kick the rows `pick` (a SELECT of ids ... FOR UPDATE SKIP LOCKED) selects; returns how
    many, their queues notified and their history written."""
    ev = (f", e AS ({HISTORY_ROWS})" if history else "")
    cur.execute(
        f"WITH k AS ({pick}), u AS (UPDATE jobs j {_KICK_SET} FROM k WHERE j.id = k.id "
        f"RETURNING j.id, j.queue, j.reserves, j.uid, j.priority, j.payload){ev} "
        f"SELECT count(*), count(pg_notify('{READY_CHANNEL}', q)) FROM "
        "(SELECT queue AS q FROM u) s GROUP BY q",
        args + ((dialect, "kick", now_ms) if history else ()))
    return sum(r[0] for r in cur.fetchall())


def kick(conn, queue: str, bound: int, dialect: str, now_ms: int, history: bool) -> int:
    """beanstalk kick on `queue`: up to `bound` buried jobs (put order), else, when the queue
    has no buried job at all, up to `bound` delayed jobs (soonest first; not a flow parent
    parked for its children, as on one server). Rows another node is changing are skipped.
    Returns how many jobs were kicked."""
    if bound <= 0:
        return 0

    def go(cur):
        n = _kick_rows(cur, "SELECT id FROM jobs WHERE queue = %s AND state = 'buried' "
                       "ORDER BY seq LIMIT %s FOR UPDATE SKIP LOCKED", (queue, bound),
                       dialect, now_ms, history)
        if n:
            return n
        cur.execute("SELECT EXISTS (SELECT 1 FROM jobs WHERE queue = %s AND state = 'buried')",
                    (queue,))
        if cur.fetchone()[0]:
            return 0     # buried jobs another kick holds: kick no delayed one (beanstalkd)
        return _kick_rows(cur, "SELECT id FROM jobs WHERE queue = %s AND state = 'delayed' "
                          "AND ready_at_ms <= %s ORDER BY ready_at_ms, id LIMIT %s "
                          "FOR UPDATE SKIP LOCKED", (queue, now_ms + BLOCKED_MS // 2, bound),
                          dialect, now_ms, history)
    return _run(conn, go)


def _allowed(cur, id: int, allows) -> bool:
    """True when `allows` is None or allows the queue of job `id` (False: no such row)."""
    if allows is None:
        return True
    cur.execute("SELECT queue FROM jobs WHERE id = %s", (id,))
    r = cur.fetchone()
    return r is not None and allows(r[0])


def kick_job(conn, id: int, dialect: str, now_ms: int, history: bool, allows=None) -> bool:
    """beanstalk kick-job of a job in the database: True when it was buried or delayed (not
    a flow parent parked for its children) and is ready now. `allows(queue)` (optional): a
    job of a queue it refuses is not found."""
    def go(cur):
        if not _allowed(cur, id, allows):
            return False
        return _kick_rows(cur, "SELECT id FROM jobs WHERE id = %s AND (state = 'buried' OR "
                          "(state = 'delayed' AND ready_at_ms <= %s)) FOR UPDATE",
                          (id, now_ms + BLOCKED_MS // 2), dialect, now_ms, history) > 0
    return _run(conn, go)


def delete(conn, id: int, dialect: str, now_ms: int, history: bool, allows=None) -> bool:
    """beanstalk delete of a job in the database that nobody holds: True when it was ready,
    delayed or buried (any client may delete those); False for a job reserved on a node, one
    another node has taken in (for a command of its own: it may reserve it), a completed one
    or none. `allows` as in kick_job."""
    def go(cur):
        if not _allowed(cur, id, allows):
            return False
        ev = f", e AS ({HISTORY_ROWS})" if history else ""
        cur.execute(
            "WITH u AS (DELETE FROM jobs WHERE id = %s AND node IS NULL AND state IN ('ready', "
            f"'delayed', 'buried') RETURNING id, queue, reserves, uid, priority, payload){ev} "
            "SELECT count(*) FROM u", (id,) + ((dialect, "delete", now_ms) if history else ()))
        return cur.fetchone()[0] > 0
    return _run(conn, go)


def delete_uid(conn, uid: str, queue: str | None, dialect: str, now_ms: int,
               history: bool) -> bool:
    """workq `delete` of a job this node does not hold: its row goes whatever its state (of
    `queue` when given), with a `delete` history row and NOTIFY jobgate_done; True when there
    was one. A node that held it finds its row gone: its later writes of it match nothing."""
    def go(cur):
        ev = f", e AS ({HISTORY_ROWS})" if history else ""
        id = parse_derived_uid(uid)
        which = "uid = %s" if id is None else "id = %s AND uid IS NULL"
        cur.execute(
            f"WITH u AS (DELETE FROM jobs WHERE {which} AND (%s::text IS NULL OR queue = %s) "
            f"RETURNING id, queue, reserves, uid, priority, payload){ev} "
            f"SELECT count(*), count(pg_notify('{DONE_CHANNEL}', {UID_SQL})) FROM u",
            (uid if id is None else id, queue, queue)
            + ((dialect, "delete", now_ms) if history else ()))
        return cur.fetchone()[0] > 0
    return _run(conn, go)


def pause(conn, queue: str, ms: int, now_ms: int, known: bool, number: int = -1) -> bool:
    """beanstalk pause-tube across nodes: claims skip `queue` for `ms` ms from `now_ms` (0:
    the pause ends now and the queue is notified, so that waiting reservers claim). False
    when the queue exists nowhere (not `known` here and no row in the database). The other
    nodes are told on channel jobgate_settings (`<number>p:<queue>`, `number` this node's)
    and install the pause in their engines (core/shared_settings.py)."""
    def go(cur):
        if not known:
            cur.execute("SELECT EXISTS (SELECT 1 FROM jobs WHERE queue = %s) OR EXISTS "
                        "(SELECT 1 FROM queue_pauses WHERE queue = %s)", (queue, queue))
            if not cur.fetchone()[0]:
                return False
        if ms > 0:
            cur.execute("INSERT INTO queue_pauses (queue, until_ms, pause_ms) "
                        "VALUES (%s, %s, %s) ON CONFLICT (queue) DO UPDATE SET "
                        "until_ms = EXCLUDED.until_ms, pause_ms = EXCLUDED.pause_ms",
                        (queue, now_ms + ms, ms))
        else:
            cur.execute("DELETE FROM queue_pauses WHERE queue = %s", (queue,))
            cur.execute("SELECT pg_notify(%s, %s)", (READY_CHANNEL, queue))
        cur.execute("SELECT pg_notify(%s, %s)", (SETTINGS_CHANNEL, f"{number}p:{queue}"))
        return True
    return _run(conn, go)


def end_pauses(conn, now_ms: int) -> int:
    """The leader's round: delete the pauses that ended by `now_ms` and notify their queues
    (the reservers waiting for them on any node claim then). Returns how many ended."""
    def go(cur):
        cur.execute("WITH d AS (DELETE FROM queue_pauses WHERE until_ms <= %s RETURNING queue) "
                    f"SELECT count(pg_notify('{READY_CHANNEL}', queue)) FROM d", (now_ms,))
        return cur.fetchone()[0]
    return _run(conn, go)


__all__ = ["delete", "delete_uid", "end_pauses", "kick", "kick_job", "pause"]
