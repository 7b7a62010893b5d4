"""Job counts in the metrics of a node in shared mode (issue 19; docs/metrics.md "Several
nodes"): `GET /metrics` (`jobgate_jobs`, the beanstalkd exporter's `current_jobs_*` and
`tube_*`, the bunqueue job gauges), the bunqueue `Prometheus` command and the HTTP API's
`/stats` on node a count the jobs that clients of node b put, hold and buried (rows in the
database, or held by b), while counters stay per node. Real node processes on one fresh
PostgreSQL database, real greenstalk and bunqueue sockets, real HTTP.

Needs JOBGATE_TEST_PG_URL (skipped with a clear reason without it).
"""
from __future__ import annotations

import httpx
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
