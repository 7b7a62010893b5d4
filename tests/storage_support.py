"""Shared helpers of the storage tests (test_storage*.py): restart a node from a Store, read
rows back.
"""
from __future__ import annotations

import sqlalchemy as sa

from core import schema
from core.clock import ManualClock
from core.engine import Engine
from core.journal import Journal
from core.recovery import restore
from core.storage import Store


W0 = 1_700_000_000_000


class Node:
    """One engine generation: clock, journal, engine (as gateway.server wires them)."""

    def __init__(self, wall_start_ms: int = W0, history: bool = True) -> None:
        self.clock = ManualClock(wall_start_ms)
        self.journal = Journal(self.clock, history)
        self.engine = Engine(self.clock, self.journal)

    def flush(self, store: Store):
        """take() + write() + mark committed, as gateway.writer does; returns the Batch."""
        b = self.journal.take(self.engine.next_id)
        store.write(b)
        self.journal.committed = b.number
        return b

    def step(self, ms: int) -> None:
        self.clock.advance(ms)
        self.engine.tick()

    def put(self, queue="default", pri=0, delay=0, ttr=10_000, body=b"x", dialect="beanstalk",
            uid=None):
        return self.engine.put(queue, body, pri, delay, ttr, dialect, uid)


def restart(store: Store, wall_ms: int) -> tuple[Node, int]:
    """A fresh node whose wall clock reads `wall_ms`, restored from the database."""
    n = Node(wall_ms)
    count = restore(n.engine, store.load())
    return n, count


def job_rows(store: Store) -> dict[int, dict]:
    with store.engine.connect() as c:
        return {r["id"]: dict(r) for r in
                c.execute(sa.select(schema.jobs).order_by(schema.jobs.c.id)).mappings()}


def event_rows(store: Store) -> list[tuple]:
    ev = schema.job_events
    with store.engine.connect() as c:
        return [tuple(r) for r in c.execute(
            sa.select(ev.c.job_id, ev.c.queue, ev.c.dialect, ev.c.event, ev.c.at_ms,
                      ev.c.attempt).order_by(ev.c.id))]


def count(store: Store, table) -> int:
    with store.engine.connect() as c:
        return c.execute(sa.select(sa.func.count()).select_from(table)).scalar()


def stored_next_id(store: Store) -> int:
    with store.engine.connect() as c:
        return c.execute(sa.select(schema.meta.c.value)
                         .where(schema.meta.c.key == "next_id")).scalar()
