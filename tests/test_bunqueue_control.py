"""bunqueue control commands over a real socket against jobgate: on jobs (Cancel, Update,
ChangePriority, Promote, MoveToDelayed, Discard, unknown-id errors), on queues (Pause /
Resume, Drain, Obliterate, Clean, ListQueues) and the DLQ (Dlq, RetryDlq, PurgeDlq,
RetryCompleted).

Contract, reference mode and conventions of these command tests: tests/bunqueue_support.py.
"""
from __future__ import annotations

import pytest

from .bunqueue_support import JOB_KEYS, OK, UNDEF, counts, err, job, keys, qname


# ================================================================= control: jobs
def test_cancel_waiting_and_delayed(bq):
    c = bq()
    q = qname()
    w = c.push(q, 1)
    d = c.push(q, 2, delay=60000)
    assert c.call("Cancel", id=w) == OK and c.state(w) == "unknown"
    assert c.call("Cancel", id=d) == OK and c.state(d) == "unknown"
    assert c.count(q) == 0


def test_cancel_active_is_refused(bq):
    c = bq()
    q = qname()
    a = c.push(q, 1)
    c.pull(q)
    assert c.call("Cancel", id=a)["ok"] is False
    assert c.state(a) == "active"


def test_update_replaces_data(bq):
    c = bq()
    q = qname()
    id = c.push(q, {"a": 1})
    assert c.call("Update", id=id, data={"b": 2}) == OK
    assert job(c, id)["data"] == {"b": 2}
    assert c.call("Update", id=id, data="s") == OK
    assert c.pull(q)["job"]["data"] == "s"


def test_change_priority_reorders(bq):
    c = bq()
    q = qname()
    a = c.push(q, "a")
    b = c.push(q, "b")
    d = c.push(q, "d")
    assert c.call("ChangePriority", id=d, priority=10) == OK
    assert c.call("ChangePriority", id=a, priority=-1) == OK
    assert job(c, d)["priority"] == 10 and c.state(d) == "prioritized"
    assert [c.pull(q)["job"]["id"] for _ in range(3)] == [d, b, a]


def test_promote(bq):
    c = bq()
    q = qname()
    d = c.push(q, 1, delay=60000)
    assert c.call("Promote", id=d) == OK
    assert c.state(d) == "waiting"
    assert c.call("Promote", id=d)["ok"] is False           # not delayed any more


def test_move_to_delayed(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1)
    c.pull(q)
    assert c.call("MoveToDelayed", id=id, delay=60000) == OK
    assert c.state(id) == "delayed"
    j = job(c, id)
    assert j["runAt"] > j["createdAt"]
    assert c.call("PULL", queue=q) == {"ok": True, "job": None}


def test_discard_dead_letters(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1)
    assert c.call("Discard", id=id) == OK
    assert c.state(id) == "failed"
    assert [j["id"] for j in c.call("Dlq", queue=q)["jobs"]] == [id]
    assert c.call("Discard", id=id)["ok"] is False
    a = c.push(q, 2)
    c.pull(q)
    assert c.call("Discard", id=a) == OK and c.state(a) == "failed"


#: (command fields, reference error): every one differs in jobgate (it appends ': <id>' or
#: words it otherwise); the reference strings are from bunqueue 2.9.5's handlers.
CONTROL_ERRORS = [
    ({"cmd": "Cancel", "id": "nope"}, "Job not found or cannot be cancelled",
     "jobgate: 'Job not found: nope'"),
    ({"cmd": "Update", "id": "nope", "data": 1}, "Job not found or cannot be updated",
     "jobgate: 'Job not found: nope'"),
    ({"cmd": "ChangePriority", "id": "nope", "priority": 1}, "Job not found or not in queue",
     "jobgate: 'Job not found: nope'"),
    ({"cmd": "Promote", "id": "nope"}, "Job not found or not delayed",
     "jobgate: 'Job not found or not delayed: nope'"),
    ({"cmd": "MoveToDelayed", "id": "nope", "delay": 1000}, "Job not found",
     "jobgate: 'Job not found or not active: nope'"),
    ({"cmd": "Discard", "id": "nope"}, "Job not found", "jobgate: 'Job not found: nope'"),
    ({"cmd": "AddLog", "id": "nope", "message": "m"}, "Job not found",
     "jobgate: 'Job not found: nope'"),
    ({"cmd": "ExtendLock", "id": "nope", "token": "t", "duration": 1000},
     "Lock not found or invalid token",
     "jobgate: 'Invalid or expired lock token for job nope'"),
    ({"cmd": "JobHeartbeat", "id": "nope"}, "Job not found or not active (or invalid token)",
     "jobgate: {ok:true, data:{ok:false}}"),
    ({"cmd": "Heartbeat", "id": "no-such-worker"}, "Worker not found",
     "jobgate: {ok:true, data:{ok:false}}"),
    ({"cmd": "UnregisterWorker", "workerId": "no-such-worker"}, "Worker not found",
     "jobgate: {ok:true, data:{removed:false}}"),
]


