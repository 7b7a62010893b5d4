"""The canonical engine (core.engine) driven by a ManualClock: no sleeping, every time exact.

Covers ordering (priority, then FIFO by id), delays, TTR expiry, DEADLINE_SOON, reserve timeouts,
waiters across several queues (longest waiter first), pause, ownership, release/bury/kick,
reserve_job, release_owner, queue garbage collection and list order, per-queue counters, bounded
lazy heaps, and the journal records each transition leaves.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.clock import ManualClock
from core.engine import SAFETY_MARGIN_MS, Engine
from core.journal import Journal
from core.model import (BURIED, DEADLINE_SOON, DELAYED, DELETED, READY, RESERVED, TIMED_OUT,
                        URGENT_RANK, Job, Owner, Waiter)

T0 = 1_000_000  # ManualClock's monotonic start
W0 = 1_700_000_000_000  # ManualClock's default wall start
BEAN_BASE = -(2**31)  # canonical rank of beanstalk priority 0


# --------------------------------------------------------------------------- helpers
class Calls:
    """A reserve callback that records every result it gets."""

    def __init__(self) -> None:
        self.results: list = []

    def __call__(self, r) -> None:
        self.results.append(r)


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def journal(clock):
    return Journal(clock)


@pytest.fixture
def eng(clock, journal):
    return Engine(clock, journal)


def put(e: Engine, queue: str = "default", pri: int = 0, delay: int = 0, ttr: int = 10_000,
        body: bytes = b"x", dialect: str = "beanstalk") -> Job:
    return e.put(queue, body, pri, delay, ttr, dialect)


def step(e: Engine, ms: int) -> None:
    """Advance the engine's ManualClock by `ms` and run due timers."""
    e.clock.advance(ms)
    e.tick()


def counts(q) -> dict:
    return {"urgent": q.urgent, "ready": q.n_ready, "reserved": q.n_reserved,
            "delayed": q.n_delayed, "buried": len(q.buried), "total_jobs": q.total_jobs,
            "deletes": q.deletes, "pauses": q.pauses, "waiting": q.waiting}


def drain(e: Engine, owner: Owner, queues=("default",)) -> list[int]:
    """Reserve (timeout 0) until nothing is ready; return the ids in reservation order."""
    got = []
    while True:
        r = e.reserve(owner, list(queues), 0, None)
        if not isinstance(r, Job):
            assert r is TIMED_OUT
            return got
        got.append(r.id)


def events(j: Journal) -> list[tuple]:
    """(job_id, queue, dialect, event, attempt) of the journal's open events."""
    return [(ev[0], ev[1], ev[2], ev[3], ev[5]) for ev in j.events]


# --------------------------------------------------------------------------- ordering
def test_priority_then_fifo_by_id(eng):
    pris = [5, 1, 5, 1, 3, 0, 3, 5]
    jobs = [put(eng, pri=p) for p in pris]
    assert [j.id for j in jobs] == list(range(1, 9))
    order = drain(eng, Owner("beanstalk"))
    assert order == [6, 2, 4, 5, 7, 1, 3, 8]


def test_priority_across_watched_queues(eng):
    a1 = put(eng, "a", pri=7)
    b1 = put(eng, "b", pri=3)
    a2 = put(eng, "a", pri=3)
    c1 = put(eng, "c", pri=0)  # not watched
    o = Owner("beanstalk")
    assert drain(eng, o, ("a", "b")) == [b1.id, a2.id, a1.id]
    assert eng.peek(c1.id).state is READY


def test_release_with_new_priority_reorders(eng):
    o = Owner("beanstalk")
    j1, j2, j3 = put(eng, pri=5), put(eng, pri=5), put(eng, pri=5)
    assert eng.reserve(o, ["default"], 0, None) is j1
    assert eng.release(o, j1.id, 6, 0) is True
    assert j1.priority == 6 and j1.releases == 1 and j1.state is READY
    assert drain(eng, o) == [j2.id, j3.id, j1.id]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), min_size=1, max_size=60))
def test_reserve_order_is_sorted_priority_then_id(pris):
    e = Engine(ManualClock())
    ids = [e.put("q", b"", p, 0, 60_000, "workq").id for p in pris]
    expected = [i for _, i in sorted(zip(pris, ids))]
    assert drain(e, Owner("workq"), ("q",)) == expected


# --------------------------------------------------------------------------- delays
def test_delayed_job_becomes_ready_exactly_at_delay(eng):
    o = Owner("beanstalk")
    j = put(eng, delay=3000)
    q = eng.queues["default"]
    assert j.state is DELAYED and j.ready_at == T0 + 3000
    assert (q.n_delayed, q.n_ready) == (1, 0)
    assert eng.next_due() == T0 + 3000
    assert eng.reserve(o, ["default"], 0, None) is TIMED_OUT
    step(eng, 2999)
    assert j.state is DELAYED
    assert eng.reserve(o, ["default"], 0, None) is TIMED_OUT
    step(eng, 1)
    assert j.state is READY
    assert (q.n_delayed, q.n_ready) == (0, 1)
    assert eng.reserve(o, ["default"], 0, None) is j
    assert eng.peek_delayed("default") is None


def test_delayed_jobs_ready_in_deadline_order_then_priority(eng):
    a = put(eng, pri=9, delay=2000)
    b = put(eng, pri=1, delay=5000)
    c = put(eng, pri=5, delay=1000)
    assert eng.peek_delayed("default") is c
    step(eng, 2000)
    assert (a.state, b.state, c.state) == (READY, DELAYED, READY)
    assert drain(eng, Owner("beanstalk")) == [c.id, a.id]
    step(eng, 3000)
    assert b.state is READY


def test_waiting_reserve_gets_delayed_job_when_it_matures(eng):
    o, cb = Owner("beanstalk"), Calls()
    j = put(eng, delay=1500)
    w = eng.reserve(o, ["default"], None, cb)
    assert isinstance(w, Waiter)
    step(eng, 1499)
    assert cb.results == []
    step(eng, 1)
    assert cb.results == [j]
    assert j.state is RESERVED and j.owner is o and j.deadline == T0 + 1500 + 10_000


def test_wakeup_called_when_an_earlier_timer_is_armed(eng):
    wakes = []
    eng.wakeup = lambda: wakes.append(eng.clock.monotonic_ms())
    put(eng, delay=5000)
    assert len(wakes) == 1
    put(eng, delay=7000)  # later than the armed timer: no wakeup
    assert len(wakes) == 1
    put(eng, delay=1000)
    assert len(wakes) == 2
    assert eng.next_due() == T0 + 1000


