"""The `/metrics` exposition: a prometheus_client Collector that builds every family at scrape
time from the engine port's snapshots and the plain counters the server keeps
(gateway/metrics.py). The families, their labels, units and sources are in docs/metrics.md.

Three name sets in one registry:
- `jobgate_*`: jobs by queue and state, operations per dialect and command, the event feed's
  events, wait / run / commit histograms, connections, feed overflow, storage state;
- `bunqueue_*`: exactly the series of the bunqueue listener's `Prometheus` command (the text
  `/prometheus` answers, protocols/bunqueue/handlers_metrics.py), parsed and re-exposed, so
  bunqueue dashboards work against `/metrics` too;
- the beanstalkd exporter's (messagebird/beanstalkd_exporter): `stats` keys as gauges with
  `-` made `_` (`current_jobs_ready`, `cmd_put`, ...), and `stats-tube` keys as
  `tube_<key>{tube=...}` gauges, from the same text the beanstalk listener answers.
Plus prometheus_client's standard `process_*` collector.

Everything runs on the event loop (the HTTP handler awaits `scrape()`), so reading the
port and the counters needs no lock; the cost is per scrape, proportional to the queues.

Shared mode (docs/scaling.md): the job counts (`jobgate_jobs`, the exporter's
`current_jobs_*`, `current_tubes` and `tube_*`) are every node's, read from the database at
the scrape (Port.queue_views_global, failed_counts_global, stats_global and, with a bunqueue
listener, job_counts_all_global for the `bunqueue_*jobs*` gauges), as the dashboard's;
everything else is this node's (a counter per node, as Prometheus sums them). When the
database does not answer within COUNTS_WAIT_S, the scrape shows this node's counts and
`jobgate_shared_counts_up` is 0 (docs/metrics.md).
"""
from __future__ import annotations

import asyncio
from typing import NamedTuple

from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily)
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

from core.api import ServerStats

from .metrics import BATCH_ROWS, COMMIT_SECONDS, Buckets

#: jobgate_jobs states, in the canonical model's order (docs/mapping.md).
STATES = ("delayed", "ready", "reserved", "buried", "completed", "failed")
#: beanstalk `stats` keys the exporter leaves out (and the non-numeric ones jobgate adds).
_SKIP_STATS = frozenset(("hostname", "id", "pid", "os", "platform", "draining"))
#: s a scrape in shared mode waits for every node's counts (a Prometheus scrape times out
#: after 10 s by default); then it shows this node's own
COUNTS_WAIT_S = 5.0


def _yaml_pairs(reply: bytes):
    """(key, float value) of a beanstalk stats / stats-tube reply (b"OK n\\r\\n---\\n..."),
    skipping values that are not numbers (quoted strings but the version)."""
    body = reply.split(b"\r\n", 1)[1].decode()
    for line in body.splitlines()[1:]:
        k, sep, v = line.partition(": ")
        if not sep:
            continue
        try:
            yield k, float(v.strip('"'))
        except ValueError:
            continue


def _histogram(name: str, doc: str, labels: list, series) -> HistogramMetricFamily:
    """A histogram family from (label values, Buckets) pairs."""
    h = HistogramMetricFamily(name, doc, labels=labels)
    for values, b in series:
        h.add_metric(values, b.cumulative(), b.sum)
    return h


