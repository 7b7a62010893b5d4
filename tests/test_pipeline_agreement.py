"""The report counts what the server counted (issue 18 item 5): one run of real traffic from
all three dialects through a real `jobgate serve` (SQLite, the http listener), then the
pipeline over its job_events history; the report's counts per queue and dialect must equal
the Prometheus counters scraped from the same server's `GET /metrics`, through the mapping of
docs/pipeline.md ("The report and the Prometheus counters"), and what the traffic did.

Traffic (every queue but the shared one has one producer dialect):

- `ag-bs`, greenstalk: 9 puts; 5 reserve + delete; 2 buried (one kicked, reserved and
  deleted, the other deleted while buried: an operator's clean-up, not a completion); one
  released and deleted; one ttr=1 reservation that times out, then reserved and deleted.
- `ag-wq`, workq: 4 add + lease + complete; one at -max-fails=2 failed twice (the second
  failure is final: fail + dlq); one at -max-fails=3 failed once then completed; one at
  -max-attempts=1 whose 800 ms lease runs out (timeout + fail + dlq, by the timer).
- `ag-bq`, bunqueue: 4 PUSH + PULL + ACK; one at maxAttempts 2 FAILed twice (fail, then fail
  + dlq); one Discarded while active, one while waiting (dlq alone); one at maxAttempts 1
  whose 800 ms lock runs out (timeout + fail + dlq).
- `ag-shared`: a bunqueue push reserved and deleted by greenstalk, a beanstalk put leased
  and completed by workq, a workq add reserved and buried by greenstalk.

Runs one server and one Spark analysis (the session's `spark`), shared by the tests here.
"""
from __future__ import annotations

from collections import Counter

import greenstalk
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pipeline.analyze import ENQUEUE, analyze
from pipeline.sources import read_jdbc

from .bunqueue_support import BQ, wait_until
from .support import Server, free_port, wait_port
from .workq_support import OK, WorkqRaw, add_cmd, complete_cmd, fail_cmd, new_uid

BS, WQ, BQQ, SHARED = "ag-bs", "ag-wq", "ag-bq", "ag-shared"
COUNTS = ("enqueued", "started", "completed", "failed", "timed_out", "buried")

#: What the traffic did, as the report must count it: {(queue, producer dialect): counts}.
EXPECTED = {
    (BS, "beanstalk"): dict(enqueued=9, started=12, completed=8, failed=2, timed_out=1, buried=2),
    (WQ, "workq"): dict(enqueued=7, started=9, completed=5, failed=4, timed_out=1, buried=2),
    (BQQ, "bunqueue"): dict(enqueued=8, started=8, completed=4, failed=5, timed_out=1, buried=4),
    (SHARED, "bunqueue"): dict(enqueued=1, started=1, completed=1, failed=0, timed_out=0,
                               buried=0),
    (SHARED, "beanstalk"): dict(enqueued=1, started=1, completed=1, failed=0, timed_out=0,
                                buried=0),
    (SHARED, "workq"): dict(enqueued=1, started=1, completed=0, failed=1, timed_out=0, buried=1),
}
#: Per queue, what the counters cannot tell apart (docs/pipeline.md): deletes that are not a
#: completion (a delete of a job not reserved), and `dlq` events that are the second event of
#: a final failure (the `fail` before it is the failure; a Discard's `dlq` is one by itself).
NOT_COMPLETIONS = {BS: 1, WQ: 0, BQQ: 0, SHARED: 0}
FINAL_FAIL_DLQ = {BS: 0, WQ: 2, BQQ: 2, SHARED: 0}


