"""Control, DLQ, worker, log and event commands (bunqueue-tcp-protocol.txt "Control Commands",
"DLQ Commands", "Worker Commands", "Log Commands"; the client's SubscribeEvents).

Mapping onto the canonical engine (docs/mapping.md): Cancel deletes a waiting or delayed job;
Discard dead-letters it (buried with a result, which beanstalk's kick revives); RetryDlq and
RetryCompleted requeue; Pause is an indefinite pause-tube; Drain deletes the waiting jobs;
Obliterate deletes every job of the queue; progress and logs are extras stored with the job.
"""
from __future__ import annotations

from core.model import BURIED, COMPLETED, DELAYED, READY, RESERVED

from .handlers_query import find, not_active
from .options import data_error, encode_data, number_error, queue_name
from .registry import command, err, ok_empty

#: An indefinite pause (ms): about 100 years.
PAUSE_FOREVER_MS = 100 * 365 * 86_400_000
#: Log entries kept per job (the oldest are dropped).
MAX_LOGS = 1000


def _now(sess) -> int:
    return sess.engine.clock.wall_ms()


def _not_found(id=None) -> dict:
    return err("Job not found")


@command("Cancel", mutating=True)
def cancel(sess, cmd: dict):
    job = find(sess, cmd.get("id"))
    if job is None or job.state not in (READY, DELAYED):
        return err("Job not found or cannot be cancelled")
    sess.engine.delete(None, job.id, "bunqueue", force=True, event="cancel")
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
    sess.engine.update_ext(job, **fields)
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
    sess.engine.replace_payload(job, payload, fmt)
    return ok_empty()


@command("ChangePriority", mutating=True)
def change_priority(sess, cmd: dict):
    job = find(sess, cmd.get("id"))
    if job is None or job.state not in (READY, DELAYED):
        return err("Job not found or not in queue")
    p = cmd.get("priority")
    msg = number_error(p, "priority", -1_000_000, 1_000_000, required=True)
    if msg:
        return err(msg)
    sess.engine.change_priority(job, -int(p), "bunqueue")
    return ok_empty()


@command("Promote", mutating=True)
def promote(sess, cmd: dict):
    job = find(sess, cmd.get("id"))
    e = sess.engine
    if job is None or job.state is not DELAYED or e.blocked(job):
        return err("Job not found or not delayed")
    e.requeue(job, 0, "promote", "bunqueue")
    e.update_ext(job, runAt=_now(sess))
    return ok_empty()


@command("MoveToDelayed", mutating=True)
def move_to_delayed(sess, cmd: dict):
    job = find(sess, cmd.get("id"))
    e = sess.engine
    if job is None or job.state not in (RESERVED, READY, DELAYED) or e.blocked(job):
        return _not_found()
    d = cmd.get("delay")
    msg = number_error(d, "delay", 0, 365 * 86_400_000, required=True)
    if msg:
        return err(msg)
    sess.info.locks.pop(job.id, None)
    e.requeue(job, int(d), "release", "bunqueue")
    e.update_ext(job, runAt=_now(sess) + int(d))
    return ok_empty()


@command("Discard", mutating=True)
def discard(sess, cmd: dict):
    job = find(sess, cmd.get("id"))
    if job is None:
        return _not_found()
    sess.info.locks.pop(job.id, None)
    if not sess.engine.dead_letter(job, b"", "bunqueue"):
        return _not_found()
    sess.engine.update_ext(job, dlqReason="unknown", dlqAt=_now(sess))
    return ok_empty()


# ------------------------------------------------------------------ queues
@command("Pause", mutating=True)
def pause(sess, cmd: dict):
    e = sess.engine
    name = queue_name(cmd.get("queue"))
    e.queue(name).keep = True   # an empty paused queue stays (and stays paused)
    e.pause(name, PAUSE_FOREVER_MS)
    return ok_empty()


@command("Resume", mutating=True)
def resume(sess, cmd: dict):
    e = sess.engine
    name = queue_name(cmd.get("queue"))
    if name in e.queues:
        e.queues[name].keep = False
        e.pause(name, 0)
        e._gc(e.queues[name])
    return ok_empty()


def _delete_where(sess, queue: str, pred, limit: int | None = None, event="delete") -> int:
    e = sess.engine
    jobs = sorted((j for j in e.jobs.values() if j.queue == queue and pred(j)),
                  key=lambda j: j.id)
    if limit is not None:
        jobs = jobs[:limit]
    ids = []
    for j in jobs:
        sess.info.locks.pop(j.id, None)
        ids.append(e.uid_of(j))
        e.delete(None, j.id, "bunqueue", force=True, event=event)
    return ids