class JobgateCollector(Collector):
    """A prometheus_client collector (prometheus_client.registry.Collector: `collect()`
    yields metric families) over a gateway.server.Runtime `rt`."""

    def __init__(self, rt) -> None:
        self.rt = rt
        #: shared mode, during one scrape: every node's counts (Counts), or None (this node's)
        self.counts = None

    def collect(self):
        rt = self.rt
        port = rt.port
        c = self.counts
        if c is not None:
            views, failed, stats = c.views, c.failed, c.stats
        else:
            views, failed, stats = port.queue_views(), port.failed_counts(), None
        yield self._jobs(views, failed)
        yield self._operations()
        yield from self._feed()
        yield from self._storage()
        yield from self._connections()
        yield from self._bunqueue(c.every if c is not None else None)
        yield from self._beanstalkd(views, stats)
        yield from self._shared(c is not None)

    # ---------------------------------------------------------------- jobgate_*
    def _jobs(self, views, failed: dict):
        g = GaugeMetricFamily("jobgate_jobs", "Jobs by queue and canonical state, every "
                              "dialect's (failed: buried with a result)",
                              labels=["queue", "state"])
        for q in views:
            f = failed.get(q.name, 0)
            for state, n in zip(STATES, (q.delayed, q.ready, q.reserved, q.buried - f,
                                         q.completed, f)):
                g.add_metric([q.name, state], n)
        return g

    def _listener_dialects(self) -> list:
        seen: list = []
        for lst in self.rt.config.listeners:
            if lst.dialect not in seen:
                seen.append(lst.dialect)
        return seen

    def _operations(self):
        c = CounterMetricFamily("jobgate_operations", "Commands handled, per dialect and "
                                "command", labels=["dialect", "command"])
        for d in self._listener_dialects():
            ops = getattr(self.rt.states.get(d), "operations", None)
            if ops is None:
                continue
            for cmd, n in sorted(ops().items()):
                c.add_metric([d, cmd], n)
        return c

    def _feed(self):
        fm = self.rt.feed_metrics
        c = CounterMetricFamily("jobgate_job_events", "Job events of the engine's feed, one "
                                "per job_events history row", labels=["queue", "dialect",
                                                                      "event"])
        for (q, d, e), n in sorted(fm.events.items()):
            c.add_metric([q, d, e], n)
        yield c
        yield _histogram("jobgate_wait_seconds", "Seconds from a job's creation to its first "
                         "reservation (delay included)", ["queue"],
                         [([q], b) for q, b in sorted(fm.wait.items())])
        yield _histogram("jobgate_run_seconds", "Seconds from a reservation to the event that "
                         "ends it (complete, fail, delete, release, bury, timeout...)",
                         ["queue"], [([q], b) for q, b in sorted(fm.run.items())])
        st = self.rt.port.feed_stats()
        yield CounterMetricFamily("jobgate_event_feed_overflows", "Event feed subscriptions "
                                  "that overflowed (dropped their oldest events)",
                                  value=st["overflowed"])
        yield CounterMetricFamily("jobgate_event_feed_dropped", "Events dropped by full "
                                  "event feed subscriptions", value=st["dropped"])
        yield GaugeMetricFamily("jobgate_event_feed_subscriptions", "Open event feed "
                                "subscriptions (bunqueue SubscribeEvents, /ws, webhooks...)",
                                value=st["subscriptions"])

    def _storage(self):
        w = self.rt.writer
        rows = w.batch_rows if w is not None else Buckets(BATCH_ROWS)
        secs = w.commit_seconds if w is not None else Buckets(COMMIT_SECONDS)
        yield _histogram("jobgate_commit_batch_size", "Rows written per storage commit (job "
                         "rows and job_events rows)", [], [([], rows)])
        yield _histogram("jobgate_commit_seconds", "Seconds a storage commit took", [],
                         [([], secs)])
        st = self.rt.port.storage_state()
        yield GaugeMetricFamily("jobgate_storage_up", "1 while storage takes commits, 0 "
                                "during an outage", value=1 if st["available"] else 0)
        yield CounterMetricFamily("jobgate_storage_outages", "Times storage became "
                                  "unavailable", value=st["outages"])

    def _shared(self, counts_up: bool):
        """Shared mode (docs/scaling.md): whether the job counts are every node's
        (`counts_up`), this node's claims, wake-ups and leader duties."""
        sh = self.rt.shared
        if sh is None:
            return
        yield GaugeMetricFamily("jobgate_shared_counts_up", "1 when this scrape's job counts "
                                "are every node's (read from the database), 0 when they are "
                                "this node's only (the database did not answer in time)",
                                value=1 if counts_up else 0)
        yield GaugeMetricFamily("jobgate_shared_leader", "1 while this node leads the shared "
                                "nodes (promotions, evictions, cron, rescues)",
                                value=1 if sh.leader else 0)
        for name, doc, value in (
                ("claims", "Claim statements run for reservers waiting here", sh.claims),
                ("claimed_jobs", "Jobs claimed from the database", sh.claimed),
                ("spilled_jobs", "Jobs given back to the database at a commit",
                 sh.node.spilled),
                ("notifications", "jobgate_ready notifications received", sh.notified),
                ("promoted_jobs", "Delayed jobs made ready by this node as leader",
                 sh.promoted),
                ("evicted_jobs", "Expired jobs evicted by this node as leader", sh.evicted),
                ("rescued_jobs", "Dead nodes' expired reservations returned by this node",
                 sh.rescued),
                ("events_sent", "Job events relayed to subscribers on other nodes",
                 sh.relay.relayed),
                ("events_received", "Job events of other nodes delivered to subscribers "
                 "here", sh.relay.delivered),
                ("event_batches_lost", "Relayed event batches lost (incomplete, unreadable "
                 "or not sent)", sh.relay.lost),
                ("forwarded_commands", "Commands forwarded to the node holding their job",
                 sh.calls.forwarded),
                ("forwarded_served", "Commands other nodes forwarded here, run here",
                 sh.calls.served),
                ("forwarded_unanswered", "Forwarded commands answered as for no such job "
                 "(no reply in time, or the database failed)", sh.calls.unanswered),
                ("flow_notes_sent", "Flow notes (a child finished) delivered to parents "
                 "here or on the node holding them", sh.node.flows.sent),
                ("flow_notes_applied", "Flow notes applied to parents in this node",
                 sh.node.flows.applied),
                ("flow_notes_retried", "Deliveries of flow notes tried again (the database "
                 "failed, or the parent's node did not answer)", sh.node.flows.retried),
                ("settings_installed", "Queue settings changed on other nodes installed here",
                 sh.node.settings.installed),
                ("slots_taken", "Takes of concurrency slots that got this node more of them",
                 sh.node.slots.taken),
                ("slots_given", "Concurrency slots of a queue given back by this node (once "
                 "per queue and give-back)", sh.node.slots.given),
                ("tokens_taken", "Rate-limit tokens this node took from the shared buckets",
                 sh.node.tokens.taken),
                ("tokens_given", "Rate-limit tokens this node gave back to the shared buckets "
                 "unused", sh.node.tokens.given)):
            yield CounterMetricFamily(f"jobgate_shared_{name}", doc, value=value)

    def _connections(self):
        rt = self.rt
        open_ = dict(rt.conn_open)
        total = dict(rt.conn_total)
        for d, srv in rt.served:
            f = getattr(srv, "connections", None)
            if f is not None:
                o, t = f()
                open_[d] = open_.get(d, 0) + o
                total[d] = total.get(d, 0) + t
        g = GaugeMetricFamily("jobgate_connections", "Open client connections per dialect",
                              labels=["dialect"])
        c = CounterMetricFamily("jobgate_connections", "Client connections accepted per "
                                "dialect", labels=["dialect"])
        for d in self._listener_dialects():
            g.add_metric([d], open_.get(d, 0))
            c.add_metric([d], total.get(d, 0))
        yield g
        yield c

    # ---------------------------------------------------------------- bunqueue_*
    def _bunqueue(self, every):
        """The bunqueue listener's Prometheus series; `every`: every node's job counts per
        queue (shared mode) or None."""
        info = self.rt.states.get("bunqueue")
        if info is None:
            return
        from protocols.bunqueue.handlers_metrics import prometheus_text
        text = prometheus_text(info, info.port, every)
        for fam in text_string_to_metric_families(text):
            if fam.name.startswith("bunqueue_"):   # process_*: prometheus_client's own
                yield fam

    # ------------------------------------------------------- beanstalkd_exporter
    def _beanstalkd(self, views, stats):
        info = self.rt.states.get("beanstalk")
        if info is None:
            return
        for key, v in _yaml_pairs(info.stats(stats)):
            if key not in _SKIP_STATS:
                yield GaugeMetricFamily(key.replace("-", "_"), f"beanstalk stats {key} "
                                        "(beanstalkd_exporter name)", value=v)
        tubes: dict = {}
        for q in views:
            for key, v in _yaml_pairs(info.stats_tube(q)):
                g = tubes.get(key)
                if g is None:
                    g = tubes[key] = GaugeMetricFamily(
                        "tube_" + key.replace("-", "_"),
                        f"beanstalk stats-tube {key} (beanstalkd_exporter name)",
                        labels=["tube"])
                g.add_metric([q.name], v)
        yield from tubes.values()


