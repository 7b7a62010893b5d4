#!/usr/bin/env python3
"""glide-mq producer benchmark: pipelined `FCALL glidemq_addJob` against Redis 7 running
glide-mq's own function library, and against jobgate's RESP listener (dialect `glidemq`) in its
three durability modes, in the same run.

Raw sockets, 127.0.0.1 only, standard library only; never part of the test run. Every run of
every cell starts a fresh server on a free port with a fresh temp dir and stops it by PID.

Targets (commands in GLIDEMQ_TARGETS; `--target NAME=CMD` adds or overrides one):
  redis             redis-server, AOF on (`--appendonly yes --appendfsync everysec`), no RDB
                    snapshots, with glide-mq's library loaded by FUNCTION LOAD REPLACE
  jobgate           gateway.cli serve --listen glidemq=..., SQLite, durability commit (default)
  jobgate-buffered  the same with --durability buffered
  jobgate-memory    --durability memory
  redis-always, redis-memory  optional: AOF with appendfsync always / no persistence at all
The library comes from --library FILE or a local glide-mq git snapshot (--glidemq-git;
glidemq_library.py) and is never written to disk here. Without it the Redis targets are skipped.
A target whose `FCALL glidemq_version 0` does not answer the library's version gets the library
loaded, as glide-mq's client does on connect.

Workloads (glidemq_client.py): add (21-argument v93 form, opts {}), add-delayed (delay 60 s),
add-custom (a unique custom id per job), add-17 (the seed's 17-argument form). Each connection
writes --pipeline (100) FCALLs at once and reads their replies, for --duration seconds; every
reply must be a bulk job id. All connections of a cell add to one queue; afterwards the queue
must hold exactly the jobs acknowledged (XLEN / ZCARD, and GET of the id counter for auto ids).

    .venv/bin/python benchmarks/glidemq_bench.py                           # ~1.5 min
    .venv/bin/python benchmarks/glidemq_bench.py --targets redis --workloads add --repeat 5
See benchmarks/README.md.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from beanstalk_load import run_cell, run_targets
from bench_common import BenchError
from bench_report import finish, print_markdown_side_by_side, print_tables, run_meta
from bench_servers import (add_run_args, add_server_args, comma_list, connection_counts,
                           install_signal_cleanup, resolve_targets, run_guarded)
from glidemq_client import (DATA, DELAY_MS, GLIDEMQ_WORKLOADS, GlideClient, RespError,
                            glidemq_client_proc, queue_keys)
from glidemq_library import DEFAULT_GIT_DIR, Library, find_library

_REDIS = ("{REDIS} --port {PORT} --bind 127.0.0.1 --dir {DIR} --daemonize no --save ''"
          " --logfile ''")
_JOBGATE = "{PYTHON} -m gateway.cli serve --listen glidemq=127.0.0.1:{PORT}"
GLIDEMQ_TARGETS = {
    "redis": _REDIS + " --appendonly yes --appendfsync everysec",
    "jobgate": _JOBGATE + " --database sqlite:///{DIR}/jobgate.db",
    "jobgate-buffered": _JOBGATE + " --database sqlite:///{DIR}/jobgate.db --durability buffered",
    "jobgate-memory": _JOBGATE + " --durability memory",
    "redis-always": _REDIS + " --appendonly yes --appendfsync always",
    "redis-memory": _REDIS + " --appendonly no",
}
RATIOS = (("jobgate", "redis"), ("jobgate-buffered", "redis"), ("jobgate-memory", "redis"),
          ("jobgate", "redis-always"), ("jobgate-memory", "redis-memory"))
GOAL = ("jobgate", "redis", 1.0)     # issue 17: commit mode >= Redis with appendfsync everysec
MODE = "pipelined"
LABELS = {"add": "addJob", "add-delayed": "addJob delay 60s", "add-custom": "addJob custom id",
          "add-17": "addJob 17-arg"}


def workload_label(batch: int):
    def label(w: str, mode: str) -> str:
        return f"{LABELS.get(w, w)} / pipe{batch}"
    return label


def is_redis(template: str) -> bool:
    return "{REDIS}" in template or "redis-server" in template


def ensure_library(c: GlideClient, lib: Library | None) -> str:
    """Make glidemq_* callable on the server behind c, as glide-mq's client does on connect:
    `FCALL glidemq_version 0`; when that errors or names another version than lib's, `FUNCTION
    LOAD REPLACE` lib and ask again. Returns the version the server answers. BenchError when
    no library is loaded and none is at hand, or the load fails."""
    v = c.call(b"FCALL", b"glidemq_version", b"0")
    if isinstance(v, bytes) and (lib is None or lib.version in (None, v.decode())):
        return v.decode()
    if lib is None:
        raise BenchError(f"FCALL glidemq_version answered {v!r} and no glide-mq library is "
                         "available to load (--library / --glidemq-git)")
    r = c.call(b"FUNCTION", b"LOAD", b"REPLACE", lib.text.encode("utf-8"))
    if r != b"glidemq":
        raise BenchError(f"FUNCTION LOAD REPLACE: {r!r}"[:300])
    v = c.call(b"FCALL", b"glidemq_version", b"0")
    if not isinstance(v, bytes):
        raise BenchError(f"FCALL glidemq_version after the load: {v!r}")
    return v.decode()


def check_queue(c: GlideClient, w: str, queue: str, jobs: int) -> dict:
    """After a cell: does the queue hold exactly the `jobs` acknowledged? XLEN of the stream
    (ZCARD of the scheduled zset for add-delayed) and, for auto ids, GET of the id counter.
    Raises BenchError on a mismatch; a server that answers a read with an error reply is noted
    as "n/a" (jobgate may not serve that key yet), not failed."""
    k_id, k_stream, k_sched, _ = queue_keys(queue)
    reads = [("ZCARD scheduled", (b"ZCARD", k_sched)) if w == "add-delayed"
             else ("XLEN stream", (b"XLEN", k_stream))]
    if w != "add-custom":
        reads.append(("GET id", (b"GET", k_id)))
    out: dict = {"jobs": jobs}
    for name, cmd in reads:
        r = c.call(*cmd)
        if isinstance(r, RespError):
            out[name] = "n/a"
            continue
        got = int(r) if r is not None else 0
        out[name] = got
        if got != jobs:
            raise BenchError(f"{w}: {jobs} jobs acknowledged, {name} says {got}")
    first = b"j0-1" if w == "add-custom" else b"1"
    r = c.call(b"HGET", k_id[:-2] + b"job:" + first, b"data")
    out["HGET job data"] = "n/a" if isinstance(r, RespError) else r == DATA
    if r is not None and not isinstance(r, RespError) and r != DATA:
        raise BenchError(f"{w}: job {first.decode()}'s data is {r[:120]!r}, sent {DATA[:40]!r}...")
    if jobs and r is None:
        raise BenchError(f"{w}: no job {first.decode()} after {jobs} jobs")
    return out


def glidemq_cell(w: str, conns: int, args, lib: Library | None):
    """cell(server) for run_one: load/check the library, run workload w with `conns`
    connections on one fresh queue, then check the queue."""
    def cell(srv):
        queue = f"bench-{os.getpid()}-{time.monotonic_ns() % 10**9}"
        try:
            c = GlideClient(srv.port, args.io_timeout)
            try:
                c.hello(args.protocol)
                version = ensure_library(c, lib)
            finally:
                c.close()
        except (BenchError, OSError) as e:
            return {"target": srv.name, "workload": w, "mode": MODE, "connections": conns,
                    "error": f"set-up: {e}"[:500], "server_log_tail": srv.log_tail(800)}
        r = run_cell(srv, w, True, conns, args, 0, proc=glidemq_client_proc, commands_per_job=1,
                     spec_extra={"queue": queue, "protocol": args.protocol})
        r["library_version"] = version
        if r.get("error"):
            return r
        try:
            c = GlideClient(srv.port, args.io_timeout)
            try:
                c.hello(args.protocol)
                r["checks"] = check_queue(c, w, queue, r["jobs"])
            finally:
                c.close()
        except (BenchError, OSError) as e:
            r["error"] = f"check: {e}"[:500]
            return r
        if "n/a" in r["checks"].values():
            r["note"] = "counts n/a"
        return r
    return cell


def goal_rows(results: list[dict], names: list[str]) -> list[tuple]:
    """(workload, conns, jobgate jobs/s, redis jobs/s, ratio or None) for GOAL's pair."""
    a, b, _ = GOAL
    if a not in names or b not in names:
        return []
    by = {(r["workload"], r["connections"], r["target"]): r for r in results}
    rows = []
    for (w, conns, t), r in by.items():
        if t != a:
            continue
        x = r.get("jobs_per_s")
        y = (by.get((w, conns, b)) or {}).get("jobs_per_s")
        rows.append((w, conns, x, y, round(x / y, 3) if x and y else None))
    return rows


def _version(argv: list[str]) -> str | None:
    try:
        out = subprocess.run(argv, capture_output=True, timeout=10, text=True)
        return (out.stdout or out.stderr).strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="See benchmarks/README.md.")
    add_server_args(ap, "redis,jobgate,jobgate-buffered,jobgate-memory", GLIDEMQ_TARGETS)
    ap.add_argument("--redis-server", default="/usr/bin/redis-server",
                    help="redis-server binary, {REDIS} in the commands (default %(default)s)")
    ap.add_argument("--library", default=None, metavar="FILE",
                    help="glide-mq's function library (the text FUNCTION LOAD takes)")
    ap.add_argument("--glidemq-git", default=None, metavar="DIR",
                    help="a git directory of glide-mq to take the library from (its HEAD's "
                         f"src/functions/index.ts); default {DEFAULT_GIT_DIR} when it exists")
    ap.add_argument("--duration", type=float, default=3.0,
                    help="seconds per run (default %(default)s)")
    ap.add_argument("--workloads", default=",".join(GLIDEMQ_WORKLOADS),
                    help="comma-separated subset of " + ", ".join(GLIDEMQ_WORKLOADS))
    ap.add_argument("--protocol", type=int, choices=(2, 3), default=3,
                    help="3: each connection sends HELLO 3 first, as glide-mq's client does; "
                         "2: stays on RESP2 (default %(default)s)")
    add_run_args(ap, repeat=3, batch_help="FCALLs per write (default 100)")
    ap.add_argument("--pipeline", dest="batch", type=int, metavar="N",
                    help="the same as --batch: FCALLs per write")
    ap.set_defaults(connections="1")
    args = ap.parse_args(argv)
    args.shared_tube = True    # run_cell reads these beanstalk options; the queue is shared
    args.jobs = None
    if args.repeat < 1 or args.batch < 1 or args.duration <= 0:
        raise SystemExit("--repeat, --pipeline and --duration must be positive")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    names, templates, subst = resolve_targets(args, GLIDEMQ_TARGETS)
    subst["REDIS"] = args.redis_server
    lib, lib_msg = find_library(args.library, args.glidemq_git)
    print(f"# {lib_msg}", file=sys.stderr)
    if lib is None:
        skipped = [n for n in names if is_redis(templates[n])]
        if skipped:
            print(f"# skipping {', '.join(skipped)}: Redis needs glide-mq's library; give "
                  "--library FILE or --glidemq-git DIR", file=sys.stderr)
        names = [n for n in names if n not in skipped]
        if not names:
            raise SystemExit("nothing to run")
    conn_list = connection_counts(args.connections)
    workloads = comma_list(args.workloads, GLIDEMQ_WORKLOADS)

    install_signal_cleanup()
    meta = run_meta(args, names, templates, duration=args.duration, protocol=args.protocol,
                    data_bytes=len(DATA), delay_ms=DELAY_MS,
                    redis=_version([args.redis_server, "--version"]),
                    library=lib and lib.origin, library_version=lib and lib.version)
    results: list[dict] = []
    failed_start: dict[str, str] = {}

    def run_all():
        for conns in conn_list:
            for w in workloads:
                run_targets(names, templates, subst, w, MODE, conns, args, results,
                            failed_start, cell=glidemq_cell(w, conns, args, lib))
    run_guarded(run_all)

    meta["loadavg_end"] = os.getloadavg()
    label = workload_label(args.batch)
    print_tables(results, names, RATIOS, label=label,
                 latency_note=f"per batch of {args.batch}, write to last reply")
    print(f"\njobs/s, median of {args.repeat} run(s) of {args.duration:g} s, {len(DATA)}-byte "
          f"data, {args.batch} FCALLs per write, one queue:\n")
    print_markdown_side_by_side(results, names, RATIOS, label=label)
    goals = goal_rows(results, names)
    if goals:
        a, b, goal = GOAL
        print(f"\ngoal (issue 17): {a} / {b} >= {goal}")
        for w, conns, x, y, ratio in goals:
            met = "-" if ratio is None else ("met" if ratio >= goal else "NOT met")
            print(f"  {label(w, MODE):<28} c={conns}: "
                  f"{'-' if ratio is None else f'{ratio:.2f}'}  {met}")
    return finish(args.json, {"meta": meta, "results": results, "goal": goals}, results)


if __name__ == "__main__":
    sys.exit(main())