@command("Drain", mutating=True)
def drain(sess, cmd: dict):
    e = sess.engine
    n = len(_delete_where(sess, queue_name(cmd.get("queue")),
                          lambda j: j.state is READY or (j.state is DELAYED
                                                         and not e.blocked(j)),
                          event="drain"))
    return {"ok": True, "count": n}


@command("Obliterate", mutating=True)
def obliterate(sess, cmd: dict):
    _delete_where(sess, queue_name(cmd.get("queue")), lambda j: True, event="obliterate")
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
@command("RetryDlq", mutating=True)
def retry_dlq(sess, cmd: dict):
    e = sess.engine
    q = e.queues.get(queue_name(cmd.get("queue")))
    if q is None:
        return {"ok": True, "count": 0}
    jid = cmd.get("jobId")
    jobs = list(q.buried.values())
    if jid is not None:
        jobs = [j for j in jobs if e.uid_of(j) == str(jid)]
    for j in jobs:
        j.fails = 0
        e.requeue(j, 0, "retry", "bunqueue")
        e.update_ext(j, runAt=_now(sess))
        if j.ext is not None:
            for k in ("failedReason", "stacktrace", "startedAt", "timeline", "dlqReason",
                      "dlqAt"):
                j.ext.pop(k, None)
    return {"ok": True, "count": len(jobs)}


@command("PurgeDlq", mutating=True)
def purge_dlq(sess, cmd: dict):
    n = len(_delete_where(sess, queue_name(cmd.get("queue")), lambda j: j.state is BURIED,
                          event="purge"))
    return {"ok": True, "count": n}


@command("RetryCompleted", mutating=True)
def retry_completed(sess, cmd: dict):
    e = sess.engine
    queue = queue_name(cmd.get("queue"))
    id = cmd.get("id")
    jobs = [j for j in e.jobs.values() if j.queue == queue and j.state is COMPLETED
            and (id is None or e.uid_of(j) == str(id))]
    for j in sorted(jobs, key=lambda j: j.id):
        e.requeue(j, 0, "retry", "bunqueue")
        if j.ext is not None:
            for k in ("completedAt", "startedAt", "resultFmt"):
                j.ext.pop(k, None)
            j.ext["progress"] = 0
    return {"ok": True, "count": len(jobs)}


# -------------------------------------------------------------------- logs
@command("AddLog", mutating=True)
def add_log(sess, cmd: dict):
    job = find(sess, cmd.get("id"))
    if job is None:
        return _not_found()
    msg = cmd.get("message")
    level = cmd.get("level") or "info"
    if job.ext is None:
        job.ext = {}
    logs = job.ext.setdefault("logs", [])
    logs.append([str(msg), str(level), _now(sess)])
    del logs[:-MAX_LOGS]
    sess.engine._mark(job)
    return {"ok": True, "data": {"added": True}}


# ---------------------------------------------------------- workers/events
@command("RegisterWorker")
def register_worker(sess, cmd: dict):
    now = float(_now(sess))
    wid = cmd.get("workerId") or f"worker-{len(sess.info.workers) + 1}-{int(now)}"
    queues = cmd.get("queues") or []
    w = {"id": wid, "workerId": wid, "name": cmd.get("name") or wid, "queues": queues,
         "concurrency": cmd.get("concurrency") or 1, "hostname": cmd.get("hostname"),
         "pid": cmd.get("pid"), "status": "active", "registeredAt": now, "lastSeen": now,
         "activeJobs": 0, "processedJobs": 0, "failedJobs": 0, "currentJob": None}
    sess.info.workers[wid] = w
    data = {k: v for k, v in w.items() if k != "id"}
    return {"ok": True, "data": data}


@command("UnregisterWorker")
def unregister_worker(sess, cmd: dict):
    if sess.info.workers.pop(cmd.get("workerId"), None) is None:
        return err("Worker not found")
    return {"ok": True, "data": {"removed": True}}


@command("Heartbeat")
def heartbeat(sess, cmd: dict):
    w = sess.info.workers.get(cmd.get("id"))
    if w is None:
        return err("Worker not found")
    w["lastSeen"] = float(_now(sess))
    return {"ok": True, "data": {"ok": True}}


@command("SubscribeEvents")
def subscribe_events(sess, cmd: dict):
    q = cmd.get("queue")
    qs = cmd.get("queues")
    if sess.subscribed is None:
        sess.subscribed = set()
    if q is not None:
        sess.subscribed.add(queue_name(q))
    for x in qs or ():
        sess.subscribed.add(queue_name(x))
    sess.info.subscribers.add(sess)
    return ok_empty()


@command("UnsubscribeEvents")
def unsubscribe_events(sess, cmd: dict):
    sess.subscribed = None
    sess.info.subscribers.discard(sess)
    return ok_empty()
