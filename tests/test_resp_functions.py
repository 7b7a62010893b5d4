"""The glidemq functions and the consumer commands on the canonical engine, sans-IO: a real
engine port (memory mode, ManualClock) under protocols/resp's session Handler, commands as
argv lists, replies as the bytes the client would read (decoded with hiredis). What the golden
settles is in test_conformance_glidemq.py; this file checks the mapping onto the engine
(docs/glide-mq.md, docs/mapping.md "glide-mq"): order, delays on the producer's clock, dedup,
flows across queues, atomic refusals, pause, retention, XREADGROUP / XACK.
"""
from __future__ import annotations

import hiredis
import pytest

from core.api import COMPLETED, READY, ManualClock, Port
from protocols.contract import Context
from protocols.resp import REGISTRATION
from protocols.resp.session import WAIT, Handler

WALL0 = 1_700_000_000_000


class Server:
    """One engine and the glidemq state; `conn()` makes a connection's Handler."""

    def __init__(self) -> None:
        self.clock = ManualClock(WALL0)
        self.port = Port.create(self.clock, durable=False)
        opts = {o.name: o.default for o in REGISTRATION.options}
        self.state = REGISTRATION.make_state(self.port, opts, Context())

    def conn(self, proto: int = 2):
        h = Handler(self.state, None)
        h.proto = proto
        return Conn(h)


class Conn:
    def __init__(self, h) -> None:
        self.h = h

    def __call__(self, *words):
        """Run one command; its reply decoded (errors as hiredis.ReplyError values)."""
        argv = [w if isinstance(w, bytes) else str(w).encode() for w in words]
        out = self.h.handle(argv)
        if out is WAIT:
            return WAIT
        r = hiredis.Reader()
        r.feed(out)
        return r.gets()

    def load(self):
        assert self("FUNCTION", "LOAD", "REPLACE", "#!lua name=glidemq\n-- stand-in\n") == \
            b"glidemq"


def keys(q: str, prefix: str = "glide") -> list:
    p = f"{prefix}:{{{q}}}"
    return [f"{p}:id", f"{p}:stream", f"{p}:scheduled", f"{p}:events"]


def add(c, q, name="n", data="{}", opts="{}", ts=WALL0, delay=0, priority=0, parent="",
        max_attempts=0, custom="", lifo=None, v41_parent_queue=None, extra_keys=(),
        ttl=0, cost=0, capacity=0, skip=0):
    """FCALL glidemq_addJob in v93's 21-argument layout (or v41's: `v41_parent_queue`)."""
    args = [name, data, opts, ts, delay, priority, parent, max_attempts, "", 0, 0, 0,
            capacity, 0, cost, ttl, custom]
    if v41_parent_queue is not None:
        args.append(v41_parent_queue)
    elif lifo is not None or skip:
        args += [1 if lifo else 0, "", "", skip]
    ks = keys(q) + list(extra_keys)
    return c("FCALL", "glidemq_addJob", len(ks), *ks, *args)


@pytest.fixture
def srv():
    return Server()


@pytest.fixture
def c(srv):
    conn = srv.conn()
    conn.load()
    return conn


def job(srv, q, gid, prefix="glide"):
    jid = srv.port.find(f"{prefix}:{{{q}}}:{gid}")
    return None if jid is None else srv.port.job(jid)


def order(srv, q, n=20):
    """Reserve everything ready in `q` now; the glide ids in the order served."""
    o = srv.port.new_owner("beanstalk")
    return [srv.port.job(r.id).ext["glide"]["id"] for r in srv.port.reserve_many(o, q, n)]


def test_before_load_functions_are_not_found_and_the_load_survives_connections(srv):
    a = srv.conn()
    assert isinstance(a("FCALL", "glidemq_version", 0), hiredis.ReplyError)
    a.load()
    b = srv.conn()
    assert b("FCALL", "glidemq_version", 1, "{glidemq}:_") == b"93"
    assert srv.port.dialect_record("glidemq:lib") == "glidemq"   # stored with the jobs
    e = b("FCALL", "glidemq_moveToActive", 0)
    assert isinstance(e, hiredis.ReplyError) and "Worker function" in str(e)
    assert b("FUNCTION", "DELETE", "glidemq") == b"OK"
    assert isinstance(b("FCALL", "glidemq_version", 0), hiredis.ReplyError)


