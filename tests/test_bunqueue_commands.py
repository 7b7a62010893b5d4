"""Every bunqueue command over a real socket against jobgate: reply shapes (keys, values, wire
types where they matter: UNDEF is MessagePack ext 0, JavaScript `undefined`) and error strings.

Contract: ../shared/specs/bunqueue-tcp-protocol.txt; where it is silent, bunqueue 2.9.5
(../shared/reference/bunqueue-golden.json and its sources); jobgate's deliberate differences are
in docs/bunqueue.md. A case where jobgate answers otherwise than the reference, without being a
documented difference, is marked xfail(strict=True) with the reference's reply in the reason.

One server for the module (tests/conftest.py `bq_server`); every test uses fresh queue names
(`qname()`). JOBGATE_BQ_REFERENCE=1 runs the same tests against the real bunqueue server.
"""
from __future__ import annotations

import re
import time

import msgpack
import pytest

from .bunqueue_support import UNDEF, qname, reference_mode, unpack

UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")

#: The Job object as PULL sends it (bunqueue-golden.json step "PULL (no owner)"), in order.
JOB_KEYS = [
    "id", "queue", "name", "data", "createdAt", "runAt", "startedAt", "completedAt",
    "attempts", "backoff", "backoffConfig", "dependsOn", "childrenIds", "childrenCompleted",
    "tags", "progress", "progressMessage", "stacktrace", "repeat", "durable", "lastHeartbeat",
    "stallCount", "priority", "lifo", "maxAttempts", "removeOnComplete", "removeOnFail", "ttl",
    "timeout", "uniqueKey", "customId", "parentId", "groupId", "stallTimeout",
    "stackTraceLimit", "keepLogs", "sizeLimit", "failParentOnFailure",
    "removeDependencyOnFailure", "continueParentOnFailure", "ignoreDependencyOnFailure",
    "deduplicationTtl", "deduplicationExtend", "deduplicationReplace", "debounceId",
    "debounceTtl", "timeline"]
#: GetJob adds these three (step "GetJob (waiting)").
GETJOB_KEYS = JOB_KEYS + ["state", "returnvalue", "failedReason"]
COUNT_KEYS = ["waiting", "prioritized", "delayed", "active", "completed", "failed",
              "waiting-children", "paused"]
OK = {"ok": True, "id": UNDEF}   # the reply of commands that answer only ok (reference)


def err(msg: str) -> dict:
    return {"ok": False, "error": msg}


def counts(**nonzero) -> dict:
    c = {k: 0 for k in COUNT_KEYS}
    c.update({k.replace("_", "-"): v for k, v in nonzero.items()})
    return c


def keys(d: dict) -> list:
    """The keys of a reply map, sorted (msgpackr writes a JS object's insertion order; the
    client reads an object, so only the set of keys is compared)."""
    return sorted(d, key=str)


def job(c, id) -> dict:
    r = c.call("GetJob", id=id)
    assert r["ok"] is True, r
    return r["job"]


def jobgate_only(reason: str):
    return pytest.mark.skipif(reference_mode(), reason=f"jobgate choice: {reason}")


def xbug(reason: str):
    """A jobgate bug (strict xfail; the reason names the reference's answer)."""
    return pytest.mark.xfail(strict=True, reason=reason)


# ============================================================================ PUSH
def test_push_minimal_reply_and_job(bq):
    c = bq()
    q = qname()
    r = c.call("PUSH", queue=q, data={"msg": "hello", "n": 1})
    assert list(r) == ["ok", "id"] and r["ok"] is True
    assert UUID7.match(r["id"]), r
    j = job(c, r["id"])
    assert keys(j) == keys(GETJOB_KEYS)
    assert j["id"] == r["id"] and j["queue"] == q and j["name"] == "default"
    assert j["data"] == {"msg": "hello", "n": 1}
    assert j["state"] == "waiting" and j["returnvalue"] is UNDEF and j["failedReason"] is UNDEF
    assert (j["attempts"], j["maxAttempts"], j["backoff"], j["priority"]) == (0, 3, 1000, 0)
    assert j["backoffConfig"] is None and j["startedAt"] is None and j["completedAt"] is None
    assert j["dependsOn"] == [] and j["tags"] == [] and j["childrenIds"] == []
    assert j["lifo"] is False and j["removeOnComplete"] is False and j["durable"] is False
    assert j["ttl"] is None and j["timeout"] is None and j["customId"] is None
    assert isinstance(j["createdAt"], float) and j["runAt"] == j["createdAt"]
    assert j["timeline"][0]["state"] == "waiting"
    assert c.call("GetState", id=r["id"]) == {"ok": True, "id": r["id"], "state": "waiting"}


