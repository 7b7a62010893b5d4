#!/usr/bin/env python3
"""bunqueue load benchmark: jobgate's bunqueue listener against the real bunqueue server (Bun),
with SQLite on disk and in memory, in the same run.

Raw sockets, 127.0.0.1 only, the `msgpack` package; never part of the test run. Every run of
every cell starts a fresh server on free ports with a fresh temp dir and stops it by PID.

Targets (commands in BUNQUEUE_TARGETS; `--target NAME=CMD` adds or overrides one):
  jobgate          gateway.cli serve, bunqueue and beanstalk listeners, SQLite, durability commit
  bunqueue-disk    the real server: `bunqueue start --data-path {DIR}/bunqueue.db`
  bunqueue-memory  the real server without a data path (its in-memory mode)
  jobgate-buffered, jobgate-memory  optional: jobgate with durability buffered / memory

Workloads (job data: a 100-character string; one queue per connection; bunqueue_client.py):
  push        PUSH, one job per command
  pushb       PUSHB of --batch (100) jobs per command
  pull-ack    PULL + ACK per job, on a queue pre-filled with PUSHB (not timed)
  pullb-ackb  PULLB of --batch jobs + one ACKB of their ids, on a pre-filled queue

Each connection (its own client process; --connections 1,4) keeps --window (50) commands in
flight, matched to replies by reqId. Before the timed part it warms the server up with the same
workload on a queue and connection of its own (--warmup 20000 jobs, at most --warmup-seconds 3;
Bun's JIT makes a cold bunqueue up to 3x slower). A cell then moves exactly --jobs jobs (split
evenly over the connections, in whole batches), and every connection checks afterwards that it
did: every reply ok:true, every pulled job acked and carrying its data, the queue empty (pull
workloads) or holding every pushed job (GetJobCounts).

    .venv/bin/python benchmarks/bunqueue_load.py --repeat 1
    .venv/bin/python benchmarks/bunqueue_load.py --targets bunqueue-disk,bunqueue-memory \\
        --npm-dir /path/with/node_modules --jobs 20000 --json /tmp/bq.json
See benchmarks/README.md.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys

from beanstalk_load import run_cell, run_targets
from bench_common import REPO_ROOT
from bench_report import finish, print_markdown_side_by_side, print_tables, run_meta
from bench_servers import (add_run_args, add_server_args, comma_list, connection_counts,
                           install_signal_cleanup, resolve_targets, run_guarded)
from bunqueue_client import (BUNQUEUE_WORKLOADS, COMMANDS_PER_JOB, DATA, DEFAULT_WINDOW,
                             PULL_WORKLOADS, bunqueue_client_proc)

_JOBGATE = ("{PYTHON} -m gateway.cli serve --listen bunqueue=127.0.0.1:{PORT}"
            " --listen beanstalk=127.0.0.1:{BEANSTALK_PORT}")
# The real server, `bunqueue start` run by Bun. Without a data path it keeps everything in
# memory; the environment could set one (or a storage driver, or auth tokens), so those variables
# are removed. Its per-connection rate limit (10,000 commands per 60 s by default,
# infrastructure/server/rateLimiter.js) would stop every cell after 10,000 commands: lifted.
_BUNQUEUE = ("env -u BUNQUEUE_DATA_PATH -u BQ_DATA_PATH -u DATA_PATH -u SQLITE_PATH"
             " -u BUNQUEUE_STORAGE_DRIVER -u BUNQUEUE_POSTGRES_URL -u AUTH_TOKENS"
             " RATE_LIMIT_MAX_REQUESTS=1000000000"
             " {BUN} {BUNQUEUE} start --host 127.0.0.1 --tcp-port {PORT} --http-port {HTTP_PORT}")
BUNQUEUE_TARGETS = {
    "jobgate": _JOBGATE + " --database sqlite:///{DIR}/jg.db --durability commit",
    "jobgate-buffered": _JOBGATE + " --database sqlite:///{DIR}/jg.db --durability buffered",
    "jobgate-memory": _JOBGATE + " --durability memory",
    "bunqueue-disk": _BUNQUEUE + " --data-path {DIR}/bunqueue.db",
    "bunqueue-memory": _BUNQUEUE,
}
RATIOS = (("jobgate", "bunqueue-disk"), ("jobgate", "bunqueue-memory"),
          ("jobgate-buffered", "bunqueue-disk"), ("jobgate-memory", "bunqueue-memory"))
MODE = "pipelined"
NPM_DIR = os.path.join(REPO_ROOT, "tests", "bunqueue_client")   # package.json: bun + bunqueue


def workload_label(batch: int, window: int):
    names = {"push": "PUSH", "pushb": f"PUSHB x{batch}", "pull-ack": "PULL+ACK",
             "pullb-ackb": f"PULLB x{batch}+ACKB"}

    def label(w: str, mode: str) -> str:
        return f"{names.get(w, w)} / win{window}"
    return label


def jobs_per_connection(jobs: int, conns: int, batch: int) -> int:
    """--jobs (per cell) split over the connections, rounded up to whole batches."""
    return max(1, math.ceil(jobs / conns / batch)) * batch


def bunqueue_cell(w: str, conns: int, args):
    """cell(server) for run_one: workload w on the server's bunqueue port ({PORT})."""
    per_conn = jobs_per_connection(args.jobs, conns, args.batch)
    cell_args = argparse.Namespace(**vars(args))
    cell_args.jobs = per_conn

    def cell(srv):
        r = run_cell(srv, w, True, conns, cell_args, per_conn if w in PULL_WORKLOADS else 0,
                     proc=bunqueue_client_proc, commands_per_job=COMMANDS_PER_JOB[w](args.batch),
                     spec_extra={"window": args.window, "warmup": args.warmup,
                                 "warmup_seconds": args.warmup_seconds})
        r["window"] = args.window
        r["jobs_per_connection"] = per_conn
        if not r.get("error"):
            r["latency_unit"] = "command"
            r["verified"] = True    # check_bunqueue raised otherwise
            if any(c.get("counts") is None for c in r.get("checks") or [{}]):
                r["note"] = "GetJobCounts n/a"
        return r
    return cell


