"""Prometheus metrics (gateway/metrics.py, gateway/metrics_export.py, docs/metrics.md): a real
server on a manual clock (tests/inproc.py: real sockets, a real SQLite file), traffic from
greenstalk (beanstalk), a raw workq client, a raw bunqueue TCP client and httpx; `GET /metrics`
scraped over HTTP and parsed with prometheus_client's own parser.

- jobgate_* counters and gauges equal what the traffic did: commands per dialect, events per
  queue and dialect (and, after the server stopped, exactly the job_events history rows),
  jobs per state, wait / run histogram counts and sums (the clock is moved, never slept on),
  connections, storage up, commit histograms (one observation per committed batch);
- the beanstalkd exporter's names (`cmd_put`, `tube_current_jobs_buried{tube}`) and bunqueue's
  (`bunqueue_uptime_seconds`, `bunqueue_queue_jobs_dlq{queue}`) with the right values;
- an overflowing feed subscription counts in jobgate_event_feed_overflows_total;
- `/metrics` needs no token, as `/prometheus`; `/prometheus` stays bunqueue's text alone;
- glide-mq's commands count under Redis names, FCALL under the function's name;
- `jobgate serve` from the command line answers `/metrics`.
"""
from __future__ import annotations

import sqlite3

import greenstalk
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.metrics_export import Exporter

from .bunqueue_support import BQ
from .inproc import InProcServer
from .workq_support import WorkqRaw, add_cmd, complete_cmd, fail_cmd, new_uid

DIALECTS = ("beanstalk", "workq", "bunqueue", "http")


def scrape(client: httpx.Client) -> dict:
    """GET /metrics -> {sample name: {frozenset of label items: value}}."""
    r = client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    out: dict = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            out.setdefault(s.name, {})[frozenset(s.labels.items())] = s.value
    return out


def val(m: dict, name: str, **labels) -> float:
    """The value of sample `name` with exactly `labels` (0 when absent)."""
    return m.get(name, {}).get(frozenset(labels.items()), 0.0)


def by(m: dict, name: str, **fixed) -> dict:
    """{the remaining label's value: value} of the samples of `name` with `fixed` labels."""
    out = {}
    for labels, v in m.get(name, {}).items():
        d = dict(labels)
        if all(d.get(k) == x for k, x in fixed.items()):
            rest = {k: x for k, x in d.items() if k not in fixed}
            assert len(rest) == 1, rest
            out[next(iter(rest.values()))] = v
    return out


@pytest.fixture
def server(tmp_path):
    s = InProcServer(f"sqlite:///{tmp_path / 'jobgate.db'}", dialects=DIALECTS)
    s.db = tmp_path / "jobgate.db"
    yield s
    s.stop()


@pytest.fixture
def http(server):
    with httpx.Client(base_url=f"http://127.0.0.1:{server.ports['http']}", timeout=10) as c:
        yield c


def traffic(srv) -> dict:
    """Every dialect's traffic on the manual clock; returns the open clients."""
    g = greenstalk.Client(("127.0.0.1", srv.ports["beanstalk"]), use="bt", watch="bt")
    for body in ("b1", "b2", "b3"):
        g.put(body)
    wq = WorkqRaw(srv.ports["workq"])
    u1, u2 = new_uid(), new_uid()
    assert wq.cmd(add_cmd(u1, "wq", b"w1")) == b"+OK\r\n"
    assert wq.cmd(add_cmd(u2, "wq", b"w2")) == b"+OK\r\n"
    bq = BQ(srv.ports["bunqueue"])
    bq.push("bq", "q1")
    bq.push("bq", "q2", maxAttempts=1)
    srv.advance(1000)
    # beanstalk: waits 1.0, 1.2, 1.5 s; runs 0.2, 0.3, 0 (release) and 0 s
    j = g.reserve()
    srv.advance(200)
    g.delete(j)
    j = g.reserve()
    srv.advance(300)
    g.bury(j)
    j = g.reserve()
    g.release(j)
    j = g.reserve()
    g.delete(j)
    # workq (at +1.5 s): waits 1.5, 1.6 s; runs 0.1, 0 s; one completed, one failed for good
    assert wq.cmd(b"lease wq 0\r\n").startswith(b"+OK 1\r\n" + u1.encode())
    srv.advance(100)
    assert wq.cmd(complete_cmd(u1, b"done")) == b"+OK\r\n"
    assert wq.cmd(b"lease wq 0\r\n").startswith(b"+OK 1\r\n" + u2.encode())
    assert wq.cmd(fail_cmd(u2, b"bad")) == b"+OK\r\n"
    # bunqueue (at +1.6 s): waits 1.6, 2.0 s; runs 0.4, 0 s; one completed, one in the DLQ
    a = bq.pull("bq")["job"]
    srv.advance(400)
    assert bq.call("ACK", id=a["id"])["ok"] is True
    b = bq.pull("bq")["job"]
    assert bq.call("FAIL", id=b["id"], error="boom")["ok"] is True
    return {"g": g, "wq": wq, "bq": bq}


