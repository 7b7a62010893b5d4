"""bunqueue monitoring over a real socket against jobgate: Ping, Stats, Metrics, Prometheus,
workers, job heartbeats and locks, logs, SubscribeEvents frames, Hello, and unknown or
malformed commands.

Contract, reference mode and conventions of these command tests: tests/bunqueue_support.py.
"""
from __future__ import annotations

import time

import msgpack
import pytest

from .bunqueue_support import OK, UNDEF, err, job, jobgate_only, qname, reference_mode, unpack


# ====================================================================== monitoring
def test_ping(bq):
    r = bq().call("Ping")
    assert list(r) == ["ok", "data"] and r["data"]["pong"] is True
    assert isinstance(r["data"]["time"], float) and r["data"]["time"] > 1.6e12


def test_stats(bq):
    r = bq().call("Stats")
    assert r["ok"] is True
    assert list(r["stats"]) == ["waiting", "active", "delayed", "dlq", "completed", "failed",
                                "uptime", "pushPerSec", "pullPerSec"]
    assert all(isinstance(v, (int, float)) and v >= 0 for v in r["stats"].values())


def test_metrics(bq):
    c = bq()
    before = c.call("Metrics")["metrics"]
    q = qname()
    id = c.push(q, 1)
    c.pull(q)
    c.ok("ACK", id=id)
    m = c.call("Metrics")["metrics"]
    assert list(m) == ["totalPushed", "totalPulled", "totalCompleted", "totalFailed",
                       "avgLatencyMs", "avgProcessingMs", "memoryUsageMb", "sqliteSizeMb",
                       "activeConnections"]
    for k in ("totalPushed", "totalPulled", "totalCompleted"):
        assert m[k] >= before[k] + 1, k
    if not reference_mode():        # the reference counts 0 here (its own bookkeeping)
        assert m["activeConnections"] >= 1


def test_prometheus(bq):
    r = bq().call("Prometheus")
    assert list(r) == ["ok", "data"] and list(r["data"]) == ["metrics"]
    text = r["data"]["metrics"]
    assert isinstance(text, str) and "# TYPE " in text
    for line in text.strip().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            float(value)


def test_workers(bq):
    c = bq()
    q = qname()
    r = c.call("RegisterWorker", name="w1", queues=[q])
    d = r["data"]
    assert r["ok"] is True and d["name"] == "w1" and d["queues"] == [q]
    wid = d["workerId"]
    assert isinstance(wid, str) and isinstance(d["registeredAt"], float)
    assert c.call("Heartbeat", id=wid) == {"ok": True, "data": {"ok": True}}
    lw = c.call("ListWorkers")["data"]
    mine = [w for w in lw["workers"] if w["id"] == wid]
    assert len(mine) == 1 and mine[0]["name"] == "w1" and mine[0]["queues"] == [q]
    for k in ("registeredAt", "lastSeen", "activeJobs", "processedJobs", "failedJobs"):
        assert k in mine[0]
    assert lw["stats"]["total"] >= 1
    assert c.call("UnregisterWorker", workerId=wid) == {"ok": True, "data": {"removed": True}}
    assert all(w["id"] != wid for w in c.call("ListWorkers")["data"]["workers"])


def test_job_heartbeat_and_extend_lock(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1)
    tok = c.pull(q, owner="o", lockTtl=5000)["token"]
    assert c.call("JobHeartbeat", id=id, token=tok) == {"ok": True, "data": {"ok": True}}
    assert c.call("JobHeartbeat", id=id) == {"ok": True, "data": {"ok": True}}
    assert c.call("JobHeartbeatB", ids=[id, "nope"], tokens=[tok, "z"]) == \
        {"ok": True, "data": {"ok": True, "count": 1}}
    assert c.call("JobHeartbeatB", ids=[id]) == {"ok": True, "data": {"ok": True, "count": 1}}
    assert c.call("ExtendLock", id=id, token=tok, duration=10000) == OK
    assert c.call("ExtendLock", id=id, token="bad", duration=10000)["ok"] is False
    assert c.call("ACK", id=id, token=tok) == OK


def test_job_heartbeat_errors(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1)
    e = err("Job not found or not active (or invalid token)")
    assert c.call("JobHeartbeat", id=id) == e
    c.pull(q, owner="o")
    assert c.call("JobHeartbeat", id=id, token="bad") == e


def test_logs(bq):
    c = bq()
    id = c.push(qname(), 1)
    assert c.call("AddLog", id=id, message="hello") == {"ok": True, "data": {"added": True}}
    assert c.call("AddLog", id=id, message="w", level="warn") == \
        {"ok": True, "data": {"added": True}}
    logs = c.call("GetLogs", id=id)["data"]["logs"]
    assert [(x["message"], x["level"]) for x in logs] == [("hello", "info"), ("w", "warn")]
    assert all(isinstance(x["timestamp"], float) for x in logs)
    assert c.call("GetLogs", id="nope")["data"]["logs"] == []


