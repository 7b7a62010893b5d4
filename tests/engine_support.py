"""Shared helpers of the engine tests (test_engine_*.py): ManualClock/Journal/Engine fixtures,
put/step/drain shorthands and a callback recorder.
"""
from __future__ import annotations

from core.engine import Engine
from core.model import TIMED_OUT
from core.records import Job, Owner


T0 = 1_000_000  # ManualClock's monotonic start
BEAN_BASE = -(2**31)  # canonical rank of beanstalk priority 0


# --------------------------------------------------------------------------- helpers
class Calls:
    """A reserve callback that records every result it gets."""

    def __init__(self) -> None:
        self.results: list = []

    def __call__(self, r) -> None:
        self.results.append(r)


def put(e: Engine, queue: str = "default", pri: int = 0, delay: int = 0, ttr: int = 10_000,
        body: bytes = b"x", dialect: str = "beanstalk") -> Job:
    return e.put(queue, body, pri, delay, ttr, dialect)


def step(e: Engine, ms: int) -> None:
    """Advance the engine's ManualClock by `ms` and run due timers."""
    e.clock.advance(ms)
    e.tick()


def counts(q) -> dict:
    return {"urgent": q.urgent, "ready": q.n_ready, "reserved": q.n_reserved,
            "delayed": q.n_delayed, "buried": len(q.buried), "total_jobs": q.total_jobs,
            "deletes": q.deletes, "pauses": q.pauses, "waiting": q.waiting}


def drain(e: Engine, owner: Owner, queues=("default",)) -> list[int]:
    """Reserve (timeout 0) until nothing is ready; return the ids in reservation order."""
    got = []
    while True:
        r = e.reserve(owner, list(queues), 0, None)
        if not isinstance(r, Job):
            assert r is TIMED_OUT
            return got
        got.append(r.id)
