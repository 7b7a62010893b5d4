"""The engine's side of concurrency slots (core/shared_slots.py, core/limit_checks.py), in
process on the injectable clock: a node in shared mode (Port.share, no database) admits
reservations of a limited queue only under the slots it holds, and a queue held back only
by missing slots while its rate limit has a token arms no limit timer (a timer due at `now`
was popped again at once by the same tick, for ever: review finding)."""
from __future__ import annotations

from core.api import WAITING, ManualClock, Port


class Got:
    """A reserve callback recording what it gets."""

    def __init__(self) -> None:
        self.results: list = []

    def __call__(self, r) -> None:
        self.results.append(r)


def _node():
    p = Port.create(ManualClock())
    node = p.share("test:1:1")
    node.on_demand = lambda: None
    return p, node


def test_a_rate_limited_queue_without_slots_arms_no_timer_due_now():
    p, node = _node()
    asked = []
    node.on_demand = lambda: asked.append(1)
    p.set_concurrency("q", 1)
    p.set_rate_limit("q", 100, 1000)
    got = Got()
    assert p.reserve(p.new_owner("bunqueue"), ["q"], 10_000, got) is WAITING
    p.put("q", b"x", 0, 0, 60_000, "bunqueue")
    assert node.tokens.wants({}) == {"q": (100, 1000, 1)}   # shared mode: no token here yet
    node.tokens.start({"q": (100, 1000, 1)})
    assert node.tokens.granted({"q": (1, None)}) is True    # the database's bucket gave one
    p.tick()                        # returns (it spun for ever before the fix)
    assert got.results == []        # no slot held: not served
    due = p.next_due()
    assert due is None or due > p.clock.monotonic_ms()
    assert node.slots.wants({}, set()) == {"q": (1, 1, 0)}   # the next round takes one
    assert asked                    # and the waiter asked for that round


def test_a_granted_slot_serves_the_waiter_and_is_given_back_after():
    p, node = _node()
    p.set_concurrency("q", 1)
    got = Got()
    owner = p.new_owner("beanstalk")
    assert p.reserve(owner, ["q"], 10_000, got) is WAITING
    jid = p.put("q", b"x", 0, 0, 60_000, "beanstalk")
    assert got.results == []
    node.slots.start({}, {"q": (1, 1, 0)})
    assert node.slots.granted({"q": (1, 1)}) is True
    assert [r.id for r in got.results] == [jid]
    assert node.slots.tick(500) is None                  # in use, no refresh due
    assert node.slots.tick(1000) == ({"q": 1}, {}, {"q"})   # the refresh: as counted here
    assert p.delete(owner, jid)
    exact, floor, known = node.slots.tick(1100)
    assert exact == {"q": 0} and node.slots.held == {}   # given back: nothing waits
    assert node.slots.rows == {}


def test_a_changed_limit_admits_nothing_until_taken_again():
    """Slots taken under a limit of 2; the limit goes down to 1: the node admits nothing more
    under the old count (its row stays, counting its reserved jobs) until a take under the
    new limit allows it; the row comes down as the jobs finish."""
    p, node = _node()
    p.set_concurrency("q", 2)
    owners = [p.new_owner("beanstalk") for _ in range(3)]
    node.slots.start({}, {"q": (2, 2, 0)})
    node.slots.granted({"q": (2, 2)})
    ids = [p.put("q", b"x%d" % i, 0, 0, 60_000, "beanstalk") for i in range(3)]
    got = [Got() for _ in owners]
    assert p.reserve(owners[0], ["q"], 10_000, got[0]).id == ids[0]
    assert p.reserve(owners[1], ["q"], 10_000, got[1]).id == ids[1]
    p.set_concurrency("q", 1)
    assert node.slots.held == {} and node.slots.rows == {"q": 2}
    assert p.delete(owners[0], ids[0])
    assert p.reserve(owners[2], ["q"], 10_000, got[2]) is WAITING   # not under the old 2
    p.tick()
    assert got[2].results == []
    exact, floor, known = node.slots.tick(100)
    assert exact == {"q": 1}          # the row down to the job still reserved
    assert node.slots.wants({}, set()) == {"q": (1, 1, 1)}   # a take under the new limit
    node.slots.start({}, node.slots.wants({}, set()))
    assert node.slots.granted({"q": (0, 1)}) is False   # the limit is full: nothing more
    assert p.delete(owners[1], ids[1])
    p.tick()
    assert got[2].results == []


