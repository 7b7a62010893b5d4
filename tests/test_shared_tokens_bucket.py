"""The shared token bucket against a real PostgreSQL (core/shared_tokens.py take_tokens /
give_tokens on a fresh database at the schema's head), driven by a node's side in process
on the manual clock (Port.create + share): limits changed or cleared through the node holding
tokens, and windows the bucket row must keep as given (review of the rate limits across
nodes). Needs JOBGATE_TEST_PG_URL (skipped with a clear reason without it)."""
from __future__ import annotations

import msgpack
import psycopg
import pytest
import sqlalchemy as sa

from core.api import WAITING, ManualClock, Port, give_tokens, take_tokens
from core.shared_tokens import STALE


def _node():
    p = Port.create(ManualClock())
    node = p.share("test:1:1")
    node.on_demand = lambda: None
    return p, node


def _migrated(pg_url: str) -> str:
    """Bring the fresh database `pg_url` to the schema's head; its psycopg URL."""
    import migrations
    eng = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    migrations.upgrade(eng)
    eng.dispose()
    return pg_url.replace("postgresql+psycopg://", "postgresql://")


@pytest.fixture
def conn(pg_url):
    """A psycopg connection to a fresh database with the schema (migrations to head)."""
    c = psycopg.connect(_migrated(pg_url))
    yield c
    c.close()


def _two_nodes_a_took(conn, waiters: int, jobs: int) -> tuple:
    """Nodes a and b at 2 per minute (stored); `waiters` reserves and `jobs` ready jobs on a,
    and a's first round's take: (a, its node, b, its node, a's jobs, b's jobs)."""
    a, na = _node()
    b, nb = _node()
    for p in (a, b):
        p.set_rate_limit("q", 2, 60_000)
    _stored(conn, "q", 2, 60_000)
    got_a, got_b = [], []
    _waiting_and_ready(a, got_a, waiters, jobs)
    _rounds(a, na, conn, 1)
    return a, na, b, nb, got_a, got_b


def _stored(conn, queue: str, rate, window) -> None:
    """Store a rate limit of `queue` as the commit of the node it was set through does (the
    stored limit a take compares with; the in-process nodes here have no store)."""
    spec = msgpack.packb({"rateLimit": rate, "rateLimitDuration": window,
                          "rateLimitExpiresAt": None, "concurrencyLimit": None,
                          "stallConfig": None}, use_bin_type=True)
    conn.execute("INSERT INTO queue_settings (queue, spec) VALUES (%s, %s) ON CONFLICT "
                 "(queue) DO UPDATE SET spec = EXCLUDED.spec", (queue, spec))
    conn.commit()


def _rounds(p, node, conn, n: int = 3) -> None:
    """`n` claim rounds' takes (no clock move)."""
    for _ in range(n):
        node.start_round()
        if node.tokens.asked:
            node.tokens.granted(take_tokens(conn, node.tokens.asked))


def _waiting_and_ready(p, got: list, waiters: int, jobs: int) -> None:
    """`waiters` reserves of queue q waiting (their jobs appended to `got`), then `jobs`
    ready jobs put in it."""
    for _ in range(waiters):
        assert p.reserve(p.new_owner("bunqueue"), ["q"], 600_000, got.append) is WAITING
    for i in range(jobs):
        p.put("q", b"%d" % i, 0, 0, 60_000, "bunqueue")


def test_a_limit_changed_through_the_node_holding_tokens_starts_from_the_new_bucket(conn):
    """Rate 2 per minute: the node took both tokens for two waiters, nothing ready yet. The
    limit changed through this node to 3 per minute: a single server's bucket is then full
    (3); here the old tokens are dropped and the database's bucket, made for another limit,
    starts full: 3 reservations at once, not 5 (review)."""
    p, node = _node()
    p.set_rate_limit("q", 2, 60_000)
    _stored(conn, "q", 2, 60_000)
    got = []
    for _ in range(2):
        assert p.reserve(p.new_owner("bunqueue"), ["q"], 600_000, got.append) is WAITING
    _rounds(p, node, conn, 1)
    assert got == [] and p._engine.queue_settings["q"].tokens == 2
    p.set_rate_limit("q", 3, 60_000)
    _stored(conn, "q", 3, 60_000)
    _waiting_and_ready(p, got, 3, 5)
    _rounds(p, node, conn)
    assert len(got) == 3, got


