"""The event feed (core/events.py): one typed event per state change, in order per job; each
subscription a bounded buffer that drops its oldest events, counted, and never holds up the
engine; the journal and bunqueue's SubscribeEvents are consumers of it.

Engine-level tests use the port on a ManualClock; one test goes through real sockets (a bunqueue
subscriber sees the jobs of every dialect), and one drives a bunqueue connection sans-IO to show
that a subscriber whose peer stops reading gets only the newest events once it reads again.
"""
from __future__ import annotations

import time

import greenstalk
import msgpack
import pytest

from core.api import Event, Failure, ManualClock, Port
from protocols.bunqueue.session import event_frame

from .bunqueue_support import BQ, qname


@pytest.fixture
def port():
    return Port.create(ManualClock(), durable=True)


def _kinds(events, job_id=None):
    return [e.kind for e in events if job_id is None or e.job_id == job_id]


# ------------------------------------------------------------------ ordering
def test_every_change_is_one_event_in_order_per_job(port):
    sub = port.subscribe()
    o = port.new_owner("beanstalk")
    a = port.put("q", b"a", 0, 0, 1000, "beanstalk")
    b = port.put("q", b"b", 5, 0, 1000, "beanstalk")
    port.reserve(o, ["q"], 0, None)                    # a (rank 0 before 5)
    port.release(o, a, 9, 0)                           # a behind b now
    port.reserve(o, ["q"], 0, None)                    # b
    port.bury(o, b, 1)
    port.kick("q", 1, "beanstalk")                     # b again
    port.reserve(o, ["q"], 0, None)                    # b (rank 1 < 9)
    port.delete(o, b)
    port.clock.advance(0)
    evs = sub.take()
    assert _kinds(evs, a) == ["put", "reserve", "release"]
    assert _kinds(evs, b) == ["put", "reserve", "bury", "kick", "reserve", "delete"]
    assert [e.seq for e in evs] == list(range(evs[0].seq, evs[0].seq + len(evs)))
    e = evs[-1]
    assert isinstance(e, Event) and (e.prev, e.state, e.dialect, e.attempt) == (
        "reserved", "gone", "beanstalk", 2)


def test_a_final_failure_is_fail_then_dlq_and_a_lock_expiry_timeout(port):
    from core.failures import JobPolicy
    port.set_policy("bunqueue", JobPolicy(stall_counts_attempt=True, max_stalls=3))
    sub = port.subscribe()
    o = port.new_owner("bunqueue", margin=False)
    j = port.put("q", b"x", 0, 0, 300, "bunqueue", "u-1", max_fails=1, event="push")
    port.reserve(o, ["q"], 0, None)
    port.fail(j, b"oops", "bunqueue", 0, Failure("oops", ["at f"]))
    k = port.put("q", b"y", 0, 0, 300, "bunqueue", "u-2", max_fails=1, event="push")
    port.reserve(o, ["q"], 0, None)
    port.clock.advance(300)
    port.tick()
    evs = sub.take()
    assert _kinds(evs, j) == ["push", "reserve", "fail", "dlq"]
    fail = [e for e in evs if e.job_id == j and e.kind == "fail"][0]
    assert (fail.error, fail.state, fail.prev) == ("oops", "buried", "reserved")
    assert _kinds(evs, k) == ["push", "reserve", "timeout", "fail", "dlq"]
    assert [e for e in evs if e.job_id == k][-2].error == "Lock expired at max attempts (1)"
    v = port.job(j)
    assert v.ext["failedReason"] == "oops" and v.ext["stacktrace"] == ["at f"]


def test_subscriptions_see_an_event_before_the_sinks_act_on_it(port):
    """A workq `run` deletes its job once answered (a result waiter): subscribers get the
    `complete` before the `delete` that answering caused, as the history does."""
    sub = port.subscribe()
    answered = []
    port.run("q", b"r", 0, 1000, 5000, "c6a7b810-9dad-41d1-80b4-00c04fd430c8", "workq",
             answered.append)
    o = port.new_owner("workq", margin=False, durable=True)
    r = port.reserve(o, ["q"], 0, None)
    port.complete(r.id, b"done", "workq")
    assert answered and answered[0].result == b"done"
    assert _kinds(sub.take()) == ["run", "reserve", "complete", "delete"]
    batch = port.persistence.take()
    assert [e[3] for e in batch.events] == ["run", "reserve", "complete", "delete"]


# ---------------------------------------------------------------- bounding
def test_a_full_buffer_drops_its_oldest_events_and_counts_them(port):
    calls = []
    sub = port.subscribe(maxlen=5, notify=lambda: calls.append(1))
    ids = [port.put("q", b"%d" % i, 0, 0, 1000, "beanstalk") for i in range(12)]
    assert calls == [1]                       # once: when the buffer became non-empty
    assert sub.dropped == 7
    assert [e.job_id for e in sub.take()] == ids[-5:]   # the newest five, oldest first
    port.put("q", b"more", 0, 0, 1000, "beanstalk")
    assert calls == [1, 1]                    # non-empty again: notified again
    assert [e.kind for e in sub.take(limit=10)] == ["put"] and sub.dropped == 7


