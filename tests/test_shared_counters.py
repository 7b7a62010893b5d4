"""core/shared_counters.py on a real PostgreSQL database: SharedCounters batches a node's takes
(one statement per batch), answers each caller even when one caller's callback raises or the
database fails, and sends a read after the takes asked before it. The node's claim thread is
played by a queue of statements run on one real psycopg connection when the test says so.

Needs JOBGATE_TEST_PG_URL (skipped with a clear reason without it).
"""
from __future__ import annotations

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from core.shared_counters import SharedCounters, read_counter
from migrations import upgrade


class _ClaimThread:
    """Runs the statements a SharedCounters sends (SharedNode.query's role) on one connection,
    in order, when `run_all()` is called: a statement's exception goes to its callback."""

    def __init__(self, conn) -> None:
        self.conn = conn
        self.pending: list = []

    def query(self, fn, args: tuple, callback) -> None:
        self.pending.append((fn, args, callback))

    def run_all(self) -> None:
        while self.pending:
            fn, args, callback = self.pending.pop(0)
            try:
                res = fn(self.conn, *args)
            except Exception as e:
                if not self.conn.closed:
                    self.conn.rollback()
                res = e
            callback(res)


@pytest.fixture
def claims(pg_url):
    eng = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    upgrade(eng)
    eng.dispose()
    u = make_url(pg_url)
    conn = psycopg.connect(host=u.host, port=u.port, user=u.username, dbname=u.database)
    yield _ClaimThread(conn)
    conn.close()


def test_takes_batch_and_a_read_comes_after_the_takes_asked_before_it(claims):
    c = SharedCounters(claims)
    got = []
    c.take("q", 1, 0, lambda v: got.append(("a", v)))     # sent at once
    c.take("q", 2, 0, lambda v: got.append(("b", v)))     # waits for the first
    c.take("q", 1, 0, lambda v: got.append(("c", v)))
    c.read("q", 0, lambda v: got.append(("read", v)))     # after b and c, not before
    assert len(claims.pending) == 1
    claims.run_all()
    assert got == [("a", 1), ("b", 3), ("c", 4), ("read", 4)]
    assert read_counter(claims.conn, "q", 0) == 4
    assert read_counter(claims.conn, "other", 7) == 7      # no row: the floor, nothing written
    assert read_counter(claims.conn, "other", 0) == 0


def test_a_failing_batch_answers_every_caller_even_when_one_callback_raises(claims):
    c = SharedCounters(claims)
    got = []
    c.take("q", 1, 0, lambda v: got.append(("a", v)))

    def bad(v):
        got.append(("b", v))
        raise RuntimeError("a caller's bug")
    c.take("q", 1, 0, bad)
    c.take("q", 1, 0, lambda v: got.append(("c", v)))
    c.read("q", 0, lambda v: got.append(("read", v)))
    fn, args, cb = claims.pending.pop(0)
    cb(fn(claims.conn, *args))          # the first batch commits
    claims.conn.close()                 # the database goes away before the second
    with pytest.raises(RuntimeError, match="a caller's bug"):
        claims.run_all()
    assert got[0] == ("a", 1)
    assert [k for k, _ in got[1:3]] == ["b", "c"]
    assert all(isinstance(v, psycopg.Error) for _, v in got[1:3])
    # the read was sent (after the failing batch) and failed too, never lost
    claims.run_all()
    assert got[3][0] == "read" and isinstance(got[3][1], psycopg.Error)
