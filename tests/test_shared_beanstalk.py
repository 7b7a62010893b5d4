"""beanstalk's global commands across shared-mode nodes (issue 19, item 4; docs/mapping.md
"Shared mode"): real `jobgate serve --database-mode shared` processes on one fresh PostgreSQL
(fixture `nodes` of tests/shared_support.py), the greenstalk client, raw sockets where the
order of pipelined replies matters.

stats / stats-tube / list-tubes count the jobs of every node; peek*, stats-job see a job held
or stored by another node; kick on one node takes jobs buried on another, and two concurrent
kicks never kick one job twice; pause-tube on one node stops reserves on the others until it
ends; a ready job is deleted from another node, a job reserved elsewhere is not.

Needs JOBGATE_TEST_PG_URL (skipped with a clear reason without it).
"""
from __future__ import annotations

import socket
import threading
import time

import greenstalk
import pytest

from .shared_support import bean, rows


def raw(node, data: bytes, want: int, timeout: float = 10.0) -> bytes:
    """Send `data` to `node`'s beanstalk port in one write; return the replies once `want`
    CRLF-ended lines (bodies count as lines) have arrived."""
    s = socket.create_connection(("127.0.0.1", node.port), timeout=timeout)
    try:
        s.sendall(data)
        buf = b""
        deadline = time.monotonic() + timeout
        while buf.count(b"\r\n") < want and time.monotonic() < deadline:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        return buf
    finally:
        s.close()


def put_buried(c: greenstalk.Client, n: int, body: bytes = b"b") -> list:
    """Put `n` jobs with `c`, reserve and bury each; their ids in put order."""
    ids = [c.put(body + b"%d" % i, ttr=60) for i in range(n)]
    for _ in ids:
        j = c.reserve(timeout=5)
        c.bury(j)
    return ids


def tube_counts(c: greenstalk.Client, tube: str) -> dict:
    st = c.stats_tube(tube)
    return {k[len("current-jobs-"):]: st[k] for k in st if k.startswith("current-jobs-")}


def test_stats_tube_and_stats_count_every_node(nodes):
    a, b, c = nodes(3)
    ca, cb, cc = bean(a, "cnt"), bean(b, "cnt"), bean(c, "cnt")
    ids = [ca.put(b"j%d" % i, priority=2000, ttr=60) for i in range(4)]
    ca.put(b"urgent", priority=5)
    ca.put(b"later", delay=100)
    j = cb.reserve(timeout=5)           # the urgent one, buried on b
    cb.bury(j, priority=5)
    held = cc.reserve(timeout=5)        # ids[0], held on c
    assert held.id == ids[0]
    want = {"urgent": 0, "ready": 3, "reserved": 1, "delayed": 1, "buried": 1}
    for client in (ca, cb, cc):
        assert tube_counts(client, "cnt") == want
    ca.kick(1)                          # the urgent job is ready again: one urgent
    want.update(urgent=1, ready=4, buried=0)
    assert tube_counts(cb, "cnt") == want
    st = bean(b, "other").stats()
    assert (st["current-jobs-urgent"], st["current-jobs-ready"], st["current-jobs-reserved"],
            st["current-jobs-delayed"], st["current-jobs-buried"]) == (1, 4, 1, 1, 0)
    assert st["current-tubes"] >= 2     # default and cnt (and other, used here)
    assert "cnt" in bean(b, "default").tubes()
    # per node: connections, the tube's users
    assert cb.stats_tube("cnt")["current-using"] == 1
    with pytest.raises(greenstalk.NotFoundError):
        cb.stats_tube("nowhere")


def test_peek_and_stats_job_of_a_job_on_another_node(nodes):
    a, b, c = nodes(3)
    ca, cb, cc = bean(a, "pk"), bean(b, "pk"), bean(c, "pk")
    x = ca.put(b"x body", priority=7, ttr=60)
    assert cb.peek(x).body == b"x body"
    assert cb.peek_ready().id == x
    st = cb.stats_job(x)
    assert (st["state"], st["pri"], st["tube"], st["ttr"]) == ("ready", 7, "pk", 60)
    assert cc.reserve(timeout=5).id == x          # held on c
    st = cb.stats_job(x)
    assert st["state"] == "reserved" and 55 <= st["time-left"] <= 59, st
    assert st["reserves"] == 1
    with pytest.raises(greenstalk.NotFoundError):
        cb.peek_ready()
    y = ca.put(b"y body", delay=30)
    assert cb.peek_delayed().id == y
    st = cb.stats_job(y)
    assert st["state"] == "delayed" and 27 <= st["time-left"] <= 29, st
    cc.bury(greenstalk.Job(x, b""))
    assert cb.peek_buried().id == x
    st = ca.stats_job(x)
    assert (st["state"], st["buries"], st["time-left"]) == ("buried", 1, 0)
    with pytest.raises(greenstalk.NotFoundError):
        cb.peek(10**15)