@pytest.mark.parametrize("fields,error", [
    pytest.param(f, e, id=f["cmd"])
    for f, e, why in CONTROL_ERRORS])
def test_unknown_id_error_strings(bq, fields, error):
    c = bq()
    f = dict(fields)
    assert c.call(f.pop("cmd"), **f) == err(error)


def test_change_priority_of_an_active_job(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1)
    c.pull(q)
    assert c.call("ChangePriority", id=id, priority=5) == err("Job not found or not in queue")


def test_move_to_delayed_of_a_waiting_job(bq):
    c = bq()
    id = c.push(qname(), 1)
    assert c.call("MoveToDelayed", id=id, delay=60000) == OK
    assert c.state(id) == "delayed"


# ================================================================== control: queues
def test_pause_resume_is_paused(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1)
    assert c.call("Pause", queue=q) == OK
    assert c.call("IsPaused", queue=q) == {"ok": True, "paused": True}
    assert c.call("PULL", queue=q, timeout=100) == {"ok": True, "job": None}
    assert c.call("PULL", queue=q) == {"ok": True, "job": None}
    assert c.counts(q) == counts(paused=1)
    assert c.call("Resume", queue=q) == OK
    assert c.call("IsPaused", queue=q) == {"ok": True, "paused": False}
    assert c.pull(q)["job"]["id"] == id
    assert c.call("IsPaused", queue=qname("never")) == {"ok": True, "paused": False}


def test_resume_wakes_a_waiting_pull(bq):
    w, c = bq(), bq()
    q = qname()
    c.ok("Pause", queue=q)
    id = c.push(q, 1)
    w.send({"cmd": "PULL", "queue": q, "timeout": 5000, "reqId": "p"})
    assert w.quiet(0.2)
    c.ok("Resume", queue=q)
    assert w.recv_reply("p", timeout=10)["job"]["id"] == id


def test_drain_removes_waiting_and_delayed(bq):
    c = bq()
    q = qname()
    for i in range(3):
        c.push(q, i)
    c.push(q, 9, delay=60000)
    c.push(q, 10)
    active = c.pull(q)["job"]["id"]
    assert c.call("Drain", queue=q) == {"ok": True, "count": 4}
    assert c.counts(q) == counts(active=1) and c.state(active) == "active"
    assert c.call("Drain", queue=qname("never")) == {"ok": True, "count": 0}


def test_obliterate_removes_everything(bq):
    c = bq()
    q = qname()
    a = c.push(q, 1, maxAttempts=1)
    d = c.push(q, 2, delay=60000)
    c.push(q, 3)
    c.pull(q)
    c.ok("FAIL", id=a)
    c.pull(q)
    assert c.call("Obliterate", queue=q) == OK
    assert c.counts(q) == counts() and c.count(q) == 0
    assert c.state(d) == "unknown"


def test_clean_completed(bq):
    c = bq()
    q = qname()
    a = c.push(q, 1)
    w = c.push(q, 2)
    c.pull(q)
    c.ok("ACK", id=a)
    r = c.call("Clean", queue=q, grace=0, state="completed")
    assert r["ok"] is True and r["count"] == 1
    assert c.state(a) == "unknown" and c.state(w) == "waiting"
    assert c.call("Clean", queue=q, grace=3600000, state="waiting")["count"] == 0
    assert c.call("Clean", queue=q, grace=0, state="waiting", limit=5)["count"] == 1


