"""Control, DLQ, worker, log and event commands (bunqueue-tcp-protocol.txt "Control Commands",
"DLQ Commands", "Worker Commands", "Log Commands"; the client's SubscribeEvents).

Mapping onto the canonical engine (docs/mapping.md): Cancel deletes a waiting or delayed job;
Discard dead-letters it (buried with a result, which beanstalk's kick revives); RetryDlq and
RetryCompleted requeue; Pause is an indefinite pause-tube; Drain deletes the waiting jobs;
Obliterate deletes every job of the queue; progress and logs are extras stored with the job.
"""
from __future__ import annotations

from core.api import BURIED, COMPLETED, DELAYED, READY, RESERVED

from .handlers_query import find, not_active
from .jobview import first_state
from .options import data_error, encode_data, number_error, queue_name
from .registry import command, err, ok_empty

#: An indefinite pause (ms): about 100 years.
PAUSE_FOREVER_MS = 100 * 365 * 86_400_000
#: Log entries kept per job (the oldest are dropped).
MAX_LOGS = 1000


def _now(sess) -> int:
    return sess.port.clock.wall_ms()


def _not_found(id=None) -> dict:
    return err("Job not found")


@command("Cancel", mutating=True)
def cancel(sess, cmd: dict):
    job = find(sess, cmd.get("id"))
    if job is None or job.state not in (READY, DELAYED):
        return err("Job not found or cannot be cancelled")
    sess.port.remove(job.id, "bunqueue", "cancel")
    return ok_empty()


@command("Progress", mutating=True)
def progress(sess, cmd: dict):
    job = find(sess, cmd.get("id"))
    msg = not_active(sess, job)
    if msg:
        return err(msg)
    p = cmd.get("progress")
    msg = number_error(p, "progress", 0, 100, required=True)
    if msg:
        return err(msg)
    fields = {"progress": p, "lastHeartbeat": _now(sess)}
    m = cmd.get("message")
    if m is not None:
        fields["progressMessage"] = str(m)
    sess.port.update_extras(job.id, fields)
    return ok_empty()


@command("Update", mutating=True)
def update(sess, cmd: dict):
    job = find(sess, cmd.get("id"))
    if job is None:
        return err("Job not found or cannot be updated")
    data = cmd.get("data")
    msg = data_error(data)
    if msg:
        return err(msg)
    payload, fmt = encode_data(data)
    sess.port.replace_payload(job.id, payload, fmt)
    return ok_empty()


@command("ChangePriority", mutating=True)
def change_priority(sess, cmd: dict):
    job = find(sess, cmd.get("id"))
    if job is None or job.state not in (READY, DELAYED) or job.blocked:
        return err("Job not found or not in queue")   # a flow parent too (reference)
    p = cmd.get("priority")
    msg = number_error(p, "priority", -1_000_000, 1_000_000, required=True)
    if msg:
        return err(msg)
    if job.ext is None or "firstState" not in job.ext:   # the timeline keeps its first state
        sess.port.update_extras(job.id, {"firstState": first_state(job, job.ext or {})})
    sess.port.change_priority(job.id, -int(p), "bunqueue")
    return ok_empty()


@command("Promote", mutating=True)
def promote(sess, cmd: dict):
    job = find(sess, cmd.get("id"))
    if job is None or job.state is not DELAYED or job.blocked:
        return err("Job not found or not delayed")
    sess.port.requeue(job.id, 0, "promote", "bunqueue", {"runAt": _now(sess)})
    return ok_empty()


@command("MoveToDelayed", mutating=True)
def move_to_delayed(sess, cmd: dict):
    job = find(sess, cmd.get("id"))
    if job is not None and job.blocked:   # a flow parent (reference text)
        return err("Job is not active (current state: waiting-children)")
    if job is None or job.state not in (RESERVED, READY, DELAYED):
        return _not_found()
    d = cmd.get("delay")
    msg = number_error(d, "delay", 0, 365 * 86_400_000, required=True)
    if msg:
        return err(msg)
    sess.port.requeue(job.id, int(d), "release", "bunqueue", {"runAt": _now(sess) + int(d)})
    return ok_empty()


@command("Discard", mutating=True)
def discard(sess, cmd: dict):
    job = find(sess, cmd.get("id"))
    if job is None:
        return _not_found()
    if not sess.port.dead_letter(job.id, b"", "bunqueue",
                                 {"dlqReason": "unknown", "dlqAt": _now(sess)}):
        return _not_found()
    return ok_empty()


# ------------------------------------------------------------------ queues
@command("Pause", mutating=True)
def pause(sess, cmd: dict):
    e = sess.port
    name = queue_name(cmd.get("queue"))
    e.keep(name)   # an empty paused queue stays (and stays paused)
    e.pause(name, PAUSE_FOREVER_MS)
    return ok_empty()


@command("Resume", mutating=True)
def resume(sess, cmd: dict):
    e = sess.port
    name = queue_name(cmd.get("queue"))
    if e.pause(name, 0):
        e.keep(name, False)
    return ok_empty()


