"""The metrics of the job history, per queue x dialect x time window, on Spark.

Every definition is in docs/pipeline.md ("Metric definitions"); this module is their Spark form.
Input: the events DataFrame of pipeline.sources. The plan is one shuffle by `job_id` (a job's
events are few, so the per-job window functions scale with the number of events, not of jobs),
then two group-bys on the small per-key result, and a running sum for the depth.
"""
from __future__ import annotations

from dataclasses import dataclass

#: Event classes (docs/pipeline.md).
ENQUEUE = ("put", "add", "schedule", "run", "push")
RUN_END = ("complete", "fail", "delete", "release", "bury", "timeout", "abandon", "dlq",
           "ttl-evict", "cancel", "remove", "drain", "obliterate", "clean", "purge",
           "wait-children")
DOWN = ("complete", "bury", "dlq", "delete", "ttl-evict", "cancel", "remove", "drain",
        "obliterate", "clean", "purge")
#: A failed attempt (docs/pipeline.md, "failed"): these events, and a `dlq` that is not the
#: second event of a final `fail` (the same failure: counted once).
FAILURE = ("fail", "bury")
#: --window values, in ms.
WINDOWS = {"1m": 60_000, "1h": 3_600_000, "1d": 86_400_000}
#: Accuracy of percentile_approx: exact while a group holds at most this many values.
ACCURACY = 10_000
PERCENTILES = (0.5, 0.9, 0.99)

#: Columns of the metrics table after the keys (queue, dialect, window_start_ms, window_ms).
MEASURES = ("enqueued", "started", "completed", "failed", "timed_out", "buried",
            "throughput_per_s", "wait_p50_ms", "wait_p90_ms", "wait_p99_ms", "wait_max_ms",
            "run_p50_ms", "run_p90_ms", "run_p99_ms", "run_max_ms", "retry_rate",
            "timeout_rate", "failure_rate", "sla_breaches", "depth")


@dataclass
class Analysis:
    """The result of `analyze`: `metrics` (one row per queue, dialect, window_start_ms) and
    `summary` (one row per queue, dialect), both Spark DataFrames with the MEASURES columns;
    `bounds`, one row (events, first_ms, last_ms) of the input. All three read the cached
    per-event frame: `release()` frees it when they are written."""
    metrics: object
    summary: object
    bounds: object
    cached: object = None

    def release(self) -> None:
        """Drop the cached per-event frame (the DataFrames recompute from the source after)."""
        if self.cached is not None:
            self.cached.unpersist()
            self.cached = None


def parse_window(text: str) -> int:
    """`1m`, `1h` or `1d` -> window length in ms. Raises ValueError for anything else."""
    try:
        return WINDOWS[text]
    except KeyError:
        raise ValueError(f"--window must be one of {', '.join(WINDOWS)}, not {text!r}") from None


