"""Metrics (server-wide and per queue), TrimEvents and Prometheus (bunqueue-tcp-protocol.txt
"Monitoring Commands"; reference: infrastructure/server/handlers/management.js handleMetrics /
handleQueueMetrics / handleTrimEvents, handlers/monitoring/operations.js handlePrometheus and
application/metricsExporter.js for the Prometheus text).

Per-queue numbers come from the dialect's telemetry (telemetry.py). Units: ms on the wire
(timestamps as float64), seconds in Prometheus (`bunqueue_uptime_seconds`: whole seconds, as
the reference floors them).
"""
from __future__ import annotations

import os
import resource

from .codec import js_num, num
from core.api import BURIED, COMPLETED, DELAYED, READY, RESERVED

from .handlers_query import _when, counts_of
from .info import BUN_VERSION, SPEAKS_VERSION
from .options import queue_error
from .registry import command, err

_MAX_SAFE = 2 ** 53 - 1
#: the states whose jobs make a queue another node has worth a per-queue series
_STATES = (READY, DELAYED, RESERVED, BURIED, COMPLETED)


def _rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _db_bytes(info) -> int | None:
    path = info.db_path
    if path and os.path.exists(path):
        return os.path.getsize(path)
    return None


def _safe_index(v) -> bool:
    """Number.isSafeInteger(v) && v >= 0."""
    if v.__class__ is float:
        if not v.is_integer():
            return False
        v = int(v)
    return v.__class__ is int and 0 <= v <= _MAX_SAFE


#: the counters that Metrics and Stats add up over the nodes, and those with a rate
_TOTALS = ("pushed", "pulled", "completed", "failed", "connections")
_RATED = ("pushed", "pulled", "completed", "failed")


def node_totals(sess, callback) -> None:
    """`callback((totals, rates))`: {pushed, pulled, completed, failed, connections} and their
    rates per second ({pushed, pulled, completed, failed}: a total over the uptime). On a
    single server they are this listener's counters (info.figures) over its monotonic
    uptime, at once. In shared mode (docs/scaling.md "Figures of every node") this node's
    listeners' counters together (Port.own_figures: TCP and HTTP) plus every other live
    node's (Port.figures_of_other_nodes, at most a second old), each node's rate its total
    over its own uptime, summed; on a database error `callback` gets the Exception."""
    info = sess.info
    port = sess.port
    own = port.own_figures("bunqueue") or info.figures()
    secs = max((port.clock.monotonic_ms() - info.started) / 1000, 1e-3)
    totals = {k: own.get(k, 0) for k in _TOTALS}
    rates = {k: own.get(k, 0) / secs for k in _RATED}

    def got(others) -> None:
        if isinstance(others, Exception):
            callback(others)
            return
        for f in others:
            up = max((f.get("at", 0) - f.get("started", 0)) / 1000, 1e-3)
            for k in _TOTALS:
                totals[k] += f.get(k, 0)
            for k in _RATED:
                rates[k] += f.get(k, 0) / up
        callback((totals, rates))
    port.figures_of_other_nodes("bunqueue", got)


@command("Metrics")
def metrics(sess, cmd: dict):
    """Server-wide counters; with `queue` or `type`, the queue's per-minute completed or
    failed series ({ok, data: {meta, data, count}}). In shared mode the totals and
    activeConnections add up every live node's (node_totals; `Storage unavailable` when the
    database fails); memory and file size, and the per-queue series, are this node's
    (docs/mapping.md)."""
    if cmd.get("queue") is not None or cmd.get("type") is not None:
        return _queue_metrics(sess, cmd)
    info = sess.info

    def answer(res):
        t = res[0]
        size = _db_bytes(info) or 0
        return {"ok": True, "metrics": {
            "totalPushed": num(t["pushed"]), "totalPulled": num(t["pulled"]),
            "totalCompleted": num(t["completed"]), "totalFailed": num(t["failed"]),
            "avgLatencyMs": 0, "avgProcessingMs": 0,
            "memoryUsageMb": js_num(_rss_bytes() / (1024 * 1024)),
            "sqliteSizeMb": js_num(size / (1024 * 1024)),
            "activeConnections": t["connections"]}}
    return _when(sess, lambda cb: node_totals(sess, cb), answer)