def test_ids_per_queue_in_both_layouts_custom_ids_and_the_counter(srv, c):
    assert add(c, "a") == b"1"
    assert add(c, "a", v41_parent_queue="") == b"2"            # seed: 17 (+1) arguments
    assert add(c, "b") == b"1"                                 # its own counter
    assert add(c, "a", custom="order-42") == b"order-42"
    assert add(c, "a", custom="order-42") == b"duplicate"
    assert add(c, "a", custom="100") == b"100"                 # moves the counter up
    assert add(c, "a") == b"101"
    assert add(c, "a", custom="7") == b"7"                     # below: the counter stays
    assert add(c, "a") == b"102"
    assert srv.port.dialect_record("glidemq:id:glide:{a}") == 102
    v = job(srv, "a", "order-42")
    assert v.uid == "glide:{a}:order-42" and v.queue == "a" and v.dialect == "glidemq"


def test_v41_argument_18_is_the_parent_queue_and_v93s_is_lifo(srv, c):
    add(c, "q", parent="7", v41_parent_queue="other")
    g = job(srv, "q", "1").ext["glide"]
    assert ["parentQueue", "other"] in g["x"] and ["lifo", "1"] not in g["x"]
    add(c, "q", lifo=True)
    assert job(srv, "q", "2").ext.get("lifo") is True


def test_consumption_order_is_glide_mqs_prioritized_then_lifo_then_fifo(srv, c):
    add(c, "q", name="plain1")                 # 1
    add(c, "q", name="lifo1", lifo=True)       # 2
    add(c, "q", name="p5", priority=5)         # 3
    add(c, "q", name="plain2")                 # 4
    add(c, "q", name="lifo2", lifo=True)       # 5
    add(c, "q", name="p2", priority=2)         # 6
    assert order(srv, "q") == ["6", "3", "5", "2", "1", "4"]


def test_delay_is_due_on_the_producers_clock(srv, c):
    # produced 10 s ago with a 60 s delay: due 50 s from the server's now
    assert add(c, "q", ts=WALL0 - 10_000, delay=60_000) == b"1"
    assert order(srv, "q") == []
    srv.clock.advance(49_999)
    srv.port.tick()
    assert order(srv, "q") == []
    srv.clock.advance(1)
    srv.port.tick()
    assert order(srv, "q") == ["1"]


def test_dedup_modes(srv, c):
    def dd(did, mode, ttl=0, ts=WALL0, delay=0):
        ks = ["glide:{q}:dedup"] + keys("q")
        return c("FCALL", "glidemq_dedup", 5, *ks, did, ttl, mode, "n", "{}", "{}", ts, delay,
                 0, "", 0, "", 0, 0, 0, 0, 0, 0, 0, "", 0, "", 0)
    assert dd("s", "simple") == b"1"
    assert dd("s", "simple") == b"skipped"
    srv.port.complete(job(srv, "q", "1").id, b"", "workq")
    assert dd("s", "simple") == b"2"                           # finished: no longer blocks
    assert dd("t", "throttle", 5000) == b"3"
    assert dd("t", "throttle", 5000, ts=WALL0 + 4999) == b"skipped"
    assert dd("t", "throttle", 5000, ts=WALL0 + 5000) == b"4"
    assert dd("d", "debounce", delay=10_000) == b"5"
    assert dd("d", "debounce", delay=10_000) == b"6"           # replaces the delayed one
    assert job(srv, "q", "5") is None and job(srv, "q", "6") is not None
    assert dd("w", "debounce") == b"7"
    assert dd("w", "debounce") == b"skipped"                   # waiting: kept, skipped
    assert srv.state.dedup_hash("glide:{q}") == {
        "s": f"2:{WALL0}", "t": f"4:{WALL0 + 5000}", "d": f"6:{WALL0}", "w": f"7:{WALL0}"}


def _flow(c, parent_q, children):
    """addFlow with children [(queue, name)]."""
    ks = keys(parent_q)
    args = ["parent", "{}", "{}", WALL0, 0, 0, 0, len(children), ""]
    for q, name in children:
        ks += keys(q)
        args += [name, '{"c":1}', "{}", 0, 0, 0, f"glide:{{{q}}}", parent_q, ""]
    args += [0]
    return c("FCALL", "glidemq_addFlow", len(ks), *ks, *args)


