"""The engine's side of rate limits across nodes (core/shared_tokens.py), in process on the
injectable clock: a node in shared mode (Port.share, no database) admits reservations of a
rate-limited queue only with tokens taken from the database's bucket, never refills its own,
asks for tokens only for waiters that could use them, and gives back what nobody here can
use."""
from __future__ import annotations

from core.api import TIMED_OUT, WAITING, ManualClock, Port


def _node():
    p = Port.create(ManualClock())
    node = p.share("test:1:1")
    asked = []
    node.on_demand = lambda: asked.append(p.clock.monotonic_ms())
    return p, node, asked


def test_a_shared_node_never_refills_its_own_bucket():
    """A rate of 5 per second set here: a single server's bucket starts full and refills; in
    shared mode nothing is admitted before tokens come from the database, however long the
    node waits, and then exactly as many reservations as tokens came."""
    p, node, _ = _node()
    p.set_rate_limit("q", 5, 1000)
    for i in range(3):
        p.put("q", b"%d" % i, 0, 0, 60_000, "bunqueue")
    got = []
    o = p.new_owner("bunqueue")
    assert p.reserve(o, ["q"], 60_000, got.append) is WAITING
    p.clock.advance(10_000)
    p.tick()
    assert got == []
    assert node.tokens.wants({}) == {"q": (5, 1000, 1)}   # one waiter: one token
    node.tokens.start({"q": (5, 1000, 1)})
    assert node.tokens.granted({"q": (1, None)}) is True
    assert len(got) == 1
    r = p.reserve(p.new_owner("bunqueue"), ["q"], 60_000, got.append)
    assert r is WAITING and len(got) == 1              # the token is spent
    assert p.queue_limits("q")["rateLimit"] == {"max": 5, "duration": 1000}


def test_tokens_are_wanted_for_the_waiters_only_and_not_for_an_emptied_queue():
    """Three waiters want three tokens (two held here: one more); a queue whose last claim
    found no row and has nothing ready here wants none (a waiter on an empty queue would
    take and give back in turn with the other nodes), unless the poll asks; a paused queue
    wants none."""
    p, node, _ = _node()
    p.set_rate_limit("q", 10, 1000)
    for _ in range(3):
        assert p.reserve(p.new_owner("bunqueue"), ["q"], 60_000, lambda r: None) is WAITING
    assert node.tokens.wants({}) == {"q": (10, 1000, 3)}
    assert node.tokens.wants({"q": 4}) == {"q": (10, 1000, 7)}   # a batch reserve's extra
    node.tokens.start({"q": (10, 1000, 2)})
    node.tokens.granted({"q": (2, None)})             # nothing ready: the waiters keep them
    assert node.tokens.wants({}) == {"q": (10, 1000, 1)}
    assert node.tokens.wants({}, skip={"q"}) == {}
    assert node.tokens.wants({}, skip={"q"}, retry=True) == {}
    p.pause("q", 60_000)
    assert node.tokens.wants({}) == {}


def test_unused_tokens_go_back_and_a_notice_ends_the_wait_for_the_next():
    """Tokens held beyond what the waiters here could spend, for waiters that left, or for
    waiters of a queue found empty, are given back at the tick (whole ones, the fraction
    stays); a take that found the bucket empty waits until the next token is due, unless
    another node's give-back is noticed first."""
    p, node, asked = _node()
    p.set_rate_limit("q", 4, 2000)
    o = p.new_owner("bunqueue")
    assert p.reserve(o, ["q"], 60_000, lambda r: None) is WAITING
    node.tokens.start({"q": (4, 2000, 3)})
    node.tokens.granted({"q": (3, None)})
    assert node.tokens.tick() == {"q": (4, 2000, 2)}   # one waiter may use one: kept
    assert node.tokens.tick() is None
    node.emptied.add("q")                             # its claim found no row
    assert node.tokens.tick() == {"q": (4, 2000, 1)}
    assert node.tokens.given == 3 and node.tokens.tick() is None
    node.emptied.discard("q")
    node.tokens.start({"q": (4, 2000, 1)})
    assert node.tokens.granted({"q": (0, 500)}) is False   # empty: the next in 500 ms
    assert node.tokens.wants({}) == {}
    node.tokens.freed("q")                            # another node gave some back
    assert node.tokens.wants({}) == {"q": (4, 2000, 1)}
    node.tokens.start({"q": (4, 2000, 1)})
    node.tokens.granted({"q": (0, 500)})
    asked.clear()
    p.clock.advance(500)
    node.tokens.tick()
    assert asked == [p.clock.monotonic_ms()]          # due: a claim round is asked for
    p.cancel_wait(o)
    node.tokens.start({"q": (4, 2000, 1)})
    node.tokens.granted({"q": (2, None)})
    assert node.tokens.tick() == {"q": (4, 2000, 2)}  # nobody waits any more


