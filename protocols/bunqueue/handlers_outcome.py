"""ACK, ACKB, FAIL and lock upkeep: JobHeartbeat, JobHeartbeatB, ExtendLock
(bunqueue-tcp-protocol.txt "ACK", "FAIL", "JobHeartbeat"; the client's ExtendLock; reference
behaviour: bunqueue-golden.json and docs/bunqueue.md).

ACK, ACKB and FAIL act only on active jobs (`Job not found or not in processing state: <id>`),
whoever reserved them, when the lease token allows it (core/leases.py: a lock needs its token;
a pull without `owner` ignores tokens; another dialect's reservation checks a presented token).
"""
from __future__ import annotations

import random

from core.api import LEASE_OK, NOT_ACTIVE, TOKEN_MISSING, Failure

from .codec import UNDEFINED, pack
from .jobview import DEFAULT_BACKOFF_MS
from .registry import command, err, ok_empty

MAX_BACKOFF_MS = 3_600_000   # the reference's DEFAULT_MAX_BACKOFF


def _now(sess) -> int:
    return sess.port.clock.wall_ms()


# ------------------------------------------------------------ ack / fail
def _active(sess, id, token):
    """The id (int) of active job `id` whose lease `token` allows finishing it (core/leases.py:
    a lock needs its token; a pull without `owner` has no lock and ignores any token; a job
    another dialect reserved checks a token that is presented); else an error reply dict."""
    e = sess.port
    sid = str(id) if id is not None else "undefined"
    jid = e.find(sid) if id.__class__ is str else None
    c = NOT_ACTIVE if jid is None else e.check_lease(jid, token)
    if c == LEASE_OK:
        return jid
    if c == NOT_ACTIVE:
        return err(f"Job not found or not in processing state: {sid}")
    if c == TOKEN_MISSING:
        return err(f"Lock token required for job {sid}")
    return err(f"Invalid or expired lock token for job {sid}")


def _ack(sess, jid: int, result, remove) -> None:
    """Complete job `jid` with `result`: UNDEFINED (none given) is stored empty, which the
    reference's getResult answers as undefined; anything else (null too) packed."""
    e = sess.port
    e.complete(jid, b"" if result is UNDEFINED else pack(result), "bunqueue",
               {"completedAt": _now(sess), "progress": 100, "resultFmt": 1})
    sess.info.total_completed += 1
    if remove or (e.job(jid).ext or {}).get("removeOnComplete"):
        e.remove(jid, "bunqueue", "remove")


@command("ACK", mutating=True)
def ack(sess, cmd: dict):
    jid = _active(sess, cmd.get("id"), cmd.get("token"))
    if jid.__class__ is dict:
        return jid
    _ack(sess, jid, cmd.get("result", UNDEFINED), cmd.get("removeOnComplete") is True)
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
    jids = []
    for i, id in enumerate(ids):   # check every job first: all or nothing
        jid = _active(sess, id, tokens[i] if tokens else None)
        if jid.__class__ is dict:
            return jid
        jids.append(jid)
    for i, jid in enumerate(jids):
        _ack(sess, jid, results[i] if results else UNDEFINED, False)
    return ok_empty()


def backoff_ms(job, attempts: int) -> int:
    """The reference's retry delay for `job` (a core.api.JobView): base * 2^attempts *
    jitter(0.5..1.5), at most an hour; a fixed backoff is base * jitter(0.8..1.2)."""
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
    """FAIL: counts an attempt and records the failure (error, stack: core/failures.py); the
    job waits again after the backoff, or at its last attempt (or `unrecoverable`) goes to the
    DLQ (removeOnFail: deleted instead)."""
    jid = _active(sess, cmd.get("id"), cmd.get("token"))
    if jid.__class__ is dict:
        return jid
    e = sess.port
    error = cmd.get("error")
    error = None if error is None else str(error)
    raw = b"" if error is None else error.encode()
    failure = Failure(error, cmd.get("stack"))
    unrecoverable = cmd.get("unrecoverable") is True
    view = e.job(jid)
    backoff = 0 if unrecoverable else backoff_ms(view, view.fails + 1)
    if e.fail(jid, raw, "bunqueue", backoff, failure, unrecoverable) == "dead":
        sess.info.total_failed += 1
        if (view.ext or {}).get("removeOnFail"):
            e.remove(jid, "bunqueue", "remove")
    return ok_empty()


# ------------------------------------------------------------- lock upkeep
def _renew(sess, id, token, ttl: int = 0) -> bool:
    e = sess.port
    jid = e.find(id) if id.__class__ is str else None
    if jid is None:
        return False
    return e.renew(jid, token, ttl, {"lastHeartbeat": _now(sess)})


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