# ------------------------------------------------------------------------------ traffic
def _beanstalk(port: int) -> None:
    c = greenstalk.Client(("127.0.0.1", port), use=BS, watch=BS)
    holder = greenstalk.Client(("127.0.0.1", port), use=BS, watch=BS)
    d = c.put("ttr", priority=1000, ttr=1)
    assert holder.reserve(timeout=5).id == d                 # left to time out; once it has,
    # it is ready behind the other jobs (a larger pri), so a slow run still takes them first
    ids = [c.put(f"job {i}", priority=100) for i in range(8)]
    for _ in range(5):
        c.delete(c.reserve(timeout=5))
    a, b, r = (c.reserve(timeout=5) for _ in range(3))
    assert [a.id, b.id, r.id] == ids[5:]
    c.bury(a)
    c.bury(b)
    c.release(r, priority=100)
    c.delete(c.reserve(timeout=5))                           # r again
    assert c.kick(1) == 1                                    # a
    job = c.reserve(timeout=5)
    assert job.id == a.id
    c.delete(job)
    c.delete(b.id)                                           # buried: an operator's delete
    assert wait_until(lambda: c.stats_job(d)["state"] == "ready", timeout=10), "no TTR expiry"
    job = c.reserve(timeout=5)
    assert job.id == d
    c.delete(job)
    holder.close()
    c.close()


def _workq(port: int) -> None:
    w = WorkqRaw(port)

    def add(ttr=60_000, **flags) -> str:
        u = new_uid()
        assert w.cmd(add_cmd(u, WQ, b"mail", ttr=ttr, ttl=600_000, **flags)) == OK
        return u

    def lease() -> str:
        r = w.cmd(b"lease %s 0\r\n" % WQ.encode())
        assert r.startswith(b"+OK 1\r\n"), r
        return r.split(b"\r\n")[1].split(b" ")[0].decode()

    h = add(ttr=800, max_attempts=1)
    assert lease() == h                                      # runs out: timeout, fail, dlq
    for _ in range(4):
        u = add()
        assert lease() == u and w.cmd(complete_cmd(u, b"sent")) == OK
    f = add(max_fails=2)
    for _ in range(2):
        assert lease() == f and w.cmd(fail_cmd(f, b"smtp 451")) == OK
    g = add(max_fails=3)
    assert lease() == g and w.cmd(fail_cmd(g, b"smtp 451")) == OK
    assert lease() == g and w.cmd(complete_cmd(g, b"sent")) == OK
    assert wait_until(lambda: w.inspect_job(h)["state"] == "2", timeout=10), "no lease expiry"
    assert w.inspect_job(f)["state"] == "2"
    w.close()


def _bunqueue(port: int) -> None:
    q = BQ(port)
    n = q.push(BQQ, "render", maxAttempts=1)
    r = q.ok("PULLB", queue=BQQ, count=1, owner="ag", lockTtl=800)
    assert [j["id"] for j in r["jobs"]] == [n]               # runs out: timeout, fail, dlq
    for i in range(4):
        u = q.push(BQQ, {"page": i})
        assert q.pull(BQQ)["job"]["id"] == u
        q.ok("ACK", id=u, result={"ok": True})
    k = q.push(BQQ, "flaky", maxAttempts=2, backoff=0)
    for _ in range(2):
        assert q.pull(BQQ)["job"]["id"] == k
        q.ok("FAIL", id=k, error="renderer crashed")
    lj = q.push(BQQ, "bad input")
    assert q.pull(BQQ)["job"]["id"] == lj
    q.ok("Discard", id=lj)                                   # active -> DLQ
    q.ok("Discard", id=q.push(BQQ, "never wanted"))          # waiting -> DLQ
    assert wait_until(lambda: q.state(n) == "failed", timeout=10), "no lock expiry"
    assert q.state(k) == "failed"
    q.close()


def _shared(s) -> None:
    g = greenstalk.Client(("127.0.0.1", s.port), use=SHARED, watch=SHARED)
    q, w = BQ(s.bunqueue_port), WorkqRaw(s.workq_port)
    q.push(SHARED, "from bunqueue")
    job = g.reserve(timeout=5)
    assert job.body == "from bunqueue"
    g.delete(job)                                            # completed: bunqueue's job
    g.put("from beanstalk", priority=10)
    r = w.cmd(b"lease %s 5000\r\n" % SHARED.encode())
    assert r.startswith(b"+OK 1\r\n"), r
    assert w.cmd(complete_cmd(r.split(b"\r\n")[1].split(b" ")[0].decode(), b"ok")) == OK
    u = new_uid()
    assert w.cmd(add_cmd(u, SHARED, b"from workq", ttr=60_000, ttl=600_000)) == OK
    g.bury(g.reserve(timeout=5))                             # failed: workq's job
    g.close()
    q.close()
    w.close()