def test_counters_and_gauges_equal_the_traffic(server, http):
    clients = traffic(server)
    m = scrape(http)

    ops = {d: by(m, "jobgate_operations_total", dialect=d) for d in DIALECTS}
    assert {k: v for k, v in ops["beanstalk"].items() if v} == {
        "use": 1, "watch": 1, "ignore": 1, "put": 3, "reserve": 4, "delete": 2, "bury": 1,
        "release": 1}
    assert ops["workq"] == {"add": 2, "lease": 2, "complete": 1, "fail": 1}
    assert ops["bunqueue"] == {"PUSH": 2, "PULL": 2, "ACK": 1, "FAIL": 1}
    assert ops["http"] == {}   # /metrics runs no bunqueue command

    ev = {(d["queue"], d["dialect"], d["event"]): v
          for d, v in ((dict(k), v) for k, v in m["jobgate_job_events_total"].items())}
    assert {k: v for k, v in ev.items() if k[0] == "bt"} == {
        ("bt", "beanstalk", "put"): 3, ("bt", "beanstalk", "reserve"): 4,
        ("bt", "beanstalk", "delete"): 2, ("bt", "beanstalk", "bury"): 1,
        ("bt", "beanstalk", "release"): 1}
    assert ev[("wq", "workq", "add")] == 2 and ev[("wq", "workq", "reserve")] == 2
    assert ev[("wq", "workq", "complete")] == 1 and ev[("wq", "workq", "fail")] == 1
    assert ev[("bq", "bunqueue", "push")] == 2 and ev[("bq", "bunqueue", "reserve")] == 2
    assert ev[("bq", "bunqueue", "complete")] == 1 and ev[("bq", "bunqueue", "fail")] == 1

    jobs = {q: by(m, "jobgate_jobs", queue=q) for q in ("bt", "wq", "bq")}
    zero = dict.fromkeys(("delayed", "ready", "reserved", "buried", "completed", "failed"), 0)
    assert jobs["bt"] == dict(zero, buried=1)
    assert jobs["wq"] == dict(zero, completed=1, failed=1)
    assert jobs["bq"] == dict(zero, completed=1, failed=1)

    # histograms: one wait per job's first reservation, one run per reservation that ended
    for q, waits, runs in (("bt", [1.0, 1.2, 1.5], [0.2, 0.3, 0, 0]),
                           ("wq", [1.5, 1.6], [0.1, 0]),
                           ("bq", [1.6, 2.0], [0.4, 0])):
        assert val(m, "jobgate_wait_seconds_count", queue=q) == len(waits)
        assert val(m, "jobgate_wait_seconds_sum", queue=q) == pytest.approx(sum(waits))
        assert val(m, "jobgate_run_seconds_count", queue=q) == len(runs)
        assert val(m, "jobgate_run_seconds_sum", queue=q) == pytest.approx(sum(runs))
    assert val(m, "jobgate_wait_seconds_bucket", queue="bt", le="1.0") == 1
    assert val(m, "jobgate_wait_seconds_bucket", queue="bt", le="2.5") == 3
    assert val(m, "jobgate_run_seconds_bucket", queue="bt", le="0.25") == 3

    for d in ("beanstalk", "workq", "bunqueue", "http"):
        assert val(m, "jobgate_connections", dialect=d) == 1, d
        assert val(m, "jobgate_connections_total", dialect=d) == 1, d
    assert val(m, "jobgate_storage_up") == 1
    assert val(m, "jobgate_storage_outages_total") == 0
    assert val(m, "jobgate_event_feed_overflows_total") == 0

    # the beanstalkd exporter's names, from beanstalk's own stats
    assert val(m, "cmd_put") == 3 and val(m, "cmd_reserve") == 4 and val(m, "cmd_bury") == 1
    assert val(m, "current_jobs_buried") == 3    # beanstalk sees failed jobs as buried
    assert val(m, "current_connections") == 1 and val(m, "total_jobs") == 7
    assert val(m, "tube_current_jobs_buried", tube="bt") == 1
    assert val(m, "tube_current_jobs_buried", tube="wq") == 1
    assert val(m, "tube_total_jobs", tube="bt") == 3
    assert val(m, "tube_cmd_delete", tube="bt") == 2
    assert val(m, "tube_current_using", tube="bt") == 1
    # bunqueue's names, as its Prometheus command writes them
    assert val(m, "bunqueue_uptime_seconds") == 2
    assert val(m, "bunqueue_jobs_pushed_total") == 2
    assert val(m, "bunqueue_queue_jobs_dlq", queue="bq") == 1
    assert val(m, "bunqueue_connections", transport="tcp") == 1

    clients["g"].close()
    m = scrape(http)
    assert val(m, "jobgate_connections", dialect="beanstalk") == 0
    assert val(m, "jobgate_connections_total", dialect="beanstalk") == 1


