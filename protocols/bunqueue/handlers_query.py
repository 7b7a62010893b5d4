"""Query and monitoring commands (bunqueue-tcp-protocol.txt "Query Commands", "Monitoring
Commands", "Worker Commands", "Log Commands"; reply shapes from bunqueue-golden.json where the
reference differs from the spec, e.g. ListQueues answers names and GetJobCounts has eight keys).
"""
from __future__ import annotations

import os
import resource
import time

from core.model import BURIED, COMPLETED, DELAYED, READY, RESERVED, TIMED_OUT

from .codec import UNDEFINED, js_num, num, splice_map
from .jobview import bq_priority, job_body, result_body, state_name
from .options import number_error, queue_name
from .registry import PENDING, Spliced, command, err


def find(sess, id):
    """The job a bunqueue id names (any dialect's job), or None."""
    if id.__class__ is not str:
        if id.__class__ is int:
            id = str(id)
        else:
            return None
    return sess.engine.find_uid(id)


def _jobs_of(sess, queue: str):
    """Every live job of `queue`, in id order."""
    return sorted((j for j in sess.engine.jobs.values() if j.queue == queue), key=lambda j: j.id)


def _array(items: list) -> bytes:
    n = len(items)
    head = bytes((0x90 | n,)) if n < 16 else (b"\xdc" + n.to_bytes(2, "big") if n < 0x10000
                                              else b"\xdd" + n.to_bytes(4, "big"))
    return head + b"".join(items)


def job_list(sess, jobs) -> Spliced:
    return Spliced({"ok": True}, [("jobs", _array([job_body(sess.engine, j) for j in jobs]))])


@command("GetJob")
def get_job(sess, cmd: dict):
    job = find(sess, cmd.get("id"))
    if job is None:
        return err("Job not found")
    return Spliced({"ok": True}, [("job", job_body(sess.engine, job, full=True))])


@command("GetJobByCustomId")
def get_job_by_custom_id(sess, cmd: dict):
    job = find(sess, cmd.get("customId"))
    if job is None:
        return err("Job not found")
    return Spliced({"ok": True}, [("job", job_body(sess.engine, job, outcome=True))])


@command("GetState")
def get_state(sess, cmd: dict):
    id = cmd.get("id")
    job = find(sess, id)
    return {"ok": True, "id": id, "state": "unknown" if job is None
            else state_name(sess.engine, job)}


@command("GetResult")
def get_result(sess, cmd: dict):
    id = cmd.get("id")
    job = find(sess, id)
    if job is None or job.result is None or not job.result_ok:
        return {"ok": True, "id": id, "result": UNDEFINED}
    return Spliced({"ok": True, "id": id}, [("result", result_body(job))])


def not_active(sess, job) -> str | None:
    """The reference's error for a progress command on `job`, or None when it is active."""
    if job is None:
        return "Job not found"
    if job.state is not RESERVED:
        return f"Job is not active (current state: {state_name(sess.engine, job)})"
    return None


@command("GetProgress")
def get_progress(sess, cmd: dict):
    job = find(sess, cmd.get("id"))
    msg = not_active(sess, job)
    if msg:
        return err(msg)
    ext = job.ext or {}
    return {"ok": True, "progress": ext.get("progress", 0),
            "message": ext.get("progressMessage")}


@command("WaitJob")
def wait_job(sess, cmd: dict):
    job = find(sess, cmd.get("id"))
    if job is None:
        return err("Job not found")
    t = cmd.get("timeout")
    msg = number_error(t, "timeout", 0, 600000)
    if msg:
        return err(msg)
    timeout = 30000 if t is None else int(t)
    e = sess.engine
    rid = sess.rid

    def reply(j):
        if j is TIMED_OUT or not j.result_ok:
            return {"ok": True, "completed": False}
        return Spliced({"ok": True, "completed": True}, [("result", result_body(j))])

    def done(j):
        sess.waits.discard(cancel)
        sess.later(rid, reply(j))

    r = e.wait_result(job, timeout, done)
    if r is job or r is TIMED_OUT:
        return reply(r)

    def cancel():
        e.cancel_result_wait(r)
    sess.waits.add(cancel)
    return PENDING


def counts(sess, queue: str) -> dict:
    """GetJobCounts for `queue` (reference keys and order)."""
    e = sess.engine
    c = {"waiting": 0, "prioritized": 0, "delayed": 0, "active": 0, "completed": 0,
         "failed": 0, "waiting-children": 0, "paused": 0}
    q = e.queues.get(queue)
    if q is None:
        return c
    prio = sum(1 for x in q.ready if x[3].hver == x[2] and x[3].priority < 0)
    if e.paused(q, e.clock.monotonic_ms()):
        c["paused"] = q.n_ready
    else:
        c["waiting"] = q.n_ready - prio
        c["prioritized"] = prio
    blocked = sum(1 for x in q.delayed if x[3].hver == x[2] and e.blocked(x[3]))
    c["delayed"] = q.n_delayed - blocked
    c["waiting-children"] = blocked
    c["active"] = q.n_reserved
    c["completed"] = q.n_done
    c["failed"] = len(q.buried)
    return c