def test_push_every_option_is_stored(bq):
    c = bq()
    q = qname()
    id = c.push(q, {"x": 1}, name="email", priority=3, maxAttempts=2, backoff=250, ttl=600000,
                timeout=7000, tags=["a", "b"], groupId="g1", lifo=True, removeOnComplete=True,
                removeOnFail=True, durable=True, repeat={"every": 1000, "limit": 3})
    j = job(c, id)
    assert j["name"] == "email" and j["priority"] == 3 and j["maxAttempts"] == 2
    assert j["backoff"] == 250 and j["backoffConfig"] is None
    assert j["ttl"] == 600000 and j["timeout"] == 7000
    assert j["tags"] == ["a", "b"] and j["groupId"] == "g1"
    assert j["lifo"] is True and j["removeOnComplete"] is True and j["removeOnFail"] is True
    assert j["durable"] is True
    assert j["repeat"]["every"] == 1000 and j["repeat"]["limit"] == 3
    assert j["state"] == "prioritized"


@pytest.mark.parametrize("backoff", [{"type": "fixed", "delay": 40},
                                     {"type": "exponential", "delay": 500}])
def test_push_backoff_object(bq, backoff):
    c = bq()
    j = job(c, c.push(qname(), 1, backoff=backoff))
    assert j["backoff"] == backoff["delay"]
    assert j["backoffConfig"] == backoff


def test_push_delay_is_delayed_until_promoted(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1, delay=60000)
    assert c.state(id) == "delayed"
    j = job(c, id)
    assert j["runAt"] - j["createdAt"] == 60000
    assert c.counts(q) == counts(delayed=1)
    assert c.call("PULL", queue=q) == {"ok": True, "job": None}
    assert c.call("Promote", id=id) == OK
    assert c.state(id) == "waiting"
    assert c.pull(q)["job"]["id"] == id


def test_push_priority_order_then_fifo(bq):
    c = bq()
    q = qname()
    ids = {p: [c.push(q, p, priority=p) for _ in range(2)] for p in (0, 10, -5, 3)}
    got = [c.pull(q)["job"]["id"] for _ in range(8)]
    assert got == ids[10] + ids[3] + ids[0] + ids[-5]


def test_push_lifo_order(bq):
    c = bq()
    q = qname()
    a = c.push(q, "a")
    b = c.push(q, "b", lifo=True)
    d = c.push(q, "d", lifo=True)
    assert [c.pull(q)["job"]["id"] for _ in range(3)] == [d, b, a]


def test_push_unique_key_returns_the_existing_id(bq):
    c = bq()
    q = qname()
    first = c.push(q, 1, uniqueKey="u1")
    assert c.call("PUSH", queue=q, data=2, uniqueKey="u1") == {"ok": True, "id": first}
    assert c.count(q) == 1 and job(c, first)["data"] == 1
    assert job(c, first)["uniqueKey"] == "u1"
    other = c.push(qname(), 1, uniqueKey="u1")        # keys are per queue
    assert other != first
    assert c.push(q, 3, uniqueKey="u2") != first


def test_push_job_id_is_idempotent(bq):
    c = bq()
    q = qname()
    cid = "custom-" + q
    assert c.call("PUSH", queue=q, data={"v": 1}, jobId=cid) == {"ok": True, "id": cid}
    assert c.call("PUSH", queue=q, data={"v": 2}, jobId=cid) == {"ok": True, "id": cid}
    assert c.count(q) == 1
    j = job(c, cid)
    assert j["data"] == {"v": 1} and j["customId"] == cid
    r = c.call("GetJobByCustomId", customId=cid)
    assert list(r) == ["ok", "job"] and r["job"]["id"] == cid


def test_push_depends_on_waits_for_its_dependency(bq):
    c = bq()
    q = qname()
    dep = c.push(q, "dep")
    child = c.push(q, "child", dependsOn=[dep])
    assert c.state(child) == "waiting-children"
    assert job(c, child)["dependsOn"] == [dep]
    assert c.counts(q) == counts(waiting=1, waiting_children=1)
    assert c.pull(q)["job"]["id"] == dep
    assert c.call("PULL", queue=q) == {"ok": True, "job": None}   # the child is not ready
    assert c.call("ACK", id=dep) == OK
    assert c.state(child) == "waiting"
    assert c.pull(q)["job"]["id"] == child


