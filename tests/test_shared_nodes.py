"""Several jobgate nodes on one PostgreSQL (issue 19, docs/scaling.md): real `jobgate serve
--database-mode shared` processes on one fresh database, real clients (greenstalk, raw workq
and bunqueue sockets). Jobs put on one node are reserved, leased and pulled on another; a
reserver blocked on one node wakes for a put on another through LISTEN/NOTIFY (the claim poll
set to a minute, so only the notification can wake it); a node killed with reservations gives
them back after their TTR, and not before; under load with three nodes and a kill -9, every
acknowledged job is delivered and none is held by two workers at once.

Needs JOBGATE_TEST_PG_URL (skipped with a clear reason without it; .ci/run sets it).
"""
from __future__ import annotations

import threading
import time

import greenstalk
import pytest

from .bunqueue_support import BQ
from .server_support import run_cli, serve_argv
from .support import Server
from .workq_support import (WorkqRaw, add_cmd, complete_cmd, lease_frame, new_uid,
                            result_frame)


@pytest.fixture
def nodes(pg_url, tmp_path):
    """`nodes(n, poll_ms=60000)`: n shared-mode nodes on one fresh database (beanstalk, workq
    and bunqueue listeners each); all stopped afterwards."""
    started: list[Server] = []

    def make(n: int, poll_ms: int = 60_000) -> list[Server]:
        cfg = tmp_path / f"shared-{poll_ms}.yaml"
        cfg.write_text(f"database:\n  mode: shared\n  poll_interval_ms: {poll_ms}\n")
        out = []
        for _ in range(n):
            s = Server(pg_url, workq=True, bunqueue=True, extra=["--config", str(cfg)])
            started.append(s)
            out.append(s)
        return out
    make.url = pg_url
    yield make
    for s in started:
        if s.proc.poll() is None:
            s.stop()


def bean(node: Server, tube: str) -> greenstalk.Client:
    """A greenstalk client of `node` using and watching only `tube`."""
    return greenstalk.Client(("127.0.0.1", node.port), encoding=None, use=tube, watch=tube)


def test_put_on_one_node_is_reserved_on_another(nodes):
    a, b = nodes(2)
    ca, cb = bean(a, "t1"), bean(b, "t1")
    jid = ca.put(b"hello \x00 bytes", ttr=60)
    job = cb.reserve(timeout=0)         # reserve-with-timeout 0: one claim round
    assert (job.id, job.body) == (jid, b"hello \x00 bytes")
    with pytest.raises(greenstalk.TimedOutError):
        ca.reserve(timeout=0)           # held on b: nobody else gets it
    cb.delete(job)
    with pytest.raises(greenstalk.TimedOutError):
        cb.reserve(timeout=0)
    # ids are unique across nodes (blocks of a sequence) and each node's are increasing
    ids_a = [ca.put(b"a") for _ in range(3)]
    ids_b = [cb.put(b"b") for _ in range(3)]
    assert ids_a == sorted(ids_a) and ids_b == sorted(ids_b)
    assert not set(ids_a) & set(ids_b)
    got = set()
    for _ in range(6):
        j = ca.reserve(timeout=1)
        got.add(j.id)
        ca.delete(j)
    assert got == set(ids_a) | set(ids_b)


def test_fifo_and_priority_across_nodes(nodes):
    a, b = nodes(2)
    ca, cb = bean(a, "t2"), bean(b, "t2")
    order = []
    for i in range(6):
        c = ca if i % 2 == 0 else cb
        order.append(c.put(b"%d" % i, priority=100))
    urgent = cb.put(b"urgent", priority=1)
    got = []
    for _ in range(7):
        j = ca.reserve(timeout=1)
        got.append(j.id)
        ca.delete(j)
    assert got == [urgent] + order   # priority first, then put order across nodes


def test_blocking_reserve_wakes_on_a_put_elsewhere(nodes):
    a, b = nodes(2)   # claim poll every 60 s: only the NOTIFY can wake b in time
    cb = bean(b, "wake")
    got = {}

    def worker():
        j = cb.reserve(timeout=20)
        got["job"] = (j.id, j.body, time.monotonic())
    t = threading.Thread(target=worker)
    t.start()
    time.sleep(0.5)   # b's reserve is waiting (nothing to observe it by over beanstalk)
    put_at = time.monotonic()
    jid = bean(a, "wake").put(b"wake up")
    t.join(15)
    assert got["job"][:2] == (jid, b"wake up")
    assert got["job"][2] - put_at < 5   # far below the 60 s poll


