"""Per-queue telemetry of the bunqueue dialect: the lifecycle-event window that TrimEvents trims
and the per-minute completed / failed counts that the queue form of Metrics answers (reference:
bunqueue 2.9.5 application/queueTelemetryJournal.js, its in-memory mode: a count of retained
events per queue, at most MAX_QUEUE_EVENTS, and cumulative minute buckets, at most
MAX_METRIC_POINTS minutes, per queue and type).

What is counted (docs/bunqueue.md, "Commands and fixes (issue 16)"): the lifecycle events that
bunqueue commands cause on a queue (each job pushed, pulled, acknowledged, failed, moved), and
as metrics the jobs completed by ACK / ACKB and the jobs failed for good by FAIL. Jobs finished
through another dialect are not in these numbers; the durable history (job_events) keeps every
event of every dialect. Times: wall ms; minutes are floor(ms / 60000).
"""
from __future__ import annotations

#: Events retained per queue (reference default maxQueueEvents).
MAX_QUEUE_EVENTS = 10_000
#: Minute buckets kept per queue and type (reference default maxMetricDataPoints: 14 days).
MAX_METRIC_POINTS = 20_160


class _Series:
    __slots__ = ("total", "prev_ts", "prev_count", "buckets")

    def __init__(self) -> None:
        self.total = 0
        self.prev_ts = 0
        self.prev_count = 0
        self.buckets: dict = {}   # minute -> count


class QueueTelemetry:
    """Event counts and completed / failed series per queue (see the module docstring)."""

    def __init__(self) -> None:
        self.events: dict = {}    # queue -> retained event count
        self.series: dict = {}    # (queue, "completed" | "failed") -> _Series

    def event(self, queue: str, n: int = 1) -> None:
        """`n` lifecycle events of `queue` happened (kept up to MAX_QUEUE_EVENTS)."""
        ev = self.events
        c = ev.get(queue, 0)
        if c < MAX_QUEUE_EVENTS:
            ev[queue] = min(MAX_QUEUE_EVENTS, c + n)

    def finished(self, queue: str, kind: str, now_ms: int) -> None:
        """A job of `queue` completed (`kind` "completed") or failed for good ("failed") at
        wall ms `now_ms`; also one lifecycle event."""
        self.event(queue)
        s = self.series.get((queue, kind))
        if s is None:
            s = self.series[(queue, kind)] = _Series()
        minute = now_ms // 60_000
        c = s.buckets.get(minute, 0) + 1
        s.buckets[minute] = c
        s.total += 1
        s.prev_ts = now_ms
        s.prev_count = c
        if len(s.buckets) > 1:
            cutoff = max(s.buckets) - MAX_METRIC_POINTS + 1
            for m in [m for m in s.buckets if m < cutoff]:
                del s.buckets[m]

    def trim(self, queue: str, max_length: int) -> int:
        """Keep at most `max_length` events of `queue`; returns how many were removed."""
        c = self.events.get(queue, 0)
        if c <= max_length:
            return 0
        if max_length == 0:
            del self.events[queue]
        else:
            self.events[queue] = max_length
        return c - max_length

    def metrics(self, queue: str, kind: str, start: int, end: int) -> dict:
        """The reference's getMetrics: {meta: {count, prevTS, prevCount}, data, count} where
        `data` holds per-minute counts from the newest minute back to the oldest kept (zeros
        for quiet minutes), sliced [start, end] (end -1: to the last)."""
        s = self.series.get((queue, kind))
        if s is None or not s.buckets:
            meta = {"count": 0 if s is None else s.total, "prevTS": 0, "prevCount": 0}
            full: list = []
        else:
            meta = {"count": s.total, "prevTS": float(s.prev_ts), "prevCount": s.prev_count}
            newest = max(s.buckets)
            oldest = max(min(s.buckets), newest - MAX_METRIC_POINTS + 1)
            full = [s.buckets.get(newest - i, 0) for i in range(newest - oldest + 1)]
        count = len(full)
        stop = count if end == -1 else min(count, end + 1)
        return {"meta": meta, "data": [] if start >= stop else full[start:stop],
                "count": count}

    def clear(self, queue: str) -> None:
        """Forget `queue` (Obliterate: the reference purges its queue metadata)."""
        self.events.pop(queue, None)
        for k in [k for k in self.series if k[0] == queue]:
            del self.series[k]