# --------------------------------------------------------------------------- TTR
def test_ttr_expiry_returns_job_to_ready_without_owner_action(eng, journal):
    """The owner reserves and then does nothing at all: the job still times out at its deadline
    (beanstalkd 1.12 can leave such a job reserved; jobgate must not)."""
    o = Owner("beanstalk")
    j = put(eng, ttr=5000)
    q = eng.queues["default"]
    assert eng.reserve(o, ["default"], 0, None) is j
    assert j.deadline == T0 + 5000
    assert eng.next_due() == T0 + 5000
    step(eng, 4999)
    assert j.state is RESERVED and j.timeouts == 0 and eng.job_timeouts == 0
    step(eng, 1)
    assert j.state is READY
    assert j.owner is None and o.reserved == {}
    assert j.timeouts == 1 and eng.job_timeouts == 1
    assert (q.n_reserved, q.n_ready, eng.n_reserved) == (0, 1, 0)
    assert ("timeout", "jobgate") in [(ev[3], ev[2]) for ev in journal.events]
    # another owner gets it; a second expiry counts again
    o2 = Owner("beanstalk")
    assert eng.reserve(o2, ["default"], 0, None) is j
    assert j.reserves == 2
    step(eng, 5000)
    assert j.state is READY and j.timeouts == 2 and eng.job_timeouts == 2


def test_timed_out_job_goes_to_longest_waiter(eng):
    holder, waiter, cb = Owner("beanstalk"), Owner("beanstalk"), Calls()
    j = put(eng, ttr=2000)
    assert eng.reserve(holder, ["default"], 0, None) is j
    eng.reserve(waiter, ["default"], None, cb)
    step(eng, 2000)
    assert cb.results == [j]
    assert j.owner is waiter and j.timeouts == 1 and j.reserves == 2
    assert j.deadline == T0 + 4000


def test_touch_restarts_ttr(eng):
    o = Owner("beanstalk")
    j = put(eng, ttr=3000)
    eng.reserve(o, ["default"], 0, None)
    step(eng, 2500)
    assert eng.touch(o, j.id) is True
    assert j.deadline == T0 + 2500 + 3000
    step(eng, 500)  # the original deadline passes
    assert j.state is RESERVED and j.timeouts == 0
    step(eng, 2499)
    assert j.state is RESERVED
    step(eng, 1)
    assert j.state is READY and j.timeouts == 1 and eng.job_timeouts == 1


# --------------------------------------------------------------------------- DEADLINE_SOON
def test_reserve_returns_deadline_soon_inside_the_margin(eng):
    o = Owner("beanstalk")
    j = put(eng, ttr=5000)
    assert eng.reserve(o, ["default"], 0, None) is j
    step(eng, 5000 - SAFETY_MARGIN_MS - 1)
    assert eng.reserve(o, ["default"], 0, None) is TIMED_OUT
    step(eng, 1)
    assert eng.reserve(o, ["default"], 0, None) is DEADLINE_SOON
    # also for a blocking reserve: answered at once, no waiter left behind
    assert eng.reserve(o, ["default"], None, Calls()) is DEADLINE_SOON
    assert eng.waiting == 0 and o.waiter is None
    assert eng.queues["default"].waiting == 0
    # another owner holding nothing is not affected
    assert eng.reserve(Owner("beanstalk"), ["default"], 0, None) is TIMED_OUT
    # a ready job wins over DEADLINE_SOON
    k = put(eng)
    assert eng.reserve(o, ["default"], None, Calls()) is k
    assert j.state is RESERVED


def test_deadline_soon_uses_the_owners_soonest_deadline(eng):
    o = Owner("beanstalk")
    long_ = put(eng, ttr=60_000)
    short = put(eng, ttr=3000)
    assert eng.reserve(o, ["default"], 0, None) is long_
    assert eng.reserve(o, ["default"], 0, None) is short
    step(eng, 1999)
    assert eng.reserve(o, ["default"], 0, None) is TIMED_OUT
    step(eng, 1)
    assert eng.reserve(o, ["default"], 0, None) is DEADLINE_SOON
    assert eng.delete(o, short.id) is True
    assert eng.reserve(o, ["default"], 0, None) is TIMED_OUT


def test_waiting_reserve_gets_deadline_soon_when_margin_arrives(eng):
    o, cb = Owner("beanstalk"), Calls()
    j = put(eng, ttr=5000)
    eng.reserve(o, ["default"], 0, None)
    step(eng, 1000)
    w = eng.reserve(o, ["default"], None, cb)
    assert isinstance(w, Waiter)
    assert eng.waiting == 1 and eng.queues["default"].waiting == 1
    assert eng.next_due() == T0 + 4000
    step(eng, 2999)
    assert cb.results == []
    step(eng, 1)
    assert cb.results == [DEADLINE_SOON]
    assert eng.waiting == 0 and o.waiter is None and eng.queues["default"].waiting == 0
    assert j.state is RESERVED and j.owner is o
    step(eng, 1000)  # the job then times out; the callback is not called again
    assert cb.results == [DEADLINE_SOON]
    assert j.state is READY and j.timeouts == 1


def test_deadline_soon_for_a_reserve_job_reservation(eng):
    o, cb = Owner("beanstalk"), Calls()
    j = put(eng, ttr=3000, delay=60_000)
    assert eng.reserve_job(o, j.id) is j
    eng.reserve(o, ["default"], None, cb)
    step(eng, 1999)
    assert cb.results == []
    step(eng, 1)
    assert cb.results == [DEADLINE_SOON]


def test_waiting_reserve_deadline_soon_follows_touch(eng):
    o, cb = Owner("beanstalk"), Calls()
    j = put(eng, ttr=5000)
    eng.reserve(o, ["default"], 0, None)
    eng.reserve(o, ["default"], None, cb)
    step(eng, 2000)
    assert eng.touch(o, j.id)  # deadline T0+7000, margin at T0+6000
    step(eng, 2000)  # the old margin (T0+4000) passes
    assert cb.results == []
    step(eng, 1999)
    assert cb.results == []
    step(eng, 1)
    assert cb.results == [DEADLINE_SOON]


def test_waiting_reserve_served_before_margin_gets_job_once(eng):
    o, cb = Owner("beanstalk"), Calls()
    held = put(eng, ttr=5000)
    eng.reserve(o, ["default"], 0, None)
    eng.reserve(o, ["default"], None, cb)
    step(eng, 1000)
    k = put(eng)
    assert cb.results == [k]
    step(eng, 3000)  # margin of `held` arrives: the finished waiter is not called again
    assert cb.results == [k]
    assert held.state is RESERVED


def test_reserve_timeout_shorter_than_margin_times_out_first(eng):
    o, cb = Owner("beanstalk"), Calls()
    put(eng, ttr=5000)
    eng.reserve(o, ["default"], 0, None)
    eng.reserve(o, ["default"], 2000, cb)
    step(eng, 2000)
    assert cb.results == [TIMED_OUT]
    step(eng, 2000)
    assert cb.results == [TIMED_OUT]


