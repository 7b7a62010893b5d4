"""What a SQLite group commit of 100 glide-mq addJobs costs, by way of writing its rows, with
plain sqlite3 on a WAL file (docs/performance.md, "SQLite binding").

One real batch is made in-process (the benchmark's `FCALL glidemq_addJob` x100 through the
RESP parser, session and engine, then the journal's take), and its job and job_events rows are
written again and again with fresh ids, one transaction per batch, commit included:

    .venv/bin/python benchmarks/sqlite_binding.py [--batches 300] [--skip-json] [--skip-pages]

Rows printed (median µs per job over the batches):
  multi-row VALUES with and without the bytes/None adapters (core/sqlite_rows.py), and with
  the columns alike in every row bound once (Folder), for the benchmark's identical payloads
  and for a different payload per job; the binding alone (the same statements with WHERE 0);
  the JSON alternative (json_each with ->> or json_extract, bytes cut with substr() out of
  one concatenated BLOB parameter); page sizes 4096, 16384, 65536 (WAL frames per commit).
Figures move ±20% on a shared 2-core machine: compare rows of one run.
"""
from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from itertools import chain

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import sqlalchemy as sa  # noqa: E402

from core import schema  # noqa: E402
from core.api import Port, SystemClock  # noqa: E402
from core.sqlite_rows import Folder, fast_sqlite_binding  # noqa: E402
from protocols.contract import Context  # noqa: E402
from protocols.resp import REGISTRATION  # noqa: E402
from protocols.resp.codec import RequestParser  # noqa: E402
from protocols.resp.session import Handler  # noqa: E402

NC, EC = schema.JOB_NEW_COLUMNS, schema.EVENT_COLUMNS
HEAD_JOBS = f"INSERT INTO jobs ({', '.join(NC)}) VALUES "
HEAD_EVENTS = f"INSERT INTO job_events ({', '.join(EC)}) VALUES "


def _cmd(*words) -> bytes:
    out = [b"*%d\r\n" % len(words)]
    for w in words:
        w = w if isinstance(w, bytes) else str(w).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(w), w))
    return b"".join(out)


def glide_batch():
    """One journal batch of 100 addJobs (rows as core.journal.Batch holds them)."""
    port = Port.create(SystemClock(), durable=True, history=True)
    state = REGISTRATION.make_state(port, {o.name: o.default for o in REGISTRATION.options},
                                    Context())
    h = Handler(state, None)
    h.handle([b"FUNCTION", b"LOAD", b"#!lua name=glidemq\n-- stand-in\n"])
    p = "glide:{bench}"
    one = _cmd("FCALL", "glidemq_addJob", 4, p + ":id", p + ":stream", p + ":scheduled",
               p + ":events", "job", json.dumps({"x": "y" * 88}), "{}",
               int(time.time() * 1000), 0, 0, "", 0, "", 0, 0, 0, 0, 0, 0, 0, "", 0, "", "", 0)
    for c in RequestParser().feed(one * 100):
        h.handle(c)
    return port.persistence.take()


def database(page_size: int | None = None) -> sqlite3.Connection:
    """A fresh file with the schema (core.schema), WAL, synchronous NORMAL, no autocheckpoint."""
    path = os.path.join(tempfile.mkdtemp(prefix="sqlite-binding-"), "x.db")
    db = sqlite3.connect(path)
    if page_size:
        db.execute(f"PRAGMA page_size={page_size}")
    for p in ("journal_mode=WAL", "synchronous=NORMAL", "wal_autocheckpoint=0"):
        db.execute("PRAGMA " + p)
    eng = sa.create_engine(f"sqlite:///{path}")
    schema.metadata.create_all(eng)
    eng.dispose()
    return db


def plain_sql(head: str, width: int, n: int) -> str:
    return head + ", ".join(["(" + ", ".join("?" * width) + ")"] * n)


def json_sql(table: str, cols, blobs=(), extract=False) -> str:
    out = []
    for i, c in enumerate(cols):
        v = f"json_extract(value, '$[{i}]')" if extract else f"value->>{i}"
        if c in blobs:   # [offset, length] packed as offset << 32 | length into ?2
            v = (f"CASE WHEN {v} IS NULL THEN NULL ELSE substr(?2, {v} >> 32, "
                 f"{v} & 4294967295) END")
        out.append(v)
    return f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(out)} FROM json_each(?1)"