def test_blocking_lease_and_pull_wake_on_an_add_elsewhere(nodes):
    """workq `lease` and bunqueue `PULL` with a timeout, waiting on node b before anything is
    added, get the job a producer adds on node a (claim poll a minute: NOTIFY wakes them)."""
    a, b = nodes(2)
    wb = WorkqRaw(b.workq_port)
    wb.send(b"lease wwake 20000\r\n")
    qb = BQ(b.bunqueue_port)
    qb.send({"cmd": "PULL", "queue": "bwake", "timeout": 20000, "reqId": "p1"})
    time.sleep(0.5)   # both wait on b
    t0 = time.monotonic()
    uid = new_uid()
    assert WorkqRaw(a.workq_port).cmd(add_cmd(uid, "wwake", b"w", ttr=5000)) == b"+OK\r\n"
    jid = BQ(a.bunqueue_port).push("bwake", {"w": 1})
    assert wb.reply() == lease_frame(uid, "wwake", 5000, b"w")
    r = qb.recv_reply("p1", 10)
    assert r["ok"] is True and r["job"]["id"] == jid
    assert time.monotonic() - t0 < 5


def test_released_and_buried_jobs_go_back_to_the_pool(nodes):
    a, b = nodes(2)
    ca, cb = bean(a, "rb"), bean(b, "rb")
    jid = ca.put(b"x")
    j = cb.reserve(timeout=1)
    cb.release(j, priority=5)
    j = ca.reserve(timeout=1)           # released on b, reserved on a
    assert j.id == jid
    assert ca.stats_job(j)["releases"] == 1
    ca.bury(j)
    with pytest.raises(greenstalk.TimedOutError):
        cb.reserve(timeout=0)


def test_delayed_job_is_not_reservable_before_its_time(nodes):
    a, b = nodes(2)
    ca, cb = bean(a, "dl"), bean(b, "dl")
    put_at = time.monotonic()
    jid = ca.put(b"later", delay=2)
    with pytest.raises(greenstalk.TimedOutError):
        cb.reserve(timeout=0)
    j = cb.reserve(timeout=10)
    assert j.id == jid
    assert time.monotonic() - put_at >= 1.9


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


def test_workq_and_bunqueue_across_nodes(nodes):
    a, b = nodes(2)
    wa, wb = WorkqRaw(a.workq_port), WorkqRaw(b.workq_port)
    uid = new_uid()
    assert wa.cmd(add_cmd(uid, "wqs", b"payload", ttr=5000)) == b"+OK\r\n"
    assert wb.cmd(b"lease wqs 2000\r\n") == lease_frame(uid, "wqs", 5000, b"payload")
    assert wb.cmd(complete_cmd(uid, b"done")) == b"+OK\r\n"
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    jid = qa.push("bqs", {"n": 1})
    r = qb.pull("bqs", timeout=2000)
    assert r["job"]["id"] == jid and r["job"]["data"] == {"n": 1}
    assert qb.ok("ACK", id=jid)
    r = qb.call("PULL", queue="bqs")    # no timeout: one claim round, nothing left
    assert r["ok"] is True and r["job"] is None


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
    stored = _rows(nodes.url, "SELECT queue, id, uid, state FROM jobs WHERE queue IN "
                              "('kb', 'kw', 'kq')")
    live = {("b", r[1]) for r in stored if r[0] == "kb"} | \
        {("w" if r[0] == "kw" else "q", r[2]) for r in stored
         if r[0] != "kb" and r[3] != "completed"}
    assert not unanswered & live, f"not finished: {sorted(unanswered & live)[:10]}"
    assert all(deliveries.get(k, [None])[-1] == 1 for k in unanswered), unanswered
    for key, ds in deliveries.items():
        assert all(i == 1 for i in ds[:-1]), (key, ds)   # only the dead node's were lost


def test_single_node_server_and_shared_nodes_exclude_each_other(nodes, tmp_path):
    (a,) = nodes(1)
    r = run_cli(serve_argv("--listen", "beanstalk=127.0.0.1:0", "--database", nodes.url),
                timeout=60)
    assert r.returncode == 1
    assert b"another jobgate server is using" in r.stderr
    a.stop()
    single = Server(nodes.url)
    try:
        r = run_cli(serve_argv("--listen", "beanstalk=127.0.0.1:0", "--database", nodes.url,
                               "--database-mode", "shared"), timeout=60)
        assert r.returncode == 1
        assert b"a single-node jobgate server is using" in r.stderr
    finally:
        single.stop()


def test_shared_mode_needs_postgresql(tmp_path):
    r = run_cli(serve_argv("--listen", "beanstalk=127.0.0.1:0", "--database",
                           f"sqlite:///{tmp_path}/x.db", "--database-mode", "shared"))
    assert r.returncode == 2
    assert b"database.mode" in r.stderr and b"PostgreSQL" in r.stderr


