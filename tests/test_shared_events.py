"""Job events across nodes in shared mode (issue 19, item 4; docs/scaling.md "Events across
nodes", core/shared_events.py): a bunqueue SubscribeEvents on one node receives the events of
jobs pushed, pulled, completed and failed on another, once each, in order; large results
travel in several notifications; events of one node are not relayed back to it. Real node
processes on one fresh PostgreSQL database, real bunqueue sockets; the relay's chunking and
bookkeeping are also checked without a database (they are sans-IO).

Needs JOBGATE_TEST_PG_URL for the node tests (skipped with a clear reason without it).
"""
from __future__ import annotations

import time
import urllib.request

from core.events import Event
from core.shared_events import CHUNK, FORGET_MS, MAX_RESULT, EventRelay, encode

from .bunqueue_support import BQ, unpack
from .shared_support import rows
from .support import Server, free_port


def _event_frames(c: BQ, n: int, timeout: float = 10.0) -> list:
    """At least `n` event dicts of connection `c` (replies read meanwhile are kept)."""
    deadline = time.monotonic() + timeout
    while len(c.events) < n and time.monotonic() < deadline:
        try:
            r = unpack(c.recv_frame(timeout=max(0.01, deadline - time.monotonic())))
        except TimeoutError:
            break
        if isinstance(r, dict) and r.get("type") == "event":
            c.events.append(r)
        else:
            c.pending.append(r)
    out = [e["event"] for e in c.events]
    c.events.clear()
    return out


def _warm(sub: BQ, pusher: BQ, queue: str) -> None:
    """Push to `queue` through `pusher` until `sub` (subscribed to it on another node) gets an
    event: the subscriber's node has announced what it wants (within 100 ms of the
    subscription) and the pusher's node relays. Then every event so far is read."""
    for _ in range(50):
        pusher.push(queue, {"warm": 1})
        if _event_frames(sub, 1, timeout=0.2):
            break
    else:
        raise AssertionError("the subscription never reached the other node")
    while _event_frames(sub, 1, timeout=0.3):
        pass


def test_subscriber_on_one_node_sees_jobs_of_another(nodes):
    """SubscribeEvents on node b; a job pushed, pulled and ACKed on node a and another failed
    for good on node c: b's subscriber gets pushed, pulled, completed (with the result) and
    failed (with the error), each once and in order; another queue's events do not come."""
    a, b, c = nodes(3)
    sub = BQ(b.bunqueue_port)
    q, warm = "evq", "evwarm"
    sub.ok("SubscribeEvents", queues=[q, warm])
    qa, qc = BQ(a.bunqueue_port), BQ(c.bunqueue_port)
    _warm(sub, qa, warm)
    _warm(sub, qc, warm)

    qa.push("evother", {"x": 0})                       # not subscribed: no event
    jid = qa.push(q, {"n": 1})
    assert qa.pull(q, timeout=1000)["job"]["id"] == jid
    qa.ok("ACK", id=jid, result={"sum": 3})
    fid = qc.push(q, {"n": 2}, maxAttempts=1)
    assert qc.pull(q, timeout=1000)["job"]["id"] == fid
    qc.ok("FAIL", id=fid, error="bad input")
    evs = _event_frames(sub, 6)
    mine = [(e["eventType"], e["jobId"]) for e in evs]
    assert mine == [("pushed", jid), ("pulled", jid), ("completed", jid),
                    ("pushed", fid), ("pulled", fid), ("failed", fid)], evs
    assert all(e["queue"] == q and isinstance(e["timestamp"], float) for e in evs)
    assert evs[2]["data"] == {"sum": 3}
    assert evs[5]["error"] == "bad input"
    assert sub.quiet(0.5)   # nothing twice, nothing of evother


