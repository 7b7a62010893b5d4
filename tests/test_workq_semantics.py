"""workq semantics on a controllable clock: TTR, max-attempts, max-fails, TTL, schedule,
priority order, complete and delete in every state.

No sockets: a core.clock.ManualClock drives an Engine, and the workq dialect runs sans-IO
(protocols.workq Parser + Session, tests/workq_support.SansIO), so time moves exactly and
without sleeping. References: workq-protocol.txt, ../shared/reference/README.md (workq) and
workq-golden.txt; where jobgate differs on purpose, max-fails is enforced (`fail` requeues
while fails < max-fails) and `lease <name> 0` returns a ready job.
"""
from __future__ import annotations

import pytest

from core.clock import ManualClock
from core.engine import Engine
from core.journal import Journal
from protocols.workq import WorkqInfo

from .workq_support import (NOT_FOUND, OK, TIMEOUT, WAITING, SansIO, add_cmd, complete_cmd,
                            err, fail_cmd, lease_frame, parse_entries, result_frame,
                            schedule_cmd, uid_n)

NOW = "2023-11-14T22:13:20Z"          # ManualClock's wall start, 1_700_000_000_000 ms
U = uid_n(1)


class World:
    """A ManualClock, an Engine on it, the workq server state and one client `c`."""

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.engine = Engine(self.clock, Journal(self.clock))
        self.info = WorkqInfo(self.engine)
        self.c = SansIO(self.info)

    def step(self, ms: int) -> None:
        """Advance the clock by `ms` and run the engine's due timers."""
        self.clock.advance(ms)
        self.engine.tick()

    def conn(self) -> SansIO:
        """Another client connection."""
        return SansIO(self.info)

    def state(self, uid: str = U) -> tuple[str, str, str]:
        """(state, attempts, fails) of a job from `inspect job`."""
        j = self.c.job(uid)
        return j["state"], j["attempts"], j["fails"]

    def queue(self, name: str) -> tuple[int, int]:
        """(ready-len, scheduled-len) of a queue."""
        (_, keys), = parse_entries(self.c.one(b"inspect queue %s\r\n" % name.encode()))
        return int(keys["ready-len"]), int(keys["scheduled-len"])

    def evicted(self) -> int:
        """`inspect server` evicted-jobs."""
        (_, keys), = parse_entries(self.c.one(b"inspect server\r\n"))
        return int(keys["evicted-jobs"])


@pytest.fixture
def w() -> World:
    return World()


def lease(w: World, q: str = "q", ttr: int = 1000, payload: bytes = b"x", uid: str = U):
    assert w.c.one(b"lease %s 0\r\n" % q.encode()) == lease_frame(uid, q, ttr, payload)


# ====================================================================== TTR, max-attempts
def test_ttr_expiry_makes_the_job_pending_and_counts_attempts(w):
    assert w.c.one(add_cmd(U, "q", ttr=200)) == OK
    assert w.state() == ("0", "0", "0")
    lease(w, ttr=200)
    w.step(199)
    assert w.state() == ("4", "1", "0")
    w.step(1)
    assert w.state() == ("3", "1", "0") and w.queue("q") == (1, 0)
    lease(w, ttr=200)
    assert w.state() == ("4", "2", "0")
    w.step(200)
    assert w.state() == ("3", "2", "0")
    assert w.c.one(complete_cmd(U, b"late")) == OK    # a pending job can still be completed
    assert w.state() == ("1", "2", "0")
    assert w.c.one(b"result %s 0\r\n" % U.encode()) == result_frame(U, True, b"late")


@pytest.mark.parametrize("max_attempts", [1, 2, 3])
def test_max_attempts_reached_by_ttr_fails_with_an_empty_result(w, max_attempts):
    assert w.c.one(add_cmd(U, "q", ttr=200, max_attempts=max_attempts)) == OK
    waiter = w.conn()
    assert waiter.feed(b"result %s 100000\r\n" % U.encode()) == [WAITING]
    for n in range(1, max_attempts + 1):
        assert w.state()[0] == ("0" if n == 1 else "3")
        lease(w, ttr=200)
        w.step(200)
    assert w.state() == ("2", str(max_attempts), "0")
    empty = b"+OK 1\r\n%s 0 0\r\n\r\n" % U.encode()
    assert empty == result_frame(U, False, b"")
    assert w.c.one(b"result %s 0\r\n" % U.encode()) == empty
    assert waiter.woken == [empty]
    assert w.c.one(b"lease q 0\r\n") == TIMEOUT
    assert w.c.one(complete_cmd(U, b"x")) == err("Duplicate result")


