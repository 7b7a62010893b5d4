"""Queue rate and concurrency limits and stall settings in the engine (core/limits.py), through
the port, on a ManualClock: the rule of docs/mapping.md "Queue limits (issue 16)".

- concurrency: never more than the limit reserved; a waiting reserve is served, longest waiter
  first, at the tick after a reserved job of the queue leaves the reserved state (any way:
  complete, delete, bury, release, TTR expiry); a new reserve does not overtake the waiters;
- rate: a token bucket (limit per window, full at first); a waiter is woken by the engine's
  timer exactly when the next token is there, not a millisecond earlier;
- clearing or raising a limit serves waiters at once; a temporary limit (ttl) ends by itself;
- reserve_many (bunqueue PULLB) stays within the limits; waiters on several queues (beanstalk
  watch list) are served from an unlimited queue meanwhile;
- the stall config's maxStalls bounds lock expiries of the queue's bunqueue jobs;
- restart on a real SQLite file and on PostgreSQL: limits and stall config come back;
  cleared ones do not.
"""
from __future__ import annotations

import pytest

from core.api import TIMED_OUT, WAITING, ManualClock, Port
from core.storage import Store
from migrations import upgrade
from protocols.bunqueue.info import BUNQUEUE_POLICY


class Got:
    """A reserve callback recording what it gets."""

    def __init__(self) -> None:
        self.results: list = []

    def __call__(self, r) -> None:
        self.results.append(r)

    @property
    def ids(self) -> list:
        return [r.id for r in self.results if r is not TIMED_OUT]


def _port() -> Port:
    return Port.create(ManualClock())


def _put(p: Port, q: str, n: int, ttr_ms: int = 60_000) -> list:
    return [p.put(q, b"j%d" % i, 0, 0, ttr_ms, "beanstalk") for i in range(n)]


def _reserved(p: Port, q: str) -> int:
    return p.queue(q).reserved


def _step(p: Port, ms: int) -> None:
    p.clock.advance(ms)
    p.tick()


# ------------------------------------------------------------------ concurrency
def test_concurrency_limit_holds_and_a_freed_slot_goes_to_the_longest_waiter():
    p = _port()
    ids = _put(p, "c", 6)
    p.set_concurrency("c", 2)
    owners = [p.new_owner(d) for d in ("beanstalk", "workq", "bunqueue", "beanstalk")]
    got = [Got() for _ in owners]
    r0 = p.reserve(owners[0], ["c"], None, got[0])
    r1 = p.reserve(owners[1], ["c"], None, got[1])
    assert (r0.id, r1.id) == (ids[0], ids[1])
    assert p.reserve(owners[2], ["c"], None, got[2]) is WAITING
    assert p.reserve(owners[3], ["c"], None, got[3]) is WAITING
    assert _reserved(p, "c") == 2 and p.queue("c").ready == 4
    assert p.queue_limits("c") == {"rateLimit": None, "rateLimitTtl": -2,
                                   "concurrencyLimit": 2, "maxed": True}

    assert p.complete(r0.id, b"done", "workq")        # one slot frees ...
    assert p.next_due() == p.clock.monotonic_ms()     # ... the limit timer is due at once
    assert got[2].results == []
    p.tick()
    assert got[2].ids == [ids[2]] and got[3].results == []   # the longest waiter first
    assert _reserved(p, "c") == 2
    assert p.delete(owners[1], r1.id)
    p.tick()
    assert got[3].ids == [ids[3]] and _reserved(p, "c") == 2


@pytest.mark.parametrize("how", ["bury", "release", "ttr", "fail"])
def test_every_way_out_of_reserved_frees_a_slot(how):
    p = _port()
    _put(p, "c", 3, ttr_ms=5_000)
    p.set_concurrency("c", 1)
    a, b = p.new_owner("beanstalk"), p.new_owner("workq")
    r = p.reserve(a, ["c"], None, Got())
    got = Got()
    assert p.reserve(b, ["c"], None, got) is WAITING
    if how == "bury":
        assert p.bury(a, r.id, 0)
    elif how == "release":
        assert p.release(a, r.id, 0, 0)   # back to ready: served at once, no tick needed
    elif how == "fail":
        assert p.fail(r.id, b"boom", "workq")
    else:
        p.clock.advance(5_000)
    p.tick()
    assert len(got.ids) == 1 and _reserved(p, "c") == 1


def test_a_new_reserve_does_not_overtake_the_waiters_of_a_limited_queue():
    p = _port()
    ids = _put(p, "c", 3)
    p.set_concurrency("c", 1)
    a, w, late = p.new_owner("beanstalk"), p.new_owner("workq"), p.new_owner("bunqueue")
    r = p.reserve(a, ["c"], None, Got())
    got = Got()
    assert p.reserve(w, ["c"], None, got) is WAITING
    assert p.delete(a, r.id)
    # between the delete and the tick a newcomer gets nothing: the slot is the waiter's
    assert p.reserve(late, ["c"], 0, Got()) is TIMED_OUT
    assert p.reserve_many(late, "c", 5) == []
    p.tick()
    assert got.ids == [ids[1]]


