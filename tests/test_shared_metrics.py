"""Job counts in the metrics of a node in shared mode (issue 19; docs/metrics.md "Several
nodes"): `GET /metrics` (`jobgate_jobs`, the beanstalkd exporter's `current_jobs_*` and
`tube_*`, the bunqueue job gauges), the bunqueue `Prometheus` command and the HTTP API's
`/stats` on node a count the jobs that clients of node b put, hold and buried (rows in the
database, or held by b), while counters stay per node. Real node processes on one fresh
PostgreSQL database, real greenstalk and bunqueue sockets, real HTTP.

Needs JOBGATE_TEST_PG_URL (skipped with a clear reason without it).
"""
from __future__ import annotations

import threading
import time

import httpx
import psycopg
from prometheus_client.parser import text_string_to_metric_families

from .bunqueue_support import BQ
from .shared_support import bean


def _samples(text: str) -> dict:
    """{sample name: {frozenset(labels): value}} of a Prometheus text."""
    m: dict = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            m.setdefault(s.name, {})[frozenset(s.labels.items())] = s.value
    return m


def _val(m: dict, name: str, **labels) -> float:
    return m.get(name, {}).get(frozenset(labels.items()), 0.0)


def _b_holds_jobs(b):
    """On b: tube mq with 2 ready, 1 reserved (held by b's client) and 1 buried job; bunqueue
    queue bq with 1 prioritized and 2 waiting jobs. Returns the clients (kept open: the
    reservation lives with its connection)."""
    c = bean(b, "mq")
    for i in range(4):
        c.put(b"job %d" % i)
    c.reserve(timeout=5)
    c.bury(c.reserve(timeout=5))
    q = BQ(b.bunqueue_port)
    q.push("bq", {"n": 1}, priority=5)
    q.push("bq", {"n": 2})
    q.push("bq", {"n": 3})
    return c, q


def test_metrics_of_one_node_count_every_nodes_jobs(nodes):
    a, b = nodes(2, http=True)
    clients = _b_holds_jobs(b)
    m = _samples(httpx.get(f"http://127.0.0.1:{a.http_port}/metrics", timeout=10).text)
    assert _val(m, "jobgate_shared_counts_up") == 1
    for state, n in (("ready", 2), ("reserved", 1), ("buried", 1), ("delayed", 0)):
        assert _val(m, "jobgate_jobs", queue="mq", state=state) == n, state
    assert _val(m, "jobgate_jobs", queue="bq", state="ready") == 3
    # the beanstalkd exporter's gauges: server-wide and per tube
    assert _val(m, "current_jobs_ready") == 5
    assert _val(m, "current_jobs_reserved") == 1
    assert _val(m, "current_jobs_buried") == 1
    assert _val(m, "tube_current_jobs_ready", tube="mq") == 2
    assert _val(m, "tube_current_jobs_buried", tube="mq") == 1
    # the bunqueue series: every node's jobs, this node's counters (a beanstalk job's rank is
    # below 0, so bunqueue sees mq's ready jobs as prioritized, as on one server)
    assert _val(m, "bunqueue_jobs_prioritized") == 3
    assert _val(m, "bunqueue_jobs_waiting") == 2
    assert _val(m, "bunqueue_jobs_active") == 1
    assert _val(m, "bunqueue_queue_jobs_prioritized", queue="bq") == 1
    assert _val(m, "bunqueue_queue_jobs_waiting", queue="bq") == 2
    assert _val(m, "bunqueue_jobs_pushed_total") == 0   # b's pushes are b's counter
    mb = _samples(httpx.get(f"http://127.0.0.1:{b.http_port}/metrics", timeout=10).text)
    assert _val(mb, "bunqueue_jobs_pushed_total") == 3
    assert _val(mb, "jobgate_jobs", queue="mq", state="ready") == 2
    del clients


def test_bunqueue_prometheus_and_http_stats_count_every_nodes_jobs(nodes):
    a, b = nodes(2, http=True)
    clients = _b_holds_jobs(b)
    text = BQ(a.bunqueue_port).ok("Prometheus")["data"]["metrics"]
    m = _samples(text)
    assert _val(m, "bunqueue_jobs_prioritized") == 3
    assert _val(m, "bunqueue_jobs_dlq") == 1
    assert _val(m, "bunqueue_queue_jobs_prioritized", queue="mq") == 2
    assert _val(m, "bunqueue_queue_jobs_waiting", queue="bq") == 2
    assert _val(m, "bunqueue_queue_jobs_active", queue="mq") == 1
    assert _val(m, "bunqueue_queue_metrics_exported") == 2
    st = httpx.get(f"http://127.0.0.1:{a.http_port}/stats", timeout=10).json()["stats"]
    assert (st["waiting"], st["prioritized"], st["active"], st["dlq"]) == (2, 3, 1, 1)
    del clients