def test_a_flow_parent_waits_for_children_completed_by_other_dialects(srv, c):
    assert _flow(c, "pf", [("pf", "a"), ("pc", "b")]) == b'["1","2","1"]'
    parent = job(srv, "pf", "1")
    assert parent.blocked and parent.ext["glide"]["deps"] == ["glide:{pf}:2", "glide:{pc}:1"]
    # a beanstalk worker reserves child a and deletes it: that completes it
    o = srv.port.new_owner("beanstalk")
    (r,) = srv.port.reserve_many(o, "pf", 5)
    assert srv.port.job(r.id).ext["glide"]["id"] == "2"
    assert srv.port.delete(o, r.id)
    a = srv.port.job(r.id)
    assert a.state is COMPLETED and a.ext["finishedOn"] == WALL0
    assert job(srv, "pf", "1").blocked
    # a bunqueue-style ACK of child b (any holder)
    b = job(srv, "pc", "1")
    assert srv.port.complete(b.id, b"\x01", "bunqueue")
    p = job(srv, "pf", "1")
    assert p.state is READY and not p.blocked
    assert _flow(c, "pf", []) == b'["3"]'                       # nothing to wait for
    assert job(srv, "pf", "3").state is READY


def test_a_flow_with_a_taken_custom_id_creates_nothing(srv, c):
    add(c, "pc", custom="x")
    ks = keys("pf") + keys("pc")
    r = c("FCALL", "glidemq_addFlow", 8, *ks, "p", "{}", "{}", WALL0, 0, 0, 0, 1, "",
          "c", "{}", "{}", 0, 0, 0, "glide:{pc}", "pf", "x", 0)
    assert r == b'["duplicate"]'
    assert srv.port.queue("pf") is None and srv.state.counter("glide:{pf}") == 0


@pytest.mark.parametrize("words", [
    ["FCALL", "glidemq_addJob", 3, "glide:{e}:id", "glide:{e}:stream", "glide:{e}:scheduled",
     "n", "{}", "{}", WALL0],
    ["FCALL", "glidemq_addJob", 4, "glide:{e}:ident", "glide:{e}:stream",
     "glide:{e}:scheduled", "glide:{e}:events", "n", "{}", "{}", WALL0],
    ["FCALL", "glidemq_addJob", 4, *keys("e"), "n", "{}", "{}", "now", 1000],
    ["FCALL", "glidemq_addFlow", 4, *keys("e"), "p", "{}", "{}", WALL0, 0, 0, 0, 1, ""],
    ["FCALL", "glidemq_pause", 1, "glide:{e}:meta"],
])
def test_refused_calls_change_nothing(srv, c, words):
    r = c(*words)
    assert isinstance(r, hiredis.ReplyError) and str(r).startswith("ERR ")
    assert srv.port.queue("e") is None
    assert srv.port.dialect_records("glidemq:") == {"glidemq:lib": "glidemq"}
    assert not srv.state.events.get("glide:{e}")


def test_cost_above_capacity_uses_up_the_id_as_glide_mq_does(srv, c):
    assert add(c, "e", cost=5000, capacity=1000) == b"ERR:COST_EXCEEDS_CAPACITY"
    assert srv.port.queue("e") is None
    assert add(c, "e") == b"2"


def test_pause_and_resume_pause_the_canonical_queue(srv, c):
    add(c, "q")
    assert c("FCALL", "glidemq_pause", 2, "glide:{q}:meta", "glide:{q}:events") == 1
    assert srv.port.queue("q").paused and order(srv, "q") == []
    assert srv.state.meta("glide:{q}") == {"paused": "1"}
    assert c("FCALL", "glidemq_resume", 2, "glide:{q}:meta", "glide:{q}:events") == 1
    assert not srv.port.queue("q").paused and order(srv, "q") == ["1"]
    ev = [f[1] for _, f in srv.state.events["glide:{q}"]]
    assert ev == ["added", "paused", "resumed"]


def test_remove_on_complete_and_on_fail(srv, c):
    add(c, "q", opts='{"removeOnComplete":true}')
    add(c, "q", opts='{"removeOnFail":true}')
    add(c, "q", opts='{"removeOnComplete":{"count":10}}')
    one, two, three = (job(srv, "q", g).id for g in ("1", "2", "3"))
    srv.port.complete(one, b"", "workq")
    assert srv.port.job(one) is None
    assert srv.port.fail(two, b"boom", "workq") == "dead"      # maxAttempts 0: one run
    assert srv.port.job(two) is None
    srv.port.complete(three, b"", "workq")
    assert srv.port.job(three).state is COMPLETED            # a count keeps it