def test_reserve_many_stays_within_the_limit():
    p = _port()
    _put(p, "c", 10)
    p.set_concurrency("c", 3)
    o = p.new_owner("bunqueue")
    assert len(p.reserve_many(o, "c", 10)) == 3
    assert p.reserve_many(o, "c", 10) == []
    p.set_concurrency("c", 5)                         # raised: two more
    assert len(p.reserve_many(o, "c", 10)) == 2


def test_raising_or_clearing_a_limit_serves_the_waiters_at_once():
    p = _port()
    _put(p, "c", 4)
    p.set_concurrency("c", 1)
    o = p.new_owner("beanstalk")
    p.reserve(o, ["c"], None, Got())
    ws = [Got() for _ in range(3)]
    for g in ws:
        assert p.reserve(p.new_owner("workq"), ["c"], None, g) is WAITING
    p.set_concurrency("c", 2)
    assert [len(g.ids) for g in ws] == [1, 0, 0]
    p.clear_concurrency("c")
    assert [len(g.ids) for g in ws] == [1, 1, 1]
    assert p.queue_limits("c")["concurrencyLimit"] is None


def test_a_waiter_on_several_queues_is_served_from_an_unlimited_one():
    p = _port()
    _put(p, "lim", 2)
    p.set_concurrency("lim", 1)
    p.reserve(p.new_owner("beanstalk"), ["lim"], None, Got())
    got = Got()
    assert p.reserve(p.new_owner("beanstalk"), ["lim", "free"], None, got) is WAITING
    (jid,) = _put(p, "free", 1)
    assert got.ids == [jid]


def test_a_waiting_reserve_times_out_as_usual_at_the_limit():
    p = _port()
    _put(p, "c", 2)
    p.set_concurrency("c", 1)
    p.reserve(p.new_owner("workq"), ["c"], None, Got())
    got = Got()
    assert p.reserve(p.new_owner("workq"), ["c"], 1000, got) is WAITING
    _step(p, 999)
    assert got.results == []
    _step(p, 1)
    assert got.results == [TIMED_OUT]
    assert p.queue("c").waiting == 0


def test_a_limit_of_zero_admits_nothing_and_a_limited_queue_is_kept():
    p = _port()
    p.set_concurrency("zero", 0)
    assert "zero" in p.queue_names()                 # kept while empty (listed, as bunqueue)
    (jid,) = _put(p, "zero", 1)
    assert p.reserve(p.new_owner("beanstalk"), ["zero"], 0, Got()) is TIMED_OUT
    p.clear_concurrency("zero")
    assert p.reserve(p.new_owner("beanstalk"), ["zero"], 0, Got()).id == jid


# ------------------------------------------------------------------ rate
def test_rate_limit_token_bucket_wakes_the_waiter_exactly_when_the_window_allows():
    p = _port()
    ids = _put(p, "r", 6)
    p.set_rate_limit("r", 2, 1000)                   # 2 per second: 1 token per 500 ms
    o = p.new_owner("bunqueue")
    assert [r.id for r in p.reserve_many(o, "r", 6)] == ids[:2]   # the bucket starts full
    st = p.queue_limits("r")
    assert st["rateLimit"] == {"max": 2, "duration": 1000} and st["rateLimitTtl"] == 500
    assert p.queue_limits("r", max_jobs=3)["rateLimitTtl"] == 0   # fewer than 3 used
    g1, g2 = Got(), Got()
    assert p.reserve(p.new_owner("beanstalk"), ["r"], None, g1) is WAITING
    assert p.reserve(p.new_owner("workq"), ["r"], None, g2) is WAITING
    t0 = p.clock.monotonic_ms()
    assert p.next_due() == t0 + 500
    _step(p, 499)
    assert g1.results == [] and g2.results == []
    _step(p, 1)
    assert g1.ids == [ids[2]] and g2.results == []
    assert p.next_due() == t0 + 1000
    _step(p, 500)
    assert g2.ids == [ids[3]]
    # a reservation of any kind takes a token, released jobs included
    _step(p, 1000)                                    # the bucket is full again: 2
    assert len(p.reserve_many(o, "r", 5)) == 2


def test_rate_limit_counts_reservations_not_completions():
    p = _port()
    _put(p, "r", 5)
    p.set_rate_limit("r", 1, 1000)
    o = p.new_owner("workq")
    (r,) = p.reserve_many(o, "r", 5)
    assert p.complete(r.id, b"", "workq")
    p.tick()
    assert p.reserve_many(o, "r", 5) == []            # the slot is free, the token is not
    _step(p, 1000)
    assert len(p.reserve_many(o, "r", 5)) == 1