def test_push_depends_on_a_completed_job_is_waiting(bq):
    c = bq()
    q = qname()
    dep = c.push(q, "dep")
    c.pull(q)
    c.ok("ACK", id=dep)
    child = c.push(q, "child", dependsOn=[dep])
    assert c.state(child) == "waiting"


def test_push_depends_on_unknown_job(bq):
    c = bq()
    q = qname()
    assert c.call("PUSH", queue=q, data=1, dependsOn=["no-such-job"]) == \
        err("Dependency job not found: no-such-job")
    assert c.count(q) == 0


#: (options, error) in the reference's words (options.py, bunqueue-golden.json).
VALIDATION = [
    ({"priority": 1000001}, "priority must be at most 1000000"),
    ({"priority": -1000001}, "priority must be at least -1000000"),
    ({"priority": "x"}, "priority must be a number"),
    ({"priority": 1.5}, "priority must be an integer"),
    ({"delay": -1}, "delay must be at least 0"),
    ({"delay": 365 * 86400000 + 1.0}, "delay must be at most 31536000000"),
    ({"delay": 8589934592}, "delay must be a number"),            # uint64: a BigInt in JS
    ({"delay": float("nan")}, "delay must be a finite number"),
    ({"delay": float("inf")}, "delay must be a finite number"),
    ({"timeout": 86400001}, "timeout must be at most 86400000"),
    ({"timeout": "5"}, "timeout must be a number"),
    ({"maxAttempts": 0}, "maxAttempts must be at least 1"),
    ({"maxAttempts": 1001}, "maxAttempts must be at most 1000"),
    ({"maxAttempts": 2.5}, "maxAttempts must be an integer"),
    ({"backoff": -1}, "backoff must be at least 0"),
    ({"backoff": 86400001}, "backoff must be at most 86400000"),
    ({"backoff": {"type": "linear", "delay": 1}}, "backoff.type must be 'fixed' or 'exponential'"),
    ({"backoff": {"type": "fixed"}}, "backoff.delay is required"),
    ({"backoff": {"type": "fixed", "delay": -5}}, "backoff.delay must be at least 0"),
    ({"ttl": -1}, "ttl must be at least 0"),
    ({"groupId": 5}, "groupId must be a string"),
    ({"groupId": ""}, "groupId must be a non-empty string"),
    ({"groupId": "g" * 257}, "groupId must be at most 256 characters"),
    ({"data": {"big": 2 ** 40}}, "Job data must be JSON serializable"),
]


@pytest.mark.parametrize("opts,error", VALIDATION, ids=[e for _, e in VALIDATION])
def test_push_validation_errors(bq, opts, error):
    c = bq()
    q = qname()
    fields = {"data": 1, **opts}
    assert c.call("PUSH", queue=q, **fields) == err(error)
    assert c.count(q) == 0


QUEUE_ERRORS = [
    ({}, "Queue name is required"),
    ({"queue": ""}, "Queue name is required"),
    ({"queue": 0}, "Queue name is required"),
    ({"queue": False}, "Queue name is required"),
    ({"queue": "q" * 257}, "Queue name too long (max 256 characters)"),
    ({"queue": "bad name!"}, "Queue name contains invalid characters"),
    ({"queue": {"a": 1}}, "Queue name contains invalid characters"),
]


@pytest.mark.parametrize("fields,error", QUEUE_ERRORS, ids=[str(f)[:20] for f, _ in QUEUE_ERRORS])
def test_push_queue_name_errors(bq, fields, error):
    assert bq().call("PUSH", data=1, **fields) == err(error)


def test_push_queue_names_accepted(bq):
    c = bq()
    for name in ("q" * 256, "ok:na.me-_1"):
        assert c.call("PUSH", queue=name, data=1)["ok"] is True
        assert c.call("Obliterate", queue=name) == OK


def test_push_data_too_large(bq):
    c = bq()
    q = qname()
    assert c.call("PUSH", queue=q, data="x" * (10 * 1024 * 1024 + 10)) == \
        err("Job data too large (max 10MB)")
    assert c.count(q) == 0


