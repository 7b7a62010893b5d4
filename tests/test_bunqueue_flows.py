"""bunqueue flows over a real socket: PUSHF (a parent with children, nested), the flow fields of
the Job object, the state of a waiting parent (GetState, GetJobCounts, GetJobs), and
GetChildrenValues, GetFailedChildrenValues, GetIgnoredChildrenFailures and what a child's
failure does to its parent (the link commands: tests/test_bunqueue_flow_links.py).

Replies as the real bunqueue 2.9.5 server gives them (run with JOBGATE_BQ_REFERENCE=1 to check
this file against it); jobgate's choices in docs/bunqueue.md "Flows (issue 16)". Contract and
conventions: tests/bunqueue_support.py.
"""
from __future__ import annotations

import time
import uuid

from .bunqueue_support import (GETJOB_KEYS, JOB_KEYS, UNDEF, counts, err, job, keys, qname,
                               wait_until)


def fid(prefix: str = "f") -> str:
    """A fresh flow job id (tests share one server)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def node(id, queue, name="n", data=None, parent=None, children=(), **opts) -> dict:
    """One flow job as the real client's FlowProducer plans it (client/flowPlan.js):
    `parent` is (id, queue); children are ids; the data carries the link metadata."""
    d = dict(data or {})
    inp = {"name": name, "data": d, "removeOnComplete": False, "removeOnFail": False}
    if parent is not None:
        d["__parentId"], d["__parentQueue"] = parent
        inp["parentId"] = parent[0]
    if children:
        d["__childrenIds"] = list(children)
        inp["dependsOn"] = list(children)
        inp["childrenIds"] = list(children)
    inp.update(opts)
    return {"id": id, "queue": queue, "input": inp}


def simple_flow(qp, qc, kid_opts=None, n=2):
    """A parent in `qp` with `n` children in `qc` (children first, as the client sends)."""
    p = fid("p")
    kids = [fid("c") for _ in range(n)]
    jobs = [node(k, qc, f"c{i}", {"i": i}, (p, qp), **(kid_opts or {}))
            for i, k in enumerate(kids)]
    jobs.append(node(p, qp, "parent", {"top": True}, children=kids))
    return p, kids, jobs


def take(c, q, ids, result=None) -> str:
    """PULL `q` (no owner) expecting one of `ids` (the reference does not serve jobs created
    in the same ms in creation order), ACK it with `result`; returns its id."""
    r = c.pull(q)
    assert r["job"] is not None and r["job"]["id"] in ids, r
    c.ok("ACK", id=r["job"]["id"], result=result)
    return r["job"]["id"]


# ============================================================================ PUSHF
def test_pushf_reply_carries_every_job_in_request_order(bq):
    c = bq()
    qp, qc = qname("fp"), qname("fc")
    p, kids, jobs = simple_flow(qp, qc)
    r = c.call("PUSHF", jobs=jobs)
    assert r["ok"] is True and list(r) == ["ok", "data"] or keys(r) == ["data", "ok"], r
    snaps = r["data"]["jobs"]
    assert list(r["data"]) == ["jobs"]
    assert [s["id"] for s in snaps] == kids + [p]
    for s in snaps:
        assert keys(s) == sorted(JOB_KEYS, key=str)
    k0, par = snaps[0], snaps[-1]
    assert k0["parentId"] == p and k0["childrenIds"] == [] and k0["dependsOn"] == []
    assert k0["data"] == {"i": 0, "__parentId": p, "__parentQueue": qp}
    assert k0["name"] == "c0" and k0["queue"] == qc and k0["customId"] is None
    assert [e["state"] for e in k0["timeline"]] == ["waiting"]
    assert par["parentId"] is None and par["childrenIds"] == kids and par["dependsOn"] == kids
    assert par["data"] == {"top": True, "__childrenIds": kids}
    assert [e["state"] for e in par["timeline"]] == ["waiting-children"]
    assert par["childrenCompleted"] == 0
    assert isinstance(par["createdAt"], float) and par["runAt"] == par["createdAt"]


def test_waiting_parent_state_counts_and_listing(bq):
    c = bq()
    qp, qc = qname("fp"), qname("fc")
    p, kids, jobs = simple_flow(qp, qc)
    c.ok("PUSHF", jobs=jobs)
    assert c.state(p) == "waiting-children"
    assert c.counts(qp) == counts(waiting_children=1)
    assert c.counts(qc) == counts(waiting=2)
    g = job(c, p)
    assert keys(g) == sorted(GETJOB_KEYS, key=str)
    assert g["state"] == "waiting-children" and g["returnvalue"] is UNDEF
    r = c.ok("GetJobs", queue=qp, state="waiting-children")
    assert [j["id"] for j in r["jobs"]] == [p]
    assert c.pull(qp)["job"] is None   # the parent is not served before its children
    assert c.count(qp) == 0 and c.count(qc) == 2
    assert c.call("GetCountsPerPriority", queue=qp)["counts"] == {}
    assert c.call("GetJobs", queue=qp, state="delayed")["jobs"] == []
    assert c.call("Promote", id=p) == err("Job not found or not delayed")
    assert c.call("ChangePriority", id=p, priority=5) == err("Job not found or not in queue")
    assert c.call("MoveToDelayed", id=p, delay=1000) == err(
        "Job is not active (current state: waiting-children)")
    assert c.state(p) == "waiting-children"


def test_parent_is_served_after_its_last_child_and_reads_their_values(bq):
    c = bq()
    qp, qc = qname("fp"), qname("fc")
    p, kids, jobs = simple_flow(qp, qc)
    c.ok("PUSHF", jobs=jobs)
    assert c.call("GetChildrenValues", id=p) == {"ok": True, "data": {"values": {}}}
    k0 = take(c, qc, kids, {"r": 0})
    assert c.call("GetChildrenValues", id=p) == {
        "ok": True, "data": {"values": {f"{qc}:{k0}": {"r": 0}}}}
    assert c.state(p) == "waiting-children"
    assert c.pull(qp)["job"] is None
    k1 = take(c, qc, kids, [1, "x"])
    assert wait_until(lambda: c.state(p) == "waiting")
    assert c.call("GetChildrenValues", id=p)["data"]["values"] == {
        f"{qc}:{k0}": {"r": 0}, f"{qc}:{k1}": [1, "x"]}
    r = c.pull(qp)
    assert r["job"]["id"] == p and r["job"]["childrenIds"] == kids
    assert r["job"]["dependsOn"] == kids
    assert [e["state"] for e in r["job"]["timeline"]] == ["waiting-children", "waiting",
                                                          "active"]
    assert r["job"]["runAt"] == r["job"]["createdAt"]
    c.ok("ACK", id=p, result="done")
    assert c.state(p) == "completed"
    assert c.call("GetChildrenValues", id="nope") == {"ok": True, "data": {"values": {}}}


def test_values_of_children_removed_on_complete_stay_for_the_parent(bq):
    c = bq()
    qp, qc = qname("fp"), qname("fc")
    p, kids, jobs = simple_flow(qp, qc, {"removeOnComplete": True})
    c.ok("PUSHF", jobs=jobs)
    k0 = take(c, qc, kids, {"v": 1})
    k1 = take(c, qc, kids)   # no result: nil
    assert c.state(k0) == "unknown" and c.call("GetResult", id=k0)["result"] is UNDEF
    assert wait_until(lambda: c.state(p) == "waiting")
    assert c.call("GetChildrenValues", id=p) == {
        "ok": True, "data": {"values": {k0: {"v": 1}, k1: None}}}


def test_a_parent_with_a_delay_waits_for_it_after_its_children(bq):
    c = bq()
    qp, qc = qname("fp"), qname("fc")
    p, kid = fid("p"), fid("c")
    jobs = [node(kid, qc, "c", {}, (p, qp)), node(p, qp, "p", {}, children=[kid], delay=1500)]
    c.ok("PUSHF", jobs=jobs)
    assert c.state(p) == "waiting-children"
    take(c, qc, [kid])
    assert wait_until(lambda: c.state(p) == "delayed")
    g = job(c, p)
    assert [e["state"] for e in g["timeline"]] == ["waiting-children", "delayed"]
    assert g["runAt"] == g["createdAt"] + 1500
    assert c.pull(qp)["job"] is None
    r = c.pull(qp, timeout=5000)
    assert r["job"]["id"] == p


def test_nested_flow_grandparent_waits_for_the_whole_tree(bq):
    c = bq()
    q = qname("fn")
    top, mid, leaf = fid("t"), fid("m"), fid("l")
    jobs = [node(leaf, q, "leaf", {}, (mid, q)),
            node(mid, q, "mid", {}, (top, q), children=[leaf]),
            node(top, q, "top", {}, children=[mid])]
    c.ok("PUSHF", jobs=jobs)
    assert [c.state(x) for x in (leaf, mid, top)] == ["waiting", "waiting-children",
                                                      "waiting-children"]
    take(c, q, [leaf], 1)
    assert wait_until(lambda: c.state(mid) == "waiting")
    assert c.state(top) == "waiting-children"
    take(c, q, [mid], 2)
    assert wait_until(lambda: c.state(top) == "waiting")
    take(c, q, [top], 3)
    assert c.call("GetChildrenValues", id=top)["data"]["values"] == {f"{q}:{mid}": 2}


def test_pushf_empty_and_errors(bq):
    c = bq()
    q = qname("fe")
    assert c.call("PUSHF", jobs=[]) == {"ok": True, "data": {"jobs": []}}
    assert c.call("PUSHF") == err("undefined is not an object (evaluating 'cmd.jobs.map')")
    a = fid("a")
    assert c.call("PUSHF", jobs=[node(a, q, dependsOn=["zz"])]) == err(
        "flow dependency not found: zz")
    assert c.call("PUSHF", jobs=[node(a, q), node(a, q)]) == err(f"duplicate flow job id: {a}")
    assert c.call("PUSHF", jobs=[node("a:b", q)]) == err("flow job id cannot contain a colon")
    assert c.call("PUSHF", jobs=[node(a, "bad queue!")]) == err(
        "invalid flow queue: bad queue!")
    assert c.call("PUSHF", jobs=[node(a, q, data=None) | {"input": {"data": 5}}]) == err(
        "flow job data must be an object")
    assert c.call("PUSHF", jobs=[node(a, q, priority=1.5)]) == err(
        "priority must be an integer")
    assert c.call("PUSHF", jobs=[node(a, q, maxAttempts=0)]) == err(
        "attempts must be between 1 and 1000")
    assert c.call("PUSHF", jobs=[node(a, q, failParentOnFailure=True)]) == err(
        "a flow failure policy requires a parent")
    p = fid("p")
    k = fid("k")
    both = [node(k, q, parent=(p, q), failParentOnFailure=True,
                 ignoreDependencyOnFailure=True), node(p, q, children=[k])]
    assert c.call("PUSHF", jobs=both) == err("flow failure policies are mutually exclusive")
    bad_meta = [node(k, q, parent=(p, "other")), node(p, q, children=[k])]
    assert c.call("PUSHF", jobs=bad_meta) == err(
        f"flow child {k} metadata does not match parent {p}")
    cyc = [node(a, q, dependsOn=[p]), node(p, q, dependsOn=[a])]
    assert c.call("PUSHF", jobs=cyc) == err("flow contains a dependency cycle")
    assert c.count(q) == 0   # nothing of a refused flow was created
    c.ok("PUSHF", jobs=[node(a, q)])
    assert c.call("PUSHF", jobs=[node(fid(), q), node(a, q)]) == err(
        f"Flow job {a} already exists")
    assert c.count(q) == 1


# ================================================================== child failures
def _fail_for_good(c, q, ids, error="boom") -> str:
    """PULL one of `ids` from `q` with a lock and FAIL it (maxAttempts 1: for good)."""
    r = c.pull(q, owner="w")
    assert r["job"]["id"] in ids, r
    c.ok("FAIL", id=r["job"]["id"], error=error, token=r["token"])
    return r["job"]["id"]


def test_ignore_dependency_on_failure_releases_parent_and_records_error(bq):
    c = bq()
    qp, qc = qname("fp"), qname("fc")
    p, kids, jobs = simple_flow(qp, qc, {"ignoreDependencyOnFailure": True, "maxAttempts": 1})
    c.ok("PUSHF", jobs=jobs)
    assert job(c, kids[0])["ignoreDependencyOnFailure"] is True
    ok = take(c, qc, kids, 7)
    bad = _fail_for_good(c, qc, kids)
    assert wait_until(lambda: c.state(p) == "waiting")
    assert c.call("GetIgnoredChildrenFailures", id=p) == {
        "ok": True, "values": {f"{qc}:{bad}": "boom"}}
    assert c.call("GetFailedChildrenValues", id=p) == {"ok": True, "values": {}}
    r = c.pull(qp)
    assert r["job"]["id"] == p and r["job"]["dependsOn"] == [ok]
    assert r["job"]["childrenIds"] == kids


def test_fail_parent_on_failure_fails_the_parent(bq):
    c = bq()
    qp, qc = qname("fp"), qname("fc")
    p, kids, jobs = simple_flow(qp, qc, {"failParentOnFailure": True, "maxAttempts": 1}, n=1)
    c.ok("PUSHF", jobs=jobs)
    _fail_for_good(c, qc, kids, "bad input")
    assert wait_until(lambda: c.state(p) == "failed")
    msg = f"Child job {kids[0]} failed: bad input"
    g = job(c, p)
    assert g["failedReason"] is UNDEF and g["attempts"] == 0   # no failed attempt of its own
    assert c.counts(qp) == counts(failed=1)
    e = c.ok("Dlq", queue=qp)["entries"][0]
    assert e["job"]["id"] == p and e["reason"] == "unknown" and e["error"] == msg
    assert [(a["attempt"], a["reason"], a["error"]) for a in e["attempts"]] == [
        (0, "unknown", msg)]
    assert c.call("GetResult", id=p) == {"ok": True, "id": p, "result": UNDEF}


def test_continue_parent_on_failure_records_failed_child_values(bq):
    c = bq()
    qp, qc = qname("fp"), qname("fc")
    p, kids, jobs = simple_flow(qp, qc, {"continueParentOnFailure": True, "maxAttempts": 1})
    c.ok("PUSHF", jobs=jobs)
    bad = _fail_for_good(c, qc, kids, "e1")
    assert wait_until(lambda: c.state(p) == "waiting")   # the other child is not waited for
    assert c.call("GetFailedChildrenValues", id=p) == {
        "ok": True, "values": {f"{qc}:{bad}": "e1"}}
    assert c.call("GetIgnoredChildrenFailures", id=p) == {"ok": True, "values": {}}


def test_without_a_policy_the_parent_keeps_waiting(bq):
    c = bq()
    qp, qc = qname("fp"), qname("fc")
    p, kids, jobs = simple_flow(qp, qc, {"maxAttempts": 1}, n=1)
    c.ok("PUSHF", jobs=jobs)
    _fail_for_good(c, qc, kids)
    time.sleep(0.2)
    assert c.state(p) == "waiting-children"
    assert c.pull(qp)["job"] is None


def test_push_with_unmet_dependencies_keeps_its_first_timeline_entry(bq):
    c = bq()
    q = qname("fd")
    a = c.push(q, {})
    b = c.push(q, {}, dependsOn=[a])
    assert c.state(b) == "waiting-children"
    assert [e["state"] for e in job(c, b)["timeline"]] == ["waiting-children"]
    take(c, q, [a])
    assert wait_until(lambda: c.state(b) == "waiting")
    assert [e["state"] for e in job(c, b)["timeline"]] == ["waiting-children", "waiting"]
    d = c.push(q, {}, dependsOn=[a])   # met already: waiting at once
    assert [e["state"] for e in job(c, d)["timeline"]] == ["waiting"]