def test_event_counters_equal_the_history_rows(server, http):
    clients = traffic(server)
    m = scrape(http)
    for c in clients.values():
        c.close()
    server.stop()    # flushes the journal
    with sqlite3.connect(server.db) as db:
        rows = {(q, d, e): n for q, d, e, n in db.execute(
            "SELECT queue, dialect, event, count(*) FROM job_events GROUP BY 1, 2, 3")}
    ev = {(d["queue"], d["dialect"], d["event"]): v
          for d, v in ((dict(k), v) for k, v in m["jobgate_job_events_total"].items())}
    assert ev == rows


def test_commit_histograms_count_every_committed_batch(server, http):
    traffic(server)
    rt = server.runtime
    # the exposition and the writer's count read together on the loop: no commit in between
    exp = Exporter(rt)
    text, batches = server.call(lambda: (exp.exposition()[0].decode(), rt.writer.batches))
    m = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            m.setdefault(s.name, {})[frozenset(s.labels.items())] = s.value
    assert batches >= 1
    assert val(m, "jobgate_commit_batch_size_count") == batches
    assert val(m, "jobgate_commit_seconds_count") == batches
    assert val(m, "jobgate_commit_batch_size_bucket", le="+Inf") == batches
    assert val(m, "jobgate_commit_batch_size_sum") >= 7 + 7    # 7 jobs inserted, 7 put rows


def test_an_overflowing_subscription_is_counted(server, http):
    port = server.port
    sub = server.call(lambda: port.subscribe(maxlen=1))
    g = greenstalk.Client(("127.0.0.1", server.ports["beanstalk"]), use="ov")
    g.put("a")
    g.put("b")
    g.put("c")    # the subscription overflows once, dropping two events
    m = scrape(http)
    assert val(m, "jobgate_event_feed_overflows_total") == 1
    assert val(m, "jobgate_event_feed_dropped_total") == 2
    assert val(m, "jobgate_event_feed_subscriptions") == 1
    server.call(sub.close)
    g.close()