def test_kick_on_one_node_of_jobs_buried_on_another(nodes):
    a, b, c = nodes(3)
    ca, cb, cc = bean(a, "kk"), bean(b, "kk"), bean(c, "kk")
    ids = put_buried(ca, 3)
    with pytest.raises(greenstalk.TimedOutError):
        cc.reserve(timeout=0)
    assert cb.kick(2) == 2              # the first two buried (put order)
    got = [cc.reserve(timeout=5), cc.reserve(timeout=5)]
    assert sorted(j.id for j in got) == ids[:2]
    assert cb.stats_job(got[0].id)["kicks"] == 1
    with pytest.raises(greenstalk.TimedOutError):
        cc.reserve(timeout=0)
    cb.kick_job(ids[2])
    assert cc.reserve(timeout=5).id == ids[2]
    with pytest.raises(greenstalk.NotFoundError):
        cb.kick_job(ids[2])             # reserved on c: not kickable
    # no buried job left: kick takes delayed ones
    d = ca.put(b"d", delay=100)
    assert cb.kick(5) == 1
    assert cc.reserve(timeout=5).id == d


def test_concurrent_kicks_on_two_nodes_never_kick_a_job_twice(nodes):
    a, b, c = nodes(3)
    ca = bean(a, "ck")
    for rnd in range(3):
        ids = put_buried(ca, 20, b"r%d-" % rnd)
        kicked = {}
        start = threading.Barrier(2)

        def kick(name, node):
            cl = bean(node, "ck")
            start.wait()
            kicked[name] = cl.kick(15)
            cl.close()
        ts = [threading.Thread(target=kick, args=(n, x)) for n, x in (("b", b), ("c", c))]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        assert kicked["b"] + kicked["c"] <= 20, kicked
        assert kicked["b"] + kicked["c"] >= 15, kicked
        got = []
        while True:
            try:
                j = ca.reserve(timeout=0)
            except greenstalk.TimedOutError:
                break
            got.append(j.id)
            assert ca.stats_job(j)["kicks"] == 1
            ca.delete(j)
        assert len(got) == len(set(got)) == kicked["b"] + kicked["c"]
        assert set(got) <= set(ids)
        rest = 20 - len(got)
        assert bean(b, "ck").kick(100) == rest   # what is left, once
        for _ in range(rest):
            ca.delete(ca.reserve(timeout=5))


def test_pause_tube_on_one_node_stops_reserves_on_another(nodes):
    a, b = nodes(2)
    ca, cb = bean(a, "pz"), bean(b, "pz")
    jid = ca.put(b"paused job")
    paused_at = time.monotonic()
    ca.pause_tube("pz", 2)
    st = cb.stats_tube("pz")
    assert st["pause"] == 2 and 1 <= st["pause-time-left"] <= 1, st
    with pytest.raises(greenstalk.TimedOutError):
        cb.reserve(timeout=0)
    j = cb.reserve(timeout=15)          # wakes when the pause ends (the leader's NOTIFY)
    assert j.id == jid
    waited = time.monotonic() - paused_at
    assert 1.8 <= waited < 10, waited
    assert cb.stats_tube("pz")["pause"] == 0
    with pytest.raises(greenstalk.NotFoundError):
        cb.pause_tube("nowhere-at-all", 1)
    # a pause of 0 ends it at once
    jid = ca.put(b"again")
    cb.pause_tube("pz", 60)
    with pytest.raises(greenstalk.TimedOutError):
        ca.reserve(timeout=0)
    cb.pause_tube("pz", 0)
    assert ca.reserve(timeout=10).id == jid


def test_a_pause_on_another_node_holds_this_node_s_hand_over_and_its_end_frees_it(nodes):
    """b pauses the tube (a knows it: a worker of a watches it): a job put on a while a's
    worker waits is not handed to that worker (a's engine installed b's pause); b's
    `pause-tube 0` then frees it at once. And a pause made on a, ended through b, frees a's
    own waiting worker (a's engine learns the end)."""
    a, b = nodes(2)
    wa, pa, cb = bean(a, "hz"), bean(a, "hz"), bean(b, "hz")
    cb.put(b"known on b")
    assert wa.reserve(timeout=5).body == b"known on b"   # a knows the tube now
    cb.pause_tube("hz", 60)
    time.sleep(0.5)   # the notice reaches a (no port to ask a's engine from here)
    got = []
    t = threading.Thread(target=lambda: got.append(wa.reserve(timeout=30)))
    t.start()
    time.sleep(0.3)   # a's worker waits
    jid = pa.put(b"put on a")
    time.sleep(1.0)
    assert got == []   # held by b's pause, not handed over
    started = time.monotonic()
    cb.pause_tube("hz", 0)
    t.join(15)
    assert got and got[0].id == jid
    assert time.monotonic() - started < 5
    wa.delete(got[0])
    # paused on a, ended on b
    jid = pa.put(b"second")
    pa.pause_tube("hz", 600)
    got = []
    t = threading.Thread(target=lambda: got.append(wa.reserve(timeout=30)))
    t.start()
    time.sleep(0.5)
    assert got == []
    started = time.monotonic()
    cb.pause_tube("hz", 0)
    t.join(15)
    assert got and got[0].id == jid
    assert time.monotonic() - started < 5


