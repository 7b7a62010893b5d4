"""glide-mq producers and the other dialects on one engine (issue 17; protocols/resp/glide.py,
docs/glide-mq.md, docs/mapping.md "glide-mq").

One jobgate in this process (tests/inproc.py: beanstalk, workq, bunqueue and glidemq
listeners, a SQLite file, durability commit) on a manual clock: delays move with
`advance(ms)`, never with a sleep. Jobs are added with `FCALL glidemq_addJob / dedup /
addFlow` over a raw RESP connection and consumed with greenstalk (beanstalk), the bunqueue
test client (tests/bunqueue_support.BQ) and raw workq:

- the payload is jobData's bytes, whatever they are; tube = queue = workq name;
- a delayed job (producer timestamp + delay) is not reservable before its due time;
- dedup simple / throttle / debounce and custom ids let exactly the right jobs through;
- a flow parent is ready only when every child completed, in whichever dialect (a beanstalk
  delete of the reserved child completes it; a bunqueue ACK does);
- glidemq_pause pauses the beanstalk tube (stats-tube `pause`), glidemq_resume serves it again;
- consumption order is glide-mq's (glide-mq-NOTES.md "Consumption order"): prioritized jobs
  first, lower priority first; then LIFO jobs, newest first; then plain jobs, FIFO;
- with the key view: the job hash's `state` and the `:completed` zset follow what a
  beanstalk / workq / bunqueue worker did, and removeOnComplete removes the job.
"""
from __future__ import annotations

import json

import greenstalk
import pytest

from .bunqueue_support import BQ
from .inproc import InProcServer
from .resp_support import (RespConn, add_job_args, dedup_keys, job_keys, load_library,
                           meta_keys)
from .server_support import no_reply
from .support import Raw
from .workq_support import OK as WQ_OK

MID = 2 ** 31       # beanstalk pri of canonical rank 0 (a plain glide-mq job)


@pytest.fixture
def xs(tmp_path):
    """The in-process server with every dialect (see the module docstring)."""
    s = InProcServer(f"sqlite:///{tmp_path}/jobgate.db",
                     dialects=("beanstalk", "workq", "bunqueue", "glidemq"))
    yield s
    s.stop()


@pytest.fixture
def rc(xs):
    """A RESP connection with the library loaded; closed at teardown."""
    c = RespConn(xs.ports["glidemq"])
    load_library(c)
    yield c
    c.close()


@pytest.fixture
def bean(xs):
    """`bean(tube)`: a greenstalk client (bytes bodies) using and watching `tube`."""
    opened = []

    def open_(tube: str):
        c = greenstalk.Client(("127.0.0.1", xs.ports["beanstalk"]), encoding=None, use=tube,
                              watch=tube)
        opened.append(c)
        return c
    yield open_
    for c in opened:
        c.close()


@pytest.fixture
def bq(xs):
    c = BQ(xs.ports["bunqueue"])
    yield c
    c.close()


@pytest.fixture
def wq(xs):
    from .workq_support import WorkqRaw
    c = WorkqRaw(xs.ports["workq"])
    yield c
    c.sock.close()


@pytest.fixture
def raw(xs):
    """`raw(tube)`: a raw beanstalk connection watching only `tube` (for a waiting reserve)."""
    opened = []

    def open_(tube: str) -> Raw:
        r = Raw(xs.ports["beanstalk"])
        assert r.cmd(b"watch %s\r\n" % tube.encode()) == b"WATCHING 2\r\n"
        assert r.cmd(b"ignore default\r\n") == b"WATCHING 1\r\n"
        opened.append(r)
        return r
    yield open_
    for r in opened:
        r.close()


def reservable(g) -> list[bytes]:
    """Reserve (timeout 0) until nothing is ready; the bodies, in order (left reserved)."""
    out = []
    while True:
        try:
            out.append(g.reserve(timeout=0).body)
        except greenstalk.TimedOutError:
            return out


