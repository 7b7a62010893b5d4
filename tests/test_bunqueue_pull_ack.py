"""bunqueue PULL / PULLB (with and without owner, long polls), ACK / ACKB and FAIL over a real
socket against jobgate: reply shapes, lock tokens, retries, dead letters and error strings.

Contract, reference mode and conventions of these command tests: tests/bunqueue_support.py.
"""
from __future__ import annotations

import pytest

from .bunqueue_support import JOB_KEYS, OK, UNDEF, counts, err, job, jobgate_only, keys, qname


# ==================================================================== PULL / PULLB
def test_pull_without_owner(bq):
    c = bq()
    q = qname()
    id = c.push(q, {"v": 1})
    r = c.call("PULL", queue=q)
    assert list(r) == ["ok", "job"] and r["ok"] is True
    j = r["job"]
    assert keys(j) == keys(JOB_KEYS)
    assert j["id"] == id and j["data"] == {"v": 1} and isinstance(j["startedAt"], float)
    assert [t["state"] for t in j["timeline"]] == ["waiting", "active"]
    assert c.state(id) == "active"
    assert c.call("PULL", queue=q) == {"ok": True, "job": None}


def test_pull_with_owner_returns_a_token(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1)
    r = c.call("PULL", queue=q, owner="worker-1", lockTtl=30000)
    assert list(r) == ["ok", "job", "token"]
    assert r["job"]["id"] == id and isinstance(r["token"], str) and r["token"]
    assert c.call("PULL", queue=q, owner="w", timeout=0) == {"ok": True, "job": None, "token": None}


def test_pull_long_poll_gets_a_job_pushed_later(bq):
    waiter, pusher = bq(), bq()
    q = qname()
    waiter.send({"cmd": "PULL", "queue": q, "timeout": 5000, "reqId": "lp"})
    assert waiter.quiet(0.2)                  # nothing to answer yet
    id = pusher.push(q, "late")
    r = waiter.recv_reply("lp", timeout=10)
    assert r["ok"] is True and r["job"]["id"] == id and r["job"]["data"] == "late"
    assert pusher.state(id) == "active"


def test_pull_long_poll_with_owner_gets_a_token(bq):
    waiter, pusher = bq(), bq()
    q = qname()
    waiter.send({"cmd": "PULL", "queue": q, "timeout": 5000, "owner": "o", "reqId": "lp"})
    assert waiter.quiet(0.2)
    id = pusher.push(q, 1)
    r = waiter.recv_reply("lp", timeout=10)
    assert r["job"]["id"] == id and isinstance(r["token"], str)
    assert pusher.call("ACK", id=id) == err(f"Lock token required for job {id}")
    assert waiter.call("ACK", id=id, token=r["token"]) == OK


def test_pull_timeout_expires_with_null(bq):
    c = bq()
    q = qname()
    assert c.call("PULL", queue=q, timeout=200) == {"ok": True, "job": None}
    assert c.call("PULL", queue=q, timeout=200, owner="o") == \
        {"ok": True, "job": None, "token": None}
    assert c.call("PULLB", queue=q, count=3, timeout=200) == {"ok": True, "jobs": []}


@pytest.mark.parametrize("fields,error", [
    ({"timeout": -1}, "timeout must be at least 0"),
    ({"timeout": 60001}, "timeout must be at most 60000"),
    ({"timeout": "x"}, "timeout must be a number"),
    ({"queue": None}, "Queue name is required"),
    ({"queue": "bad q"}, "Queue name contains invalid characters"),
])
def test_pull_validation(bq, fields, error):
    c = bq()
    f = {"queue": qname(), **fields}
    if f["queue"] is None:
        del f["queue"]
    assert c.call("PULL", **f) == err(error)


@pytest.mark.parametrize("count,error", [
    (0, "count must be at least 1"), (1001, "count must be at most 1000"),
    ("x", "count must be a number")])
def test_pullb_count_validation(bq, count, error):
    assert bq().call("PULLB", queue=qname(), count=count) == err(error)


