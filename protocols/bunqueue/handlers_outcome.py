"""ACK, ACKB, FAIL and lock upkeep: JobHeartbeat, JobHeartbeatB, ExtendLock
(bunqueue-tcp-protocol.txt "ACK", "FAIL", "JobHeartbeat"; the client's ExtendLock; reference
behaviour: bunqueue-golden.json and docs/bunqueue.md).

ACK, ACKB and FAIL act only on active jobs (`Job not found or not in processing state: <id>`),
whoever reserved them, when the lock token matches (or the job was pulled without one).
"""
from __future__ import annotations

import random

from core.model import DELAYED, RESERVED

from .codec import pack
from .jobview import DEFAULT_BACKOFF_MS
from .registry import command, err, ok_empty

MAX_BACKOFF_MS = 3_600_000   # the reference's DEFAULT_MAX_BACKOFF


def _now(sess) -> int:
    return sess.engine.clock.wall_ms()


# ------------------------------------------------------------ ack / fail
def _active(sess, id, token):
    """The active job `id` whose lock `token` matches; else an error reply dict."""
    e = sess.engine
    sid = str(id) if id is not None else "undefined"
    job = e.find_uid(sid) if id.__class__ is str else None
    if job is None or job.state is not RESERVED:
        return err(f"Job not found or not in processing state: {sid}")
    lock = sess.info.locks.get(job.id)
    if lock is not None:
        if token is None:
            return err(f"Lock token required for job {sid}")
        if token != lock:
            return err(f"Invalid or expired lock token for job {sid}")
    return job   # a token for a job pulled without a lock is ignored (reference)


def _ack(sess, job, result, remove) -> None:
    e = sess.engine
    now = _now(sess)
    sess.info.locks.pop(job.id, None)
    ext = job.ext
    if ext is None:
        ext = job.ext = {}
    ext["completedAt"] = now
    ext["progress"] = 100
    ext["resultFmt"] = 1
    e.complete(job, b"" if result is None else pack(result), "bunqueue")
    sess.info.total_completed += 1
    if remove or ext.get("removeOnComplete"):
        e.delete(None, job.id, "bunqueue", force=True, event="remove")
    if sess.info.subscribers:
        sess.info.publish("completed", job.queue, e.uid_of(job), now, data=result)


@command("ACK", mutating=True)
def ack(sess, cmd: dict):
    job = _active(sess, cmd.get("id"), cmd.get("token"))
    if job.__class__ is dict:
        return job
    _ack(sess, job, cmd.get("result"), cmd.get("removeOnComplete") is True)
    return ok_empty()


@command("ACKB", mutating=True)
def ack_batch(sess, cmd: dict):
    ids = cmd.get("ids")
    if ids.__class__ is not list:
        return err("ids must be an array")
    tokens = cmd.get("tokens")
    results = cmd.get("results")
    if tokens is not None and len(tokens) != len(ids):
        return err("ACKB tokens length must match ids length")
    if results is not None and len(results) != len(ids):
        return err("ACKB results length must match ids length")
    jobs = []
    for i, id in enumerate(ids):   # check every job first: all or nothing
        job = _active(sess, id, tokens[i] if tokens else None)
        if job.__class__ is dict:
            return job
        jobs.append(job)
    for i, job in enumerate(jobs):
        _ack(sess, job, results[i] if results else None, False)
    return ok_empty()


def backoff_ms(job, attempts: int) -> int:
    """The reference's retry delay: base * 2^attempts * jitter(0.5..1.5), at most an hour; a
    fixed backoff is base * jitter(0.8..1.2)."""
    ext = job.ext or {}
    cfg = ext.get("backoffConfig")
    if cfg and cfg.get("type") == "fixed":
        d = (cfg.get("delay") or 0) * (0.8 + random.random() * 0.4)
    else:
        base = ext.get("backoff", DEFAULT_BACKOFF_MS) if not cfg else (cfg.get("delay") or 0)
        d = base * (2 ** attempts) * (0.5 + random.random())
    return int(min(d, MAX_BACKOFF_MS))


@command("FAIL", mutating=True)
def fail(sess, cmd: dict):
    job = _active(sess, cmd.get("id"), cmd.get("token"))
    if job.__class__ is dict:
        return job
    e = sess.engine
    now = _now(sess)
    error = cmd.get("error")
    error = None if error is None else str(error)
    sess.info.locks.pop(job.id, None)
    ext = job.ext
    if ext is None:
        ext = job.ext = {}
    stack = cmd.get("stack")
    if stack.__class__ is list:
        lines = [s.strip() for s in stack if s.__class__ is str and s.strip()][:10]
        ext["stacktrace"] = lines or None
    ext["failedReason"] = error
    tl = ext.setdefault("timeline", [])
    if ext.get("startedAt") is not None:
        tl.append({"state": "active", "timestamp": float(ext["startedAt"])})
    tl.append({"state": "failed", "timestamp": float(now), "error": error,
               "attempt": job.fails + 1})
    raw = b"" if error is None else error.encode()
    if cmd.get("unrecoverable") is True:
        job.fails += 1
        e.dead_letter(job, raw, "bunqueue", "fail")
    else:
        e.fail(job, raw, "bunqueue", backoff_ms(job, job.fails + 1))
        if job.result is None:   # retried
            tl.append({"state": "waiting", "timestamp": float(now), "attempt": job.fails + 1})
            ext["runAt"] = now + (job.ready_at - e.clock.monotonic_ms()
                                  if job.state is DELAYED else 0)
            ext.pop("startedAt", None)
    del tl[:-18]
    if job.result is not None:
        ext.setdefault("dlqReason", "max_attempts_exceeded")
        ext["dlqAt"] = now
        sess.info.total_failed += 1
        if ext.get("removeOnFail"):
            e.delete(None, job.id, "bunqueue", force=True, event="remove")
    e._mark(job)
    if sess.info.subscribers:
        sess.info.publish("failed", job.queue, e.uid_of(job), now, error=error)
    return ok_empty()


# ------------------------------------------------------------- lock upkeep
def _renew(sess, id, token, ttl: int = 0) -> bool:
    e = sess.engine
    job = e.find_uid(id) if id.__class__ is str else None
    if job is None or job.state is not RESERVED:
        return False
    lock = sess.info.locks.get(job.id)
    if lock is not None and token is not None and token != lock:
        return False
    if job.ext is None:
        job.ext = {}
    job.ext["lastHeartbeat"] = _now(sess)
    return e.touch_job(job, ttl)


@command("JobHeartbeat")
def job_heartbeat(sess, cmd: dict):
    if not _renew(sess, cmd.get("id"), cmd.get("token")):
        return err("Job not found or not active (or invalid token)")
    return {"ok": True, "data": {"ok": True}}


@command("JobHeartbeatB")
def job_heartbeat_batch(sess, cmd: dict):
    ids = cmd.get("ids") or []
    tokens = cmd.get("tokens")
    n = 0
    for i, id in enumerate(ids):
        if _renew(sess, id, tokens[i] if tokens and i < len(tokens) else None):
            n += 1
    return {"ok": True, "data": {"ok": True, "count": n}}


@command("ExtendLock")
def extend_lock(sess, cmd: dict):
    d = cmd.get("duration")
    ttl = int(d) if d.__class__ in (int, float) and d > 0 else 0
    if not _renew(sess, cmd.get("id"), cmd.get("token"), ttl):
        return err("Lock not found or invalid token")
    return ok_empty()

