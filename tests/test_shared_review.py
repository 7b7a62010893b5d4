"""Shared mode (issue 19): regressions found by review, on real node processes (the fixture
and helpers of tests/shared_support.py). Each test failed before its fix:

- a job kept on a node for a local result waiter (workq `run`) was also claimable elsewhere
  (now the job leaves the node and its waiter waits through the database);
- claimed jobs whose waiter left before the claim returned stayed held by the node for good;
- a waiter blocked by a queue's concurrency limit made its node claim every ready row;
- a WaitJob with timeout 0 answered every other WaitJob of that job at once.
"""
from __future__ import annotations

import time

import greenstalk
import pytest

from .bunqueue_support import BQ
from .shared_support import bean, rows
from .workq_support import WorkqRaw, complete_cmd, lease_frame, new_uid, result_frame, run_cmd


def _gone(url: str, uid: str) -> bool:
    """True once job `uid` has no row (polled for up to 5 s: the delete is a statement the
    node runs after answering)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if rows(url, "SELECT count(*) FROM jobs WHERE uid = %s", (uid,))[0][0] == 0:
            return True
        time.sleep(0.05)
    return False


def test_a_run_is_served_by_a_worker_on_another_node(nodes):
    """A workq `run` on a, a worker on b: b leases the job (it left a, whose submitter waits
    through the database: the review's double delivery cannot happen, the job is in one
    place), completes it, and a's `run` answers with the result; its job is then deleted."""
    a, b = nodes(2)
    wa = WorkqRaw(a.workq_port, timeout=20)
    uid = new_uid()
    wa.send(run_cmd(uid, "rq", b"p", ttr=30000, wait=8000))   # its submitter waits on a
    wb = WorkqRaw(b.workq_port, timeout=10)
    assert wb.cmd(b"lease rq 5000\r\n") == lease_frame(uid, "rq", 30000, b"p")
    assert WorkqRaw(a.workq_port).cmd(b"lease rq 300\r\n") == b"-TIMEOUT\r\n"   # once only
    assert wb.cmd(complete_cmd(uid, b"answer")) == b"+OK\r\n"
    assert wa.reply() == result_frame(uid, True, b"answer")
    assert _gone(nodes.url, uid)


def test_a_run_times_out_or_waits_for_its_lease_across_nodes(nodes):
    """A `run` whose job nobody leases answers -TIMEOUT at its deadline and its job is
    deleted; one whose job a worker on another node leased waits past its deadline until
    that lease's, and answers the result (a single server's rules)."""
    a, b = nodes(2)
    wa = WorkqRaw(a.workq_port, timeout=20)
    lone = new_uid()
    assert wa.cmd(run_cmd(lone, "rt", b"p", ttr=5000, wait=500)) == b"-TIMEOUT\r\n"
    assert _gone(nodes.url, lone)
    held = new_uid()
    wa.send(run_cmd(held, "rt", b"q", ttr=6000, wait=1000))
    wb = WorkqRaw(b.workq_port, timeout=10)
    assert wb.cmd(b"lease rt 5000\r\n") == lease_frame(held, "rt", 6000, b"q")
    time.sleep(1.5)   # past the run's own deadline, within the lease
    assert wb.cmd(complete_cmd(held, b"late")) == b"+OK\r\n"
    assert wa.reply() == result_frame(held, True, b"late")
    assert _gone(nodes.url, held)


def test_claimed_jobs_nobody_takes_go_back(nodes):
    import psycopg
    a, b = nodes(2)
    ca, cb = bean(a, "stuck"), bean(b, "stuck")
    jid = cb.put(b"x", ttr=5)
    url = nodes.url.replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(url) as x:
        x.execute("LOCK TABLE jobs IN EXCLUSIVE MODE")   # a's claim below waits for it
        with pytest.raises(greenstalk.TimedOutError):
            ca.reserve(timeout=1)                       # a's waiter gives up meanwhile
    j = cb.reserve(timeout=8)                           # a gave the claimed job back
    assert j.id == jid


def test_a_limited_queue_claims_no_more_than_it_admits(nodes):
    a, b = nodes(2)
    qb = BQ(b.bunqueue_port)
    for i in range(50):
        qb.push("lq", {"i": i})
    qa = BQ(a.bunqueue_port)
    qa.ok("SetConcurrency", queue="lq", limit=1)
    r = qa.call("PULL", queue="lq", owner="w1", lockTtl=60000)
    assert r["job"] is not None
    qa2 = BQ(a.bunqueue_port)
    qa2.send({"cmd": "PULL", "queue": "lq", "timeout": 20000, "owner": "w2", "reqId": "x"})
    time.sleep(2)
    held = rows(nodes.url, "SELECT count(*) FROM jobs WHERE queue = 'lq' AND "
                            "state = 'reserved'")[0][0]
    assert held == 1
    # the limit counts every node's active jobs (docs/scaling.md "Concurrency limits across
    # nodes"): b's worker gets nothing while a's holds the one slot, 49 jobs waiting
    assert qb.call("PULL", queue="lq")["job"] is None
    assert rows(nodes.url, "SELECT count(*) FROM jobs WHERE queue = 'lq' AND "
                           "state = 'ready'")[0][0] == 49


def test_waitjob_timeout_0_answers_only_itself(nodes):
    a, b = nodes(2)
    jid = BQ(a.bunqueue_port).push("wq0", {"x": 1})
    w1 = BQ(b.bunqueue_port)
    w1.send({"cmd": "WaitJob", "id": jid, "timeout": 3000, "reqId": "long"})
    time.sleep(0.3)
    t0 = time.monotonic()
    assert BQ(b.bunqueue_port).call("WaitJob", id=jid, timeout=0)["completed"] is False
    r = w1.recv_reply("long", 10)
    assert r["completed"] is False and time.monotonic() - t0 > 2   # its own timeout


def test_the_first_node_creates_the_shared_indexes(nodes):
    """Migrations leave a single-node server's jobs table without secondary indexes; the
    shared mode's partial indexes come with the first node (valid, built CONCURRENTLY)."""
    from core.shared_store import SHARED_INDEXES
    nodes(1)
    found = rows(nodes.url, "SELECT x.relname, i.indisvalid FROM pg_index i JOIN pg_class x "
                            "ON x.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid "
                            "WHERE t.relname = 'jobs' AND NOT i.indisprimary")
    assert sorted(found) == sorted((name, True) for name, _ in SHARED_INDEXES)


def test_nodes_started_together_on_a_fresh_database(pg_url, tmp_path):
    """Three nodes started at the same moment on an empty database: one migrates and creates
    the shared indexes while the others wait for the join lock (by trying it: a session
    blocked in pg_advisory_lock would keep CREATE INDEX CONCURRENTLY waiting: a deadlock);
    all three serve."""
    import subprocess
    import sys

    from .support import ROOT, free_port, stop_process, wait_serving
    cfg = tmp_path / "s.yaml"
    cfg.write_text("database:\n  mode: shared\n")
    ports = [free_port() for _ in range(3)]
    procs = [subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--listen",
                               f"beanstalk=127.0.0.1:{p}", "--database", pg_url, "--config",
                               str(cfg), "--log-level", "warning"], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for p in ports]
    try:
        for p, proc in zip(ports, procs):
            wait_serving(p, proc, timeout=60)
    finally:
        for proc in procs:
            stop_process(proc)
