"""The five bunqueue bugs of issue 16, each checked over the wire (docs/bunqueue.md, "Commands and
fixes (issue 16)"); every test failed before its fix:

1. GetJobs with a list of states (handlers_query.py) answered nothing;
2. a job's own `timeout` was replaced by the PULL lock TTL (core/engine.py): the job keeps it,
   and it ends the attempt whatever the lock (bunqueue 2.9.5 application/background/
   timeouts.js: 'Job timeout exceeded');
3. Obliterate left the queue paused (the reference deletes the queue's state);
4. stackTraceLimit was ignored (handlers_outcome.py);
5. a `name` inside `data` stayed there instead of becoming the job's name (PUSH and PUSHB,
   domain/job/payload.js normalizeLegacyJobPayload).

The server runs in the test process on a manual clock (tests/inproc.py); JOBGATE_BQ_REFERENCE=1
runs the file against bunqueue 2.9.5 (`advance` then sleeps).
"""
from __future__ import annotations

import greenstalk
import pytest

from .bunqueue_support import OK, bq_clocked_start, err, job, jobgate_only, qname, wait_until

NAME_ERROR = "Job name must be a non-empty string of at most 256 characters"


@pytest.fixture(scope="module")
def bq_server(tmp_path_factory):
    s = bq_clocked_start(tmp_path_factory.mktemp("bq16"))
    yield s
    s.stop()


# ================================================================ 1. GetJobs states
def test_get_jobs_with_a_list_of_states(bq):
    c = bq()
    q = qname()
    a = c.push(q, {"n": 1})
    b = c.push(q, {"n": 2}, delay=60_000)
    p = c.push(q, {"n": 3}, priority=5)
    r = c.ok("GetJobs", queue=q, state=["waiting", "delayed"])["jobs"]
    assert [(j["id"], j["state"]) for j in r] == [(a, "waiting"), (b, "delayed")]
    assert all("returnvalue" in j and "failedReason" in j for j in r)
    r = c.ok("GetJobs", queue=q, state="waiting")["jobs"]
    assert [(j["id"], j["state"]) for j in r] == [(a, "waiting")]
    assert [j["state"] for j in c.ok("GetJobs", queue=q)["jobs"]] == \
        ["waiting", "delayed", "prioritized"]
    assert [j["state"] for j in c.ok("GetJobs", queue=q, state=[])["jobs"]] == \
        ["waiting", "delayed", "prioritized"]
    assert [j["id"] for j in c.ok("GetJobs", queue=q, asc=False)["jobs"]] == [p, b, a]
    c.ok("Pause", queue=q)
    assert c.ok("GetJobs", queue=q, state="waiting")["jobs"] == []
    c.ok("Resume", queue=q)


# ================================================================ 2. own timeout
def test_a_jobs_own_timeout_ends_its_attempt_whatever_the_lock(bq, bq_server):
    c = bq()
    q = qname()
    id = c.push(q, {}, timeout=1500)
    r = c.pull(q, owner="o", lockTtl=60_000)
    assert r["job"]["timeout"] == 1500
    assert job(c, id)["timeout"] == 1500
    bq_server.advance(2500)
    j = job(c, id)
    assert c.state(id) in ("delayed", "waiting")
    assert (j["attempts"], j["failedReason"], j["stallCount"], j["timeout"]) == \
        (1, "Job timeout exceeded", 0, 1500)
    # a late ACK with the token of the attempt the timeout ended is ignored, not an error
    assert c.call("ACK", id=id, token=r["token"]) == \
        {"ok": True, "data": {"applied": False, "reason": "already-finalized"}}
    assert job(c, id)["attempts"] == 1 and c.state(id) != "completed"


def test_heartbeats_do_not_extend_a_jobs_own_timeout(bq, bq_server):
    c = bq()
    q = qname()
    id = c.push(q, {}, timeout=1500)
    tok = c.pull(q, owner="o", lockTtl=60_000)["token"]
    bq_server.advance(1000)
    assert c.call("JobHeartbeat", id=id, token=tok) == {"ok": True, "data": {"ok": True}}
    assert c.call("ExtendLock", id=id, token=tok, duration=60_000) == OK
    bq_server.advance(1000)
    assert job(c, id)["failedReason"] == "Job timeout exceeded"
    assert c.state(id) in ("delayed", "waiting")


def test_the_lock_still_expires_before_a_longer_own_timeout(bq, bq_server):
    c = bq()
    q = qname()
    id = c.push(q, {}, timeout=60_000)
    c.pull(q, owner="o", lockTtl=1000)
    bq_server.advance(2500)
    # the reference finds expired locks on a periodic check: poll (jobgate: at once)
    assert wait_until(lambda: c.state(id) == "waiting", timeout=15)
    j = job(c, id)
    assert (j["attempts"], j["stallCount"], j["timeout"]) == (1, 1, 60_000)


