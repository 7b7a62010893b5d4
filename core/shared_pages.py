"""The dashboard's reads and changes of rows in shared mode (issue 19; docs/dashboard.md
"Several nodes", docs/scaling.md): a queue's jobs by id in keyset pages, the failed counts,
and a drain, for the jobs that no node or another node holds (core/port_pages.py merges them
with the node's own). Statements only, each in its own transaction (core.shared_reads._run);
the gateway runs them on the node's claim thread. Units: wall ms; ids are job ids.
"""
from __future__ import annotations

from .extras import BLOCKED_MS
from .model import BURIED, COMPLETED, DELAYED, READY, RESERVED
from .shared_reads import _COLS, _SELECT, HISTORY_ROWS, _run, row_view

#: the dashboard's state filters as SQL (core/paging.py FILTERS: "failed" is a buried job with
#: a result, a subset of "buried")
_STATE_SQL = {"ready": "state = 'ready'", "delayed": "state = 'delayed'",
              "reserved": "state = 'reserved'", "buried": "state = 'buried'",
              "completed": "state = 'completed'",
              "failed": "state = 'buried' AND result IS NOT NULL"}


def page(conn, node: str, queue: str, state, after, before, limit: int, now_ms: int) -> tuple:
    """Up to `limit` rows of `queue` not held by `node`, as JobViews in id order: with id >
    `after` (the first ones), with id < `before` (the last ones), or the first ones; `state`:
    a key of _STATE_SQL or None (all). Returns (views, more): `more` is True when a further row
    lies past the page in the direction read. A scan of the primary key filtered by queue:
    an operator's listing, not a worker's path."""
    def go(cur):
        sql = _SELECT + "WHERE queue = %s AND node IS DISTINCT FROM %s"
        args: list = [queue, node]
        if state is not None:
            sql += " AND " + _STATE_SQL[state]
        if before is not None:
            sql += " AND id < %s ORDER BY id DESC"
            args.append(before)
        else:
            if after is not None:
                sql += " AND id > %s"
                args.append(after)
            sql += " ORDER BY id"
        cur.execute(sql + " LIMIT %s", (*args, limit + 1))
        views = [row_view(dict(zip(_COLS, r)), now_ms) for r in cur.fetchall()]
        more = len(views) > limit
        views = views[:limit]
        if before is not None:
            views.reverse()
        return views, more
    return _run(conn, go)


def failed_counts(conn, node: str) -> dict:
    """{queue: buried rows with a result (failed for good)} of the rows not held by `node`,
    through `jobs_buried`."""
    def go(cur):
        cur.execute("SELECT queue, count(*) FROM jobs WHERE state = 'buried' AND result IS "
                    "NOT NULL AND node IS DISTINCT FROM %s GROUP BY queue", (node,))
        return dict(cur.fetchall())
    return _run(conn, go)


def job_counts_all(conn, node: str, now_ms: int) -> tuple:
    """Every queue's job counts of the rows not held by `node` (this node counts those), for
    the bunqueue Prometheus gauges across nodes: ({queue: {state: jobs, "prioritized": ready
    rows with a rank below 0, "blocked": delayed rows parked for flow children (in `delayed`
    too)}}, pauses {queue: (until_ms, pause_ms)} in force at `now_ms`). One sequential scan
    of the jobs table (a scrape's read, as the server-wide `counts`)."""
    def go(cur):
        cur.execute(_ALL_QUEUES, (now_ms + BLOCKED_MS // 2, node))
        out = {}
        for q, ready, prio, delayed, blocked, reserved, buried, completed in cur.fetchall():
            out[q] = {READY: ready, "prioritized": prio, DELAYED: delayed, "blocked": blocked,
                      RESERVED: reserved, BURIED: buried, COMPLETED: completed}
        cur.execute("SELECT queue, until_ms, pause_ms FROM queue_pauses WHERE until_ms > %s",
                    (now_ms,))
        return out, {q: (u, p) for q, u, p in cur.fetchall()}
    return _run(conn, go)


#: every queue's counts by state in one scan (a delayed row parked past now + BLOCKED_MS / 2
#: waits for its flow children: shared_reads._ALL_STATES's rule)
_ALL_QUEUES = (
    "SELECT queue, count(*) FILTER (WHERE state = 'ready'), "
    "count(*) FILTER (WHERE state = 'ready' AND priority < 0), "
    "count(*) FILTER (WHERE state = 'delayed'), "
    "count(*) FILTER (WHERE state = 'delayed' AND ready_at_ms > %s), "
    "count(*) FILTER (WHERE state = 'reserved'), count(*) FILTER (WHERE state = 'buried'), "
    "count(*) FILTER (WHERE state = 'completed') "
    "FROM jobs WHERE node IS DISTINCT FROM %s GROUP BY queue")


def drain(conn, queue: str, dialect: str, now_ms: int, history: bool) -> int:
    """Delete the waiting rows of `queue` that no node holds: ready ones and delayed ones that
    are not flow parents parked for their children (Port.drain_queue's rule), each with a
    `drain` history row when `history`; returns how many."""
    def go(cur):
        ev = f", e AS ({HISTORY_ROWS})" if history else ""
        cur.execute(
            "WITH u AS (DELETE FROM jobs WHERE queue = %s AND node IS NULL AND (state = 'ready' "
            "OR (state = 'delayed' AND ready_at_ms <= %s)) RETURNING id, queue, reserves, uid, "
            f"priority, payload){ev} SELECT count(*) FROM u",
            (queue, now_ms + BLOCKED_MS // 2) + ((dialect, "drain", now_ms) if history else ()))
        return cur.fetchone()[0]
    return _run(conn, go)


__all__ = ["drain", "failed_counts", "page"]