def timed_out(g) -> bool:
    try:
        job = g.reserve(timeout=0)
    except greenstalk.TimedOutError:
        return True
    raise AssertionError(f"reserved {job.body!r}")


def reserved_body(frame: bytes) -> bytes:
    head, _, rest = frame.partition(b"\r\n")
    assert head.startswith(b"RESERVED "), frame
    return rest[:-2]


# ================================================================ payload in every dialect
BODIES = [b'{"to":"user@example.com","subject":"Hello"}', "{\"ü\":\"é\"}".encode(),
          b"\x00\xff\xfe\r\nbinary\r\n", b""]


def test_addjob_is_reserved_over_beanstalk_with_the_same_bytes(rc, bean):
    q = "xd-bytes"
    assert [rc.add_job(q, "n", b) for b in BODIES] == [b"1", b"2", b"3", b"4"]
    g = bean(q)
    for body in BODIES:
        job = g.reserve(timeout=0)
        assert job.body == body
        st = g.stats_job(job)
        assert (st["tube"], st["state"], st["pri"], st["ttr"]) == (q, "reserved", MID, 30)
        g.delete(job)
    assert timed_out(g)


def test_lock_duration_is_the_beanstalk_ttr(rc, bean):
    q = "xd-ttr"
    assert rc.add_job(q, "n", b"x", opts=json.dumps({"lockDuration": 5000})) == b"1"
    g = bean(q)
    assert g.stats_job(g.reserve(timeout=0))["ttr"] == 5


def test_addjob_is_pulled_and_acked_over_bunqueue(rc, bq):
    q = "xd-bq"
    assert rc.add_job(q, "send-email", BODIES[0]) == b"1"
    assert rc.add_job(q, "raw", BODIES[2]) == b"2"
    uid1, uid2 = f"glide:{{{q}}}:1", f"glide:{{{q}}}:2"
    assert bq.state(uid1) == "waiting"
    j = bq.pull(q)["job"]
    assert (j["id"], j["queue"], j["name"], j["data"]) == (uid1, q, "send-email",
                                                          BODIES[0].decode())
    assert bq.state(uid1) == "active"
    bq.ok("ACK", id=uid1, result={"sent": True})
    assert bq.state(uid1) == "completed"
    j = bq.pull(q)["job"]
    assert (j["id"], j["data"]) == (uid2, BODIES[2])      # not UTF-8: bunqueue's bin
    bq.ok("ACK", id=uid2)
    assert bq.pull(q)["job"] is None


def test_addjob_is_leased_and_completed_over_workq(rc, wq):
    q = "xd-wq"
    assert rc.add_job(q, "n", BODIES[2]) == b"1"
    frame = wq.cmd(b"lease %s 0\r\n" % q.encode())
    head, rest = frame.split(b"\r\n", 2)[1], frame.split(b"\r\n", 2)[2]
    wid, name, ttr, size = head.split(b" ")
    assert (name, ttr, int(size)) == (q.encode(), b"30000", len(BODIES[2]))
    assert rest[:len(BODIES[2])] == BODIES[2]
    # the id a workq client got must be one it can complete with
    assert wq.cmd(b"complete %s 2\r\nok\r\n" % wid) == WQ_OK
    assert wq.cmd(b"lease %s 0\r\n" % q.encode()) == b"-TIMEOUT\r\n"


# ============================================================================= delays
def test_delayed_job_is_not_reservable_before_its_due_time(xs, rc, bean, raw):
    q = "xd-delay"
    ts = xs.clock.wall_ms()                 # the producer's timestamp: now
    assert rc.add_job(q, "later", b"later", ts=ts, delay=60_000) == b"1"
    assert rc.add_job(q, "now", b"now", ts=ts) == b"2"
    g = bean(q)
    st = g.stats_tube(q)
    assert (st["current-jobs-delayed"], st["current-jobs-ready"]) == (1, 1)
    job = g.reserve(timeout=0)
    assert job.body == b"now"
    g.delete(job)                           # (or its TTR would end within the minute)
    assert timed_out(g)
    r = raw(q)
    r.send(b"reserve-with-timeout 120\r\n")  # waits; the clock, not a sleep, decides
    xs.advance(59_999)
    assert no_reply(r)
    xs.advance(1)
    assert reserved_body(r.reply()) == b"later"


