"""bunqueue's per-process counters across the nodes of one database (issue 19; docs/mapping.md
"bunqueue counts across nodes", core/shared_figures.py): `Metrics` (totalPushed, totalPulled,
totalCompleted, totalFailed, activeConnections) and `Stats` (failed, pushPerSec, pullPerSec)
on one node add up every live node's, each node's at most a second old; a node that stops
cleanly leaves the totals; a node silent for 10 s is left out. Real node processes on one fresh
PostgreSQL database, real bunqueue sockets.

Needs JOBGATE_TEST_PG_URL (skipped with a clear reason without it).
"""
from __future__ import annotations

import time

import httpx
import psycopg
from sqlalchemy.engine import make_url

from core.shared_figures import STALE_MS, read_figures, write_figures

from .bunqueue_support import BQ
from .server_support import wait_until
from .shared_support import rows



def _totals(q: BQ) -> tuple:
    m = q.ok("Metrics")["metrics"]
    return (m["totalPushed"], m["totalPulled"], m["totalCompleted"], m["totalFailed"])


def test_metrics_and_stats_on_one_node_add_up_every_nodes_counters(nodes):
    """b pushes 3 jobs, pulls 2, ACKs one and FAILs the other for good; a pushes 1. Metrics
    and Stats on a (whose own counters are 1 push and nothing else) count b's too."""
    a, b = nodes(2)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    for i in range(3):
        qb.push("fg", {"i": i}, maxAttempts=1)
    j1 = qb.pull("fg", owner="w", lockTtl=60_000)
    j2 = qb.pull("fg", owner="w", lockTtl=60_000)
    qb.ok("ACK", id=j1["job"]["id"], token=j1["token"])
    qb.ok("FAIL", id=j2["job"]["id"], token=j2["token"], error="no")
    qa.push("fa", {})
    assert wait_until(lambda: _totals(qa) == (4, 2, 1, 1), 8, what="a's Metrics to count b's")
    assert wait_until(lambda: _totals(qb) == (4, 2, 1, 1), 8,
                      what="b's Metrics to count a's push")
    m = qa.ok("Metrics")["metrics"]
    assert m["activeConnections"] == 2       # qa on a, qb on b
    st = qa.call("Stats")["stats"]
    assert st["failed"] == 1
    assert st["pullPerSec"] > 0              # a pulled nothing itself
    assert st["pushPerSec"] > 0
    assert (st["waiting"], st["completed"], st["dlq"]) == (2, 1, 1)


def test_a_stall_failure_counts_once(nodes):
    """A job whose lock expires at its last attempt fails by the stall policy: the node's
    Metrics count it once (the node's TCP listener and HTTP API both read the engine's stall
    count; only the listener's figures carry it: review of b4f93b0)."""
    (a,) = nodes(1)
    q = BQ(a.bunqueue_port)
    id = q.push("fst", {}, maxAttempts=1)
    q.pull("fst", owner="w", lockTtl=200)
    assert wait_until(lambda: q.state(id) == "failed", 8, what="the lock to expire")
    assert _totals(q)[3] == 1
    assert q.call("Stats")["stats"]["failed"] == 1


def test_a_node_that_stops_cleanly_leaves_the_totals(nodes):
    a, b = nodes(2)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    qb.push("fs", {})
    qb.push("fs", {})
    assert wait_until(lambda: _totals(qa)[0] == 2, 8, what="b's pushes on a")
    qb.close()
    b.stop()
    assert _totals(qa)[0] == 0
    assert qa.ok("Metrics")["metrics"]["activeConnections"] == 1


