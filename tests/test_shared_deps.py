"""bunqueue job dependencies made outside a flow, across nodes (issue 19; docs/scaling.md
"Dependencies outside a flow"): a PUSH or PUSHB with `dependsOn` on one node waits for jobs
put, held or completed on another node, and a PUSH with a parent (Queue.add's `parent`
option: `parentId` and `__parentId` / `__parentQueue` in its data) makes a parent waiting in
the database wait for the new child, which any node's worker may complete. Real node
processes on one fresh PostgreSQL database, real bunqueue sockets.

Needs JOBGATE_TEST_PG_URL (skipped with a clear reason without it).
"""
from __future__ import annotations

import os
import signal
import time

import msgpack

from .bunqueue_support import BQ, wait_until
from .shared_support import restricted_nodes, rows


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


# ------------------------------------------------------------- from the review of 7e0cd6b
def test_a_new_job_id_and_a_dependency_waiting_in_the_database(nodes):
    """A PUSH with a new jobId and a dependency waiting in the database: the custom id is
    looked up first, the dependency taken in last, so no commit gives it back before the
    push runs (it was refused as not found, every time)."""
    a, b = nodes(2)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    for i in range(10):
        d = qa.push("dq", {"i": i})
        assert qb.ok("PUSH", queue="jq", data={"i": i}, dependsOn=[d], jobId=f"j-{i}")["id"] \
            == f"j-{i}"
        p = qa.push("pq", {"p": i})
        r = _push_child(qb, "cq", p, "pq", jobId=f"child-{i}")
        assert r == {"ok": True, "id": f"child-{i}"}, r
        assert _state(qa, p) == "waiting-children"


def test_a_dependency_in_the_database_and_one_held_elsewhere(nodes):
    """dependsOn [d1 waiting in the database, d2 active on a]: both count (d2 located, d1
    taken in), and j waits for both."""
    a, b = nodes(2)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    for i in range(5):
        d2 = qa.push("dq2", {"i": i})
        assert _pulled(qa, "dq2") == d2
        d1 = qa.push("dq1", {"i": i})
        j = qb.ok("PUSH", queue="jq", data={"i": i}, dependsOn=[d1, d2])["id"]
        qa.ok("ACK", id=d2)
        assert _pulled(qa, "dq1") == d1
        assert _state(qb, j) == "waiting-children"
        qa.ok("ACK", id=d1)
        assert wait_until(lambda: _state(qb, j) == "waiting", timeout=5), i
        assert _pulled(qb, "jq") == j


def test_a_pushb_sent_again_on_another_node(nodes):
    """A batch [{x}, {jobId c-1}, {y, dependsOn [c-1]}] whose c-1 exists already (pushed on
    a): answered ok with three ids, c-1 the existing one, as a single server does (it was an
    error after half the batch)."""
    a, b = nodes(2)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    assert qa.ok("PUSH", queue="jq", data={}, jobId="c-1")["id"] == "c-1"
    r = qb.ok("PUSHB", queue="jq", jobs=[{"name": "x", "data": {"x": 1}},
                                          {"name": "c", "data": {}, "jobId": "c-1"},
                                          {"name": "y", "data": {}, "dependsOn": ["c-1"]}])
    assert len(r["ids"]) == 3 and r["ids"][1] == "c-1"
    assert rows(nodes.url, "SELECT count(*) FROM jobs WHERE queue = 'jq'")[0][0] == 3


def test_a_dependency_failed_and_removed_releases_nothing(nodes):
    """d is active on a with removeOnFail and one attempt; j is pushed on b and d fails at
    once, before or after the wait reaches a: j keeps waiting, as on a single server (a
    failed dependency is never met; it was released as if d had completed)."""
    a, b = nodes(2)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    js = []
    for i in range(10):
        d = qa.push("dq", {"i": i}, removeOnFail=True, maxAttempts=1)
        assert _pulled(qa, "dq") == d
        js.append(qb.ok("PUSH", queue="jq", data={"i": i}, dependsOn=[d])["id"])
        qa.ok("FAIL", id=d, error="boom")
    time.sleep(2)
    assert [j for j in js if _state(qb, j) != "waiting-children"] == []


