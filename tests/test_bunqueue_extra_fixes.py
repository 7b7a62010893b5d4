"""The small fixes the extra golden asked for (issue 16; docs/bunqueue.md "Small fixes from the
extra golden (issue 16)"), over a real socket against jobgate on a manual clock:

- GetCountsPerPriority lists its keys as a JavaScript object does: array indices (priorities
  >= 0) first, ascending;
- a job's first timeline entry is the state it was pushed into: ChangePriority does not
  rewrite it;
- a job ACKed without a result (no key, or `undefined`) has the result `undefined` in WaitJob,
  GetResult and GetJob's returnvalue; an ACK with nil keeps null;
- workers: ListWorkers entries (id, uptime, the counts a Heartbeat reported), stats, status
  "stale", re-registration, removal with the connection.

JOBGATE_BQ_REFERENCE=1 runs them against the real bunqueue 2.9.5 server (the stale-worker test
then sleeps 30 s; the removal sweep test is jobgate's timing).
"""
from __future__ import annotations

import pytest

from .bunqueue_support import OK, UNDEF, bq_clocked_start, jobgate_only, qname, wait_until


@pytest.fixture(scope="module")
def bq_server(tmp_path_factory):
    """This module's server: in-process on a manual clock (the `bq` fixture connects to it)."""
    s = bq_clocked_start(tmp_path_factory.mktemp("bqfix"))
    yield s
    s.stop()


@pytest.fixture
def advance(bq_server):
    """`advance(ms)`: let `ms` ms pass on the server's clock."""
    return bq_server.advance


# ===================================================================== priorities
def test_counts_per_priority_lists_nonnegative_priorities_ascending(bq):
    c = bq()
    q = qname()
    for p in (10, 2, 0, 7, 2, 100, 1):
        c.push(q, 1, priority=p)
    c.push(q, 1, priority=3, delay=600_000)   # delayed jobs count too
    r = c.ok("GetCountsPerPriority", queue=q)
    assert list(r["counts"].items()) == [("0", 1), ("1", 1), ("2", 2), ("3", 1), ("7", 1),
                                         ("10", 1), ("100", 1)]


def test_counts_per_priority_negative_after_the_others(bq):
    c = bq()
    q = qname()
    for p in (-5, 4, 0):
        c.push(q, 1, priority=p)
    r = c.ok("GetCountsPerPriority", queue=q)
    assert list(r["counts"]) == ["0", "4", "-5"]


# ====================================================================== timeline
def _first(c, id) -> str:
    return c.ok("GetJob", id=id)["job"]["timeline"][0]["state"]


@pytest.mark.parametrize("push, priority, first", [
    ({}, 9, "waiting"),                        # pushed waiting, now prioritized
    ({"priority": 5}, 0, "prioritized"),       # pushed prioritized, now not
    ({"delay": 600_000}, 4, "delayed"),        # pushed delayed
    ({"priority": 2, "delay": 600_000}, 0, "delayed"),
])
def test_change_priority_keeps_the_first_timeline_entry(bq, push, priority, first):
    c = bq()
    q = qname()
    id = c.push(q, 1, **push)
    assert _first(c, id) == first
    assert c.call("ChangePriority", id=id, priority=priority) == {"ok": True, "id": UNDEF}
    assert _first(c, id) == first
    assert c.call("ChangePriority", id=id, priority=priority + 3)["ok"] is True
    assert _first(c, id) == first


def test_first_timeline_entry_after_change_priority_pull_and_move_to_delayed(bq):
    c = bq()
    q = qname()
    id = c.push(q, {"a": 1})
    c.ok("ChangePriority", id=id, priority=9)
    r = c.pull(q, owner="w", lockTtl=60_000)
    assert [e["state"] for e in r["job"]["timeline"]] == ["waiting", "active"]
    c.ok("MoveToDelayed", id=id, delay=600_000, token=r["token"])
    assert _first(c, id) == "waiting"


def test_promoted_job_keeps_delayed_first(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1, delay=600_000)
    c.ok("Promote", id=id)
    r = c.pull(q)
    assert [e["state"] for e in r["job"]["timeline"]] == ["delayed", "active"]


