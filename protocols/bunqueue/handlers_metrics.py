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
from .handlers_query import counts
from .options import queue_error
from .registry import command, err

_MAX_SAFE = 2 ** 53 - 1


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


@command("Metrics")
def metrics(sess, cmd: dict):
    """Server-wide counters; with `queue` or `type`, the queue's per-minute completed or
    failed series ({ok, data: {meta, data, count}})."""
    if cmd.get("queue") is not None or cmd.get("type") is not None:
        return _queue_metrics(sess, cmd)
    info = sess.info
    size = _db_bytes(info) or 0
    return {"ok": True, "metrics": {
        "totalPushed": num(info.total_pushed), "totalPulled": num(info.total_pulled),
        "totalCompleted": num(info.total_completed), "totalFailed": num(info.failed_total()),
        "avgLatencyMs": 0, "avgProcessingMs": 0,
        "memoryUsageMb": js_num(_rss_bytes() / (1024 * 1024)),
        "sqliteSizeMb": js_num(size / (1024 * 1024)), "activeConnections": info.connections}}


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


@command("Prometheus")
def prometheus(sess, cmd: dict):
    """The reference's Prometheus text (metricsExporter.js): the same metric names, HELP
    texts and order for what jobgate has (docs/bunqueue.md lists what it leaves out), blocks
    separated by a blank line, ending in a newline."""
    info = sess.info
    port = sess.port
    st = port.stats()
    prio = 0
    per_queue = []
    for qv in port.queue_views():
        if qv.pinned and qv.is_empty():
            continue
        c = counts(sess, qv.name)
        prio += c["prioritized"]
        per_queue.append((qv.name, c))
    ws = info.workers.listing(port.clock.wall_ms())["stats"]
    uptime_ms = port.clock.monotonic_ms() - info.started
    blocks = [
        ("bunqueue_jobs_waiting", "Number of jobs waiting in queue", "gauge", st.ready - prio),
        ("bunqueue_jobs_prioritized", "Number of prioritized jobs (priority > 0)", "gauge",
         prio),
        ("bunqueue_jobs_delayed", "Number of delayed jobs", "gauge", st.delayed),
        ("bunqueue_jobs_active", "Number of jobs being processed", "gauge", st.reserved),
        ("bunqueue_jobs_dlq", "Number of jobs in dead letter queue", "gauge", st.buried),
        ("bunqueue_jobs_completed", "Number of completed jobs", "gauge", st.completed),
        ("bunqueue_jobs_pushed_total", "Total jobs pushed", "counter", info.total_pushed),
        ("bunqueue_jobs_pulled_total", "Total jobs pulled", "counter", info.total_pulled),
        ("bunqueue_jobs_completed_total", "Total jobs completed", "counter",
         info.total_completed),
        ("bunqueue_jobs_failed_total", "Total jobs failed", "counter", info.failed_total()),
        ("bunqueue_uptime_seconds", "Server uptime in seconds", "gauge", uptime_ms // 1000),
        ("bunqueue_workers_registered", "Number of registered workers", "gauge", ws["total"]),
        ("bunqueue_workers_active", "Number of active workers", "gauge", ws["active"]),
        ("bunqueue_workers_processed_total", "Total jobs processed by workers", "counter",
         ws["totalProcessed"]),
        ("bunqueue_workers_failed_total", "Total jobs failed by workers", "counter",
         ws["totalFailed"]),
        ("bunqueue_storage_degraded", "Whether persistent storage is degraded", "gauge",
         0 if port.storage_down is None else 1),
        ("bunqueue_process_resident_memory_bytes", "Process resident memory size in bytes",
         "gauge", _rss_bytes()),
    ]
    lines = []
    for name, help_, kind, value in blocks:
        if lines:
            lines.append("")
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name} {value}"]
    size = _db_bytes(info)
    if size is not None:
        lines += ["", "# HELP bunqueue_sqlite_database_size_bytes SQLite database file size "
                  "in bytes", "# TYPE bunqueue_sqlite_database_size_bytes gauge",
                  f"bunqueue_sqlite_database_size_bytes {size}"]
    if per_queue:
        for key, help_ in (("waiting", "Number of waiting jobs per queue"),
                           ("prioritized", "Number of prioritized jobs per queue"),
                           ("delayed", "Number of delayed jobs per queue"),
                           ("active", "Number of active jobs per queue"),
                           ("failed", "Number of DLQ jobs per queue")):
            name = "bunqueue_queue_jobs_" + ("dlq" if key == "failed" else key)
            lines += ["", f"# HELP {name} {help_}", f"# TYPE {name} gauge"]
            lines += [f'{name}{{queue="{_label(q)}"}} {c[key]}' for q, c in per_queue]
    return {"ok": True, "data": {"metrics": "\n".join(lines) + "\n"}}