def test_get_logs_count(bq):
    c = bq()
    id = c.push(qname(), 1)
    c.ok("AddLog", id=id, message="m")
    assert c.call("GetLogs", id=id)["data"]["count"] == 1


# ========================================================================== events
def _events(c, n, timeout=5.0):
    """At least `n` event frames of connection `c` (replies read meanwhile are kept)."""
    deadline = time.monotonic() + timeout
    while len(c.events) < n and time.monotonic() < deadline:
        r = unpack(c.recv_frame(timeout=max(0.01, deadline - time.monotonic())))
        if isinstance(r, dict) and r.get("type") == "event":
            c.events.append(r)
        else:
            c.pending.append(r)
    return c.events


def test_subscribe_events_frames_arrive_without_req_id(bq):
    sub, c = bq(), bq()
    q = qname()
    assert sub.call("SubscribeEvents", queue=q) == OK
    c.push(qname("other"), 1)                       # another queue: no event
    id = c.push(q, 1)
    c.pull(q)
    c.ok("ACK", id=id)
    evs = _events(sub, 3)
    assert len(evs) == 3
    for e in evs:
        assert list(e) == ["type", "event"] and "reqId" not in e
        assert e["event"]["queue"] == q and e["event"]["jobId"] == id
        assert isinstance(e["event"]["timestamp"], float)
    assert [e["event"]["eventType"] for e in evs][1:] == ["pulled", "completed"]
    assert sub.quiet(0.2)


def test_subscribe_events_push_event_is_pushed(bq):
    sub, c = bq(), bq()
    q = qname()
    sub.ok("SubscribeEvents", queue=q)
    c.push(q, 1)
    assert _events(sub, 1)[0]["event"]["eventType"] == "pushed"


def test_subscribe_events_carry_result_and_error(bq):
    sub, c = bq(), bq()
    q = qname()
    sub.ok("SubscribeEvents", queue=q)
    a = c.push(q, 1)
    c.pull(q)
    c.ok("ACK", id=a, result={"r": 1})
    b = c.push(q, 2, maxAttempts=1)
    c.pull(q)
    c.ok("FAIL", id=b, error="bad")
    evs = {(e["event"]["eventType"], e["event"]["jobId"]): e["event"] for e in _events(sub, 6)}
    assert evs[("completed", a)]["data"] == {"r": 1}
    assert evs[("failed", b)]["error"] == "bad"


# =========================================================================== Hello
@pytest.mark.parametrize("sent,answered", [(1, 1), (2, 2), (3, 3), (0, 1), (4, 3), (99, 3),
                                           (None, 1), ("2", 1)])
@jobgate_only("jobgate negotiates 1..3 (README); the reference always answers 3")
def test_hello_versions(bq, sent, answered):
    fields = {} if sent is None else {"protocolVersion": sent}
    r = bq().call("Hello", capabilities=["pipelining"], **fields)
    assert r == {"ok": True, "protocolVersion": answered,
                 "capabilities": ["pipelining", "separate-job-name"], "server": "bunqueue",
                 "version": "2.9.5"}


# ========================================================== unknown / malformed cmds
def test_unknown_command(bq):
    c = bq()
    assert c.call("Bogus") == err("Unknown command: Bogus")
    assert c.call("push", queue="x", data=1) == err("Unknown command: push")   # case-sensitive
    assert c.call("Ping")["ok"] is True


@pytest.mark.parametrize("frame,reply", [
    pytest.param({"foo": 1, "reqId": 7},
                 {"ok": False, "error": "Invalid command", "reqId": UNDEF}),
    ({"foo": 1, "reqId": "nc"}, {"ok": False, "error": "Invalid command", "reqId": "nc"}),
    ({"cmd": None, "reqId": "nn"}, {"ok": False, "error": "Invalid command", "reqId": "nn"}),
    pytest.param({"cmd": "", "reqId": "e"},
                 {"ok": False, "error": "Invalid command", "reqId": "e"}),
    pytest.param({"cmd": 5, "reqId": "n5"},
                 {"ok": False, "error": "Unknown command: 5", "reqId": "n5"}),
], ids=["no-cmd-int-reqid", "no-cmd", "cmd-nil", "cmd-empty", "cmd-int"])
def test_missing_or_bad_cmd(bq, frame, reply):
    c = bq()
    c.send(frame)
    assert c.recv() == reply
    assert c.call("Ping")["ok"] is True


def test_mutations_survive_on_another_connection(bq):
    """What one connection did is visible to the next (no per-connection state leaks)."""
    a = bq()
    q = qname()
    id = a.push(q, {"k": "v"}, tags=["t"])
    a.close()
    b = bq()
    j = job(b, id)
    assert j["data"] == {"k": "v"} and j["tags"] == ["t"]
    assert msgpack.packb(j["data"]) == msgpack.packb({"k": "v"})
