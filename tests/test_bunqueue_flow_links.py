"""bunqueue flow links over a real socket: UpdateParent, RemoveChildDependency,
RemoveUnprocessedChildren, MoveToWaitingChildren, PUSH / PUSHB with a parent (Queue.add's
`parent` option), and hostile flow commands.

Replies as the real bunqueue 2.9.5 server gives them (JOBGATE_BQ_REFERENCE=1 checks this file
against it); jobgate's choices in docs/bunqueue.md "Flows (issue 16)". Helpers and PUSHF
tests: tests/test_bunqueue_flows.py.
"""
from __future__ import annotations

from .bunqueue_support import OK, err, job, jobgate_only, qname, wait_until
from .test_bunqueue_flows import fid, simple_flow, take


# ==================================================================== link commands
def test_update_parent_links_a_job_and_the_parent_waits_for_it(bq):
    c = bq()
    q = qname("fu")
    parent = c.push(q, {"p": 1})
    child = c.push(q, {"c": 1})
    assert c.call("UpdateParent", childId=child, parentId=parent) == OK
    assert c.state(parent) == "waiting-children"
    g = job(c, parent)
    assert g["childrenIds"] == [child] and g["dependsOn"] == [child]
    assert g["data"] == {"p": 1, "__childrenIds": [child]}
    assert [e["state"] for e in g["timeline"]] == ["waiting", "waiting-children"]
    k = job(c, child)
    assert k["parentId"] == parent and k["data"] == {"c": 1, "__parentId": parent,
                                                     "__parentQueue": q}
    take(c, q, [child], "v")
    assert wait_until(lambda: c.state(parent) == "waiting")
    assert c.call("GetChildrenValues", id=parent)["data"]["values"] == {f"{q}:{child}": "v"}


def test_update_parent_errors(bq):
    c = bq()
    q = qname("fu")
    a = c.push(q, {})
    assert c.call("UpdateParent", childId=a, parentId=a) == err(
        "A flow job cannot be its own parent")
    assert c.call("UpdateParent", childId="nope", parentId=a) == err(
        "Child job not found: nope")
    assert c.call("UpdateParent", childId=a, parentId="nope") == err(
        "Parent job not found: nope")
    b = c.push(q, {})
    d = c.push(q, {})
    c.ok("UpdateParent", childId=a, parentId=b)
    assert c.call("UpdateParent", childId=a, parentId=d) == err(
        f"Child job {a} already belongs to parent {b}")
    q2 = qname("fu")
    active = c.push(q2, {})
    assert c.pull(q2)["job"]["id"] == active
    x = c.push(q2, {})
    assert c.call("UpdateParent", childId=x, parentId=active) == err(
        f"Parent job {active} is not linkable")


def test_remove_child_dependency(bq):
    c = bq()
    qp, qc = qname("fp"), qname("fc")
    p, kids, jobs = simple_flow(qp, qc)
    c.ok("PUSHF", jobs=jobs)
    assert c.call("RemoveChildDependency", id="nope") == err("Job not found: nope")
    assert c.call("RemoveChildDependency", id=p) == err(f"Job {p} has no parent")
    assert c.call("RemoveChildDependency", id=kids[0]) == {"ok": True, "removed": True}
    k = job(c, kids[0])
    assert k["parentId"] is None and k["data"] == {"i": 0}
    g = job(c, p)
    assert g["childrenIds"] == [kids[1]] and g["dependsOn"] == [kids[1]]
    assert g["data"] == {"top": True, "__childrenIds": [kids[1]]}
    assert g["state"] == "waiting-children"
    assert c.call("RemoveChildDependency", id=kids[1]) == {"ok": True, "removed": True}
    assert wait_until(lambda: c.state(p) == "waiting")
    g = job(c, p)
    assert g["childrenIds"] == [] and g["dependsOn"] == [] and g["data"] == {"top": True}
    assert c.call("RemoveChildDependency", id=kids[1]) == err(f"Job {kids[1]} has no parent")


def test_remove_unprocessed_children(bq):
    c = bq()
    qp, qc = qname("fp"), qname("fc")
    p, kids, jobs = simple_flow(qp, qc, n=3)
    c.ok("PUSHF", jobs=jobs)
    active = c.pull(qc)["job"]["id"]   # an active child stays
    assert c.call("RemoveUnprocessedChildren", id=p) == OK
    assert c.state(active) == "active"
    assert sorted(c.state(k) for k in kids) == ["active", "unknown", "unknown"]
    assert c.call("RemoveUnprocessedChildren", id="nope") == OK


def test_move_to_waiting_children_errors(bq):
    c = bq()
    q = qname("fm")
    assert c.call("MoveToWaitingChildren", id="nope") == err("Job is not active")
    a = c.push(q, {})
    assert c.call("MoveToWaitingChildren", id=a) == err("Job is not active")
    r = c.pull(q, owner="w")
    assert c.call("MoveToWaitingChildren", id=a, token="bad") == err(
        f"Invalid or expired lock token for job {a}")
    assert c.call("MoveToWaitingChildren", id=a, token=r["token"]) == {
        "ok": True, "data": {"moved": True}}
    g = job(c, a)
    assert [e["state"] for e in g["timeline"]][:3] == ["waiting", "active", "waiting-children"]
    assert g["startedAt"] is None


