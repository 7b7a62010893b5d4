"""The engine port: the one module of core that protocols/ and gateway/ import (with the value
types of core/model.py). DESIGN.md, "Who may import whom"; docs/architecture.md draws it.

Everything a dialect or the gateway does to jobs goes through `Port`: typed operations whose
arguments and results are plain values (ints, str, bytes) and immutable snapshots (JobView,
QueueView, ServerStats, Reserved), never the engine's live records. Waiting calls take a
callback that the engine calls exactly once, later, with the answer; they are cancellable.
The port never blocks and does no I/O: it runs on the event loop's thread.

Units: durations in ms (`*_ms`); `priority` is the canonical rank (lower first; each dialect
maps its own values, docs/mapping.md); times in snapshots are wall ms (`due_ms`) or ms left
(`left_ms`). Jobs are named by their id (int); `find(uid)` maps a uid to it.

Errors: operations that can fail for a reason the client must hear return False / None / a
status (documented per method); IllegalTransition (core/transitions.py) means a bug.
"""
from __future__ import annotations

from .access import NOBODY, Access, AccessDenied, Principal
from .access_port import ScopedPort
from .access_port import scoped as _scoped
from .clock import ManualClock, SystemClock
from .cron import CronError, CronJob, CronView
from .events import DEFAULT_MAXLEN, Event, Subscription
from .failures import JobPolicy
from .journal import Journal, Persistence
from .leases import LEASE_OK, NOT_ACTIVE, TOKEN_MISMATCH, TOKEN_MISSING
from .model import (BURIED, COMPLETED, DEADLINE_SOON, DELAYED, READY, RESERVED, TIMED_OUT,
                    TOKEN_CHECKED, TOKEN_IGNORED, TOKEN_REQUIRED, WAITING, Failure, JobView,
                    QueueView, Reserved, ServerStats, parse_derived_uid)
from .records import Job, Owner as _Owner
from .store_port import StoreLocked, StorePort
from .port_dialect import DialectOps, load_dialect_state as _load_dialect_state
from .port_feed import FeedOps
from .port_flows import FlowOps
from .port_global import GlobalOps
from .port_pages import PageOps
from .port_jobs import JobOps
from .port_settings import SettingsOps
from .port_shared import (PROBE_MS, SharedOps, fire_due, give_tokens, keep_slots, open_shared_store,
                          take_slots, take_tokens)
from .port_webhooks import WebhookOps
from .transitions import IllegalTransition
from .views import adapter, queue_view, reserved, server_stats
from .webhooks import (EVENT_KINDS, WEBHOOK_EVENTS, AllowList, Registry as _WebhookRegistry,
                       WebhookView, address_refused, parse_host, split_url)

__all__ = [
    "Port", "Owner", "Persistence", "open_store", "open_shared_store", "fire_due", "take_slots", "keep_slots",
    "take_tokens", "give_tokens", "Store", "StorePort", "StoreLocked",
    "SystemClock", "ManualClock", "Event", "Subscription", "JobPolicy", "Failure", "JobView",
    "QueueView", "Reserved", "ServerStats", "IllegalTransition", "TIMED_OUT", "DEADLINE_SOON",
    "WAITING", "TOKEN_CHECKED", "TOKEN_REQUIRED", "TOKEN_IGNORED", "LEASE_OK", "NOT_ACTIVE",
    "TOKEN_MISSING", "TOKEN_MISMATCH", "DEFAULT_MAXLEN", "Access", "AccessDenied",
    "Principal", "NOBODY", "ScopedPort", "WebhookView", "WEBHOOK_EVENTS", "EVENT_KINDS",
    "AllowList", "address_refused", "parse_host", "split_url",
    "CronError", "CronJob", "CronView",
]


class Owner:
    """Who holds reservations, as the port hands it out (opaque): a beanstalk connection, a
    workq connection, a bunqueue connection or one of its waiting pulls. `name` is the worker
    as the history records it (`beanstalk#3`, a bunqueue `owner`)."""

    __slots__ = ("_o", "_cb", "_adapter")

    def __init__(self, o: _Owner) -> None:
        self._o = o
        self._cb = None        # the last reserve callback and its adapter (Port.reserve)
        self._adapter = None

    @property
    def name(self) -> str:
        return self._o.name


def open_store(url: str, sqlite_synchronous: str = "NORMAL"):
    """The SQL store (StorePort) for SQLAlchemy `url`. The caller runs the migrations on
    `store.engine` and takes `store.lock()` before use. Raises sqlalchemy errors and
    ValueError for a bad `sqlite_synchronous`."""
    from .storage import Store   # SQLAlchemy loads only when a database is used
    return Store(url, sqlite_synchronous)


