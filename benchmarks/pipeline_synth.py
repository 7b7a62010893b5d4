"""Synthetic job_events for benchmarks/pipeline_bench.py: realistic job lifecycles per dialect,
generated with numpy + pyarrow (vectorised: the loops run over lifecycles, never over rows) and
written the way `jobgate export events` writes (Hive date/queue partitions, one file per id
window), so pipeline.sources.read_parquet reads them.

`generate(tree, n_events, n_queues, days, seed, chunk)` writes the tree and returns the marker
dict (counts per metric, for the benchmark's check). Timestamps are ms since the epoch.
"""
from __future__ import annotations

import datetime
import json
import os
import resource
import time

DAY_MS = 86_400_000
START_MS = int(datetime.datetime(2026, 1, 5, tzinfo=datetime.timezone.utc).timestamp() * 1000)
DIALECTS = ("beanstalk", "workq", "bunqueue", "jobgate")   # index 3: timer events
QUEUE_NAMES = ("emails", "thumbnails", "billing", "webhooks", "reports", "search-index",
               "video-transcode", "notifications", "exports", "imports", "audit", "payments",
               "sms", "crawler", "ml-scoring", "cleanup", "invoices", "geocode", "feeds", "backup")
WORKERS_PER_DIALECT = 32
WORKER_EVENTS = ("reserve", "release", "bury", "delete", "abandon")
ERRORS = ("TimeoutError: upstream did not answer", "ValueError: bad payload",
          "ConnectionResetError: peer closed", "KeyError: 'user_id'", "HTTP 503 from api")
# Lifecycles per dialect: (weight, steps). A step is EVENT[!][/GAP]: `!` a timer wrote it
# (dialect jobgate), GAP the kind of delay before it (ms, see _gaps); the first step enqueues.
LIFECYCLE_TEXT = {
    "beanstalk": [(70, "put reserve/wait delete/run"),
                  (10, "put reserve/wait release/run reserve/backoff delete/run"),
                  (4, "put reserve/wait bury/run kick/kick reserve/wait delete/run"),
                  (4, "put reserve/wait timeout!/ttr reserve/wait delete/run"),
                  (7, "put ready!/delay reserve/wait delete/run"),
                  (3, "put reserve/wait bury/run"), (2, "put delete/wait")],
    "workq": [(72, "add reserve/wait complete/run"),
              (10, "add reserve/wait fail/run reserve/backoff complete/run"),
              (3, "add reserve/wait fail/run reserve/backoff fail/run reserve/backoff fail/run "
                  "dlq/now"),
              (5, "add reserve/wait timeout!/ttr reserve/wait complete/run"),
              (6, "schedule ready!/delay reserve/wait complete/run"),
              (2, "add delete/wait"), (2, "run reserve/now complete/run")],
    "bunqueue": [(72, "push reserve/wait complete/run"),
                 (10, "push reserve/wait fail/run reserve/backoff complete/run"),
                 (3, "push reserve/wait fail/run reserve/backoff fail/run reserve/backoff "
                     "fail/run dlq/now"),
                 (4, "push reserve/wait timeout!/ttr reserve/wait complete/run"),
                 (3, "push reserve/wait timeout!/ttr reserve/wait timeout!/ttr reserve/wait "
                     "timeout!/ttr fail!/now dlq!/now"),
                 (5, "push ready!/delay reserve/wait complete/run"),
                 (2, "push cancel/wait"), (1, "push reserve/wait abandon/run reserve/wait complete/run")],
}
LIFECYCLES = {d: [(w, [(tok.split("/")[0].rstrip("!"), "!" in tok,
                        tok.split("/")[1] if "/" in tok else None) for tok in text.split()])
                  for w, text in ls] for d, ls in LIFECYCLE_TEXT.items()}
EVENTS = sorted({e for ls in LIFECYCLES.values() for _, steps in ls for e, _, _ in steps})


# ----------------------------------------------------------------------------- generation
def _gaps(kind: str, rng, wait_mean, run_logmed, q):
    """ms before a step, >= 1, for the jobs whose queue indexes are `q` (ndarray)."""
    import numpy as np
    n = len(q)
    g = {"wait": lambda: rng.exponential(wait_mean[q]),
         "run": lambda: np.exp(rng.normal(run_logmed[q], 1.0)),
         "backoff": lambda: 1000 + rng.exponential(5000.0, n),
         "ttr": lambda: 30_000 + rng.integers(0, 1000, n),
         "delay": lambda: rng.uniform(1000, 600_000, n),
         "kick": lambda: rng.exponential(3_600_000.0, n),
         "now": lambda: rng.exponential(2.0, n)}[kind]()
    return np.minimum(g, 30 * DAY_MS).astype(np.int64) + 1


