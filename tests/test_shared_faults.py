"""Shared mode under faults (issue 19, docs/scaling.md "Failure modes"): real node
processes on one fresh PostgreSQL database (tests/shared_support.py). A node killed -9 with
reservations gives them back after their TTR and not before; three nodes under load with
producers and workers of every dialect lose no acknowledged job when one is killed, and no job
is held by two workers at once; the leader killed while a cron schedule runs: no run lost or
doubled; every session of a node terminated under load: it recovers, and no job is held
twice before its deadline.
"""
from __future__ import annotations

import os
import signal
import threading
import time

import greenstalk
import pytest

from .bunqueue_support import BQ
from .shared_support import bean, cron_state, leader_app, rows, terminate
from .workq_support import WorkqRaw, add_cmd, complete_cmd, new_uid


def test_dead_node_reservations_come_back_after_their_ttr(nodes):
    a, b, c = nodes(3, poll_ms=200)
    ca = bean(a, "dead")
    jid = ca.put(b"held", ttr=3)
    j = bean(b, "dead").reserve(timeout=1)
    assert j.id == jid
    killed_at = time.monotonic()
    b.kill()
    cc = bean(c, "dead")
    with pytest.raises(greenstalk.TimedOutError):
        cc.reserve(timeout=1)           # still within its TTR: nobody gets it
    j = cc.reserve(timeout=20)
    assert j.id == jid and j.body == b"held"
    assert time.monotonic() - killed_at >= 2.5
    assert cc.stats_job(j)["timeouts"] == 1


def test_rows_a_gone_node_held_without_a_reservation_come_back(nodes):
    """A row that a killed node held without a reservation (a job it had taken for a command,
    core/shared_calls.py) is claimable by nobody while that node may live, and given back by
    the leader once the node's liveness lock stayed free for GONE_ROUNDS rescue rounds. The
    state a kill -9 leaves is written here directly (a node holds such a row for a few
    milliseconds only): the row held by node number 987654, and that node's commit mark."""
    a, b = nodes(2, poll_ms=200)
    jid = bean(a, "ghost").put(b"left")
    cb = bean(b, "ghost")
    j = cb.reserve(timeout=5)
    cb.release(j)                                   # back in the database: ready, no node
    rows(nodes.url, "UPDATE jobs SET node = 'gone-host:1:987654' WHERE id = %s RETURNING id",
         (jid,), commit=True)
    rows(nodes.url, "INSERT INTO jobgate_meta (key, value) VALUES ('commit_seq:987654', 7) "
         "RETURNING key", commit=True)
    with pytest.raises(greenstalk.TimedOutError):
        cb.reserve(timeout=2)                       # held: nobody may claim it yet
    j = cb.reserve(timeout=20)
    assert j.id == jid and j.body == b"left"
    assert rows(nodes.url, "SELECT node FROM jobs WHERE id = %s", (jid,))[0][0] is not None