def test_push_without_data_and_with_binary_data(bq):
    c = bq()
    q = qname()
    r = c.call("PUSH", queue=q)                               # golden "PUSH missing data"
    assert r["ok"] is True
    assert job(c, r["id"])["data"] in (None, UNDEF)   # the reference: undefined; jobgate: nil
    r = c.call("PUSH", queue=q, data=None)
    assert job(c, r["id"])["data"] is None
    r = c.call("PUSH", queue=q, data=b"\x00\x01\x02")
    assert job(c, r["id"])["data"] == b"\x00\x01\x02"      # bin stays bin


def test_remove_on_complete_deletes_the_job(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1, removeOnComplete=True)
    c.pull(q)
    assert c.call("ACK", id=id, result=5) == OK
    assert c.state(id) == "unknown"
    assert c.call("GetJob", id=id) == err("Job not found")
    assert c.count(q) == 0


def test_remove_on_fail_deletes_the_job(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1, maxAttempts=1, removeOnFail=True)
    c.pull(q)
    assert c.call("FAIL", id=id, error="x") == OK
    assert c.state(id) == "unknown"
    assert c.counts(q) == counts() and c.call("Dlq", queue=q)["jobs"] == []


def test_push_ttl_expires_a_waiting_job(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1, ttl=300)
    keep = c.push(q, 2)
    time.sleep(0.6)
    assert c.pull(q)["job"]["id"] == keep            # the expired job is never served
    assert c.call("PULL", queue=q) == {"ok": True, "job": None}
    assert c.state(id) == "unknown"


def test_push_ttl_spares_an_active_job(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1, ttl=300)
    c.pull(q)
    time.sleep(0.6)
    assert c.state(id) == "active"
    assert c.call("ACK", id=id) == OK


# =========================================================================== PUSHB
def test_pushb_ids_in_order_with_per_job_options(bq):
    c = bq()
    q = qname()
    r = c.call("PUSHB", queue=q, jobs=[{"name": "a", "data": {"i": 1}}, {"data": {"i": 2}},
                                        {"data": {"i": 3}, "priority": 10},
                                        {"data": 4, "customId": "cb-" + q}])
    assert list(r) == ["ok", "ids"] and r["ok"] is True and len(r["ids"]) == 4
    assert all(UUID7.match(i) for i in r["ids"][:3]) and r["ids"][3] == "cb-" + q
    assert job(c, r["ids"][0])["name"] == "a"
    assert job(c, r["ids"][2])["priority"] == 10
    assert c.pull(q)["job"]["id"] == r["ids"][2]
    assert c.counts(q) == counts(waiting=3, active=1)


def test_pushb_empty_and_dedup(bq):
    c = bq()
    q = qname()
    assert c.call("PUSHB", queue=q, jobs=[]) == {"ok": True, "ids": []}
    r = c.ok("PUSHB", queue=q, jobs=[{"data": 1, "uniqueKey": "k"}, {"data": 2, "uniqueKey": "k"}])
    assert r["ids"][0] == r["ids"][1] and c.count(q) == 1


@pytest.mark.parametrize("jobs,error", [
    ([{"data": 1}, {"data": 2, "priority": "x"}, {"data": 3}],
     "jobs[1]: priority must be a number"),
    ([{"data": 1}, {"data": 2, "maxAttempts": 0}], "jobs[1]: maxAttempts must be at least 1"),
    ([{"data": 1, "delay": -1}], "jobs[0]: delay must be at least 0"),
])
def test_pushb_bad_job_creates_nothing(bq, jobs, error):
    c = bq()
    q = qname()
    assert c.call("PUSHB", queue=q, jobs=jobs) == err(error)
    assert c.count(q) == 0


def test_pushb_unknown_dependency_creates_nothing(bq):
    c = bq()
    q = qname()
    assert c.call("PUSHB", queue=q, jobs=[{"data": 1}, {"data": 2, "dependsOn": ["missing"]}]) \
        == err("jobs[1]: Dependency job not found: missing")
    assert c.count(q) == 0


def test_pushb_oversized_job_creates_nothing(bq):
    c = bq()
    q = qname()
    big = "x" * (10 * 1024 * 1024 + 10)
    assert c.call("PUSHB", queue=q, jobs=[{"data": 1}, {"data": big}]) == \
        err("jobs[1]: Job data too large (max 10MB)")
    assert c.count(q) == 0


@jobgate_only("the reference answers these with JavaScript TypeError texts")
def test_pushb_jobs_not_a_list(bq):
    c = bq()
    q = qname()
    assert c.call("PUSHB", queue=q, jobs="x") == err("jobs must be an array")
    assert c.call("PUSHB", queue=q) == err("jobs must be an array")
    assert c.call("PUSHB", queue=q, jobs=[{"data": 1}, 5]) == err("jobs[1]: Invalid job")
    assert c.call("PUSHB", queue="bad q", jobs=[]) == err("Queue name contains invalid characters")
    assert c.count(q) == 0


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