def test_subscribers_on_two_nodes_get_each_event_once(nodes):
    """Subscribers on nodes a and b, a job pushed on a and pulled on b: each subscriber gets
    `pushed` and `pulled` exactly once (its own node's event locally, the other's relayed;
    no node relays an event back to where it happened). a's subscriber gets them in order
    (b pulled after a's commit); b's may get its own `pulled` before the relayed `pushed`:
    events of two nodes are not ordered with each other (docs/scaling.md "Events across
    nodes"; a's relay sends once its commit is done, and b may pull the job before)."""
    a, b = nodes(2)
    sa, sb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    q, warm = "both", "bothwarm"
    sa.ok("SubscribeEvents", queues=[q, warm])
    sb.ok("SubscribeEvents", queues=[q, warm])
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    _warm(sb, qa, warm)
    _warm(sa, qb, warm)
    while _event_frames(sa, 1, timeout=0.3) or _event_frames(sb, 1, timeout=0.3):
        pass
    jid = qa.push(q, {"n": 1})
    assert qb.pull(q, timeout=2000)["job"]["id"] == jid
    for s in (sa, sb):
        evs = _event_frames(s, 2)
        got = [(e["eventType"], e["jobId"]) for e in evs]
        assert (got if s is sa else sorted(got, reverse=True)) == [("pushed", jid),
                                                                   ("pulled", jid)], evs
        assert s.quiet(0.5)


def test_large_results_cross_in_parts_and_huge_ones_without_data(nodes):
    """A completed event whose result takes several notifications arrives whole; one whose
    result passes MAX_RESULT arrives without its data (docs/scaling.md)."""
    a, b = nodes(2)
    sub = BQ(b.bunqueue_port)
    q = "bigres"
    sub.ok("SubscribeEvents", queues=[q, "bigwarm"])
    qa = BQ(a.bunqueue_port)
    _warm(sub, qa, "bigwarm")
    big = "r" * (MAX_RESULT - 100)    # 3 notifications or more once in base64
    huge = "h" * (MAX_RESULT + 10)
    ids = []
    for result in (big, huge):
        jid = qa.push(q, {})
        assert qa.pull(q, timeout=1000)["job"]["id"] == jid
        qa.ok("ACK", id=jid, result=result)
        ids.append(jid)
    evs = [e for e in _event_frames(sub, 6) if e["eventType"] == "completed"]
    assert [e["jobId"] for e in evs] == ids
    assert evs[0]["data"] == big
    assert evs[1]["data"] is None


def test_relay_stops_when_the_subscriber_goes(nodes, pg_url, tmp_path):
    """Node a relays only while another node has subscribers: after b's subscriber
    unsubscribes, a's pushes relay nothing (a's jobgate_shared_events_sent_total stays)."""
    http = free_port()
    cfg = tmp_path / "ev.yaml"
    cfg.write_text("database:\n  mode: shared\n")
    a = Server(pg_url, bunqueue=True,
               extra=["--config", str(cfg), "--listen", f"http=127.0.0.1:{http}"])
    try:
        (b,) = nodes(1)
        sub = BQ(b.bunqueue_port)
        sub.ok("SubscribeEvents", queue="gone")
        qa = BQ(a.bunqueue_port)
        _warm(sub, qa, "gone")

        def sent() -> float:
            text = urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics",
                                          timeout=5).read().decode()
            line = [x for x in text.splitlines()
                    if x.startswith("jobgate_shared_events_sent_total ")]
            return float(line[0].split()[1])
        assert sent() >= 1
        sub.ok("UnsubscribeEvents")
        deadline = time.monotonic() + 5
        before = sent()
        while time.monotonic() < deadline:   # until the announcement of "none" reaches a
            before = sent()
            for _ in range(5):
                qa.push("gone", {})
            if sent() == before:
                break
        for _ in range(20):
            qa.push("gone", {})
        qa.call("Ping")
        assert sent() == before
        assert sub.quiet(0.3)
        assert rows(pg_url, "SELECT count(*) FROM jobs WHERE queue = 'gone'")[0][0] > 20
    finally:
        a.stop()


# ------------------------------------------------------------------ sans-IO relay
class _Engine:
    """What EventRelay reads of an engine: its feed (a real core.events.Feed)."""

    def __init__(self) -> None:
        from core.clock import ManualClock
        from core.events import Feed
        self.feed = Feed(ManualClock())


