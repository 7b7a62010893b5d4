"""Several jobgate nodes on one PostgreSQL (issue 19, docs/scaling.md): real `jobgate serve
--database-mode shared` processes on one fresh database, real clients (greenstalk, raw workq
and bunqueue sockets). Jobs put on one node are reserved, leased and pulled on another; a
reserver blocked on one node wakes for a put on another through LISTEN/NOTIFY (the claim poll
set to a minute, so only the notification can wake it); results, job reads, deletes, TTL,
metrics and refusals across nodes. The fault tests are in tests/test_shared_faults.py; the
fixture and helpers in tests/shared_support.py.

Needs JOBGATE_TEST_PG_URL (skipped with a clear reason without it; .ci/run sets it).
"""
from __future__ import annotations

import threading
import time

import greenstalk
import pytest

from .bunqueue_support import BQ
from .server_support import run_cli, serve_argv
from .shared_support import bean, cron_state, rows
from .support import Server
from .workq_support import (WorkqRaw, add_cmd, complete_cmd, lease_frame, new_uid,
                            result_frame)


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
    while time.monotonic() < deadline and cron_state(nodes.url, "ttlq")[0]:
        time.sleep(0.1)
    assert cron_state(nodes.url, "ttlq")[0] == 0
    assert wb.cmd(b"lease ttlq 200\r\n") == b"-TIMEOUT\r\n"
    # its history row as a single server writes it (core/outcomes.py: dialect "jobgate")
    assert rows(nodes.url, "SELECT dialect, uid FROM job_events WHERE event = 'ttl-evict'") \
        == [("jobgate", uid)]


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


def test_a_queue_a_claim_found_empty_is_claimed_again_only_when_notified(nodes, pg_url,
                                                                         tmp_path):
    """A reserver starting to wait for a queue that the last claim found empty, with no
    notification since, runs no claim (the queue's next ready row NOTIFYs it); a probe
    (reserve-with-timeout 0) still claims, and a put on another node wakes the waiter."""
    import urllib.request

    from .support import free_port
    (a,) = nodes(1)
    http = free_port()
    cfg = tmp_path / "e.yaml"
    cfg.write_text("database:\n  mode: shared\n  poll_interval_ms: 60000\n")
    b = Server(pg_url, extra=["--config", str(cfg), "--listen", f"http=127.0.0.1:{http}"])

    def claims() -> float:
        text = urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=5).read()
        line = [x for x in text.splitlines() if x.startswith(b"jobgate_shared_claims_total ")]
        return float(line[0].split()[1])
    try:
        cb = bean(b, "ez")
        with pytest.raises(greenstalk.TimedOutError):
            cb.reserve(timeout=1)      # claims once: nothing there
        first = claims()
        assert first >= 1
        with pytest.raises(greenstalk.TimedOutError):
            cb.reserve(timeout=1)      # the queue was found empty, nothing notified since
        assert claims() == first
        with pytest.raises(greenstalk.TimedOutError):
            cb.reserve(timeout=0)      # a probe claims all the same
        assert claims() == first + 1
        jid = bean(a, "ez").put(b"e")  # spilled on a: NOTIFY, b claims for its waiter
        j = cb.reserve(timeout=5)
        assert (j.id, j.body) == (jid, b"e")
        assert claims() >= first + 2
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


def test_workq_delete_of_a_job_leased_on_another_node(nodes):
    """A job leased through a, deleted through b: the delete runs on a (which holds it), so
    a's later complete answers -NOT-FOUND as on one server (the row was deleted behind a's
    back, and a answered +OK for a job that was gone); nobody leases it again."""
    a, b = nodes(2)
    wa, wb = WorkqRaw(a.workq_port), WorkqRaw(b.workq_port)
    uid = new_uid()
    assert wa.cmd(add_cmd(uid, "dlq", b"p", ttr=5000)) == b"+OK\r\n"
    assert wa.cmd(b"lease dlq 2000\r\n") == lease_frame(uid, "dlq", 5000, b"p")
    assert wb.cmd(b"delete %s\r\n" % uid.encode()) == b"+OK\r\n"
    assert wa.cmd(complete_cmd(uid, b"r")) == b"-NOT-FOUND\r\n"
    assert wb.cmd(b"lease dlq 300\r\n") == b"-TIMEOUT\r\n"
    assert wb.cmd(b"delete %s\r\n" % uid.encode()) == b"-NOT-FOUND\r\n"


def test_workq_delete_of_another_dialect_s_job_across_nodes(nodes):
    """A bunqueue job (its id a UUIDv7, not workq's v4) waiting in the database, deleted
    through another node's workq: +OK and the row is gone, as one server deletes it (it
    answered +OK and left the row: a v4 id's rule, +OK for an id nobody has, came first)."""
    from .bunqueue_support import BQ
    a, b = nodes(2)
    x = BQ(a.bunqueue_port).push("v7q", {})
    held = BQ(a.bunqueue_port).push("v7q", {})
    wb = WorkqRaw(b.workq_port)
    assert wb.cmd(b"delete %s\r\n" % x.encode()) == b"+OK\r\n"
    assert rows(nodes.url, "SELECT count(*) FROM jobs WHERE uid = %s", (x,)) == [(0,)]
    assert wb.cmd(b"delete %s\r\n" % x.encode()) == b"+OK\r\n"   # nobody has it: +OK
    worker = BQ(a.bunqueue_port)   # kept open: a closing connection gives its job back
    assert worker.pull("v7q", timeout=2000)["job"]["id"] == held
    assert wb.cmd(b"delete %s\r\n" % held.encode()) == b"+OK\r\n"   # active on a: runs there
    assert rows(nodes.url, "SELECT count(*) FROM jobs WHERE uid = %s", (held,)) == [(0,)]
