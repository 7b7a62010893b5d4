"""The canonical engine (core.engine) driven by a ManualClock: job states and transitions.

Covers ordering (priority, then FIFO by id), ownership, release/bury/kick, reserve_job,
release_owner, and the journal records each transition leaves. Timing is in
test_engine_timing.py, queue bookkeeping and invariants in test_engine_invariants.py.
"""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from core.clock import ManualClock
from core.engine import Engine
from core.journal import Journal
from core.model import BURIED, DELAYED, DELETED, READY, RESERVED
from core.records import Owner

from .engine_support import BEAN_BASE, T0, Calls, counts, drain, put, step


W0 = 1_700_000_000_000  # ManualClock's default wall start


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
    # a move (core/storage.py move_states: an unfinished job, no result, no stored lease):
    # state, priority, ready_at (wall), delay_ms, ttr_ms, counters, fails, expires_at (wall),
    # extras, id
    assert b.moves == b.updates == [(DELAYED, 11, W0 + 500 + 3000, 3000, 4000, 1, 0, 1, 0, 1, 0,
                                     None, None, j.id)]
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