def test_clean_reply_lists_ids(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1)
    assert c.call("Clean", queue=q, grace=0, state="waiting") == \
        {"ok": True, "count": 1, "ids": [id]}


def test_list_queues(bq):
    c = bq()
    q = qname()
    c.push(q, 1)
    r = c.call("ListQueues")
    assert list(r) == ["ok", "queues"] and q in r["queues"]
    assert all(isinstance(n, str) for n in r["queues"])


# ============================================================================= DLQ
def _dead(c, q, n, **opts):
    ids = [c.push(q, i, maxAttempts=1, **opts) for i in range(n)]
    for id in ids:
        c.pull(q)
        c.ok("FAIL", id=id, error="x")
    return ids


def test_dlq_lists_failed_jobs(bq):
    c = bq()
    q = qname()
    ids = _dead(c, q, 3)
    r = c.call("Dlq", queue=q)
    assert r["ok"] is True and [j["id"] for j in r["jobs"]] == ids
    assert all(keys(j) == keys(JOB_KEYS) for j in r["jobs"])
    assert [j["id"] for j in c.call("Dlq", queue=q, count=2)["jobs"]] == ids[:2]
    assert c.call("Dlq", queue=qname("never"))["jobs"] == []


def test_dlq_entries(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1, maxAttempts=2, backoff=0)
    for n in (1, 2):
        c.pull(q)
        c.ok("FAIL", id=id, error=f"boom {n}")
    r = c.call("Dlq", queue=q)
    assert list(r) == ["ok", "jobs", "entries"]
    (e,) = r["entries"]
    assert e["job"]["id"] == id and e["reason"] == "max_attempts_exceeded"
    assert e["error"] == "boom 2" and isinstance(e["enteredAt"], float)
    assert [(a["attempt"], a["error"]) for a in e["attempts"]] == [(1, "boom 1"), (2, "boom 2")]


def test_dlq_entry_reasons_like_the_reference(bq):
    c = bq()
    q = qname()
    u = c.push(q, 2, maxAttempts=5)
    c.pull(q)
    c.ok("FAIL", id=u, error="fatal", unrecoverable=True)
    d = c.push(q, 3)
    c.ok("Discard", id=d)
    got = {x["job"]["id"]: (x["reason"], x["error"]) for x in c.call("Dlq", queue=q)["entries"]}
    assert got == {u: ("max_attempts_exceeded", "fatal"), d: ("unknown", None)}


def test_retry_dlq_one_and_all(bq):
    c = bq()
    q = qname()
    a, b = _dead(c, q, 2)
    assert c.call("RetryDlq", queue=q, jobId=a) == {"ok": True, "count": 1}
    assert c.state(a) == "waiting" and job(c, a)["attempts"] == 0 and c.state(b) == "failed"
    assert c.call("RetryDlq", queue=q) == {"ok": True, "count": 1}
    assert c.state(b) == "waiting"
    assert c.call("RetryDlq", queue=qname("never")) == {"ok": True, "count": 0}


def test_purge_dlq(bq):
    c = bq()
    q = qname()
    ids = _dead(c, q, 2)
    w = c.push(q, 9)
    assert c.call("PurgeDlq", queue=q) == {"ok": True, "count": 2}
    assert [c.state(i) for i in ids] == ["unknown", "unknown"] and c.state(w) == "waiting"
    assert c.call("PurgeDlq", queue=q) == {"ok": True, "count": 0}


def test_retry_completed(bq):
    c = bq()
    q = qname()
    a = c.push(q, 1)
    b = c.push(q, 2)
    for id in (a, b):
        c.pull(q)
        c.ok("ACK", id=id, result=id)
    assert c.call("RetryCompleted", queue=q, id=a) == {"ok": True, "count": 1}
    assert c.state(a) == "waiting" and c.state(b) == "completed"
    assert c.call("GetResult", id=a)["result"] is UNDEF
    assert c.call("RetryCompleted", queue=q) == {"ok": True, "count": 1}
    assert c.state(b) == "waiting"
    assert c.call("RetryCompleted", queue=q) == {"ok": True, "count": 0}
