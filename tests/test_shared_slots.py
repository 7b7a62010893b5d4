"""Concurrency limits across nodes (issue 19; docs/scaling.md "Concurrency limits across
nodes", core/shared_slots.py): a bunqueue concurrency limit of n allows n active jobs over
every node of the database, not n per node; a node's unused slots go to the nodes whose
workers wait; the slots of a node that stops, or dies, are free again; jobs reserved before
the limit came count; a batch PULL gets its batch; a node whose worker its rate limit holds
back does not sit on a slot; a raised limit wakes the other nodes' waiters; a lowered limit
holds once the old jobs finish (faults and load: tests/test_shared_slots_faults.py). Real
node processes on one fresh PostgreSQL database, real bunqueue sockets.

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


def _held_on_a(nodes, queue: str, limit: int, jobs: int, lock_ms: int = 60_000,
               **node_opts) -> tuple:
    """Two nodes (`node_opts` for the fixture: poll_ms, http), concurrency limit `limit` of
    `queue` on both, `jobs` jobs pushed on a, and a's worker ("wa") holding one of them:
    (a, b, a's client, b's client, the held PULL's reply)."""
    a, b = nodes(2, **node_opts)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    _limit_everywhere([qa, qb], queue, limit)
    for i in range(jobs):
        qa.push(queue, {"i": i})
    held = qa.pull(queue, owner="wa", lockTtl=lock_ms, timeout=5000)
    assert held["job"] is not None
    return a, b, qa, qb, held


def _send_pull(c, queue: str, owner: str, rid: str, timeout_ms: int = 30_000,
               lock_ms: int = 60_000) -> None:
    """Send a bunqueue PULL that waits up to `timeout_ms` (its reply: c.recv_reply(rid))."""
    c.send({"cmd": "PULL", "queue": queue, "owner": owner, "lockTtl": lock_ms,
            "timeout": timeout_ms, "reqId": rid})


def _slots(url: str, queue: str) -> dict:
    return dict(rows(url, "SELECT node, held FROM queue_slots WHERE queue = %s AND node <> ''",
                     (queue,)))


def _active(url: str, queue: str) -> int:
    return rows(url, "SELECT count(*) FROM jobs WHERE queue = %s AND state = 'reserved'",
                (queue,))[0][0]


def _served(c, rid: str, within_s: float, url: str, queue: str, limit: int, after: str):
    """The reply to PULL `rid` on client `c`, which must bring a job within `within_s` s;
    else fail with the queue's active jobs and slot rows."""
    t0 = time.monotonic()
    try:
        r = c.recv_reply(rid, within_s)
    except TimeoutError:
        r = None
    assert r is not None and r["job"] is not None, (
        f"the worker unserved {time.monotonic() - t0:.1f} s after {after}: "
        f"{_active(url, queue)} active, limit {limit}, slots {_slots(url, queue)}")
    return r


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
    _send_pull(qb, "one", "wb", "late", 10_000)
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
    _send_pull(qb, "dies", "wb", "after", 20_000)
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
    _send_pull(qb, "stop", "wb", "after", 20_000)
    time.sleep(0.3)
    a.stop()
    stopped = time.monotonic()
    assert qb.recv_reply("after", 10)["job"]["id"] in ids
    assert time.monotonic() - stopped < 3.0


def test_pullb_on_a_limited_queue_takes_a_batch(nodes):
    """Limit 5, five jobs pushed on a: PULLB count=5 on b takes the five (as it does on a
    queue without a limit, tests/test_shared_nodes.py, and as it did before slots)."""
    a, b = nodes(2)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    _limit_everywhere([qa, qb], "pbl", 5)
    ids = [qa.push("pbl", {"i": i}) for i in range(5)]
    time.sleep(0.3)
    r = qb.call("PULLB", queue="pbl", count=5, owner="w", lockTtl=60_000, timeout=2000)
    assert r["ok"] is True
    assert [j["id"] for j in r["jobs"]] == ids, r["jobs"]


def test_limit_set_while_jobs_are_reserved_counts_them(nodes):
    """a's worker holds 3 jobs of a queue without a limit; a limit of 2 is then set: the
    queue is over its limit (3 active), so b's worker must not get a 4th job (as on one
    server: no new reservation until fewer than 2 are active)."""
    a, b = nodes(2, poll_ms=200)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    for i in range(4):
        qa.push("late", {"i": i})
    for _ in range(3):
        assert qa.pull("late", owner="wa", lockTtl=60_000, timeout=2000)["job"] is not None
    _limit_everywhere([qa, qb], "late", 2)
    time.sleep(1.5)   # a's refreshes ran
    got = qb.pull("late", owner="wb", lockTtl=60_000, timeout=1500)["job"]
    active = _active(nodes.url, "late")
    assert got is None, f"b reserved a job while {active - 1} were active, limit 2"


def test_limit_cleared_and_set_again_counts_reserved_jobs(nodes):
    """Limit 1: a's worker holds a job (a's slot row: 1); the limit is cleared, a's worker
    takes two more (3 active), a limit of 2 is set: b's worker must get nothing while 3 are
    active (a's row still says 1, so b takes the "free" slot)."""
    a, b = nodes(2, poll_ms=200)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    _limit_everywhere([qa, qb], "again", 1)
    for i in range(4):
        qa.push("again", {"i": i})
    assert qa.pull("again", owner="wa", lockTtl=60_000, timeout=2000)["job"] is not None
    assert qa.call("ClearConcurrency", queue="again") == OK
    deadline = time.monotonic() + 10
    while qb.ok("GetQueueLimits", queue="again")["data"]["limits"]["concurrencyLimit"] \
            is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    for _ in range(2):
        assert qa.pull("again", owner="wa", lockTtl=60_000, timeout=2000)["job"] is not None
    _limit_everywhere([qa, qb], "again", 2)
    time.sleep(1.5)
    got = qb.pull("again", owner="wb", lockTtl=60_000, timeout=1500)["job"]
    active = _active(nodes.url, "again")
    assert got is None, f"b reserved a job while {active - 1} were active, limit 2"


def test_a_rate_limited_node_does_not_sit_on_the_slot(nodes):
    """Limit 1 and a rate limit of 1 per 3 s (one bucket for both nodes: docs/scaling.md
    "Rate limits across nodes"). a's worker takes and ACKs a job (the bucket's token is
    spent), then waits again, as does b's: neither is served while the bucket is empty (with
    a bucket per node b's was still full), and no node sits on the slot meanwhile; once the
    next token is due exactly one of them is served (the limit of 1 holds the other)."""
    a, b = nodes(2, poll_ms=200)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    _limit_everywhere([qa, qb], "rc", 1)
    assert qa.call("RateLimit", queue="rc", limit=1, duration=3000) == OK
    deadline = time.monotonic() + 10
    while qb.ok("GetQueueLimits", queue="rc")["data"]["limits"]["rateLimit"] is None \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    for i in range(3):
        qa.push("rc", {"i": i})
    got = qa.pull("rc", owner="wa", lockTtl=60_000, timeout=2000)
    assert got["job"] is not None
    assert qa.call("ACK", id=got["job"]["id"], token=got["token"]) == OK
    spent = time.monotonic()
    _send_pull(qa, "rc", "wa", "a2", 20_000)
    _send_pull(qb, "rc", "wb", "b2", 20_000)
    served = {}

    def collect(until: float) -> None:
        while time.monotonic() < until:
            for c, rid in ((qa, "a2"), (qb, "b2")):
                if rid in served:
                    continue
                try:
                    served[rid] = c.recv_reply(rid, 0.02)
                except TimeoutError:
                    pass
    collect(spent + 1.0)
    assert _slots(nodes.url, "rc") == {}              # the rate holds both: no slot held
    collect(spent + 2.5)
    assert served == {}, served                       # the bucket is empty for 3 s
    collect(spent + 6.0)
    assert len(served) == 1 and next(iter(served.values()))["job"] is not None, served


def test_raised_limit_serves_the_other_nodes_waiter(nodes):
    """Limit 1, a's worker holds a job, b's waits (its take got nothing), the poll a minute
    away: the limit raised to 2 through a makes b take the free slot at once."""
    a, b, qa, qb, _ = _held_on_a(nodes, "up", 1, 2, lock_ms=120_000)   # poll 60 s
    _send_pull(qb, "up", "wb", "wb")
    time.sleep(1.0)
    _limit_everywhere([qa, qb], "up", 2)
    _served(qb, "wb", 6, nodes.url, "up", 2, "the raise")


def test_a_lowered_limit_converges_once_the_old_jobs_finish(nodes):
    """Limit 4, two workers on each of two nodes hold a job (4 active, rows 2 + 2). The limit
    goes down to 2; every worker asks for its next job (PULL waiting) and then ACKs its old
    one. Once the four old jobs are finished, no more than 2 jobs are active over the nodes
    (review finding: each node kept min(limit, its slots) = 2, 4 active for ever while its
    workers waited)."""
    a, b = nodes(2, poll_ms=200)
    ctl = {n: BQ(n.bunqueue_port) for n in (a, b)}
    _limit_everywhere([ctl[a], ctl[b]], "low", 4)
    for i in range(20):
        ctl[a].push("low", {"i": i})
    workers = []   # (node, client, job)
    for n in (a, b):
        for k in range(2):
            w = BQ(n.bunqueue_port)
            got = w.pull("low", owner=f"w{n.proc.pid}{k}", lockTtl=60_000, timeout=5000)
            assert got["job"] is not None
            workers.append((n, w, got))
    assert _active(nodes.url, "low") == 4
    _limit_everywhere([ctl[a], ctl[b]], "low", 2)
    for i, (n, w, got) in enumerate(workers):
        w.send({"cmd": "PULL", "queue": "low", "owner": f"x{i}", "lockTtl": 60_000,
                "timeout": 20_000, "reqId": f"next{i}"})
    time.sleep(0.3)
    for n, w, got in workers:
        assert ctl[n].call("ACK", id=got["job"]["id"], token=got["token"]) == OK
    worst = 0
    t_end = time.monotonic() + 4
    while time.monotonic() < t_end:
        if time.monotonic() > t_end - 3:   # 1 s for the nodes to settle
            worst = max(worst, _active(nodes.url, "low"))
        time.sleep(0.05)
    assert worst <= 2, (f"{worst} active under a limit of 2 after the old jobs finished; "
                        f"slots {_slots(nodes.url, 'low')}")


def test_get_queue_limits_maxed_counts_every_nodes_active_jobs(nodes):
    """GetQueueLimits' `maxed` compares the concurrency limit with the queue's active jobs on
    every node (as GetJobCounts' `active`): a job a worker on a holds makes the limit of 1
    maxed on b too; once a's ACK is committed, neither node reports it maxed."""
    a, b = nodes(2, poll_ms=200)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    _limit_everywhere([qa, qb], "mx", 1)

    def maxed(c) -> bool:
        return c.ok("GetQueueLimits", queue="mx")["data"]["limits"]["maxed"]
    assert not maxed(qa) and not maxed(qb)
    job = qa.push("mx", {"n": 1})
    got = qa.pull("mx", owner="wa", lockTtl=60_000, timeout=5000)
    assert got["job"]["id"] == job
    assert maxed(qa) and maxed(qb)
    assert qb.ok("GetJobCounts", queue="mx")["counts"]["active"] == 1
    assert qa.call("ACK", id=job, token=got["token"]) == OK
    assert not maxed(qa) and not maxed(qb)
