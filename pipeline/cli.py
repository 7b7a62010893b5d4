"""`jobgate export events`, `jobgate analyze` and `jobgate enqueue`: the pipeline's commands.

    jobgate export events --out DIR [--since T] [--until T] [--database URL | --config FILE]
    jobgate analyze --out DIR [--database URL | --config FILE] [--source jdbc|parquet]
                    [--parquet DIR] [--master URL] [--window 1m|1h|1d] [--sla-wait 60s]
                    [--since T] [--until T] [--shuffle-partitions N]
    jobgate enqueue --from PARQUET_OR_CSV --queue Q [--server HOST:PORT] [--token T]
                    [--id-column C] [--body-column C] [--run-id R] [--master URL]

T: an ISO 8601 date or time (UTC unless it names a zone) or ms since the epoch. Exit status: 0,
1 when the work failed (a message says why), 2 for bad arguments or a missing extra (the message
says how to install it). Argument parsing needs none of the extra's modules.
"""
from __future__ import annotations

import datetime
import os
import re
import sys
import time

from .deps import MissingExtra, require


def parse_time(text: str) -> int:
    """ms since the epoch from `1732233600000`, `2026-11-22` or `2026-11-22T10:00:00+01:00`
    (a time without a zone is UTC). Raises ValueError."""
    if re.fullmatch(r"\d{10,}", text):
        return int(text)
    d = datetime.datetime.fromisoformat(text)
    if d.tzinfo is None:
        d = d.replace(tzinfo=datetime.timezone.utc)
    return int(d.timestamp() * 1000)