def test_metrics_is_open_and_prometheus_stays_bunqueues(tmp_path):
    s = InProcServer(f"sqlite:///{tmp_path / 'j.db'}", dialects=("bunqueue", "http"),
                     bunqueue={"auth_tokens": ["secret"]})
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{s.ports['http']}", timeout=10) as c:
            assert c.get("/stats").status_code == 401        # the token is configured
            m = c.get("/metrics")
            assert m.status_code == 200 and "jobgate_jobs" in m.text
            p = c.get("/prometheus")
            assert p.status_code == 200
            assert "bunqueue_uptime_seconds" in p.text and "jobgate_" not in p.text
            r = c.post("/queues/hq/jobs", json={"data": {"a": 1}},
                       headers={"Authorization": "Bearer secret"})
            assert r.status_code == 200, r.text
            m = scrape(c)
            # the routes' bunqueue commands: the /prometheus above, this PUSH
            assert by(m, "jobgate_operations_total", dialect="http") == {"Prometheus": 1,
                                                                         "PUSH": 1}
            assert val(m, "jobgate_jobs", queue="hq", state="ready") == 1
    finally:
        s.stop()


def test_jobgate_serve_answers_metrics(tmp_path, procs):
    """`jobgate serve` as an operator runs it (the command line, its own process)."""
    from .server_support import serve_argv
    from .support import free_port
    bport, hport = free_port(), free_port()
    p = procs(serve_argv("--listen", f"beanstalk=127.0.0.1:{bport}", "--listen",
                         f"http=127.0.0.1:{hport}", "--database",
                         f"sqlite:///{tmp_path / 'j.db'}", "--log-level", "warning"))
    p.wait_tcp(bport)
    p.wait_tcp(hport)
    with greenstalk.Client(("127.0.0.1", bport), use="cli") as g:
        g.put("x")
    with httpx.Client(base_url=f"http://127.0.0.1:{hport}", timeout=10) as c:
        m = scrape(c)
    assert val(m, "jobgate_storage_up") == 1
    assert val(m, "jobgate_jobs", queue="cli", state="ready") == 1
    assert val(m, "jobgate_operations_total", dialect="beanstalk", command="put") == 1
    assert val(m, "jobgate_job_events_total", queue="cli", dialect="beanstalk", event="put") == 1
    assert val(m, "tube_current_jobs_ready", tube="cli") == 1 and val(m, "cmd_put") == 1
    assert "bunqueue_uptime_seconds" in m and "process_cpu_seconds_total" in m
    code, _, err = p.stop()
    assert code == 0, err


def test_glidemq_commands_and_events(tmp_path):
    """glide-mq over RESP: Redis command names, FCALL under the glide-mq function's name."""
    from .resp_support import RespConn, load_library
    s = InProcServer(f"sqlite:///{tmp_path / 'j.db'}", dialects=("glidemq", "http"))
    try:
        c = RespConn(s.ports["glidemq"])
        load_library(c)
        assert c.call("PING") == b"PONG"
        c.add_job("gq")
        c.add_job("gq")
        c.close()
        with httpx.Client(base_url=f"http://127.0.0.1:{s.ports['http']}", timeout=10) as h:
            m = scrape(h)
    finally:
        s.stop()
    assert by(m, "jobgate_operations_total", dialect="glidemq") == {
        "FUNCTION": 1, "PING": 1, "glidemq_addJob": 2}
    assert by(m, "jobgate_job_events_total", queue="gq", dialect="glidemq") == {"add": 2}
    assert val(m, "jobgate_jobs", queue="gq", state="ready") == 2
    assert val(m, "jobgate_connections_total", dialect="glidemq") == 1


def test_without_an_http_listener_nothing_is_counted_for_metrics():
    # /metrics lives on the http listener: without one the feed sink is not registered (in
    # memory mode it would turn the event feed on for nothing); with one, it counts
    for dialects, counted in ((("beanstalk",), False), (("beanstalk", "http"), True)):
        s = InProcServer(None, dialects=dialects)
        try:
            with greenstalk.Client(("127.0.0.1", s.ports["beanstalk"]), use="m") as c:
                c.watch("m")
                c.put("x")
                c.delete(c.reserve(timeout=1))
            events = dict(s.runtime.feed_metrics.events)
            assert bool(events) is counted, events
            if counted:
                assert events == {("m", "beanstalk", "put"): 1, ("m", "beanstalk", "reserve"): 1,
                                  ("m", "beanstalk", "delete"): 1}
        finally:
            s.stop()
