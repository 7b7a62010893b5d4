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

Everything runs on the event loop (the HTTP handler calls `exposition()`), so reading the
port and the counters needs no lock; the cost is per scrape, proportional to the queues.
"""
from __future__ import annotations

from types import SimpleNamespace

from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily)
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

from .metrics import BATCH_ROWS, COMMIT_SECONDS, Buckets

#: jobgate_jobs states, in the canonical model's order (docs/mapping.md).
STATES = ("delayed", "ready", "reserved", "buried", "completed", "failed")
#: beanstalk `stats` keys the exporter leaves out (and the non-numeric ones jobgate adds).
_SKIP_STATS = frozenset(("hostname", "id", "pid", "os", "platform", "draining"))


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

    def collect(self):
        rt = self.rt
        port = rt.port
        views = port.queue_views()
        yield self._jobs(views, port.failed_counts())
        yield self._operations()
        yield from self._feed()
        yield from self._storage()
        yield from self._connections()
        yield from self._bunqueue()
        yield from self._beanstalkd(views)
        yield from self._shared()

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

    def _shared(self):
        """Shared mode (docs/scaling.md): this node's claims, wake-ups and leader duties."""
        sh = self.rt.shared
        if sh is None:
            return
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
    def _bunqueue(self):
        info = self.rt.states.get("bunqueue")
        if info is None:
            return
        from protocols.bunqueue.handlers_metrics import prometheus
        text = prometheus(SimpleNamespace(info=info, port=info.port), {})["data"]["metrics"]
        for fam in text_string_to_metric_families(text):
            if fam.name.startswith("bunqueue_"):   # process_*: prometheus_client's own
                yield fam

    # ------------------------------------------------------- beanstalkd_exporter
    def _beanstalkd(self, views):
        info = self.rt.states.get("beanstalk")
        if info is None:
            return
        for key, v in _yaml_pairs(info.stats()):
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


class Exporter:
    """The registry of one server (gateway.server.Runtime `rt`): JobgateCollector and
    prometheus_client's ProcessCollector. `exposition()` -> (text bytes, content type)."""

    def __init__(self, rt) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(JobgateCollector(rt))
        ProcessCollector(registry=self.registry)

    def exposition(self) -> tuple:
        return generate_latest(self.registry), CONTENT_TYPE_PLAIN_0_0_4
