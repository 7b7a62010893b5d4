#!/usr/bin/env python3
"""The pipeline at scale: `analyze` over 10 million synthetic events on local[2] (events/s, peak
driver memory) and the fan-out of 100,000 rows to a jobgate server (jobs/s).

1. Events. --events synthetic job_events rows (benchmarks/pipeline_synth.py: numpy + pyarrow) in a
   child process (so the driver's peak RSS is not the generator's): --queues queues over --days
   days (daily cycle); each job follows a lifecycle of its dialect (LIFECYCLE_TEXT: retries,
   timeouts, delays, burials, dlq, timer events as dialect `jobgate`); ids and job ids grow with
   time; events past the first --events in time order are cut (jobs still in flight). Written as
   `jobgate export events` writes (`WORKDIR/events-.../events/date=D/queue=Q/`, one file per
   --chunk ids and partition) and kept: a rerun with the same parameters reuses it. Generation
   time is reported, never timed in.
2. Analysis (timed): pipeline.sources.read_parquet, pipeline.analyze.analyze(--window-ms,
   --sla-wait-ms), metrics and summary written to Parquet as `jobgate analyze` does. events/s =
   events / those seconds; the SparkSession start (JVM launch) is reported apart. Peak memory of
   the driver: VmHWM of the driver JVM (local mode: driver and executors are that one process),
   and ru_maxrss of this Python process. The summary's totals are checked against the counts
   the generator wrote (enqueued, started, completed, failed, timed_out, buried).
3. Fan-out (timed): a fresh jobgate server (`gateway.cli serve`, bunqueue and beanstalk
   listeners, SQLite file, durability commit) on free ports; pipeline.enqueue of a --rows-row
   DataFrame (--fanout-partitions partitions) to queue `bench-fanout`; jobs/s = rows / seconds;
   then `stats-tube bench-fanout` (greenstalk) must say current-jobs-ready == rows. The server
   is stopped by PID and its temp dir removed.

Never part of the test run. From the repository root:

    .venv/bin/python benchmarks/pipeline_bench.py              # 10M events, 100k rows: ~1.5 min
    .venv/bin/python benchmarks/pipeline_bench.py --events 200000 --rows 5000   # quick, ~35 s
    .venv/bin/python benchmarks/pipeline_bench.py --driver-memory 8g --json /tmp/pipeline.json
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import shutil
import subprocess
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(BENCH_DIR)
sys.path.insert(0, BENCH_DIR)
sys.path.insert(1, REPO_ROOT)
from bench_servers import Server, child_pids, proc_status_kb  # noqa: E402  (same directory)
from pipeline_synth import generate  # noqa: E402  (same directory)

CHECKED = ("enqueued", "started", "completed", "failed", "timed_out", "buried")



def ensure_tree(args) -> tuple[str, dict, bool]:
    """(tree dir, marker, reused?): generate in a child process unless the tree is cached."""
    tree = os.path.join(args.workdir, f"events-{args.events}-q{args.queues}-d{args.days}"
                                      f"-s{args.seed}-c{args.chunk}")
    marker_path = os.path.join(tree, "_bench_generated.json")
    if os.path.exists(marker_path):
        with open(marker_path) as f:
            return tree, json.load(f), True
    shutil.rmtree(tree, ignore_errors=True)   # a half-written tree from an interrupted run
    os.makedirs(tree)
    cmd = [sys.executable, os.path.abspath(__file__), "--generate-only", tree,
           "--events", str(args.events), "--queues", str(args.queues), "--days", str(args.days),
           "--seed", str(args.seed), "--chunk", str(args.chunk)]
    print(f"generating {args.events:,} events into {tree} ...", flush=True)
    subprocess.run(cmd, check=True, cwd=REPO_ROOT)
    with open(marker_path) as f:
        return tree, json.load(f), False


# ----------------------------------------------------------------------------- measuring
def hwm_mib(pid) -> float:
    """Peak RSS (VmHWM) of a process in MiB, 0 when it cannot be read."""
    return round(proc_status_kb(pid).get("VmHWM", 0) / 1024, 1) if pid else 0.0


def jvm_pid(spark) -> int | None:
    """The driver JVM's pid: asked of the JVM, else the `java` child of this process."""
    try:
        return int(spark._jvm.java.lang.ProcessHandle.current().pid())
    except Exception:
        for k in child_pids(os.getpid()):
            with open(f"/proc/{k}/comm") as f:
                if f.read().strip() == "java":
                    return k
    return None