# --------------------------------------------------------------------------- reserve timeout
def test_reserve_timeout_calls_back_timed_out_exactly_at_timeout(eng):
    o, cb = Owner("beanstalk"), Calls()
    w = eng.reserve(o, ["default"], 2500, cb)
    assert isinstance(w, Waiter) and w.timeout_at == T0 + 2500
    assert o.waiter is w and eng.waiting == 1
    assert eng.next_due() == T0 + 2500
    step(eng, 2499)
    assert cb.results == []
    step(eng, 1)
    assert cb.results == [TIMED_OUT]
    assert o.waiter is None and eng.waiting == 0 and eng.queues["default"].waiting == 0
    assert w.done
    # a job put afterwards is not given to the finished waiter
    j = put(eng)
    assert cb.results == [TIMED_OUT] and j.state is READY


def test_reserve_timeout_zero_answers_at_once(eng):
    o = Owner("beanstalk")
    assert eng.reserve(o, ["default"], 0, Calls()) is TIMED_OUT
    assert o.waiter is None and eng.waiting == 0
    j = put(eng)
    assert eng.reserve(o, ["default"], 0, None) is j


def test_job_before_timeout_wins_and_timeout_does_not_fire(eng):
    o, cb = Owner("beanstalk"), Calls()
    eng.reserve(o, ["default"], 3000, cb)
    step(eng, 1000)
    j = put(eng)
    assert cb.results == [j] and j.owner is o
    step(eng, 5000)
    assert cb.results == [j]


def test_wait_forever_has_no_timer(eng):
    o, cb = Owner("beanstalk"), Calls()
    eng.reserve(o, ["default"], None, cb)
    assert eng.next_due() is None
    step(eng, 10**9)
    assert cb.results == [] and eng.waiting == 1


def test_cancel_wait_withdraws_without_callback(eng):
    o, cb = Owner("beanstalk"), Calls()
    eng.reserve(o, ["default"], 1000, cb)
    assert eng.cancel_wait(o) is True
    assert eng.cancel_wait(o) is False
    assert eng.waiting == 0 and eng.queues["default"].waiting == 0
    j = put(eng)
    step(eng, 2000)
    assert cb.results == [] and j.state is READY


# --------------------------------------------------------------------------- waiters
def test_waiters_on_overlapping_queues_longest_waiter_first(eng):
    A, B, C = Owner("beanstalk"), Owner("workq"), Owner("bunqueue")
    ca, cb, cc = Calls(), Calls(), Calls()
    eng.reserve(A, ["a", "b"], None, ca)
    step(eng, 1)
    eng.reserve(B, ["b", "c"], None, cb)
    step(eng, 1)
    eng.reserve(C, ["a", "c"], None, cc)
    assert eng.waiting == 3
    assert [eng.queues[n].waiting for n in "abc"] == [2, 2, 2]

    j1 = put(eng, "c")  # B and C watch c: B waited longer
    assert cb.results == [j1] and ca.results == [] and cc.results == []
    j2 = put(eng, "b")  # A watches b (B is served already)
    assert ca.results == [j2] and cc.results == []
    j3 = put(eng, "b")  # nobody waits on b any more
    assert j3.state is READY
    j4 = put(eng, "a")  # only C is left
    assert cc.results == [j4]
    assert (j1.owner, j2.owner, j4.owner) == (B, A, C)
    assert eng.waiting == 0 and [eng.queues[n].waiting for n in "abc"] == [0, 0, 0]
    assert all(r.reserves == 1 for r in (j1, j2, j4))


def test_longest_waiter_first_on_one_queue(eng):
    owners = [Owner("beanstalk") for _ in range(4)]
    calls = [Calls() for _ in owners]
    for o, c in zip(owners, calls):
        eng.reserve(o, ["default"], None, c)
    eng.cancel_wait(owners[1])
    jobs = [put(eng) for _ in range(3)]
    assert [c.results for c in calls] == [[jobs[0]], [], [jobs[1]], [jobs[2]]]


def test_timed_out_waiter_is_skipped(eng):
    A, B = Owner("beanstalk"), Owner("beanstalk")
    ca, cb = Calls(), Calls()
    eng.reserve(A, ["a", "b"], 1000, ca)
    eng.reserve(B, ["b"], None, cb)
    step(eng, 1000)
    assert ca.results == [TIMED_OUT]
    j = put(eng, "b")
    assert cb.results == [j] and ca.results == [TIMED_OUT]


def test_waiter_not_served_from_paused_queue_but_from_another(eng):
    o, cb = Owner("beanstalk"), Calls()
    eng.attach("a", "watching")
    eng.attach("b", "watching")
    assert eng.pause("a", 10_000)
    eng.reserve(o, ["a", "b"], None, cb)
    ja = put(eng, "a", pri=0)
    assert cb.results == []
    jb = put(eng, "b", pri=100)
    assert cb.results == [jb]
    assert ja.state is READY


# --------------------------------------------------------------------------- pause
def test_pause_blocks_reserve_and_serves_waiters_when_it_ends(eng):
    o1, o2, c1, c2 = Owner("beanstalk"), Owner("beanstalk"), Calls(), Calls()
    j1, j2 = put(eng), put(eng)
    q = eng.queues["default"]
    assert eng.pause("default", 5000) is True
    assert q.pauses == 1 and q.pause_ms == 5000 and q.paused_until == T0 + 5000
    assert eng.paused(q, T0) and not eng.paused(q, T0 + 5000)
    assert eng.reserve(o1, ["default"], 0, None) is TIMED_OUT
    eng.reserve(o1, ["default"], None, c1)
    step(eng, 1)
    eng.reserve(o2, ["default"], None, c2)
    assert eng.peek_ready("default") is j1  # peek ignores pause
    assert eng.next_due() == T0 + 5000
    step(eng, 4998)
    assert c1.results == [] and c2.results == []
    step(eng, 1)
    assert c1.results == [j1] and c2.results == [j2]
    assert q.paused_until == 0
    assert eng.waiting == 0


def test_pause_zero_unpauses_at_once(eng):
    o, cb = Owner("beanstalk"), Calls()
    j = put(eng)
    q = eng.queues["default"]
    eng.pause("default", 60_000)
    eng.reserve(o, ["default"], None, cb)
    assert cb.results == []
    assert eng.pause("default", 0) is True
    assert cb.results == [j]
    assert q.paused_until == 0 and q.pauses == 2 and q.pause_ms == 0
    # the stale timer of the first pause changes nothing when it comes due
    step(eng, 60_000)
    assert q.paused_until == 0


def test_repause_extends_and_old_timer_is_ignored(eng):
    o, cb = Owner("beanstalk"), Calls()
    j = put(eng)
    eng.pause("default", 1000)
    step(eng, 500)
    eng.pause("default", 2000)  # now until T0+2500
    eng.reserve(o, ["default"], None, cb)
    step(eng, 500)  # first pause's end
    assert cb.results == []
    assert eng.reserve(Owner("beanstalk"), ["default"], 0, None) is TIMED_OUT
    step(eng, 1500)
    assert cb.results == [j]