def test_delay_counts_from_the_producer_timestamp(xs, rc, bean, raw):
    """timestamp = now - 59,900 and delay 60,000: due in 100 ms of the server's clock."""
    q = "xd-past"
    assert rc.add_job(q, "n", b"soon", ts=xs.clock.wall_ms() - 59_900, delay=60_000) == b"1"
    g = bean(q)
    assert timed_out(g)
    r = raw(q)
    r.send(b"reserve-with-timeout 60\r\n")
    xs.advance(99)
    assert no_reply(r)
    xs.advance(1)
    assert reserved_body(r.reply()) == b"soon"


# ============================================================================= dedup
def _dedup(rc, q, dedup_id, mode, body, ttl=0, **kw):
    return rc.fcall("glidemq_dedup", dedup_keys(q),
                    [dedup_id, str(ttl), mode] + add_job_args("d", body, **kw))


def test_dedup_simple_skips_while_the_job_is_unfinished(rc, bean):
    q = "xd-simple"
    assert _dedup(rc, q, "k", "simple", b"a") == b"1"
    assert _dedup(rc, q, "k", "simple", b"b") == b"skipped"
    assert _dedup(rc, q, "other", "simple", b"c") == b"2"
    g = bean(q)
    job = g.reserve(timeout=0)
    assert job.body == b"a"
    assert _dedup(rc, q, "k", "simple", b"d") == b"skipped"     # active: still unfinished
    g.delete(job)                                               # completes it
    assert _dedup(rc, q, "k", "simple", b"e") == b"3"
    assert reservable(g) == [b"c", b"e"]


def test_dedup_throttle_uses_the_producer_timestamps(rc, bean):
    q = "xd-throttle"
    t = 1_700_000_000_000
    replies = [_dedup(rc, q, "k", "throttle", b"%d" % d, ttl=1000, ts=t + d)
               for d in (0, 999, 1000, 1500, 1999, 2000)]
    assert replies == [b"1", b"skipped", b"2", b"skipped", b"skipped", b"3"]
    assert reservable(bean(q)) == [b"0", b"1000", b"2000"]


def test_dedup_debounce_replaces_a_delayed_job_and_skips_an_active_one(xs, rc, bean):
    q = "xd-debounce"
    ts = xs.clock.wall_ms()
    assert _dedup(rc, q, "k", "debounce", b"first", ts=ts, delay=5000) == b"1"
    assert _dedup(rc, q, "k", "debounce", b"second", ts=ts, delay=5000) == b"2"
    g = bean(q)
    assert g.stats_tube(q)["current-jobs-delayed"] == 1
    xs.advance(5000)
    job = g.reserve(timeout=0)
    assert job.body == b"second"
    assert _dedup(rc, q, "k", "debounce", b"third", ts=ts) == b"skipped"
    assert timed_out(g)


def test_custom_ids_are_unique_per_queue(rc, bean):
    q, q2 = "xd-custom", "xd-custom2"
    assert rc.add_job(q, "n", b"a", custom_id="order-7") == b"order-7"
    assert rc.add_job(q, "n", b"b", custom_id="order-7") == b"duplicate"
    assert rc.add_job(q2, "n", b"c", custom_id="order-7") == b"order-7"
    assert rc.add_job(q, "n", b"d", custom_id="10") == b"10"
    assert rc.add_job(q, "n", b"e") == b"11"             # a numeric custom id moves the counter
    assert reservable(bean(q)) == [b"a", b"d", b"e"]
    assert reservable(bean(q2)) == [b"c"]


