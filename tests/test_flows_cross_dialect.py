"""A bunqueue flow seen and worked by the other dialects (docs/mapping.md "Flows (issue 16)"):
a real greenstalk client on the parent's tube and a workq lease on its queue do not get the
parent before its children are done; then they do. A waiting parent is a delayed job to
beanstalk (stats-job state delayed, time-left about 100 years, kick leaves it) and is not
leasable by workq. Children may be done through any dialect: ACK, workq complete, or a
beanstalk delete of the reserved child.
"""
from __future__ import annotations

import threading
import uuid

import greenstalk
import pytest

from .bunqueue_support import qname, reference_mode, wait_until
from .test_bunqueue_flows import node

pytestmark = pytest.mark.skipif(reference_mode(), reason="jobgate only: several dialects")

CENTURY_S = 100 * 365 * 86_400


def push_flow(c, qp, qc, n=2):
    """PUSHF a parent in `qp` with `n` children in `qc`; ids are UUIDv4 (workq can name
    them). Returns (parent id, [child ids])."""
    p = str(uuid.uuid4())
    kids = [str(uuid.uuid4()) for _ in range(n)]
    jobs = [node(k, qc, f"c{i}", {"i": i}, (p, qp)) for i, k in enumerate(kids)]
    jobs.append(node(p, qp, "parent", {"top": 1}, children=kids))
    c.ok("PUSHF", jobs=jobs)
    return p, kids


def test_greenstalk_gets_the_parent_only_after_the_children_are_acked(bq, gsq):
    c = bq()
    qp, qc = qname("xp"), qname("xc")
    p, kids = push_flow(c, qp, qc)
    g = gsq(qp)
    with pytest.raises(greenstalk.TimedOutError):
        g.reserve(timeout=1)
    st = g.stats_tube(qp)
    assert st["current-jobs-delayed"] == 1 and st["current-jobs-ready"] == 0
    g.kick(10)   # kick leaves a waiting parent alone
    with pytest.raises(greenstalk.TimedOutError):
        g.reserve(timeout=0)
    for _ in kids:
        c.ok("ACK", id=c.pull(qc)["job"]["id"], result="v")
        if c.state(p) == "waiting-children":
            with pytest.raises(greenstalk.TimedOutError):
                g.reserve(timeout=0)
    job = g.reserve(timeout=2)
    assert c.state(p) == "active"
    assert g.stats_job(job)["tube"] == qp
    g.delete(job)
    assert c.state(p) == "unknown"


def test_a_waiting_greenstalk_reserve_is_served_by_the_last_ack(bq, gsq, bq_server):
    c = bq()
    qp, qc = qname("xp"), qname("xc")
    p, kids = push_flow(c, qp, qc, n=1)
    g = gsq(qp)
    got = []
    t = threading.Thread(target=lambda: got.append(g.reserve(timeout=10)))
    t.start()   # waits: the parent is not ready
    assert wait_until(lambda: c.ok("GetJobCounts", queue=qc) and not t.is_alive(), 0.5) \
        is False
    c.ok("ACK", id=c.pull(qc)["job"]["id"])
    t.join(5)
    assert got and c.state(p) == "active"
    g.delete(got[0])


def test_beanstalk_view_of_a_waiting_parent(bq, gsq, bq_server):
    c = bq()
    qp, qc = qname("xp"), qname("xc")
    p, kids = push_flow(c, qp, qc, n=1)
    g = gsq(qp)
    job = g.peek_delayed()
    s = g.stats_job(job)
    assert s["state"] == "delayed" and s["tube"] == qp
    assert CENTURY_S - 86_400 < s["time-left"] <= CENTURY_S
    with pytest.raises(greenstalk.NotFoundError):
        g.kick_job(job)
    with pytest.raises(greenstalk.NotFoundError):
        g._send_cmd(b"reserve-job %d" % job.id, b"RESERVED")
    c.ok("ACK", id=c.pull(qc)["job"]["id"])
    assert g.stats_job(job)["state"] == "ready"


def test_workq_lease_gets_the_parent_only_after_the_children_are_done(bq, wq):
    c = bq()
    w = wq()
    qp, qc = qname("xp"), qname("xc")
    p, kids = push_flow(c, qp, qc)
    assert w.cmd(b"lease %s 100\r\n" % qp.encode()) == b"-TIMEOUT\r\n"
    keys = w.inspect_job(p)
    assert keys["state"] == "0"                        # new: never leased
    assert int(keys["time"][:4]) >= 2100               # due about 100 years from now
    for k in kids:   # workq leases and completes the children
        r = w.cmd(b"lease %s 1000\r\n" % qc.encode())
        assert r.startswith(b"+OK 1\r\n")
        uid = r.split(b"\r\n")[1].split(b" ")[0]
        assert w.cmd(b"complete %s 2\r\nok\r\n" % uid) == b"+OK\r\n"
    r = w.cmd(b"lease %s 1000\r\n" % qp.encode())
    assert r.startswith(b"+OK 1\r\n%s %s " % (p.encode(), qp.encode())), r
    assert c.call("GetChildrenValues", id=p)["data"]["values"] == {
        f"{qc}:{k}": "ok" for k in kids}


def test_beanstalk_workers_finish_children_with_delete(bq, gsq):
    c = bq()
    qp, qc = qname("xp"), qname("xc")
    p, kids = push_flow(c, qp, qc)
    gc = gsq(qc)
    for _ in kids:
        gc.delete(gc.reserve(timeout=2))   # reserve + delete: the child is done
    assert wait_until(lambda: c.state(p) == "waiting")
    assert c.call("GetChildrenValues", id=p)["data"]["values"] == {}   # no results
    assert c.pull(qp)["job"]["id"] == p


def test_a_beanstalk_delete_of_a_waiting_child_is_not_done(bq, gsq):
    c = bq()
    qp, qc = qname("xp"), qname("xc")
    p, kids = push_flow(c, qp, qc, n=1)
    gc = gsq(qc)
    gc.delete(gc.peek_ready())   # deleted without being worked: the parent keeps waiting
    assert c.state(kids[0]) == "unknown"
    assert c.state(p) == "waiting-children"