def test_pause_unknown_queue_is_false(eng):
    assert eng.pause("nope", 1000) is False
    assert "nope" not in eng.queues


def test_put_into_paused_queue_is_not_dispatched(eng):
    o, cb = Owner("beanstalk"), Calls()
    eng.pause("default", 3000)
    eng.reserve(o, ["default"], None, cb)
    j = put(eng)
    assert cb.results == [] and j.state is READY
    step(eng, 3000)
    assert cb.results == [j]


# --------------------------------------------------------------------------- ownership
def test_other_owner_cannot_release_bury_touch_or_delete(eng, journal):
    a, b = Owner("beanstalk"), Owner("beanstalk")
    j = put(eng, ttr=5000)
    eng.reserve(a, ["default"], 0, None)
    step(eng, 1000)
    n_events = len(journal.events)
    assert eng.release(b, j.id, 0, 0) is False
    assert eng.bury(b, j.id, 0) is False
    assert eng.touch(b, j.id) is False
    assert eng.delete(b, j.id) is False
    assert eng.delete(None, j.id, "workq") is False
    assert j.state is RESERVED and j.owner is a and j.deadline == T0 + 5000
    assert (j.releases, j.buries) == (0, 0)
    assert len(journal.events) == n_events
    # unknown ids too
    assert eng.release(a, 999, 0, 0) is False
    assert eng.bury(a, 999, 0) is False
    assert eng.touch(a, 999) is False
    assert eng.delete(a, 999) is False
    # the owner can
    assert eng.touch(a, j.id) and j.deadline == T0 + 6000
    assert eng.delete(a, j.id) is True
    assert j.state is DELETED and eng.peek(j.id) is None


def test_release_bury_touch_need_a_reservation(eng):
    o = Owner("beanstalk")
    j = put(eng)
    assert eng.release(o, j.id, 0, 0) is False
    assert eng.bury(o, j.id, 0) is False
    assert eng.touch(o, j.id) is False
    assert j.state is READY


def test_anyone_may_delete_unreserved_jobs(eng):
    a = put(eng)
    d = put(eng, delay=1000)
    b = put(eng)
    o = Owner("beanstalk")
    eng.reserve_job(o, b.id)
    eng.bury(o, b.id, 0)
    assert eng.delete(None, a.id, "workq") is True
    assert eng.delete(Owner("beanstalk"), d.id) is True
    assert eng.delete(None, b.id, "bunqueue") is True
    assert eng.delete(None, b.id, "bunqueue") is False
    assert eng.jobs == {}
    q = eng.queues["default"]
    assert (q.n_ready, q.n_delayed, len(q.buried), q.deletes) == (0, 0, 0, 3)


# --------------------------------------------------------------------------- release / bury / kick
def test_release_with_delay(eng):
    o = Owner("beanstalk")
    j = put(eng, pri=5)
    eng.reserve(o, ["default"], 0, None)
    step(eng, 100)
    assert eng.release(o, j.id, 9, 2000) is True
    assert j.state is DELAYED and j.priority == 9 and j.delay_ms == 2000 and j.releases == 1
    assert j.ready_at == T0 + 2100 and o.reserved == {}
    q = eng.queues["default"]
    assert (q.n_reserved, q.n_delayed) == (0, 1)
    step(eng, 1999)
    assert j.state is DELAYED
    step(eng, 1)
    assert j.state is READY
    assert eng.reserve(o, ["default"], 0, None) is j and j.reserves == 2


def test_bury_then_kick_is_fifo_by_bury_order(eng):
    o = Owner("beanstalk")
    j1, j2, j3 = put(eng), put(eng), put(eng)
    for j in (j3, j1, j2):
        eng.reserve_job(o, j.id)
        assert eng.bury(o, j.id, 7) is True
    q = eng.queues["default"]
    assert list(q.buried) == [j3.id, j1.id, j2.id]
    assert eng.peek_buried("default") is j3
    assert all(j.buries == 1 and j.priority == 7 and j.state is BURIED for j in (j1, j2, j3))
    assert eng.kick("default", 2, "beanstalk") == 2
    assert (j3.state, j1.state, j2.state) == (READY, READY, BURIED)
    assert (j3.kicks, j1.kicks, j2.kicks) == (1, 1, 0)
    assert eng.peek_buried("default") is j2
    assert eng.kick("default", 10, "beanstalk") == 1
    assert eng.kick("default", 10, "beanstalk") == 0


def test_kick_delayed_soonest_first_only_when_none_buried(eng):
    o = Owner("beanstalk")
    d5 = put(eng, delay=5000)
    d1 = put(eng, delay=1000)
    d3 = put(eng, delay=3000)
    b = put(eng)
    eng.reserve_job(o, b.id)
    eng.bury(o, b.id, 0)
    assert eng.kick("default", 10, "beanstalk") == 1  # buried only
    assert b.state is READY and d1.state is DELAYED
    assert eng.kick("default", 2, "beanstalk") == 2
    assert (d1.state, d3.state, d5.state) == (READY, READY, DELAYED)
    assert eng.peek_delayed("default") is d5
    assert d1.kicks == 1 and d5.kicks == 0
    # a kicked delayed job does not come back through its old timer
    step(eng, 5000)
    assert d5.state is READY and d5.kicks == 0
    assert eng.kick("default", 5, "beanstalk") == 0
    assert eng.kick("no-such-queue", 5, "beanstalk") == 0


def test_kick_job(eng):
    o = Owner("beanstalk")
    r, d, b, rs = put(eng), put(eng, delay=1000), put(eng), put(eng)
    eng.reserve_job(o, b.id)
    eng.bury(o, b.id, 0)
    eng.reserve_job(o, rs.id)
    assert eng.kick_job(r.id, "beanstalk") is False
    assert eng.kick_job(rs.id, "beanstalk") is False
    assert eng.kick_job(999, "beanstalk") is False
    assert eng.kick_job(d.id, "beanstalk") is True
    assert eng.kick_job(b.id, "beanstalk") is True
    assert (d.state, b.state, rs.state) == (READY, READY, RESERVED)
    assert (d.kicks, b.kicks, r.kicks) == (1, 1, 0)
    q = eng.queues["default"]
    assert (q.n_ready, q.n_delayed, len(q.buried), q.n_reserved) == (3, 0, 0, 1)


def test_kicked_job_goes_to_waiter(eng):
    o, w, cb = Owner("beanstalk"), Owner("beanstalk"), Calls()
    j = put(eng)
    eng.reserve(o, ["default"], 0, None)
    eng.bury(o, j.id, 0)
    eng.reserve(w, ["default"], None, cb)
    assert eng.kick("default", 1, "beanstalk") == 1
    assert cb.results == [j] and j.owner is w