def test_tokens_held_when_the_limit_is_cleared_are_dropped(conn):
    """The queue keeps its settings (a stall config too); the node held 2 tokens when its rate
    limit was cleared; a minute later the same limit is set again through it: the bucket
    (refilled) gives 2, and the cleared limit's 2 are gone: 2 reservations, not 4 (review)."""
    p, node = _node()
    p.set_stall_config("q", {"maxStalls": 5})
    p.set_rate_limit("q", 2, 60_000)
    _stored(conn, "q", 2, 60_000)
    got, owners = [], [p.new_owner("bunqueue") for _ in range(2)]
    for o in owners:
        assert p.reserve(o, ["q"], 600_000, got.append) is WAITING
    _rounds(p, node, conn, 1)
    assert p._engine.queue_settings["q"].tokens == 2
    for o in owners:
        p.cancel_wait(o)
    p.clear_rate_limit("q")
    assert p._engine.queue_settings["q"].tokens == 0 and node.tokens.tick() is None
    conn.execute("UPDATE queue_tokens SET refilled_ms = refilled_ms - 60000")   # a minute
    conn.commit()
    p.set_rate_limit("q", 2, 60_000)
    _waiting_and_ready(p, got, 4, 4)
    _rounds(p, node, conn)
    assert len(got) == 2, got


def test_the_bucket_keeps_any_finite_window(conn):
    """Windows as bunqueue takes them: 60000.5 ms is one limit across takes (not a new,
    full bucket each time), 1e19 ms is stored (not an out-of-range error), an int window
    of 2**53 + 1 ms (a float column cannot hold it exactly) is one limit too; give_tokens
    finds the row by the same values."""
    _stored(conn, "a", 2, 60000.5)
    _stored(conn, "b", 5, 1e19)
    _stored(conn, "c", 2, 2**53 + 1)
    assert take_tokens(conn, {"a": (2, 60000.5, 2)}) == {"a": (2, None)}
    taken, next_ms = take_tokens(conn, {"a": (2, 60000.5, 1)})["a"]
    assert taken == 0 and 29_000 < next_ms <= 30_001
    give_tokens(conn, {"a": (2, 60000.5, 1)})
    assert take_tokens(conn, {"a": (2, 60000.5, 1)}) == {"a": (1, None)}
    assert take_tokens(conn, {"b": (5, 1e19, 1)}) == {"b": (1, None)}
    assert take_tokens(conn, {"b": (5, 1e19, 5)}) == {"b": (4, None)}
    assert take_tokens(conn, {"c": (2, 2**53 + 1, 2)}) == {"c": (2, None)}
    assert take_tokens(conn, {"c": (2, 2**53 + 1, 2)})["c"][0] == 0   # spent: one bucket
    give_tokens(conn, {"c": (2, 2**53 + 1, 1)})
    assert take_tokens(conn, {"c": (2, 2**53 + 1, 2)}) == {"c": (1, None)}


def test_a_node_still_on_the_old_limit_gets_no_token(conn):
    """Two nodes at 2 per minute; a's workers spent both tokens. The limit is changed to 3
    per minute through a (committed); b has not installed it yet (its notice on the way, or
    lost with its listener's session). Its takes under the old values get nothing (STALE:
    it asks again soon, and reads the stored settings if that lasts), while a's take under
    the stored limit starts the new bucket full: 2 + 3 reservations in all, as on a single
    server (second review: each take reset the row to its own values, 17 at once)."""
    a, na, b, nb, got_a, got_b = _two_nodes_a_took(conn, 2, 2)
    assert len(got_a) == 2
    a.set_rate_limit("q", 3, 60_000)
    _stored(conn, "q", 3, 60_000)                     # a's commit
    _waiting_and_ready(a, got_a, 20, 20)
    _waiting_and_ready(b, got_b, 20, 20)
    for _ in range(3):
        _rounds(a, na, conn, 1)
        _rounds(b, nb, conn, 1)
    assert (len(got_a), len(got_b)) == (5, 0)
    assert take_tokens(conn, {"q": (2, 60_000, 1)}) == {"q": (0, STALE)}


