"""bunqueue PUSH and PUSHB over a real socket against jobgate: reply shapes, the stored Job
(every option), ordering, dedup, dependencies, TTL, and the validation error strings.

Contract, reference mode and conventions of these command tests: tests/bunqueue_support.py.
"""
from __future__ import annotations

import re

import pytest

from .bunqueue_support import (GETJOB_KEYS, OK, UNDEF, Connections, bq_clocked_start, counts, err,
                               job, jobgate_only, keys, qname)

UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


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


@pytest.fixture(scope="module")
def clocked_server(tmp_path_factory):
    """A server in this process on a manual clock (tests/inproc.py) for the TTL tests: time
    moves when they say so (the reference, in reference mode, sleeps instead)."""
    s = bq_clocked_start(tmp_path_factory.mktemp("bqttl"))
    yield s
    s.stop()


@pytest.fixture
def clocked(clocked_server):
    """(open a connection, advance the clock by ms)."""
    conns = Connections(clocked_server.bunqueue_port)
    yield conns.open, clocked_server.advance
    conns.close_all()


def test_push_ttl_expires_a_waiting_job(clocked):
    bq, advance = clocked
    c = bq()
    q = qname()
    id = c.push(q, 1, ttl=300)
    keep = c.push(q, 2)
    advance(600)
    assert c.pull(q)["job"]["id"] == keep            # the expired job is never served
    assert c.call("PULL", queue=q) == {"ok": True, "job": None}
    assert c.state(id) == "unknown"


def test_push_ttl_spares_an_active_job(clocked):
    bq, advance = clocked
    c = bq()
    q = qname()
    id = c.push(q, 1, ttl=300)
    c.pull(q)
    advance(600)
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