# ============================================================================== flows
def _add_flow(rc, parent_q, children, ts=1_700_000_000_000):
    """addFlow: a parent in `parent_q` with children [(queue, data)]; the JSON reply."""
    keys = job_keys(parent_q)
    argv = ["parent", "parent-data", "{}", str(ts), "0", "0", "0", str(len(children)), ""]
    for cq, data in children:
        keys += job_keys(cq)
        argv += ["child", data, "{}", "0", "0", "0", f"glide:{{{cq}}}", parent_q, ""]
    argv.append("0")
    return json.loads(rc.fcall("glidemq_addFlow", keys, argv))


def test_flow_parent_waits_for_a_beanstalk_delete_and_a_bunqueue_ack(xs, rc, bean, bq, raw):
    p, c1, c2 = "xd-flow-p", "xd-flow-c1", "xd-flow-c2"
    assert _add_flow(rc, p, [(c1, "one"), (c2, "two")]) == ["1", "1", "1"]
    gp = bean(p)
    assert timed_out(gp)
    g1 = bean(c1)
    job = g1.reserve(timeout=0)
    assert job.body == b"one"
    g1.release(job)                      # released, not done: the parent still waits
    assert timed_out(gp)
    g1.delete(g1.reserve(timeout=0))     # a beanstalk delete completes a glide-mq job
    assert timed_out(gp)
    r = raw(p)
    r.send(b"reserve-with-timeout 600\r\n")
    j = bq.pull(c2)["job"]
    assert (j["id"], j["data"]) == (f"glide:{{{c2}}}:1", "two")
    assert no_reply(r)
    bq.ok("ACK", id=j["id"])
    assert reserved_body(r.reply()) == b"parent-data"


def test_flow_parent_waits_for_a_workq_complete(rc, bean, wq):
    p, c = "xd-flowq-p", "xd-flowq-c"
    assert _add_flow(rc, p, [(c, "w")]) == ["1", "1"]
    frame = wq.cmd(b"lease %s 0\r\n" % c.encode())
    wid = frame.split(b"\r\n")[1].split(b" ")[0]
    assert timed_out(bean(p))
    assert wq.cmd(b"complete %s 0\r\n\r\n" % wid) == WQ_OK
    assert reservable(bean(p)) == [b"parent-data"]


# ======================================================================= pause, resume
def test_pause_pauses_the_beanstalk_tube_and_resume_serves_it(rc, bean, raw):
    q = "xd-pause"
    assert rc.add_job(q, "n", b"p1") == b"1"
    assert rc.fcall("glidemq_pause", meta_keys(q), []) == 1
    g = bean(q)
    st = g.stats_tube(q)
    assert st["pause"] > 0 and st["pause-time-left"] > 0, st
    assert st["current-jobs-ready"] == 1
    assert timed_out(g)
    assert rc.add_job(q, "n", b"p2") == b"2"           # adding still works while paused
    r = raw(q)
    r.send(b"reserve-with-timeout 600\r\n")
    assert no_reply(r)
    assert rc.fcall("glidemq_resume", meta_keys(q), []) == 1
    assert reserved_body(r.reply()) == b"p1"
    st = g.stats_tube(q)
    assert (st["pause"], st["pause-time-left"]) == (0, 0)
    assert reservable(g) == [b"p2"]


# ======================================================================= consumption order
ORDER_ADDS = [  # (body, priority, lifo)
    (b"plain-a", 0, False), (b"lifo-1", 0, True), (b"prio-5a", 5, False),
    (b"plain-b", 0, False), (b"lifo-2", 0, True), (b"prio-2", 2, False),
    (b"prio-5b", 5, False), (b"prio-2048", 2048, False), (b"prio-1", 1, False),
]
#: prioritized first (lower first, FIFO within one), LIFO newest first, then FIFO
ORDER_EXPECTED = [b"prio-1", b"prio-2", b"prio-5a", b"prio-5b", b"prio-2048", b"lifo-2",
                  b"lifo-1", b"plain-a", b"plain-b"]


def test_consumption_order_through_beanstalk_is_glide_mqs(rc, bean):
    q = "xd-order"
    for body, prio, lifo in ORDER_ADDS:
        rc.add_job(q, "o", body, priority=prio, lifo=lifo)
    assert reservable(bean(q)) == ORDER_EXPECTED