@command("GetJobCounts")
def get_job_counts(sess, cmd: dict):
    return {"ok": True, "counts": counts(sess, queue_name(cmd.get("queue")))}


@command("Count")
def count(sess, cmd: dict):
    """The queue's size as the reference counts it: waiting + prioritized + delayed jobs (the
    spec's text says "all states"; the client's count() means jobs still to run)."""
    q = sess.engine.queues.get(queue_name(cmd.get("queue")))
    n = 0 if q is None else q.n_ready + q.n_delayed
    return {"ok": True, "count": n}


@command("GetCountsPerPriority")
def get_counts_per_priority(sess, cmd: dict):
    queue = queue_name(cmd.get("queue"))
    q = sess.engine.queues.get(queue)
    out: dict = {}
    if q is not None:   # waiting and delayed jobs, keyed by the priority as a string
        for x in q.ready + q.delayed:
            if x[3].hver == x[2] and not sess.engine.blocked(x[3]):
                p = str(bq_priority(x[3]))
                out[p] = out.get(p, 0) + 1
    return {"ok": True, "queue": queue, "counts": out}


_STATES = {"waiting": (READY,), "prioritized": (READY,), "delayed": (DELAYED,),
           "active": (RESERVED,), "completed": (COMPLETED,), "failed": (BURIED,)}


@command("GetJobs")
def get_jobs(sess, cmd: dict):
    queue = queue_name(cmd.get("queue"))
    state = cmd.get("state")
    limit = cmd.get("limit")
    offset = cmd.get("offset")
    limit = int(limit) if limit.__class__ in (int, float) and limit >= 0 else 100
    offset = int(offset) if offset.__class__ in (int, float) and offset >= 0 else 0
    e = sess.engine
    jobs = _jobs_of(sess, queue)
    if state is not None:
        jobs = [j for j in jobs if state_name(e, j) == state]
    return job_list(sess, jobs[offset:offset + limit])


#: How long the reference keeps a DLQ entry (its default maxAge, 7 days; reported only: jobgate
#: keeps failed jobs until they are retried, purged or their TTL ends).
DLQ_MAX_AGE_MS = 7 * 86_400_000


def _dlq_reason(job) -> str:
    ext = job.ext or {}
    return ext.get("dlqReason") or ("max_attempts_exceeded" if job.result is not None
                                    else "unknown")


def _dlq_entry(sess, job) -> dict:
    ext = job.ext or {}
    at = float(ext.get("dlqAt") or ext.get("completedAt") or job.created_ms)
    reason = _dlq_reason(job)
    attempts = []
    started = float(job.created_ms)
    for t in ext.get("timeline", ()):   # failures kept by FAIL, with the active entry before
        if t["state"] == "active":
            started = t["timestamp"]
        elif t["state"] == "failed":
            attempts.append({"attempt": t.get("attempt", len(attempts) + 1),
                             "startedAt": started, "failedAt": t["timestamp"],
                             "reason": "explicit_fail", "error": t.get("error"),
                             "duration": num(int(t["timestamp"] - started))})
    if attempts:
        attempts[-1]["reason"] = reason
    return {"enteredAt": at, "reason": reason,
            "error": ext.get("failedReason"), "attempts": attempts, "retryCount": 0,
            "lastRetryAt": None, "nextRetryAt": None, "expiresAt": at + DLQ_MAX_AGE_MS}


@command("Dlq")
def dlq(sess, cmd: dict):
    """DLQ jobs of the queue: `jobs` and the reference's `entries` ({job, enteredAt, reason,
    error, attempts, retryCount, ...}) that the client's getDlq() reads."""
    q = sess.engine.queues.get(queue_name(cmd.get("queue")))
    jobs = [] if q is None else list(q.buried.values())
    n = cmd.get("count")
    if n.__class__ in (int, float) and n >= 0:
        jobs = jobs[:int(n)]
    bodies = [job_body(sess.engine, j) for j in jobs]
    entries = []
    for j, b in zip(jobs, bodies):
        entries.append(splice_map({}, [("job", b)], _dlq_entry(sess, j)))
    return Spliced({"ok": True}, [("jobs", _array(bodies)), ("entries", _array(entries))])


@command("GetDlqStats")
def get_dlq_stats(sess, cmd: dict):
    e = sess.engine
    name = cmd.get("queue")
    qs = [e.queues[queue_name(name)]] if name is not None and queue_name(name) in e.queues \
        else ([] if name is not None else list(e.queues.values()))
    by_reason = dict.fromkeys(("explicit_fail", "max_attempts_exceeded", "timeout", "stalled",
                               "ttl_expired", "worker_lost", "unknown"), 0)
    by_queue: dict = {}
    times = []
    for q in qs:
        for j in q.buried.values():
            by_reason[_dlq_reason(j)] = by_reason.get(_dlq_reason(j), 0) + 1
            by_queue[q.name] = by_queue.get(q.name, 0) + 1
            times.append(_dlq_entry(sess, j)["enteredAt"])
    return {"ok": True, "data": {"stats": {
        "total": len(times), "byReason": by_reason, "byQueue": by_queue, "pendingRetry": 0,
        "expired": 0, "oldestEntry": min(times) if times else None,
        "newestEntry": max(times) if times else None}}}