def test_a_grant_taken_under_a_limit_changed_meanwhile_admits_nothing():
    """A take asked under a limit of 3; the limit goes down to 1 before its grant arrives:
    the grant's row counts, but the node admits nothing under it and takes again."""
    p, node = _node()
    p.set_concurrency("q", 3)
    got = Got()
    assert p.reserve(p.new_owner("beanstalk"), ["q"], 10_000, got) is WAITING
    p.put("q", b"x", 0, 0, 60_000, "beanstalk")
    wants = node.slots.wants({}, set())
    assert wants == {"q": (3, 1, 0)}
    node.slots.start({}, wants)
    p.set_concurrency("q", 1)                              # while the take runs
    assert node.slots.granted({"q": (1, 1)}) is True       # take again ...
    assert got.results == [] and node.slots.held == {}     # ... nothing admitted under it
    assert node.slots.rows == {"q": 1}
    assert node.slots.wants({}, set()) == {"q": (1, 1, 0)}


def _waiters(p, n):
    got = [Got() for _ in range(n)]
    for g in got:
        assert p.reserve(p.new_owner("beanstalk"), ["q"], 60_000, g) is WAITING
    return got


def test_a_grant_taken_under_the_old_limit_admits_nothing_after_a_lowering():
    """Limit 4; another node (b) holds 2 slots with 2 jobs. This node's two workers wait
    (two ready jobs here): the round takes under limit 4 (others 2: allowed 2). While the
    take is in flight the limit is lowered to 2. The grant lands: under the new limit the
    others' 2 rows leave nothing, so no worker may be served (b's 2 + these 2 = 4 > 2:
    new reservations after the lowering), and the node must take again under limit 2."""
    p, node = _node()
    p.set_concurrency("q", 4)
    got = _waiters(p, 2)
    for i in range(2):
        p.put("q", b"x%d" % i, 0, 0, 60_000, "beanstalk")
    assert all(g.results == [] for g in got)           # no slot held yet
    wants = node.slots.wants({}, set())
    assert wants == {"q": (4, 2, 0)}
    node.slots.start({}, wants)                        # the take runs on the claim thread
    p.set_concurrency("q", 2)                          # ... and the limit goes down meanwhile
    assert node.slots.held == {}
    node.slots.granted({"q": (2, 2)})                  # take_slots under 4: min(2, 4 - 2)
    served = sum(len(g.results) for g in got)
    assert served == 0, (f"{served} reservations admitted under a grant of the old limit 4 "
                         f"after the limit went down to 2 (held {node.slots.held}, "
                         f"limits {node.slots.limits})")


def test_a_stale_grant_is_not_kept_when_the_limit_comes_back():
    """A take asked under limit 2 lands after the limit was raised to 4 (its grant is
    conservative then); when the limit goes back to 2, limits_changed sees `limits` == 2
    (the stale take's) and keeps `held`, although other nodes took slots under 4 meanwhile:
    the node must take again before it admits under the lowered limit."""
    p, node = _node()
    p.set_concurrency("q", 2)
    got = _waiters(p, 3)
    wants = node.slots.wants({}, set())
    assert wants == {"q": (2, 2, 0)}
    node.slots.start({}, wants)
    p.set_concurrency("q", 4)                          # raised while the take is in flight
    node.slots.granted({"q": (2, 2)})                  # under 2, others 0: allowed 2
    # (meanwhile another node takes the 2 slots limit 4 leaves beside this node's row)
    p.set_concurrency("q", 2)                          # lowered back
    for i in range(2):
        p.put("q", b"x%d" % i, 0, 0, 60_000, "beanstalk")
    served = sum(len(g.results) for g in got)
    assert served == 0, (f"{served} reservations admitted after the limit came back to 2 "
                         f"under slots taken before it was raised (held {node.slots.held}, "
                         f"limits {node.slots.limits})")
    assert node.slots.wants({}, set()) == {"q": (2, 2, 0)}   # a take under the new limit