def _version(argv: list[str]) -> str | None:
    try:
        out = subprocess.run(argv, capture_output=True, timeout=10, text=True)
        return (out.stdout or out.stderr).strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def _bunqueue_version(cli: str) -> str | None:
    try:
        with open(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(cli))),
                               "package.json")) as f:
            return json.load(f).get("version")
    except (OSError, ValueError):
        return None


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="See benchmarks/README.md.")
    add_server_args(ap, "jobgate,bunqueue-disk,bunqueue-memory", BUNQUEUE_TARGETS)
    ap.add_argument("--npm-dir", default=os.environ.get("BUNQUEUE_NPM_DIR", NPM_DIR),
                    help="a directory whose node_modules holds the npm packages `bun` and "
                         "`bunqueue` ({BUN}, {BUNQUEUE} in the commands; default "
                         "$BUNQUEUE_NPM_DIR or %(default)s)")
    ap.add_argument("--jobs", type=int, default=20000,
                    help="jobs per cell, split evenly over its connections (rounded up to "
                         "whole batches); the pull workloads pre-fill exactly that many "
                         "(default %(default)s)")
    ap.add_argument("--workloads", default=",".join(BUNQUEUE_WORKLOADS),
                    help="comma-separated subset of " + ", ".join(BUNQUEUE_WORKLOADS))
    ap.add_argument("--window", type=int, default=DEFAULT_WINDOW,
                    help="commands in flight per connection (default %(default)s: the real "
                         "server runs 50 of a connection's commands at once)")
    ap.add_argument("--warmup", type=int, default=20000, metavar="JOBS",
                    help="before the timed part, each connection runs the workload for up to "
                         "JOBS jobs on a queue and connection of its own, not timed; Bun's JIT "
                         "needs it (0: none; default %(default)s)")
    ap.add_argument("--warmup-seconds", type=float, default=3.0,
                    help="time cap of the warm-up (default %(default)s)")
    add_run_args(ap, repeat=3, batch_help="jobs per PUSHB, PULLB and ACKB (default 100)")
    args = ap.parse_args(argv)
    args.shared_tube = False   # run_cell reads these beanstalk options
    args.duration = None
    if args.jobs <= 0 or args.repeat < 1 or args.batch < 1 or args.window < 1:
        raise SystemExit("--jobs, --repeat, --batch and --window must be positive")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    names, templates, subst = resolve_targets(args, BUNQUEUE_TARGETS)
    modules = os.path.join(os.path.abspath(args.npm_dir), "node_modules")
    subst["BUN"] = os.path.join(modules, ".bin", "bun")
    subst["BUNQUEUE"] = os.path.join(modules, "bunqueue", "dist", "cli", "index.js")
    for n in names:
        if "{BUN" in templates[n] and not (os.path.exists(subst["BUN"])
                                           and os.path.exists(subst["BUNQUEUE"])):
            raise SystemExit(f"target {n!r} needs bun and bunqueue in {modules} (npm install bun "
                             "bunqueue there, or pass --npm-dir)")
    conn_list = connection_counts(args.connections)
    workloads = comma_list(args.workloads, BUNQUEUE_WORKLOADS)

    install_signal_cleanup()
    meta = run_meta(args, names, templates, bun=_version([subst["BUN"], "--version"]),
                    bunqueue=_bunqueue_version(subst["BUNQUEUE"]),
                    data=f"a {len(DATA)}-character string", window=args.window,
                    jobs_per_cell=args.jobs, warmup_jobs=args.warmup,
                    warmup_seconds=args.warmup_seconds)
    results: list[dict] = []
    failed_start: dict[str, str] = {}

    def run_all():
        for conns in conn_list:
            for w in workloads:
                run_targets(names, templates, subst, w, MODE, conns, args, results,
                            failed_start, cell=bunqueue_cell(w, conns, args))
    run_guarded(run_all)

    meta["loadavg_end"] = os.getloadavg()
    label = workload_label(args.batch, args.window)
    print_tables(results, names, RATIOS, label=label,
                 latency_note="per command, send to reply, with the window in flight")
    print(f"\njobs/s, median of {args.repeat} run(s), {args.jobs:,} jobs per cell, "
          f"{len(DATA)}-character data, {args.window} commands in flight per connection:\n")
    print_markdown_side_by_side(results, names, RATIOS, label=label)
    return finish(args.json, {"meta": meta, "results": results}, results)


if __name__ == "__main__":
    sys.exit(main())
