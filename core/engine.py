"""The canonical job engine: single-threaded, in memory, journaled (DESIGN.md, "The canonical model").

Every operation runs to completion on the event loop thread; nothing here blocks or does I/O.
Every change of a job's state is a row of core/transitions.py: the engine checks the row before
it touches an index (an illegal change raises IllegalTransition) and emits the row's events to
the feed (core/events.py), whose first sink is the journal (core/journal.py).

Waiting reserves are `Waiter` objects whose callback the engine calls exactly once. Timed work
(delays, TTR expiry, reserve timeouts, the DEADLINE_SOON margin, pauses) happens in `tick()`,
which the gateway calls at `next_due()`; `wakeup` (if set) is called when an earlier timer is armed.

Units: every duration argument is in milliseconds; times are monotonic ms from `clock`.
Ownership: a reserved job belongs to one `Owner`; other owners get `False`/`None` from
release/bury/touch/delete of it (beanstalkd: NOT_FOUND). Dialects do not call this class: they
use the port (core/api.py).
"""
from __future__ import annotations

from heapq import heappop, heappush

from .clock import SystemClock
from .cron import CronTable
from .events import Feed
from .extras import BLOCKED_MS, Extras
from .failures import DEFAULT_POLICY
from .flows import Flows
from .limits import Limits
from .moves import Moves
from .model import (BURIED, COMPLETED, DEADLINE_SOON, DELAYED, READY, RESERVED,
                    TIMED_OUT, TOKEN_CHECKED, TOKEN_REQUIRED, URGENT_RANK)
from .outcomes import Outcomes
from .queues import Queues, _top
from .records import Job, Owner, Queue
from .scheduling import SAFETY_MARGIN_MS, Scheduling, _INF, compact_heap
from .transitions import NEW, TABLE, check

#: Rows of the hottest transitions, looked up by the state before (others: check()).
_RESERVE_ROWS = {p: TABLE[(p, "reserve", RESERVED)] for p in (READY, DELAYED, BURIED)}


