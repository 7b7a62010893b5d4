#!/usr/bin/env python3
"""workq against beanstalk on one jobgate server: is the workq dialect as fast as beanstalk?

Standard library only, raw sockets, 127.0.0.1 only. Never part of the test run.

Every run starts one jobgate server with both listeners (beanstalk on {PORT}, workq on
{WORKQ_PORT}; default target `jobgate`: durability commit, SQLite on disk), runs one workload on
one of them, and stops it (fresh server, fresh database per run). Pipelined, 100 commands per
write, 100-byte payloads, one queue/tube per connection, 1 and 4 connections (one client process
each). Workloads, paired:

  beanstalk put             vs  workq add             (1 round trip per batch)
  beanstalk reserve-delete  vs  workq lease-complete  (2 round trips per batch: 100 reserves /
                                                       leases, then 100 deletes / completes)

The beanstalk side is the beanstalk benchmark's own client (bench_client.py); the workq side is
workq_client.py. reserve-delete and lease-complete run on a pre-filled tube/queue (filled through
the same dialect, not timed). Reported: jobs/s per workload (median of --repeat runs) and the
ratios workq add / beanstalk put (goal >= 0.9) and workq lease+complete / beanstalk
reserve+delete (goal >= 0.8), per connection count, as a markdown table.

    .venv/bin/python benchmarks/workq_load.py                       # jobgate, ~5 min
    .venv/bin/python benchmarks/workq_load.py --targets jobgate,jobgate-memory --json /tmp/wq.json
See benchmarks/README.md.
"""
from __future__ import annotations

import argparse
import os
import sys

from beanstalk_load import prefill_count, run_cell, run_one
from bench_common import BODY_SIZE
from bench_report import finish, pick_median, print_tables, run_meta
from bench_servers import (add_run_args, add_server_args, comma_list, connection_counts,
                           install_signal_cleanup, resolve_targets, run_guarded)
from workq_client import COMMANDS_PER_JOB, workq_client_proc

_BOTH = ("{PYTHON} -m gateway.cli serve --listen beanstalk=127.0.0.1:{PORT}"
         " --listen workq=127.0.0.1:{WORKQ_PORT}")
WORKQ_TARGETS = {
    "jobgate": _BOTH + " --database sqlite:///{DIR}/jobgate.db",
    "jobgate-buffered": _BOTH + " --database sqlite:///{DIR}/jobgate.db --durability buffered",
    "jobgate-memory": _BOTH + " --durability memory",
}
# (beanstalk workload, workq workload, label, goal for workq / beanstalk)
PAIRS = (
    ("put", "add", "workq add / beanstalk put", 0.9),
    ("reserve-delete", "lease-complete",
     "workq lease+complete / beanstalk reserve+delete", 0.8),
)
DIALECT = {"put": "beanstalk", "reserve-delete": "beanstalk",
           "add": "workq", "lease-complete": "workq"}
MODE = "pipelined"


def workq_cell(w: str, conns: int, args, prefill: int):
    """cell(server) for run_one: the workq workload `w` on the server's workq port."""
    def cell(srv):
        return run_cell(srv, w, True, conns, args, prefill, port=srv.ports["WORKQ_PORT"],
                        proc=workq_client_proc, commands_per_job=COMMANDS_PER_JOB[w])
    return cell


def measure(t: str, template: str, subst: dict, w: str, conns: int, args, results: list[dict],
            failed_start: dict[str, str]) -> dict:
    """One run of workload w (fresh server): beanstalk workloads through run_one's own cell,
    workq ones through workq_cell, the lease pre-fill sized by this target's add rate."""
    cell = None
    if DIALECT[w] == "workq":
        pre = (prefill_count(args, t, MODE, conns, results, rate_workload="add")
               if w == "lease-complete" else 0)
        cell = workq_cell(w, conns, args, pre)
    r = run_one(t, template, subst, w, MODE, conns, args, results, failed_start, cell=cell)
    r["dialect"] = DIALECT[w]
    return r


def ratio_rows(results: list[dict], names: list[str], conn_list: list[int]) -> list[dict]:
    """One row per pair x connections x target: both medians and workq / beanstalk."""
    by = {(r["workload"], r["connections"], r["target"]): r for r in results}
    rows = []
    for bw, ww, label, goal in PAIRS:
        for conns in conn_list:
            for t in names:
                b, q = by.get((bw, conns, t)), by.get((ww, conns, t))
                if b is None and q is None:
                    continue
                x = b and b.get("jobs_per_s")
                y = q and q.get("jobs_per_s")
                ratio = round(y / x, 3) if x and y else None
                rows.append({"comparison": label, "connections": conns, "target": t,
                             "beanstalk_workload": bw, "workq_workload": ww,
                             "beanstalk_jobs_per_s": x, "workq_jobs_per_s": y,
                             "ratio": ratio, "goal": goal,
                             "met": None if ratio is None else ratio >= goal})
    return rows


