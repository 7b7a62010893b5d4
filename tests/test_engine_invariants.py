"""The canonical engine (core.engine): queue bookkeeping and invariants.

Covers queue garbage collection and list order, per-queue counters, bounded lazy heaps, and a
model check of random operations against the engine's indexes.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.clock import ManualClock
from core.engine import Engine
from core.journal import Journal
from core.model import (BURIED, COMPLETED, DEADLINE_SOON, DELAYED, READY, RESERVED, TIMED_OUT,
                        URGENT_RANK)
from core.records import Job, Owner

from .engine_support import BEAN_BASE, T0, Calls, counts, drain, put, step


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
        # the listing index (core/paging.py): ascending, every live job of the queue in it
        assert q.ids == sorted(set(q.ids)) and {j.id for j in js} <= set(q.ids)
        assert set(q.done) == {j.id for j in js if j.state is COMPLETED}
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
