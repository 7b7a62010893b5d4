"""Query and monitoring commands (bunqueue-tcp-protocol.txt "Query Commands", "Monitoring
Commands", "Worker Commands", "Log Commands"; reply shapes from bunqueue-golden.json where the
reference differs from the spec, e.g. ListQueues answers names and GetJobCounts has eight keys).
"""
from __future__ import annotations

from core.api import BURIED, COMPLETED, DELAYED, READY, RESERVED, TIMED_OUT, JobView

from .codec import UNDEFINED, num, splice_map
from .jobview import job_body, rank_priority, result_body, state_name
from .options import number_error, queue_name
from .registry import PENDING, STORAGE_UNAVAILABLE, Spliced, command, err


def id_of(v) -> str | None:
    """The uid a bunqueue id names: a str as it is, an int as its digits (as the reference's
    lookups read it), None for anything else."""
    if v.__class__ is str:
        return v
    return str(v) if v.__class__ is int else None


def find(sess, id) -> JobView | None:
    """A snapshot of the job a bunqueue id names (any dialect's job), or None."""
    id = id_of(id)
    return None if id is None else sess.port.lookup(id)


def _array(items: list) -> bytes:
    n = len(items)
    head = bytes((0x90 | n,)) if n < 16 else (b"\xdc" + n.to_bytes(2, "big") if n < 0x10000
                                              else b"\xdd" + n.to_bytes(4, "big"))
    return head + b"".join(items)


def job_list(sess, jobs) -> Spliced:
    return Spliced({"ok": True}, [("jobs", _array([job_body(j) for j in jobs]))])


def _or_remote(sess, id, answer):
    """`answer(view)` for the job `id` names: at once when this node has it; in shared mode,
    for a job another node or the database holds, later (PENDING), from its row
    (docs/scaling.md); `answer(None)` when there is no such job."""
    job = find(sess, id)
    e = sess.port
    if id.__class__ is int:
        id = str(id)   # a number names the job by its decimal form, as find() reads it
    if job is not None or not e.shared or id.__class__ is not str:
        return answer(job)
    rid = sess.rid

    def got(view):
        if not sess.closed:
            sess.later(rid, answer(None if isinstance(view, Exception) else view))
    e.lookup_remote(id, got)
    return PENDING


@command("GetJob")
def get_job(sess, cmd: dict):
    def answer(job):
        if job is None:
            return err("Job not found")
        return Spliced({"ok": True}, [("job", job_body(job, full=True))])
    return _or_remote(sess, cmd.get("id"), answer)


@command("GetJobByCustomId")
def get_job_by_custom_id(sess, cmd: dict):
    def answer(job):
        if job is None:
            return err("Job not found")
        return Spliced({"ok": True}, [("job", job_body(job, outcome=True))])
    return _or_remote(sess, cmd.get("customId"), answer)


@command("GetState")
def get_state(sess, cmd: dict):
    id = cmd.get("id")
    return _or_remote(sess, id, lambda job: {
        "ok": True, "id": id, "state": "unknown" if job is None else state_name(job)})


@command("GetResult")
def get_result(sess, cmd: dict):
    id = cmd.get("id")

    def answer(job):
        if job is None or job.result is None or not job.result_ok:
            return {"ok": True, "id": id, "result": UNDEFINED}
        return Spliced({"ok": True, "id": id}, [("result", result_body(job))])
    return _or_remote(sess, id, answer)


def not_active(sess, job) -> str | None:
    """The reference's error for a progress command on `job`, or None when it is active."""
    if job is None:
        return "Job not found"
    if job.state is not RESERVED:
        return f"Job is not active (current state: {state_name(job)})"
    return None


@command("GetProgress")
def get_progress(sess, cmd: dict):
    def answer(job):
        msg = not_active(sess, job)
        if msg:
            return err(msg)
        ext = job.ext or {}
        return {"ok": True, "progress": ext.get("progress", 0),
                "message": ext.get("progressMessage")}
    return _or_remote(sess, cmd.get("id"), answer)


@command("WaitJob")
def wait_job(sess, cmd: dict):
    job = find(sess, cmd.get("id"))
    e = sess.port
    if job is None and not (e.shared and isinstance(cmd.get("id"), str)):
        return err("Job not found")
    t = cmd.get("timeout")
    msg = number_error(t, "timeout", 0, 600000)
    if msg:
        return err(msg)
    timeout = 30000 if t is None else int(t)
    rid = sess.rid

    def reply(j):
        if j is TIMED_OUT or not j.result_ok:
            return {"ok": True, "completed": False}
        return Spliced({"ok": True, "completed": True}, [("result", result_body(j))])

    def done(j):
        sess.waits.discard(cancel)
        if j is None or isinstance(j, Exception):   # shared mode: no such job
            sess.later(rid, err("Job not found"))
        else:
            sess.later(rid, reply(j))

    if job is None:   # shared mode: not on this node, its row answers (docs/scaling.md)
        r = e.wait_result_uid(cmd["id"], timeout, done)
    else:
        r = e.wait_result(job.id, timeout, done)
    if r.__class__ is JobView or r is TIMED_OUT:
        return reply(r)

    def cancel():
        e.cancel_result_wait(r)
    sess.waits.add(cancel)
    return PENDING