def _delete_where(sess, queue: str, pred, limit: int | None = None, event="delete") -> list:
    """Delete the jobs of `queue` that `pred(JobView)` selects, oldest first (at most `limit`);
    returns their ids (uids)."""
    e = sess.port
    jobs = [j for j in e.jobs(queue) if pred(j)]
    if limit is not None:
        jobs = jobs[:limit]
    for j in jobs:
        e.remove(j.id, "bunqueue", event)
    return [j.uid for j in jobs]


@command("Drain", mutating=True)
def drain(sess, cmd: dict):
    n = len(_delete_where(sess, queue_name(cmd.get("queue")),
                          lambda j: j.state is READY or (j.state is DELAYED and not j.blocked),
                          event="drain"))
    return {"ok": True, "count": n}


@command("Obliterate", mutating=True)
def obliterate(sess, cmd: dict):
    name = queue_name(cmd.get("queue"))
    _delete_where(sess, name, lambda j: True, event="obliterate")
    sess.port.clear_queue_settings(name)   # limits and stall config go too (reference)
    return ok_empty()


_CLEAN_STATES = {"completed": (COMPLETED,), "failed": (BURIED,), "wait": (READY,),
                 "waiting": (READY,), "delayed": (DELAYED,), "active": (RESERVED,)}


@command("Clean", mutating=True)
def clean(sess, cmd: dict):
    g = cmd.get("grace")
    msg = number_error(g, "grace", 0, float("inf"), required=True)
    if msg:
        return err(msg)
    cutoff = _now(sess) - g
    state = cmd.get("state")
    states = _CLEAN_STATES.get(state, (COMPLETED, BURIED, READY, DELAYED)) if state else None
    limit = cmd.get("limit")
    limit = int(limit) if limit.__class__ in (int, float) and limit > 0 else None

    def old(j):
        if states is not None and j.state not in states:
            return False
        if states is None and j.state is RESERVED:
            return False
        t = (j.ext or {}).get("completedAt") or j.created_ms
        return t <= cutoff
    ids = _delete_where(sess, queue_name(cmd.get("queue")), old, limit, event="clean")
    return {"ok": True, "count": len(ids), "ids": ids}


# --------------------------------------------------------------------- DLQ
#: Failure records a retry from the DLQ starts over without (core/failures.py).
_RETRY_DROP = ("failedReason", "stacktrace", "startedAt", "timeline", "dlqReason", "dlqAt")


@command("RetryDlq", mutating=True)
def retry_dlq(sess, cmd: dict):
    e = sess.port
    jid = cmd.get("jobId")
    jobs = e.dead_letters(queue_name(cmd.get("queue")))
    if jid is not None:
        jobs = [j for j in jobs if j.uid == str(jid)]
    for j in jobs:
        e.requeue(j.id, 0, "retry", "bunqueue", {"runAt": _now(sess)}, _RETRY_DROP,
                  reset_fails=True)
    return {"ok": True, "count": len(jobs)}


@command("PurgeDlq", mutating=True)
def purge_dlq(sess, cmd: dict):
    n = len(_delete_where(sess, queue_name(cmd.get("queue")), lambda j: j.state is BURIED,
                          event="purge"))
    return {"ok": True, "count": n}


@command("RetryCompleted", mutating=True)
def retry_completed(sess, cmd: dict):
    e = sess.port
    id = cmd.get("id")
    jobs = [j for j in e.jobs(queue_name(cmd.get("queue")), (COMPLETED,))
            if id is None or j.uid == str(id)]
    for j in jobs:
        e.requeue(j.id, 0, "retry", "bunqueue", {"progress": 0},
                  ("completedAt", "startedAt", "resultFmt"))
    return {"ok": True, "count": len(jobs)}


# -------------------------------------------------------------------- logs
@command("AddLog", mutating=True)
def add_log(sess, cmd: dict):
    job = find(sess, cmd.get("id"))
    if job is None:
        return _not_found()
    msg = cmd.get("message")
    level = cmd.get("level") or "info"
    logs = list((job.ext or {}).get("logs", ()))
    logs.append([str(msg), str(level), _now(sess)])
    sess.port.update_extras(job.id, {"logs": logs[-MAX_LOGS:]})
    return {"ok": True, "data": {"added": True}}


# ---------------------------------------------------------- workers/events
@command("RegisterWorker")
def register_worker(sess, cmd: dict):
    return {"ok": True, "data": sess.info.workers.register(cmd, sess, _now(sess))}


@command("UnregisterWorker")
def unregister_worker(sess, cmd: dict):
    if not sess.info.workers.unregister(cmd.get("workerId"), _now(sess)):
        return err("Worker not found")
    return {"ok": True, "data": {"removed": True}}


@command("Heartbeat")
def heartbeat(sess, cmd: dict):
    if not sess.info.workers.heartbeat(cmd, _now(sess)):
        return err("Worker not found")
    return {"ok": True, "data": {"ok": True}}


@command("SubscribeEvents")
def subscribe_events(sess, cmd: dict):
    q = cmd.get("queue")
    qs = cmd.get("queues")
    subs = set(sess.subscribed or ())
    if q is not None:
        subs.add(queue_name(q))
    for x in qs or ():
        subs.add(queue_name(x))
    sess.subscribe(subs)
    return ok_empty()


@command("UnsubscribeEvents")
def unsubscribe_events(sess, cmd: dict):
    sess.unsubscribe()
    return ok_empty()