# --------------------------------------------------------------------------- reserve_job
def test_reserve_job_in_every_state(eng):
    o, other = Owner("beanstalk"), Owner("beanstalk")
    r = put(eng, pri=BEAN_BASE + 1)  # urgent
    d = put(eng, delay=5000)
    b = put(eng)
    eng.reserve_job(other, b.id)
    eng.bury(other, b.id, 0)
    held = put(eng)
    eng.reserve_job(other, held.id)
    q = eng.queues["default"]
    assert counts(q)["urgent"] == 1

    assert eng.reserve_job(o, r.id) is r
    assert eng.reserve_job(o, d.id) is d
    assert eng.reserve_job(o, b.id) is b
    assert eng.reserve_job(o, held.id) is None
    assert eng.reserve_job(o, 12345) is None
    assert set(o.reserved) == {r.id, d.id, b.id}
    assert held.owner is other
    assert (r.reserves, d.reserves, b.reserves) == (1, 1, 2)
    assert (q.n_ready, q.n_delayed, len(q.buried), q.n_reserved, q.urgent) == (0, 0, 0, 4, 0)
    assert eng.n_reserved == 4
    assert r.deadline == T0 + 10_000
    # the delayed job's old timer is stale: it does not move the reserved job
    step(eng, 5000)
    assert d.state is RESERVED
    # each still times out on its own TTR
    step(eng, 5000)
    assert all(j.state is READY for j in (r, d, b, held))
    assert eng.job_timeouts == 4


# --------------------------------------------------------------------------- release_owner
def test_release_owner_returns_jobs_to_ready_without_counting_releases(eng, journal):
    o, cb = Owner("beanstalk"), Calls()
    j1, j2 = put(eng, "a"), put(eng, "b")
    eng.attach("a", "watching")
    eng.attach("b", "watching")
    eng.reserve(o, ["a", "b"], 0, None)
    eng.reserve(o, ["a", "b"], 0, None)
    eng.reserve(o, ["a", "b"], None, cb)  # and it is waiting
    assert eng.waiting == 1
    journal.events.clear()
    eng.release_owner(o)
    assert cb.results == []
    assert o.reserved == {} and o.waiter is None and eng.waiting == 0
    assert (j1.state, j2.state) == (READY, READY)
    assert (j1.releases, j2.releases) == (0, 0)
    assert (j1.reserves, j2.reserves) == (1, 1)
    assert eng.n_reserved == 0
    assert sorted(ev[3] for ev in journal.events) == ["abandon", "abandon"]
    assert eng.queues["a"].n_ready == 1 and eng.queues["b"].n_ready == 1
    # the old deadlines are stale
    step(eng, 20_000)
    assert j1.timeouts == 0 and eng.job_timeouts == 0


def test_release_owner_hands_jobs_to_waiters(eng):
    o, w, cb = Owner("beanstalk"), Owner("beanstalk"), Calls()
    j = put(eng)
    eng.reserve(o, ["default"], 0, None)
    eng.reserve(w, ["default"], None, cb)
    eng.release_owner(o)
    assert cb.results == [j] and j.owner is w


# --------------------------------------------------------------------------- queue GC / order
def test_queue_list_order_is_swap_remove():
    e = Engine(ManualClock())
    for n in "abcd":
        e.attach(n, "using")
    assert e.queue_order == ["default", "a", "b", "c", "d"]
    e.detach("b", "using")
    assert e.queue_order == ["default", "a", "d", "c"]
    assert set(e.queues) == {"default", "a", "c", "d"}
    e.detach("a", "using")
    assert e.queue_order == ["default", "c", "d"]
    e.attach("e", "watching")
    assert e.queue_order == ["default", "c", "d", "e"]
    e.detach("e", "watching")  # the last one: plain pop
    assert e.queue_order == ["default", "c", "d"]


def test_default_is_pinned():
    e = Engine(ManualClock())
    e.attach("default", "using")
    e.detach("default", "using")
    assert "default" in e.queues and e.queue_order == ["default"]
    j = e.put("default", b"", 0, 0, 1000, "beanstalk")
    e.delete(None, j.id, "beanstalk")
    assert "default" in e.queues
    e2 = Engine(ManualClock(), pinned=("x", "y"))
    assert e2.queue_order == ["x", "y"]


def test_queue_collected_when_last_job_and_reference_go():
    e = Engine(ManualClock())
    e.attach("a", "using")
    j = e.put("a", b"", 0, 0, 1000, "beanstalk")
    e.detach("a", "using")
    assert "a" in e.queues  # still holds a job
    e.attach("a", "watching")
    e.delete(None, j.id, "beanstalk")
    assert "a" in e.queues  # still watched
    e.detach("a", "watching")
    assert "a" not in e.queues and "a" not in e.queue_order
    # a job alone keeps a queue; deleting it collects the queue
    k = e.put("b", b"", 0, 0, 1000, "workq")
    assert "b" in e.queues
    assert e.delete(None, k.id, "workq")
    assert "b" not in e.queues and e.queue_order == ["default"]


@pytest.mark.parametrize("state", ["delayed", "buried", "reserved"])
def test_queue_with_a_job_in_any_state_survives(state):
    e = Engine(ManualClock())
    o = Owner("beanstalk")
    e.attach("a", "using")
    j = e.put("a", b"", 0, 5000 if state == "delayed" else 0, 1000, "beanstalk")
    if state != "delayed":
        e.reserve_job(o, j.id)
        if state == "buried":
            e.bury(o, j.id, 0)
    e.detach("a", "using")
    assert "a" in e.queues and j.state == state


def test_waiter_only_queue_collected_when_wait_ends():
    e = Engine(ManualClock())
    o, cb = Owner("workq"), Calls()
    e.reserve(o, ["w"], 1000, cb)
    assert e.queues["w"].waiting == 1
    step(e, 1000)
    assert cb.results == [TIMED_OUT]
    assert "w" not in e.queues and "w" not in e.queue_order
    e.reserve(o, ["v"], None, cb)
    e.cancel_wait(o)
    assert "v" not in e.queues


def test_immediate_reserve_answer_leaves_no_unreferenced_queue():
    e = Engine(ManualClock())
    o = Owner("workq")
    assert e.reserve(o, ["ghost"], 0, None) is TIMED_OUT
    j = e.put("default", b"x", 0, 0, 5000, "workq")
    assert e.reserve(o, ["default"], 0, None) is j
    step(e, 4500)
    assert e.reserve(o, ["ghost2"], None, Calls()) is DEADLINE_SOON
    assert e.queue_order == ["default"]
    assert set(e.queues) == {"default"}


