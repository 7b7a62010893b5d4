"""The event feed: one typed event per state change of a job (DESIGN.md, "The canonical model").

The engine calls `Feed.emit()` once per transition (core/transitions.py), with the row's events
in order. Consumers:

- sinks, called synchronously in registration order, inside the engine: the journal (the
  `job_events` history and the rows to store, core/journal.py). A sink must not block.
- watchers of one job's result (`watchers`: job id -> list of core.records.ResultWaiter): workq
  `result` / `run` and bunqueue WaitJob. They are called once the job has finished and every
  event of that transition was delivered (core/outcomes.py).
- subscriptions: each has its own bounded buffer (`maxlen` events). When the buffer is full the
  oldest event is dropped and `dropped` counts it: the engine never waits for a subscriber.
  `notify()` is called when the buffer goes from empty to non-empty; the subscriber then calls
  `take()`. bunqueue's SubscribeEvents is one (protocols/bunqueue); webhooks, metrics and the
  dashboard will be others.

Ordering: events reach every subscriber in emit order, so the events of one job are in the
order its changes happened. Subscribers see an event before the sinks run: a change that a sink
makes in turn (a workq `run` deletes its job once answered) comes after it everywhere.
"""
from __future__ import annotations

from collections import deque
from typing import NamedTuple

from .model import derived_uid

#: Default bound of a subscription's buffer (events).
DEFAULT_MAXLEN = 10_000


class Event(NamedTuple):
    """One state change of one job.

    `seq`: feed-wide sequence number (1, 2, ...); `kind`: the event name (put, add, schedule,
    run, push, reserve, release, bury, kick, ready, promote, retry, priority, abandon, timeout,
    complete, fail, dlq, and the deletions: delete, cancel, remove, drain, obliterate, clean,
    purge, ttl-evict); `job_id`; `uid` (the client's uid or core.model.derived_uid);
    `queue`; `dialect` (who caused it; "jobgate" for timers); `at_ms` (wall ms); `prev` and
    `state`: the job's state before and after (core.model states, "new", "gone");
    `attempt` (reservations so far); `priority` (canonical rank); `worker` (the connection or
    lock owner, or None); `error` (a failure's text, on `fail` events, or None when the failure
    gave none); `result` (bytes, on
    `complete`) and `result_fmt` (1: MessagePack, 0: raw bytes); `detail`: on `fail`, the
    job's (payload bytes, payload fmt); on `progress` (a subscriber-only event, Feed.note: not
    a state change, no history row), the progress value; else None (webhooks, issue 16).
    """

    seq: int
    kind: str
    job_id: int
    uid: str
    queue: str
    dialect: str
    at_ms: int
    prev: str
    state: str
    attempt: int
    priority: int
    worker: str | None
    error: str | None
    result: bytes | None
    result_fmt: int
    detail: object = None


class Subscription:
    """A bounded buffer of events for one consumer (see the module docstring).

    `queues`: only events of these queues (None: every queue). `allow`: None, or a predicate on
    the queue name that every event must also pass (the access model: core/access_port.py).
    `maxlen`: buffer bound (events). `all_nodes`: in shared mode, also the events of the other
    nodes (relayed: core/shared_events.py, Feed.relay); False for the subscriptions that
    each node serves from its own events (webhooks, the dashboard, the relay itself).
    `dropped`: events discarded because the buffer was full (drop-oldest). `notify()`: called
    when the buffer becomes non-empty (None: the consumer polls `take()`).
    """

    __slots__ = ("feed", "queues", "allow", "buf", "maxlen", "dropped", "notify", "_armed", "closed",
                 "all_nodes")

    def __init__(self, feed: Feed, queues, maxlen: int, notify, all_nodes: bool = False) -> None:
        if maxlen < 1:
            raise ValueError("a subscription buffer holds at least one event")
        self.feed = feed
        self.queues = None if queues is None else frozenset(queues)
        self.allow = None
        self.buf: deque = deque()
        self.maxlen = maxlen
        self.dropped = 0
        self.notify = notify
        self._armed = True
        self.closed = False
        self.all_nodes = all_nodes

    def push(self, ev: Event) -> None:
        """Add `ev` (feed only): filtered by queue; drops the oldest event when full."""
        if self.queues is not None and ev.queue not in self.queues:
            return
        if self.allow is not None and not self.allow(ev.queue):
            return
        buf = self.buf
        if len(buf) >= self.maxlen:
            buf.popleft()
            feed = self.feed
            if not self.dropped:
                feed.overflowed += 1
            self.dropped += 1
            feed.dropped += 1
        buf.append(ev)
        if self._armed and self.notify is not None:
            self._armed = False
            self.notify()

    def take(self, limit: int | None = None) -> list:
        """Remove and return up to `limit` buffered events (all when None), oldest first."""
        buf = self.buf
        if limit is None or limit >= len(buf):
            out = list(buf)
            buf.clear()
        else:
            out = [buf.popleft() for _ in range(limit)]
        if not buf:
            self._armed = True
        return out

    def set_queues(self, queues) -> None:
        """Change the queue filter (None: every queue)."""
        self.queues = None if queues is None else frozenset(queues)
        if self.all_nodes and self.feed.on_wide is not None:
            self.feed.on_wide()

    def close(self) -> None:
        """Stop receiving events; buffered ones are discarded."""
        if not self.closed:
            self.closed = True
            self.buf.clear()
            self.feed._unsubscribe(self)