def _rate(v) -> str:
    return "ERROR" if not v else f"{v:,.0f}"


def print_markdown(rows: list[dict], repeat: int, out=sys.stdout) -> None:
    """The ratio table, as markdown."""
    print(f"\njobs/s, median of {repeat} run(s); pipelined, 100 per write, 100-byte payloads:\n",
          file=out)
    print("| comparison | conns | target | beanstalk jobs/s | workq jobs/s | workq/beanstalk "
          "| goal | met |", file=out)
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | --- |", file=out)
    for r in rows:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        met = "-" if r["met"] is None else ("yes" if r["met"] else "**no**")
        print(f"| {r['comparison']} | {r['connections']} | {r['target']} "
              f"| {_rate(r['beanstalk_jobs_per_s'])} | {_rate(r['workq_jobs_per_s'])} "
              f"| {ratio} | >= {r['goal']} | {met} |", file=out)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="See benchmarks/README.md.")
    add_server_args(ap, "jobgate", WORKQ_TARGETS)
    ap.add_argument("--duration", type=float, default=3.0,
                    help="seconds per run (default %(default)s)")
    ap.add_argument("--jobs", type=int, default=None,
                    help="instead of --duration: jobs per connection per run (bounded by "
                         "--max-seconds); lease-complete then pre-fills exactly N per queue")
    ap.add_argument("--workloads", default=",".join(DIALECT),
                    help="comma-separated subset of " + ", ".join(DIALECT))
    ap.add_argument("--prefill-rate", type=float, default=100000.0,
                    help="the reserve/lease pre-fill is sized for max(the put/add rate measured "
                         "just before, half this rate) jobs/s (default %(default)s)")
    ap.add_argument("--max-prefill", type=int, default=400000,
                    help="cap on pre-filled jobs per run, all connections (default %(default)s)")
    add_run_args(ap, repeat=3, batch_help="commands per write")
    args = ap.parse_args(argv)
    args.shared_tube = False   # run_cell / prefill_count read these beanstalk options
    if args.jobs is not None and args.jobs <= 0:
        raise SystemExit("--jobs must be positive")
    if args.repeat < 1 or args.batch < 1 or args.duration <= 0 or args.max_prefill < 1:
        raise SystemExit("--repeat, --batch, --duration and --max-prefill must be positive")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    names, templates, subst = resolve_targets(args, WORKQ_TARGETS)
    for n in names:
        if "{WORKQ_PORT}" not in templates[n] or "{PORT}" not in templates[n]:
            raise SystemExit(f"target {n!r}: its command needs both {{PORT}} (beanstalk) and "
                             "{WORKQ_PORT} (workq) listeners")
    conn_list = connection_counts(args.connections)
    wanted = comma_list(args.workloads, DIALECT)

    install_signal_cleanup()
    meta = run_meta(args, names, templates, body_bytes=BODY_SIZE, duration=args.duration,
                    jobs_per_connection=args.jobs)
    results: list[dict] = []
    failed_start: dict[str, str] = {}

    def run_all():
        for conns in conn_list:
            for pair in PAIRS:
                ws = [w for w in pair[:2] if w in wanted]
                runs: dict[tuple[str, str], list[dict]] = {(t, w): [] for t in names for w in ws}
                for _ in range(args.repeat):
                    for t in names:
                        for w in ws:   # beanstalk, then workq: same conditions for the ratio
                            if t not in failed_start:
                                runs[t, w].append(measure(t, templates[t], subst, w, conns,
                                                          args, results, failed_start))
                for (t, w), rs in runs.items():
                    if rs:
                        results.append(pick_median(rs))
                    elif t in failed_start:
                        results.append({"target": t, "workload": w, "mode": MODE,
                                        "connections": conns, "dialect": DIALECT[w],
                                        "error": failed_start[t]})
    run_guarded(run_all)

    meta["loadavg_end"] = os.getloadavg()
    print_tables(results, names, ())
    rows = ratio_rows(results, names, conn_list)
    print_markdown(rows, args.repeat)
    return finish(args.json, {"meta": meta, "results": results, "ratios": rows}, results)


if __name__ == "__main__":
    sys.exit(main())