def _leader(url: str):
    """The pid of the PostgreSQL backend holding the shared-mode leader lock, or None."""
    import sqlalchemy as sa
    eng = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with eng.connect() as c:
            return c.exec_driver_sql(
                "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a "
                "ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted AND "
                "l.classid = %s AND l.objid = %s AND l.database = "
                "(SELECT oid FROM pg_database WHERE datname = current_database())",
                (int.from_bytes(b"jglead", "big") >> 32,
                 int.from_bytes(b"jglead", "big") & 0xFFFFFFFF)).scalar()
    finally:
        eng.dispose()


def _rows(url: str, sql: str) -> list:
    """The rows of query `sql` on database `url`."""
    import sqlalchemy as sa
    eng = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with eng.connect() as c:
            return c.exec_driver_sql(sql).all()
    finally:
        eng.dispose()


def _cron_state(url: str, queue: str) -> tuple:
    """(jobs of `queue` in the database, executions of its schedule)."""
    import sqlalchemy as sa
    eng = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with eng.connect() as c:
            jobs = c.exec_driver_sql("SELECT count(*) FROM jobs WHERE queue = %s",
                                     (queue,)).scalar()
            ex = c.exec_driver_sql("SELECT executions FROM cron_schedules WHERE queue = %s",
                                   (queue,)).scalar()
        return jobs, ex
    finally:
        eng.dispose()


