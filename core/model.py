"""The canonical job record and queue, shared by every dialect (DESIGN.md, "The canonical model").

Priorities are canonical ranks: a signed int64, lower is served first, ties FIFO by id.
Times: `created_ms` is wall-clock ms since the epoch; `ready_at` and `deadline` are monotonic ms
(see core.clock); durations (`delay_ms`, `ttr_ms`) are ms.
"""
from __future__ import annotations

from collections import deque

# Job states. Plain strings so they read well in storage and logs.
DELAYED = "delayed"
READY = "ready"
RESERVED = "reserved"
BURIED = "buried"
DELETED = "deleted"  # in memory only, between removal and the next journal flush
LIVE_STATES = (DELAYED, READY, RESERVED, BURIED)

#: Ready jobs whose rank is below this count as "urgent" (beanstalk: pri < 1024).
URGENT_RANK = -(2**31) + 1024


class Job:
    """One job, in whichever dialect it was created.

    Fields: id (int64, monotonic), uid (str | None, unique), queue (name), payload (bytes, never
    altered), priority (canonical rank), state (one of LIVE_STATES or DELETED), created_ms (wall ms),
    delay_ms / ttr_ms (ms), ready_at (monotonic ms, while delayed), deadline (monotonic ms, while
    reserved), owner (the Owner holding the reservation), counters reserves / timeouts / releases /
    buries / kicks, dialect (str that created it), hver (heap-entry version, internal),
    in_db (0, or the number of the journal batch that inserted the row: internal).
    """

    __slots__ = (
        "id", "uid", "queue", "payload", "priority", "state", "created_ms", "delay_ms", "ttr_ms",
        "ready_at", "deadline", "owner", "reserves", "timeouts", "releases", "buries", "kicks",
        "dialect", "hver", "in_db",
    )

    def __init__(self, id: int, queue: str, payload: bytes, priority: int, ttr_ms: int,
                 delay_ms: int, created_ms: int, dialect: str, uid: str | None = None) -> None:
        self.id = id
        self.uid = uid
        self.queue = queue
        self.payload = payload
        self.priority = priority
        self.state = READY
        self.created_ms = created_ms
        self.delay_ms = delay_ms
        self.ttr_ms = ttr_ms
        self.ready_at = 0
        self.deadline = 0
        self.owner = None
        self.reserves = 0
        self.timeouts = 0
        self.releases = 0
        self.buries = 0
        self.kicks = 0
        self.dialect = dialect
        self.hver = 0
        self.in_db = 0

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"<Job {self.id} {self.queue} {self.state} pri={self.priority}>"


class Queue:
    """A named queue (beanstalk tube = workq name = bunqueue queue).

    Indexes: `ready` heap of (priority, id, hver, job); `delayed` heap of (ready_at, id, hver, job);
    `buried` dict id -> job in bury order (FIFO); `waiters` deque of Waiters in arrival order.
    Counters: live counts per state, `urgent` ready jobs, `total_jobs` created, `deletes`, `pauses`;
    references: `using`, `watching` (connections that name it), `waiting` (live waiters).
    Pause: `paused_until` monotonic ms (0 = not paused) and `pause_ms` (the last pause duration).
    """

    __slots__ = (
        "name", "ready", "delayed", "buried", "waiters", "n_ready", "n_delayed", "n_reserved",
        "urgent", "total_jobs", "deletes", "pauses", "using", "watching", "waiting",
        "paused_until", "pause_ms",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self.ready: list = []
        self.delayed: list = []
        self.buried: dict[int, Job] = {}
        self.waiters: deque = deque()
        self.n_ready = 0
        self.n_delayed = 0
        self.n_reserved = 0
        self.urgent = 0
        self.total_jobs = 0
        self.deletes = 0
        self.pauses = 0
        self.using = 0
        self.watching = 0
        self.waiting = 0
        self.paused_until = 0
        self.pause_ms = 0

    def is_empty(self) -> bool:
        """True when the queue holds no job in any state."""
        return not (self.n_ready or self.n_delayed or self.n_reserved or self.buried)

    def is_referenced(self) -> bool:
        """True when some connection uses, watches or waits on the queue."""
        return bool(self.using or self.watching or self.waiting)


class Owner:
    """Who holds reservations: one per connection (beanstalk) or lock holder (bunqueue).

    `reserved` maps job id -> Job for the jobs this owner holds; `waiter` is its pending reserve.
    `dialect` names the protocol, for the history table.
    """

    __slots__ = ("reserved", "waiter", "dialect")

    def __init__(self, dialect: str) -> None:
        self.reserved: dict[int, Job] = {}
        self.waiter: Waiter | None = None
        self.dialect = dialect


class Waiter:
    """A reserve that is waiting for a job.

    `queues`: the Queue objects watched; `timeout_at`: monotonic ms or None (wait forever);
    `callback(result)` is called exactly once with a reserved Job, TIMED_OUT or DEADLINE_SOON.
    """

    __slots__ = ("owner", "queues", "timeout_at", "callback", "done", "seq")

    def __init__(self, owner: Owner, queues: list, timeout_at, callback, seq: int) -> None:
        self.owner = owner
        self.queues = queues
        self.timeout_at = timeout_at
        self.callback = callback
        self.done = False
        self.seq = seq


class _Outcome:
    """A named non-job result of reserve (TIMED_OUT, DEADLINE_SOON)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


TIMED_OUT = _Outcome("TIMED_OUT")
DEADLINE_SOON = _Outcome("DEADLINE_SOON")
