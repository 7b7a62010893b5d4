"""Clients' own job ids across nodes in shared mode (issue 19; docs/scaling.md "Clients' ids
across nodes"): a bunqueue custom id (`jobId`) and a workq job id are unique across the
nodes, as on one server. A PUSH naming a custom id that a job has on another node, or that
this node already gave back to the database, answers the existing id and creates nothing; a
workq `add` or `run` of such an id answers `Duplicate job`. And a workq job leased through one
node is completed or failed through another (workq leases belong to no connection: the
command is forwarded to the node holding the lease). Real node processes on one fresh
PostgreSQL database, real bunqueue and workq sockets.

Needs JOBGATE_TEST_PG_URL (skipped with a clear reason without it).
"""
from __future__ import annotations

from .bunqueue_support import BQ
from .shared_support import rows
from .workq_support import (WorkqRaw, add_cmd, complete_cmd, fail_cmd, lease_frame, new_uid,
                            result_frame)


def _count(url: str, uid: str) -> int:
    return rows(url, "SELECT count(*) FROM jobs WHERE uid = %s", (uid,))[0][0]


def test_bunqueue_custom_ids_are_unique_across_nodes(nodes):
    """A custom id pushed on a: pushed again on b, and on a once a gave the job back to the
    database, the existing id is answered and no second row is made; PUSHB on b mixing it
    with a new id creates only the new one; the job is pulled once."""
    a, b = nodes(2)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    assert qa.push("ids", {"n": 1}, jobId="order-1") == "order-1"
    assert qb.push("ids", {"n": 2}, jobId="order-1") == "order-1"
    assert qa.push("ids", {"n": 3}, jobId="order-1") == "order-1"   # spilled: in the database
    r = qb.ok("PUSHB", queue="ids", jobs=[{"data": {"n": 4}, "jobId": "order-1"},
                                          {"data": {"n": 5}, "jobId": "order-2"}])
    assert r["ids"] == ["order-1", "order-2"]
    assert _count(nodes.url, "order-1") == 1 and _count(nodes.url, "order-2") == 1
    got = [qb.pull("ids", timeout=1000)["job"] for _ in range(2)]
    assert [j["id"] for j in got] == ["order-1", "order-2"]
    assert got[0]["data"] == {"n": 1}
    assert qa.pull("ids", timeout=200)["job"] is None


def test_workq_ids_are_unique_across_nodes(nodes):
    """A workq id added on a: added again on b, or on a after a gave it back to the
    database, answers Duplicate job; one row."""
    a, b = nodes(2)
    wa, wb = WorkqRaw(a.workq_port), WorkqRaw(b.workq_port)
    uid = new_uid()
    assert wa.cmd(add_cmd(uid, "wids", b"p")) == b"+OK\r\n"
    dup = b"-CLIENT-ERROR Duplicate job\r\n"
    assert wb.cmd(add_cmd(uid, "wids", b"q")) == dup
    assert wa.cmd(add_cmd(uid, "wids", b"r")) == dup
    assert wb.cmd(b"run %s wids 1000 10 1\r\nx\r\n" % uid.encode()) == dup
    assert _count(nodes.url, uid) == 1
    other = new_uid()
    assert wb.cmd(add_cmd(other, "wids", b"s")) == b"+OK\r\n"
    assert _count(nodes.url, other) == 1


def test_workq_complete_and_fail_of_a_lease_held_by_another_node(nodes):
    """Leased on a, completed on b: +OK once a committed it (a's result waiter and b's
    `result` see it); another leased on a, failed on b; a second complete, and a complete of
    an id nobody has, get what a single server answers."""
    a, b = nodes(2)
    wa, wb = WorkqRaw(a.workq_port), WorkqRaw(b.workq_port)
    u1, u2 = new_uid(), new_uid()
    assert wa.cmd(add_cmd(u1, "fin", b"p1", ttr=60_000)) == b"+OK\r\n"
    assert wa.cmd(b"lease fin 1000\r\n") == lease_frame(u1, "fin", 60_000, b"p1")
    assert wb.cmd(complete_cmd(u1, b"done")) == b"+OK\r\n"
    assert wa.cmd(b"result %s 0\r\n" % u1.encode()) == result_frame(u1, True, b"done")
    assert wb.cmd(b"result %s 0\r\n" % u1.encode()) == result_frame(u1, True, b"done")
    assert wb.cmd(complete_cmd(u1, b"again")) == b"-CLIENT-ERROR Duplicate result\r\n"
    assert wa.cmd(add_cmd(u2, "fin", b"p2", ttr=60_000)) == b"+OK\r\n"
    assert wa.cmd(b"lease fin 1000\r\n") == lease_frame(u2, "fin", 60_000, b"p2")
    assert wb.cmd(fail_cmd(u2, b"bad")) == b"+OK\r\n"
    assert wb.cmd(b"result %s 0\r\n" % u2.encode()) == result_frame(u2, False, b"bad")
    assert wb.cmd(complete_cmd(new_uid(), b"x")) == b"-NOT-FOUND\r\n"


def test_workq_complete_of_a_waiting_job_through_another_node(nodes):
    """workq completes a job that nobody leased (workq allows it): added on a (so waiting in
    the database), completed on b, which takes its row and completes it as a single server
    would; the result is there for a, and the job is not leased any more."""
    a, b = nodes(2)
    wa, wb = WorkqRaw(a.workq_port), WorkqRaw(b.workq_port)
    u = new_uid()
    assert wa.cmd(add_cmd(u, "wait", b"p", ttr=60_000)) == b"+OK\r\n"
    assert wb.cmd(complete_cmd(u, b"r")) == b"+OK\r\n"
    assert wa.cmd(b"result %s 1000\r\n" % u.encode()) == result_frame(u, True, b"r")
    assert wa.cmd(b"lease wait 200\r\n") == b"-TIMEOUT\r\n"
    assert rows(nodes.url, "SELECT state FROM jobs WHERE uid = %s", (u,)) == [("completed",)]