def test_a_restricted_client_cannot_wait_on_other_queues_jobs(pg_url, tmp_path):
    """A client allowed queue `mine` only names jobs of queue `theirs` (waiting in the
    database, active on another node, completed) as dependencies or as a parent: answered as
    missing, and the waiting job of `theirs` is not left held by its node."""
    a, b = restricted_nodes(pg_url, tmp_path)
    try:
        qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
        assert qa.call("Auth", token="all")["ok"] is True
        assert qb.call("Auth", token="t")["ok"] is True
        done = qa.push("theirs", {})
        active = qa.push("theirs", {})
        assert _pulled(qa, "theirs") == done
        qa.ok("ACK", id=done)
        assert _pulled(qa, "theirs") == active
        waiting = qa.push("theirs", {})
        for d in (waiting, active, done):
            assert qb.call("PUSH", queue="mine", data={}, dependsOn=[d]) == \
                {"ok": False, "error": f"Dependency job not found: {d}"}, d
            r = qb.call("PUSHB", queue="mine", jobs=[{"name": "x", "data": {},
                                                      "dependsOn": [d]}])
            assert r == {"ok": False, "error": f"jobs[0]: Dependency job not found: {d}"}, d
        for p in (waiting, active):
            assert _push_child(qb, "mine", p, "theirs") == \
                {"ok": False, "error": f"Parent job not found: {p}"}, p
        assert wait_until(lambda: rows(pg_url, "SELECT node FROM jobs WHERE uid = %s",
                                       (waiting,))[0][0] is None, timeout=3)
    finally:
        a.stop()
        b.stop()


def test_flow_jobs_and_a_beanstalk_job_as_dependencies(nodes):
    """j on b waits for a flow child active on c and j2 for the flow's parent waiting in the
    database; k waits for a beanstalk job reserved on a, named twice by its derived uid. The
    child's ACK, the parent's ACK and the beanstalk delete release them, on any node."""
    from core.model import derived_uid

    from .shared_support import bean
    from .test_bunqueue_flows import simple_flow
    a, b, c = nodes(3)
    qa, qb, qc = BQ(a.bunqueue_port), BQ(b.bunqueue_port), BQ(c.bunqueue_port)
    p, _, jobs = simple_flow("rfp", "rfc")
    qa.ok("PUSHF", jobs=jobs)
    first = _pulled(qc, "rfc")
    j = qb.ok("PUSH", queue="jq", data={}, dependsOn=[first])["id"]
    j2 = qb.ok("PUSH", queue="jq", data={}, dependsOn=[p])["id"]
    assert _state(qb, j) == _state(qb, j2) == "waiting-children"
    qc.ok("ACK", id=first, result=1)
    assert wait_until(lambda: _state(qa, j) == "waiting", timeout=5)
    qc.ok("ACK", id=_pulled(qc, "rfc"), result=2)
    assert wait_until(lambda: _state(qa, p) == "waiting", timeout=5)
    assert _state(qb, j2) == "waiting-children"
    assert _pulled(qa, "rfp") == p
    qa.ok("ACK", id=p)
    assert wait_until(lambda: _state(qb, j2) == "waiting", timeout=5)
    ba = bean(a, "bt")
    bid = ba.put(b"x")
    held = ba.reserve(timeout=3)
    k = qb.ok("PUSH", queue="kq", data={}, dependsOn=[derived_uid(bid), derived_uid(bid)])["id"]
    assert _state(qb, k) == "waiting-children"
    ba.delete(held)
    assert wait_until(lambda: _state(qc, k) == "waiting", timeout=5)


def test_a_retried_dependency_and_a_stopped_holder(nodes):
    """d active on a fails (retried) right after j's push on b, then completes on c: j is
    released (five times). d2 active on a, whose node then stops: its reservation comes back
    at its deadline, it completes on c, and j2 is released."""
    a, b, c = nodes(3)
    qa, qb, qc = BQ(a.bunqueue_port), BQ(b.bunqueue_port), BQ(c.bunqueue_port)
    for i in range(5):
        d = qa.push("dq", {"i": i}, maxAttempts=5)
        assert _pulled(qa, "dq") == d
        j = qb.ok("PUSH", queue="jq", data={"i": i}, dependsOn=[d])["id"]
        qa.ok("FAIL", id=d, error="again")
        got = qc.ok("PULL", queue="dq", timeout=5000)["job"]
        assert got is not None and got["id"] == d, i
        qc.ok("ACK", id=d)
        assert wait_until(lambda: _state(qb, j) == "waiting", timeout=5), i
        assert _pulled(qb, "jq") == j
    d2 = qa.push("dq2", {}, timeout=1500)
    assert _pulled(qa, "dq2") == d2
    j2 = qb.ok("PUSH", queue="jq2", data={}, dependsOn=[d2])["id"]
    assert wait_until(lambda: j2 in _waiters(nodes.url, d2), timeout=5)
    a.stop()
    got = qc.ok("PULL", queue="dq2", timeout=15000)["job"]
    assert got is not None and got["id"] == d2
    qc.ok("ACK", id=d2)
    assert wait_until(lambda: _state(qb, j2) == "waiting", timeout=5)