def test_pullb_without_and_with_owner(bq):
    c = bq()
    q = qname()
    ids = [c.push(q, i) for i in range(5)]
    r = c.call("PULLB", queue=q, count=2)
    assert list(r) == ["ok", "jobs"] and [j["id"] for j in r["jobs"]] == ids[:2]
    assert all(keys(j) == keys(JOB_KEYS) for j in r["jobs"])
    r = c.call("PULLB", queue=q, count=5, owner="w2", lockTtl=10000)
    assert list(r) == ["ok", "jobs", "tokens"]
    assert [j["id"] for j in r["jobs"]] == ids[2:] and len(r["tokens"]) == 3
    assert len(set(r["tokens"])) == 3
    assert c.call("PULLB", queue=q, count=2) == {"ok": True, "jobs": []}
    assert c.call("PULLB", queue=q, count=2, owner="o") == {"ok": True, "jobs": [], "tokens": []}


def test_pullb_long_poll(bq):
    waiter, pusher = bq(), bq()
    q = qname()
    waiter.send({"cmd": "PULLB", "queue": q, "count": 5, "timeout": 5000, "reqId": "lb"})
    assert waiter.quiet(0.2)
    id = pusher.push(q, 1)
    r = waiter.recv_reply("lb", timeout=10)
    assert r["ok"] is True and [j["id"] for j in r["jobs"]] == [id]


# ====================================================================== ACK / ACKB
def test_ack_stores_the_result(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1)
    c.pull(q)
    assert c.call("ACK", id=id, result={"done": True}) == OK
    assert c.call("GetState", id=id) == {"ok": True, "id": id, "state": "completed"}
    assert c.call("GetResult", id=id) == {"ok": True, "id": id, "result": {"done": True}}
    j = job(c, id)
    assert j["returnvalue"] == {"done": True} and j["state"] == "completed"
    assert isinstance(j["completedAt"], float)
    assert c.counts(q) == counts(completed=1)
    assert c.call("ACK", id=id) == err(f"Job not found or not in processing state: {id}")


def test_ack_errors(bq):
    c = bq()
    q = qname()
    assert c.call("ACK", id="00000000-0000-7000-8000-000000000000") == \
        err("Job not found or not in processing state: 00000000-0000-7000-8000-000000000000")
    waiting = c.push(q, 1)
    assert c.call("ACK", id=waiting) == err(f"Job not found or not in processing state: {waiting}")
    id = c.push(qname("own"), 1)
    tok = c.pull(job(c, id)["queue"], owner="w")["token"]
    assert c.call("ACK", id=id) == err(f"Lock token required for job {id}")
    assert c.call("ACK", id=id, token="bad-token") == \
        err(f"Invalid or expired lock token for job {id}")
    assert c.state(id) == "active"
    assert c.call("ACK", id=id, token=tok, result=42) == OK
    assert c.call("GetResult", id=id)["result"] == 42


def test_ack_from_another_connection_with_the_token(bq):
    a, b = bq(), bq()
    q = qname()
    id = a.push(q, 1)
    tok = a.pull(q, owner="w")["token"]
    assert b.call("ACK", id=id, token=tok) == OK


def test_ack_token_on_an_unlocked_job_is_ignored(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1)
    c.pull(q)
    assert c.call("ACK", id=id, token="x") == OK


def test_ackb_with_tokens_and_results(bq):
    c = bq()
    q = qname()
    ids = [c.push(q, i) for i in range(3)]
    toks = c.ok("PULLB", queue=q, count=3, owner="o")["tokens"]
    assert c.call("ACKB", ids=ids, tokens=toks, results=[1, {"k": 2}, None]) == OK
    assert [c.call("GetResult", id=i)["result"] for i in ids] == [1, {"k": 2}, None]
    assert c.counts(q) == counts(completed=3)


def test_ackb_without_tokens(bq):
    c = bq()
    q = qname()
    ids = [c.push(q, i) for i in range(2)]
    c.ok("PULLB", queue=q, count=2)
    assert c.call("ACKB", ids=ids) == OK
    assert c.call("ACKB", ids=[]) == OK
    assert [c.state(i) for i in ids] == ["completed", "completed"]