def test_consumption_order_through_bunqueue_is_glide_mqs(rc, bq):
    q = "xd-order-bq"
    for body, prio, lifo in ORDER_ADDS:
        rc.add_job(q, "o", body, priority=prio, lifo=lifo)
    got = [bq.pull(q)["job"]["data"].encode() for _ in ORDER_ADDS]
    assert got == ORDER_EXPECTED


def test_delayed_prioritized_job_takes_its_rank_when_due(xs, rc, bean):
    q = "xd-order-delay"
    ts = xs.clock.wall_ms()
    rc.add_job(q, "o", b"plain", ts=ts)
    rc.add_job(q, "o", b"prio-3-delayed", ts=ts, priority=3, delay=1000)
    xs.advance(1000)
    assert reservable(bean(q)) == [b"prio-3-delayed", b"plain"]


# ============================================================ the key view (needs keys*)
def _state(rc, q, jid):
    return rc.call("HGET", f"glide:{{{q}}}:job:{jid}", "state")


def test_job_hash_state_follows_beanstalk_workq_and_bunqueue_workers(rc, bean, wq, bq):
    q = "xd-state"
    for i in range(3):
        assert rc.add_job(q, "s", b"%d" % i) == b"%d" % (i + 1)
    assert [_state(rc, q, i) for i in (1, 2, 3)] == [b"waiting"] * 3
    g = bean(q)
    job = g.reserve(timeout=0)
    assert _state(rc, q, 1) == b"active"
    g.delete(job)
    assert _state(rc, q, 1) == b"completed"
    assert rc.call("ZCARD", f"glide:{{{q}}}:completed") == 1
    frame = wq.cmd(b"lease %s 0\r\n" % q.encode())
    wid = frame.split(b"\r\n")[1].split(b" ")[0]
    assert _state(rc, q, 2) == b"active"
    assert wq.cmd(b"complete %s 0\r\n\r\n" % wid) == WQ_OK
    assert _state(rc, q, 2) == b"completed"
    j = bq.pull(q)["job"]
    assert j["id"] == f"glide:{{{q}}}:3" and _state(rc, q, 3) == b"active"
    bq.ok("ACK", id=j["id"], result={"r": 1})
    assert _state(rc, q, 3) == b"completed"
    assert rc.call("ZCARD", f"glide:{{{q}}}:completed") == 3
    members = rc.call("ZRANGE", f"glide:{{{q}}}:completed", "0", "-1")
    assert sorted(members) == [b"1", b"2", b"3"]
    assert rc.call("HGET", f"glide:{{{q}}}:job:3", "returnvalue") == b'{"r":1}'


def test_remove_on_complete_removes_the_job_instead(rc, bean):
    q = "xd-roc"
    assert rc.add_job(q, "r", b"gone", opts=json.dumps({"removeOnComplete": True})) == b"1"
    assert rc.add_job(q, "r", b"kept") == b"2"
    g = bean(q)
    for _ in range(2):
        g.delete(g.reserve(timeout=0))
    assert rc.call("EXISTS", f"glide:{{{q}}}:job:1") == 0
    assert _state(rc, q, 1) is None
    assert _state(rc, q, 2) == b"completed"
    assert rc.call("ZCARD", f"glide:{{{q}}}:completed") == 1


def test_flow_parent_state_is_waiting_children_until_the_children_completed(rc, bean):
    p, c = "xd-flowk-p", "xd-flowk-c"
    assert _add_flow(rc, p, [(c, "k")]) == ["1", "1"]
    assert _state(rc, p, 1) == b"waiting-children"
    assert rc.call("SMEMBERS", f"glide:{{{p}}}:deps:1") == [f"glide:{{{c}}}:1".encode()]
    g = bean(c)
    g.delete(g.reserve(timeout=0))
    assert _state(rc, c, 1) == b"completed"
    assert _state(rc, p, 1) == b"waiting"