def test_the_default_queue_counts_other_nodes_jobs(nodes):
    """Queue "default" is kept by every node's connections (pinned) even with no job of its
    own: its jobs on b are in a's bunqueue gauges, per queue and in the totals, as
    GetJobCounts counts them (review of 8894686)."""
    a, b = nodes(2, http=True)
    q = BQ(b.bunqueue_port)
    q.push("default", {"n": 1}, priority=5)
    q.push("default", {"n": 2}, priority=5)
    q.push("default", {"n": 3})
    gc = BQ(a.bunqueue_port).ok("GetJobCounts", queue="default")["counts"]
    assert (gc["prioritized"], gc["waiting"]) == (2, 1)
    for node in (a, b):
        m = _samples(BQ(node.bunqueue_port).ok("Prometheus")["data"]["metrics"])
        assert (_val(m, "bunqueue_jobs_prioritized"), _val(m, "bunqueue_jobs_waiting")) == (2, 1)
        assert (_val(m, "bunqueue_queue_jobs_prioritized", queue="default"),
                _val(m, "bunqueue_queue_jobs_waiting", queue="default")) == (2, 1)
    m = _samples(httpx.get(f"http://127.0.0.1:{a.http_port}/metrics", timeout=10).text)
    assert (_val(m, "bunqueue_jobs_prioritized"), _val(m, "bunqueue_jobs_waiting")) == (2, 1)


def test_a_scrape_while_this_node_makes_queues(nodes):
    """Queues made on a while its /metrics waits for the database's counts: every scrape
    answers 200 (a queue made after the read has this node's counts; review of 8894686)."""
    a, _ = nodes(2, http=True)
    stop = threading.Event()

    def putter():
        c = bean(a, "t0")
        i = 0
        while not stop.is_set():
            i += 1
            c.use(f"t{i}")
            c.put(b"x")
    th = threading.Thread(target=putter, daemon=True)
    th.start()
    bad = []
    try:
        with httpx.Client(timeout=20) as h:
            for _ in range(150):
                r = h.get(f"http://127.0.0.1:{a.http_port}/metrics")
                if r.status_code != 200:
                    bad.append(r.status_code)
    finally:
        stop.set()
        th.join(5)
    assert not bad, f"{len(bad)} of 150 scrapes failed: {bad[:3]}"


def _lock_jobs(url: str):
    """A transaction holding ACCESS EXCLUSIVE on table jobs: the nodes' reads of it wait."""
    from sqlalchemy.engine import make_url
    u = make_url(url)
    conn = psycopg.connect(host=u.host, port=u.port, user=u.username, dbname=u.database)
    conn.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
    return conn


def test_scrapes_answer_while_the_database_does_not(nodes):
    """The jobs table locked, so a's reads of every node's counts wait: /metrics answers
    within its 5 s with this node's counts and jobgate_shared_counts_up 0, /prometheus with
    this node's counts, /stats 503 Storage unavailable; once the lock goes, /metrics counts
    every node's jobs again (review of 8894686)."""
    a, b = nodes(2, http=True)
    bean(b, "mq").put(b"x")
    base = f"http://127.0.0.1:{a.http_port}"
    lock = _lock_jobs(nodes.url)
    try:
        t0 = time.monotonic()
        r = httpx.get(f"{base}/metrics", timeout=20)
        assert r.status_code == 200 and time.monotonic() - t0 < 8
        m = _samples(r.text)
        assert _val(m, "jobgate_shared_counts_up") == 0
        assert _val(m, "jobgate_jobs", queue="mq", state="ready") == 0   # b's: not known
        t0 = time.monotonic()
        r = httpx.get(f"{base}/prometheus", timeout=20)
        assert r.status_code == 200 and time.monotonic() - t0 < 8
        assert "bunqueue_jobs_waiting 0" in r.text
        r = httpx.get(f"{base}/stats", timeout=20)
        assert (r.status_code, r.json()) == (503, {"ok": False, "error": "Storage unavailable"})
    finally:
        lock.rollback()
        lock.close()
    m = _samples(httpx.get(f"{base}/metrics", timeout=20).text)
    assert _val(m, "jobgate_shared_counts_up") == 1
    assert _val(m, "jobgate_jobs", queue="mq", state="ready") == 1