def test_a_rate_limited_waiter_asks_for_a_slot_when_its_token_is_due():
    """Limit 1 and a rate of 1 per second; the node's worker reserves and finishes a job (the
    token taken from the database's bucket is spent, the slot given back at the tick). A
    second worker waits while the queue's jobs are in the database (none ready here): with
    no token it asks for no slot but for a token; the take finds the bucket empty, the next
    token 1 s away, and asks again only then (docs/scaling.md "Rate limits across nodes"):
    the node's tick asks for a claim round when it is due, and that round's take gets it;
    then the worker wants a slot."""
    p, node = _node()
    asked = []
    node.on_demand = lambda: asked.append(p.clock.monotonic_ms())
    p.set_concurrency("q", 1)
    p.set_rate_limit("q", 1, 1000)
    node.tokens.start({"q": (1, 1000, 1)})
    assert node.tokens.granted({"q": (1, None)}) is True   # the bucket starts full: 1
    node.slots.start({}, {"q": (1, 1, 0)})
    node.slots.granted({"q": (1, 1)})
    o = p.new_owner("beanstalk")
    p.put("q", b"a", 0, 0, 60_000, "beanstalk")
    r = p.reserve(o, ["q"], 10_000, lambda r: None)
    assert r is not WAITING
    assert p.delete(o, r.id)
    p.tick()
    node.slots.tick(100)
    assert node.slots.held == {}                      # given back: nothing may reserve now
    got = Got()
    assert p.reserve(p.new_owner("beanstalk"), ["q"], 100_000, got) is WAITING
    assert node.slots.wants({}, set()) == {}          # no token here: no slot asked for
    assert node.tokens.wants({}) == {"q": (1, 1000, 1)}
    node.tokens.start({"q": (1, 1000, 1)})
    assert node.tokens.granted({"q": (0, 1000)}) is False   # empty, the next one in 1 s
    assert node.tokens.wants({}) == {}                # not asked again before then
    assert node.tokens.wants({}, retry=True) == {"q": (1, 1000, 1)}   # (the poll asks)
    asked.clear()
    asked_from = p.clock.monotonic_ms()
    for i in range(15):                               # 1.5 s: the token is due after 1 s
        p.clock.advance(100)
        p.tick()
        node.slots.tick(200 + 100 * i)                # the gateway's 100 ms timer
        assert node.tokens.tick() is None             # nothing to give back
    assert asked and 1000 <= asked[0] - asked_from <= 1100, asked   # when the token is due
    assert node.tokens.wants({}) == {"q": (1, 1000, 1)}
    node.tokens.start({"q": (1, 1000, 1)})
    assert node.tokens.granted({"q": (1, None)}) is True
    assert node.slots.wants({}, set()) == {"q": (1, 1, 0)}   # it would take a slot now


def test_a_reconnected_listener_during_a_take_leaves_the_queue_takeable():
    """The poll or a reconnected listener (forget_emptied: notices may have been missed,
    among them a give-back that committed while the take ran) during a round whose take
    got nothing: like `emptied`, the running take must not mark the queue denied, else the
    next round skips it (review finding)."""
    p, node = _node()
    p.set_concurrency("q", 1)
    assert p.reserve(p.new_owner("beanstalk"), ["q"], 60_000, Got()) is WAITING
    demand, wants = node.start_round()
    assert wants == {"q": (1, 1, 0)}
    node.forget_emptied()                           # while the take runs
    node.slots.granted({"q": (0, 0)})               # it saw the other node's row
    assert "q" not in node.slots.denied
    assert node.start_round()[1] == {"q": (1, 1, 0)}   # the next round takes again
    node.slots.granted({"q": (0, 0)})               # no notice this time: denied
    assert node.slots.denied == {"q"} and node.start_round()[1] == {}