def test_leader_failover_keeps_cron_runs_exactly_once(nodes):
    """A repeatEvery schedule set on one node fires on the leader; the leader is killed -9;
    another node takes over within a few seconds; every run is one job (executions == jobs),
    and the runs over the whole time match its slots (none lost in the gap, none doubled)."""
    ns = nodes(3, poll_ms=200)
    pids = {s.proc.pid: s for s in ns}
    leader_app = _leader(nodes.url)
    assert leader_app is not None
    leader = pids[int(leader_app.split()[1])]   # application_name "jobgate <pid> <hex>"
    other = next(s for s in ns if s is not leader)
    every = 1000
    q = BQ(other.bunqueue_port)
    started = time.monotonic()
    q.ok("Cron", name="tick", queue="cronq", data={"n": 1}, repeatEvery=every)
    time.sleep(2.5)
    leader.kill()
    killed = time.monotonic()
    deadline = killed + 10
    while time.monotonic() < deadline:
        app = _leader(nodes.url)
        if app is not None and int(app.split()[1]) != leader.proc.pid:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("no new leader within 10 s")
    took_over = time.monotonic() - killed
    time.sleep(3.5)
    jobs, ex = _cron_state(nodes.url, "cronq")
    elapsed = time.monotonic() - started
    assert jobs == ex, (jobs, ex)           # one job per recorded run: none doubled
    slots = int(elapsed * 1000 // every)
    assert slots - 1 <= jobs <= slots, (jobs, slots, took_over)   # none lost in the gap
    assert took_over < 5


def _terminate(url: str, pid: int) -> int:
    """Terminate every PostgreSQL session of jobgate process `pid`; returns how many."""
    import sqlalchemy as sa
    eng = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with eng.connect() as c:
            n = c.exec_driver_sql(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name LIKE %s", (f"jobgate {pid} %",)).scalar()
            c.commit()
        return n
    finally:
        eng.dispose()


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
            assert _terminate(nodes.url, b.proc.pid) > 0
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


def test_result_waiters_wake_across_nodes(nodes):
    """workq `result` and bunqueue WaitJob on node b, for jobs added, leased and finished on
    node a: b's waiters answer when a's commit lands (the claim poll is a minute: only the
    jobgate_done notification wakes them)."""
    a, b = nodes(2)
    wa, wb = WorkqRaw(a.workq_port), WorkqRaw(b.workq_port)
    uid = new_uid()
    assert wa.cmd(add_cmd(uid, "res", b"p", ttr=5000)) == b"+OK\r\n"
    wb.send(b"result %s 10000\r\n" % uid.encode())
    assert wa.cmd(b"lease res 1000\r\n") == lease_frame(uid, "res", 5000, b"p")
    assert wa.cmd(complete_cmd(uid, b"the result")) == b"+OK\r\n"
    assert wb.reply() == result_frame(uid, True, b"the result")
    other = new_uid()   # no such job anywhere
    assert wb.cmd(b"result %s 1000\r\n" % other.encode()) == b"-NOT-FOUND\r\n"

    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    jid = qa.push("resq", {"n": 2})
    qb.send({"cmd": "WaitJob", "id": jid, "timeout": 10000, "reqId": "w1"})
    r = qa.pull("resq", timeout=1000)
    assert r["job"]["id"] == jid
    qa.ok("ACK", id=jid, result={"sum": 3})
    got = qb.recv_reply("w1", 10)
    assert got["ok"] is True and got["completed"] is True and got["result"] == {"sum": 3}
    assert qb.call("WaitJob", id=jid, timeout=100)["completed"] is True   # read at once


def test_ttl_eviction_in_the_database(nodes):
    """A workq job whose TTL ends unleased is evicted by the leader, whichever node added it:
    a lease on the other node then finds nothing, and its row is gone."""
    a, b = nodes(2)
    wa, wb = WorkqRaw(a.workq_port), WorkqRaw(b.workq_port)
    uid = new_uid()
    assert wa.cmd(add_cmd(uid, "ttlq", b"p", ttr=5000, ttl=800)) == b"+OK\r\n"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and _cron_state(nodes.url, "ttlq")[0]:
        time.sleep(0.1)
    assert _cron_state(nodes.url, "ttlq")[0] == 0
    assert wb.cmd(b"lease ttlq 200\r\n") == b"-TIMEOUT\r\n"


def test_job_reads_across_nodes(nodes):
    """bunqueue GetJob / GetState / GetResult and workq `inspect job` on node b name jobs that
    node a created and finished: answered from their rows."""
    a, b = nodes(2)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    jid = qa.push("readq", {"n": 5})
    assert qb.state(jid) == "waiting"
    assert qb.ok("GetJob", id=jid)["job"]["data"] == {"n": 5}
    r = qa.pull("readq", timeout=1000)
    assert r["job"]["id"] == jid
    assert qb.state(jid) == "active"
    qa.ok("ACK", id=jid, result={"ok": 1})
    deadline = time.monotonic() + 10
    while qb.state(jid) != "completed" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert qb.state(jid) == "completed"
    assert qb.ok("GetResult", id=jid)["result"] == {"ok": 1}
    assert qb.state("0190a0a0-0000-7000-8000-000000000000") == "unknown"
    wa, wb = WorkqRaw(a.workq_port), WorkqRaw(b.workq_port)
    uid = new_uid()
    assert wa.cmd(add_cmd(uid, "inspq", b"pl", ttr=5000)) == b"+OK\r\n"
    assert wb.inspect_job(uid)["name"] == "inspq"
    assert wb.inspect_job(new_uid()) is None


def test_shared_mode_refuses_what_it_cannot_do(tmp_path, pg_url):
    r = run_cli(serve_argv("--listen", "glidemq=127.0.0.1:0", "--database", pg_url,
                           "--database-mode", "shared"))
    assert r.returncode == 2
    assert b"glidemq listener is not supported in shared mode" in r.stderr
    r = run_cli(serve_argv("--listen", "beanstalk=127.0.0.1:0", "--database", pg_url,
                           "--database-mode", "shared", "--durability", "memory"))
    assert r.returncode == 2 and b"durability" in r.stderr



def test_shared_metrics(nodes, pg_url, tmp_path):
    """A node with an http listener exposes its shared-mode counters on /metrics."""
    import urllib.request

    from .support import free_port
    (a,) = nodes(1)
    http = free_port()
    cfg = tmp_path / "m.yaml"
    cfg.write_text("database:\n  mode: shared\n")
    b = Server(pg_url, extra=["--config", str(cfg), "--listen", f"http=127.0.0.1:{http}"])
    try:
        c = bean(a, "mq")
        c.put(b"x")
        j = bean(b, "mq").reserve(timeout=2)
        assert j.body == b"x"
        text = urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=5).read()
        assert b"jobgate_shared_claimed_jobs_total 1.0" in text
        assert b"jobgate_shared_leader" in text
    finally:
        b.stop()


def test_pullb_takes_a_batch_claimed_from_the_database(nodes):
    """bunqueue PULLB on node b with a timeout takes several jobs pushed on node a in one
    reply (one claim brings the batch)."""
    a, b = nodes(2)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    ids = [qa.push("pbq", {"i": i}) for i in range(5)]
    r = qb.call("PULLB", queue="pbq", count=5, timeout=2000)
    assert r["ok"] is True and [j["id"] for j in r["jobs"]] == ids


def test_workq_delete_across_nodes(nodes):
    a, b = nodes(2)
    wa, wb = WorkqRaw(a.workq_port), WorkqRaw(b.workq_port)
    uid = new_uid()
    assert wa.cmd(add_cmd(uid, "delq", b"p", ttr=5000)) == b"+OK\r\n"
    assert wb.cmd(b"delete %s\r\n" % uid.encode()) == b"+OK\r\n"
    assert wa.cmd(b"lease delq 300\r\n") == b"-TIMEOUT\r\n"
    assert wb.cmd(b"delete %s\r\n" % uid.encode()) == b"-NOT-FOUND\r\n"