@jobgate_only("a job that waits for nothing is waiting again at once (the reference parks "
              "it in waiting-children for good)")
def test_move_to_waiting_children_without_children_is_waiting_again(bq):
    c = bq()
    q = qname("fm")
    a = c.push(q, {})
    r = c.pull(q, owner="w")
    c.ok("MoveToWaitingChildren", id=a, token=r["token"])
    assert c.state(a) == "waiting"
    assert c.pull(q)["job"]["id"] == a


# ============================================================ PUSH with a parent
def test_push_with_a_parent_links_the_new_child(bq):
    """Queue.add(name, data, {parent: {id, queue}}): PUSHB with parentId and the link in the
    data (client queue/operations/add/payload.js)."""
    c = bq()
    qp, qc = qname("fp"), qname("fc")
    parent = c.push(qp, {"p": 1})
    r = c.ok("PUSHB", queue=qc, jobs=[{"name": "kid", "data": {"k": 1, "__parentId": parent,
                                                             "__parentQueue": qp},
                                       "parentId": parent, "failParentOnFailure": True}])
    kid = r["ids"][0]
    assert c.state(parent) == "waiting-children"
    g = job(c, parent)
    assert g["childrenIds"] == [kid] and g["dependsOn"] == [kid]
    assert g["data"] == {"p": 1, "__childrenIds": [kid]}
    assert [e["state"] for e in g["timeline"]] == ["waiting", "waiting-children"]
    k = job(c, kid)
    assert k["parentId"] == parent and k["failParentOnFailure"] is True
    take(c, qc, [kid], "v")
    assert wait_until(lambda: c.state(parent) == "waiting")
    assert c.call("GetChildrenValues", id=parent)["data"]["values"] == {f"{qc}:{kid}": "v"}


def test_push_with_a_parent_errors(bq):
    c = bq()
    qp, qc = qname("fp"), qname("fc")
    parent = c.push(qp, {})

    def add(pid, pq, **kw):
        return c.call("PUSH", queue=qc, data={"__parentId": pid, "__parentQueue": pq},
                      parentId=pid, **kw)
    assert add("nope", qp) == err("Parent job not found: nope")
    assert add(parent, "other") == err(f"Parent job {parent} belongs to queue {qp}, not other")
    me = fid("me")
    assert add(me, qp, jobId=me) == err("A job cannot be its own parent")
    assert c.pull(qp)["job"]["id"] == parent
    assert add(parent, qp) == err(f"Parent job {parent} is not linkable")
    assert c.count(qc) == 0


@jobgate_only("the reference answers these with JavaScript TypeError texts")
def test_hostile_flow_commands_get_an_error_and_the_connection_stays(bq):
    c = bq()
    q = qname("fh")
    for jobs in ("x", 5, {"a": 1}, [5], [None], [{"id": "a"}], [{"id": "a", "input": 3}],
                 [{"id": 5, "queue": q, "input": {"data": {}}}],
                 [{"id": "a", "queue": q, "input": {"data": {}, "name": 7}}],
                 [{"id": "a", "queue": q, "input": {"data": {}, "dependsOn": [1]}}],
                 [{"id": "a", "queue": q, "input": {"data": {}, "parentId": 3}}],
                 [{"id": "a", "queue": q, "input": {"data": {}, "priority": 2 ** 40}}],
                 [{"id": "a", "queue": q, "input": {"data": {}, "backoff": {"type": "x"}}}],
                 [{"id": "a", "queue": q, "input": {"data": {}, "lifo": "yes"}}],
                 [{"id": "a", "queue": q, "input": {"data": {}, "tags": [1]}}],
                 [{"id": "a", "queue": q, "input": {"data": {}, "uniqueKey": "k"}}]):
        r = c.call("PUSHF", jobs=jobs)
        assert r["ok"] is False and isinstance(r["error"], str), (jobs, r)
    for cmd, fields in (("UpdateParent", {"childId": {"x": 1}, "parentId": [1]}),
                        ("RemoveChildDependency", {}), ("GetChildrenValues", {"id": None}),
                        ("GetFailedChildrenValues", {"id": 3}),
                        ("RemoveUnprocessedChildren", {"id": [1]}),
                        ("MoveToWaitingChildren", {"id": b"x", "token": 5})):
        r = c.call(cmd, **fields)
        assert isinstance(r, dict) and "ok" in r, (cmd, r)
    assert c.call("RemoveChildDependency") == err("Job not found: undefined")
    assert c.count(q) == 0
    assert c.call("Ping")["ok"] is True


def test_link_errors_write_ids_as_javascript_does(bq):
    c = bq()
    assert c.call("UpdateParent", childId={"x": 1}, parentId=[1]) == err(
        "Child job not found: [object Object]")
    assert c.call("RemoveChildDependency") == err("Job not found: undefined")