def test_tokens_taken_under_a_changed_limit_are_dropped():
    """A take that ran while the limit changed (another node's change installed meanwhile):
    its tokens were the old bucket's, so they admit nothing here; the new limit's take is not
    held back by the old one's `due`."""
    p, node, _ = _node()
    p.set_rate_limit("q", 2, 1000)
    got = []
    assert p.reserve(p.new_owner("bunqueue"), ["q"], 60_000, got.append) is WAITING
    p.put("q", b"x", 0, 0, 60_000, "bunqueue")
    node.tokens.start({"q": (2, 1000, 1)})
    assert node.tokens.granted({"q": (0, 400)}) is False
    node.tokens.start({"q": (2, 1000, 1)})
    p.set_rate_limit("q", 3, 1000)                    # changed while the take ran
    assert node.tokens.granted({"q": (1, None)}) is False and got == []
    assert node.tokens.wants({}) == {"q": (3, 1000, 1)}   # not held back by the old `due`


def test_a_limit_below_one_admits_nothing_until_it_changes():
    """bunqueue: a rate limit below 1 admits nothing (core/limits.py); the bucket answers no
    token and no time for one: the node asks again only when the limit changes."""
    p, node, asked = _node()
    p.set_rate_limit("q", 0, 1000)
    assert p.reserve(p.new_owner("bunqueue"), ["q"], 60_000, lambda r: None) is WAITING
    node.tokens.start({"q": (0, 1000, 1)})
    node.tokens.granted({"q": (0, None)})
    asked.clear()
    p.clock.advance(60_000)
    node.tokens.tick()
    assert asked == [] and node.tokens.wants({}) == {}
    p.set_rate_limit("q", 1, 1000)
    assert node.tokens.wants({}) == {"q": (1, 1000, 1)}


def test_a_give_back_noticed_while_the_take_runs_is_not_lost():
    """Node a's take finds the bucket empty (rate 1 per minute); node b's give-back commits
    and its notice reaches a while a's round still runs (review: freed() cleared `due`, then
    granted() set it again from the take's answer, and a's waiter waited for the next
    refill). As the slots do with `_noticed`, a takes again at once."""
    p, node, _ = _node()
    p.set_rate_limit("q", 1, 60_000)
    assert p.reserve(p.new_owner("bunqueue"), ["q"], 600_000, lambda r: None) is WAITING
    p.put("q", b"x", 0, 0, 60_000, "bunqueue")
    node.start_round()
    assert node.tokens.asked == {"q": (1, 60_000, 1)}
    node.tokens.freed("q")                               # b's give-back, noticed meanwhile
    node.tokens.granted({"q": (0, 59_000)})              # a's take had found none
    assert node.tokens.wants({}) == {"q": (1, 60_000, 1)}
    node.tokens.start({"q": (1, 60_000, 1)})
    node.tokens.granted({"q": (0, 59_000)})              # no notice this time
    assert node.tokens.wants({}) == {}


def _row(id: int) -> dict:
    """A ready jobs row, as the claim statement returns it (the columns load() reads)."""
    return {"id": id, "uid": None, "queue": "q", "payload": b"x", "priority": 0,
            "state": "ready", "created_ms": 1_700_000_000_000, "ready_at_ms": None,
            "delay_ms": 0, "ttr_ms": 60_000, "dialect": "bunqueue", "reserves": 1,
            "timeouts": 0, "releases": 0, "buries": 0, "kicks": 0, "fails": 0, "ttl_ms": 0,
            "expires_at_ms": None, "max_attempts": 0, "max_fails": 0, "sched_ms": 0,
            "result": None, "result_ok": 0, "payload_fmt": 0, "extras": None}


def test_tokens_are_not_given_back_while_the_round_claims_with_them():
    """Rate 1 per minute; the queue's last claim here found no row (`emptied`) and a job was
    pushed on another node since (its notice not here yet). A probe (PULL with timeout 0):
    round 1 takes the token and carries the probe to round 2, whose claim asks for the
    queue. The 100 ms tick during that claim keeps the token (second review: it gave it
    back, the claimed row found no token here, and the probe answered TIMED_OUT though the
    job was committed)."""
    p, node, _ = _node()
    p.set_rate_limit("q", 1, 60_000)
    node.emptied.add("q")
    got = []
    assert p.reserve(p.new_owner("bunqueue"), ["q"], 0, got.append) is WAITING   # a probe
    d, _ = node.start_round()                         # round 1: the take
    assert d == {} and node.tokens.asked == {"q": (1, 60_000, 1)}
    assert node.tokens.granted({"q": (1, None)}) is True
    node.carry_probes()                               # as SharedLink._claimed does
    d, _ = node.start_round()                         # round 2: the claim, under the token
    assert d == {"q": 1}
    assert node.tokens.tick() is None                 # the tick while the claim runs
    node.slots.granted(None)                          # the round ends (SharedLink._granted)
    node.found([_row(7)])
    node.load([_row(7)])
    assert len(got) == 1 and got[0] is not TIMED_OUT and got[0].id == 7, got