def parse_duration(text: str) -> int:
    """ms from `250ms`, `30s`, `5m`, `1h` or a bare number of ms. Raises ValueError."""
    m = re.fullmatch(r"(\d+)(ms|s|m|h)?", text.strip())
    if not m:
        raise ValueError(f"not a duration: {text!r} (e.g. 500ms, 30s, 5m, 1h)")
    return int(m.group(1)) * {None: 1, "ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}[m.group(2)]


def add_parsers(sub) -> None:
    """Add the export, analyze and enqueue sub-commands to the `jobgate` argparse subparsers."""
    e = sub.add_parser("export", help="export the job history to Parquet")
    e.add_argument("what", choices=["events"], help="what to export (job_events)")
    e.add_argument("--out", required=True, metavar="DIR")
    e.add_argument("--since", metavar="T")
    e.add_argument("--until", metavar="T")
    e.add_argument("--config", help="YAML config file (for the database URL)")
    e.add_argument("--database", metavar="URL", help="SQLAlchemy database URL")
    a = sub.add_parser("analyze", help="analyse the job history on Spark (report + tables)")
    a.add_argument("--out", required=True, metavar="DIR")
    a.add_argument("--config", help="YAML config file (for the database URL)")
    a.add_argument("--database", metavar="URL", help="SQLAlchemy database URL (JDBC source)")
    a.add_argument("--source", choices=["jdbc", "parquet"], default=None,
                   help="jdbc (default) or parquet (with --parquet)")
    a.add_argument("--parquet", metavar="DIR", help="a `jobgate export events` directory")
    a.add_argument("--master", metavar="URL", help="Spark master (default local[*])")
    a.add_argument("--window", default="1m", help="1m, 1h or 1d (default 1m)")
    a.add_argument("--sla-wait", default="60s",
                   help="a wait (enqueue to first reserve) longer than this breaches the SLA")
    a.add_argument("--since", metavar="T")
    a.add_argument("--until", metavar="T")
    a.add_argument("--shuffle-partitions", type=int, metavar="N")
    q = sub.add_parser("enqueue", help="turn each row of a Parquet or CSV dataset into a job")
    q.add_argument("--from", dest="source_path", required=True, metavar="PARQUET_OR_CSV")
    q.add_argument("--queue", required=True)
    q.add_argument("--server", default="127.0.0.1:6789", metavar="HOST:PORT",
                   help="jobgate's bunqueue listener")
    q.add_argument("--token", help="bunqueue auth token")
    q.add_argument("--id-column", metavar="C", help="a column that identifies each row")
    q.add_argument("--body-column", metavar="C", help="the column holding the job data "
                                                      "(default: the row as JSON)")
    q.add_argument("--run-id", default="", metavar="R",
                   help="a new run id enqueues the same rows again")
    q.add_argument("--master", metavar="URL", help="Spark master (default local[*])")


def _database(args) -> str:
    from gateway.config import load
    if getattr(args, "database", None):
        return args.database
    return load(getattr(args, "config", None)).database_url


def _export(args) -> int:
    from .export import export_events
    since = parse_time(args.since) if args.since else None
    until = parse_time(args.until) if args.until else None
    t = time.monotonic()
    r = export_events(_database(args), args.out, since, until)
    print(f"jobgate: exported {r.rows} events in {r.files} files to {args.out} "
          f"(watermark: event id {r.last_id}; {r.skipped} older than --since passed over) "
          f"in {time.monotonic() - t:.1f} s")
    return 0


def _analyze(args) -> int:
    from .analyze import analyze, parse_window
    from .report import write_report
    from .sources import jdbc_options, read_jdbc, read_parquet
    from .spark import session
    window_ms = parse_window(args.window)
    sla = parse_duration(args.sla_wait)
    since = parse_time(args.since) if args.since else None
    until = parse_time(args.until) if args.until else None
    source = args.source or ("parquet" if args.parquet else "jdbc")
    if source == "parquet" and not args.parquet:
        raise ValueError("--source parquet needs --parquet DIR")
    t = time.monotonic()
    if source == "jdbc":   # a bad source is reported before Spark starts (seconds)
        url = _database(args)
        jdbc_options(url)
        label = "jdbc:" + url.split("@")[-1]
    else:
        if not os.path.isdir(os.path.join(args.parquet, "events")):
            read_parquet(None, args.parquet)   # raises SourceError, saying what to run
        label = "parquet:" + args.parquet
    spark = session(args.master, shuffle_partitions=args.shuffle_partitions)
    if source == "jdbc":
        events = read_jdbc(spark, url, since, until)
    else:
        events = read_parquet(spark, args.parquet, since, until)
    result = analyze(events, window_ms, sla)
    os.makedirs(args.out, exist_ok=True)
    mpath, spath = os.path.join(args.out, "metrics"), os.path.join(args.out, "summary")
    result.metrics.coalesce(1).write.mode("overwrite").parquet(mpath)
    result.summary.coalesce(1).write.mode("overwrite").parquet(spath)
    metrics = [r.asDict() for r in spark.read.parquet(mpath).collect()]
    summary = [r.asDict() for r in spark.read.parquet(spath).collect()]
    n, t0, t1 = result.bounds.first()   # from the cache: the same rows as the tables
    result.release()
    report = write_report(args.out, metrics, summary,
                          {"source": label, "window": args.window, "sla_wait_ms": sla,
                           "events": n, "first_ms": t0, "last_ms": t1})
    print(f"jobgate: analysed {n} events ({len(summary)} queue x dialect keys, "
          f"{len(metrics)} windows) in {time.monotonic() - t:.1f} s; report: {report}")
    return 0


def _enqueue(args) -> int:
    from .fanout import FanoutError, enqueue
    from .spark import session
    spark = session(args.master)
    path = args.source_path
    is_csv = path.endswith(".csv") or (os.path.isdir(path) and any(
        f.endswith(".csv") for f in os.listdir(path)))
    df = (spark.read.option("header", True).csv(path) if is_csv else spark.read.parquet(path))
    t = time.monotonic()
    try:
        r = enqueue(df, args.queue, args.server, args.token, args.id_column, args.body_column,
                    args.run_id)
    except FanoutError as e:
        r = e.result
    dt = time.monotonic() - t
    print(f"jobgate: {r.rows} rows -> {r.pushed} jobs on {args.queue}, {r.errors} errors, "
          f"{r.reconnects} reconnects, in {dt:.1f} s")
    for s in r.samples:
        print(f"jobgate: error: {s}", file=sys.stderr)
    return 1 if r.errors else 0


def run(args) -> int:
    """Run the parsed sub-command; returns the exit status."""
    needs = {"export": ("pyarrow",), "analyze": ("pyspark", "matplotlib"),
             "enqueue": ("pyspark",)}[args.cmd]
    try:
        require(*needs)
    except MissingExtra as e:
        print(f"jobgate {args.cmd}: {e}", file=sys.stderr)
        return 2
    from .export import ExportError
    from .fanout import FanoutError
    from .sources import SourceError
    try:
        return {"export": _export, "analyze": _analyze, "enqueue": _enqueue}[args.cmd](args)
    except ValueError as e:   # bad --since / --window / --sla-wait, SourceError
        code = 1 if isinstance(e, SourceError) else 2
        print(f"jobgate {args.cmd}: {e}", file=sys.stderr)
        return code
    except (ExportError, FanoutError) as e:
        print(f"jobgate {args.cmd}: {e}", file=sys.stderr)
        return 1