@jobgate_only("beanstalk listener")
def test_the_job_keeps_its_own_ttr_across_dialects(bq, bq_server):
    c = bq()
    q = qname()
    id = c.push(q, "x", timeout=5000)
    tok = c.pull(q, owner="o", lockTtl=60_000)["token"]
    assert c.call("MoveToWait", id=id, token=tok) == OK
    g = greenstalk.Client(("127.0.0.1", bq_server.port_beanstalk), use=q, watch=q)
    b = g.reserve(timeout=1)
    assert g.stats_job(b.id)["ttr"] == 5                  # not the 60 s lock
    g.close()


# ================================================================ 3. Obliterate
def test_obliterate_unpauses_the_queue(bq):
    c = bq()
    q = qname()
    c.push(q, 1)
    c.ok("Pause", queue=q)
    assert c.ok("IsPaused", queue=q)["paused"] is True
    assert c.call("Obliterate", queue=q) == OK
    assert c.ok("IsPaused", queue=q)["paused"] is False
    id = c.push(q, 2)
    assert c.pull(q)["job"]["id"] == id


# ================================================================ 4. stackTraceLimit
def _fail_with_stack(c, q, stack, **opts):
    id = c.push(q, {}, maxAttempts=1, **opts)
    assert c.pull(q)["job"]["id"] == id
    assert c.call("FAIL", id=id, error="x", stack=stack) == OK
    return job(c, id)


def test_stack_trace_limit_is_applied_to_the_stored_stacktrace(bq):
    c = bq()
    j = _fail_with_stack(c, qname(), ["a", " b ", "", "c", "d"], stackTraceLimit=2)
    assert j["stackTraceLimit"] == 2 and j["stacktrace"] == ["a", "b"]
    assert _fail_with_stack(c, qname(), ["a"], stackTraceLimit=0)["stacktrace"] is None
    j = _fail_with_stack(c, qname(), [f"l{i}" for i in range(15)])
    assert j["stackTraceLimit"] == 10 and len(j["stacktrace"]) == 10
    j = _fail_with_stack(c, qname(), [f"l{i}" for i in range(15)], stackTraceLimit=12)
    assert len(j["stacktrace"]) == 12
    q = qname()
    fb = c.ok("PUSHB", queue=q, jobs=[{"data": {}, "stackTraceLimit": 1,
                                       "maxAttempts": 1}])["ids"][0]
    c.pull(q)
    c.ok("FAIL", id=fb, error="x", stack=["a", "b"])
    assert job(c, fb)["stacktrace"] == ["a"]


# ================================================================ 5. name in data
def _name_data(c, id):
    j = job(c, id)
    return j["name"], j["data"]


def test_a_name_inside_data_becomes_the_jobs_name(bq):
    c = bq()
    q = qname()
    assert _name_data(c, c.push(q, {"name": "fromdata", "x": 1})) == ("fromdata", {"x": 1})
    assert _name_data(c, c.push(q, {"name": "fromdata", "x": 1}, name="explicit")) == \
        ("explicit", {"name": "fromdata", "x": 1})
    assert _name_data(c, c.push(q, {"name": 5, "x": 1})) == ("default", {"name": 5, "x": 1})
    assert _name_data(c, c.push(q, {"name": "only"})) == ("only", {})
    assert _name_data(c, c.push(q, ["name"])) == ("default", ["name"])
    p = c.pull(q)["job"]
    assert (p["name"], p["data"]) == ("fromdata", {"x": 1})


def test_pushb_moves_a_name_inside_data_too(bq):
    c = bq()
    q = qname()
    ids = c.ok("PUSHB", queue=q, jobs=[{"data": {"name": "b1", "y": 2}},
                                       {"data": {"name": "b2"}, "name": "ex"}])["ids"]
    assert [_name_data(c, i) for i in ids] == [("b1", {"y": 2}), ("ex", {"name": "b2"})]


def test_bad_job_names_are_refused(bq):
    c = bq()
    q = qname()
    for data, extra in (({"name": ""}, {}), ({"name": "x" * 257}, {}), ({}, {"name": ""}),
                        ({}, {"name": 5})):
        assert c.call("PUSH", queue=q, data=data, **extra) == err(NAME_ERROR)
    assert c.call("PUSHB", queue=q, jobs=[{"data": {}}, {"data": {"name": ""}}]) == \
        err(f"jobs[1]: {NAME_ERROR}")
    assert c.call("PUSHB", queue=q, jobs=[{"data": {}}, {"data": {}, "name": ""}]) == \
        err(f"jobs[1]: {NAME_ERROR}")
    assert c.count(q) == 0