def run_analysis(spark, tree: str, marker: dict, args) -> dict:
    """The timed analysis; returns seconds, events/s and the check of the summary's totals."""
    from pyspark.sql import functions as F

    from pipeline.analyze import analyze
    from pipeline.sources import read_parquet
    out = os.path.join(args.workdir, "report")
    mpath, spath = os.path.join(out, "metrics"), os.path.join(out, "summary")
    t = time.monotonic()
    events = read_parquet(spark, tree)
    result = analyze(events, args.window_ms, args.sla_wait_ms)
    os.makedirs(out, exist_ok=True)
    result.metrics.coalesce(1).write.mode("overwrite").parquet(mpath)
    result.summary.coalesce(1).write.mode("overwrite").parquet(spath)
    secs = time.monotonic() - t
    summary = spark.read.parquet(spath)
    totals = summary.agg(*[F.sum(k).alias(k) for k in CHECKED]).first().asDict()
    check = {k: (int(totals[k] or 0), marker["expected"][k]) for k in CHECKED}
    return {"events": marker["events"], "seconds": round(secs, 2),
            "events_per_s": round(marker["events"] / secs),
            "metrics_rows": spark.read.parquet(mpath).count(), "summary_rows": summary.count(),
            "check_ok": all(a == b for a, b in check.values()),
            "check": {k: {"summary": a, "generated": b} for k, (a, b) in check.items()}}


