"""bunqueue queue limit and stall config commands over real sockets (issue 16):
RateLimit, RateLimitClear, SetConcurrency, ClearConcurrency, GetQueueLimits, SetStallConfig,
GetStallConfig (protocols/bunqueue/handlers_limits.py; docs/bunqueue.md "Rate and concurrency
limits (issue 16)").

- the same command sequence against the real bunqueue 2.9.5 server and against jobgate gives
  the same replies: values, key order, the MessagePack type of every scalar and error texts
  (map headers aside: msgpackr writes map16 everywhere, conformance/bunqueue_wire.py), hostile
  arguments included;
- on jobgate's manual clock: a temporary rate limit's TTL, a PULL that waits at the
  concurrency limit and is served when a job is acknowledged, a rate-limited PULL served when
  the window allows (the reference serves it only at its timeout: a documented difference),
  Obliterate forgets the limits;
- a server subprocess on SQLite, killed with SIGKILL after the setters were answered: the
  limits and stall config are back after the restart and hold a beanstalk reserve.
"""
from __future__ import annotations

import pytest

from conformance.bunqueue_wire import annotate

from .bunqueue_real import BunqueueServer, bun_missing_reason
from .bunqueue_support import BQ, OK, qname
from .inproc import InProcServer

#: (request) steps whose replies do not depend on time: compared byte for byte.
STEPS = [
    {"cmd": "GetQueueLimits", "queue": "lim"},
    {"cmd": "RateLimit", "queue": "lim", "limit": 5},
    {"cmd": "GetQueueLimits", "queue": "lim"},
    {"cmd": "RateLimit", "queue": "lim"},
    {"cmd": "RateLimit", "queue": "lim", "limit": "abc"},
    {"cmd": "RateLimit", "queue": "lim", "limit": None},
    {"cmd": "RateLimit", "queue": "lim", "limit": float("inf")},
    {"cmd": "RateLimit", "queue": "lim", "limit": "7", "duration": "250"},
    {"cmd": "GetQueueLimits", "queue": "lim"},
    {"cmd": "RateLimit", "queue": "lim", "limit": True, "duration": -5, "ttl": 0},
    {"cmd": "GetQueueLimits", "queue": "lim"},
    {"cmd": "RateLimit", "queue": "lim", "limit": 2.5, "duration": 500.0},
    {"cmd": "GetQueueLimits", "queue": "lim", "maxJobs": 1},
    {"cmd": "RateLimit", "queue": "lim", "limit": " 0x10 "},
    {"cmd": "GetQueueLimits", "queue": "lim"},
    {"cmd": "RateLimit", "queue": "lim", "limit": ""},
    {"cmd": "GetQueueLimits", "queue": "lim"},
    {"cmd": "RateLimit", "limit": 5},
    {"cmd": "RateLimit", "queue": None, "limit": 5},
    {"cmd": "RateLimit", "queue": [1], "limit": 5},
    {"cmd": "RateLimit", "queue": "bad name!", "limit": 5},
    {"cmd": "RateLimitClear", "queue": "bad name!"},
    {"cmd": "RateLimitClear", "queue": "lim"},
    {"cmd": "RateLimitClear", "queue": "nothing-here"},
    {"cmd": "RateLimitClear"},
    {"cmd": "GetQueueLimits", "queue": "lim"},
    {"cmd": "SetConcurrency", "queue": "lim", "limit": 3},
    {"cmd": "SetConcurrency", "queue": "lim"},
    {"cmd": "SetConcurrency", "queue": "lim", "limit": {"a": 1}},
    {"cmd": "GetQueueLimits", "queue": "lim"},
    {"cmd": "SetConcurrency", "queue": "lim", "limit": -2},
    {"cmd": "GetQueueLimits", "queue": "lim"},
    {"cmd": "SetConcurrency", "queue": "lim", "limit": 3000000000},
    {"cmd": "GetQueueLimits", "queue": "lim"},
    {"cmd": "SetConcurrency", "queue": "lim", "limit": 1.5},
    {"cmd": "GetQueueLimits", "queue": "lim"},
    {"cmd": "SetConcurrency", "queue": "lim", "limit": [4]},
    {"cmd": "GetQueueLimits", "queue": "lim"},
    {"cmd": "ClearConcurrency", "queue": "lim"},
    {"cmd": "ClearConcurrency", "queue": "nothing-here"},
    {"cmd": "ClearConcurrency"},
    {"cmd": "GetQueueLimits", "queue": "lim"},
    {"cmd": "GetQueueLimits"},
    {"cmd": "GetQueueLimits", "queue": None},
    # stall config
    {"cmd": "GetStallConfig", "queue": "st"},
    {"cmd": "SetStallConfig", "queue": "st",
     "config": {"maxStalls": 5, "stallInterval": "100", "foo": 1, "gracePeriod": "x"}},
    {"cmd": "GetStallConfig", "queue": "st"},
    {"cmd": "SetStallConfig", "queue": "st"},
    {"cmd": "SetStallConfig", "queue": "st", "config": 5},
    {"cmd": "GetStallConfig", "queue": "st"},
    {"cmd": "SetStallConfig", "queue": "st", "config": {"enabled": False, "maxStalls": None}},
    {"cmd": "GetStallConfig", "queue": "st"},
    {"cmd": "SetStallConfig", "queue": "st2", "config": "abc"},
    {"cmd": "GetStallConfig", "queue": "st2"},
    {"cmd": "SetStallConfig", "queue": "st3", "config": [7, 8]},
    {"cmd": "SetStallConfig", "queue": "st3",
     "config": {"b": 1, "10": 2, "2": 3, "a": 4, "maxStalls": "2.5", "gracePeriod": 1e3}},
    {"cmd": "GetStallConfig", "queue": "st3"},
    {"cmd": "SetStallConfig", "config": {"maxStalls": 1}},
    {"cmd": "GetStallConfig", "queue": None},
    {"cmd": "GetStallConfig"},
    # concurrency through PULL
    {"cmd": "SetConcurrency", "queue": "cq", "limit": 1},
    {"cmd": "PUSH", "queue": "cq", "data": 1},
    {"cmd": "PUSH", "queue": "cq", "data": 2},
    {"cmd": "PULL", "queue": "cq", "timeout": 0},
    {"cmd": "PULL", "queue": "cq", "timeout": 0},
    {"cmd": "PULLB", "queue": "cq", "count": 5, "timeout": 0},
    {"cmd": "GetQueueLimits", "queue": "cq"},
    {"cmd": "GetJobCounts", "queue": "cq"},
]


