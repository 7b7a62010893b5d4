"""Heap entries of a job that leaves a shared-mode node and comes back (review of the change
that made the engine's lazy heap entries hold job ids, core.records.live_job): the job
claimed back is a new Job under the same id, and the entries the old one left must stay
stale however often the old one changed state (2**16 touches overran the claims' version
spacing: the old entries were then taken as the new job's). In process on the injectable
clock: Port.share, no database; a commit is the journal's take (which spills) and done."""
from __future__ import annotations

from core.api import WAITING, ManualClock, Port

TTR = 60_000


def _row(id: int) -> dict:
    """A ready jobs row, as the claim statement returns it (the columns load() reads)."""
    return {"id": id, "uid": None, "queue": "q", "payload": b"x", "priority": 0,
            "state": "ready", "created_ms": 1_700_000_000_000, "ready_at_ms": None,
            "delay_ms": 0, "ttr_ms": TTR, "dialect": "beanstalk", "reserves": 1,
            "timeouts": 0, "releases": 0, "buries": 0, "kicks": 0, "fails": 0, "ttl_ms": 0,
            "expires_at_ms": None, "max_attempts": 0, "max_fails": 0, "sched_ms": 0,
            "result": None, "result_ok": 0, "payload_fmt": 0, "extras": None}


class Got:
    def __init__(self) -> None:
        self.results: list = []

    def __call__(self, r) -> None:
        self.results.append(r)


def _commit(p: Port) -> None:
    b = p.persistence.take()    # shared mode: spill() first
    p.persistence.done(b)


def _claimed_touched_released(p: Port, node, jid: int) -> None:
    """Claim row `jid` for a waiting worker, touch it 2**16 times, release it and commit
    (the release gives it back to the database)."""
    w, got = p.new_owner("beanstalk"), Got()
    assert p.reserve(w, ["q"], None, got) is WAITING
    node.load([_row(jid)])
    assert [r.id for r in got.results] == [jid]
    for _ in range(1 << 16):
        assert p.touch(w, jid)
    assert p.release(w, jid, 0, 0)
    _commit(p)
    assert p.job(jid) is None


def test_a_reclaimed_job_does_not_time_out_at_an_old_touch_deadline():
    clock = ManualClock()
    p = Port.create(clock)
    node = p.share("test:1:1")
    node.on_demand = lambda: None
    jid = 7
    _claimed_touched_released(p, node, jid)
    old_deadline = clock.monotonic_ms() + TTR        # the deadline of the last touch
    clock.advance(10_000)                            # claimed back 10 s later
    w2, got2 = p.new_owner("beanstalk"), Got()
    assert p.reserve(w2, ["q"], None, got2) is WAITING
    node.load([_row(jid)])
    assert [r.id for r in got2.results] == [jid]
    clock.advance(old_deadline - clock.monotonic_ms())
    p.tick()
    v = p.job(jid)
    assert v.state == "reserved" and v.timeouts == 0, (v.state, v.timeouts)
    assert p.touch(w2, jid)                          # the worker still holds it


def test_a_reclaimed_reserved_job_is_not_served_again_from_an_old_ready_entry():
    """The old object's ready entry (left by its release) must not match the new object once
    that one is reserved and touched: the next reserve gets the other ready job, and the
    queue's counts stay right."""
    clock = ManualClock()
    p = Port.create(clock)
    node = p.share("test:1:1")
    node.on_demand = lambda: None
    jid = 7
    p.attach("q", "watching")                        # a connected worker watches the tube
    _claimed_touched_released(p, node, jid)
    w2, got2 = p.new_owner("beanstalk"), Got()
    assert p.reserve(w2, ["q"], None, got2) is WAITING
    node.load([_row(jid)])
    assert [r.id for r in got2.results] == [jid]
    assert p.touch(w2, jid) and p.touch(w2, jid)
    other = p.put("q", b"y", 10, 0, TTR, "beanstalk")
    r = p.reserve(p.new_owner("beanstalk"), ["q"], 0, Got())
    assert r.id == other, r                          # not the job w2 holds
    q = p.queue("q")
    assert (q.ready, q.reserved) == (0, 2)
