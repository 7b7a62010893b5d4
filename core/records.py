"""The engine's live records: Job, Queue, Owner and the waiters (engine-private).

Only core/ uses these. Dialects and the gateway see jobs and queues through the immutable
snapshots of core/model.py that the port (core/api.py) hands out, never these objects.

Times: `created_ms` is wall-clock ms since the epoch; `ready_at`, `deadline` and `expires_at` are
monotonic ms (core/clock.py); durations (`delay_ms`, `ttr_ms`, `ttl_ms`) are ms.
"""
from __future__ import annotations

from collections import deque

from .model import READY, TOKEN_CHECKED


#: A job's rarely set fields, with their defaults: they live in a side object (JobMore) that
#: exists only once one of them is set to something else (issue 14: memory per job). Most jobs
#: are put, reserved and deleted without ever touching them.
MORE_FIELDS = (
    ("timeouts", 0), ("releases", 0), ("buries", 0), ("kicks", 0), ("fails", 0),
    ("ttl_ms", 0), ("expires_at", 0), ("max_attempts", 0), ("max_fails", 0),
    ("result", None), ("result_ok", False), ("sched_ms", 0), ("fmt", 0), ("timeout_at", 0),
)


class JobMore:
    """The side object of a Job's rarely set fields (MORE_FIELDS); see Job."""

    __slots__ = tuple(name for name, _ in MORE_FIELDS)

    def __init__(self) -> None:   # the defaults of MORE_FIELDS (test_records checks it)
        self.timeouts = self.releases = self.buries = self.kicks = self.fails = 0
        self.ttl_ms = self.expires_at = self.max_attempts = self.max_fails = 0
        self.result = None
        self.result_ok = False
        self.sched_ms = self.fmt = 0
        self.timeout_at = 0


def _more(name: str, default):
    """A Job attribute kept in its JobMore: reads give `default` while there is none; writing
    the default creates none."""
    slot = getattr(JobMore, name)
    get_slot, set_slot = slot.__get__, slot.__set__

    def get(job):
        x = job.more
        return default if x is None else get_slot(x)

    def set(job, value):
        x = job.more
        if x is None:
            if value is default or value == default and value.__class__ is default.__class__:
                return
            x = job.more = JobMore()
        set_slot(x, value)
    return property(get, set, doc=f"{name} (default {default!r}; kept in Job.more)")


