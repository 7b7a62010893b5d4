"""The port's event-feed operations (a base of core.api.Port): subscriptions (every event,
bounded), counters (events per queue and kind: the dashboard), the synchronous observer the
gateway's metrics use, and the feed's and failures' counts for scrapes (docs/metrics.md,
docs/dashboard.md). The feed itself is core/events.py.

Units: times in wall ms. `self._engine` is the engine behind the port.
"""
from __future__ import annotations

from .events import DEFAULT_MAXLEN, Subscription


class FeedOps:
    """Event-feed operations of core.api.Port (see the module docstring)."""

    def subscribe(self, queues=None, maxlen: int = DEFAULT_MAXLEN, notify=None,
                  all_nodes: bool = False) -> Subscription:
        """Events of `queues` (None: all) from now on, in a buffer of `maxlen` events that
        drops the oldest when full (core/events.py). `all_nodes`: in shared mode, the events
        of the other nodes' jobs too, relayed after their commit (core/shared_events.py: a
        client's subscription; a node's own consumers such as webhooks leave it False). Close
        it when done."""
        return self._engine.feed.subscribe(queues, maxlen, notify, all_nodes)

    def count_events(self):
        """A core.events.Counter: how many events of each kind each queue had, from now on,
        read with `take()` -> {(queue, kind): n} (bounded: cleared by each take); far cheaper
        per event than a Subscription (the dashboard's live view). Close it when done."""
        return self._engine.feed.count()

    def observe(self, fn) -> None:
        """Call `fn(job_id, queue, dialect, events, state, at_ms, created_ms, reserves)` for
        every job transition from now on, synchronously inside the engine, after the journal
        (a sink of the feed: nothing is dropped, unlike a Subscription). `events`: the tuple
        of event names the transition writes as job_events rows (core/journal.py), in order;
        `dialect`: who caused it ("jobgate" for timers); `state`: the job's state after it
        ("deleted" when gone); `at_ms`: the events' wall ms; `created_ms`: the job's creation
        (wall ms); `reserves`: its reservations so far. `fn` must be cheap and must not call
        the port (the gateway's metrics: gateway/metrics.py)."""
        def sink(job, events, prev, dialect, durable, worker, error, at):
            fn(job.id, job.queue, dialect, events, job.state, at, job.created_ms, job.reserves)
        self._engine.feed.add_sink(sink)

    def feed_stats(self) -> dict:
        """The event feed's counts: {"subscriptions": open now, "overflowed": subscriptions
        that ever dropped an event (buffer full), "dropped": events dropped, since start}."""
        f = self._engine.feed
        return {"subscriptions": len(f.subs), "overflowed": f.overflowed, "dropped": f.dropped}

    def failed_counts(self) -> dict:
        """{queue name: jobs that failed for good} for the queues that have some: the buried
        jobs with a result (workq fail, a bunqueue DLQ; QueueView.buried includes them,
        docs/mapping.md), as `failed_count(queue)` counts them. Walks every buried job: for
        scrapes, not per command."""
        out = {}
        for name in self._engine.queues:
            n = self.failed_count(name)
            if n:
                out[name] = n
        return out
