"""Manual state moves: MoveToWait, PromoteJobs, ChangeDelay (bunqueue 2.9.5's BullMQ v5 moves;
reference: infrastructure/server/handlers/advanced/jobs.js handleMoveToWait / handlePromoteJobs /
handleChangeDelay, application/queue-manager/job-management.js, operations/jobStateTransitions.js
and jobPromotion.js; replies recorded in the golden steps of issue 16).

Every move is a canonical transition of the engine (core/transitions.py), so the other dialects
see it at once (docs/mapping.md): MoveToWait of an active job is `release` (reserved -> ready,
whoever holds it, its lock token checked first), of a delayed job `promote`, of a failed job
`retry`; PromoteJobs is `promote` for the queue's oldest delayed jobs; ChangeDelay is `release`
to delayed (or ready for a delay <= 0) from waiting, delayed or active. A promoted or re-queued
job goes to a waiting reserver of any dialect (a beanstalk `reserve`) at once.

Units: `delay` in ms; `runAt` (the Job object's field) in wall ms.
"""
from __future__ import annotations

from core.api import DELAYED, LEASE_OK, NOT_ACTIVE, READY, RESERVED, TOKEN_MISSING

from .handlers_control import RETRY_DROP
from .handlers_query import find
from .jobview import state_name
from .options import number_error, queue_error, queue_name
from .registry import command, err, ok_empty


def _now(sess) -> int:
    return sess.port.clock.wall_ms()


def lease_error(sess, job, token) -> dict | None:
    """The reference's assertLeaseToken for a move of reserved `job` (a JobView): None when
    `token` (str or None) may move it, else the error reply (a lock needs its token)."""
    c = sess.port.check_lease(job.id, token)
    if c == LEASE_OK or c == NOT_ACTIVE:
        return None
    if c == TOKEN_MISSING:
        return err(f"Lock token required for job {job.uid}")
    return err(f"Invalid or expired lock token for job {job.uid}")


def _token(cmd: dict):
    t = cmd.get("token")
    return t if t.__class__ is str and t else None


def note_event(sess, queue: str, n: int = 1) -> None:
    """Count `n` lifecycle events of `queue` for TrimEvents (handlers_metrics.py)."""
    sess.info.telemetry.event(queue, n)


def _left_active(job, fields: dict) -> dict:
    """`fields` plus the job's timeline with the "active" entry of the attempt it leaves (the
    reference appends it when the job is pulled and keeps it after a move)."""
    ext = job.ext or {}
    started = ext.get("startedAt")
    if started is not None:
        fields["timeline"] = list(ext.get("timeline", ())) + [
            {"state": "active", "timestamp": float(started)}]
    return fields


@command("MoveToWait", mutating=True)
def move_to_wait(sess, cmd: dict):
    """Active -> waiting (lock token checked), delayed -> waiting (promote), failed ->
    waiting (retry from the DLQ); waiting or prioritized: nothing to do."""
    job = find(sess, cmd.get("id"))
    state = "unknown" if job is None else state_name(job)
    e = sess.port
    now = _now(sess)
    if state == "active":
        bad = lease_error(sess, job, _token(cmd))
        if bad:
            return bad
        e.requeue(job.id, 0, "release", "bunqueue", _left_active(job, {"runAt": now}),
                  ("startedAt",))
    elif state == "delayed":
        e.requeue(job.id, 0, "promote", "bunqueue", {"runAt": now})
    elif state == "failed":
        e.requeue(job.id, 0, "retry", "bunqueue", {"runAt": now}, RETRY_DROP,
                  reset_fails=True)
    elif state not in ("waiting", "prioritized"):
        return err(f"Cannot move job from state '{state}' to waiting")
    if state not in ("waiting", "prioritized"):
        note_event(sess, job.queue)
    return ok_empty()


@command("PromoteJobs", mutating=True)
def promote_jobs(sess, cmd: dict):
    """The oldest `count` delayed jobs of the queue (all when absent) become waiting now."""
    q = cmd.get("queue")
    msg = queue_error(q)
    if msg:   # the reference crashes on a missing queue (a TypeError text): docs/bunqueue.md
        return err(msg)
    count = cmd.get("count")
    if count is None:
        n = None
    elif count.__class__ in (int, float) and count == count and count not in (
            float("inf"), float("-inf")):
        n = max(0, int(count // 1))
    else:
        n = 0   # Math.floor of a non-number is NaN: nothing is promoted
    ids = sess.port.promote_jobs(queue_name(q), n, "bunqueue", {"runAt": _now(sess)})
    if ids:
        note_event(sess, queue_name(q), len(ids))
    return {"ok": True, "count": len(ids)}


@command("ChangeDelay", mutating=True)
def change_delay(sess, cmd: dict):
    """A waiting, prioritized, delayed or active job waits `delay` ms from now (delayed; a
    delay <= 0 makes it waiting). An active job's lock token is checked first."""
    job = find(sess, cmd.get("id"))
    if job is not None and job.state is RESERVED:
        bad = lease_error(sess, job, _token(cmd))
        if bad:
            return bad
    d = cmd.get("delay")
    msg = number_error(d, "delay", float("-inf"), float("inf"), required=True)
    if msg:   # the reference stores NaN (a missing delay) or a string: docs/bunqueue.md
        return err(msg)
    if job is None or job.blocked or job.state not in (READY, DELAYED, RESERVED):
        return err("Job not found or cannot change delay")
    delay = max(0, int(d))
    fields = {"runAt": _now(sess) + delay}
    drop = ()
    if job.state is RESERVED:
        fields = _left_active(job, fields)
        drop = ("startedAt",)
    sess.port.requeue(job.id, delay, "release", "bunqueue", fields, drop)
    note_event(sess, job.queue)
    return ok_empty()


__all__ = ["move_to_wait", "promote_jobs", "change_delay", "lease_error"]