def test_waiter_served_in_unreferenced_queue_keeps_the_queue():
    """Regression: _dispatch used to drop the waiter (collecting the then-empty, unreferenced
    queue) before reserving the job, so release/timeout later failed with KeyError."""
    e = Engine(ManualClock())
    o, cb = Owner("workq"), Calls()
    e.reserve(o, ["a"], None, cb)
    j = e.put("a", b"x", 0, 0, 5000, "workq")
    assert cb.results == [j]
    assert "a" in e.queues and e.queues["a"].n_reserved == 1
    assert e.release(o, j.id, 0, 0) is True
    assert j.state is READY


# --------------------------------------------------------------------------- counters
def test_per_queue_counters(eng):
    o, w, cb = Owner("beanstalk"), Owner("beanstalk"), Calls()
    eng.attach("t", "watching")
    q = eng.queues["t"]
    zero = dict(urgent=0, ready=0, reserved=0, delayed=0, buried=0, total_jobs=0, deletes=0,
                pauses=0, waiting=0)
    assert counts(q) == zero

    u1 = put(eng, "t", pri=BEAN_BASE + 0)      # beanstalk pri 0: urgent
    u2 = put(eng, "t", pri=BEAN_BASE + 1023)   # pri 1023: urgent
    n1 = put(eng, "t", pri=BEAN_BASE + 1024)   # pri 1024: not urgent
    d1 = put(eng, "t", pri=BEAN_BASE, delay=1000)
    assert counts(q) == dict(zero, urgent=2, ready=3, delayed=1, total_jobs=4)

    assert eng.reserve(o, ["t"], 0, None) is u1
    assert counts(q) == dict(zero, urgent=1, ready=2, reserved=1, delayed=1, total_jobs=4)
    assert eng.bury(o, u1.id, BEAN_BASE) is True
    assert counts(q) == dict(zero, urgent=1, ready=2, buried=1, delayed=1, total_jobs=4)
    assert eng.delete(None, u2.id, "beanstalk")
    assert counts(q) == dict(zero, ready=1, buried=1, delayed=1, total_jobs=4, deletes=1)
    eng.pause("t", 500)
    eng.pause("t", 0)
    assert counts(q) == dict(zero, ready=1, buried=1, delayed=1, total_jobs=4, deletes=1,
                             pauses=2)
    step(eng, 1000)  # d1 (urgent) matures
    assert counts(q) == dict(zero, urgent=1, ready=2, buried=1, total_jobs=4, deletes=1,
                             pauses=2)
    assert eng.kick("t", 1, "beanstalk") == 1
    assert counts(q) == dict(zero, urgent=2, ready=3, total_jobs=4, deletes=1, pauses=2)
    assert drain(eng, o, ("t",)) == [u1.id, d1.id, n1.id]
    assert counts(q) == dict(zero, reserved=3, total_jobs=4, deletes=1, pauses=2)
    eng.reserve(w, ["t"], None, cb)
    assert counts(q)["waiting"] == 1 and eng.waiting == 1
    eng.release(o, n1.id, BEAN_BASE + 5, 0)  # urgent now, goes straight to the waiter
    assert cb.results == [n1]
    assert counts(q) == dict(zero, reserved=3, total_jobs=4, deletes=1, pauses=2)
    for j in (u1, d1):
        eng.delete(o, j.id)
    eng.delete(w, n1.id)
    assert counts(q) == dict(zero, total_jobs=4, deletes=4, pauses=2)
    assert eng.total_jobs == 4 and eng.n_reserved == 0
    # engine-wide counters
    put(eng, "other")
    assert eng.total_jobs == 5 and eng.queues["other"].total_jobs == 1 and q.total_jobs == 4


# --------------------------------------------------------------------------- bounded heaps
def test_put_delete_cycles_keep_ready_heap_bounded():
    e = Engine(ManualClock())
    q = e.queues["default"]
    keep = e.put("default", b"k", 10, 0, 60_000, "beanstalk")
    for _ in range(50_000):
        j = e.put("default", b"x", 0, 0, 1000, "beanstalk")
        assert e.delete(None, j.id, "beanstalk")
    assert q.n_ready == 1
    assert len(q.ready) <= 2 * q.n_ready + 1025
    assert len(e.jobs) == 1
    # the heap still works
    a = e.put("default", b"a", 11, 0, 60_000, "beanstalk")
    b = e.put("default", b"b", 9, 0, 60_000, "beanstalk")
    assert drain(e, Owner("beanstalk")) == [b.id, keep.id, a.id]


def test_delayed_put_delete_cycles_keep_delayed_heaps_bounded():
    e = Engine(ManualClock())
    q = e.queues["default"]
    for _ in range(50_000):
        j = e.put("default", b"x", 0, 60_000, 1000, "beanstalk")
        assert e.delete(None, j.id, "beanstalk")
    assert len(q.delayed) <= 1030 and len(e._delayed) <= 1030
    d = e.put("default", b"d", 0, 1000, 1000, "beanstalk")
    step(e, 1000)
    assert d.state is READY


def test_many_touches_keep_reserved_heap_bounded():
    e = Engine(ManualClock())
    o = Owner("beanstalk")
    j = e.put("default", b"x", 0, 0, 5000, "beanstalk")
    e.reserve(o, ["default"], 0, None)
    for _ in range(50_000):
        step(e, 1)
        assert e.touch(o, j.id)
    assert len(e._reserved) <= 1030
    assert j.state is RESERVED and j.deadline == e.clock.monotonic_ms() + 5000
    step(e, 4999)
    assert j.state is RESERVED
    step(e, 1)
    assert j.state is READY and j.timeouts == 1


def test_reserve_release_cycles_keep_heaps_bounded():
    e = Engine(ManualClock())
    o = Owner("beanstalk")
    j = e.put("default", b"x", 0, 0, 5000, "beanstalk")
    for _ in range(20_000):
        assert e.reserve(o, ["default"], 0, None) is j
        assert e.release(o, j.id, 0, 0)
    q = e.queues["default"]
    assert len(e._reserved) <= 1030 and len(q.ready) <= 1030
    assert j.reserves == 20_000 and j.releases == 20_000


def test_waiter_deques_stay_bounded():
    e = Engine(ManualClock())
    e.attach("a", "watching")
    e.attach("b", "watching")
    first = Owner("beanstalk")
    e.reserve(first, ["b"], None, Calls())  # stays at the head of b's deque
    for _ in range(10_000):
        o, cb = Owner("beanstalk"), Calls()
        e.reserve(o, ["a", "b"], None, cb)
        j = e.put("a", b"x", 0, 0, 1000, "beanstalk")
        assert cb.results == [j]
        e.delete(o, j.id)
    qb = e.queues["b"]
    assert qb.waiting == 1
    assert len(qb.waiters) <= 2 * qb.waiting + 17
    assert len(e.queues["a"].waiters) <= 17