def _run(port: int) -> list[bytes]:
    c = BQ(port)
    out = []
    try:
        for i, s in enumerate(STEPS):
            c.send(dict(s, reqId=f"s{i}"))
            body = c.recv_frame()
            out.append(body)
    finally:
        c.close()
    return out


def _masked(bodies: list[bytes]) -> list:
    """Decoded replies, with the values that differ by nature (job ids, timestamps) masked."""
    from .bunqueue_support import unpack
    out = []
    for b in bodies:
        r = unpack(b)
        if isinstance(r, dict) and isinstance(r.get("job"), dict):
            r["job"] = {k: type(v).__name__ for k, v in r["job"].items()}
        if isinstance(r, dict) and isinstance(r.get("id"), str):
            r["id"] = "<id>"
        out.append(r)
    return out


def _wire(body: bytes) -> tuple[str, str]:
    """The reply's values and scalar wire types, in wire order (repr keeps dict order)."""
    a = annotate(body)
    return repr(a.value), repr(a.types)


@pytest.mark.skipif(bun_missing_reason() is not None, reason=str(bun_missing_reason()))
def test_replies_match_the_reference_on_the_wire(tmp_path):
    with BunqueueServer() as ref:
        want = _run(ref.port)
    s = InProcServer(f"sqlite:///{tmp_path}/jobgate.db")
    try:
        got = _run(s.ports["bunqueue"])
    finally:
        s.stop()
    for i, (w, g) in enumerate(zip(want, got)):
        if STEPS[i]["cmd"] in ("PUSH", "PULL"):
            assert _masked([g]) == _masked([w]), (i, STEPS[i])
            continue
        assert _wire(g) == _wire(w), (i, STEPS[i])
    assert len(got) == len(want) == len(STEPS)


# ------------------------------------------------------------ jobgate, manual clock
@pytest.fixture
def jg(tmp_path):
    s = InProcServer(f"sqlite:///{tmp_path}/jobgate.db")
    yield s
    s.stop()


def _limits(c, q, **kw) -> dict:
    return c.ok("GetQueueLimits", queue=q, **kw)["data"]["limits"]