class _Node:
    """What EventRelay uses of core.shared.SharedNode: the engine, and the queries, here
    recorded instead of run (the node tests above run them on PostgreSQL)."""

    def __init__(self) -> None:
        self.e = _Engine()
        self.sent: list = []

    def query(self, fn, args, callback) -> None:
        self.sent.append(args)
        callback(len(args[1]))

    query_settled = query


def _ev(kind: str, result: bytes | None = None) -> Event:
    return Event(1, kind, 7, "u7", "q", "bunqueue", 1000, "ready", "reserved", 1, 0,
                 "w", None, result, 1, None)


def test_relay_cuts_and_joins_batches():
    """A batch larger than one notification is cut into parts and joined whole; a batch with
    a part missing is dropped and counted, and the next batch still arrives."""
    node_a, node_b = _Node(), _Node()
    ra, rb = EventRelay(node_a), EventRelay(node_b)
    ra.number, rb.number = 1, 2
    got = node_b.e.feed.subscribe(all_nodes=True)
    mine = node_b.e.feed.subscribe()           # a node-local subscription: nothing relayed
    parts = encode(1, 1, [_ev("complete", b"x" * (2 * CHUNK))])
    assert len(parts) >= 3 and all(len(p) <= CHUNK + 40 for p in parts)
    assert [rb.received(p) for p in parts][-1] == 1
    ev = got.take()[0]
    assert ev.kind == "complete" and ev.result == b"x" * (2 * CHUNK) and ev.job_id == 7
    assert mine.take() == []
    assert rb.received(parts[0]) == 0 and rb.received(parts[2]) == 0   # part 1 lost
    assert rb.lost == 1 and got.take() == []
    assert rb.received(encode(1, 3, [_ev("reserve")])[0]) == 1
    assert rb.received(encode(2, 4, [_ev("reserve")])[0]) == 0   # its own number: skipped
    assert rb.received("garbage") == 0 and rb.received("1:2:0:1:!!") == 0


def test_relay_follows_announcements_and_forgets_silent_nodes():
    """A node relays only the queues other nodes announced, stops when they announce none,
    and forgets a node not heard for FORGET_MS."""
    node = _Node()
    r = EventRelay(node)
    r.number = 1
    assert r.sub is None
    assert r.heard("2:?", 0) is True                      # an ask: announce again
    r.heard('2:["a","b"]', 0)
    assert r.sub is not None and r.sub.queues == {"a", "b"}
    r.heard("3:null", 0)                                   # node 3 wants every queue
    assert r.sub.queues is None
    r.heard("3:[]", 10)
    assert r.sub.queues == {"a", "b"}
    r.expire(FORGET_MS - 1)
    assert r.sub is not None
    r.expire(FORGET_MS)
    assert r.sub is None and r.wants == {}
    r.heard('1:["x"]', 0)                                  # its own: ignored
    assert r.sub is None


def test_announcements_follow_local_subscriptions():
    """What a node announces: its every-node subscriptions' queues, when they change, again
    every ANNOUNCE_MS while not empty, and `[]` once they are gone."""
    from core.shared_events import ANNOUNCE_MS
    node = _Node()
    r = EventRelay(node)
    r.number = 4
    assert r.announcement(0) is None                      # nothing wanted, nothing said
    node.e.feed.subscribe(["web"])                        # a node-local consumer: not told
    assert r.announcement(1) is None
    s = node.e.feed.subscribe(["b", "a"], all_nodes=True)
    assert r.announcement(2) == '4:["a", "b"]'
    assert r.announcement(3) is None
    assert r.announcement(2 + ANNOUNCE_MS) == '4:["a", "b"]'
    assert r.announcement(3 + ANNOUNCE_MS, force=True) == '4:["a", "b"]'
    s.close()
    assert r.announcement(4 + ANNOUNCE_MS) == "4:[]"
    assert r.announcement(5 + 3 * ANNOUNCE_MS, force=True) is None