def test_served_timed_reserves_keep_timer_heap_bounded():
    """Regression: every reserve with a timeout left its _timers entry until the timeout time
    even when the waiter was served at once (memory grew with rate x timeout)."""
    e = Engine(ManualClock())
    o = Owner("beanstalk")
    for _ in range(20_000):
        cb = Calls()
        e.reserve(o, ["default"], 3_600_000, cb)
        j = e.put("default", b"x", 0, 0, 1000, "beanstalk")
        assert cb.results == [j]
        e.delete(o, j.id)
    assert len(e._timers) <= 1030


@pytest.mark.parametrize("gap_ms", [1, 0], ids=["1ms-apart", "same-ms"])
def test_repeated_pauses_keep_pause_heap_bounded(gap_ms):
    """Regression: superseded pause-tube entries stayed in _pauses until their time passed
    (also when many pauses with the same end time arrive within one millisecond)."""
    e = Engine(ManualClock())
    e.attach("other", "watching")
    assert e.pause("other", 7_200_000)  # another queue's pause survives compaction
    for _ in range(20_000):
        assert e.pause("default", 3_600_000)
        e.clock.advance(gap_ms)
    assert len(e._pauses) <= 1030
    q = e.queues["default"]
    j = e.put("default", b"x", 0, 0, 60_000, "beanstalk")
    assert e.reserve(Owner("beanstalk"), ["default"], 0, None) is TIMED_OUT
    until = q.paused_until
    assert until == e.clock.monotonic_ms() - gap_ms + 3_600_000
    step(e, until - 1 - e.clock.monotonic_ms())
    assert q.paused_until == until
    step(e, 1)
    assert q.paused_until == 0  # the last pause ended on time
    assert e.reserve(Owner("beanstalk"), ["default"], 0, None) is j
    other = e.queues["other"]
    assert other.paused_until == T0 + 7_200_000
    step(e, T0 + 7_200_000 - e.clock.monotonic_ms())
    assert other.paused_until == 0


def test_timed_reserves_served_with_deadline_soon_timers_stay_bounded():
    e = Engine(ManualClock())
    o = Owner("beanstalk")
    held = e.put("default", b"h", 0, 0, 10**9, "beanstalk")
    assert e.reserve(o, ["default"], 0, None) is held  # every wait also arms a margin timer
    for _ in range(20_000):
        cb = Calls()
        e.reserve(o, ["default"], 3_600_000, cb)
        j = e.put("default", b"x", 0, 0, 10**9, "beanstalk")
        assert cb.results == [j]
        e.delete(o, j.id)
    assert len(e._timers) <= 1030
    # timers of a live waiter survive compaction
    cb = Calls()
    e.reserve(o, ["default"], 5000, cb)
    step(e, 5000)
    assert cb.results == [TIMED_OUT]


# --------------------------------------------------------------------------- journal
def test_journal_records_every_transition(clock, journal, eng):
    pend = []
    journal.on_pending = lambda: pend.append(1)
    o = Owner("workq")
    j = put(eng, pri=3, dialect="beanstalk")
    jid = j.id
    assert events(journal) == [(jid, "default", "beanstalk", "put", 0)]
    assert journal.events[0][4] == W0
    assert list(journal.dirty) == [jid] and journal.pending and pend == [1]

    b = journal.take(eng.next_id)
    assert b.number == 1 and b.next_id == 2
    assert len(b.inserts) == 1 and b.inserts[0][0] == jid and b.inserts[0][5] == READY
    assert journal.dirty == {} and journal.events == [] and not journal.pending

    step(eng, 10)
    assert eng.reserve(o, ["default"], 0, None) is j
    assert events(journal) == [(jid, "default", "workq", "reserve", 1)]
    assert journal.events[0][4] == W0 + 10
    assert journal.dirty == {} and not journal.pending  # a reservation is not a row change
    assert journal.has_unwritten()
    assert eng.touch(o, j.id)
    assert len(journal.events) == 1 and journal.dirty == {}  # touch records nothing

    assert eng.release(o, j.id, 3, 1000)
    assert events(journal)[-1] == (jid, "default", "workq", "release", 1)
    assert list(journal.dirty) == [jid] and pend == [1, 1]
    step(eng, 1000)
    assert events(journal)[-1] == (jid, "default", "jobgate", "ready", 1)
    eng.reserve(o, ["default"], 0, None)
    assert eng.bury(o, j.id, 4)
    assert events(journal)[-2:] == [(jid, "default", "workq", "reserve", 2),
                                    (jid, "default", "workq", "bury", 2)]
    assert eng.kick("default", 1, "bunqueue") == 1
    assert events(journal)[-1] == (jid, "default", "bunqueue", "kick", 2)
    eng.reserve(o, ["default"], 0, None)
    step(eng, 10_000)
    assert events(journal)[-2:] == [(jid, "default", "workq", "reserve", 3),
                                    (jid, "default", "jobgate", "timeout", 3)]
    eng.reserve(o, ["default"], 0, None)
    eng.release_owner(o)
    assert events(journal)[-2:] == [(jid, "default", "workq", "reserve", 4),
                                    (jid, "default", "workq", "abandon", 4)]
    eng.reserve_job(o, j.id)
    assert eng.delete(o, j.id)
    assert events(journal)[-2:] == [(jid, "default", "workq", "reserve", 5),
                                    (jid, "default", "workq", "delete", 5)]
    assert [ev[3] for ev in journal.events] == [
        "reserve", "release", "ready", "reserve", "bury", "kick", "reserve", "timeout",
        "reserve", "abandon", "reserve", "delete"]
    assert list(journal.dirty) == [jid] and pend == [1, 1]
    assert journal.records == 13

    b2 = journal.take(eng.next_id)
    assert b2.number == 2
    assert b2.deletes == [jid] and b2.updates == [] and b2.inserts == []
    assert len(b2.events) == 12


def test_journal_snapshot_of_dirty_job(clock, journal, eng):
    o = Owner("beanstalk")
    j = put(eng, pri=BEAN_BASE + 7, ttr=4000, body=b"a\x00b", delay=2500)
    journal.take(eng.next_id)
    step(eng, 500)
    eng.kick_job(j.id, "beanstalk")
    eng.reserve(o, ["default"], 0, None)
    eng.release(o, j.id, 11, 3000)
    step(eng, 200)
    b = journal.take(eng.next_id)
    # updates: state, priority, ready_at (wall), delay_ms, ttr_ms, counters..., id
    assert b.updates == [(DELAYED, 11, W0 + 500 + 3000, 3000, 4000, 1, 0, 1, 0, 1, j.id)]
    assert b.inserts == [] and b.inserts_full == []


def test_journal_put_and_delete_in_one_batch_write_no_row(journal, eng):
    j = put(eng)
    eng.delete(None, j.id, "beanstalk")
    k = put(eng)
    b = journal.take(eng.next_id)
    assert [r[0] for r in b.inserts] == [k.id]
    assert b.deletes == [] and b.updates == []
    assert [(e[0], e[3]) for e in b.events] == [(j.id, "put"), (j.id, "delete"), (k.id, "put")]