# ------------------------------------------------------------------------------ scrape
def job_event_counters(text: str) -> Counter:
    """{(queue, dialect, event): value} of `jobgate_job_events_total` in a Prometheus text
    exposition, parsed by prometheus_client's own parser."""
    out: Counter = Counter()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "jobgate_job_events_total":
                out[(s.labels["queue"], s.labels["dialect"], s.labels["event"])] += int(s.value)
    return out


def from_counters(c: Counter, queue: str, dialects: set[str]) -> dict:
    """The report's counts of `queue`, from the counters of the events `dialects` caused
    (docs/pipeline.md, "The report and the Prometheus counters"), with the two corrections
    the counters cannot make themselves (NOT_COMPLETIONS, FINAL_FAIL_DLQ)."""
    def n(*events):
        return sum(c[(queue, d, e)] for d in dialects for e in events)
    return dict(enqueued=n(*ENQUEUE), started=n("reserve"),
                completed=n("complete", "delete") - NOT_COMPLETIONS[queue],
                failed=n("fail", "bury", "dlq") - FINAL_FAIL_DLQ[queue],
                timed_out=n("timeout"), buried=n("bury", "dlq"))


@pytest.fixture(scope="module")
def run(tmp_path_factory, spark):
    """(report summary {(queue, dialect): counts}, counters) of one run of the traffic."""
    url = f"sqlite:///{tmp_path_factory.mktemp('agree')}/jobgate.db"
    hp = free_port()
    s = Server(url, workq=True, bunqueue=True, extra=["--listen", f"http=127.0.0.1:{hp}"])
    try:
        wait_port(hp, s.proc)
        _beanstalk(s.port)
        _workq(s.workq_port)
        _bunqueue(s.bunqueue_port)
        _shared(s)
        r = httpx.get(f"http://127.0.0.1:{hp}/metrics", timeout=10)
        assert r.status_code == 200, (r.status_code, r.text[:300])
        counters = job_event_counters(r.text)
    finally:
        s.stop()
    summary = {(r["queue"], r["dialect"]): {c: r[c] for c in COUNTS}
               for r in analyze(read_jdbc(spark, url), 60_000).summary.collect()}
    return summary, counters


def test_the_report_counts_what_the_traffic_did(run):
    summary, _ = run
    assert summary == EXPECTED


def test_each_dialects_queue_agrees_with_its_counters(run):
    """A queue with one producer dialect d: the report's (queue, d) row is the counters of the
    events d's clients caused plus the timers' (dialect="jobgate")."""
    summary, counters = run
    assert {d for (q, d, _) in counters if q in (BS, WQ, BQQ)} == {
        "beanstalk", "workq", "bunqueue", "jobgate"}
    for q, d in ((BS, "beanstalk"), (WQ, "workq"), (BQQ, "bunqueue")):
        assert summary[(q, d)] == from_counters(counters, q, {d, "jobgate"}), q
        assert not [k for k in summary if k[0] == q and k[1] != d]


def test_a_shared_queue_agrees_per_queue_and_enqueued_per_dialect(run):
    """Across dialects the report keys an event by its job's producer, the counter by the
    dialect that caused it: a beanstalk worker's bury of a workq job is workq's failure in the
    report and a `dialect="beanstalk"` bury in the counter. Per queue they agree; enqueued
    (always caused by the producer) agrees per dialect too."""
    summary, counters = run
    rows = [v for (q, _), v in summary.items() if q == SHARED]
    total = {c: sum(v[c] for v in rows) for c in COUNTS}
    every = {d for (q, d, _) in counters if q == SHARED}
    assert every == {"beanstalk", "workq", "bunqueue"}
    assert total == from_counters(counters, SHARED, every)
    for d in every:
        assert summary[(SHARED, d)]["enqueued"] == from_counters(counters, SHARED, {d})["enqueued"]
    assert counters[(SHARED, "beanstalk", "bury")] == 1 == summary[(SHARED, "workq")]["failed"]