# ====================================================================== max-fails
def test_fail_requeues_while_fails_below_max_fails(w):
    assert w.c.one(add_cmd(U, "q", max_fails=3)) == OK
    waiter = w.conn()
    assert waiter.feed(b"result %s 100000\r\n" % U.encode()) == [WAITING]
    for n in (1, 2):
        lease(w)
        assert w.c.one(fail_cmd(U, b"f%d" % n)) == OK
        assert w.state() == ("3", str(n), str(n)) and w.queue("q") == (1, 0)
        assert w.c.one(b"result %s 0\r\n" % U.encode()) == TIMEOUT
    assert waiter.woken == []                          # a requeue is not a result
    lease(w)
    assert w.c.one(fail_cmd(U, b"f3")) == OK
    assert w.state() == ("2", "3", "3") and w.queue("q") == (0, 0)
    assert w.c.one(b"result %s 0\r\n" % U.encode()) == result_frame(U, False, b"f3")
    assert waiter.woken == [result_frame(U, False, b"f3")]
    assert w.c.one(fail_cmd(U, b"again")) == err("Duplicate result")


@pytest.mark.parametrize("max_fails", [0, 1])
def test_max_fails_zero_or_one_fails_at_once(w, max_fails):
    assert w.c.one(add_cmd(U, "q", max_fails=max_fails)) == OK
    lease(w)
    assert w.c.one(fail_cmd(U, b"bad")) == OK
    assert w.state() == ("2", "1", "1")
    assert w.c.one(b"lease q 0\r\n") == TIMEOUT
    assert w.c.one(b"result %s 0\r\n" % U.encode()) == result_frame(U, False, b"bad")


def test_fail_at_the_last_attempt_is_final_even_below_max_fails(w):
    assert w.c.one(add_cmd(U, "q", max_fails=5, max_attempts=2)) == OK
    lease(w)
    assert w.c.one(fail_cmd(U, b"one")) == OK
    assert w.state() == ("3", "1", "1")
    lease(w)
    assert w.c.one(fail_cmd(U, b"two")) == OK
    assert w.state() == ("2", "2", "2")
    assert w.c.one(b"result %s 0\r\n" % U.encode()) == result_frame(U, False, b"two")


def test_ttr_expiries_and_fails_share_the_attempts(w):
    assert w.c.one(add_cmd(U, "q", ttr=100, max_fails=3, max_attempts=3)) == OK
    lease(w, ttr=100)
    w.step(100)                                        # attempt 1: timed out
    assert w.state() == ("3", "1", "0")
    lease(w, ttr=100)
    assert w.c.one(fail_cmd(U, b"f")) == OK            # attempt 2: failed, fails 1 < 3
    assert w.state() == ("3", "2", "1")
    lease(w, ttr=100)
    w.step(100)                                        # attempt 3: timed out, no attempt left
    assert w.state() == ("2", "3", "1")
    assert w.c.one(b"result %s 0\r\n" % U.encode()) == result_frame(U, False, b"")


@pytest.mark.parametrize("max_fails, final", [(0, True), (3, False)])
def test_fail_of_a_never_leased_job(w, max_fails, final):
    assert w.c.one(add_cmd(U, "q", max_fails=max_fails)) == OK
    assert w.c.one(fail_cmd(U, b"early")) == OK
    if final:
        assert w.state() == ("2", "0", "1") and w.queue("q") == (0, 0)
    else:                                              # still waiting for a worker
        assert w.state() == ("0", "0", "1") and w.queue("q") == (1, 0)
        lease(w)


# ====================================================================== TTL
def _bring_to(w: World, state: str) -> int:
    """Put job U (TTL 1000 ms) in queue q into `state`; returns ms until its TTL ends."""
    if state == "scheduled":
        assert w.c.one(schedule_cmd(U, "q", "2023-11-14T22:13:25Z", ttl=1000)) == OK
        return 6000                                    # a TTL starts at the scheduled time
    assert w.c.one(add_cmd(U, "q", ttr=100, ttl=1000)) == OK
    if state == "new":
        return 1000
    lease(w, ttr=100)
    if state == "pending":
        w.step(100)
        assert w.state()[0] == "3"
        return 900
    if state in ("completed", "failed"):
        finish = complete_cmd if state == "completed" else fail_cmd
        assert w.c.one(finish(U, b"r")) == OK
    return 1000


@pytest.mark.parametrize("state, unfinished", [
    ("new", True), ("leased", True), ("pending", True), ("scheduled", True),
    ("completed", False), ("failed", False)])
def test_ttl_evicts_in_every_state(w, state, unfinished):
    left = _bring_to(w, state)
    w.step(left - 1)
    assert w.c.job(U) is not None
    assert w.evicted() == 0
    w.step(1)
    assert w.c.job(U) is None
    assert w.c.one(b"result %s 0\r\n" % U.encode()) == NOT_FOUND
    assert w.c.one(complete_cmd(U, b"x")) == NOT_FOUND
    assert w.queue("q") == (0, 0)
    assert w.evicted() == (1 if unfinished else 0)     # only unfinished jobs count
    w.step(10_000)                                     # no TTR or schedule brings it back
    assert w.c.one(b"lease q 0\r\n") == TIMEOUT and w.c.job(U) is None