class Counter:
    """A subscription that only counts events, per (queue, kind): what a live view needs to
    know (which queues changed, how many events per second) for a fraction of a
    Subscription's cost per event (no Event is built). `allow`: None, or a predicate on the
    queue name (the access model). Memory: one entry per (queue, kind) seen since the last
    `take()`. Close it when done."""

    __slots__ = ("feed", "counts", "allow", "closed")

    def __init__(self, feed: "Feed") -> None:
        self.feed = feed
        self.counts: dict = {}
        self.allow = None
        self.closed = False

    def take(self) -> dict:
        """{(queue, kind): events} since the last take (then starts over)."""
        out = self.counts
        self.counts = {}
        if self.allow is not None:
            allow = self.allow
            out = {k: n for k, n in out.items() if allow(k[0])}
        return out

    def close(self) -> None:
        """Stop counting."""
        if not self.closed:
            self.closed = True
            self.counts = {}
            self.feed._uncount(self)


class Feed:
    """Distributes the engine's events to sinks and subscriptions (module docstring).

    `clock`: core.clock clock (wall ms for events that do not carry their own time).
    A sink is `fn(job, events, prev, dialect, durable, worker, error, at_ms)` where `job` is the
    live core.records.Job (sinks are engine-internal), `events` the tuple of event names and
    `durable` whether the job's row must be written (core/transitions.py, journal records) and
    `error` the failure's text as given (str, bytes or None).
    """

    def __init__(self, clock) -> None:
        self.clock = clock
        self.sinks: tuple = ()
        self.subs: tuple = ()
        self.counters: tuple = ()   # Counter objects
        self.watchers: dict = {}
        self.seq = 0
        #: subscriptions that ever dropped an event, and events dropped, since start (closed
        #: subscriptions included: the metrics' jobgate_event_feed_overflows_total)
        self.overflowed = 0
        self.dropped = 0
        #: called when a subscription with `all_nodes` is made, changes its queues or
        #: closes (shared mode: core/shared_events.py tells the other nodes); None: nobody
        self.on_wide = None
        #: True while some sink or subscription consumes events (the engine skips emit() when
        #: nothing does: memory mode without subscribers)
        self.active = False

    def add_sink(self, fn) -> None:
        """Register a synchronous sink (called after subscriptions, in registration order)."""
        self.sinks = self.sinks + (fn,)
        self.active = True

    def subscribe(self, queues=None, maxlen: int = DEFAULT_MAXLEN, notify=None,
                  all_nodes: bool = False) -> Subscription:
        """A new Subscription (see its docstring); events from now on."""
        s = Subscription(self, queues, maxlen, notify, all_nodes)
        self.subs = self.subs + (s,)
        self.active = True
        if all_nodes and self.on_wide is not None:
            self.on_wide()
        return s

    def _unsubscribe(self, s: Subscription) -> None:
        self.subs = tuple(x for x in self.subs if x is not s)
        self.active = bool(self.sinks or self.subs or self.counters)
        if s.all_nodes and self.on_wide is not None:
            self.on_wide()

    def count(self) -> Counter:
        """A new Counter (see its docstring); events from now on."""
        c = Counter(self)
        self.counters = self.counters + (c,)
        self.active = True
        return c

    def _uncount(self, c: Counter) -> None:
        self.counters = tuple(x for x in self.counters if x is not c)
        self.active = bool(self.sinks or self.subs or self.counters)

    def emit(self, job, events: tuple, prev: str, dialect: str, durable: bool = True,
             worker: str | None = None, error=None, at: int = 0) -> None:
        """One transition of `job` (already in its new state): its `events` in order.
        `error`: the failure's text, str or bytes (None: no failure, or none given); `at`: wall
        ms (0: now)."""
        if not self.active:
            return
        if not at:
            at = self.clock.wall_ms()
        if self.subs:
            self._publish(job, events, prev, dialect, worker, error, at)
        if self.counters:
            q = job.queue
            for c in self.counters:
                d = c.counts
                for kind in events:
                    k = (q, kind)
                    d[k] = d.get(k, 0) + 1
        for sink in self.sinks:
            sink(job, events, prev, dialect, durable, worker, error, at)

    def _publish(self, job, events, prev, dialect, worker, error, at) -> None:
        uid = job.uid if job.uid is not None else derived_uid(job.id)
        state = "gone" if job.state == "deleted" else job.state
        ext = job.ext
        fmt = 1 if ext is not None and ext.get("resultFmt") == 1 else 0
        text = error.decode("utf-8", "replace") if error.__class__ is bytes else error
        for kind in events:
            self.seq += 1
            ev = Event(self.seq, kind, job.id, uid, job.queue, dialect, at, prev, state,
                       job.reserves, job.priority, worker, text if kind == "fail" else None,
                       job.result if kind == "complete" else None, fmt,
                       (job.payload, job.fmt) if kind == "fail" else None)
            for s in self.subs:
                s.push(ev)

    def note(self, job, kind: str, detail, dialect: str) -> None:
        """An event for subscriptions only, not a state change (no sink, no history row):
        `progress` with the progress value as `detail`. Skipped when nobody subscribes."""
        if not self.subs:
            return
        self.seq += 1
        uid = job.uid if job.uid is not None else derived_uid(job.id)
        ev = Event(self.seq, kind, job.id, uid, job.queue, dialect, self.clock.wall_ms(),
                   job.state, job.state, job.reserves, job.priority, None, None, None, 0,
                   detail)
        for s in self.subs:
            s.push(ev)

    def relay(self, fields: tuple) -> None:
        """An event of another node in shared mode (core/shared_events.py): `fields` are an
        Event's fields after `seq`. It gets a sequence number here and goes to the
        subscriptions that asked for every node's events (`all_nodes`) only: not to sinks,
        counters or result watchers (this node's history and waits are its own)."""
        self.seq += 1
        ev = Event(self.seq, *fields)
        for s in self.subs:
            if s.all_nodes:
                s.push(ev)
