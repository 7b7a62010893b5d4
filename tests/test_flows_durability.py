"""A flow half done survives kill -9 and a restart, on a SQLite file and on PostgreSQL (the
`db_url` fixture): the parent still waits (for bunqueue and for a greenstalk reserve), the
finished child's value and a recorded child failure are still readable, and the last child's
ACK after the restart releases the parent (docs/bunqueue.md "Flows (issue 16)": the flow
links and failure records are job extras, stored with the job).
"""
from __future__ import annotations

import greenstalk
import pytest

from .bunqueue_support import BQ, qname, wait_until
from .test_bunqueue_flows import fid, node


def test_a_half_done_flow_survives_kill9(db_url, servers):
    s = servers(db_url, bunqueue=True)
    c = BQ(s.bunqueue_port, timeout=10)
    qp, qc, qd = qname("dp"), qname("dc"), qname("dd")
    p, done, bad, left = fid("p"), fid("done"), fid("bad"), fid("left")
    jobs = [node(done, qc, "a", {"n": 1}, (p, qp)),
            node(bad, qd, "b", {"n": 2}, (p, qp), ignoreDependencyOnFailure=True,
                 maxAttempts=1),
            node(left, qc, "c", {"n": 3}, (p, qp)),
            node(p, qp, "parent", {}, children=[done, bad, left])]
    c.ok("PUSHF", jobs=jobs)
    r = c.pull(qc)["job"]["id"]
    other = left if r == done else done
    c.ok("ACK", id=r, result={"v": r})
    f = c.pull(qd, owner="w")
    c.ok("FAIL", id=bad, error="kaput", token=f["token"])
    assert c.state(p) == "waiting-children"
    s.kill()

    s2 = servers(db_url, bunqueue=True)
    c = BQ(s2.bunqueue_port, timeout=10)
    assert c.state(p) == "waiting-children"
    assert c.counts(qp)["waiting-children"] == 1
    g = c.call("GetJob", id=p)["job"]
    assert g["childrenIds"] == [done, bad, left] and g["dependsOn"] == [done, left]
    assert c.call("GetJob", id=other)["job"]["parentId"] == p
    assert c.call("GetChildrenValues", id=p)["data"]["values"] == {f"{qc}:{r}": {"v": r}}
    assert c.call("GetIgnoredChildrenFailures", id=p)["values"] == {f"{qd}:{bad}": "kaput"}
    gs = greenstalk.Client(("127.0.0.1", s2.port), encoding=None, use=qp, watch=qp)
    try:
        with pytest.raises(greenstalk.TimedOutError):
            gs.reserve(timeout=0)
        assert c.pull(qc)["job"]["id"] == other
        c.ok("ACK", id=other, result=2)
        assert wait_until(lambda: c.state(p) == "waiting")
        job = gs.reserve(timeout=2)
        assert c.state(p) == "active"
        gs.delete(job)
    finally:
        gs.close()