def run_fanout(spark, args) -> dict:
    """Start a jobgate server, enqueue --rows rows, count the jobs; the server is always stopped."""
    import greenstalk
    from pyspark.sql import functions as F

    import pipeline
    cmd = ("{PYTHON} -m gateway.cli serve --listen bunqueue=127.0.0.1:{PORT}"
           " --listen beanstalk=127.0.0.1:{BEANSTALK_PORT} --database sqlite:///{DIR}/jobgate.db")
    srv = Server("pipeline-fanout", cmd, {"PYTHON": sys.executable}, args.ready_timeout)
    srv.start()
    try:
        df = spark.range(0, args.rows, numPartitions=args.fanout_partitions).select(
            F.col("id"), F.concat(F.lit("s3://bucket/images/"), F.col("id"), F.lit(".jpg")).alias("path"),
            (F.col("id") % 5000).alias("size_kb"), F.lit("resize-512").alias("op"))
        t = time.monotonic()
        r = pipeline.enqueue(df, "bench-fanout", f"127.0.0.1:{srv.port}", id_column="id")
        secs = time.monotonic() - t
        c = greenstalk.Client(("127.0.0.1", srv.ports["BEANSTALK_PORT"]))
        try:
            ready = int(c.stats_tube("bench-fanout")["current-jobs-ready"])
        finally:
            c.close()
        return {"rows": args.rows, "seconds": round(secs, 2), "jobs_per_s": round(args.rows / secs),
                "pushed": r.pushed, "errors": r.errors, "reconnects": r.reconnects,
                "current_jobs_ready": ready, "check_ok": ready == args.rows == r.pushed,
                "server_peak_rss_mib": hwm_mib(srv.pid)}
    finally:
        srv.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default, what in (("events", 10_000_000, "synthetic events"), ("queues", 20, "queues"),
                                ("days", 7, "days the events span"), ("seed", 1, "generator seed"),
                                ("rows", 100_000, "fan-out rows"),
                                ("fanout-partitions", 2, "partitions of the fan-out DataFrame"),
                                ("window-ms", 3_600_000, "analysis window, ms"),
                                ("sla-wait-ms", 60_000, "SLA wait, ms")):
        ap.add_argument("--" + name, type=int, default=default, help=what + " (%(default)s)")
    ap.add_argument("--chunk", type=int, default=None,
                    help="ids per export window: one file per window and partition "
                         "(default pipeline.export.CHUNK)")
    ap.add_argument("--workdir", default="/tmp/jobgate-pipeline-bench",
                    help="keeps the generated tree between runs, and the report (%(default)s)")
    ap.add_argument("--master", default="local[2]", help="Spark master (%(default)s)")
    ap.add_argument("--driver-memory", default="4g", help="spark.driver.memory (%(default)s)")
    ap.add_argument("--shuffle-partitions", type=int, default=None,
                    help="default: pipeline.spark's (4 per local core)")
    ap.add_argument("--skip-analysis", action="store_true")
    ap.add_argument("--skip-fanout", action="store_true")
    ap.add_argument("--ready-timeout", type=float, default=30.0, help="server start, seconds")
    ap.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    ap.add_argument("--generate-only", metavar="TREE", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.chunk is None:
        from pipeline.export import CHUNK
        args.chunk = CHUNK
    if args.generate_only:
        m = generate(args.generate_only, args.events, args.queues, args.days, args.seed, args.chunk)
        print(f"generated {m['events']:,} events of {m['jobs']:,} jobs in {m['files']} files in "
              f"{m['generate_s']} s (arrays {m['arrays_s']} s), peak RSS "
              f"{m['generator_peak_rss_mib']} MiB", flush=True)
        return 0

    wall = time.monotonic()
    res: dict = {"argv": sys.argv[1:], "master": args.master, "driver_memory": args.driver_memory,
                 "cpus": os.cpu_count(), "started": datetime.datetime.now().isoformat(timespec="seconds")}
    from pipeline.spark import session
    conf = {"spark.driver.memory": args.driver_memory}
    t = time.monotonic()
    spark = session(args.master, shuffle_partitions=args.shuffle_partitions, conf=conf)
    try:
        res["session_start_s"] = round(time.monotonic() - t, 2)
        pid = jvm_pid(spark)
        rt = spark._jvm.java.lang.Runtime.getRuntime()
        res["jvm"] = {"pid": pid, "heap_max_mib": round(rt.maxMemory() / 2**20),
                      "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions")}
        if not args.skip_analysis:
            tree, marker, reused = ensure_tree(args)
            res["generation"] = {k: marker[k] for k in ("events", "jobs", "files", "generate_s",
                                                         "generator_peak_rss_mib", "first_ms",
                                                         "last_ms")}
            res["generation"].update(tree=tree, reused=reused)
            res["analysis"] = run_analysis(spark, tree, marker, args)
            res["analysis"]["jvm_peak_rss_mib"] = hwm_mib(pid)
            res["analysis"]["python_peak_rss_mib"] = round(
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        if not args.skip_fanout:
            res["fanout"] = run_fanout(spark, args)
        res["jvm"]["peak_rss_mib_at_end"] = hwm_mib(pid)
    finally:
        spark.stop()
    res["python_peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    res["wall_s"] = round(time.monotonic() - wall, 1)
    print_table(res)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    ok = res.get("analysis", {}).get("check_ok", True) and res.get("fanout", {}).get("check_ok", True)
    return 0 if ok else 1


def print_table(res: dict) -> None:
    print(f"\nmaster {res['master']}, spark.driver.memory {res['driver_memory']} (JVM heap max "
          f"{res['jvm']['heap_max_mib']} MiB), shuffle partitions {res['jvm']['shuffle_partitions']}, "
          f"{res['cpus']} CPUs; SparkSession start {res['session_start_s']} s")
    g = res.get("generation")
    if g:
        how = "reused from the cache, generated" if g["reused"] else "generated"
        print(f"events: {g['events']:,} of {g['jobs']:,} jobs in {g['files']} files, {how} in "
              f"{g['generate_s']} s (generator peak RSS {g['generator_peak_rss_mib']} MiB); {g['tree']}")
    a = res.get("analysis")
    if a:
        print("\n| analysis | events | seconds | events/s | JVM peak RSS MiB | Python peak RSS MiB |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        print(f"| read_parquet + analyze + write | {a['events']:,} | {a['seconds']} | "
              f"{a['events_per_s']:,} | {a['jvm_peak_rss_mib']:,} | {a['python_peak_rss_mib']:,} |")
        print(f"metrics rows {a['metrics_rows']:,}, summary rows {a['summary_rows']}; totals check "
              + ("ok" if a["check_ok"] else "MISMATCH " + json.dumps(a["check"])))
    f = res.get("fanout")
    if f:
        print("\n| fan-out | rows | seconds | jobs/s | pushed | errors | current-jobs-ready |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        print(f"| pipeline.enqueue -> jobgate (SQLite, commit) | {f['rows']:,} | {f['seconds']} | "
              f"{f['jobs_per_s']:,} | {f['pushed']:,} | {f['errors']} | {f['current_jobs_ready']:,} |")
        print(f"server peak RSS {f['server_peak_rss_mib']} MiB; check "
              + ("ok" if f["check_ok"] else "MISMATCH"))
    print(f"\nJVM peak RSS at the end {res['jvm']['peak_rss_mib_at_end']} MiB; "
          f"Python peak RSS {res['python_peak_rss_mib']} MiB; total wall time {res['wall_s']} s")


if __name__ == "__main__":
    sys.exit(main())