def _uuids(rng, n: int):
    """n random UUID-shaped strings (36 chars) as a pyarrow string array, built from buffers."""
    import numpy as np
    import pyarrow as pa
    if 36 * n >= 2**31:
        raise SystemExit("too many jobs for one string array; lower --events")
    raw = rng.integers(0, 256, size=(n, 16), dtype=np.uint8)
    raw[:, 6] = (raw[:, 6] & 0x0F) | 0x70
    raw[:, 8] = (raw[:, 8] & 0x3F) | 0x80
    hexd = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
    digits = np.empty((n, 32), dtype=np.uint8)
    digits[:, 0::2], digits[:, 1::2] = hexd[raw >> 4], hexd[raw & 15]
    out = np.full((n, 36), ord("-"), dtype=np.uint8)
    out[:, [i for i in range(36) if i not in (8, 13, 18, 23)]] = digits
    offsets = np.arange(0, 36 * (n + 1), 36, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(out.reshape(-1)))


def _jobs(rng, n_jobs: int, n_queues: int, days: int):
    """Per job: enqueue time (sorted, so job ids grow with time), queue, dialect."""
    import numpy as np
    span = days * DAY_MS
    t = rng.uniform(0, span, int(n_jobs * 2.0) + 16)
    hour = (t % DAY_MS) / 3_600_000
    keep = rng.random(len(t)) < (1 + 0.7 * np.sin((hour - 9) / 24 * 2 * np.pi)) / 1.7
    t = np.sort(t[keep][:n_jobs]).astype(np.int64) + START_MS
    qw = 1.0 / np.arange(1, n_queues + 1) ** 0.8           # a few busy queues, a long tail
    q = rng.choice(n_queues, size=len(t), p=qw / qw.sum())
    mix = np.cumsum(np.random.default_rng(7).dirichlet([2, 2, 2], n_queues), axis=1)
    d = (rng.random(len(t))[:, None] > mix[q]).sum(axis=1).clip(0, 2)
    return t, q, d


def generate_arrays(n_events: int, n_queues: int, days: int, seed: int) -> dict:
    """The first `n_events` events in time order as numpy arrays (job index, event code, at_ms,
    attempt, dialect code, worker code or -1, error code or -1, done flag, queue index), plus
    the per-job uid source and priority/payload_size."""
    import numpy as np
    rng = np.random.default_rng(seed)
    mean_len = np.mean([sum(w * len(s) for w, s in ls) / sum(w for w, _ in ls)
                        for ls in LIFECYCLES.values()])
    wait_mean = np.exp(np.linspace(np.log(200), np.log(90_000), n_queues))
    run_logmed = np.linspace(np.log(50), np.log(20_000), n_queues)[rng.permutation(n_queues)]
    n_jobs = int(n_events / mean_len * 1.02) + 10
    while True:
        t0, jq, jd = _jobs(rng, n_jobs, n_queues, days)
        cols = {k: [] for k in ("job", "ev", "at", "attempt", "dialect", "done", "by_timer")}
        for d, name in enumerate(DIALECTS[:3]):
            idx = np.flatnonzero(jd == d)
            ls = LIFECYCLES[name]
            w = np.array([x for x, _ in ls], dtype=float)
            pick = rng.choice(len(ls), size=len(idx), p=w / w.sum())
            for k, (_, steps) in enumerate(ls):
                jobs = idx[pick == k]
                q = jq[jobs]
                at = t0[jobs].copy()
                reserves = 0
                for i, (ev, by_timer, gap) in enumerate(steps):
                    if gap is not None:
                        at = at + _gaps(gap, rng, wait_mean, run_logmed, q)
                    reserves += ev == "reserve"
                    n = len(jobs)
                    cols["job"].append(jobs)
                    cols["ev"].append(np.full(n, EVENTS.index(ev), np.int8))
                    cols["at"].append(at)
                    cols["attempt"].append(np.full(n, reserves, np.int32))
                    cols["dialect"].append(np.full(n, 3 if by_timer else d, np.int8))
                    done = ev == "complete" or (ev == "delete" and i and steps[i - 1][0] == "reserve")
                    cols["done"].append(np.full(n, done, bool))
                    cols["by_timer"].append(np.full(n, by_timer, bool))
        total = sum(len(a) for a in cols["job"])
        if total >= n_events:
            break
        n_jobs = int(n_jobs * 1.05) + 10
    c = {k: np.concatenate(v) for k, v in cols.items()}
    order = np.lexsort((c["job"], c["at"]))[:n_events]   # time order; a job's steps are 1 ms+ apart
    c = {k: v[order] for k, v in c.items()}
    n = len(c["job"])
    wev = np.isin(c["ev"], [EVENTS.index(e) for e in WORKER_EVENTS]) & ~c["by_timer"]
    c["worker"] = np.where(wev, c["dialect"].astype(np.int16) * WORKERS_PER_DIALECT
                           + rng.integers(0, WORKERS_PER_DIALECT, n), -1).astype(np.int16)
    fev = (c["ev"] == EVENTS.index("fail")) & ~c["by_timer"]
    c["error"] = np.where(fev, rng.integers(0, len(ERRORS), n), -1).astype(np.int8)
    c["queue"] = jq[c["job"]]
    jobs_pri = np.where(jd == 0, rng.choice([0, 100, 1024, 2048], len(jd), p=[.1, .2, .6, .1]),
                        -rng.choice([0, 1, 5, 10], len(jd), p=[.7, .1, .1, .1]))
    c["job_priority"] = jobs_pri.astype(np.int64)
    c["job_size"] = np.exp(rng.normal(np.log(300), 1.2, len(jd))).clip(2, 1 << 20).astype(np.int32)
    c["job_dialect"] = jd
    c["uids"] = _uuids(rng, len(jd))
    return c