def test_a_stalled_subscriber_never_holds_up_the_engine_or_the_others(port):
    stalled = port.subscribe(maxlen=3)
    other = port.subscribe(maxlen=10_000)
    for i in range(2000):
        port.put("q", b"x", 0, 0, 1000, "beanstalk")
    assert port.stats().ready == 2000
    assert stalled.dropped == 1997 and len(stalled.take()) == 3
    assert other.dropped == 0 and len(other.take()) == 2000


def test_queue_filter_and_close(port):
    only_a = port.subscribe(queues={"a"})
    port.put("a", b"1", 0, 0, 1000, "beanstalk")
    port.put("b", b"2", 0, 0, 1000, "beanstalk")
    assert [e.queue for e in only_a.take()] == ["a"]
    only_a.set_queues(None)
    port.put("b", b"3", 0, 0, 1000, "beanstalk")
    assert [e.queue for e in only_a.take()] == ["b"]
    only_a.close()
    port.put("a", b"4", 0, 0, 1000, "beanstalk")
    assert only_a.take() == []


def test_memory_mode_without_subscribers_emits_nothing_and_with_one_emits_all():
    port = Port.create(ManualClock(), durable=False)
    port.put("q", b"x", 0, 0, 1000, "beanstalk")
    sub = port.subscribe()
    port.put("q", b"y", 0, 0, 1000, "beanstalk")
    assert _kinds(sub.take()) == ["put"]


def test_bunqueue_event_frames_of_canonical_events(port):
    sub = port.subscribe()
    o = port.new_owner("workq", margin=False)
    port.put("q", b"plain", 0, 0, 1000, "workq", "d6a7b810-9dad-41d1-80b4-00c04fd430c8",
             event="add")
    r = port.reserve(o, ["q"], 0, None)
    port.complete(r.id, b"text result", "workq")
    frames = [event_frame(e) for e in sub.take()]
    evs = [msgpack.unpackb(f[4:])["event"] for f in frames]
    assert [e["eventType"] for e in evs] == ["pushed", "pulled", "completed"]
    assert evs[2]["data"] == "text result"


# ------------------------------------------------------- over real sockets
def _events(c: BQ, n: int, timeout: float = 5.0) -> list:
    deadline = time.monotonic() + timeout
    while len(c.events) < n and time.monotonic() < deadline:
        r = msgpack.unpackb(c.recv_frame(timeout=max(0.01, deadline - time.monotonic())),
                            strict_map_key=False)
        if isinstance(r, dict) and r.get("type") == "event":
            c.events.append(r)
        else:
            c.pending.append(r)
    return [e["event"] for e in c.events]


def test_a_bunqueue_subscriber_sees_the_jobs_of_every_dialect(clocked):
    q = qname("ev")
    sub = BQ(clocked.ports["bunqueue"])
    sub.ok("SubscribeEvents", queue=q)
    with greenstalk.Client(("127.0.0.1", clocked.ports["beanstalk"]), use=q, watch=q) as g:
        jid = g.put("from beanstalk")
        job = g.reserve(timeout=1)
        g.delete(job)
    evs = _events(sub, 2)
    assert [e["eventType"] for e in evs] == ["pushed", "pulled"]
    assert evs[0]["jobId"] == evs[1]["jobId"] == "6a6f6267-6174-4000-8000-%012x" % jid
    assert sub.quiet(0.2)       # the delete has no bunqueue event
    sub.close()


class RecordingTransport:
    """The gateway side of a connection, recorded (protocols/contract.py): what the session
    sends, and deferred calls run when the test says so."""

    def __init__(self) -> None:
        self.sent: list = []
        self.deferred: list = []
        self.closed = False

    def send(self, data: bytes, durable: bool = False) -> None:
        self.sent.append(data)

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def defer(self, fn) -> None:
        self.deferred.append(fn)

    def run_deferred(self) -> None:
        while self.deferred:
            self.deferred.pop(0)()


def _frames(raw: list) -> list:
    return [msgpack.unpackb(f[4:], strict_map_key=False) for f in raw]


def test_a_subscriber_that_stops_reading_gets_the_newest_events_later():
    """While the peer does not read (the runner's pause_writing), a bunqueue subscriber's
    events wait in its subscription (10,000 at most: the oldest are dropped, the engine never
    waits); once the peer reads again (resume_writing) the newest 10,000 go out, in order."""
    from protocols.bunqueue import BunqueueInfo, Connection
    from protocols.bunqueue.codec import frame, pack
    port = Port.create(ManualClock(), durable=False)
    info = BunqueueInfo(port)
    t = RecordingTransport()
    conn = Connection(info, t)
    conn.data_received(frame(pack({"cmd": "SubscribeEvents", "queue": "slow", "reqId": "s"})))
    assert _frames(t.sent) == [{"ok": True, "id": msgpack.ExtType(0, b"\x00"), "reqId": "s"}]
    t.sent.clear()
    conn.pause_writing()
    ids = [port.put("slow", b"x", 0, 0, 1000, "beanstalk") for _ in range(10_050)]
    t.run_deferred()
    assert t.sent == []                                   # held while the peer is not reading
    assert conn.session.subscription.dropped == 50
    conn.resume_writing()
    evs = [f["event"] for f in _frames(t.sent)]
    assert len(evs) == 10_000
    assert [e["jobId"] for e in evs] == ["6a6f6267-6174-4000-8000-%012x" % i for i in ids[50:]]
    conn.connection_lost()
    assert port.stats().ready == 10_050
