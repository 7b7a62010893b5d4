"""`jobgate export events`: job_events to Parquet (pyarrow), partitioned by date and queue,
incremental through a watermark.

Layout (Hive style, readable by Spark, pyarrow, DuckDB, Trino):

    DIR/events/date=YYYY-MM-DD/queue=<URI-escaped queue>/part-<first id read>-<n>.parquet
    DIR/_watermark.json        {"last_id": N, "rows": total exported, "database": URL sans password}

`date` is the UTC day of `at_ms`; the files hold the other event columns (see
pipeline.sources.EVENT_SCHEMA) without `queue`, which is in the path. A run reads only rows whose
id is above the watermark, in fixed id windows of CHUNK ids, and writes the watermark after its
files: a run cut short is redone by the next one, which rewrites the same file names (the id
first id it read is in the name) with the same rows, so nothing is exported twice.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

import sqlalchemy as sa

from .deps import require

#: Ids per read: each id window becomes at most one file per (date, queue).
CHUNK = 500_000
WATERMARK = "_watermark.json"
DAY_MS = 86_400_000


class ExportError(RuntimeError):
    """The export cannot go on (a watermark from another database, an unreadable database)."""


@dataclass
class ExportResult:
    """What one export run did: `rows` written, `files` written, `last_id` the new watermark,
    `skipped` rows older than --since that were passed over."""
    rows: int
    files: int
    last_id: int
    skipped: int


def _schema():
    import pyarrow as pa
    return pa.schema([("id", pa.int64()), ("job_id", pa.int64()), ("uid", pa.string()),
                      ("dialect", pa.string()), ("event", pa.string()), ("at_ms", pa.int64()),
                      ("attempt", pa.int32()), ("priority", pa.int64()),
                      ("payload_size", pa.int32()), ("worker", pa.string()),
                      ("error", pa.string()), ("date", pa.string()), ("queue", pa.string())])


def read_watermark(out_dir: str) -> dict:
    """The watermark of the export in `out_dir`: {"last_id": 0, "rows": 0} when there is none."""
    try:
        with open(os.path.join(out_dir, WATERMARK)) as f:
            return json.load(f)
    except FileNotFoundError:
        return {"last_id": 0, "rows": 0}


def _write_watermark(out_dir: str, wm: dict) -> None:
    tmp = os.path.join(out_dir, WATERMARK + ".tmp")
    with open(tmp, "w") as f:
        json.dump(wm, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(out_dir, WATERMARK))


def window_files(events_dir: str, dates: set[str], start: int) -> int:
    """How many files of the id window starting at id `start` (named part-<start>-<i>.parquet)
    are under `events_dir`/date=D/queue=*/ for the days D in `dates` ("YYYY-MM-DD").

    Usually one per (date, queue), but pyarrow keeps at most 1024 files open (max_open_files)
    and starts a new file in a partition whose file it had to close, so a window with more
    partitions than that has more files."""
    prefix = f"part-{start:012d}-"
    n = 0
    for d in dates:
        with os.scandir(os.path.join(events_dir, f"date={d}")) as queues:
            for q in (q for q in queues if q.is_dir()):
                with os.scandir(q.path) as names:
                    n += sum(1 for f in names if f.name.startswith(prefix))
    return n


def _day(ms: int) -> str:
    import datetime
    return datetime.datetime.fromtimestamp(ms // 1000, datetime.timezone.utc).strftime("%Y-%m-%d")


def export_events(database_url: str, out_dir: str, since_ms: int | None = None,
                  until_ms: int | None = None, chunk: int = CHUNK) -> ExportResult:
    """Append the job_events rows not yet exported to the Parquet tree in `out_dir`.

    since_ms / until_ms (wall ms): rows with at_ms < since_ms are passed over for good; the run
    stops at the first row (in id order) with at_ms >= until_ms and the watermark stays below
    it, so a later run without --until picks it up. Raises ExportError when the watermark is
    above the database's last id (a different or recreated database: export to a new DIR),
    MissingExtra without pyarrow."""
    require("pyarrow")
    import pyarrow as pa
    import pyarrow.dataset as ds

    from core import schema
    ev = schema.job_events
    os.makedirs(out_dir, exist_ok=True)
    wm = read_watermark(out_dir)
    last = int(wm.get("last_id", 0))
    total = int(wm.get("rows", 0))
    cols = [ev.c.id, ev.c.job_id, ev.c.uid, ev.c.dialect, ev.c.event, ev.c.at_ms, ev.c.attempt,
            ev.c.priority, ev.c.payload_size, ev.c.worker, ev.c.error, ev.c.queue]
    part = ds.partitioning(pa.schema([("date", pa.string()), ("queue", pa.string())]),
                           flavor="hive")
    sch = _schema()
    rows = files = skipped = 0
    events = os.path.join(out_dir, "events")
    eng = sa.create_engine(database_url)
    try:
        with eng.connect() as c:
            top = c.execute(sa.select(sa.func.max(ev.c.id))).scalar() or 0
        if top < last:
            raise ExportError(f"{out_dir} was exported up to event id {last}, but this database "
                              f"ends at {top}: it is another or a recreated database; export "
                              f"it to a new directory")
        done = False
        lo = last + 1 - last % chunk   # the id window [lo, lo + chunk) holding last + 1
        while not done and lo <= top:
            hi = lo + chunk
            start = max(lo, last + 1)   # the file name: the same when a cut-short run is redone
            with eng.connect() as c:
                batch = c.execute(sa.select(*cols).where(ev.c.id > last, ev.c.id >= lo,
                                                         ev.c.id < hi).order_by(ev.c.id)).all()
            keep = []
            for r in batch:
                if until_ms is not None and r.at_ms >= until_ms:
                    done = True
                    break
                last = r.id
                if since_ms is not None and r.at_ms < since_ms:
                    skipped += 1
                    continue
                keep.append(r)
            if keep:
                data = {f.name: [] for f in sch}
                names = [f.name for f in sch][:11]
                for r in keep:
                    for k, v in zip(names, r):
                        data[k].append(v)
                    data["date"].append(_day(r.at_ms))
                    data["queue"].append(r.queue)
                table = pa.Table.from_pydict(data, schema=sch)
                try:
                    # no file_visitor: pyarrow releases a Python callback on one of its I/O
                    # threads after write_dataset returns, and a release that lands while the
                    # interpreter exits aborts the process (docs/pipeline.md "Export")
                    ds.write_dataset(table, events, format="parquet", partitioning=part,
                                     basename_template=f"part-{start:012d}-{{i}}.parquet",
                                     existing_data_behavior="overwrite_or_ignore",
                                     max_partitions=len(keep))
                except OSError as e:   # e.g. a queue name too long for a directory name
                    raise ExportError(f"cannot write events {start}..{last} under {out_dir} "
                                      f"(watermark left at {wm.get('last_id', 0)}): {e}") from e
                rows += len(keep)
                files += window_files(events, set(data["date"]), start)
            if not done and hi > top:
                last = max(last, top)   # ids above the last row seen are gaps (pruned or unused)
            lo = hi
    finally:
        eng.dispose()
    _write_watermark(out_dir, {"last_id": last, "rows": total + rows,
                               "database": sa.engine.make_url(database_url).render_as_string(
                                   hide_password=True)})
    return ExportResult(rows, files, last, skipped)