def test_a_temporary_rate_limit_ends_by_itself_and_frees_its_waiters():
    p = _port()
    (jid,) = _put(p, "t", 1)
    p.set_rate_limit("t", 0, None, 3000)             # nothing for 3 s
    got = Got()
    assert p.reserve(p.new_owner("beanstalk"), ["t"], None, got) is WAITING
    assert p.queue_limits("t")["rateLimitTtl"] == 3000
    assert p.next_due() == p.clock.monotonic_ms() + 3000
    _step(p, 2999)
    assert got.results == []
    _step(p, 1)
    assert got.ids == [jid]
    assert p.queue_limits("t")["rateLimit"] is None


def test_rate_and_concurrency_together_and_clear():
    p = _port()
    _put(p, "b", 10)
    p.set_rate_limit("b", 100, 1000)
    p.set_concurrency("b", 2)
    o = p.new_owner("bunqueue")
    got = p.reserve_many(o, "b", 10)
    assert len(got) == 2
    p.clear_rate_limit("b")
    p.clear_concurrency("b")
    assert len(p.reserve_many(o, "b", 10)) == 8
    assert p.queue_settings("b")["rateLimit"] is None
    assert p._engine.queues["b"].limits is None       # no limit: no cost on the hot path


# ------------------------------------------------------------------ stall config
def test_stall_config_merges_and_max_stalls_bounds_lock_expiries():
    p = _port()
    p.set_policy("bunqueue", BUNQUEUE_POLICY)
    assert p.stall_config("s") == {"enabled": True, "stallInterval": 30000, "maxStalls": 3,
                                   "gracePeriod": 5000}
    p.set_stall_config("s", {"maxStalls": 1, "extra": "kept"})
    assert p.stall_config("s") == {"enabled": True, "stallInterval": 30000, "maxStalls": 1,
                                   "gracePeriod": 5000, "extra": "kept"}
    jid = p.put("s", b"x", 0, 0, 1000, "bunqueue", "stall-1", max_fails=10, event="push")
    p.reserve_many(p.new_owner("bunqueue"), "s", 1)
    _step(p, 1000)
    v = p.job(jid)
    assert v.state == "buried" and v.ext["dlqReason"] == "stalled"


# ------------------------------------------------------------------ restart
def test_limits_and_stall_config_survive_a_restart(db_url):
    store = Store(db_url)
    try:
        upgrade(store.engine)
        clock = ManualClock(1_700_000_000_000)
        a = Port.create(clock)
        a.set_rate_limit("r", 2.5, 500, 60_000)
        a.set_concurrency("c", 3)
        a.set_concurrency("gone", 1)
        a.set_stall_config("s", {"maxStalls": 7, "unknown": 1})
        a.set_stall_config("d", {"maxStalls": 3})         # the defaults: nothing stored
        a.put("c", b"x", 0, 0, 1000, "beanstalk")
        store.write(a.persistence.take())
        a.clear_concurrency("gone")
        store.write(a.persistence.take())
        rows = {r["queue"] for r in store.load_records("queue_settings")}
        assert rows == {"r", "c", "s"}

        b = Port.create(ManualClock(1_700_000_000_000 + 10_000))
        assert b.restore(store) == 1
        assert b.queue_limits("r") == {"rateLimit": {"max": 2.5, "duration": 500},
                                       "rateLimitTtl": 50_000, "concurrencyLimit": None,
                                       "maxed": False}
        assert b.queue_limits("c")["concurrencyLimit"] == 3
        assert b.queue_limits("gone")["concurrencyLimit"] is None
        # the reference stores the four known keys only
        assert b.stall_config("s") == {"enabled": True, "stallInterval": 30000,
                                       "maxStalls": 7, "gracePeriod": 5000}
        assert "r" in b.queue_names() and "gone" not in b.queue_names()
        _put(b, "c", 4)
        assert len(b.reserve_many(b.new_owner("workq"), "c", 10)) == 3   # enforced again
        # a temporary limit whose end passed while the server was down is gone
        c = Port.create(ManualClock(1_700_000_000_000 + 61_000))
        c.restore(store)
        assert c.queue_limits("r")["rateLimit"] is None
    finally:
        store.close()


def test_a_beanstalk_reserve_waiting_at_the_limit_still_gets_deadline_soon():
    """Waiting at a limit is waiting: the owner's own reservation nearing its TTR answers
    DEADLINE_SOON (beanstalk protocol, "reserve") as on an empty tube."""
    from core.api import DEADLINE_SOON
    p = _port()
    _put(p, "c", 2, ttr_ms=5_000)
    p.set_concurrency("c", 1)
    o = p.new_owner("beanstalk")
    p.reserve(o, ["c"], None, Got())
    got = Got()
    assert p.reserve(o, ["c"], None, got) is WAITING
    _step(p, 3_999)
    assert got.results == []
    _step(p, 1)                                       # 1 s before the TTR ends
    assert got.results == [DEADLINE_SOON]
