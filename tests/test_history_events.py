"""The job_events history (DESIGN.md "Storage and durability"; issue 5 item 1): every
transition from every dialect is a row with the job's id and uid, queue, dialect, event,
worker (connection or lock owner), canonical priority, attempt, payload size, error text and
wall-clock ms, committed with the state change it records.

Driven through a real server with real clients of the three dialects (greenstalk, raw workq,
raw bunqueue); the rows are read from the SQLite file after a clean stop.
"""
from __future__ import annotations

import time

import greenstalk
import sqlalchemy as sa

from core import schema

from .bunqueue_support import BQ
from .workq_support import OK, WorkqRaw, add_cmd, fail_cmd, lease_frame, new_uid


def rows(url: str) -> list[dict]:
    eng = sa.create_engine(url)
    with eng.connect() as c:
        out = [dict(r._mapping) for r in
               c.execute(sa.select(schema.job_events).order_by(schema.job_events.c.id))]
    eng.dispose()
    return out


def test_every_dialect_writes_who_what_and_why(tmp_path, servers):
    url = f"sqlite:///{tmp_path}/jobgate.db"
    s = servers(url, workq=True, bunqueue=True)
    t0 = time.time() * 1000
    # beanstalk: put, reserve, bury (by the reserving connection)
    g = greenstalk.Client(("127.0.0.1", s.port), use="hist-b")
    g.watch("hist-b")
    bid = g.put("hello", priority=100)
    g.bury(g.reserve(timeout=5), priority=100)
    g.close()
    # workq: add with max-fails 1, lease, fail with a result text
    w = WorkqRaw(s.workq_port)
    u = new_uid()
    assert w.cmd(add_cmd(u, "hist-w", b"12345", ttr=60_000, priority=7, max_fails=1)) == OK
    assert w.cmd(b"lease hist-w 1000\r\n") == lease_frame(u, "hist-w", 60_000, b"12345")
    assert w.cmd(fail_cmd(u, b"it broke")) == OK
    w.sock.close()
    # bunqueue: push, pull with an owner, FAIL (retry), pull, ACK
    c = BQ(s.bunqueue_port)
    pid = c.push("hist-q", "abc", priority=3, maxAttempts=2, backoff=0)
    tok = c.pull("hist-q", owner="worker-7")["token"]
    c.ok("FAIL", id=pid, error="nope", token=tok)      # attempt 1 of 2: waiting again
    c.pull("hist-q")
    c.ok("ACK", id=pid, result=1)
    c.close()
    s.stop()
    ev = rows(url)
    by = {}
    for e in ev:
        by.setdefault((e["queue"], e["event"]), []).append(e)
    put = by[("hist-b", "put")][0]
    assert (put["job_id"], put["dialect"], put["uid"], put["payload_size"], put["priority"]) == (
        bid, "beanstalk", None, 5, 100 - 2**31)
    res = by[("hist-b", "reserve")][0]
    bury = by[("hist-b", "bury")][0]
    assert res["worker"].startswith("beanstalk#") and bury["worker"] == res["worker"]
    assert res["attempt"] == 1
    add = by[("hist-w", "add")][0]
    assert (add["uid"], add["dialect"], add["priority"], add["payload_size"]) == (u, "workq", -7, 5)
    lease = by[("hist-w", "reserve")][0]
    assert lease["worker"].startswith("workq#") and lease["uid"] == u
    fail = by[("hist-w", "fail")][0]
    assert fail["error"] == "it broke" and fail["attempt"] == 1
    push = by[("hist-q", "push")][0]
    assert (push["uid"], push["dialect"], push["priority"], push["payload_size"]) == (
        pid, "bunqueue", -3, 3)
    pull = by[("hist-q", "reserve")][0]
    assert pull["worker"] == "worker-7" and pull["dialect"] == "bunqueue"
    again = by[("hist-q", "reserve")][1]
    assert again["worker"].startswith("bunqueue#") and again["attempt"] == 2
    bfail = by[("hist-q", "fail")][0]
    assert (bfail["error"], bfail["uid"]) == ("nope", pid)
    assert by[("hist-q", "complete")][0]["uid"] == pid
    assert all(t0 - 5000 <= e["at_ms"] <= t0 + 60_000 for e in ev)