# ========================================================================= queries
def test_get_job_state_result_of_unknown_ids(bq):
    c = bq()
    assert c.call("GetJob", id="nope") == err("Job not found")
    assert c.call("GetState", id="nope") == {"ok": True, "id": "nope", "state": "unknown"}
    assert c.call("GetState", id=5) == {"ok": True, "id": 5, "state": "unknown"}
    assert c.call("GetResult", id="nope") == {"ok": True, "id": "nope", "result": UNDEF}
    assert c.call("GetJobByCustomId", customId="nope") == err("Job not found")
    assert c.call("GetProgress", id="nope") == err("Job not found")


def test_get_result_of_unfinished_and_failed_jobs(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1, maxAttempts=1)
    assert c.call("GetResult", id=id) == {"ok": True, "id": id, "result": UNDEF}
    c.pull(q)
    c.ok("FAIL", id=id, error="e")
    assert c.call("GetResult", id=id) == {"ok": True, "id": id, "result": UNDEF}


def test_get_job_counts_shape(bq):
    c = bq()
    q = qname()
    c.push(q, 1)
    c.push(q, 2, priority=5)
    c.push(q, 3, delay=60000)
    c.push(q, 4, priority=-3)
    r = c.call("GetJobCounts", queue=q)
    assert list(r) == ["ok", "counts"] and list(r["counts"]) == COUNT_KEYS
    assert r["counts"] == counts(waiting=2, prioritized=1, delayed=1)
    assert c.counts(qname("never")) == counts()


def test_count_is_jobs_still_to_run(bq):
    """Count as the reference counts (docs/bunqueue.md): waiting + prioritized + delayed;
    active, completed and failed jobs are not counted."""
    c = bq()
    q = qname()
    for i in range(5):
        c.push(q, i, maxAttempts=1)
    c.push(q, 9, delay=60000)
    a = c.pull(q)["job"]["id"]
    b = c.pull(q)["job"]["id"]
    c.pull(q)
    c.ok("ACK", id=a)
    c.ok("FAIL", id=b)
    c.push(q, 7, priority=3)
    assert c.counts(q) == counts(waiting=2, prioritized=1, delayed=1, active=1, completed=1,
                                 failed=1)
    assert c.call("Count", queue=q) == {"ok": True, "count": 4}
    assert c.call("Count", queue=qname("never")) == {"ok": True, "count": 0}


def test_get_jobs_filters_and_pages(bq):
    c = bq()
    q = qname()
    ids = [c.push(q, i) for i in range(4)]
    d = c.push(q, 9, delay=60000)
    c.pull(q)
    r = c.call("GetJobs", queue=q)
    assert list(r) == ["ok", "jobs"] and [j["id"] for j in r["jobs"]] == ids + [d]
    assert [j["id"] for j in c.call("GetJobs", queue=q, limit=2, offset=1)["jobs"]] == ids[1:3]
    assert [j["id"] for j in c.call("GetJobs", queue=q, state="active")["jobs"]] == ids[:1]
    assert [j["id"] for j in c.call("GetJobs", queue=q, state="delayed")["jobs"]] == [d]
    assert [j["id"] for j in c.call("GetJobs", queue=q, state="waiting")["jobs"]] == ids[1:]
    assert c.call("GetJobs", queue=q, state="completed") == {"ok": True, "jobs": []}
    assert c.call("GetJobs", queue=qname("never")) == {"ok": True, "jobs": []}


def test_get_jobs_waiting_excludes_prioritized(bq):
    c = bq()
    q = qname()
    w = c.push(q, 1)
    p = c.push(q, 2, priority=5)
    assert [j["id"] for j in c.call("GetJobs", queue=q, state="prioritized")["jobs"]] == [p]
    assert [j["id"] for j in c.call("GetJobs", queue=q, state="waiting")["jobs"]] == [w]


def test_get_counts_per_priority(bq):
    c = bq()
    q = qname()
    for p in (0, 5, 5, -2, 0):
        c.push(q, 1, priority=p)
    r = c.call("GetCountsPerPriority", queue=q)
    assert r["ok"] is True and r["queue"] == q
    assert {int(k): v for k, v in r["counts"].items()} == {0: 2, 5: 2, -2: 1}