def test_journal_notes_queues_on_first_put(clock, journal, eng):
    put(eng, "a")
    step(eng, 5)
    put(eng, "b")
    put(eng, "a")
    eng.reserve(Owner("beanstalk"), ["c"], 0, None)  # not a use that stores the queue
    b = journal.take(eng.next_id)
    assert b.queues == [("a", W0), ("b", W0 + 5)]
    put(eng, "a")
    assert journal.take(eng.next_id).queues == []


def test_journal_history_off_keeps_rows_only(clock):
    jn = Journal(clock, history=False)
    e = Engine(clock, jn)
    o = Owner("beanstalk")
    j = put(e)
    e.reserve(o, ["default"], 0, None)
    e.release(o, j.id, 0, 0)
    assert jn.events == [] and list(jn.dirty) == [j.id]
    b = jn.take(e.next_id)
    assert b.events == [] and len(b.inserts_full) == 1


def test_memory_mode_without_journal():
    e = Engine(ManualClock(), None)
    o = Owner("beanstalk")
    j = e.put("default", b"x", 0, 0, 1000, "beanstalk")
    assert e.reserve(o, ["default"], 0, None) is j
    assert e.bury(o, j.id, 0) and e.kick("default", 1, "beanstalk") == 1
    assert e.delete(None, j.id, "beanstalk")


# --------------------------------------------------------------------------- model check
QUEUES = ("a", "b", "c")
N_OWNERS = 3

op = st.one_of(
    st.tuples(st.just("put"), st.sampled_from(QUEUES), st.integers(0, 3),
              st.sampled_from([0, 0, 0, 500, 2000]), st.sampled_from([1000, 3000])),
    st.tuples(st.just("reserve"), st.integers(0, N_OWNERS - 1),
              st.lists(st.sampled_from(QUEUES), min_size=1, max_size=3, unique=True),
              st.sampled_from([0, 0, 700, None])),
    st.tuples(st.just("release"), st.integers(0, N_OWNERS - 1), st.integers(0, 30),
              st.integers(0, 3), st.sampled_from([0, 800])),
    st.tuples(st.just("bury"), st.integers(0, N_OWNERS - 1), st.integers(0, 30)),
    st.tuples(st.just("touch"), st.integers(0, N_OWNERS - 1), st.integers(0, 30)),
    st.tuples(st.just("delete"), st.integers(0, N_OWNERS), st.integers(0, 30)),
    st.tuples(st.just("kick"), st.sampled_from(QUEUES), st.integers(1, 3)),
    st.tuples(st.just("kick_job"), st.integers(0, 30)),
    st.tuples(st.just("reserve_job"), st.integers(0, N_OWNERS - 1), st.integers(0, 30)),
    st.tuples(st.just("advance"), st.sampled_from([1, 100, 500, 999, 1000, 2500])),
    st.tuples(st.just("pause"), st.sampled_from(QUEUES), st.sampled_from([0, 1500])),
    st.tuples(st.just("gone"), st.integers(0, N_OWNERS - 1)),
)


def _pick(e: Engine, i: int):
    ids = sorted(e.jobs)
    return ids[i % len(ids)] if ids else 10**9


def _check(e: Engine, owners: list[Owner]) -> None:
    now = e.clock.monotonic_ms()
    total_reserved = 0
    for name, q in e.queues.items():
        js = [j for j in e.jobs.values() if j.queue == name]
        ready = [j for j in js if j.state is READY]
        assert q.n_ready == len(ready)
        assert q.urgent == sum(1 for j in ready if j.priority < URGENT_RANK)
        assert q.n_delayed == sum(1 for j in js if j.state is DELAYED)
        assert q.n_reserved == sum(1 for j in js if j.state is RESERVED)
        assert set(q.buried) == {j.id for j in js if j.state is BURIED}
        total_reserved += q.n_reserved
        live = [w for w in q.waiters if not w.done]
        assert q.waiting == len(live)
        if live and q.paused_until <= now:
            assert not ready, "a waiter waits while a ready job sits in its queue"
    assert e.n_reserved == total_reserved
    for j in e.jobs.values():
        assert j.queue in e.queues
        if j.state is DELAYED:
            assert j.ready_at > now
        if j.state is RESERVED:
            assert j.deadline > now and j.owner.reserved.get(j.id) is j
        else:
            assert j.owner is None
    assert e.waiting == sum(1 for o in owners if o.waiter is not None)
    for o in owners:
        assert all(j.state is RESERVED and j.owner is o for j in o.reserved.values())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, max_size=60), st.booleans())
def test_random_operations_keep_indexes_consistent(ops, attach):
    clock = ManualClock()
    e = Engine(clock, Journal(clock))
    if attach:
        for n in QUEUES:
            e.attach(n, "watching")  # as beanstalk connections do
    owners = [Owner("beanstalk") for _ in range(N_OWNERS)]
    got: list = []

    def callback_for(o):
        def cb(r):
            got.append(r)
            if isinstance(r, Job):
                assert r.owner is o and r.state is RESERVED
            else:
                assert r in (TIMED_OUT, DEADLINE_SOON)
        return cb

    for o_ in ops:
        kind = o_[0]
        if kind == "put":
            e.put(o_[1], b"p", o_[2], o_[3], o_[4], "beanstalk")
        elif kind == "reserve":
            o = owners[o_[1]]
            if o.waiter is not None:
                continue
            now = clock.monotonic_ms()
            cands = [j for j in e.jobs.values() if j.state is READY and j.queue in o_[2]
                     and e.queues[j.queue].paused_until <= now]
            expect = min(cands, key=lambda j: (j.priority, j.id)) if cands else None
            r = e.reserve(o, o_[2], o_[3], callback_for(o))
            if expect is not None:
                assert r is expect
            else:
                assert not isinstance(r, Job)
        elif kind == "release":
            e.release(owners[o_[1]], _pick(e, o_[2]), o_[3], o_[4])
        elif kind == "bury":
            e.bury(owners[o_[1]], _pick(e, o_[2]), 0)
        elif kind == "touch":
            e.touch(owners[o_[1]], _pick(e, o_[2]))
        elif kind == "delete":
            who = owners[o_[1]] if o_[1] < N_OWNERS else None
            e.delete(who, _pick(e, o_[2]), "workq")
        elif kind == "kick":
            e.kick(o_[1], o_[2], "beanstalk")
        elif kind == "kick_job":
            e.kick_job(_pick(e, o_[1]), "beanstalk")
        elif kind == "reserve_job":
            e.reserve_job(owners[o_[1]], _pick(e, o_[2]))
        elif kind == "advance":
            clock.advance(o_[1])
            e.tick()
        elif kind == "pause":
            assert e.pause(o_[1], o_[2]) is (o_[1] in e.queues)
        elif kind == "gone":
            e.release_owner(owners[o_[1]])
        _check(e, owners)
