"""bunqueue flows across nodes in shared mode (issue 19; docs/scaling.md "Flows across nodes",
core/shared_flows.py): a PUSHF made on one node, its children pulled and finished on others;
the parent is served only after its last child completed, wherever; a child deleted over
beanstalk by the worker that reserved it counts as completed; a child's final failure acts on
its parent by its policy; the parent reads its children's values from any node; flow ids are
unique across nodes; and the leader's sweep releases a parent whose note was lost. Real node
processes on one fresh PostgreSQL database, real bunqueue and beanstalk sockets.

Needs JOBGATE_TEST_PG_URL (skipped with a clear reason without it).
"""
from __future__ import annotations

import time

import greenstalk
import pytest

from .bunqueue_support import BQ
from .shared_support import bean, metric, rows
from .test_bunqueue_flows import node, simple_flow


def _until(fn, seconds: float = 15.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(0.05)
    return fn()


def test_parent_waits_for_children_finished_on_other_nodes(nodes):
    """PUSHF on a; each child pulled and acknowledged on another node: the parent is not
    served before the last one, then any node serves it; its children's values read the same
    on every node; a second PUSHF with the same ids, on another node, is refused."""
    a, b, c = nodes(3, flow_sweep_ms=0, http=True)   # no sweep: the notes alone
    qa, qb, qc = BQ(a.bunqueue_port), BQ(b.bunqueue_port), BQ(c.bunqueue_port)
    p, kids, jobs = simple_flow("sfp", "sfc")
    qa.ok("PUSHF", jobs=jobs)
    assert qb.call("PUSHF", jobs=jobs) == {"ok": False,
                                          "error": f"Flow job {kids[0]} already exists"}
    # the parent waits in the database: every node shows it waiting for children
    counts = qc.ok("GetJobCounts", queue="sfp")["counts"]
    assert (counts["waiting-children"], counts["delayed"]) == (1, 0)
    assert qc.ok("Count", queue="sfp")["count"] == 0
    assert [j["id"] for j in qc.ok("GetJobs", queue="sfp", state="waiting-children")["jobs"]] \
        == [p]
    assert qc.ok("GetJobs", queue="sfp", state="delayed")["jobs"] == []
    first = qb.pull("sfc", timeout=2000)["job"]
    assert first["id"] in kids
    qb.ok("ACK", id=first["id"], result={"r": 1})
    assert qc.state(p) == "waiting-children"
    assert qa.pull("sfp", timeout=300)["job"] is None
    second = qc.pull("sfc", timeout=2000)["job"]
    assert second["id"] in kids and second["id"] != first["id"]
    qc.ok("ACK", id=second["id"], result=[2])
    got = qb.pull("sfp", timeout=5000)["job"]
    assert got is not None and got["id"] == p and got["data"]["top"] is True
    want = {f"sfc:{first['id']}": {"r": 1}, f"sfc:{second['id']}": [2]}
    for q in (qa, qb, qc):
        assert q.call("GetChildrenValues", id=p) == {"ok": True, "data": {"values": want}}
    qb.ok("ACK", id=p, result="done")
    assert rows(nodes.url, "SELECT state FROM jobs WHERE uid = %s", (p,)) == [("completed",)]
    # the two children's notes, counted where they were applied and, once the holder's
    # answer came back (a forwarded note), where they went
    assert sum(metric(n, "jobgate_shared_flow_notes_applied_total") for n in (a, b, c)) == 2
    assert _until(lambda: sum(metric(n, "jobgate_shared_flow_notes_sent_total")
                              for n in (b, c)) == 2)


def test_beanstalk_delete_of_a_child_on_another_node_releases_the_parent(nodes):
    """The children of a bunqueue flow reserved and deleted over beanstalk on b (beanstalk's
    success): the parent becomes ready and a beanstalk worker on a reserves it."""
    a, b = nodes(2, flow_sweep_ms=0)
    qa = BQ(a.bunqueue_port)
    p, kids, jobs = simple_flow("bfp", "bfc")
    qa.ok("PUSHF", jobs=jobs)
    (pid,), = rows(nodes.url, "SELECT id FROM jobs WHERE uid = %s", (p,))
    kicker = bean(b, "bfp")   # a parked parent is not kicked, as on one server
    assert kicker.kick(10) == 0
    with pytest.raises(greenstalk.NotFoundError):
        kicker.kick_job(pid)
    wb = bean(b, "bfc")
    for _ in kids:
        j = wb.reserve(timeout=5)
        wb.delete(j)
    wa = bean(a, "bfp")
    j = wa.reserve(timeout=10)
    assert b'"top"' in j.body or b"top" in j.body
    assert qa.state(p) == "active"


def test_failed_child_on_another_node_fails_its_parent(nodes):
    """A child with failParentOnFailure fails for good (maxAttempts 1) on b: the parent, in
    the database, fails too with the reference's error; the sibling's completion then changes
    nothing."""
    a, b = nodes(2, flow_sweep_ms=0)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    p, kids, jobs = simple_flow("ffp", "ffc", {"failParentOnFailure": True, "maxAttempts": 1})
    qa.ok("PUSHF", jobs=jobs)
    j = qb.pull("ffc", timeout=2000)["job"]
    qb.ok("FAIL", id=j["id"], error="boom")
    assert _until(lambda: qa.state(p) == "failed")
    msg = f"Child job {j['id']} failed: boom".encode()
    assert _until(lambda: rows(nodes.url, "SELECT state, result FROM jobs WHERE uid = %s",
                               (p,)) == [("buried", msg)])
    other = qa.pull("ffc", timeout=2000)["job"]
    qa.ok("ACK", id=other["id"])
    assert qa.pull("ffp", timeout=300)["job"] is None
    assert qb.state(p) == "failed"


def test_nested_flow_spread_over_nodes(nodes):
    """A grandparent waits for a parent that waits for two children: children acknowledged on
    b and c, the parent then served and acknowledged on a, and only then the grandparent."""
    a, b, c = nodes(3, flow_sweep_ms=0)
    qa, qb, qc = BQ(a.bunqueue_port), BQ(b.bunqueue_port), BQ(c.bunqueue_port)
    g, p, k1, k2 = "nest-g", "nest-p", "nest-k1", "nest-k2"
    jobs = [node(k1, "nk", "k1", {"i": 1}, (p, "np")), node(k2, "nk", "k2", {"i": 2}, (p, "np")),
            node(p, "np", "p", {"mid": True}, (g, "ng"), children=[k1, k2]),
            node(g, "ng", "g", {"top": True}, children=[p])]
    qb.ok("PUSHF", jobs=jobs)
    for q in (qb, qc):
        j = q.pull("nk", timeout=2000)["job"]
        q.ok("ACK", id=j["id"])
    assert qc.pull("ng", timeout=300)["job"] is None
    mid = qa.pull("np", timeout=5000)["job"]
    assert mid is not None and mid["id"] == p
    qa.ok("ACK", id=p)
    top = qc.pull("ng", timeout=5000)["job"]
    assert top is not None and top["id"] == g


def test_leader_sweep_releases_a_parent_whose_note_was_lost(nodes):
    """A child completed in the database without its node telling the parent (as when the
    node dies between its commit and the note): within a few seconds the leader's sweep
    releases the parent."""
    a, b = nodes(2, flow_sweep_ms=200)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    p, kids, jobs = simple_flow("swp", "swc", n=1)
    qa.ok("PUSHF", jobs=jobs)
    assert qa.pull("swp", timeout=300)["job"] is None
    # what a lost note leaves behind: the child's row completed, the parent still parked
    rows(nodes.url, "UPDATE jobs SET state = 'completed', result = %s, result_ok = 1, "
                    "node = NULL WHERE uid = %s RETURNING id", (b"\xc0", kids[0]), commit=True)
    got = qb.pull("swp", timeout=10000)["job"]
    assert got is not None and got["id"] == p


def test_leader_sweep_applies_a_lost_failure_note(nodes):
    """A child with failParentOnFailure failed for good in the database without its node
    telling the parent (the node died between its commit and the note): the leader's sweep
    fails the parent with the reference's error, as the note would have (the sweep repaired
    lost `done` notes only). A child buried without a result (a beanstalk bury, not a
    failure), swept in the same round, changes nothing."""
    a, b = nodes(2, flow_sweep_ms=200)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    p2, kids2, jobs2 = simple_flow("sfp2", "sfc2", {"failParentOnFailure": True}, n=1)
    qa.ok("PUSHF", jobs=jobs2)
    p, kids, jobs = simple_flow("sfp", "sfc", {"failParentOnFailure": True}, n=2)
    qa.ok("PUSHF", jobs=jobs)
    # what a lost note leaves behind: the child's row failed for good, the parent parked
    rows(nodes.url, "UPDATE jobs SET state = 'buried', node = NULL WHERE uid = %s "
                    "RETURNING id", (kids2[0],), commit=True)
    rows(nodes.url, "UPDATE jobs SET state = 'buried', result = %s, result_ok = 0, "
                    "node = NULL WHERE uid = %s RETURNING id", (b"boom", kids[0]), commit=True)
    msg = f"Child job {kids[0]} failed: boom".encode()
    assert _until(lambda: rows(nodes.url, "SELECT state, result FROM jobs WHERE uid = %s",
                               (p,)) == [("buried", msg)])
    assert qb.state(p) == "failed"
    assert qb.state(p2) == "waiting-children"   # its notes went with p's, in the same round


def test_sweep_sends_a_failure_to_the_parent_only_with_the_final_failure_s_text(nodes):
    """Review of the sweep's failure notes: child c of p (failParentOnFailure), failed once
    with "e1" (retried), then failed for good by a Discard whose note was lost (its row as
    the Discard commits it: buried, result empty, the extras still saying "e1"); w, a job
    pushed with dependsOn [c], is not c's parent. The sweep fails p with the final
    failure's text, "unknown error", as the note says (it said "e1"), and leaves w waiting,
    as one server does (it failed w too: the note went to every job waiting for c)."""
    a, b = nodes(2, flow_sweep_ms=200)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    p, kids, jobs = simple_flow("sxp", "sxc", {"failParentOnFailure": True, "maxAttempts": 3},
                                n=1)
    qa.ok("PUSHF", jobs=jobs)
    w = qa.push("sxw", {"w": 1}, dependsOn=[kids[0]])
    assert _until(lambda: qb.state(w) == "waiting-children")
    assert qb.pull("sxc", timeout=2000)["job"]["id"] == kids[0]
    qb.ok("FAIL", id=kids[0], error="e1")
    assert _until(lambda: rows(nodes.url, "SELECT state, node FROM jobs WHERE uid = %s",
                               (kids[0],)) == [("ready", None)])
    rows(nodes.url, "UPDATE jobs SET state = 'buried', result = %s, result_ok = 0 "
                    "WHERE uid = %s RETURNING id", (b"", kids[0]), commit=True)
    assert _until(lambda: rows(nodes.url, "SELECT state FROM jobs WHERE uid = %s",
                               (p,)) == [("buried",)])
    assert rows(nodes.url, "SELECT result FROM jobs WHERE uid = %s", (p,)) == \
        [(f"Child job {kids[0]} failed: unknown error".encode(),)]
    # w was read by the round that failed p, and its notes went with p's
    assert rows(nodes.url, "SELECT state, result FROM jobs WHERE uid = %s", (w,)) == \
        [("delayed", None)]
    assert qb.state(w) == "waiting-children"


def test_values_of_children_removed_on_complete_reach_the_parent(nodes):
    """Children with removeOnComplete acknowledged on b and c (their rows gone): the parent
    still reads their results, named by id alone, on every node."""
    a, b, c = nodes(3, flow_sweep_ms=0)
    qa, qb, qc = BQ(a.bunqueue_port), BQ(b.bunqueue_port), BQ(c.bunqueue_port)
    p, kids, jobs = simple_flow("kvp", "kvc", {"removeOnComplete": True})
    qa.ok("PUSHF", jobs=jobs)
    done = {}
    for i, q in enumerate((qb, qc)):
        j = q.pull("kvc", timeout=2000)["job"]
        q.ok("ACK", id=j["id"], result={"r": i})
        done[j["id"]] = {"r": i}
    got = qa.pull("kvp", timeout=5000)["job"]
    assert got is not None and got["id"] == p
    assert rows(nodes.url, "SELECT count(*) FROM jobs WHERE queue = 'kvc'") == [(0,)]
    for q in (qa, qb, qc):
        assert q.call("GetChildrenValues", id=p) == {"ok": True, "data": {"values": done}}


def test_worker_given_a_released_parent_reads_the_last_childs_kept_value(nodes):
    """A removeOnComplete child acknowledged on b releases its parent, which a worker waiting
    on c gets at once: the child's value is there when the worker asks (the "kept" and
    "done" notes of one commit are applied together, values first). Review finding: they
    used to travel apart, and the worker read {}."""
    a, b, c = nodes(3, flow_sweep_ms=0)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    for i in range(5):
        qc = BQ(c.bunqueue_port)
        p, kids, jobs = simple_flow(f"krp{i}", f"krc{i}", {"removeOnComplete": True}, n=1)
        qa.ok("PUSHF", jobs=jobs)
        qc.send({"cmd": "PULL", "queue": f"krp{i}", "timeout": 8000, "reqId": "w"})
        j = qb.pull(f"krc{i}", timeout=2000)["job"]
        qb.ok("ACK", id=j["id"], result={"r": i})
        got = qc.recv_reply("w", 15)["job"]
        assert got is not None and got["id"] == p
        assert qc.call("GetChildrenValues", id=p) == \
            {"ok": True, "data": {"values": {j["id"]: {"r": i}}}}


def test_sweep_pages_past_many_waiting_parents(nodes):
    """501 parents legitimately waiting (their children delayed an hour), then one whose
    child completed behind the nodes' backs: the leader's sweep pages through the parked rows
    and releases it. Review finding: the sweep looked at the oldest 500 only."""
    a, b = nodes(2, flow_sweep_ms=200)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    jobs = []
    for i in range(501):
        jobs.append(node(f"oldk{i}", "oldc", "k", {"i": i}, (f"oldp{i}", "oldp"),
                         delay=3_600_000))
        jobs.append(node(f"oldp{i}", "oldp", "p", {}, children=[f"oldk{i}"]))
    qa.ok("PUSHF", jobs=jobs)
    p, kids, jobs = simple_flow("swp2", "swc2", n=1)
    qa.ok("PUSHF", jobs=jobs)
    rows(nodes.url, "UPDATE jobs SET state = 'completed', result = %s, result_ok = 1, "
                    "node = NULL WHERE uid = %s RETURNING id", (b"\xc0", kids[0]), commit=True)
    got = qb.pull("swp2", timeout=10000)["job"]
    assert got is not None and got["id"] == p


@pytest.mark.parametrize("remove", [True, False])
def test_node_stopped_right_after_a_child_finished(nodes, remove):
    """b acknowledges a child and is stopped (SIGTERM) at once: b delivers the child's notes
    before it exits (no sweep here), and gives back the rows it took for them; the parent is
    served on a. Review finding: the notes were dropped and the parent's row stayed b's."""
    a, b = nodes(2, flow_sweep_ms=0)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    p, kids, jobs = simple_flow("gsp", "gsc", {"removeOnComplete": remove}, n=1)
    qa.ok("PUSHF", jobs=jobs)
    j = qb.pull("gsc", timeout=2000)["job"]
    qb.ok("ACK", id=j["id"], result=5)
    b.stop()
    got = qa.pull("gsp", timeout=10000)["job"]
    assert got is not None and got["id"] == p
    assert rows(nodes.url, "SELECT count(*) FROM jobs WHERE node IS NOT NULL AND state <> "
                           "'reserved'") == [(0,)]