def test_get_counts_per_priority_like_the_reference(bq):
    c = bq()
    q = qname()
    for p in (0, 5, 5):
        c.push(q, 1, priority=p)
    c.push(q, 1, delay=60000)
    assert c.call("GetCountsPerPriority", queue=q) == \
        {"ok": True, "queue": q, "counts": {"0": 2, "5": 2}}


def test_get_job_by_custom_id_shape(bq):
    """49 keys: the Job, returnvalue and failedReason, no state (golden 'GetJobByCustomId')."""
    c = bq()
    cid = "cid-" + qname()
    c.push(qname(), 1, jobId=cid)
    assert keys(c.call("GetJobByCustomId", customId=cid)["job"]) == \
        keys(JOB_KEYS + ["returnvalue", "failedReason"])


# ======================================================================== progress
def test_progress_and_get_progress(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1)
    c.pull(q)
    assert c.call("GetProgress", id=id) == {"ok": True, "progress": 0, "message": None}
    assert c.call("Progress", id=id, progress=30) == OK
    assert c.call("GetProgress", id=id) == {"ok": True, "progress": 30, "message": None}
    assert c.call("Progress", id=id, progress=50, message="half") == OK
    assert c.call("GetProgress", id=id) == {"ok": True, "progress": 50, "message": "half"}
    j = job(c, id)
    assert j["progress"] == 50 and j["progressMessage"] == "half"


def test_progress_errors(bq):
    c = bq()
    id = c.push(qname(), 1)
    assert c.call("Progress", id=id, progress=10) == \
        err("Job is not active (current state: waiting)")
    assert c.call("Progress", id="nope", progress=10) == err("Job not found")


def test_get_progress_of_a_waiting_job(bq):
    c = bq()
    id = c.push(qname(), 1)
    assert c.call("GetProgress", id=id) == err("Job is not active (current state: waiting)")


@jobgate_only("the reference clamps progress to 0..100 and accepts any value")
def test_progress_validation(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1)
    c.pull(q)
    assert c.call("Progress", id=id, progress=101) == err("progress must be at most 100")
    assert c.call("Progress", id=id, progress="x") == err("progress must be a number")
    assert c.call("Progress", id=id) == err("progress is required")


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


# ========================================================================= WaitJob
def test_wait_job_immediate_when_completed(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1)
    c.pull(q)
    c.ok("ACK", id=id, result={"r": 7})
    assert c.call("WaitJob", id=id, timeout=100) == {"ok": True, "completed": True,
                                                     "result": {"r": 7}}


def test_wait_job_waits_then_completes(bq):
    w, worker = bq(), bq()
    q = qname()
    id = w.push(q, 1)
    w.send({"cmd": "WaitJob", "id": id, "timeout": 5000, "reqId": "w"})
    assert w.quiet(0.2)
    worker.pull(q)
    worker.ok("ACK", id=id, result=[1, 2])
    assert w.recv_reply("w", timeout=10) == {"ok": True, "completed": True, "result": [1, 2],
                                             "reqId": "w"}


def test_wait_job_times_out(bq):
    c = bq()
    id = c.push(qname(), 1)
    assert c.call("WaitJob", id=id, timeout=200) == {"ok": True, "completed": False}
    assert c.call("WaitJob", id="nope", timeout=100) == err("Job not found")


def test_wait_job_of_a_failed_job(bq):
    w, worker = bq(), bq()
    q = qname()
    id = w.push(q, 1, maxAttempts=1)
    w.send({"cmd": "WaitJob", "id": id, "timeout": 5000, "reqId": "wf"})
    worker.pull(q)
    worker.ok("FAIL", id=id, error="bad")
    r = w.recv_reply("wf", timeout=10)
    assert r["ok"] is True and r["completed"] is False


def test_wait_job_timeout_validation(bq):
    c = bq(timeout=1.5)
    id = c.push(qname(), 1)
    assert c.call("WaitJob", id=id, timeout=-1) == err("timeout must be at least 0")
    assert c.call("WaitJob", id=id, timeout=600001) == err("timeout must be at most 600000")


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


# ====================================================================== monitoring
def test_ping(bq):
    r = bq().call("Ping")
    assert list(r) == ["ok", "data"] and r["data"]["pong"] is True
    assert isinstance(r["data"]["time"], float) and r["data"]["time"] > 1.6e12