def _table(c: dict, lo: int, hi: int, queues: list):
    """Rows [lo, hi) (0-based; id = row + 1) as a table of pipeline.export._schema()."""
    import numpy as np
    import pyarrow as pa
    from pipeline.export import _schema
    s = slice(lo, hi)
    job, ev, at = c["job"][s], c["ev"][s], c["at"][s]

    def names(vocab, codes):
        codes = np.asarray(codes)
        return pa.array(vocab, pa.string()).take(pa.array(codes, mask=codes < 0))

    days = sorted(set((at // DAY_MS).tolist()))
    dnames = [datetime.datetime.fromtimestamp(d * 86400, datetime.timezone.utc)
              .strftime("%Y-%m-%d") for d in days]
    workers = [f"{d}#{i + 1}" for d in DIALECTS for i in range(WORKERS_PER_DIALECT)]
    put = (c["job_dialect"][job] == 0) & (ev == EVENTS.index("put"))
    data = {
        "id": pa.array(np.arange(lo + 1, hi + 1, dtype=np.int64)),
        "job_id": pa.array(job + 1),
        "uid": c["uids"].take(pa.array(job, mask=put)),
        "dialect": names(list(DIALECTS), c["dialect"][s]),
        "event": names(EVENTS, ev),
        "at_ms": pa.array(at),
        "attempt": pa.array(c["attempt"][s]),
        "priority": pa.array(c["job_priority"][job]),
        "payload_size": pa.array(c["job_size"][job]),
        "worker": names(workers, c["worker"][s]),
        "error": names(list(ERRORS), c["error"][s]),
        "date": names(dnames, np.searchsorted(days, at // DAY_MS)),
        "queue": names(queues, c["queue"][s]),
    }
    return pa.Table.from_pydict(data, schema=_schema())


def generate(tree: str, n_events: int, n_queues: int, days: int, seed: int, chunk: int) -> dict:
    """Write the export tree `tree` and its marker file; returns the marker's content."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    from pipeline.export import window_files
    t = time.monotonic()
    c = generate_arrays(n_events, n_queues, days, seed)
    t_arrays = time.monotonic() - t
    queues = list(QUEUE_NAMES[:n_queues]) + [f"queue-{i:02d}" for i in range(20, n_queues)]
    part = ds.partitioning(pa.schema([("date", pa.string()), ("queue", pa.string())]),
                           flavor="hive")
    files = 0
    n = len(c["job"])
    for lo in range(0, n + 1, chunk):   # export's id windows [lo, lo + chunk), ids from 1
        a, b = max(lo, 1) - 1, min(lo + chunk, n + 1) - 1
        if a >= b:
            continue
        table = _table(c, a, b, queues)
        # no file_visitor: a Python callback released by pyarrow while the process exits aborts
        # it (docs/pipeline.md "Export"); the files are counted on disk as the export does
        ds.write_dataset(table, os.path.join(tree, "events"), format="parquet",
                         partitioning=part, basename_template=f"part-{a + 1:012d}-{{i}}.parquet",
                         existing_data_behavior="overwrite_or_ignore", max_partitions=1 << 20)
        files += window_files(os.path.join(tree, "events"),
                              set(pc.unique(table["date"]).to_pylist()), a + 1)
    ev = c["ev"]
    counted = {"enqueued": ("put", "add", "schedule", "run", "push"), "started": ("reserve",),
               "failed": ("fail",), "timed_out": ("timeout",), "buried": ("bury", "dlq")}
    expected = {k: int(np.isin(ev, [EVENTS.index(e) for e in v]).sum()) for k, v in counted.items()}
    expected["completed"] = int(c["done"].sum())   # complete, and delete right after a reserve
    marker = {"events": n, "jobs": int(len(np.unique(c["job"]))), "queues": n_queues,
              "days": days, "seed": seed, "chunk": chunk, "files": files,
              "first_ms": int(c["at"][0]), "last_ms": int(c["at"][-1]), "expected": expected,
              "events_by_name": {e: int((ev == i).sum()) for i, e in enumerate(EVENTS)},
              "arrays_s": round(t_arrays, 2), "generate_s": round(time.monotonic() - t, 2),
              "generator_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    with open(os.path.join(tree, "_watermark.json"), "w") as f:
        json.dump({"last_id": n, "rows": n, "database": "synthetic (benchmarks/pipeline_bench.py)"}, f)
    with open(os.path.join(tree, "_bench_generated.json"), "w") as f:
        json.dump(marker, f, indent=1)
    return marker