class Job:
    """One job, in whichever dialect it was created.

    Fields: id (int64, monotonic), uid (str | None, unique), queue (name), payload (bytes, never
    altered), priority (canonical rank), state (core.model states), created_ms (wall ms),
    delay_ms / ttr_ms (ms), ready_at (monotonic ms, while delayed), deadline (monotonic ms, while
    reserved), owner (the Owner holding the reservation), counters reserves / timeouts / releases /
    buries / kicks, dialect (str that created it), hver (heap-entry version, internal),
    in_db (0, or the number of the journal batch that inserted the row: internal).
    Lease (core/leases.py): token (while reserved: the lease number, an int, or a token string
    restored from storage; else None; core.leases.token_str gives the string), lease_mode
    (core.model TOKEN_*).
    Finishing fields: ttl_ms (the TTL the client gave, ms, 0 = none), expires_at (monotonic ms
    when the job is evicted, 0 = never), max_attempts / max_fails (0 = unlimited / none),
    fails (explicit failures), result (bytes or None), result_ok (success flag of the result),
    sched_ms (wall ms of a workq `schedule` time, 0 = not scheduled), timeout_at (monotonic ms at
    which the current reservation of a job with its own processing timeout ends whatever its
    lease: core/extras.py key ``timeout``; 0 = none).
    Dialect extras: fmt (payload encoding: 0 raw bytes, 1 a MessagePack value: bunqueue data
    that is not a string), ext (dict of extras such as name, backoff, tags, progress, logs,
    dependsOn; None for jobs that have none; stored as one MessagePack map). `ext` is replaced,
    never changed in place, so a snapshot may share it (core/extras.py).

    Layout: the fields every job uses are slots, `ext` too (a bunqueue or glide-mq job has
    extras from its put on: a slot saves it a JobMore, one object fewer for the cyclic GC to
    traverse per job, docs/performance.md); the rarely set ones (MORE_FIELDS: the counters
    other than `reserves`, the finishing fields and fmt) are properties over `more`, a JobMore
    made the first time one of them gets a value other than its default. A job that is put,
    reserved and deleted costs 20 slots instead of 34.
    """

    __slots__ = (
        "id", "uid", "queue", "payload", "priority", "state", "created_ms", "delay_ms", "ttr_ms",
        "ready_at", "deadline", "owner", "reserves", "dialect", "hver", "in_db", "token",
        "lease_mode", "ext", "more",
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
        self.dialect = dialect
        self.hver = 0
        self.in_db = 0
        self.token = None
        self.lease_mode = TOKEN_CHECKED
        self.ext = None
        self.more = None

    @property
    def finished(self) -> bool:
        """True once the job has a result (completed, or failed for good)."""
        x = self.more
        return x is not None and x.result is not None

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"<Job {self.id} {self.queue} {self.state} pri={self.priority}>"


for _name, _default in MORE_FIELDS:
    setattr(Job, _name, _more(_name, _default))
del _name, _default


def live_job(jobs: dict, e: tuple):
    """The Job of a lazy heap entry `e` = (key, key, hver, job id) while the entry is current
    (the job is in `jobs`, the engine's id -> Job, with the entry's hver), else None. The
    entries hold the id, not the Job: a tuple of ints is untracked by the cyclic GC after its
    first collection, one object fewer per waiting job for every later pass
    (docs/performance.md)."""
    j = jobs.get(e[3])
    return j if j is not None and j.hver == e[2] else None


class Queue:
    """A named queue (beanstalk tube = workq name = bunqueue queue).

    Indexes: `ready` heap of (priority, order key, hver, job id); `delayed` heap of (ready_at,
    id, hver, job id) (live_job: an entry is current while the job's hver is the entry's);
    `buried` dict id -> job in bury order (FIFO); `done` dict id -> completed job; `waiters` deque of Waiters in arrival order.
    Counters: live counts per state (`n_done`: completed jobs kept for their result), `urgent`
    ready jobs, `total_jobs` created, `deletes`, `pauses`; references: `using`, `watching`
    (connections that name it), `waiting` (live waiters); `keep`: never garbage-collected (a
    workq name lives on once used, as in workq).
    Pause: `paused_until` monotonic ms (0 = not paused) and `pause_ms` (the last pause duration).
    Limits: `limits` is the queue's core.limits.QueueSettings while a rate or concurrency limit
    is set (None otherwise: no cost); a limited queue is kept while empty.
    Listing (core/paging.py): `ids` the ascending ids of the jobs put in it, appended on put,
    deleted ones dropped lazily (`ids_dead` counts deletes since the last compaction).
    """

    __slots__ = (
        "name", "ready", "delayed", "buried", "waiters", "n_ready", "n_delayed", "n_reserved",
        "urgent", "total_jobs", "deletes", "pauses", "using", "watching", "waiting",
        "paused_until", "pause_ms", "n_done", "keep", "limits", "ids", "ids_dead", "done",
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
        self.n_done = 0
        self.done: dict[int, Job] = {}   # id -> completed job (core/paging.py)
        self.keep = False
        self.limits = None
        self.ids: list = []     # ids of its jobs in ascending order, deleted ones too until
        self.ids_dead = 0       # compacted (core/paging.py); `ids_dead`: deletes since then

    def is_empty(self) -> bool:
        """True when the queue holds no job in any state."""
        return not (self.n_ready or self.n_delayed or self.n_reserved or self.buried
                    or self.n_done)

    def is_referenced(self) -> bool:
        """True when some connection uses, watches or waits on the queue (or it is kept, or
        limited)."""
        return bool(self.using or self.watching or self.waiting or self.keep
                    or self.limits is not None)


class Owner:
    """Who holds reservations: one per connection (beanstalk) or lock holder (bunqueue).

    `reserved` maps job id -> Job for the jobs this owner holds; `waiter` is its pending reserve.
    `dialect` names the protocol, for the history table. `margin`: a waiting reserve gets
    DEADLINE_SOON near one of the owner's TTR deadlines (beanstalk; workq has no such reply).
    `durable`: a reservation is committed before it is answered (workq counts attempts at lease
    and they must survive a restart; beanstalk reservations are not stored).
    `ttr_ms`: when not 0, the length of this owner's leases (bunqueue lockTtl) instead of the
    job's own TTR, which the job keeps (issue 16).
    `name`: the worker in the history (`<dialect>#<n>` per connection, or a bunqueue owner).
    """

    __slots__ = ("reserved", "waiter", "dialect", "margin", "durable", "ttr_ms", "name")
    _count = 0

    def __init__(self, dialect: str, margin: bool = True, durable: bool = False,
                 ttr_ms: int = 0, name: str | None = None) -> None:
        if name is None:
            Owner._count += 1
            name = f"{dialect}#{Owner._count}"
        self.name = name
        self.reserved: dict[int, Job] = {}
        self.waiter: Waiter | None = None
        self.dialect = dialect
        self.margin = margin
        self.durable = durable
        self.ttr_ms = ttr_ms


class Waiter:
    """A reserve that is waiting for a job.

    `queues`: the Queue objects watched; `timeout_at`: monotonic ms or None (wait forever);
    `callback(result)` is called exactly once with a reserved Job, TIMED_OUT or DEADLINE_SOON.
    `mode`: the lease token mode of the reservation it will make (core.model TOKEN_*).
    """

    __slots__ = ("owner", "queues", "timeout_at", "callback", "done", "seq", "mode")

    def __init__(self, owner: Owner, queues: list, timeout_at, callback, seq: int,
                 mode: int = TOKEN_CHECKED) -> None:
        self.owner = owner
        self.queues = queues
        self.timeout_at = timeout_at
        self.callback = callback
        self.done = False
        self.seq = seq
        self.mode = mode


class ResultWaiter:
    """A client waiting for a job's result (workq `result`, `run`; bunqueue WaitJob).

    `job_id`: the job; `callback(outcome)` is called exactly once with the finished Job or
    TIMED_OUT; `run`: this is the submitter of a workq `run`, whose job is deleted after it is
    answered; `phase`: 0 = waiting for a worker, 1 = waiting until the lease's TTR deadline;
    `at`: its timer's deadline (monotonic ms); `moved`: in shared mode, the wait that took
    it over when its job left this node (core/shared_results.py), else None.
    """

    __slots__ = ("job_id", "callback", "done", "seq", "run", "phase", "at", "moved")

    def __init__(self, job_id: int, callback, seq: int, run: bool = False) -> None:
        self.job_id = job_id
        self.callback = callback
        self.done = False
        self.seq = seq
        self.run = run
        self.phase = 0
        self.at = 0
        self.moved = None
