"""The canonical engine (core.engine) driven by a ManualClock: no sleeping, every time exact.

Covers delays, TTR expiry, DEADLINE_SOON, reserve timeouts, waiters across several queues
(longest waiter first) and pause.
"""
from __future__ import annotations

from core.engine import SAFETY_MARGIN_MS
from core.model import DEADLINE_SOON, DELAYED, READY, RESERVED, TIMED_OUT
from core.records import Owner, Waiter

from .engine_support import T0, Calls, drain, put, step


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


def test_next_due_skips_timers_of_served_waiters_and_finished_jobs(eng):
    """A reserve served at once leaves its timeout entry in the lazy timer heap, a job
    deleted before its TTR its deadline entry: next_due() (when the gateway's ticker wakes
    next) skips both instead of waking for them."""
    o, cb = Owner("beanstalk"), Calls()
    assert isinstance(eng.reserve(o, ["default"], 1000, cb), Waiter)
    j = put(eng, ttr=5000)               # served at once: its 1 s timeout entry is stale
    assert cb.results == [j]
    assert eng.next_due() == T0 + 5000   # the job's TTR, not the served reserve's timeout
    assert eng.delete(o, j.id) is True
    assert eng.next_due() is None        # nothing left to wake for
    w = eng.reserve(o, ["default"], 2000, cb)
    assert isinstance(w, Waiter)
    assert eng.next_due() == T0 + 2000   # a live timeout still counts
    step(eng, 2000)
    assert cb.results == [j, TIMED_OUT]


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
