"""The shared token bucket against a real PostgreSQL (core/shared_tokens.py take_tokens /
give_tokens on a fresh database at the schema's head), driven by a node's side in process
on the manual clock (Port.create + share): limits changed or cleared through the node holding
tokens, and windows the bucket row must keep as given (review of the rate limits across
nodes). Needs JOBGATE_TEST_PG_URL (skipped with a clear reason without it)."""
from __future__ import annotations

import psycopg
import pytest
import sqlalchemy as sa

from core.api import WAITING, ManualClock, Port, give_tokens, take_tokens


def _node():
    p = Port.create(ManualClock())
    node = p.share("test:1:1")
    node.on_demand = lambda: None
    return p, node


@pytest.fixture
def conn(pg_url):
    """A psycopg connection to a fresh database with the schema (migrations to head)."""
    import migrations
    eng = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    migrations.upgrade(eng)
    eng.dispose()
    c = psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://"))
    yield c
    c.close()


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
    got = []
    for _ in range(2):
        assert p.reserve(p.new_owner("bunqueue"), ["q"], 600_000, got.append) is WAITING
    _rounds(p, node, conn, 1)
    assert got == [] and p._engine.queue_settings["q"].tokens == 2
    p.set_rate_limit("q", 3, 60_000)
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
    full bucket each time), 1e19 ms is stored (not an out-of-range error); give_tokens finds
    the row by the same values."""
    assert take_tokens(conn, {"a": (2, 60000.5, 2)}) == {"a": (2, None)}
    taken, next_ms = take_tokens(conn, {"a": (2, 60000.5, 1)})["a"]
    assert taken == 0 and 29_000 < next_ms <= 30_001
    give_tokens(conn, {"a": (2, 60000.5, 1)})
    assert take_tokens(conn, {"a": (2, 60000.5, 1)}) == {"a": (1, None)}
    assert take_tokens(conn, {"b": (5, 1e19, 1)}) == {"b": (1, None)}
    assert take_tokens(conn, {"b": (5, 1e19, 5)}) == {"b": (4, None)}