def counts_of(c: dict) -> dict:
    """GetJobCounts' object (reference keys and order) from Port.job_counts_global's counts
    `c`: a paused queue shows its ready jobs as `paused`; a flow parent waiting for its
    children is `waiting-children`, not `delayed`; `failed` is the DLQ (buried jobs)."""
    out = {"waiting": 0, "prioritized": 0, "delayed": c[DELAYED] - c["blocked"],
           "active": c[RESERVED], "completed": c[COMPLETED], "failed": c[BURIED],
           "waiting-children": c["blocked"], "paused": 0}
    if c["paused"]:
        out["paused"] = c[READY]
    else:
        out["waiting"] = c[READY] - c["prioritized"]
        out["prioritized"] = c["prioritized"]
    return out


def _when(sess, start, answer):
    """The reply `answer(result)` of a port operation with a callback form, `start(callback)`
    (Port.job_counts_global, jobs_global): at once when the callback runs at once (a single
    server), else PENDING and the reply later (shared mode, docs/mapping.md). A database
    error (an Exception) answers `Storage unavailable`."""
    out = []
    rid = sess.rid

    def got(x) -> None:
        r = err(STORAGE_UNAVAILABLE) if isinstance(x, Exception) else answer(x)
        if out:   # answered later: the command returned PENDING
            if not sess.closed:
                sess.later(rid, r)
        else:
            out.append(r)
    start(got)
    if out:
        return out[0]
    out.append(None)
    return PENDING


def global_counts(sess, queue: str, answer):
    """`answer(counts)` for queue `queue` (Port.job_counts_global)."""
    return _when(sess, lambda cb: sess.port.job_counts_global(queue, cb), answer)


@command("GetJobCounts")
def get_job_counts(sess, cmd: dict):
    return global_counts(sess, queue_name(cmd.get("queue")),
                          lambda c: {"ok": True, "counts": counts_of(c)})


@command("Count")
def count(sess, cmd: dict):
    """The queue's size as the reference counts it: waiting + prioritized + delayed jobs (the
    spec's text says "all states"; the client's count() means jobs still to run); a flow
    parent waiting for its children is not counted (reference). In shared mode, on every
    node."""
    return global_counts(sess, queue_name(cmd.get("queue")),
                          lambda c: {"ok": True, "count": c[READY] + c[DELAYED] - c["blocked"]})


@command("GetCountsPerPriority")
def get_counts_per_priority(sess, cmd: dict):
    """Waiting and delayed jobs of the queue per priority (a flow parent waiting for children
    is not counted); in shared mode every node's (Port.priority_counts_global)."""
    queue = queue_name(cmd.get("queue"))

    def answer(ranks: dict):
        out: dict = {}
        # waiting and delayed jobs, keyed by the bunqueue priority as a string
        for rank, n in ranks.items():
            p = str(rank_priority(rank))
            out[p] = out.get(p, 0) + n
        # a JavaScript object lists array-index keys (0, 1, ...) first, ascending; the others
        # (negative priorities) after them in insertion order
        idx = sorted((k for k in out if k.isdigit()), key=int)
        if idx:
            out = {**{k: out[k] for k in idx},
                   **{k: n for k, n in out.items() if not k.isdigit()}}
        return {"ok": True, "queue": queue, "counts": out}
    return _when(sess, lambda cb: sess.port.priority_counts_global(queue, cb), answer)


#: GetJobs' state names -> (canonical state, rank filter) for Port.jobs_global; "waiting",
#: "prioritized" and "paused" depend on whether the queue is paused (_filters)
_STATE_FILTERS = {"delayed": (DELAYED, "free"), "waiting-children": (DELAYED, "blocked"),
                  "active": (RESERVED, None), "completed": (COMPLETED, None),
                  "failed": (BURIED, None)}


def _filters(states, paused: bool):
    """Port.jobs_global's `where` for GetJobs' state names `states` (None: every state)."""
    if states is None:
        return None
    out = []
    for s in states:
        if s in _STATE_FILTERS:
            out.append(_STATE_FILTERS[s])
        elif s == "waiting" and not paused:
            out.append((READY, "nonneg"))
        elif s == "prioritized" and not paused:
            out.append((READY, "neg"))
        elif s == "paused" and paused:
            out.append((READY, None))
    return out