def test_three_nodes_kill9_under_load(nodes):
    """Producers and workers of all three dialects spread over three nodes, node 2 killed -9
    midway: every acknowledged job is delivered and finished (beanstalk delete, workq
    complete, bunqueue ACK); a job delivered twice was first held on the killed node."""
    ns = nodes(3, poll_ms=200)
    acked: set = set()        # (dialect, id) of acknowledged adds
    deliveries: dict = {}     # (dialect, id) -> [node index of each delivery]
    finished: set = set()
    lock = threading.Lock()
    stop = threading.Event()
    errors = (OSError, ConnectionError, EOFError, greenstalk.Error)

    def note(key, i):
        with lock:
            deliveries.setdefault(key, []).append(i)

    def done(key):
        with lock:
            finished.add(key)

    def producer(i, count):
        c, w, q = bean(ns[i], "kb"), WorkqRaw(ns[i].workq_port), BQ(ns[i].bunqueue_port)
        for k in range(count):
            try:
                jid = c.put(b"job %d %d" % (i, k), ttr=2)
                with lock:
                    acked.add(("b", jid))
                uid = new_uid()
                if w.cmd(add_cmd(uid, "kw", b"w", ttr=2000)) == b"+OK\r\n":
                    with lock:
                        acked.add(("w", uid))
                bid = q.push("kq", {"k": k})
                with lock:
                    acked.add(("q", bid))
            except errors:
                return

    def bean_worker(i):
        try:
            c = bean(ns[i], "kb")
            while not stop.is_set():
                try:
                    j = c.reserve(timeout=1)
                except greenstalk.TimedOutError:
                    continue
                note(("b", j.id), i)
                c.delete(j)
                done(("b", j.id))
        except errors:
            return

    def workq_worker(i):
        try:
            w = WorkqRaw(ns[i].workq_port)
            while not stop.is_set():
                r = w.cmd(b"lease kw 1000\r\n")
                if not r.startswith(b"+OK 1"):
                    continue
                uid = r.split(b"\r\n")[1].split(b" ")[0].decode()
                note(("w", uid), i)
                assert w.cmd(complete_cmd(uid, b"r")) == b"+OK\r\n"
                done(("w", uid))
        except errors:
            return

    def bq_worker(i):
        try:
            q = BQ(ns[i].bunqueue_port)
            while not stop.is_set():
                r = q.call("PULL", queue="kq", timeout=1000, owner=f"w{i}", lockTtl=2000)
                job = r.get("job")
                if not job:
                    continue
                note(("q", job["id"]), i)
                q.ok("ACK", id=job["id"], token=r.get("token"))
                done(("q", job["id"]))
        except errors:
            return

    workers = [threading.Thread(target=fn, args=(i,)) for i in range(3)
               for fn in (bean_worker, workq_worker, bq_worker)]
    for t in workers:
        t.start()
    producers = [threading.Thread(target=producer, args=(i, 150)) for i in (0, 2)]
    for t in producers:
        t.start()
    time.sleep(0.7)
    ns[1].kill()
    for t in producers:
        t.join(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with lock:
            if acked <= finished:
                break
        time.sleep(0.2)
    stop.set()
    for t in workers:
        t.join(10)
    assert len(acked) == 900
    # a job finished on the killed node whose reply died with it is finished all the same:
    # its row is gone (beanstalk delete) or completed (workq complete, bunqueue ACK)
    unanswered = acked - finished
    stored = rows(nodes.url, "SELECT queue, id, uid, state FROM jobs WHERE queue IN "
                              "('kb', 'kw', 'kq')")
    live = {("b", r[1]) for r in stored if r[0] == "kb"} | \
        {("w" if r[0] == "kw" else "q", r[2]) for r in stored
         if r[0] != "kb" and r[3] != "completed"}
    assert not unanswered & live, f"not finished: {sorted(unanswered & live)[:10]}"
    assert all(deliveries.get(k, [None])[-1] == 1 for k in unanswered), unanswered
    for key, ds in deliveries.items():
        assert all(i == 1 for i in ds[:-1]), (key, ds)   # only the dead node's were lost


def test_leader_failover_keeps_cron_runs_exactly_once(nodes):
    """A repeatEvery schedule set on one node fires on the leader; the leader is killed -9;
    another node takes over within a few seconds; every run is one job (executions == jobs),
    and the runs over the whole time match its slots (none lost in the gap, none doubled)."""
    ns = nodes(3, poll_ms=200)
    pids = {s.proc.pid: s for s in ns}
    app = leader_app(nodes.url)
    assert app is not None
    leader = pids[int(app.split()[1])]   # application_name "jobgate <pid> <hex>"
    other = next(s for s in ns if s is not leader)
    every = 1000
    q = BQ(other.bunqueue_port)
    started = time.monotonic()
    # preventOverlap off: every run makes a job although nobody takes them (the overlap rule
    # across nodes: test_shared_nodes.py test_cron_prevent_overlap_across_nodes)
    q.ok("Cron", name="tick", queue="cronq", data={"n": 1}, repeatEvery=every,
         preventOverlap=False)
    time.sleep(2.5)
    leader.kill()
    killed = time.monotonic()
    deadline = killed + 10
    while time.monotonic() < deadline:
        app = leader_app(nodes.url)
        if app is not None and int(app.split()[1]) != leader.proc.pid:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("no new leader within 10 s")
    took_over = time.monotonic() - killed
    time.sleep(3.5)
    jobs, ex = cron_state(nodes.url, "cronq")
    elapsed = time.monotonic() - started
    assert jobs == ex, (jobs, ex)           # one job per recorded run: none doubled
    slots = int(elapsed * 1000 // every)
    assert slots - 1 <= jobs <= slots, (jobs, slots, took_over)   # none lost in the gap
    assert took_over < 5


def test_terminated_connections_mid_load(nodes):
    """Every database session of node b is terminated twice while workers on both nodes
    reserve, hold and delete jobs (TTR 3 s, touched while held): b recovers (its puts and
    reserves work again), every job is deleted, and no job is ever held by two workers
    before its deadline."""
    a, b = nodes(2, poll_ms=200)
    tube = "term"
    ttr = 3
    held: dict = {}        # id -> (worker, deadline) of the current holder
    overlaps: list = []
    done: set = set()
    lock = threading.Lock()
    stop = threading.Event()

    def worker(w, node):
        c = None
        while not stop.is_set():
            try:
                if c is None:
                    c = bean(node, tube)
                j = c.reserve(timeout=1)
            except greenstalk.TimedOutError:
                continue
            except (OSError, greenstalk.Error, ConnectionError):
                c = None
                time.sleep(0.1)
                continue
            now = time.monotonic()
            with lock:
                prev = held.get(j.id)
                if prev is not None and prev[1] > now + 0.2:
                    overlaps.append((j.id, prev, w))
                held[j.id] = (w, now + ttr)
            try:
                time.sleep(0.05)
                c.touch(j)
                with lock:
                    held[j.id] = (w, time.monotonic() + ttr)
                time.sleep(0.05)
                c.delete(j)
                with lock:
                    done.add(j.id)
                    held.pop(j.id, None)
            except (OSError, greenstalk.Error, ConnectionError):
                c = None

    workers = [threading.Thread(target=worker, args=(w, (a, b)[w % 2])) for w in range(8)]
    for t in workers:
        t.start()
    ids = []
    ca, cb = bean(a, tube), bean(b, tube)
    for k in range(200):
        ids.append(ca.put(b"a%d" % k, ttr=ttr))
        if k in (60, 120):
            assert terminate(nodes.url, b.proc.pid) > 0
        while True:   # b's put: answered after its commit, or its server error meanwhile
            try:
                ids.append(cb.put(b"b%d" % k, ttr=ttr))
                break
            except (greenstalk.Error, OSError, ConnectionError):
                time.sleep(0.1)
                cb = bean(b, tube)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not set(ids) <= done:
        time.sleep(0.2)
    stop.set()
    for t in workers:
        t.join(10)
    assert set(ids) <= done, f"{len(set(ids) - done)} never deleted"
    assert overlaps == []
    assert b.proc.poll() is None
    _, err = b.stop()
    assert b"listener lost its session" in err   # the fault did happen, and was survived


def _stop_inside_a_claim(url: str, pid: int) -> int:
    """SIGSTOP node process `pid` at a moment when one of its database sessions is inside a
    claim (between its UPDATE ... RETURNING and its COMMIT): returns that session's backend
    pid. A statement PostgreSQL is running when the node stops ends on its own; the session
    then waits, idle in the transaction, for the frozen node."""
    q = ("SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s "
         "AND state LIKE 'idle in transaction%%' AND query LIKE 'WITH w AS%%'")
    for _ in range(2000):
        os.kill(pid, signal.SIGSTOP)
        time.sleep(0.02)
        found = rows(url, q, (f"jobgate {pid} %",))
        if found:
            return found[0][0]
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.005)
    raise AssertionError(f"node {pid} was never caught inside a claim")


def _locked(url: str, tube: str) -> set:
    """Ids of the jobs of `tube` whose rows another session has locked."""
    import psycopg
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql")) as c:
        every = {r[0] for r in c.execute("SELECT id FROM jobs WHERE queue = %s", (tube,))}
        free = {r[0] for r in c.execute("SELECT id FROM jobs WHERE queue = %s "
                                        "FOR SHARE SKIP LOCKED", (tube,))}
        c.rollback()
    return every - free


def test_a_node_frozen_inside_a_claim_lets_go_of_its_rows(nodes):
    """A worker on a reserves and deletes what a producer puts through b; a is frozen
    (SIGSTOP, as a stalled VM) inside a claim, whose rows stay locked (other nodes' claims
    skip them, a concurrency-limit take waits): PostgreSQL ends that session after
    database.idle_in_transaction_ms (here 1000; before, it waited for ever:
    docs/scaling.md "Failure modes"), and the rows are free again while a is still
    stopped. Once a runs again it recovers: every job put is deleted and no row is left."""
    a, b = nodes(2, poll_ms=200, idle_in_transaction_ms=1000)
    tube = "frozen"
    done: set = set()
    stop = threading.Event()

    def worker() -> None:
        c = bean(a, tube)
        while not stop.is_set():
            try:
                j = c.reserve(timeout=1)
            except greenstalk.TimedOutError:
                continue
            except (OSError, greenstalk.Error, ConnectionError):
                time.sleep(0.1)
                c = bean(a, tube)
                continue
            try:
                c.delete(j)
                done.add(j.id)
            except (OSError, greenstalk.Error, ConnectionError):
                c = bean(a, tube)

    def producer() -> None:
        c = bean(b, tube)
        while not stop.is_set() and len(ids) < 3000:
            ids.append(c.put(b"x"))

    ids: list = []
    threads = [threading.Thread(target=worker), threading.Thread(target=producer)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)
        backend = _stop_inside_a_claim(nodes.url, a.proc.pid)
        try:
            claimed = _locked(nodes.url, tube)
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline and rows(
                    nodes.url, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (backend,)):
                time.sleep(0.1)
            still = rows(nodes.url, "SELECT state, query FROM pg_stat_activity WHERE pid = %s",
                         (backend,))
            locked_after = _locked(nodes.url, tube) & claimed
        finally:
            os.kill(a.proc.pid, signal.SIGCONT)
        assert claimed, "the frozen claim held no row"
        assert still == [], f"the frozen node's session is still there: {still}"
        assert locked_after == set(), f"rows still locked: {sorted(locked_after)}"
        time.sleep(1.0)
    finally:
        stop.set()
        for t in threads:
            t.join(15)
    assert ids
    deadline = time.monotonic() + 30
    stop.clear()
    t = threading.Thread(target=worker)
    t.start()
    while time.monotonic() < deadline and not set(ids) <= done:
        time.sleep(0.2)
    stop.set()
    t.join(10)
    assert set(ids) <= done, f"{len(set(ids) - done)} of {len(ids)} never deleted"
    assert rows(nodes.url, "SELECT count(*) FROM jobs WHERE queue = %s", (tube,)) == [(0,)]
    assert a.proc.poll() is None