def test_a_killed_node_leaves_the_totals_and_its_rows_go(nodes):
    """b is killed (no clean stop): a's Metrics leave b's pushes out once they are 10 s old,
    and the leader deletes b's figure rows when it finds b gone (core/shared_duties.py
    release_gone)."""
    a, b = nodes(2)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    qb.push("fk", {})

    def numbers() -> set:
        return {k.split(":")[1] for (k,) in rows(
            nodes.url, "SELECT key FROM jobgate_meta WHERE key LIKE %s", ("fig:%",))}
    assert wait_until(lambda: _totals(qa)[0] == 1, 8, what="b's push on a")
    assert len(numbers()) == 2
    b.kill()
    assert wait_until(lambda: _totals(qa)[0] == 0, 20, what="b's figures left out")
    assert wait_until(lambda: len(numbers()) == 1, 20, what="b's figure rows deleted")


def test_figures_older_than_the_staleness_bound_are_left_out(pg_url):
    """read_figures on a migrated database: node 7 wrote 11 s ago (left out: gone without a
    clean stop), node 8 just now, node 9 is the reader (its own come from its providers)."""
    import sqlalchemy as sa

    from migrations import upgrade
    eng = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    upgrade(eng)
    eng.dispose()
    u = make_url(pg_url)
    now = int(time.time() * 1000)
    with psycopg.connect(host=u.host, port=u.port, user=u.username, dbname=u.database) as c:
        write_figures(c, 7, {"bunqueue.pushed": 5}, now - STALE_MS - 1000)
        write_figures(c, 8, {"bunqueue.pushed": 6, "bunqueue.failed": 2, "other.x": 1}, now)
        write_figures(c, 9, {"bunqueue.pushed": 7}, now)
        write_figures(c, 8, {"bunqueue.pushed": 9, "bunqueue.failed": 2, "other.x": 1}, now)
        assert read_figures(c, 9, "bunqueue", now) == [{"pushed": 9, "failed": 2, "at": now}]
        assert read_figures(c, 9, "other", now) == [{"x": 1, "at": now}]
        assert read_figures(c, 9, "none", now) == []
        assert read_figures(c, 8, "bunqueue", now) == [{"pushed": 7, "at": now}]
        # beyond a bigint: clamped, not an error
        write_figures(c, 8, {"bunqueue.pushed": 2 ** 70}, now)
        assert read_figures(c, 9, "bunqueue", now)[0]["pushed"] == 2 ** 63 - 1


def _http_stats(node) -> dict:
    return httpx.get(f"http://127.0.0.1:{node.http_port}/stats", timeout=10).json()["stats"]


def test_every_listener_of_every_node_counts_alike(nodes):
    """a pushes 2 jobs over TCP, b 1 over TCP and 1 through its HTTP API: bunqueue Metrics
    and the HTTP API's /stats agree on 4 pushes on both nodes (each node's TCP listener and
    HTTP API count together, review of 5630da4); /stats' completePerSec is a rate of the
    nodes' own uptimes (b completed one job); a's activeConnections is its TCP client's only
    (the HTTP API's sessions are per principal and stay: review of b4f93b0)."""
    a, b = nodes(2, http=True)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    qa.push("fh", {})
    qa.push("fh", {})
    qb.push("fh", {})
    r = httpx.post(f"http://127.0.0.1:{b.http_port}/queues/fh/jobs", json={"data": {}},
                   timeout=10)
    assert r.json()["ok"] is True
    j = qb.pull("fh", owner="w", lockTtl=60_000)
    qb.ok("ACK", id=j["job"]["id"], token=j["token"])
    for q in (qa, qb):
        assert wait_until(lambda: _totals(q)[:3] == (4, 1, 1), 8,
                          what="Metrics to count 4 pushes")
    for node in (a, b):
        assert wait_until(lambda: _http_stats(node)["totalPushed"] == 4, 8,
                          what="/stats to count 4")
        st = _http_stats(node)
        assert (st["totalPulled"], st["totalCompleted"]) == (1, 1)
        # 1 job over b's uptime (over 0.1 s when it wrote it), not over 0.001 s
        assert 0 < st["completePerSec"] <= 10
    assert wait_until(lambda: qa.ok("Metrics")["metrics"]["activeConnections"] == 2, 8,
                      what="a's Metrics to count qa on a and qb on b only")