def test_a_custom_id_used_again_is_not_taken_for_its_completed_namesake(nodes):
    """Job "c-1" completes on b, removed (b remembers it completed); a new "c-1" is then
    active on a when j (on b) is pushed depending on it, and a stops answering (SIGSTOP, then
    killed) before b's wait note reaches it. The new c-1 comes back at its lock deadline and
    is cancelled: gone without completing. b's retried note finds no row, and b's memory of
    the old c-1 (kept by job id) does not release j (it did, by uid: review of 52bbecc)."""
    b, c, a = nodes(3)          # a is not the leader (the first node takes the lock)
    qa, qb, qc = BQ(a.bunqueue_port), BQ(b.bunqueue_port), BQ(c.bunqueue_port)
    assert qb.push("dq", {"old": 1}, jobId="c-1", removeOnComplete=True) == "c-1"
    assert _pulled(qb, "dq") == "c-1"
    qb.ok("ACK", id="c-1")
    assert qa.push("dq", {"new": 1}, jobId="c-1", timeout=1500) == "c-1"
    assert _pulled(qa, "dq") == "c-1"
    os.kill(a.proc.pid, signal.SIGSTOP)
    try:
        j = qb.ok("PUSH", queue="jq", data={}, dependsOn=["c-1"])["id"]
        assert _state(qb, j) == "waiting-children"
        time.sleep(0.5)
    finally:
        a.kill()
    assert wait_until(lambda: rows(nodes.url, "SELECT node, state FROM jobs WHERE uid = "
                                              "'c-1'") == [(None, "ready")], timeout=20)
    assert qc.call("Cancel", id="c-1")["ok"] is True
    # b's note: no answer from a within 5 s (CALL_MS), tried again 1 s later where the row
    # is (none): concluded about 7 s after the push
    time.sleep(10)
    assert _state(qb, j) == "waiting-children"


def test_a_push_naming_many_dependencies_leaves_the_node_serving(nodes):
    """A PUSH whose dependsOn names 100,000 ids (none exists) is answered `Dependency job not
    found` as on a single server, and another client's Ping sent meanwhile is answered within
    a few seconds (the ids were checked for repeats against a list: quadratic, the event loop
    stalled for tens of seconds; review of 300e76a)."""
    a, = nodes(1)
    big, other = BQ(a.bunqueue_port, timeout=120), BQ(a.bunqueue_port, timeout=120)
    other.ok("Ping")
    big.send({"cmd": "PUSH", "queue": "q", "data": {},
              "dependsOn": [f"missing-{i}" for i in range(100_000)], "reqId": "big"})
    time.sleep(0.3)   # the frame is in
    t = time.monotonic()
    other.ok("Ping")
    waited = time.monotonic() - t
    r = big.recv_reply("big")
    assert (r["ok"], r["error"]) == (False, "Dependency job not found: missing-0")
    assert waited < 5, f"Ping waited {waited:.1f} s behind the PUSH"


def test_depends_on_given_as_a_string(nodes):
    """A single server iterates a dependsOn that is not a list (a string: its characters), so
    dependsOn="x" waits for job "x": so does a node whose job x is on another node (it was
    'not found'; review of 300e76a)."""
    a, b = nodes(2)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    assert qa.push("dq", {}, jobId="x") == "x"
    j = qb.ok("PUSH", queue="jq", data={}, dependsOn="x")["id"]
    assert _state(qb, j) == "waiting-children"
    assert _pulled(qa, "dq") == "x"
    qa.ok("ACK", id="x")
    assert wait_until(lambda: _state(qb, j) == "waiting", timeout=5)


def test_a_dependency_finished_before_the_wait_note_arrives(nodes):
    """k on b waits for a job held on a that finishes right after k's push: a beanstalk job
    its worker deletes (it has no extras), and, beside it, a bunqueue job its worker ACKs
    (its ACK gives it extras: it was remembered before too). a can get the "wait" note after
    the job finished; it must know the job finished there lately and answer "done" (before,
    only jobs with extras were remembered: the beanstalk job's k waited for ever; CI caught
    it once in test_flow_jobs_and_a_beanstalk_job_as_dependencies). Ten rounds of each, the
    finish sent as soon as the push is answered."""
    from core.model import derived_uid

    from .shared_support import bean
    a, b = nodes(2)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    ba = bean(a, "late")
    waiting = []
    for i in range(10):
        bid = ba.put(b"x")
        held = ba.reserve(timeout=3)
        waiting.append(qb.ok("PUSH", queue="lk", data={}, dependsOn=[derived_uid(bid)])["id"])
        ba.delete(held)
        qa.push("lq", {"i": i})
        got = qa.pull("lq", timeout=3000)["job"]["id"]
        waiting.append(qb.ok("PUSH", queue="lk", data={}, dependsOn=[got])["id"])
        qa.ok("ACK", id=got)
    assert wait_until(lambda: all(_state(qb, k) == "waiting" for k in waiting), timeout=15), \
        [(k, _state(qb, k)) for k in waiting]