def test_stats(bq):
    r = bq().call("Stats")
    assert r["ok"] is True
    assert list(r["stats"]) == ["waiting", "active", "delayed", "dlq", "completed", "failed",
                                "uptime", "pushPerSec", "pullPerSec"]
    assert all(isinstance(v, (int, float)) and v >= 0 for v in r["stats"].values())


def test_metrics(bq):
    c = bq()
    before = c.call("Metrics")["metrics"]
    q = qname()
    id = c.push(q, 1)
    c.pull(q)
    c.ok("ACK", id=id)
    m = c.call("Metrics")["metrics"]
    assert list(m) == ["totalPushed", "totalPulled", "totalCompleted", "totalFailed",
                       "avgLatencyMs", "avgProcessingMs", "memoryUsageMb", "sqliteSizeMb",
                       "activeConnections"]
    for k in ("totalPushed", "totalPulled", "totalCompleted"):
        assert m[k] >= before[k] + 1, k
    if not reference_mode():        # the reference counts 0 here (its own bookkeeping)
        assert m["activeConnections"] >= 1


def test_prometheus(bq):
    r = bq().call("Prometheus")
    assert list(r) == ["ok", "data"] and list(r["data"]) == ["metrics"]
    text = r["data"]["metrics"]
    assert isinstance(text, str) and "# TYPE " in text
    for line in text.strip().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            float(value)


def test_workers(bq):
    c = bq()
    q = qname()
    r = c.call("RegisterWorker", name="w1", queues=[q])
    d = r["data"]
    assert r["ok"] is True and d["name"] == "w1" and d["queues"] == [q]
    wid = d["workerId"]
    assert isinstance(wid, str) and isinstance(d["registeredAt"], float)
    assert c.call("Heartbeat", id=wid) == {"ok": True, "data": {"ok": True}}
    lw = c.call("ListWorkers")["data"]
    mine = [w for w in lw["workers"] if w["id"] == wid]
    assert len(mine) == 1 and mine[0]["name"] == "w1" and mine[0]["queues"] == [q]
    for k in ("registeredAt", "lastSeen", "activeJobs", "processedJobs", "failedJobs"):
        assert k in mine[0]
    assert lw["stats"]["total"] >= 1
    assert c.call("UnregisterWorker", workerId=wid) == {"ok": True, "data": {"removed": True}}
    assert all(w["id"] != wid for w in c.call("ListWorkers")["data"]["workers"])


def test_job_heartbeat_and_extend_lock(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1)
    tok = c.pull(q, owner="o", lockTtl=5000)["token"]
    assert c.call("JobHeartbeat", id=id, token=tok) == {"ok": True, "data": {"ok": True}}
    assert c.call("JobHeartbeat", id=id) == {"ok": True, "data": {"ok": True}}
    assert c.call("JobHeartbeatB", ids=[id, "nope"], tokens=[tok, "z"]) == \
        {"ok": True, "data": {"ok": True, "count": 1}}
    assert c.call("JobHeartbeatB", ids=[id]) == {"ok": True, "data": {"ok": True, "count": 1}}
    assert c.call("ExtendLock", id=id, token=tok, duration=10000) == OK
    assert c.call("ExtendLock", id=id, token="bad", duration=10000)["ok"] is False
    assert c.call("ACK", id=id, token=tok) == OK


def test_job_heartbeat_errors(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1)
    e = err("Job not found or not active (or invalid token)")
    assert c.call("JobHeartbeat", id=id) == e
    c.pull(q, owner="o")
    assert c.call("JobHeartbeat", id=id, token="bad") == e


def test_logs(bq):
    c = bq()
    id = c.push(qname(), 1)
    assert c.call("AddLog", id=id, message="hello") == {"ok": True, "data": {"added": True}}
    assert c.call("AddLog", id=id, message="w", level="warn") == \
        {"ok": True, "data": {"added": True}}
    logs = c.call("GetLogs", id=id)["data"]["logs"]
    assert [(x["message"], x["level"]) for x in logs] == [("hello", "info"), ("w", "warn")]
    assert all(isinstance(x["timestamp"], float) for x in logs)
    assert c.call("GetLogs", id="nope")["data"]["logs"] == []


def test_get_logs_count(bq):
    c = bq()
    id = c.push(qname(), 1)
    c.ok("AddLog", id=id, message="m")
    assert c.call("GetLogs", id=id)["data"]["count"] == 1