# ======================================================================= results
def _results(c, id):
    """(WaitJob's result, GetResult's result, GetJob's returnvalue) of a completed job."""
    w = c.ok("WaitJob", id=id, timeout=100)
    assert w["completed"] is True
    return w["result"], c.ok("GetResult", id=id)["result"], \
        c.ok("GetJob", id=id)["job"]["returnvalue"]


@pytest.mark.parametrize("ack, want", [
    ({}, UNDEF),                      # no result key
    ({"result": UNDEF}, UNDEF),       # undefined, as the TS client sends a void processor's
    ({"result": None}, None),         # nil: the reference keeps null
    ({"result": 0}, 0),
    ({"result": {"a": 1}}, {"a": 1}),
])
def test_ack_result_undefined_or_null(bq, ack, want):
    c = bq()
    q = qname()
    id = c.push(q, 1)
    r = c.pull(q, owner="w", lockTtl=60_000)
    assert c.call("ACK", id=id, token=r["token"], **ack) == {"ok": True, "id": UNDEF}
    got = _results(c, id)
    assert got == (want, want, want)
    assert all((g is UNDEF) == (want is UNDEF) for g in got)


def test_undefined_inside_a_result_stays_undefined(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1)
    r = c.pull(q, owner="w", lockTtl=60_000)
    c.ok("ACK", id=id, token=r["token"], result={"a": UNDEF, "b": None, "c": [UNDEF]})
    res = c.ok("GetResult", id=id)["result"]
    assert res == {"a": UNDEF, "b": None, "c": [UNDEF]}
    assert res["a"] is UNDEF and res["b"] is None and res["c"][0] is UNDEF


def test_ackb_results_undefined_and_null(bq):
    c = bq()
    q = qname()
    ids = [c.push(q, i) for i in range(3)]
    toks = c.ok("PULLB", queue=q, count=3, owner="o", lockTtl=60_000)["tokens"]
    assert c.call("ACKB", ids=ids, tokens=toks, results=[UNDEF, None, 5]) == OK
    got = [c.ok("GetResult", id=i)["result"] for i in ids]
    assert got == [UNDEF, None, 5] and got[0] is UNDEF and got[1] is None


# ======================================================================= workers
def _entry(c, wid):
    data = c.ok("ListWorkers")["data"]
    mine = [w for w in data["workers"] if w["id"] == wid]
    assert len(mine) <= 1
    return (mine[0] if mine else None), data["stats"]


WORKER_KEYS = ["id", "name", "queues", "concurrency", "hostname", "pid", "status",
               "registeredAt", "lastSeen", "activeJobs", "processedJobs", "failedJobs",
               "currentJob", "uptime"]
STATS_KEYS = ["total", "active", "totalProcessed", "totalFailed", "activeJobs",
              "concurrencySlots"]


def test_list_workers_entry_shows_heartbeat_counts(bq):
    c = bq()
    q = qname()
    wid = qname("w")
    _, before = _entry(c, wid)
    r = c.ok("RegisterWorker", name="gx", queues=[q], concurrency=3, workerId=wid,
             hostname="host-a", pid=4242)
    assert r["data"]["workerId"] == wid and "id" not in r["data"]
    w, _ = _entry(c, wid)
    assert list(w) == WORKER_KEYS
    assert (w["activeJobs"], w["processedJobs"], w["failedJobs"]) == (0, 0, 0)
    assert c.call("Heartbeat", id=wid, activeJobs=2, processed=7, failed=1) == {
        "ok": True, "data": {"ok": True}}
    w, stats = _entry(c, wid)
    assert (w["id"], w["name"], w["queues"], w["concurrency"], w["hostname"], w["pid"],
            w["status"], w["currentJob"]) == (wid, "gx", [q], 3, "host-a", 4242, "active", None)
    assert (w["activeJobs"], w["processedJobs"], w["failedJobs"]) == (2, 7, 1)
    assert isinstance(w["registeredAt"], float) and isinstance(w["lastSeen"], float)
    assert isinstance(w["uptime"], int) and w["uptime"] >= w["lastSeen"] - w["registeredAt"]
    assert list(stats) == STATS_KEYS
    assert stats["total"] == before["total"] + 1
    assert stats["totalProcessed"] == before["totalProcessed"] + 7
    assert stats["totalFailed"] == before["totalFailed"] + 1
    assert stats["activeJobs"] == before["activeJobs"] + 2
    assert stats["concurrencySlots"] == before["concurrencySlots"] + 3
    # a later Heartbeat replaces the counts it gives and keeps the others
    c.ok("Heartbeat", id=wid, processed=9)
    w, stats2 = _entry(c, wid)
    assert (w["activeJobs"], w["processedJobs"], w["failedJobs"]) == (2, 9, 1)
    assert stats2["totalProcessed"] == stats["totalProcessed"] + 2
    # gone: its active jobs leave the stats, its processed / failed counts stay (lifetime)
    c.ok("UnregisterWorker", workerId=wid)
    w, stats3 = _entry(c, wid)
    assert w is None
    assert stats3["total"] == stats2["total"] - 1
    assert stats3["activeJobs"] == stats2["activeJobs"] - 2
    assert (stats3["totalProcessed"], stats3["totalFailed"]) == (
        stats2["totalProcessed"], stats2["totalFailed"])


