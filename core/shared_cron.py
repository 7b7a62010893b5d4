"""Cron in shared mode (issue 19, docs/scaling.md "One leader"): the leader node fires the
stored schedules in the database, one transaction per round, so that no run is lost or
doubled across a failover.

`fire_due(conn, now_ms, ids)` locks the due rows of cron_schedules (`FOR UPDATE SKIP LOCKED`),
moves each schedule on with the engine's own rules (core.cron.advance: maxLimit, overlap,
missed repeatEvery intervals collapsing into one run), inserts the job of each run (ready, or
delayed by the template's delay) with its history row, and NOTIFYs the queues, then commits:
a run's job and its schedule's new next_run_ms commit together or not at all. A new leader
reads what the old one committed: a run it committed is not due any more, a run it did not
commit still is (fired late, once). This holds even if two nodes believed they led at once
(the row lock and the moved next_run_ms decide).

Not done here (docs/scaling.md): skip-missed-on-restart does not apply to a failover (a run due
during the gap fires late, once). A template's `uniqueKey` (preventOverlap) is checked
against the unfinished jobs of every node through `jobs.dedup_key` (migration 0011): a run
whose previous job is unfinished makes no job, as on one server. Times: wall ms.
"""
from __future__ import annotations

import msgpack

from .cron import DROP, FIRE, advance, schedule_of, uuid7
from .journal import dedup_text
from .schema import EVENT_COLUMNS, JOB_NEW_COLUMNS
from .shared_reads import READY_CHANNEL, _run

_pack = msgpack.Packer(use_bin_type=True).pack
_JOB_INSERT = (f"INSERT INTO jobs ({', '.join(JOB_NEW_COLUMNS)}) VALUES "
               f"({', '.join(['%s'] * len(JOB_NEW_COLUMNS))})")
_EVENT_INSERT = (f"INSERT INTO job_events ({', '.join(EVENT_COLUMNS)}) VALUES "
                 f"({', '.join(['%s'] * len(EVENT_COLUMNS))})")


def fire_due(conn, now_ms: int, ids: list) -> int:
    """Fire the schedules due by `now_ms` (at most len(ids) runs; the rest next round), using
    job ids from `ids` (ints this node owns, in order: the first `runs` are used). Returns
    how many runs fired.
    Raises the driver's error (nothing is committed then)."""
    cur = conn.cursor()
    try:
        cur.execute("SELECT name, queue, next_run_ms, executions, spec FROM cron_schedules "
                    "WHERE next_run_ms <= %s ORDER BY next_run_ms LIMIT %s "
                    "FOR UPDATE SKIP LOCKED", (now_ms, max(1, len(ids))))
        rows = cur.fetchall()
        fired = 0
        queues = set()
        for name, queue, next_run, executions, spec in rows:
            if fired >= len(ids):
                break   # no id left for it: the next round
            s = schedule_of({"name": name, "queue": queue, "next_run_ms": next_run,
                             "executions": executions, "spec": bytes(spec)})
            step = advance(s, now_ms)
            if step is DROP:
                cur.execute("DELETE FROM cron_schedules WHERE name = %s", (name,))
                continue
            if step is FIRE and _insert_job(cur, ids[fired], s, now_ms):
                fired += 1
                queues.add(s.queue)
            cur.execute("UPDATE cron_schedules SET next_run_ms = %s, executions = %s "
                        "WHERE name = %s", (s.next_run, s.executions, name))
        for q in queues:
            cur.execute("SELECT pg_notify(%s, %s)", (READY_CHANNEL, q))
        conn.commit()
        return fired
    except BaseException:
        conn.rollback()
        raise
    finally:
        cur.close()


def _insert_job(cur, job_id: int, s, now_ms: int) -> bool:
    """The job of one run of schedule `s` (its CronJob template), as Engine.put makes it.
    Returns False, making nothing, while the template's dedup key (bunqueue preventOverlap:
    `uniqueKey`) is held by an unfinished job of the queue on any node (core/cron.py `_fire`
    on one server)."""
    j = s.job
    ext = dict(j.ext) if j.ext else None
    key = dedup_text(ext.get("uniqueKey")) if ext else None
    if key is not None:
        cur.execute("SELECT 1 FROM jobs WHERE queue = %s AND dedup_key = %s AND result IS NULL "
                    "LIMIT 1", (s.queue, key))
        if cur.fetchone() is not None:
            return False   # the previous run's job is unfinished
    uid = uuid7(now_ms) if j.uuid7 else None
    delayed = j.delay_ms > 0
    cur.execute(_JOB_INSERT, (
        job_id, uid, s.queue, j.payload, j.priority, "delayed" if delayed else "ready",
        now_ms, now_ms + j.delay_ms if delayed else None, j.delay_ms, j.ttr_ms, j.dialect,
        j.ttl_ms, now_ms + j.ttl_ms if j.ttl_ms else None, 0, j.max_fails, 0, j.fmt,
        None if ext is None else _pack(ext), key))
    cur.execute(_EVENT_INSERT, (job_id, s.queue, j.dialect, j.event, now_ms, 0, uid,
                                j.priority, len(j.payload), None, None))
    return True


def schedules(conn, name: str | None = None) -> list:
    """The stored schedules as CronViews (every node's: the database is where the leader
    fires them from), all of them or the one named `name`, in creation order (the spec's
    `seq`, then the name): CronList, CronGet across nodes."""
    def go(cur):
        sql = "SELECT name, queue, next_run_ms, executions, spec FROM cron_schedules"
        cur.execute(sql + (" WHERE name = %s" if name is not None else ""),
                    (name,) if name is not None else ())
        out = [schedule_of({"name": r[0], "queue": r[1], "next_run_ms": r[2],
                            "executions": r[3], "spec": bytes(r[4])}) for r in cur.fetchall()]
        out.sort(key=lambda s: (s.seq, s.name))
        return [s.view() for s in out]
    return _run(conn, go)


def delete_schedule(conn, name: str, allows=None) -> bool:
    """Delete stored schedule `name` whichever node set it (CronDelete across nodes); True
    when there was one. `allows(queue)` (optional): a schedule of a queue it refuses is not
    found."""
    def go(cur):
        cur.execute("DELETE FROM cron_schedules WHERE name = %s RETURNING queue", (name,))
        r = cur.fetchone()
        if r is not None and allows is not None and not allows(r[0]):
            raise _Refused()
        return r is not None
    try:
        return _run(conn, go)
    except _Refused:
        return False


class _Refused(Exception):
    """delete_schedule's rollback for a schedule of a queue the caller may not use."""