# ========================================================================== events
def _events(c, n, timeout=5.0):
    """At least `n` event frames of connection `c` (replies read meanwhile are kept)."""
    deadline = time.monotonic() + timeout
    while len(c.events) < n and time.monotonic() < deadline:
        r = unpack(c.recv_frame(timeout=max(0.01, deadline - time.monotonic())))
        if isinstance(r, dict) and r.get("type") == "event":
            c.events.append(r)
        else:
            c.pending.append(r)
    return c.events


def test_subscribe_events_frames_arrive_without_req_id(bq):
    sub, c = bq(), bq()
    q = qname()
    assert sub.call("SubscribeEvents", queue=q) == OK
    c.push(qname("other"), 1)                       # another queue: no event
    id = c.push(q, 1)
    c.pull(q)
    c.ok("ACK", id=id)
    evs = _events(sub, 3)
    assert len(evs) == 3
    for e in evs:
        assert list(e) == ["type", "event"] and "reqId" not in e
        assert e["event"]["queue"] == q and e["event"]["jobId"] == id
        assert isinstance(e["event"]["timestamp"], float)
    assert [e["event"]["eventType"] for e in evs][1:] == ["pulled", "completed"]
    assert sub.quiet(0.2)


def test_subscribe_events_push_event_is_pushed(bq):
    sub, c = bq(), bq()
    q = qname()
    sub.ok("SubscribeEvents", queue=q)
    c.push(q, 1)
    assert _events(sub, 1)[0]["event"]["eventType"] == "pushed"


def test_subscribe_events_carry_result_and_error(bq):
    sub, c = bq(), bq()
    q = qname()
    sub.ok("SubscribeEvents", queue=q)
    a = c.push(q, 1)
    c.pull(q)
    c.ok("ACK", id=a, result={"r": 1})
    b = c.push(q, 2, maxAttempts=1)
    c.pull(q)
    c.ok("FAIL", id=b, error="bad")
    evs = {(e["event"]["eventType"], e["event"]["jobId"]): e["event"] for e in _events(sub, 6)}
    assert evs[("completed", a)]["data"] == {"r": 1}
    assert evs[("failed", b)]["error"] == "bad"


# =========================================================================== Hello
@pytest.mark.parametrize("sent,answered", [(1, 1), (2, 2), (3, 3), (0, 1), (4, 3), (99, 3),
                                           (None, 1), ("2", 1)])
@jobgate_only("jobgate negotiates 1..3 (README); the reference always answers 3")
def test_hello_versions(bq, sent, answered):
    fields = {} if sent is None else {"protocolVersion": sent}
    r = bq().call("Hello", capabilities=["pipelining"], **fields)
    assert r == {"ok": True, "protocolVersion": answered,
                 "capabilities": ["pipelining", "separate-job-name"], "server": "bunqueue",
                 "version": "2.9.5"}


# ========================================================== unknown / malformed cmds
def test_unknown_command(bq):
    c = bq()
    assert c.call("Bogus") == err("Unknown command: Bogus")
    assert c.call("push", queue="x", data=1) == err("Unknown command: push")   # case-sensitive
    assert c.call("Ping")["ok"] is True


@pytest.mark.parametrize("frame,reply", [
    pytest.param({"foo": 1, "reqId": 7},
                 {"ok": False, "error": "Invalid command", "reqId": UNDEF}),
    ({"foo": 1, "reqId": "nc"}, {"ok": False, "error": "Invalid command", "reqId": "nc"}),
    ({"cmd": None, "reqId": "nn"}, {"ok": False, "error": "Invalid command", "reqId": "nn"}),
    pytest.param({"cmd": "", "reqId": "e"},
                 {"ok": False, "error": "Invalid command", "reqId": "e"}),
    pytest.param({"cmd": 5, "reqId": "n5"},
                 {"ok": False, "error": "Unknown command: 5", "reqId": "n5"}),
], ids=["no-cmd-int-reqid", "no-cmd", "cmd-nil", "cmd-empty", "cmd-int"])
def test_missing_or_bad_cmd(bq, frame, reply):
    c = bq()
    c.send(frame)
    assert c.recv() == reply
    assert c.call("Ping")["ok"] is True


def test_mutations_survive_on_another_connection(bq):
    """What one connection did is visible to the next (no per-connection state leaks)."""
    a = bq()
    q = qname()
    id = a.push(q, {"k": "v"}, tags=["t"])
    a.close()
    b = bq()
    j = job(b, id)
    assert j["data"] == {"k": "v"} and j["tags"] == ["t"]
    assert msgpack.packb(j["data"]) == msgpack.packb({"k": "v"})
