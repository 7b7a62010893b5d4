"""Concurrency limits across nodes (issue 19; docs/scaling.md "Concurrency limits across
nodes", core/shared_slots.py): a bunqueue concurrency limit of n allows n active jobs over
every node of the database, not n per node; a node's unused slots go to the nodes whose
workers wait; the slots of a node that stops, or dies, are free again. Real node processes on
one fresh PostgreSQL database, real bunqueue sockets.

Needs JOBGATE_TEST_PG_URL (skipped with a clear reason without it).
"""
from __future__ import annotations

import time

from .bunqueue_support import BQ, OK
from .shared_support import metric, rows


def _limit_everywhere(clients, queue: str, limit: int) -> None:
    """Set the concurrency limit of `queue` through the first client and wait until every
    node reports it (each node installs it after the setter's commit)."""
    assert clients[0].call("SetConcurrency", queue=queue, limit=limit) == OK
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if all(c.ok("GetQueueLimits", queue=queue)["data"]["limits"]["concurrencyLimit"]
               == limit for c in clients):
            return
        time.sleep(0.05)
    raise AssertionError("the limit did not reach every node")


def _slots(url: str, queue: str) -> dict:
    return dict(rows(url, "SELECT node, held FROM queue_slots WHERE queue = %s AND node <> ''",
                     (queue,)))


def test_a_limit_of_one_is_one_active_job_across_nodes(nodes):
    """Limit 1: a worker on a holds a job; b's worker gets nothing (a probe and a PULL
    waiting 300 ms answer no job) although a second job waits; a's ACK frees the slot and
    b's waiting PULL is served; the database then shows the slot held by b alone."""
    a, b = nodes(2, poll_ms=200, http=True)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    _limit_everywhere([qa, qb], "one", 1)
    first, second = qa.push("one", {"n": 1}), qa.push("one", {"n": 2})
    got = qa.pull("one", owner="wa", lockTtl=60_000, timeout=5000)
    assert got["job"]["id"] == first
    assert qb.pull("one", owner="wb", lockTtl=60_000)["job"] is None
    assert qb.pull("one", owner="wb", lockTtl=60_000, timeout=300)["job"] is None
    assert list(_slots(nodes.url, "one").values()) == [1]
    qb.send({"cmd": "PULL", "queue": "one", "owner": "wb", "lockTtl": 60_000,
             "timeout": 10_000, "reqId": "late"})
    time.sleep(0.3)   # b waits (its take finds the slot held by a)
    assert qa.call("ACK", id=first, token=got["token"]) == OK
    late = qb.recv_reply("late", 15)
    assert late["job"]["id"] == second
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and len(_slots(nodes.url, "one")) != 1:
        time.sleep(0.05)   # a gives its slot back at its next tick
    held = _slots(nodes.url, "one")
    assert list(held.values()) == [1] and f":{b.proc.pid}:" in next(iter(held)), held
    assert metric(b, "jobgate_shared_slots_taken_total") >= 1
    assert metric(a, "jobgate_shared_slots_given_total") >= 1


def test_a_limit_of_two_over_three_nodes(nodes):
    """Limit 2, six jobs, a worker waiting on each of three nodes: exactly two are served;
    an ACK lets the third in; never more than two active jobs in the database."""
    ns = nodes(3, poll_ms=200)
    qs = [BQ(n.bunqueue_port) for n in ns]
    _limit_everywhere(qs, "two", 2)
    ids = [qs[0].push("two", {"i": i}) for i in range(6)]
    for i, q in enumerate(qs):
        q.send({"cmd": "PULL", "queue": "two", "owner": f"w{i}", "lockTtl": 60_000,
                "timeout": 10_000, "reqId": f"p{i}"})
    served, waiting = {}, []
    for i, q in enumerate(qs):
        try:
            r = q.recv_reply(f"p{i}", 2.5 if len(served) < 2 else 1.0)
        except TimeoutError:
            waiting.append(i)
            continue
        served[i] = r
    assert len(served) == 2 and len(waiting) == 1, (served, waiting)
    active = rows(nodes.url, "SELECT count(*) FROM jobs WHERE queue = 'two' AND "
                  "state = 'reserved'")[0][0]
    assert active == 2
    assert sum(_slots(nodes.url, "two").values()) == 2
    i, r = next(iter(served.items()))
    assert qs[i].call("ACK", id=r["job"]["id"], token=r["token"]) == OK
    late = qs[waiting[0]].recv_reply(f"p{waiting[0]}", 10)
    assert late["job"]["id"] in ids
    assert rows(nodes.url, "SELECT count(*) FROM jobs WHERE queue = 'two' AND "
                "state = 'reserved'")[0][0] == 2


def test_a_killed_nodes_slots_lapse(nodes):
    """Limit 1, a's worker holds a job (the slot) and a is killed -9: b's waiting worker
    gets the other job once a's slots lapsed (SLOT_LEASE_MS, 5 s after a's last refresh),
    not before, while a's reservation waits for its deadline (a's workers died with it)."""
    a, b = nodes(2, poll_ms=200)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    _limit_everywhere([qa, qb], "dies", 1)
    jid = qa.push("dies", {"n": 1})
    other = qa.push("dies", {"n": 2})
    assert qa.pull("dies", owner="wa", timeout=5000)["job"]["id"] == jid
    a.kill()
    killed = time.monotonic()
    qb.send({"cmd": "PULL", "queue": "dies", "owner": "wb", "lockTtl": 60_000,
             "timeout": 20_000, "reqId": "after"})
    r = qb.recv_reply("after", 25)
    waited = time.monotonic() - killed
    assert r["job"]["id"] == other
    assert 3.5 <= waited < 10, waited
    assert rows(nodes.url, "SELECT state, node LIKE %s FROM jobs WHERE uid = %s",
                (f"%:{a.proc.pid}:%", jid)) == [("reserved", True)]


def test_a_stopped_nodes_slots_are_free_at_once(nodes):
    """Limit 1: a node stopped cleanly gives its slot back as it exits: b's worker is
    served a job well before a's slots would lapse (SLOT_LEASE_MS)."""
    a, b = nodes(2, poll_ms=200)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    _limit_everywhere([qa, qb], "stop", 1)
    ids = [qa.push("stop", {"n": 1}), qa.push("stop", {"n": 2})]
    assert qa.pull("stop", owner="wa", lockTtl=60_000, timeout=5000)["job"] is not None
    qb.send({"cmd": "PULL", "queue": "stop", "owner": "wb", "lockTtl": 60_000,
             "timeout": 20_000, "reqId": "after"})
    time.sleep(0.3)
    a.stop()
    stopped = time.monotonic()
    assert qb.recv_reply("after", 10)["job"]["id"] in ids
    assert time.monotonic() - stopped < 3.0