def per_event(events):
    """The events with what each row contributes, from window functions over its job's history
    (ordered by id): dialect (the producer's), flags of the counted events, `wait_ms` on a job's
    first reserve, `run_ms` on the RUN_END event that ends a reservation, `delta` (depth change),
    and the flags `is_done` (a completion), `is_retry`, `is_failed` (a failed attempt)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    e = F.col("event")
    job = Window.partitionBy("job_id").orderBy("id")
    whole = job.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    before = job.rowsBetween(Window.unboundedPreceding, -1)
    is_end = e.isin(*RUN_END)
    live = F.when(e.isin(*DOWN), 0).otherwise(1)
    df = events.select(
        "id", "job_id", "queue", "event", "at_ms", "attempt",
        F.coalesce(F.first(F.when(F.col("dialect") != "jobgate", F.col("dialect")), True)
                   .over(whole), F.lit("jobgate")).alias("dialect"),
        F.lag("event").over(job).alias("prev_event"),
        (live - F.coalesce(F.lag(live).over(job), F.lit(0))).alias("delta"),
        F.first(F.when(e.isin(*ENQUEUE), F.col("at_ms")), True).over(whole).alias("enq_at"),
        F.sum(F.when(e == "reserve", 1).otherwise(0)).over(before).alias("reserves_before"),
        F.last(F.when(e == "reserve", F.col("id")), True).over(before).alias("res_id"),
        F.last(F.when(e == "reserve", F.col("at_ms")), True).over(before).alias("res_at"),
        F.last(F.when(is_end, F.col("id")), True).over(before).alias("end_id"),
    )
    first_reserve = (F.col("event") == "reserve") & (F.coalesce(F.col("reserves_before"), F.lit(0)) == 0)
    ends_run = (F.col("event").isin(*RUN_END) & F.col("res_id").isNotNull()
                & (F.col("res_id") > F.coalesce(F.col("end_id"), F.lit(0))))
    return df.select(
        "queue", "dialect", "at_ms", "event", "delta",
        F.when(first_reserve & F.col("enq_at").isNotNull(),
               F.col("at_ms") - F.col("enq_at")).alias("wait_ms"),
        F.when(ends_run, F.col("at_ms") - F.col("res_at")).alias("run_ms"),
        ((F.col("event") == "complete")
         | ((F.col("event") == "delete") & (F.col("prev_event") == "reserve"))).alias("is_done"),
        ((F.col("event") == "reserve") & (F.col("attempt") > 1)).alias("is_retry"),
        (F.col("event").isin(*FAILURE)
         | ((F.col("event") == "dlq")
            & (F.coalesce(F.col("prev_event"), F.lit("")) != "fail"))).alias("is_failed"),
    )


def _aggregates(sla_wait_ms: int):
    """The aggregate columns shared by the windowed and the summary group-bys."""
    from pyspark.sql import functions as F
    e = F.col("event")

    def n(cond):
        return F.sum(F.when(cond, 1).otherwise(0)).cast("long")

    ps = F.array(*[F.lit(p) for p in PERCENTILES])
    return [
        n(e.isin(*ENQUEUE)).alias("enqueued"),
        n(e == "reserve").alias("started"),
        n(F.col("is_done")).alias("completed"),
        n(F.col("is_failed")).alias("failed"),
        n(e == "timeout").alias("timed_out"),
        n(e.isin("bury", "dlq")).alias("buried"),
        F.percentile_approx("wait_ms", ps, ACCURACY).alias("wait_p"),
        F.max("wait_ms").alias("wait_max_ms"),
        F.percentile_approx("run_ms", ps, ACCURACY).alias("run_p"),
        F.max("run_ms").alias("run_max_ms"),
        n(F.col("is_retry")).alias("retries"),
        n(F.col("wait_ms") > sla_wait_ms).alias("sla_breaches"),
        F.sum("delta").cast("long").alias("delta"),
    ]


def _finish(df, span_s):
    """Rates, throughput and split percentiles from the aggregates; `span_s` is a Column."""
    from pyspark.sql import functions as F

    def ratio(a, b):
        return F.when(b > 0, a / b).cast("double")

    out = df
    for name in ("wait", "run"):
        for i, p in enumerate(PERCENTILES):
            col = F.when(F.col(f"{name}_p").isNotNull(), F.col(f"{name}_p")[i]).cast("long")
            out = out.withColumn(f"{name}_p{int(round(p * 100))}_ms", col)
    return (out.withColumn("throughput_per_s", (F.col("completed") / span_s).cast("double"))
            .withColumn("retry_rate", ratio(F.col("retries"), F.col("started")))
            .withColumn("timeout_rate", ratio(F.col("timed_out"), F.col("started")))
            .withColumn("failure_rate", ratio(F.col("failed"), F.col("completed") + F.col("failed")))
            .withColumn("wait_max_ms", F.col("wait_max_ms").cast("long"))
            .withColumn("run_max_ms", F.col("run_max_ms").cast("long")))


def analyze(events, window_ms: int = 60_000, sla_wait_ms: int = 60_000) -> Analysis:
    """Compute the metrics (docs/pipeline.md) of the events DataFrame `events`.

    window_ms: window length in ms (UTC-aligned buckets of at_ms); sla_wait_ms: a wait longer
    than this many ms is an SLA breach. Returns lazily evaluated DataFrames (nothing runs until
    they are written or collected); the per-event frame is cached, since both tables read it."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    ev = per_event(events).persist()
    keys = ["queue", "dialect"]
    win = (F.col("at_ms") - F.col("at_ms") % window_ms).alias("window_start_ms")
    m = ev.groupBy(*keys, win).agg(*_aggregates(sla_wait_ms))
    m = _finish(m, F.lit(window_ms / 1000.0))
    running = (Window.partitionBy(*keys).orderBy("window_start_ms")
               .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    m = m.withColumn("depth", F.sum("delta").over(running).cast("long"))
    m = m.select(*keys, "window_start_ms", F.lit(window_ms).cast("long").alias("window_ms"),
                 *MEASURES)
    bounds = ev.agg(F.count("*").alias("events"), F.min("at_ms").alias("first_ms"),
                    F.max("at_ms").alias("last_ms"))
    s = ev.groupBy(*keys).agg(*_aggregates(sla_wait_ms)).crossJoin(bounds)
    s = _finish(s, F.greatest((F.col("last_ms") - F.col("first_ms")) / 1000.0, F.lit(1.0)))
    s = s.withColumn("depth", F.col("delta")).select(*keys, *MEASURES)
    return Analysis(m, s, bounds, ev)