def test_a_temporary_rate_limit_counts_down_and_ends(jg):
    c = BQ(jg.ports["bunqueue"])
    q = qname("ttl")
    assert c.call("RateLimit", queue=q, limit=0, ttl=10_000) == OK
    assert _limits(c, q) == {"rateLimit": {"max": 0, "duration": 1000}, "rateLimitTtl": 10_000,
                             "concurrencyLimit": None, "maxed": False}
    c.push(q, 1)
    assert c.call("PULL", queue=q, timeout=0) == {"ok": True, "job": None}
    jg.advance(4_000)
    assert _limits(c, q)["rateLimitTtl"] == 6_000
    jg.advance(6_000)
    assert _limits(c, q)["rateLimit"] is None
    assert c.call("PULL", queue=q, timeout=0)["job"]["data"] == 1


def test_a_pull_at_the_concurrency_limit_waits_and_is_served_on_ack(jg):
    a, b = BQ(jg.ports["bunqueue"]), BQ(jg.ports["bunqueue"])
    q = qname("conc")
    assert a.call("SetConcurrency", queue=q, limit=1) == OK
    a.push(q, 1)
    a.push(q, 2)
    first = a.pull(q)["job"]["id"]
    b.send({"cmd": "PULL", "queue": q, "timeout": 30_000, "reqId": "w"})
    assert b.quiet(0.3)                               # waits: the queue is at its limit
    assert _limits(a, q)["maxed"] is True
    assert a.call("ACK", id=first) == OK
    r = b.recv_reply("w")
    assert r["job"]["data"] == 2                      # served at once, not at the timeout


def test_a_rate_limited_pull_is_served_when_the_window_allows(jg):
    a = BQ(jg.ports["bunqueue"])
    q = qname("rate")
    assert a.call("RateLimit", queue=q, limit=2, duration=1000) == OK
    for i in range(3):
        a.push(q, i)
    assert len(a.ok("PULLB", queue=q, count=3, timeout=0)["jobs"]) == 2
    assert _limits(a, q)["rateLimitTtl"] == 500
    a.send({"cmd": "PULL", "queue": q, "timeout": 30_000, "reqId": "w"})
    jg.advance(499)
    assert a.quiet(0.3)
    jg.advance(1)
    assert a.recv_reply("w")["job"]["data"] == 2


def test_obliterate_forgets_the_limits_and_stall_config(jg):
    c = BQ(jg.ports["bunqueue"])
    q = qname("obl")
    c.ok("SetConcurrency", queue=q, limit=1)
    c.ok("RateLimit", queue=q, limit=3)
    c.ok("SetStallConfig", queue=q, config={"maxStalls": 9})
    assert q in c.ok("ListQueues")["queues"]          # a limited queue is listed, as bunqueue
    c.ok("Obliterate", queue=q)
    assert _limits(c, q) == {"rateLimit": None, "rateLimitTtl": -2, "concurrencyLimit": None,
                             "maxed": False}
    assert c.ok("GetStallConfig", queue=q)["config"]["maxStalls"] == 3
    assert q not in c.ok("ListQueues")["queues"]


def test_limits_survive_kill9_and_hold_a_beanstalk_reserve_after_restart(tmp_path):
    import greenstalk

    from .support import Server
    url = f"sqlite:///{tmp_path}/jobgate.db"
    q = qname("restart")
    s = Server(url, bunqueue=True)
    try:
        c = BQ(s.bunqueue_port)
        assert c.call("SetConcurrency", queue=q, limit=1) == OK     # answered after commit
        assert c.call("RateLimit", queue=q, limit=50, duration=2000) == OK
        assert c.call("SetStallConfig", queue=q, config={"maxStalls": 6}) == OK
        c.close()
    finally:
        s.kill()
    s = Server(url, bunqueue=True)
    try:
        c = BQ(s.bunqueue_port)
        assert _limits(c, q) == {"rateLimit": {"max": 50, "duration": 2000}, "rateLimitTtl": 0,
                                 "concurrencyLimit": 1, "maxed": False}
        assert c.ok("GetStallConfig", queue=q)["config"]["maxStalls"] == 6
        with greenstalk.Client(("127.0.0.1", s.port), use=q, watch=q) as g:
            g.put("a")
            g.put("b")
            first = g.reserve(timeout=1)
            with greenstalk.Client(("127.0.0.1", s.port), watch=q) as g2:
                with pytest.raises(greenstalk.TimedOutError):
                    g2.reserve(timeout=1)                    # held by the restored limit
                assert _limits(c, q)["maxed"] is True
                g.delete(first)
                assert g2.reserve(timeout=2).body == "b"
        c.close()
    finally:
        s.stop()