class Port(JobOps, FlowOps, WebhookOps, SettingsOps, DialectOps, FeedOps, SharedOps,
           GlobalOps, PageOps):
    """The engine port (see the module docstring). Build one with `Port.create()`, or wrap an
    engine with `Port.of(engine)` (one port per engine).

    `clock`: the engine's injectable clock (`monotonic_ms()`, `wall_ms()`); every timer of
    every dialect reads it. `persistence`: the journal for the writer, or None (memory mode).
    """

    def __init__(self, engine) -> None:
        self._engine = engine   # core.engine.Engine: never reached from outside core
        self.clock = engine.clock
        j = engine.journal
        self._journal = j
        self.persistence = None if j is None else Persistence(j, engine)
        self._storage_since = 0
        self._outages = 0
        self._webhooks = _WebhookRegistry(engine.clock, j)   # core/port_webhooks.py
        engine._port = self

    @classmethod
    def create(cls, clock=None, durable: bool = True, history: bool = True,
               pinned: tuple = ("default",)) -> "Port":
        """A new engine behind a port. `durable`: keep a journal for the storage writer (False:
        memory mode); `history`: journal job_events rows; `pinned`: queues never removed."""
        from .engine import Engine
        clock = clock or SystemClock()
        journal = Journal(clock, history=history) if durable else None
        return cls(Engine(clock, journal, pinned))

    @staticmethod
    def of(x) -> "Port":
        """`x` if it is a Port, else the port of engine `x` (created on first use)."""
        if isinstance(x, Port):
            return x
        p = getattr(x, "_port", None)
        return p if p is not None else Port(x)

    def scoped(self, principal: Principal | None):
        """This port as `principal` may use it (core/access_port.py): itself when `principal`
        is None (no access control) or allowed every queue, else a ScopedPort that raises
        AccessDenied for a disallowed queue name and hides the jobs of disallowed queues."""
        return _scoped(self, principal)

    # ------------------------------------------------------------- server
    def restore(self, store) -> int:
        """Load every stored job into the (empty) engine from `store` (StorePort): reserved
        jobs ready again, except stored leases (core/leases.py); and the stored queue
        settings (rate and concurrency limits, stall config: core/limits.py) and cron schedules
        (core/cron.py: runs missed while down follow their skip-missed rule), and the dialect
        records (core/port_dialect.py). Returns how many jobs."""
        from .recovery import restore
        self._engine.load_settings(store.load_records("queue_settings"))
        _load_dialect_state(self._engine, store.load_records("dialect_state"))
        if self._engine.shared is not None:
            return 0   # shared mode: the jobs stay in the database (core/shared.py)
        n = restore(self._engine, store.stream())
        self._engine.cron.restore(store.load_records("cron_schedules"))
        return n

    def tick(self) -> None:
        """Run every timer due now (the gateway calls it at next_due())."""
        self._engine.tick()

    def next_due(self):
        """Monotonic ms of the earliest timer, or None."""
        return self._engine.next_due()

    def set_wakeup(self, fn) -> None:
        """`fn()` is called when a timer earlier than the last next_due() is armed."""
        self._engine.wakeup = fn

    def set_policy(self, dialect: str, policy: JobPolicy) -> None:
        """How the engine treats jobs `dialect` creates (core/failures.py)."""
        self._engine.policies[dialect] = policy

    @property
    def draining(self) -> bool:
        """True while puts are refused (SIGUSR1)."""
        return self._engine.draining

    def set_draining(self, on: bool) -> None:
        self._engine.draining = on

    #: None while storage takes commits; while it does not (gateway/writer.py retries), the
    #: cause as one line of text. Sessions read it before a command that needs a commit and
    #: answer their dialect's server error instead of running it (docs/operations.md,
    #: "Storage faults"). A plain attribute: read on every such command.
    storage_down: str | None = None

    def set_storage_state(self, cause: str | None) -> None:
        """The writer's view of storage: `cause` None = commits succeed again, else the
        failure (one line) that makes storage unavailable now."""
        if cause is None:
            if self.storage_down is not None:
                self._storage_since = self.clock.wall_ms()
            self.storage_down = None
            return
        if self.storage_down is None:
            self._storage_since = self.clock.wall_ms()
            self._outages += 1
        self.storage_down = cause

    def storage_state(self) -> dict:
        """{"available": bool, "since_ms": wall ms of the last change (0: never changed),
        "cause": str or None, "outages": how many times storage became unavailable}."""
        return {"available": self.storage_down is None,
                "since_ms": self._storage_since, "cause": self.storage_down,
                "outages": self._outages}

    def commit_mark(self) -> int:
        """See Persistence.commit_mark (0 in memory mode)."""
        j = self._journal
        return 0 if j is None else j.commit_mark()

    def committed(self) -> int:
        """The last committed batch (0 in memory mode)."""
        j = self._journal
        return 0 if j is None else j.committed

    def stats(self) -> ServerStats:
        """Server-wide counts."""
        return server_stats(self._engine)

    # ------------------------------------------------------------- queues
    def attach(self, queue: str, role: str) -> None:
        """Count a connection's reference to `queue`: role "using" or "watching"."""
        self._engine.attach(queue, role)

    def detach(self, queue: str, role: str) -> None:
        """Drop a reference taken with attach(); an empty unreferenced queue goes."""
        self._engine.detach(queue, role)

    def keep(self, queue: str, keep: bool = True) -> None:
        """Keep `queue` while empty (workq names, a bunqueue pause) or stop keeping it."""
        e = self._engine
        if keep:
            e.queue(queue).keep = True
        elif queue in e.queues:
            q = e.queues[queue]
            q.keep = False
            e._gc(q)

    def pause(self, queue: str, ms: int) -> bool:
        """Pause `queue` for `ms` ms (0: resume); False when it does not exist."""
        return self._engine.pause(queue, ms)

    def queue(self, name: str) -> QueueView | None:
        """A snapshot of queue `name`, or None."""
        q = self._engine.queues.get(name)
        return None if q is None else queue_view(self._engine, q)

    def queue_names(self) -> list:
        """Live queue names in beanstalkd's order (creation, swap-remove on removal)."""
        return list(self._engine.queue_order)

    def queue_views(self) -> list:
        """Snapshots of every live queue, in queue_names() order."""
        e = self._engine
        return [queue_view(e, e.queues[n]) for n in e.queue_order]

    # ------------------------------------------------------------- owners
    def new_owner(self, dialect: str, margin: bool = True, durable: bool = False,
                  ttr_ms: int = 0, name: str | None = None) -> Owner:
        """A holder of reservations. `margin`: a waiting reserve answers DEADLINE_SOON in the
        last second of one of its leases (beanstalk); `durable`: its leases are committed with
        attempts counted (workq); `ttr_ms` (non-zero): its leases last that long (bunqueue
        lockTtl); `name`: the worker in the history (default `<dialect>#<n>`)."""
        return Owner(_Owner(dialect, margin, durable, ttr_ms, name))

    def owner_idle(self, owner: Owner) -> bool:
        """True when `owner` holds nothing and waits for nothing."""
        o = owner._o
        return not o.reserved and o.waiter is None

    def release_owner(self, owner: Owner) -> None:
        """The owner is gone: withdraw its wait, return its jobs to ready (`abandon`)."""
        self._engine.release_owner(owner._o)

    def cancel_wait(self, owner: Owner) -> bool:
        """Withdraw `owner`'s waiting reserve without calling back; True if one was."""
        return self._engine.cancel_wait(owner._o)

    # ---------------------------------------------------------- producers
    def put(self, queue: str, payload: bytes, priority: int, delay_ms: int, ttr_ms: int,
            dialect: str, uid: str | None = None, ttl_ms: int = 0, expire_ms: int = 0,
            max_attempts: int = 0, max_fails: int = 0, sched_ms: int = 0, event: str = "put",
            ext: dict | None = None, fmt: int = 0) -> int:
        """Create a job; returns its id. Ready, or delayed `delay_ms` ms, or waiting for the
        dependencies in ext["deps"]. `uid`: the client's (the caller checks uid_taken);
        `ttl_ms`: reported TTL; `expire_ms`: evicted that many ms from now (0: never);
        `max_attempts` / `max_fails`: 0 = unlimited / the first failure is final; `sched_ms`:
        wall ms of a workq schedule time; `event`: put, add, schedule, run or push;
        `fmt`: payload encoding (0 raw, 1 MessagePack)."""
        return self._engine.put(queue, payload, priority, delay_ms, ttr_ms, dialect, uid, ttl_ms,
                               expire_ms, max_attempts, max_fails, sched_ms, event, ext, fmt).id

    def put_many(self, queue: str, items: list, ttr_ms: int, dialect: str, max_fails: int,
                 event: str) -> list:
        """Create ready jobs of rank 0 from (payload, fmt, uid, ext | None) items in one pass;
        returns their ids in order."""
        return [j.id for j in self._engine.put_plain(queue, items, ttr_ms, dialect, max_fails,
                                                    event)]

    def burn_id(self) -> None:
        """Use up one job id without a job (beanstalkd makes the job before it reads a body
        that then fails, or before refusing a put while draining)."""
        self._engine.next_id += 1

    def uid_taken(self, uid: str) -> bool:
        """True when a new job may not take `uid` (a live job has it, or it is derived)."""
        return self._engine.uid_taken(uid)

    def dedup(self, queue: str, key: str) -> str | None:
        """The uid of the unfinished job of `queue` holding dedup key `key`, or None."""
        job = self._engine.dedup_job(queue, key)
        return None if job is None else self._engine.uid_of(job)

    def dependency_met(self, uid: str) -> bool:
        """True when job `uid` has completed (or is gone after completing)."""
        return self._engine.dependency_met(uid)

    # ---------------------------------------------------------- consumers
    def _owned(self, owner: Owner, ttr_ms: int, worker):
        o = owner._o
        if ttr_ms:
            o.ttr_ms = ttr_ms
        if worker is not None:
            o.name = worker
        return o

    def reserve(self, owner: Owner, queues: list, timeout_ms, callback,
                mode: int = TOKEN_CHECKED, ttr_ms: int = 0, worker: str | None = None,
                batch: int = 1):
        """Reserve the most urgent ready job of `queues` for `owner`: a Reserved; or
        DEADLINE_SOON (beanstalk margin); TIMED_OUT when `timeout_ms` is 0; else WAITING, and
        `callback` later gets a Reserved, TIMED_OUT (after `timeout_ms` ms; None: never) or
        DEADLINE_SOON. Longest waiter first. `mode`: the lease's token mode; `ttr_ms` (non-zero):
        the lease's TTR for this owner from now on; `worker`: its name from now on; `batch`:
        how many jobs the caller will take when it wakes (reserve_many for the rest: in shared
        mode the claim brings that many)."""
        o = owner._o
        if ttr_ms:
            o.ttr_ms = ttr_ms
        if worker is not None:
            o.name = worker
        if owner._cb != callback:   # the same bound method each time: one adapter
            owner._cb = callback
            owner._adapter = adapter(self._engine, reserved, callback)
        e = self._engine
        r = e.reserve(o, queues, timeout_ms, owner._adapter, mode)
        if r.__class__ is Job:
            return reserved(e, r)
        if e.shared is not None:   # shared mode: the ready jobs are in the database
            if batch > 1:
                e.shared.want_more(queues, batch - 1)
            if r is TIMED_OUT:     # one claim round first (core/shared.py, probes)
                e.shared.probe(e.reserve(o, queues, PROBE_MS, owner._adapter, mode))
                return WAITING
            if r is not DEADLINE_SOON:
                e.shared.wait_started()
        return r if r is TIMED_OUT or r is DEADLINE_SOON else WAITING

    def reserve_many(self, owner: Owner, queue: str, n: int, mode: int = TOKEN_CHECKED,
                     ttr_ms: int = 0, worker: str | None = None) -> list:
        """Reserve up to `n` ready jobs of `queue` now (none while it is paused): Reserveds."""
        o = self._owned(owner, ttr_ms, worker)
        e = self._engine
        return [reserved(e, j) for j in e.reserve_many(o, queue, n, mode)]

    def reserve_job(self, owner: Owner, id: int) -> Reserved | None:
        """Reserve job `id` when it is ready, delayed or buried (beanstalk reserve-job)."""
        job = self._engine.reserve_job(owner._o, id)
        return None if job is None else reserved(self._engine, job)

    def release(self, owner: Owner, id: int, priority: int, delay_ms: int) -> bool:
        """Return a job `owner` holds to ready (delayed `delay_ms` ms when > 0), with a new
        rank; False when `owner` does not hold it (beanstalk NOT_FOUND)."""
        return self._engine.release(owner._o, id, priority, delay_ms)

    def bury(self, owner: Owner, id: int, priority: int) -> bool:
        """Bury a job `owner` holds, with a new rank; False when it does not hold it."""
        return self._engine.bury(owner._o, id, priority)

    def touch(self, owner: Owner, id: int) -> bool:
        """Restart the TTR of a job `owner` holds; False when it does not hold it."""
        return self._engine.touch(owner._o, id)

    def delete(self, owner: Owner, id: int) -> bool:
        """beanstalk delete: any visible job but one another owner holds or a completed one."""
        return self._engine.delete(owner._o, id)

    def kick(self, queue: str, bound: int, dialect: str) -> int:
        """Kick up to `bound` buried jobs of `queue` (else delayed ones); returns how many."""
        return self._engine.kick(queue, bound, dialect)

    def kick_job(self, id: int, dialect: str) -> bool:
        """Kick one buried or delayed job; False otherwise."""
        return self._engine.kick_job(id, dialect)


# Names the dialects use with the port (re-exported so that they import core.api only).
STATES = (DELAYED, READY, RESERVED, BURIED, COMPLETED)
__all__ += ["STATES", "DELAYED", "READY", "RESERVED", "BURIED", "COMPLETED",
            "parse_derived_uid"]


def __getattr__(name: str):
    """`core.api.Store` (core.storage.Store), imported on first use: SQLAlchemy is not loaded
    by a server that keeps no database."""
    if name == "Store":
        from .storage import Store
        return Store
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