def test_register_defaults_and_started_at(bq):
    c = bq()
    wid = qname("w")
    d = c.ok("RegisterWorker", name="n", workerId=wid,
             startedAt=1_700_000_000_000.0)["data"]   # a JavaScript number
    assert (d["queues"], d["concurrency"], d["hostname"], d["pid"], d["registeredAt"]) == (
        [], 1, "unknown", 0, 1_700_000_000_000.0)
    w, _ = _entry(c, wid)
    assert w["registeredAt"] == 1_700_000_000_000.0
    assert w["uptime"] == pytest.approx(w["lastSeen"] - 1_700_000_000_000, abs=5_000)
    c.ok("UnregisterWorker", workerId=wid)


def test_register_again_updates_the_worker(bq):
    c = bq()
    wid = qname("w")
    first = c.ok("RegisterWorker", name="one", queues=["a"], workerId=wid, hostname="h1",
                 pid=1)["data"]
    c.ok("Heartbeat", id=wid, activeJobs=1, processed=4, failed=2)
    again = c.ok("RegisterWorker", name="two", queues=["b"], concurrency=6, workerId=wid)["data"]
    assert (again["name"], again["queues"], again["concurrency"], again["hostname"],
            again["pid"], again["registeredAt"]) == ("one", ["b"], 6, "h1", 1,
                                                     first["registeredAt"])
    assert (again["activeJobs"], again["processedJobs"], again["failedJobs"]) == (1, 4, 2)
    c.ok("UnregisterWorker", workerId=wid)


def test_workers_go_with_their_connection(bq):
    a, b = bq(), bq()
    wid = qname("w")
    a.ok("RegisterWorker", name="n", queues=["x"], workerId=wid)
    assert _entry(b, wid)[0] is not None
    a.close()
    assert wait_until(lambda: _entry(b, wid)[0] is None)
    assert b.call("Heartbeat", id=wid) == {"ok": False, "error": "Worker not found"}


def test_worker_not_seen_for_30s_is_stale(bq, advance):
    c = bq()
    wid = qname("w")
    c.ok("RegisterWorker", name="n", queues=["x"], concurrency=4, workerId=wid)
    _, before = _entry(c, wid)
    advance(30_500)
    w, stats = _entry(c, wid)
    assert w["status"] == "stale"
    assert stats["active"] == before["active"] - 1
    assert stats["concurrencySlots"] == before["concurrencySlots"] - 4
    c.ok("Heartbeat", id=wid)
    w, stats = _entry(c, wid)
    assert w["status"] == "active" and stats["active"] == before["active"]
    c.ok("UnregisterWorker", workerId=wid)


@jobgate_only("stale workers are removed at the next worker command after 90 s (the "
              "reference sweeps them every 60 s)")
def test_stale_worker_is_removed_after_90s(bq, advance):
    c = bq()
    wid = qname("w")
    c.ok("RegisterWorker", name="n", workerId=wid)
    advance(90_001)
    assert _entry(c, wid)[0] is None
    assert c.call("Heartbeat", id=wid) == {"ok": False, "error": "Worker not found"}
