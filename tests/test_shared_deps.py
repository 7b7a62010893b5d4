"""bunqueue job dependencies made outside a flow, across nodes (issue 19; docs/scaling.md
"Dependencies outside a flow"): a PUSH or PUSHB with `dependsOn` on one node waits for jobs
put, held or completed on another node, and a PUSH with a parent (Queue.add's `parent`
option: `parentId` and `__parentId` / `__parentQueue` in its data) makes a parent waiting in
the database wait for the new child, which any node's worker may complete. Real node
processes on one fresh PostgreSQL database, real bunqueue sockets.

Needs JOBGATE_TEST_PG_URL (skipped with a clear reason without it).
"""
from __future__ import annotations

import msgpack

from .bunqueue_support import BQ, wait_until
from .shared_support import rows


def _waiters(url: str, uid: str) -> list:
    """The ``waiters`` extra of job `uid`'s row (the jobs other nodes told it wait for it)."""
    r = rows(url, "SELECT extras FROM jobs WHERE uid = %s", (uid,))
    if not r or r[0][0] is None:
        return []
    return msgpack.unpackb(bytes(r[0][0]), raw=False).get("waiters") or []


def _state(q: BQ, id: str) -> str:
    return q.ok("GetState", id=id)["state"]


def _pulled(q: BQ, queue: str) -> str | None:
    """PULL `queue` waiting up to 3 s; the job's id or None."""
    r = q.ok("PULL", queue=queue, timeout=3000)
    return r["job"]["id"] if r.get("job") else None


def test_depends_on_a_job_waiting_in_the_database(nodes):
    """d is put on a (a row no node holds once a committed it); j on b waits for it, on every
    node; d completed by a worker on a releases j, which a worker on b then gets."""
    a, b = nodes(2)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    d = qa.push("dq", {"d": 1})
    j = qb.ok("PUSH", queue="jq", data={"j": 1}, dependsOn=[d])["id"]
    assert _state(qa, j) == _state(qb, j) == "waiting-children"
    assert qb.ok("PULL", queue="jq")["job"] is None   # not before d completes
    assert _pulled(qa, "dq") == d
    qa.ok("ACK", id=d, result="done")
    assert wait_until(lambda: _state(qb, j) == "waiting", timeout=5)
    assert _pulled(qb, "jq") == j


def test_depends_on_a_job_another_node_holds(nodes):
    """d is active on a (its worker holds it) when j is pushed on b: j waits; a's ACK of d
    (after the wait reached a) releases it, and a worker on b gets j."""
    a, b = nodes(2)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    d = qa.push("dq", {"d": 1})
    assert _pulled(qa, "dq") == d
    j = qb.ok("PUSH", queue="jq", data={}, dependsOn=[d])["id"]
    assert _state(qb, j) == "waiting-children"
    # the wait is delivered to a after b's commit: d's row, as a stores it, names j
    assert wait_until(lambda: j in _waiters(nodes.url, d), timeout=5)
    qa.ok("ACK", id=d)
    assert wait_until(lambda: _state(qb, j) == "waiting", timeout=5)
    assert _pulled(qb, "jq") == j


def test_a_dependency_acked_at_once_still_releases(nodes):
    """d is active on a and removed on completion; j is pushed on b and d is ACKed on a right
    away, before or after the wait reaches a (either order): j is released."""
    a, b = nodes(2)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    for i in range(5):
        d = qa.push("dq", {"i": i}, removeOnComplete=True)
        assert _pulled(qa, "dq") == d
        j = qb.ok("PUSH", queue="jq", data={"i": i}, dependsOn=[d])["id"]
        qa.ok("ACK", id=d)
        assert wait_until(lambda: _state(qb, j) == "waiting", timeout=5), i
        assert _pulled(qb, "jq") == j


def test_a_completed_or_missing_dependency(nodes):
    """A dependency completed on another node is met at once; one no node has is the single
    server's error."""
    a, b = nodes(2)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    d = qa.push("dq", {})
    assert _pulled(qa, "dq") == d
    qa.ok("ACK", id=d)
    j = qb.ok("PUSH", queue="jq", data={}, dependsOn=[d])["id"]
    assert _state(qb, j) == "waiting"
    assert qb.call("PUSH", queue="jq", data={}, dependsOn=["nope"]) == \
        {"ok": False, "error": "Dependency job not found: nope"}


def test_pushb_with_dependencies_on_two_nodes(nodes):
    """A PUSHB on c whose jobs wait for jobs of a and b: each is released when its own
    dependencies complete, on whichever node."""
    a, b, c = nodes(3)
    qa, qb, qc = BQ(a.bunqueue_port), BQ(b.bunqueue_port), BQ(c.bunqueue_port)
    da = qa.push("dq", {"n": "a"})
    db = qb.push("dq2", {"n": "b"})
    r = qc.ok("PUSHB", queue="jq", jobs=[{"name": "x", "data": {}, "dependsOn": [da]},
                                         {"name": "y", "data": {}, "dependsOn": [da, db]}])
    x, y = r["ids"]
    assert _pulled(qa, "dq") == da
    qa.ok("ACK", id=da)
    assert wait_until(lambda: _state(qc, x) == "waiting", timeout=5)
    assert _state(qc, y) == "waiting-children"
    assert _pulled(qb, "dq2") == db
    qb.ok("ACK", id=db)
    assert wait_until(lambda: _state(qa, y) == "waiting", timeout=5)


def _push_child(q: BQ, queue: str, parent: str, parent_queue: str, **opts) -> dict:
    return q.call("PUSH", queue=queue, data={"c": 1, "__parentId": parent,
                                             "__parentQueue": parent_queue},
                  parentId=parent, **opts)


def test_a_child_added_on_another_node_holds_its_parent_back(nodes):
    """The parent p is put on a; a child is added to it on b (Queue.add with `parent`): p
    waits for it on every node; a worker on a completes the child, p is released and reads
    the child's value."""
    a, b = nodes(2)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    p = qa.push("pq", {"p": 1})
    r = _push_child(qb, "cq", p, "pq")
    assert r["ok"] is True, r
    child = r["id"]
    assert wait_until(lambda: _state(qa, p) == "waiting-children", timeout=5)
    assert qa.ok("PULL", queue="pq")["job"] is None
    assert _pulled(qa, "cq") == child
    qa.ok("ACK", id=child, result={"v": 7})
    assert wait_until(lambda: _state(qb, p) == "waiting", timeout=5)
    assert _pulled(qb, "pq") == p
    vals = qb.ok("GetChildrenValues", id=p)["data"]["values"]
    assert vals == {f"cq:{child}": {"v": 7}}


def test_a_parent_active_on_another_node_is_not_linkable(nodes):
    a, b = nodes(2)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    p = qa.push("pq", {})
    assert _pulled(qa, "pq") == p
    assert _push_child(qb, "cq", p, "pq") == \
        {"ok": False, "error": f"Parent job {p} is not linkable"}
    assert _push_child(qb, "cq", "nope", "pq") == \
        {"ok": False, "error": "Parent job not found: nope"}