@command("Stats")
def stats(sess, cmd: dict):
    """The server's job counts and counters. In shared mode the counts span every node
    (Port.stats_global), `failed` and the rates add up every live node's (node_totals),
    `uptime` is this node's (docs/mapping.md)."""
    info = sess.info
    port = sess.port

    def start(cb):
        def counted(st):
            if isinstance(st, Exception):
                cb(st)
            else:
                node_totals(sess, lambda r: cb(r if isinstance(r, Exception) else (st, r)))
        port.stats_global(counted)

    def answer(res):
        st, (totals, rates) = res
        uptime_ms = port.clock.monotonic_ms() - info.started
        return {"ok": True, "stats": {
            "waiting": st.ready, "active": st.reserved, "delayed": st.delayed,
            "dlq": st.buried, "completed": st.completed, "failed": totals["failed"],
            "uptime": num(uptime_ms), "pushPerSec": js_num(round(rates["pushed"], 2)),
            "pullPerSec": js_num(round(rates["pulled"], 2))}}
    return _when(sess, start, answer)


def _queue_metrics(sess, cmd: dict):
    q = cmd.get("queue")
    if q.__class__ is not str:
        return err("Metrics queue is required")
    msg = queue_error(q)
    if msg:
        return err(msg)
    kind = cmd.get("type")
    if kind not in ("completed", "failed"):
        return err("Metrics type must be 'completed' or 'failed'")
    start = cmd.get("start")
    end = cmd.get("end")
    start = 0 if start is None else start
    end = -1 if end is None else end
    if not _safe_index(start):
        return err("start must be a non-negative safe integer")
    if end != -1 and not _safe_index(end):
        return err("end must be a non-negative safe integer")
    return {"ok": True, "data": sess.info.telemetry.metrics(q, kind, int(start), int(end))}


@command("TrimEvents", mutating=True)
def trim_events(sess, cmd: dict):
    """Keep at most `maxLength` lifecycle events of the queue: {ok, data: {removed}}."""
    q = cmd.get("queue")
    msg = queue_error(q)
    if msg:
        return err(msg)
    n = cmd.get("maxLength")
    if not _safe_index(n):
        return err("maxLength must be a non-negative safe integer")
    removed = sess.info.telemetry.trim(q if q.__class__ is str else str(q), int(n))
    return {"ok": True, "data": {"removed": removed}}


