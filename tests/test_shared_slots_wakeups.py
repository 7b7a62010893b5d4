"""Concurrency slots across nodes: wake-ups and races (issue 19; docs/scaling.md
"Concurrency limits across nodes"; the semantics in tests/test_shared_slots.py). A probe and
a beanstalk reserve-with-timeout on a node whose take got nothing answer at once; a killed
holder's slot is taken again at the poll after it lapses, also on a node whose claim rounds
run back to back (the poll was skipped while a round ran: review finding); the slot goes
back and forth between two nodes on give-back notices alone (60 s poll); a keep that
re-inserts a row another node's take deleted under it reports the lapse (review finding).
Real node processes on one fresh PostgreSQL database (the race: statements on it, one node
started only to migrate it).

Needs JOBGATE_TEST_PG_URL (skipped with a clear reason without it).
"""
from __future__ import annotations

import threading
import time

import greenstalk
import psycopg

from core.shared_slots import keep_slots, take_slots

from .bunqueue_support import BQ, OK
from .shared_support import bean
from .test_shared_slots import _active, _held_on_a, _limit_everywhere, _send_pull, _slots


def _no_tracebacks(*servers):
    for s in servers:
        if s.proc.poll() is None:
            out, err = s.stop()
        else:
            out, err = s.proc.communicate()
        text = (err or b"").decode(errors="replace")
        assert "Traceback" not in text, text[-4000:]


def _times_out(c, timeout: int, within: float) -> None:
    """A beanstalk reserve-with-timeout `timeout` (s) on `c` answers TIMED_OUT, within
    `within` s."""
    t0 = time.monotonic()
    try:
        c.reserve(timeout=timeout)
        raise AssertionError("reserved over the limit")
    except greenstalk.TimedOutError:
        pass
    assert time.monotonic() - t0 < within, time.monotonic() - t0


def test_probe_and_reserve_with_timeout_on_a_denied_node_answer_promptly(nodes):
    a, b, qa, qb, held = _held_on_a(nodes, "den", 1, 3, poll_ms=60_000)
    # b's waiter: its take gets nothing, b is denied
    assert qb.pull("den", owner="wb", lockTtl=60_000, timeout=500)["job"] is None
    for _ in range(3):
        t0 = time.monotonic()
        assert qb.pull("den", owner="wb", lockTtl=60_000)["job"] is None   # a probe
        assert time.monotonic() - t0 < 1.0, time.monotonic() - t0
    c = bean(b, "den")
    try:
        _times_out(c, 0, within=1.0)
        _times_out(c, 1, within=2.5)
        # the slot comes free: a beanstalk reserve-with-timeout on b is served
        t0 = time.monotonic()
        threading.Timer(0.3, lambda: qa.call("ACK", id=held["job"]["id"],
                                             token=held["token"])).start()
        job = c.reserve(timeout=5)
        assert time.monotonic() - t0 < 2.0, time.monotonic() - t0
        c.delete(job)
    finally:
        c.close()
    assert _active(nodes.url, "den") == 0
    _no_tracebacks(a, b)


def test_a_killed_holder_under_the_default_poll(nodes):
    """docs: a killed node's slots lapse 5 s after its last refresh; a denied node takes
    again only at the poll: with the default poll (1000 ms) b is served within ~6.5 s."""
    a, b = nodes(2, poll_ms=1000)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    _limit_everywhere([qa, qb], "kd", 1)
    qa.push("kd", {"n": 1})
    other = qa.push("kd", {"n": 2})
    assert qa.pull("kd", owner="wa", timeout=5000)["job"] is not None
    _send_pull(qb, "kd", "wb", "after")
    time.sleep(0.5)   # b is denied
    a.kill()
    killed = time.monotonic()
    r = qb.recv_reply("after", 30)
    waited = time.monotonic() - killed
    assert r["job"] is not None and r["job"]["id"] == other, r
    assert 3.5 <= waited < 8, waited
    _no_tracebacks(b)


def test_give_backs_back_and_forth_wake_the_other_node(nodes):
    """Limit 1, 60 s poll: the slot goes back and forth between a and b (each ACK is a
    give-back at the next tick and a jobgate_slots notice): each waiter is served within
    2 s, never two active."""
    a, b = nodes(2, poll_ms=60_000)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    _limit_everywhere([qa, qb], "pp", 1)
    for i in range(40):
        qa.push("pp", {"i": i})
    cur = qa.pull("pp", owner="w0", lockTtl=60_000, timeout=5000)
    holder, other = qa, qb
    for i in range(16):
        other.send({"cmd": "PULL", "queue": "pp", "owner": f"x{i}", "lockTtl": 60_000,
                    "timeout": 30_000, "reqId": f"r{i}"})
        time.sleep(0.05 + 0.037 * (i % 5))   # the other's take runs around the give-back
        assert _active(nodes.url, "pp") == 1
        assert holder.call("ACK", id=cur["job"]["id"], token=cur["token"]) == OK
        t0 = time.monotonic()
        try:
            nxt = other.recv_reply(f"r{i}", 10)
        except TimeoutError:
            nxt = None
        waited = time.monotonic() - t0
        assert nxt is not None and nxt["job"] is not None, (
            f"round {i}: not served in 10 s; slots {_slots(nodes.url, 'pp')}")
        assert waited < 2.0, (i, waited)
        cur = nxt
        holder, other = other, holder
    _no_tracebacks(a, b)