def test_results_are_kept_until_the_ttl(w):
    assert w.c.one(add_cmd(U, "q", ttl=10_000)) == OK
    w.step(1000)
    assert w.c.one(complete_cmd(U, b"kept")) == OK
    w.step(8999)
    assert w.c.one(b"result %s 0\r\n" % U.encode()) == result_frame(U, True, b"kept")
    assert w.c.one(add_cmd(U, "q")) == err("Duplicate job")
    w.step(1)
    assert w.c.one(b"result %s 0\r\n" % U.encode()) == NOT_FOUND
    assert w.c.one(add_cmd(U, "q", b"new")) == OK      # the id is free again
    assert w.state() == ("0", "0", "0")


# ====================================================================== schedule
def test_schedule_makes_the_job_ready_at_its_utc_time(w):
    assert w.c.one(schedule_cmd(U, "sq", "2023-11-14T22:13:25Z", b"s", priority=4)) == OK
    (ident, keys), = parse_entries(w.c.one(b"inspect scheduled-jobs sq 0 10\r\n"))
    assert ident == U and len(keys) == 13
    assert (keys["time"], keys["created"], keys["state"], keys["priority"]) == (
        "2023-11-14T22:13:25Z", NOW, "0", "4")
    assert w.queue("sq") == (0, 1)
    assert w.c.one(b"inspect jobs sq 0 10\r\n") == b"+OK 0\r\n"
    assert w.c.one(b"lease sq 0\r\n") == TIMEOUT
    worker = w.conn()
    assert worker.feed(b"lease sq 10000\r\n") == [WAITING]
    w.step(4999)
    assert worker.woken == [] and w.queue("sq") == (0, 1)
    w.step(1)
    assert worker.woken == [lease_frame(U, "sq", 1000, b"s")]
    assert w.queue("sq") == (0, 0)
    assert w.c.one(b"inspect scheduled-jobs sq 0 10\r\n") == b"+OK 0\r\n"
    j = w.c.job(U)
    assert (j["state"], j["attempts"], j["time"]) == ("4", "1", "2023-11-14T22:13:25Z")


def test_schedule_time_fraction_and_past_times(w):
    v = uid_n(2)
    assert w.c.one(schedule_cmd(U, "sq", "2023-11-14T22:13:21.5Z", b"f")) == OK
    assert w.c.job(U)["time"] == "2023-11-14T22:13:21Z"
    # in the past, TTL not over: ready at once
    assert w.c.one(schedule_cmd(v, "sq", "2023-11-14T22:13:10Z", b"p", ttr=60_000,
                                ttl=60_000)) == OK
    assert w.queue("sq") == (1, 1)
    lease(w, "sq", ttr=60_000, payload=b"p", uid=v)
    # in the past with its TTL already over: refused
    assert w.c.one(schedule_cmd(uid_n(3), "sq", "2023-11-14T22:13:10Z", ttl=5000)) == (
        err("Invalid Time"))
    w.step(1499)
    assert w.c.one(b"lease sq 0\r\n") == TIMEOUT
    w.step(1)
    lease(w, "sq", payload=b"f")


# ====================================================================== order, complete
def test_priority_higher_first_then_fifo(w):
    prios = [0, 5, 5, -3, 0, 2147483647, -2147483648, 5]
    uids = [uid_n(10 + i) for i in range(len(prios))]
    for i, (u, p) in enumerate(zip(uids, prios)):
        assert w.c.one(add_cmd(u, "pq", b"%d" % i, priority=p)) == OK
    want = [uids[i] for i in sorted(range(len(prios)), key=lambda i: (-prios[i], i))]
    listed = parse_entries(w.c.one(b"inspect jobs pq 0 100\r\n"))
    assert [ident for ident, _ in listed] == want
    assert [int(k["priority"]) for _, k in listed] == sorted(prios, reverse=True)
    for u in want:
        lease(w, "pq", payload=b"%d" % uids.index(u), uid=u)


def test_complete_of_a_never_leased_job(w):
    assert w.c.one(add_cmd(U, "q")) == OK
    assert w.c.one(complete_cmd(U, b"ok")) == OK
    assert w.state() == ("1", "0", "0") and w.queue("q") == (0, 0)
    assert w.c.one(b"lease q 0\r\n") == TIMEOUT
    assert w.c.one(b"result %s 0\r\n" % U.encode()) == result_frame(U, True, b"ok")


# ====================================================================== delete
@pytest.mark.parametrize("state", ["new", "leased", "pending", "completed", "failed",
                                   "scheduled"])
def test_delete_in_every_state(w, state):
    _bring_to(w, state)
    other = w.conn()                                   # leases are not owned by connections
    assert other.one(b"delete %s\r\n" % U.encode()) == OK
    assert w.c.job(U) is None
    assert w.c.one(b"delete %s\r\n" % U.encode()) == NOT_FOUND
    assert w.c.one(complete_cmd(U, b"x")) == NOT_FOUND
    assert w.c.one(b"result %s 0\r\n" % U.encode()) == NOT_FOUND
    assert w.queue("q") == (0, 0)
    w.step(10_000)                                     # no timer brings it back
    assert w.c.job(U) is None and w.c.one(b"lease q 0\r\n") == TIMEOUT
    assert w.evicted() == 0                            # a delete is not an eviction