def test_tokens_held_through_a_pause_go_back(conn):
    """Rate 2 per minute; a took both tokens for its two waiters, and the queue is paused
    before its claim used them. The tick gives them back (a paused queue's waiters cannot
    spend them); when the pause ends a minute later the bucket holds 2 (refilled, capped):
    2 reservations over both nodes, as on a single server (second review: a kept them for
    the whole pause, 4 at once)."""
    a, na, b, nb, got_a, got_b = _two_nodes_a_took(conn, 2, 0)
    assert a._engine.queue_settings["q"].tokens == 2 and got_a == []
    assert a.pause("q", 60_000)
    back = na.tokens.tick()
    assert back == {"q": (2, 60_000, 2)}
    give_tokens(conn, back)
    for p in (a, b):
        p.clock.advance(60_000)                       # the pause ends
        p.tick()
    conn.execute("UPDATE queue_tokens SET refilled_ms = refilled_ms - 60000")   # a minute
    conn.commit()
    for i in range(3):
        a.put("q", b"%d" % i, 0, 0, 60_000, "bunqueue")
    _waiting_and_ready(b, got_b, 3, 3)
    for _ in range(2):
        _rounds(a, na, conn, 1)
        _rounds(b, nb, conn, 1)
    assert len(got_a) + len(got_b) == 2, (len(got_a), len(got_b))


def test_a_settings_change_waits_for_a_take_that_read_the_old_limit(pg_url):
    """A take under the old limit (2 per minute) has read the stored limit when the change
    to 3 per minute is written: the change waits for the take's transaction (the row read
    FOR SHARE), so the take's bucket is the old limit's, and the new limit's take after it
    starts a full bucket of 3: 2 + 3 in all (third review: the change committed between the
    read and the bucket's lock, the new node took 3, and the old take then reset the bucket
    to 2 and took 2 more: 10 within the minute)."""
    import threading
    import time
    raw = _migrated(pg_url)
    with psycopg.connect(raw) as admin, psycopg.connect(raw) as ca, psycopg.connect(raw) as cb:
        _stored(admin, "q", 2, 60_000)
        taken = [take_tokens(ca, {"q": (2, 60_000, 2)})["q"][0]]
        assert taken == [2]
        changed = []

        def change_then_take():
            _stored(admin, "q", 3, 60_000)
            changed.append(time.monotonic())
            taken.append(take_tokens(cb, {"q": (3, 60_000, 10)})["q"][0])

        class Hooked:
            """ca, whose take starts the change right after reading the stored limit."""
            def __init__(self):
                self.t = None

            def commit(self):
                ca.commit()

            def rollback(self):
                ca.rollback()

            def cursor(self):
                cur = ca.cursor()
                outer = self

                class C:
                    def execute(self, sql, args=()):
                        cur.execute(sql, args)
                        if sql.startswith("SELECT spec FROM queue_settings") and outer.t is None:
                            outer.t = threading.Thread(target=change_then_take)
                            outer.t.start()
                            time.sleep(0.3)          # the change is blocked meanwhile
                            assert changed == []

                    def fetchone(self):
                        return cur.fetchone()

                    def close(self):
                        cur.close()
                return C()
        h = Hooked()
        taken.append(take_tokens(h, {"q": (2, 60_000, 10)})["q"][0])   # the old limit's
        h.t.join(10)
        taken.append(take_tokens(cb, {"q": (3, 60_000, 10)})["q"][0])
        assert sum(taken) == 5, taken