def test_a_node_waiting_for_a_slot_keeps_no_tokens_and_takes_none():
    """Rate 10 per second and a concurrency limit of 1 whose slot another node holds (this
    node's take was denied): the tokens held here go back at the tick (they would be let out
    beside a refilled bucket once the slot comes), and no token is taken until a give-back
    notice ends the wait for a slot."""
    p, node, _ = _node()
    p.set_rate_limit("q", 10, 1000)
    p.set_concurrency("q", 1)
    assert p.reserve(p.new_owner("bunqueue"), ["q"], 60_000, lambda r: None) is WAITING
    node.tokens.start({"q": (10, 1000, 1)})
    node.tokens.granted({"q": (1, None)})
    node.slots.start({}, {"q": (1, 1, 0)})
    node.slots.granted({"q": (0, 0)})                 # the other node holds the slot
    assert node.slots.denied == {"q"}
    assert node.tokens.tick() == {"q": (10, 1000, 1)}
    assert node.tokens.wants({}) == {}
    node.slots.freed("q")                             # the other node gave it back
    assert node.tokens.wants({}) == {"q": (10, 1000, 1)}


def test_a_node_whose_limit_stays_stale_reads_the_stored_settings_again():
    """A take answers STALE (the node's rate limit is not the stored one): the node asks
    again after SETTLE_MS, and once that has lasted RELOAD_MS it reads the queue's stored
    settings again (a settings notification it lost would leave it so for ever: third
    review), unless a change made here waits for its commit (that one holds)."""
    from core.shared_tokens import RELOAD_MS, SETTLE_MS, STALE
    p, node, _ = _node()
    queried = []
    node.on_query = lambda fn, args, callback: queried.append((fn.__name__, args))
    p.set_rate_limit("q", 2, 60_000)
    assert p.reserve(p.new_owner("bunqueue"), ["q"], 600_000, lambda r: None) is WAITING
    node.settings.changed_queues.clear()              # (its commit: announced)
    node.tokens.start({"q": (2, 60_000, 1)})
    assert node.tokens.granted({"q": (0, STALE)}) is False
    assert node.tokens.due == {"q": p.clock.monotonic_ms() + SETTLE_MS} and queried == []
    p.clock.advance(RELOAD_MS)
    node.tokens.start({"q": (2, 60_000, 1)})
    node.tokens.granted({"q": (0, STALE)})
    assert queried == [("settings_row", ("q",))]
    node.settings.changed("q")                        # a change here, not committed yet
    p.clock.advance(RELOAD_MS)
    node.tokens.start({"q": (2, 60_000, 1)})
    node.tokens.granted({"q": (0, STALE)})
    assert queried == [("settings_row", ("q",))]      # no reload over it


def test_tokens_beyond_the_free_slots_go_back():
    """Rate 10 per second, a concurrency limit of 1 whose slot this node holds with a job
    reserved: a token held for the second waiter cannot be spent until that job ends, so
    the tick gives it back (kept, it would be spent beside a refilled bucket); the next take
    waits for the free slot (none wanted while the limit is full here)."""
    p, node, _ = _node()
    p.set_rate_limit("q", 10, 1000)
    p.set_concurrency("q", 1)
    o = p.new_owner("bunqueue")
    got = []
    assert p.reserve(o, ["q"], 60_000, got.append) is WAITING
    p.put("q", b"a", 0, 0, 60_000, "bunqueue")
    node.tokens.start({"q": (10, 1000, 1)})
    node.tokens.granted({"q": (1, None)})
    node.slots.start({}, {"q": (1, 1, 0)})
    node.slots.granted({"q": (1, 1)})                 # the job is reserved under the slot
    assert len(got) == 1
    assert p.reserve(p.new_owner("bunqueue"), ["q"], 60_000, got.append) is WAITING
    p.put("q", b"b", 0, 0, 60_000, "bunqueue")
    node.tokens.start({"q": (10, 1000, 1)})
    assert node.tokens.granted({"q": (1, None)}) is True   # (taken before the limit filled)
    assert len(got) == 1                              # the limit holds the second
    assert node.tokens.tick() == {"q": (10, 1000, 1)}
    assert node.tokens.wants({}) == {}
    assert p.delete(o, got[0].id)                     # the slot frees: a token is wanted
    assert node.tokens.wants({}) == {"q": (10, 1000, 1)}


def test_the_poll_takes_again_when_a_give_back_notice_may_have_been_missed():
    """A take found the bucket empty (next token in 50 s); a give-back elsewhere whose notice
    this node missed (its listener reconnecting) leaves a token there. The poll (or the
    reconnect) forgets `due` as it forgets denied slots, so its round takes again; a take
    running meanwhile does not set `due` again."""
    p, node, _ = _node()
    p.set_rate_limit("q", 1, 60_000)
    assert p.reserve(p.new_owner("bunqueue"), ["q"], 600_000, lambda r: None) is WAITING
    node.tokens.start({"q": (1, 60_000, 1)})
    node.tokens.granted({"q": (0, 50_000)})
    assert node.start_round()[1] == {} and node.tokens.asked == {}
    node.forget_emptied()                             # the poll
    node.start_round()
    assert node.tokens.asked == {"q": (1, 60_000, 1)}
    node.forget_emptied()                             # a reconnect while that take runs
    node.tokens.granted({"q": (0, 50_000)})
    assert node.tokens.wants({}) == {"q": (1, 60_000, 1)}
