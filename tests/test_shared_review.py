"""Shared mode (issue 19): regressions found by review, on real node processes (the fixture
and helpers of tests/shared_support.py). Each test failed before its fix:

- a job kept on a node for a local result waiter (workq `run`) was also claimable elsewhere;
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
from .workq_support import WorkqRaw, lease_frame, new_uid, run_cmd


def test_a_run_job_is_not_claimable_on_another_node(nodes):
    a, b = nodes(2)
    wb = WorkqRaw(b.workq_port, timeout=10)
    wb.send(b"lease rq 2000\r\n")            # waits on b
    time.sleep(0.5)
    wa = WorkqRaw(a.workq_port, timeout=20)
    uid = new_uid()
    wa.send(run_cmd(uid, "rq", b"p", ttr=30000, wait=8000))   # its submitter waits on a
    assert wb.reply() == b"-TIMEOUT\r\n"     # the job stays with the node of its `run`
    assert WorkqRaw(a.workq_port).cmd(b"lease rq 2000\r\n") == lease_frame(uid, "rq", 30000,
                                                                           b"p")


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
    assert qb.call("PULL", queue="lq")["job"] is not None


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


def test_flows_and_dependencies_are_refused_in_shared_mode(nodes):
    """A parent waiting for children finished on other nodes is not released yet
    (docs/scaling.md): flows and dependsOn answer an error instead of parking jobs for good."""
    (a,) = nodes(1)
    q = BQ(a.bunqueue_port)
    jid = q.push("fq", {"x": 1})
    msg = "Flows and job dependencies are not supported in shared mode (docs/scaling.md)"
    assert q.call("PUSH", queue="fq", data={}, dependsOn=[jid]) == {"ok": False, "error": msg}
    r = q.call("PUSHF", jobs=[{"id": "p", "queue": "fq", "input": {"name": "p", "data": {}}}])
    assert r == {"ok": False, "error": msg}
    r = q.call("PUSHB", queue="fq", jobs=[{"name": "c", "data": {}, "dependsOn": [jid]}])
    assert r["ok"] is False and msg in r["error"]


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