@command("ListQueues")
def list_queues(sess, cmd: dict):
    e = sess.engine
    return {"ok": True, "queues": [n for n in e.queue_order
                                   if not (n in e.pinned and e.queues[n].is_empty())]}


@command("IsPaused")
def is_paused(sess, cmd: dict):
    e = sess.engine
    q = e.queues.get(queue_name(cmd.get("queue")))
    return {"ok": True, "paused": q is not None and e.paused(q, e.clock.monotonic_ms())}


@command("GetLogs")
def get_logs(sess, cmd: dict):
    job = find(sess, cmd.get("id"))
    logs = [] if job is None or job.ext is None else job.ext.get("logs", [])
    return {"ok": True, "data": {"logs": [
        {"message": m, "level": lv, "timestamp": float(t)} for m, lv, t in logs],
        "count": len(logs)}}


# -------------------------------------------------------------- monitoring
@command("Ping")
def ping(sess, cmd: dict):
    return {"ok": True, "data": {"pong": True, "time": float(sess.engine.clock.wall_ms())}}


def _totals(sess) -> dict:
    e = sess.engine
    t = {"waiting": 0, "active": e.n_reserved, "delayed": 0, "dlq": 0, "completed": 0}
    for q in e.queues.values():
        t["waiting"] += q.n_ready
        t["delayed"] += q.n_delayed
        t["dlq"] += len(q.buried)
        t["completed"] += q.n_done
    return t


@command("Stats")
def stats(sess, cmd: dict):
    info = sess.info
    t = _totals(sess)
    uptime_ms = int((time.monotonic() - info.started) * 1000)
    secs = max(uptime_ms / 1000, 1e-3)
    return {"ok": True, "stats": {
        "waiting": t["waiting"], "active": t["active"], "delayed": t["delayed"],
        "dlq": t["dlq"], "completed": t["completed"], "failed": info.total_failed,
        "uptime": num(uptime_ms), "pushPerSec": js_num(round(info.total_pushed / secs, 2)),
        "pullPerSec": js_num(round(info.total_pulled / secs, 2))}}


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


@command("Metrics")
def metrics(sess, cmd: dict):
    info = sess.info
    size = 0.0
    path = info.db_path
    if path and os.path.exists(path):
        size = os.path.getsize(path) / (1024 * 1024)
    return {"ok": True, "metrics": {
        "totalPushed": num(info.total_pushed), "totalPulled": num(info.total_pulled),
        "totalCompleted": num(info.total_completed), "totalFailed": num(info.total_failed),
        "avgLatencyMs": 0, "avgProcessingMs": 0, "memoryUsageMb": js_num(_rss_mb()),
        "sqliteSizeMb": js_num(size), "activeConnections": info.connections}}


@command("Prometheus")
def prometheus(sess, cmd: dict):
    info = sess.info
    t = _totals(sess)
    lines = []
    for name, help_, value in (
            ("bunqueue_jobs_waiting", "Jobs waiting", t["waiting"]),
            ("bunqueue_jobs_delayed", "Jobs delayed", t["delayed"]),
            ("bunqueue_jobs_active", "Jobs being processed", t["active"]),
            ("bunqueue_jobs_dlq", "Jobs in the dead-letter queue", t["dlq"]),
            ("bunqueue_jobs_completed", "Completed jobs kept", t["completed"]),
            ("bunqueue_jobs_pushed_total", "Jobs pushed", info.total_pushed),
            ("bunqueue_jobs_pulled_total", "Jobs pulled", info.total_pulled),
            ("bunqueue_jobs_completed_total", "Jobs acknowledged", info.total_completed),
            ("bunqueue_jobs_failed_total", "Jobs failed for good", info.total_failed)):
        kind = "counter" if name.endswith("_total") else "gauge"
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name} {value}"]
    return {"ok": True, "data": {"metrics": "\n".join(lines) + "\n"}}


@command("StorageStatus")
def storage_status(sess, cmd: dict):
    return {"ok": True, "data": {"diskFull": False, "error": None, "since": None}}


@command("ListWorkers")
def list_workers(sess, cmd: dict):
    ws = list(sess.info.workers.values())
    return {"ok": True, "data": {"workers": ws, "stats": {
        "total": len(ws), "active": len(ws),
        "totalProcessed": sum(w["processedJobs"] for w in ws),
        "totalFailed": sum(w["failedJobs"] for w in ws)}}}

