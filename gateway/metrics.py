"""What the server counts for Prometheus, kept as plain ints and dicts (docs/metrics.md).

Hot-path rule: nothing here touches a prometheus_client object (they take a lock per update).
Per transition and per command the server only increments a dict entry or an int; the
families are built from these numbers when `/metrics` is scraped (gateway/metrics_export.py,
which alone imports prometheus_client).

- `FeedMetrics`: a sink of the engine's event feed (core.api.Port.observe): events per
  (queue, dialect, event), with the names the `job_events` history rows carry, and the wait
  and run time histograms per queue, with the definitions of the PySpark report
  (docs/pipeline.md "Metric definitions"): wait = a job's first `reserve` minus its creation
  (a delayed job's delay included), observed once per job; run = from a `reserve` to the
  event that ends that reservation (RUN_END below), observed once per reservation.
- `Buckets`: a histogram's cumulative buckets, sum and count, without locks; the storage
  writer keeps two (commit batch size and commit seconds, gateway/writer.py).
"""
from __future__ import annotations

from bisect import bisect_left

#: Events that end a reservation (the report's RUN_END, pipeline/analyze.py).
RUN_END = frozenset(("complete", "fail", "delete", "release", "bury", "timeout", "abandon",
                     "dlq", "ttl-evict", "cancel", "remove", "drain", "obliterate", "clean",
                     "purge", "wait-children"))

#: Bucket upper bounds (s) of jobgate_wait_seconds and jobgate_run_seconds: jobs wait and run
#: from milliseconds to hours.
JOB_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
               300.0, 900.0, 3600.0)
#: Bucket upper bounds (s) of jobgate_commit_seconds.
COMMIT_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                  5.0)
#: Bucket upper bounds (rows) of jobgate_commit_batch_size.
BATCH_ROWS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 50000)


class Buckets:
    """A histogram without locks: `observe(v)` adds `v` to the bucket of the first bound >= v
    (Prometheus' `le`); `cumulative()` gives [(le str, count)] ending in "+Inf"; `sum`,
    `count`. One thread only (the event loop)."""

    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, v: float) -> None:
        self.counts[bisect_left(self.bounds, v)] += 1
        self.sum += v
        self.count += 1

    def cumulative(self) -> list:
        out, n = [], 0
        for b, c in zip(self.bounds, self.counts):
            n += c
            out.append((_le(b), n))
        out.append(("+Inf", n + self.counts[-1]))
        return out


def _le(b: float) -> str:
    """A bucket bound as prometheus_client writes it ("1.0", "0.005")."""
    return repr(float(b))


class FeedMetrics:
    """The feed sink (see the module docstring); register with `port.observe(self.record)`.

    `events`: (queue, dialect, event) -> count; `wait` / `run`: queue -> Buckets (seconds);
    `reserved_at`: job id -> wall ms of the reservation in progress (jobs reserved now only:
    its size is the number of reserved jobs)."""

    __slots__ = ("events", "wait", "run", "reserved_at")

    def __init__(self) -> None:
        self.events: dict = {}
        self.wait: dict = {}
        self.run: dict = {}
        self.reserved_at: dict = {}

    def record(self, job_id: int, queue: str, dialect: str, events: tuple, state: str,
               at: int, created: int, reserves: int) -> None:
        """One transition (core.api.Port.observe's arguments). Register the bound method
        (`port.observe(fm.record)`): calling it costs less than calling the instance."""
        counts = self.events
        for e in events:
            k = (queue, dialect, e)
            try:
                counts[k] += 1
            except KeyError:
                counts[k] = 1
        res = self.reserved_at
        if state == "reserved":
            if "reserve" in events:    # (a touch or a priority change keeps the reservation)
                res[job_id] = at
                if reserves == 1:
                    b = self.wait.get(queue)
                    if b is None:
                        b = self.wait[queue] = Buckets(JOB_SECONDS)
                    b.observe((at - created) / 1000 if at > created else 0.0)
        elif res and job_id in res:    # the reservation ended (or left another way)
            t = res.pop(job_id)
            for e in events:
                if e in RUN_END:
                    b = self.run.get(queue)
                    if b is None:
                        b = self.run[queue] = Buckets(JOB_SECONDS)
                    b.observe((at - t) / 1000 if at > t else 0.0)
                    break

    __call__ = record