def test_xreadgroup_reserves_and_xack_completes(srv, c):
    stream = "glide:{q}:stream"
    r = c("XREADGROUP", "GROUP", "workers", "w1", "COUNT", 5, "STREAMS", stream, ">")
    assert isinstance(r, hiredis.ReplyError) and str(r).startswith("NOGROUP")
    assert c("XGROUP", "CREATE", stream, "workers", "$", "MKSTREAM") == b"OK"
    assert isinstance(c("XGROUP", "CREATE", stream, "workers", "$"), hiredis.ReplyError)
    add(c, "q", name="a")
    add(c, "q", name="b")
    ((key, entries),) = c("XREADGROUP", "GROUP", "workers", "w1", "COUNT", 5, "STREAMS",
                          stream, ">")
    assert key == stream.encode() and [e[1] for e in entries] == [
        [b"jobId", b"1", b"name", b"a"], [b"jobId", b"2", b"name", b"b"]]
    assert c("XACK", stream, "workers", entries[0][0]) == 1
    assert job(srv, "q", "1").state is COMPLETED
    assert c("XACK", stream, "workers", entries[0][0]) == 0      # already done


def test_a_blocking_xreadgroup_is_woken_by_a_put_from_any_dialect(srv):
    c = srv.conn()
    c.load()
    stream = "glide:{q}:stream"
    c("XGROUP", "CREATE", stream, "workers", "$", "MKSTREAM")
    woken = []
    c.h.on_wake = lambda: woken.append(1)
    assert c("XREADGROUP", "GROUP", "workers", "w", "BLOCK", 5000, "STREAMS", stream,
             ">") is WAIT
    jid = srv.port.put("q", b"from beanstalk", 0, 0, 60_000, "beanstalk")
    assert woken and c.h.has_reply()
    r = hiredis.Reader()
    r.feed(c.h.take_reply())
    ((_, ((sid, fields),)),) = r.gets()
    assert sid.endswith(b"-%d" % jid) and fields[:2] == [b"jobId", srv.port.job(jid).uid.encode()]
    # a wait that times out answers the null array
    assert c("XREADGROUP", "GROUP", "workers", "w", "BLOCK", 100, "STREAMS", stream,
             ">") is WAIT
    srv.clock.advance(100)
    srv.port.tick()
    assert c.h.take_reply() == b"*-1\r\n"


def test_auth_with_a_bunqueue_token_scopes_the_connection():
    from core.api import NOBODY, Access, Principal
    srv = Server()
    access = Access(tokens=[("s3cret", Principal("token:jobs", "token", ("jobs*",)))])
    srv.state.context = Context(access=access)
    c = Conn(Handler(srv.state, NOBODY))
    assert str(c("FCALL", "glidemq_version", 0)) == "NOAUTH Authentication required."
    assert c("PING") == b"PONG"
    assert str(c("AUTH", "wrong")).startswith("WRONGPASS")
    assert c("AUTH", "default", "s3cret") == b"OK"
    c.load()
    assert add(c, "jobs-a") == b"1"
    e = add(c, "other")
    assert str(e).startswith("NOPERM") and srv.port.queue("other") is None
    # HELLO with AUTH authenticates and switches protocol in one step
    c2 = Conn(Handler(srv.state, NOBODY))
    r = c2("HELLO", 3, "AUTH", "default", "s3cret")
    assert r[b"proto"] == 3 and c2.h.proto == 3   # a RESP3 map


def test_attempts_and_backoff_from_opts_apply_to_a_failure_from_any_dialect(srv, c):
    add(c, "q", opts='{"attempts":3,"backoff":{"type":"exponential","delay":1000}}')
    jid = job(srv, "q", "1").id
    o = srv.port.new_owner("workq")
    delays = []
    for attempt in range(3):
        (r,) = srv.port.reserve_many(o, "q", 1)
        assert r.id == jid
        outcome = srv.port.fail(jid, b"boom", "workq")   # workq brings no delay of its own
        v = srv.port.job(jid)
        if outcome == "retried":
            delays.append(v.left_ms)
            srv.clock.advance(v.left_ms)
            srv.port.tick()
    assert delays == [1000, 2000] and outcome == "dead"
    assert srv.port.job(jid).state == "buried"        # glide-mq's `failed`
    add(c, "q", opts='{"lifo":true}')                # lifo from opts alone
    assert job(srv, "q", "2").ext.get("lifo") is True


def test_an_http_request_on_the_resp_port_closes_the_connection(srv):
    """Redis's cross-protocol guard: an inline POST or Host: line closes without a reply."""
    from protocols.resp.session import QUIT
    h = Handler(srv.state, None)
    assert h.handle([b"POST", b"/", b"HTTP/1.1"]) is QUIT
    assert h.handle([b"Host:", b"example.com"]) is QUIT
