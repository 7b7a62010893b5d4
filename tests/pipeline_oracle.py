"""An independent, plain-Python computation of the pipeline's metrics (docs/pipeline.md, "Metric
definitions"), to compare the Spark pipeline with. One pass per job over its events in `id`
order, written for clarity rather than speed; no Spark, no SQL.

Rows are `job_events` rows as dicts with the keys id, job_id, uid, queue, dialect, event, at_ms
(wall-clock ms), attempt, priority, payload_size, worker, error (`read_events` reads them).

    rows = read_events("sqlite:///.../jobgate.db")
    m = oracle_metrics(rows, 60_000, 60_000)    # {(queue, dialect, window_start_ms): {column: v}}
    s = oracle_summary(rows, 60_000)            # {(queue, dialect): {column: v}}

Values: counts and depth are ints; *_ms percentiles are ints (ms) or None when there is no value;
rates and throughput are floats, or None where the definition says NULL.
"""
from __future__ import annotations

import math
from collections import defaultdict
from fractions import Fraction

import sqlalchemy as sa

from core import schema

ENQUEUE = frozenset({"put", "add", "schedule", "run", "push"})
RUN_END = frozenset({"complete", "fail", "delete", "release", "bury", "timeout", "abandon", "dlq",
                     "ttl-evict", "cancel", "remove", "drain", "obliterate", "clean", "purge",
                     "wait-children"})
DOWN = frozenset({"complete", "bury", "dlq", "delete", "ttl-evict", "cancel", "remove", "drain",
                  "obliterate", "clean", "purge"})
#: The window widths of `jobgate analyze` (ms).
WINDOWS_MS = {"1m": 60_000, "1h": 3_600_000, "1d": 86_400_000}
#: --sla-wait default (ms).
DEFAULT_SLA_WAIT_MS = 60_000

COUNTS = ("enqueued", "started", "completed", "failed", "timed_out", "buried")
PERCENTILES = (("p50", Fraction(50, 100)), ("p90", Fraction(90, 100)), ("p99", Fraction(99, 100)))
#: Every metric column, in the order of docs/pipeline.md.
COLUMNS = COUNTS + ("throughput_per_s",
                    "wait_p50_ms", "wait_p90_ms", "wait_p99_ms", "wait_max_ms",
                    "run_p50_ms", "run_p90_ms", "run_p99_ms", "run_max_ms",
                    "retry_rate", "timeout_rate", "failure_rate", "sla_breaches", "depth")


def read_events(url: str) -> list[dict]:
    """Every job_events row of the database at SQLAlchemy `url`, ordered by id, as dicts keyed
    by column name (at_ms in wall-clock ms)."""
    eng = sa.create_engine(url)
    try:
        with eng.connect() as c:
            t = schema.job_events
            return [dict(r._mapping) for r in c.execute(sa.select(t).order_by(t.c.id))]
    finally:
        eng.dispose()