def test_delete_from_another_node(nodes):
    a, b, c = nodes(3)
    ca, cb, cc = bean(a, "dd"), bean(b, "dd"), bean(c, "dd")
    ready = ca.put(b"ready")
    cb.delete(ready)
    with pytest.raises(greenstalk.TimedOutError):
        cc.reserve(timeout=0)
    with pytest.raises(greenstalk.NotFoundError):
        cb.delete(ready)
    held = ca.put(b"held", ttr=60)
    assert cc.reserve(timeout=5).id == held
    with pytest.raises(greenstalk.NotFoundError):
        cb.delete(held)                 # reserved on c: beanstalkd's NOT_FOUND
    delayed = ca.put(b"delayed", delay=100)
    cb.delete(delayed)
    (buried,) = put_buried(ca, 1)
    cb.delete(buried)
    cc.delete(held)
    assert tube_counts(cb, "dd") == dict.fromkeys(
        ("urgent", "ready", "reserved", "delayed", "buried"), 0)


def test_delete_leaves_a_row_another_node_took_in(nodes):
    """A waiting job another node has taken in (its row names that node, in state ready,
    while a command of that node runs on it: here written so by hand) is not deleted from
    under it: NOT_FOUND, as for a reserved job; once no node holds it, delete works."""
    (a,) = nodes(1)
    ca = bean(a, "dt")
    jid = ca.put(b"x")
    held = "UPDATE jobs SET node = 'elsewhere:1:99' WHERE id = %s RETURNING id"
    assert rows(nodes.url, held, (jid,), commit=True) == [(jid,)]
    with pytest.raises(greenstalk.NotFoundError):
        ca.delete(jid)
    assert rows(nodes.url, "SELECT state FROM jobs WHERE id = %s", (jid,)) == [("ready",)]
    free = "UPDATE jobs SET node = NULL WHERE id = %s RETURNING id"
    assert rows(nodes.url, free, (jid,), commit=True) == [(jid,)]
    ca.delete(jid)
    assert rows(nodes.url, "SELECT state FROM jobs WHERE id = %s", (jid,)) == []


def test_pipelined_bury_then_kick_and_peek_see_the_node_s_own_changes(nodes):
    (a,) = nodes(1)
    ca = bean(a, "pl")
    jid = ca.put(b"p")
    ca.close()
    out = raw(a, b"use pl\r\nwatch pl\r\nreserve-with-timeout 5\r\nbury %d 1\r\nkick 1\r\n"
              b"peek-ready\r\nstats-tube nope\r\n" % jid, 9)
    assert out.split(b"\r\n")[:8] == [
        b"USING pl", b"WATCHING 2", b"RESERVED %d 1" % jid, b"p", b"BURIED", b"KICKED 1",
        b"FOUND %d 1" % jid, b"p"], out
    assert out.endswith(b"NOT_FOUND\r\n")


def test_global_forms_answer_at_once_on_a_single_server():
    """On a single server every `*_global` operation calls back before it returns, with what
    the plain operation answers (no database, no reordering)."""
    from core.api import ManualClock, Port
    p = Port.create(ManualClock(), durable=False)
    o = p.new_owner("beanstalk")
    a = p.put("t", b"a", 0, 0, 60_000, "beanstalk")
    d = p.put("t", b"d", 0, 5_000, 60_000, "beanstalk")
    got = []
    p.stats_global(got.append)
    p.queue_global("t", got.append)
    p.queue_global("nope", got.append)
    p.queue_names_global(got.append)
    p.peek_global(a, got.append)
    p.peek_ready_global("t", got.append)
    p.peek_delayed_global("t", got.append)
    p.peek_buried_global("t", got.append)
    assert got == [p.stats(), p.queue("t"), None, p.queue_names(), p.peek(a),
                   p.peek_ready("t"), p.peek_delayed("t"), None]
    got.clear()
    p.kick_global("t", 5, "beanstalk", got.append)
    p.kick_job_global(d, "beanstalk", got.append)
    p.pause_global("t", 1000, got.append)
    p.pause_global("nope", 1000, got.append)
    p.delete_global(o, a, got.append)
    p.delete_global(o, a, got.append)
    assert got == [1, False, True, False, True, False]


def test_reserve_job_of_a_job_in_the_database(nodes):
    """beanstalk `reserve-job <id>` on b of a job put on a (waiting in the database): b takes
    its row and reserves it, as a single server would; a job another node has reserved, or
    none, is NOT_FOUND."""
    a, b = nodes(2)
    ca, cb = bean(a, "rj"), bean(b, "rj")
    first = ca.put(b"one")
    second = ca.put(b"two")
    j = cb.reserve_job(second)
    assert (j.id, j.body) == (second, b"two")
    assert cb.stats_job(second)["state"] == "reserved"
    held = ca.reserve(timeout=5)
    assert held.id == first
    with pytest.raises(greenstalk.NotFoundError):
        cb.reserve_job(first)                   # reserved on a
    with pytest.raises(greenstalk.NotFoundError):
        cb.reserve_job(second + 999_999)        # no such job
    cb.delete(j)
    ca.delete(held)
    assert rows(nodes.url, "SELECT count(*) FROM jobs WHERE queue = 'rj'") == [(0,)]