def test_ackb_errors_complete_nothing(bq):
    c = bq()
    q = qname()
    ids = [c.push(q, i) for i in range(3)]
    toks = c.ok("PULLB", queue=q, count=3, owner="o")["tokens"]
    assert c.call("ACKB", ids=ids, tokens=toks[:2]) == \
        err("ACKB tokens length must match ids length")
    assert c.call("ACKB", ids=ids, tokens=toks, results=[1]) == \
        err("ACKB results length must match ids length")
    assert c.call("ACKB", ids=ids, tokens=toks[:2] + ["bad"]) == \
        err(f"Invalid or expired lock token for job {ids[2]}")
    assert c.call("ACKB", ids=ids) == err(f"Lock token required for job {ids[0]}")
    assert [c.state(i) for i in ids] == ["active"] * 3
    assert c.call("ACKB", ids=["a", "b"], tokens=["x"]) == \
        err("ACKB tokens length must match ids length")


@jobgate_only("the reference answers with a JavaScript TypeError text")
def test_ackb_ids_not_a_list(bq):
    assert bq().call("ACKB", ids="x") == err("ids must be an array")


# ============================================================================ FAIL
def test_fail_retries_then_dead_letters(bq):
    c = bq()
    q = qname()
    id = c.push(q, {"f": 1}, maxAttempts=3, backoff=0)
    for attempt in (1, 2):
        c.pull(q)
        assert c.call("FAIL", id=id, error=f"boom {attempt}") == OK
        assert c.state(id) == "waiting"
        assert job(c, id)["attempts"] == attempt
    c.pull(q)
    assert c.call("FAIL", id=id, error="boom 3", stack=["at x", " at y ", 5]) == OK
    assert c.state(id) == "failed"
    j = job(c, id)
    assert j["attempts"] == 3 and j["failedReason"] == "boom 3"
    assert j["stacktrace"] == ["at x", "at y"] and j["returnvalue"] is UNDEF
    states = [t["state"] for t in j["timeline"]]
    assert states.count("failed") == 3
    assert c.counts(q) == counts(failed=1)
    d = c.call("Dlq", queue=q)
    assert d["ok"] is True and [x["id"] for x in d["jobs"]] == [id]
    assert c.call("FAIL", id=id) == err(f"Job not found or not in processing state: {id}")


def test_fail_with_backoff_is_delayed(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1, backoff=60000)
    c.pull(q)
    assert c.call("FAIL", id=id) == OK
    assert c.state(id) == "delayed" and job(c, id)["attempts"] == 1


def test_fail_needs_the_lock_token(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1, maxAttempts=2, backoff=0)
    tok = c.pull(q, owner="w")["token"]
    assert c.call("FAIL", id=id, error="x") == err(f"Lock token required for job {id}")
    assert c.call("FAIL", id=id, token="bad") == err(f"Invalid or expired lock token for job {id}")
    assert c.call("FAIL", id=id, error="boom", token=tok) == OK
    assert c.state(id) == "waiting"
    assert c.call("FAIL", id="nope", error="x") == \
        err("Job not found or not in processing state: nope")


def test_fail_unrecoverable_goes_to_the_dlq_at_once(bq):
    c = bq()
    q = qname()
    id = c.push(q, 2, maxAttempts=5)
    c.pull(q)
    assert c.call("FAIL", id=id, error="fatal", unrecoverable=True) == OK
    j = job(c, id)
    assert j["state"] == "failed" and j["attempts"] == 1 and j["failedReason"] == "fatal"


def test_failed_reason_after_a_retry(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1, backoff=0)
    c.pull(q)
    c.ok("FAIL", id=id, error="boom 1")
    assert job(c, id)["failedReason"] == "boom 1"


def test_failed_reason_without_error_is_undefined(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1, maxAttempts=1)
    c.pull(q)
    c.ok("FAIL", id=id)
    assert job(c, id)["failedReason"] is UNDEF