class Run:
    """Writes the batch's rows `batches` times into `db` with writer `fn(cur, jobs, events)`."""

    def __init__(self, batch, batches: int) -> None:
        self.jobs, self.events, self.batches = batch.inserts, batch.events, batches
        self.base = 0

    def rows(self, distinct: bool):
        self.base += 1_000_000
        b = self.base
        jobs = [(r[0] + b,) + r[1:3] + ((r[3] + b"%d" % i) if distinct else r[3],) + r[4:]
                for i, r in enumerate(self.jobs)]
        return jobs, [(r[0] + b,) + r[1:] for r in self.events]

    def time(self, db, fn, distinct=False, commit=True) -> float:
        cur = db.cursor()
        ts = []
        for _ in range(self.batches):
            jobs, events = self.rows(distinct)
            t0 = time.perf_counter()
            fn(cur, jobs, events)
            if commit:
                db.commit()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts) / len(self.jobs) * 1e6


def adapters(on: bool) -> None:
    if on:
        fast_sqlite_binding()
    else:
        for t in (bytes, type(None)):
            sqlite3.adapters.pop((t, sqlite3.PrepareProtocol), None)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--skip-json", action="store_true")
    ap.add_argument("--skip-pages", action="store_true")
    a = ap.parse_args(argv)
    batch = glide_batch()
    run = Run(batch, a.batches)
    n = len(batch.inserts)
    sj, se = plain_sql(HEAD_JOBS, len(NC), n), plain_sql(HEAD_EVENTS, len(EC), n)
    folder = Folder()

    def plain(cur, jobs, events):
        cur.execute(sj, tuple(chain.from_iterable(jobs)))
        cur.execute(se, tuple(chain.from_iterable(events)))

    def folded(cur, jobs, events):
        cur.execute(*folder.folded(HEAD_JOBS, len(NC), jobs))
        cur.execute(*folder.folded(HEAD_EVENTS, len(EC), events))

    results = []
    db = database()
    for label, fn, ad in (("multi-row VALUES, no adapters", plain, False),
                          ("multi-row VALUES, adapters", plain, True),
                          ("alike columns bound once, adapters", folded, True)):
        adapters(ad)
        results.append((f"jobs + events: {label}, same payload", run.time(db, fn)))
        results.append((f"jobs + events: {label}, distinct payloads",
                        run.time(db, fn, distinct=True)))
    # binding alone: the statements select their VALUES and insert nothing
    nj = (f"INSERT INTO jobs ({', '.join(NC)}) SELECT * FROM (VALUES "
          + sj[len(HEAD_JOBS):] + ") WHERE 0")
    ne = (f"INSERT INTO job_events ({', '.join(EC)}) SELECT * FROM (VALUES "
          + se[len(HEAD_EVENTS):] + ") WHERE 0")
    for ad in (False, True):
        adapters(ad)
        tag = "adapters" if ad else "no adapters"
        results.append((f"binding only, job rows, {tag}", run.time(
            db, lambda c, j, e: c.execute(nj, tuple(chain.from_iterable(j))), commit=False)))
        results.append((f"binding only, event rows, {tag}", run.time(
            db, lambda c, j, e: c.execute(ne, tuple(chain.from_iterable(e))), commit=False)))
    adapters(True)
    if not a.skip_json:
        dumps = json.JSONEncoder(ensure_ascii=False, check_circular=False,
                                 separators=(",", ":")).encode
        ev_arrow, ev_extract = json_sql("job_events", EC), json_sql("job_events", EC,
                                                                     extract=True)
        jobs_json = json_sql("jobs", NC, blobs=("payload", "extras"))
        results.append(("events only: multi-row VALUES", run.time(
            db, lambda c, j, e: c.execute(se, tuple(chain.from_iterable(e))))))
        results.append(("events only: json_each, value->>i", run.time(
            db, lambda c, j, e: c.execute(ev_arrow, (dumps(e),)))))
        results.append(("events only: json_each, json_extract", run.time(
            db, lambda c, j, e: c.execute(ev_extract, (dumps(e),)))))

        def as_json(cur, jobs, events):
            blobs, rows, off = [], [], 1
            for r in jobs:
                p, x = r[3], r[17]
                blobs.append(p)
                po = (off << 32) | len(p)
                off += len(p)
                xo = None
                if x is not None:
                    blobs.append(x)
                    xo = (off << 32) | len(x)
                    off += len(x)
                rows.append(r[:3] + (po,) + r[4:17] + (xo,))
            cur.execute(jobs_json, (dumps(rows), b"".join(blobs)))
            cur.execute(ev_arrow, (dumps(events),))
        results.append(("jobs + events as JSON (bytes via substr of one BLOB)",
                        run.time(db, as_json)))
    if not a.skip_pages:
        for ps in (4096, 16384, 65536):
            d = database(ps)
            t = run.time(d, folded)
            frames = d.execute("PRAGMA wal_checkpoint").fetchone()[1] / a.batches
            results.append((f"page_size {ps}: alike columns bound once "
                            f"({frames:.1f} WAL frames a commit)", t))
    print(f"SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, "
          f"{a.batches} batches of {n} addJobs, median µs per job\n")
    print("| write | µs/job |\n| --- | ---: |")
    for label, t in results:
        print(f"| {label} | {t:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