def nearest_rank(values: list[int], p: Fraction) -> int | None:
    """The value at 1-based rank ceil(p * n) of the sorted `values` (exact arithmetic: p is a
    Fraction, so ceil(9/10 * 10) is 9); None when there are no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = math.ceil(p * len(ordered))    # Fraction.__ceil__: exact
    return ordered[max(rank, 1) - 1]


def _live(event: str | None) -> int:
    """1 when a job whose latest event is `event` counts in the depth; None (no event yet): 0."""
    if event is None or event in DOWN:
        return 0
    return 1


def job_dialect(events: list[dict]) -> str:
    """The producer's dialect: that of the job's first event (by id) whose dialect is not
    `jobgate`; `jobgate` when there is none."""
    for e in events:
        if e["dialect"] != "jobgate":
            return e["dialect"]
    return "jobgate"


def event_facts(rows: list[dict]) -> list[dict]:
    """One dict per event, in id order, with what it contributes:
    {"row", "queue", "dialect" (the producer's), the COUNTS as 0/1, "retry" (0/1: a reserve
    with attempt > 1), "wait" (ms, on a job's first reserve when the job has an ENQUEUE event,
    else None), "run" (ms, on the first RUN_END after a reserve, else None), "delta" (depth
    change: live(event) - live(previous event of the job))}."""
    jobs: dict[int, list[dict]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: r["id"]):
        jobs[r["job_id"]].append(r)
    facts = []
    for events in jobs.values():
        dialect = job_dialect(events)
        first_enqueue_at = None
        for e in events:
            if e["event"] in ENQUEUE:
                first_enqueue_at = e["at_ms"]
                break
        reserved_before = False     # has the job had a reserve yet?
        open_reserve_at = None      # at_ms of a reserve not yet followed by a RUN_END
        prev_event = None
        for e in events:
            ev = e["event"]
            f = {"row": e, "queue": e["queue"], "dialect": dialect,
                 "enqueued": int(ev in ENQUEUE),
                 "started": int(ev == "reserve"),
                 "completed": int(ev == "complete" or (ev == "delete" and prev_event == "reserve")),
                 "failed": int(ev in ("fail", "bury")
                               or (ev == "dlq" and prev_event != "fail")),
                 "timed_out": int(ev == "timeout"),
                 "buried": int(ev in ("bury", "dlq")),
                 "retry": int(ev == "reserve" and e["attempt"] > 1),
                 "wait": None, "run": None,
                 "delta": _live(ev) - _live(prev_event)}
            if ev == "reserve" and not reserved_before:
                reserved_before = True
                if first_enqueue_at is not None:
                    f["wait"] = e["at_ms"] - first_enqueue_at
            if ev in RUN_END and open_reserve_at is not None:
                f["run"] = e["at_ms"] - open_reserve_at
                open_reserve_at = None
            if ev == "reserve":
                open_reserve_at = e["at_ms"]   # a second reserve before a RUN_END replaces it
            facts.append(f)
            prev_event = ev
    facts.sort(key=lambda f: f["row"]["id"])
    return facts


def _ratio(num: int, den: int) -> float | None:
    return None if den == 0 else num / den


def _columns(group: list[dict], sla_wait_ms: int, throughput: float) -> dict:
    """The metric columns over the facts of one group, depth excepted."""
    out = {c: sum(f[c] for f in group) for c in COUNTS}
    out["throughput_per_s"] = throughput
    waits = [f["wait"] for f in group if f["wait"] is not None]
    runs = [f["run"] for f in group if f["run"] is not None]
    for name, values in (("wait", waits), ("run", runs)):
        for p_name, p in PERCENTILES:
            out[f"{name}_{p_name}_ms"] = nearest_rank(values, p)
        out[f"{name}_max_ms"] = max(values) if values else None
    retries = sum(f["retry"] for f in group)
    out["retry_rate"] = _ratio(retries, out["started"])
    out["timeout_rate"] = _ratio(out["timed_out"], out["started"])
    out["failure_rate"] = _ratio(out["failed"], out["completed"] + out["failed"])
    out["sla_breaches"] = sum(1 for w in waits if w > sla_wait_ms)
    return out


def oracle_metrics(rows: list[dict], window_ms: int,
                   sla_wait_ms: int = DEFAULT_SLA_WAIT_MS) -> dict[tuple, dict]:
    """Windowed metrics: {(queue, dialect, window_start_ms): {column: value}} for every key with
    at least one event; window_start_ms = at_ms - at_ms % window_ms (UTC-aligned, ms). Each
    event, wait and run counts in the window of the event that ends it; depth is the running sum
    of the depth changes over this and the earlier windows of the (queue, dialect)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for f in event_facts(rows):
        at = f["row"]["at_ms"]
        groups[(f["queue"], f["dialect"], at - at % window_ms)].append(f)
    out = {}
    for key, group in groups.items():
        completed = sum(f["completed"] for f in group)
        out[key] = _columns(group, sla_wait_ms, completed / (window_ms / 1000))
        out[key]["delta"] = sum(f["delta"] for f in group)
    depth: dict[tuple, int] = defaultdict(int)
    for key in sorted(out, key=lambda k: k[2]):
        depth[key[:2]] += out[key].pop("delta")
        out[key]["depth"] = depth[key[:2]]
    return {k: {c: v[c] for c in COLUMNS} for k, v in out.items()}


def oracle_summary(rows: list[dict], sla_wait_ms: int = DEFAULT_SLA_WAIT_MS) -> dict[tuple, dict]:
    """Whole-history metrics: {(queue, dialect): {column: value}}, counts and percentiles over
    every event of the key, depth the final depth, throughput_per_s = completed / span, span =
    (max at_ms - min at_ms over all rows) / 1000 s, at least 1 s."""
    if not rows:
        return {}
    ats = [r["at_ms"] for r in rows]
    span_s = max((max(ats) - min(ats)) / 1000, 1.0)
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for f in event_facts(rows):
        groups[(f["queue"], f["dialect"])].append(f)
    out = {}
    for key, group in groups.items():
        completed = sum(f["completed"] for f in group)
        cols = _columns(group, sla_wait_ms, completed / span_s)
        cols["depth"] = sum(f["delta"] for f in group)
        out[key] = {c: cols[c] for c in COLUMNS}
    return out