@command("GetJobs")
def get_jobs(sess, cmd: dict):
    """Jobs of the queue, oldest first (`asc` false: newest first), filtered by `state`: one
    state name or a list of them (an empty list: every state); while the queue is paused, its
    waiting and prioritized jobs are in state "paused" for the filter. Each Job object carries
    `state`, `returnvalue` and `failedReason` (reference handlers/query.js handleGetJobs and
    application/operations/query/pagination.js getJobs). In shared mode the jobs of every
    node and of the database (docs/mapping.md)."""
    e = sess.port
    queue = queue_name(cmd.get("queue"))
    state = cmd.get("state")
    limit = cmd.get("limit")
    offset = cmd.get("offset")
    limit = int(limit) if limit.__class__ in (int, float) and limit >= 0 else 100
    offset = int(offset) if offset.__class__ in (int, float) and offset >= 0 else 0
    states = None
    if state.__class__ is list:
        states = set(state) if state else None
    elif state:
        states = {state}
    qv = e.queue(queue)
    where = _filters(states, qv is not None and qv.paused)
    single = state if state.__class__ is str and state else None

    def answer(jobs):
        jobs = jobs[offset:offset + limit]
        return Spliced({"ok": True}, [("jobs", _array([job_body(j, full=True, state=single)
                                                       for j in jobs]))])
    return _when(sess, lambda cb: e.jobs_global(queue, where, cmd.get("asc") is False,
                                                offset + limit, cb), answer)


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
    error = ext.get("failedReason")
    if error is None and ext.get("dlqError") is not None:   # a flow parent its child failed
        error = ext["dlqError"]
        attempts = [{"attempt": 0, "startedAt": float(job.created_ms), "failedAt": at,
                     "reason": reason, "error": error, "duration": 0}]
    return {"enteredAt": at, "reason": reason,
            "error": error, "attempts": attempts, "retryCount": 0,
            "lastRetryAt": None, "nextRetryAt": None, "expiresAt": at + DLQ_MAX_AGE_MS}


@command("Dlq")
def dlq(sess, cmd: dict):
    """DLQ jobs of the queue: `jobs` and the reference's `entries` ({job, enteredAt, reason,
    error, attempts, retryCount, ...}) that the client's getDlq() reads."""
    jobs = sess.port.dead_letters(queue_name(cmd.get("queue")))
    n = cmd.get("count")
    if n.__class__ in (int, float) and n >= 0:
        jobs = jobs[:int(n)]
    bodies = [job_body(j) for j in jobs]
    entries = []
    for j, b in zip(jobs, bodies):
        entries.append(splice_map({}, [("job", b)], _dlq_entry(sess, j)))
    return Spliced({"ok": True}, [("jobs", _array(bodies)), ("entries", _array(entries))])


@command("GetDlqStats")
def get_dlq_stats(sess, cmd: dict):
    e = sess.port
    name = cmd.get("queue")
    qs = [queue_name(name)] if name is not None and e.queue(queue_name(name)) is not None \
        else ([] if name is not None else e.queue_names())
    by_reason = dict.fromkeys(("explicit_fail", "max_attempts_exceeded", "timeout", "stalled",
                               "ttl_expired", "worker_lost", "unknown"), 0)
    by_queue: dict = {}
    times = []
    for q in qs:
        for j in e.dead_letters(q):
            by_reason[_dlq_reason(j)] = by_reason.get(_dlq_reason(j), 0) + 1
            by_queue[q] = by_queue.get(q, 0) + 1
            times.append(_dlq_entry(sess, j)["enteredAt"])
    return {"ok": True, "data": {"stats": {
        "total": len(times), "byReason": by_reason, "byQueue": by_queue, "pendingRetry": 0,
        "expired": 0, "oldestEntry": min(times) if times else None,
        "newestEntry": max(times) if times else None}}}


@command("ListQueues")
def list_queues(sess, cmd: dict):
    return {"ok": True, "queues": [q.name for q in sess.port.queue_views()
                                   if not (q.pinned and q.is_empty())]}


@command("IsPaused")
def is_paused(sess, cmd: dict):
    q = sess.port.queue(queue_name(cmd.get("queue")))
    return {"ok": True, "paused": q is not None and q.paused}


@command("GetLogs")
def get_logs(sess, cmd: dict):
    def answer(job):
        logs = [] if job is None or job.ext is None else job.ext.get("logs", [])
        return {"ok": True, "data": {"logs": [
            {"timestamp": float(t), "level": lv, "message": m} for m, lv, t in logs],
            "count": len(logs)}}
    return _or_remote(sess, cmd.get("id"), answer)


# -------------------------------------------------------------- monitoring
@command("Ping")
def ping(sess, cmd: dict):
    return {"ok": True, "data": {"pong": True, "time": float(sess.port.clock.wall_ms())}}


@command("StorageStatus")
def storage_status(sess, cmd: dict):
    return {"ok": True, "data": {"diskFull": False, "error": None, "since": None}}


@command("ListWorkers")
def list_workers(sess, cmd: dict):
    return {"ok": True, "data": sess.info.workers.listing(sess.port.clock.wall_ms())}