def test_a_denied_queue_on_a_node_claiming_back_to_back_after_the_holder_dies(nodes):
    """As above, but b's claim rounds run back to back (many jobs of "hot" in the database,
    eight workers on b: each round that brings rows asks for the next at once, so `pending`
    is never False when the poll's 100 ms timer looks). The lapse of a's row gives no
    notice; b's denied queue is retried only by the poll, which now follows the round that
    was running when it came (before, it was skipped: 9-16 s in three of four runs)."""
    a, b, c = nodes(3, poll_ms=1000)
    qa, qb, qc = BQ(a.bunqueue_port), BQ(b.bunqueue_port), BQ(c.bunqueue_port)
    _limit_everywhere([qa, qb, qc], "kb2", 1)
    qa.push("kb2", {"n": 1})
    other = qa.push("kb2", {"n": 2})
    assert qa.pull("kb2", owner="wa", timeout=5000)["job"] is not None
    _send_pull(qb, "kb2", "wb", "after")
    time.sleep(0.5)   # b is denied
    for k in range(60):   # 30000 jobs of "hot" in the database (through c)
        assert qc.call("PUSHB", queue="hot", jobs=[{"data": {"k": k}}] * 500)["ok"]
    stop = threading.Event()

    def worker(i):
        w = BQ(b.bunqueue_port)
        while not stop.is_set():
            r = w.pull("hot", owner=f"hw{i}", lockTtl=60_000, timeout=1000)
            if r["job"] is not None:
                w.call("ACK", id=r["job"]["id"], token=r["token"])

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(8)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    a.kill()
    killed = time.monotonic()
    try:
        try:
            r = qb.recv_reply("after", 25)
        except TimeoutError:
            r = None
    finally:
        stop.set()
        for t in threads:
            t.join(5)
    waited = time.monotonic() - killed
    left = qc.count("hot")
    assert r is not None and r["job"] is not None and r["job"]["id"] == other, (
        f"b's worker on kb2 unserved {waited:.1f} s after a was killed (lapse 5 s, poll 1 s)"
        f"; 'hot' jobs left {left}; slots {_slots(nodes.url, 'kb2')}")
    assert waited < 9.5, (waited, left)


class _HookedCursor:
    def __init__(self, cur, owner) -> None:
        self._cur, self._owner = cur, owner

    def execute(self, *a, **k):
        r = self._cur.execute(*a, **k)
        h, self._owner._hook = self._owner._hook, None
        if h is not None:
            h()
        return r

    def __getattr__(self, name):
        return getattr(self._cur, name)


class _Hooked:
    """A psycopg connection whose cursor runs `hook` once, after its first statement."""

    def __init__(self, conn, hook) -> None:
        self._conn, self._hook = conn, hook

    def cursor(self):
        return _HookedCursor(self._conn.cursor(), self)

    def commit(self):
        self._conn.commit()


def test_a_row_deleted_between_keeps_select_and_its_write_is_reported_lapsed(nodes):
    """X's row of rq has lapsed; while X's keep runs (after its first statement), Y's take
    runs: it must either wait and see the row refreshed, or delete it first and X's keep
    report the lapse. Either way no two rows count the one slot unreported."""
    (n,) = nodes(1)
    url = nodes.url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url) as c1, psycopg.connect(url) as c2:
        c1.execute("INSERT INTO queue_slots (queue, node, held, until_ms) VALUES "
                   "('rq', 'X', 1, 0)")   # X's row of rq: lapsed
        c1.commit()
        took = {}
        hooked = _Hooked(c1, None)
        t = threading.Thread(target=lambda: took.update(
            take_slots(c2, "Y", {"rq": (1, 1, 0)})))
        hooked._hook = lambda: (t.start(), t.join(0.5))   # Y's take meets X's keep
        notified, lapsed = keep_slots(hooked, "X", {"rq": 1}, {}, {"rq"})
        t.join(10)
        held = dict(c1.execute("SELECT node, held FROM queue_slots WHERE queue = 'rq' "
                               "AND node <> ''").fetchall())
    if took == {"rq": (1, 1)}:             # Y's take went first: X must know
        assert held == {"X": 1, "Y": 1} and lapsed == ["rq"], (held, lapsed)
    else:                                  # Y waited for X's keep and saw the row live
        assert took == {"rq": (0, 0)} and held == {"X": 1} and lapsed == [], (took, held)