def _label(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


#: Latency histogram buckets of the reference (seconds, application/latencyTracker.js).
_BUCKETS = ("0.0001", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1",
            "0.25", "0.5", "1", "2.5", "5", "10", "+Inf")
#: The reference's S3 backup series (prometheusOperationalMetrics.js) with the values of a
#: server without S3 backup: jobgate has none (docs/bunqueue.md).
_BACKUP = (
    ("bunqueue_backup_enabled", "Whether scheduled S3 backup is enabled", "gauge", 0),
    ("bunqueue_backup_scheduler_running", "Whether the scheduled S3 backup timer is running",
     "gauge", 0),
    ("bunqueue_backup_in_progress", "Whether an S3 backup is in progress", "gauge", 0),
    ("bunqueue_backup_interval_seconds", "Configured S3 backup interval in seconds", "gauge",
     21600),
    ("bunqueue_backup_retention", "Configured number of S3 backups to retain", "gauge", 7),
    ("bunqueue_backup_attempts_total", "S3 backup attempts started", "counter", 0),
    ("bunqueue_backup_successes_total", "Successful S3 backup attempts", "counter", 0),
    ("bunqueue_backup_failures_total", "Failed S3 backup attempts", "counter", 0),
    ("bunqueue_backup_overlap_rejections_total",
     "S3 backup requests rejected because another backup was active", "counter", 0),
    ("bunqueue_backup_consecutive_failures", "Consecutive failed S3 backup attempts", "gauge",
     0),
    ("bunqueue_backup_last_success_timestamp_seconds",
     "Unix timestamp of the last successful S3 backup, or zero", "gauge", 0),
    ("bunqueue_backup_last_failure_timestamp_seconds",
     "Unix timestamp of the last failed S3 backup, or zero", "gauge", 0),
    ("bunqueue_backup_last_duration_seconds", "Duration of the last S3 backup attempt", "gauge",
     0),
    ("bunqueue_backup_last_size_bytes", "Compressed size of the last successful S3 backup",
     "gauge", 0),
)


def _block(lines: list, name: str, help_: str, kind: str, samples) -> None:
    """One metric: a blank line before it (but the first), HELP, TYPE and `samples`: a value,
    or a list of (labels str, value)."""
    if lines:
        lines.append("")
    lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
    if samples.__class__ is list:
        lines += [f"{name}{labels} {v}" for labels, v in samples]
    else:
        lines.append(f"{name} {samples}")


@command("Prometheus")
def prometheus(sess, cmd: dict):
    """The reference's Prometheus text (application/metricsExporter.js and
    prometheusOperationalMetrics.js; prometheus_text). In shared mode the job gauges are
    every node's (Port.job_counts_all_global: the reply comes once the database answered;
    `Storage unavailable` when it fails), the rest is this node's."""
    info = sess.info
    port = sess.port
    if not port.shared:
        return {"ok": True, "data": {"metrics": prometheus_text(info, port)}}
    return _when(sess, port.job_counts_all_global,
                 lambda every: {"ok": True, "data": {"metrics": prometheus_text(info, port,
                                                                                every)}})


def _listed(port, every: dict | None) -> list:
    """[(queue, GetJobCounts object)] of the queues the per-queue series show: this node's
    live queues (not one that only a connection's watch list keeps, while it has no job);
    with `every` (Port.job_counts_all_global's {queue: counts}), their counts are every
    node's (a queue kept by a watch list is shown when any node has jobs of it; one made here
    after `every` was read has this node's counts), and the queues other nodes have jobs of
    (or a pause) follow, by name."""
    out = []
    seen = set()
    for qv in port.queue_views():
        seen.add(qv.name)
        c = None if every is None else every.get(qv.name)   # None: made after the read
        if c is None:
            if qv.pinned and qv.is_empty():
                continue
            c = port.job_counts(qv.name)
        elif qv.pinned and not _any_jobs(c):   # as is_empty, over every node
            continue
        out.append((qv.name, counts_of(c)))
    for q in sorted(every or ()):
        c = every[q]
        if q not in seen and _has_jobs(c):
            out.append((q, counts_of(c)))
    return out


def _any_jobs(c: dict) -> bool:
    """True when job counts `c` (Port.job_counts) show a job in any state."""
    return any(c[k] for k in _STATES)


def _has_jobs(c: dict) -> bool:
    """True when job counts `c` show a job or a pause."""
    return c["paused"] or _any_jobs(c)


def prometheus_text(info, port, every: dict | None = None) -> str:
    """The reference's Prometheus text (application/metricsExporter.js and
    prometheusOperationalMetrics.js): every series it writes, with its HELP text, type and
    order, blocks separated by a blank line, ending in a newline. What jobgate does not have is
    written as the reference writes it when unused (S3 backup off, websocket / SSE
    connections 0, latency histograms empty: B7); cron and webhook counts come from
    `info.gauges` (0 until those features register a provider). docs/bunqueue.md.
    `info`: the listener's BunqueueInfo; `every`: None (the job gauges are this engine's), or
    {queue: Port.job_counts dict} of every node (shared mode)."""
    per_queue = _listed(port, every)
    prio = sum(c["prioritized"] for _, c in per_queue)
    if every is None:
        st = port.stats()
        ready, active, dlq, completed = st.ready, st.reserved, st.buried, st.completed
    else:
        ready, active, dlq, completed = (sum(c[k] for c in every.values())
                                         for k in (READY, RESERVED, BURIED, COMPLETED))
    clock = port.clock
    ws = info.workers.listing(clock.wall_ms())["stats"]
    uptime_ms = clock.monotonic_ms() - info.started
    rss = _rss_bytes()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    gauge = info.gauges
    lines: list = []
    for name, help_, kind, value in (
            ("bunqueue_jobs_waiting", "Number of jobs waiting in queue", "gauge",
             ready - prio),
            ("bunqueue_jobs_prioritized", "Number of prioritized jobs (priority > 0)", "gauge",
             prio),
            ("bunqueue_jobs_delayed", "Number of delayed jobs", "gauge",
             sum(c["delayed"] for _, c in per_queue)),   # not parents waiting for children
            ("bunqueue_jobs_active", "Number of jobs being processed", "gauge", active),
            ("bunqueue_jobs_dlq", "Number of jobs in dead letter queue", "gauge", dlq),
            ("bunqueue_jobs_completed", "Number of completed jobs", "gauge", completed),
            ("bunqueue_jobs_pushed_total", "Total jobs pushed", "counter", info.total_pushed),
            ("bunqueue_jobs_pulled_total", "Total jobs pulled", "counter", info.total_pulled),
            ("bunqueue_jobs_completed_total", "Total jobs completed", "counter",
             info.total_completed),
            ("bunqueue_jobs_failed_total", "Total jobs failed", "counter", info.failed_total()),
            ("bunqueue_uptime_seconds", "Server uptime in seconds", "gauge", uptime_ms // 1000),
            ("bunqueue_cron_jobs_registered", "Number of registered cron jobs", "gauge",
             gauge["cron_jobs"]()),
            ("bunqueue_workers_registered", "Number of registered workers", "gauge",
             ws["total"]),
            ("bunqueue_workers_active", "Number of active workers", "gauge", ws["active"]),
            ("bunqueue_worker_active_jobs", "Number of jobs currently processed by workers",
             "gauge", ws["activeJobs"]),
            ("bunqueue_worker_concurrency_slots", "Configured worker concurrency capacity",
             "gauge", ws["concurrencySlots"]),
            ("bunqueue_workers_processed_total", "Total jobs processed by workers", "counter",
             ws["totalProcessed"]),
            ("bunqueue_workers_failed_total", "Total jobs failed by workers", "counter",
             ws["totalFailed"]),
            ("bunqueue_webhooks_registered", "Number of registered webhooks", "gauge",
             gauge["webhooks_registered"]()),
            ("bunqueue_webhooks_enabled", "Number of enabled webhooks", "gauge",
             gauge["webhooks_enabled"]()),
            ("bunqueue_storage_degraded", "Whether persistent storage is degraded", "gauge",
             0 if port.storage_down is None else 1),
            ("bunqueue_storage_disk_full", "Whether persistent storage reported a full disk",
             "gauge", 0),
            ("bunqueue_process_heap_used_bytes", "Process heap bytes currently used", "gauge",
             rss),
            ("bunqueue_process_heap_total_bytes", "Total process heap bytes", "gauge", rss),
            ("bunqueue_process_resident_memory_bytes", "Process resident memory size in bytes",
             "gauge", rss)):
        _block(lines, name, help_, kind, value)
    size = _db_bytes(info)
    if size is not None:
        _block(lines, "bunqueue_sqlite_database_size_bytes",
               "SQLite database file size in bytes", "gauge", size)
    if per_queue:
        for key, help_ in (("waiting", "Number of waiting jobs per queue"),
                           ("prioritized", "Number of prioritized jobs per queue"),
                           ("delayed", "Number of delayed jobs per queue"),
                           ("active", "Number of active jobs per queue"),
                           ("failed", "Number of DLQ jobs per queue")):
            _block(lines, "bunqueue_queue_jobs_" + ("dlq" if key == "failed" else key), help_,
                   "gauge", [(f'{{queue="{_label(q)}"}}', c[key]) for q, c in per_queue])
    _block(lines, "bunqueue_build_info", "Build and runtime identity", "gauge",
           [(f'{{bun_version="{BUN_VERSION}",version="{SPEAKS_VERSION}"}}', 1)])
    _block(lines, "process_cpu_seconds_total", "Total process CPU time in seconds", "counter",
           round(ru.ru_utime + ru.ru_stime, 6))
    _block(lines, "process_start_time_seconds",
           "Start time of the process since the Unix epoch in seconds", "gauge",
           (clock.wall_ms() - uptime_ms) / 1000)
    _block(lines, "process_resident_memory_bytes", "Resident memory size in bytes", "gauge", rss)
    _block(lines, "process_heap_bytes", "Process heap size in bytes", "gauge", rss)
    _block(lines, "bunqueue_connections", "Current server connections by bounded transport",
           "gauge", [('{transport="tcp"}', info.connections), ('{transport="websocket"}', 0),
                     ('{transport="sse"}', 0)])
    _block(lines, "bunqueue_queue_metrics_exported",
           "Queue names included in labelled Prometheus series", "gauge", len(per_queue))
    _block(lines, "bunqueue_queue_metrics_omitted",
           "Queue names omitted by the Prometheus cardinality limit", "gauge", 0)
    for name, help_, kind, value in _BACKUP:
        _block(lines, name, help_, kind, value)
    for op in ("push", "pull", "ack"):
        name = f"bunqueue_{op}_duration_seconds"
        _block(lines, name, f"{op.capitalize()} operation latency in seconds", "histogram",
               [(f'_bucket{{le="{b}"}}', 0) for b in _BUCKETS]
               + [("_sum", 0), ("_count", 0)])
    return "\n".join(lines) + "\n"