class Engine(Queues, Scheduling, Outcomes, Extras, Flows, Limits, Moves):
    """The job state machine and its in-memory indexes.

    `journal` (core.journal.Journal or None for memory mode) receives every mutation through
    the feed. `pinned` queues are never garbage-collected (beanstalk keeps "default").
    Queues, references, peeks and pauses are in core.queues.Queues; finishing jobs (complete /
    fail with a result), result waiters, TTL eviction and uid lookups in core.outcomes.Outcomes;
    dedup keys, dependencies, LIFO and owner-agnostic moves in core.extras.Extras; flows
    (waiting for children, a child's failure) in core.flows.Flows; waiters and timers in
    core.scheduling.Scheduling; rate and concurrency limits and stall settings per queue in
    core.limits.Limits; release, bury, touch, delete, kick and an owner's abandon in
    core.moves.Moves. Here: the state entries and exits, put, reserve.
    `policies`: dialect -> core.failures.JobPolicy for the jobs it creates.
    """

    def __init__(self, clock=None, journal=None, pinned: tuple[str, ...] = ("default",)) -> None:
        self.clock = clock or SystemClock()
        self.journal = journal
        self.feed = Feed(self.clock)
        if journal is not None:
            self.feed.add_sink(journal.on_events)
        self.leases = 0              # lease numbers handed out (core/leases.py)
        self.policies: dict = {}
        self.jobs: dict[int, Job] = {}
        self.queues: dict[str, Queue] = {}
        self.queue_order: list[str] = []   # beanstalkd's tube set order (swap-remove on delete)
        self.pinned = frozenset(pinned)
        self.next_id = 1
        self._ints: dict = {}         # canonical int objects of common priorities and TTRs
        self._last_wall = 0           # the last creation ms, shared by the jobs made in it
        self.total_jobs = 0
        self.job_timeouts = 0
        self.stall_failures = 0
        self.waiting = 0
        self.n_reserved = 0
        self.draining = False
        self.wakeup = None
        self._wake_at = _INF
        self._delayed: list = []    # (ready_at, id, hver, id), all queues (core.records.Queue)
        self._reserved: list = []   # (deadline, id, hver, id)
        self._timers: list = []     # (at, seq, kind, waiter); kind 0 = timeout, 1 = deadline soon
        self._pauses: list = []     # (paused_until, seq, queue name)
        self._expiry: list = []     # (expires_at, id): TTL eviction and result retention
        self._limit_timers: list = []   # (at, seq, QueueSettings): core.limits
        self.queue_settings: dict = {}  # queue name -> core.limits.QueueSettings
        self._seq = 0
        self.by_uid: dict[str, Job] = {}
        self.result_waiters: dict[int, list] = self.feed.watchers   # job id -> ResultWaiters
        self.evicted_jobs = 0
        self.unique: dict = {}       # (queue, dedup key) -> unfinished Job (core.extras)
        self.dependents: dict = {}   # uid -> ids of jobs waiting for it to complete
        self.cron = CronTable(self)  # cron schedules (core/cron.py), fired from tick()
        self.dialect_state: dict = {}   # dialect records (core/port_dialect.py)
        self.shared = None   # core.shared.SharedNode in shared mode (several nodes, one database)
        self.slots_held = None   # shared mode: queue -> concurrency slots held (shared_slots)
        for name in pinned:
            self.queue(name)

    def policy(self, job: Job):
        """The JobPolicy of the dialect that created `job`."""
        return self.policies.get(job.dialect, DEFAULT_POLICY)

    # -------------------------------------------------------------- events
    def _emit(self, job: Job, row, prev: str, dialect: str, worker: str | None = None,
              error: bytes | None = None, durable: bool = True, at: int = 0) -> None:
        """Emit the events of transition `row` (core.transitions.Row) of `job`."""
        self.feed.emit(job, row.events, prev, dialect, durable, worker, error, at)

    def _serve(self, q: Queue) -> None:
        """Hand ready jobs of `q` to its waiters, if any (after a job became ready)."""
        if q.waiting:
            self._dispatch(q)

    # -------------------------------------------------------- state entries
    def _to_ready(self, job: Job, q: Queue) -> None:
        """Index `job` as ready (the caller emits, then calls _serve)."""
        job.state = READY
        job.hver += 1
        heappush(q.ready, (job.priority, job.id if job.ext is None else self.lifo_key(job),
                           job.hver, job.id))
        q.n_ready += 1
        if job.priority < URGENT_RANK:
            q.urgent += 1
        if len(q.ready) > 2 * q.n_ready + 1024:
            compact_heap(q.ready, q.n_ready, self.jobs)

    def _to_delayed(self, job: Job, q: Queue, ready_at: int) -> None:
        job.state = DELAYED
        job.hver += 1
        job.ready_at = ready_at
        e = (ready_at, job.id, job.hver, job.id)
        heappush(q.delayed, e)
        heappush(self._delayed, e)
        q.n_delayed += 1
        compact_heap(q.delayed, q.n_delayed, self.jobs)
        compact_heap(self._delayed, len(self.jobs), self.jobs)
        self._arm(ready_at)

    def _to_state(self, job: Job, q: Queue, delay_ms: int) -> None:
        """Index `job` as delayed for `delay_ms` ms when > 0, else as ready."""
        if delay_ms > 0:
            self._to_delayed(job, q, self.clock.monotonic_ms() + delay_ms)
        else:
            self._to_ready(job, q)

    def _to_buried(self, job: Job, q: Queue) -> None:
        job.state = BURIED
        job.hver += 1
        q.buried[job.id] = job

    def _to_reserved(self, job: Job, q: Queue, owner: Owner, now: int,
                     mode: int = TOKEN_CHECKED) -> None:
        """Reserve `job` (out of its index already, state not yet changed) for `owner` with a
        new lease token; emits `reserve`."""
        prev = job.state
        row = _RESERVE_ROWS.get(prev) or check(prev, "reserve", RESERVED)
        job.state = RESERVED
        job.hver += 1
        job.owner = owner
        job.reserves += 1
        self.leases += 1
        job.token = self.leases
        job.lease_mode = mode
        job.deadline = now + (owner.ttr_ms or job.ttr_ms)   # the job keeps its own ttr_ms
        ext = job.ext
        if ext is not None and ext.get("timeout"):   # its own processing limit (core.extras)
            self._start_timeout(job, now, ext["timeout"])
        heappush(self._reserved, (job.deadline, job.id, job.hver, job.id))
        q.n_reserved += 1
        self.n_reserved += 1
        if q.limits is not None:
            self._took(q, now)
        owner.reserved[job.id] = job
        compact_heap(self._reserved, self.n_reserved, self.jobs)
        self._arm(job.deadline)
        feed = self.feed
        if feed.active:
            feed.emit(job, row.events, prev, owner.dialect,
                      owner.durable or mode == TOKEN_REQUIRED, owner.name)

    def _leave(self, job: Job, q: Queue) -> None:
        """Take `job` out of its current state's index (its heap entries go stale)."""
        s = job.state
        if s is READY:
            q.n_ready -= 1
            if job.priority < URGENT_RANK:
                q.urgent -= 1
        elif s is DELAYED:
            q.n_delayed -= 1
        elif s is RESERVED:
            q.n_reserved -= 1
            self.n_reserved -= 1
            del job.owner.reserved[job.id]
            job.owner = None
            job.token = None
            if q.limits is not None and q.waiting:
                self._slot_freed(q)
            if job.more is not None:
                job.more.timeout_at = 0
        elif s is BURIED:
            del q.buried[job.id]
        elif s is COMPLETED:
            q.n_done -= 1
            del q.done[job.id]
        job.hver += 1

    def _pop_ready(self, q: Queue) -> Job | None:
        h = q.ready
        jobs = self.jobs
        while h:
            e = heappop(h)
            job = jobs.get(e[3])
            if job is not None and job.hver == e[2]:
                q.n_ready -= 1
                if job.priority < URGENT_RANK:
                    q.urgent -= 1
                job.hver += 1
                return job
        return None

    # ------------------------------------------------------------ producers
    def new_job(self, id: int, queue: str, payload: bytes, priority: int, ttr_ms: int,
                delay_ms: int, created_ms: int, dialect: str, uid: str | None) -> Job:
        """A Job record (not indexed anywhere yet) whose priority, TTR and creation ms are
        shared int objects: one per distinct priority and TTR (up to 4096 values), one per
        creation ms in a row. Used by put() and by recovery, so that jobs cost the same memory
        before and after a restart (issue 14)."""
        ints = self._ints
        if len(ints) < 4096:
            priority = ints.setdefault(priority, priority)
            ttr_ms = ints.setdefault(ttr_ms, ttr_ms)
        if created_ms == self._last_wall:
            created_ms = self._last_wall
        else:
            self._last_wall = created_ms
        return Job(id, queue, payload, priority, ttr_ms, delay_ms, created_ms, dialect, uid)

    def put(self, queue: str, payload: bytes, priority: int, delay_ms: int, ttr_ms: int,
            dialect: str, uid: str | None = None, ttl_ms: int = 0, expire_ms: int = 0,
            max_attempts: int = 0, max_fails: int = 0, sched_ms: int = 0,
            event: str = "put", ext: dict | None = None, fmt: int = 0) -> Job:
        """Create a job in `queue`: ready, or delayed for `delay_ms` ms; TTR `ttr_ms` ms.

        `uid`: the client's unique id (canonical form; the caller checks it is free, see
        Outcomes.find_uid). `ttl_ms`: the TTL to report (ms); `expire_ms`: evict the job this
        many ms from now (0 = never). `max_attempts`, `max_fails`: 0 = unlimited / fail at once.
        `sched_ms`: wall ms of a workq schedule time (reported by inspect). `event`: the
        history event (put, add, schedule, run, push). `ext`: dialect extras (core.extras:
        a job with unmet ``deps`` waits for them); `fmt`: payload encoding (core.model.Job).
        """
        blocked = ext is not None and bool(ext.get("deps"))
        row = check(NEW, event, DELAYED if blocked or delay_ms > 0 else READY)
        job = self.new_job(self.next_id, queue, payload, priority, ttr_ms, delay_ms,
                           self.clock.wall_ms(), dialect, uid)
        self.next_id += 1
        self.jobs[job.id] = job
        if uid is not None:
            self.by_uid[uid] = job
        if fmt:
            job.fmt = fmt
        if ext is not None:
            job.ext = ext
            if blocked or "uniqueKey" in ext:   # else index_extras has nothing to index
                self.index_extras(job)
        if ttl_ms or expire_ms or max_attempts or max_fails or sched_ms:
            job.ttl_ms = ttl_ms
            job.max_attempts = max_attempts
            job.max_fails = max_fails
            job.sched_ms = sched_ms
            if expire_ms:
                self._expire_at(job, self.clock.monotonic_ms() + expire_ms)
        q = self.queues.get(queue) or self.queue(queue)
        q.ids.append(job.id)   # the listing index (core/paging.py)
        q.total_jobs += 1
        self.total_jobs += 1
        j = self.journal
        if j is not None and queue not in j.known_queues:
            j.queue_seen(queue)
        if blocked:
            self._to_delayed(job, q, self.clock.monotonic_ms() + BLOCKED_MS)
        elif delay_ms > 0:
            self._to_delayed(job, q, self.clock.monotonic_ms() + delay_ms)
        else:   # _to_ready, for a job that was nowhere yet (READY since Job())
            job.hver = 1
            heappush(q.ready, (job.priority, -job.id if ext is not None and ext.get("lifo")
                               else job.id, 1, job.id))
            q.n_ready += 1
            if job.priority < URGENT_RANK:
                q.urgent += 1
            if len(q.ready) > 2 * q.n_ready + 1024:
                compact_heap(q.ready, q.n_ready, self.jobs)
        feed = self.feed
        if feed.active:
            feed.emit(job, row.events, NEW, dialect, True, None, None, job.created_ms)
        if job.state is READY and q.waiting:
            self._dispatch(q)   # _serve
        return job

    # ------------------------------------------------------------ consumers
    def _best_ready(self, queues: list, now: int):
        best = None
        bq = None
        for q in queues:
            # a limited queue: only within its limits, and never ahead of its waiters
            if q.n_ready and q.paused_until <= now and (
                    q.limits is None or not q.waiting and self._admits(q, now)):
                j = _top(q.ready, self.jobs)
                if j is not None and (best is None or (j.priority, j.id) < (best.priority, best.id)):
                    best, bq = j, q
        return bq

    def _soonest_deadline(self, owner: Owner):
        return min((j.deadline for j in owner.reserved.values()), default=None)

    def reserve(self, owner: Owner, queues: list[str], timeout_ms: int | None, callback,
                mode: int = TOKEN_CHECKED):
        """Reserve the most urgent ready job of `queues` (priority, then id) for `owner`.

        Returns the reserved Job; DEADLINE_SOON when nothing is ready and one of the owner's
        reservations is within SAFETY_MARGIN_MS of its deadline; TIMED_OUT when nothing is ready
        and `timeout_ms` is 0; else a Waiter, whose `callback(result)` later gets the Job,
        TIMED_OUT (after `timeout_ms` ms; None waits forever) or DEADLINE_SOON.
        Waiters are served longest-waiter first. `mode`: the lease's token mode (core.leases).
        """
        now = self.clock.monotonic_ms()
        qs = [self.queue(n) for n in queues]
        bq = self._best_ready(qs, now)
        if bq is not None:
            job = self._pop_ready(bq)
            self._to_reserved(job, bq, owner, now, mode)
            return job
        soonest = self._soonest_deadline(owner) if owner.reserved and owner.margin else None
        if soonest is not None and now >= soonest - SAFETY_MARGIN_MS:
            for q in qs:   # answered at once: queues created just for this reserve go again
                self._gc(q)
            return DEADLINE_SOON
        if timeout_ms == 0:
            for q in qs:
                self._gc(q)
            return TIMED_OUT
        return self._wait(owner, qs, now, timeout_ms, soonest, callback, mode)

    def reserve_job(self, owner: Owner, id: int) -> Job | None:
        """Reserve job `id` if it is ready, delayed or buried (beanstalkd 1.12 reserve-job).
        A failed (dead-lettered) job taken this way is revived, as `kick` revives it: its
        result is void (a reserved job has none)."""
        job = self.jobs.get(id)
        if job is None or job.state is RESERVED or job.state is COMPLETED \
                or self.is_parked(job):   # a flow parent waits for its children
            return None
        q = self.queues[job.queue]
        self._leave(job, q)
        if job.result is not None:
            self._revive(job)
        self._to_reserved(job, q, owner, self.clock.monotonic_ms())
        return job