class Counts(NamedTuple):
    """Every node's job counts for one scrape (shared mode): `views` (list of QueueView),
    `failed` ({queue: jobs failed for good}), `stats` (ServerStats), `every` ({queue:
    Port.job_counts dict}, for the bunqueue series; None without a bunqueue listener)."""

    views: list
    failed: dict
    stats: ServerStats
    every: dict | None


async def _answer(start, wait_s: float):
    """The answer of a port operation's callback form, `start(callback)`; raises
    asyncio.TimeoutError after `wait_s` s, or the Exception the operation answered (a
    database error)."""
    fut = asyncio.get_running_loop().create_future()

    def got(x) -> None:
        if not fut.done():
            fut.set_result(x)
    start(got)
    x = await asyncio.wait_for(asyncio.shield(fut), wait_s)
    if isinstance(x, Exception):
        raise x
    return x


async def scrape_counts(port, bunqueue: bool, wait_s: float = COUNTS_WAIT_S) -> Counts | None:
    """Every node's job counts (Counts) read from the database (`bunqueue`: the per-queue
    counts of the bunqueue series too), or None when the reads do not all answer within
    `wait_s` s in all (or one fails)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + wait_s
    reads = [port.queue_views_global, port.failed_counts_global, port.stats_global]
    if bunqueue:
        reads.append(port.job_counts_all_global)
    got = []
    try:
        for start in reads:
            got.append(await _answer(start, max(0.0, end - loop.time())))
    except Exception:   # asyncio.TimeoutError or the database's: this node's counts
        return None
    if not bunqueue:
        got.append(None)
    return Counts(*got)


class Exporter:
    """The registry of one server (gateway.server.Runtime `rt`): JobgateCollector and
    prometheus_client's ProcessCollector. `await scrape()` -> (text bytes, content type)."""

    def __init__(self, rt) -> None:
        self.rt = rt
        self._reading = None   # shared mode: the scrape_counts task under way
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = JobgateCollector(rt)
        self.registry.register(self.collector)
        ProcessCollector(registry=self.registry)

    async def scrape(self) -> tuple:
        """The exposition: (text bytes, content type). In shared mode it first reads every
        node's job counts (scrape_counts: up to COUNTS_WAIT_S s; scrapes that come while
        one reads share its counts)."""
        rt = self.rt
        counts = None
        if rt.shared is not None:
            task = self._reading
            if task is None:   # one read of the database at a time, shared by the scrapes
                task = self._reading = asyncio.ensure_future(
                    scrape_counts(rt.port, "bunqueue" in rt.states))
                task.add_done_callback(self._read_done)
            counts = await asyncio.shield(task)
        return self.exposition(counts)

    def _read_done(self, task) -> None:
        self._reading = None

    def exposition(self, counts: Counts | None = None) -> tuple:
        """The exposition now, with `counts` (None: this node's own): (text bytes, content
        type). On the event loop."""
        self.collector.counts = counts
        try:
            return generate_latest(self.registry), CONTENT_TYPE_PLAIN_0_0_4
        finally:
            self.collector.counts = None
