#!/usr/bin/env python3
"""Side-by-side beanstalk-protocol load generator: jobgate against the real beanstalkd.

Standard library only, raw sockets, 127.0.0.1 only. Never part of the test run.

Workloads (100-byte bodies, `put 1024 0 60 100`, one tube per connection unless --shared-tube):

  put                 pipelined batch = one write of 100 puts, then read the 100 INSERTED replies.
  reserve-delete      the tube is pre-filled first (pipelined puts, not timed). Pipelined batch =
                      one write of 100 `reserve-with-timeout 0`, read the 100 RESERVED replies,
                      then one write of the 100 `delete <id>`, read the 100 DELETED replies
                      (two round trips per batch).
  put-reserve-delete  pipelined batch = the put batch, then the reserve batch, then the delete
                      batch (three round trips, 100 jobs per batch).

  Unpipelined: the same, one command per write, each reply awaited before the next command
  (put = 1 round trip per job, reserve-delete = 2, put-reserve-delete = 3).

Latency: per batch (all round trips of the batch) when pipelined; per command (one round trip)
when unpipelined. jobs/s counts jobs, not commands (reserve-delete is 2 commands per job,
put-reserve-delete 3).

--client c (the default when `cc` can build it) drives every connection of a cell from one
compiled process, loadgen.c (built on demand into benchmarks/.build/); --client python makes each
connection its own client process (multiprocessing). Either way all connections connect, set up
and fill, wait at a barrier, then run for --duration seconds (or --jobs jobs). Each
(workload, mode, connections, target) cell gets a freshly started server and a fresh temp dir,
which are stopped (by PID) and removed afterwards.

The `null` target is a trivial canned-reply server (bench_servers.py, `--serve-null`); running against
it shows the client's own ceiling. Every row also carries the client's CPU use, so a client-bound
row is visible as cli% near 100.

Run it with the project's virtualenv so jobgate's modules import:
    .venv/bin/python benchmarks/beanstalk_load.py --targets beanstalkd,beanstalkd-b,jobgate
See benchmarks/README.md.
"""
from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import sys
import threading
import time

from bench_cclient import build, resolve_client, run_cell_c
from bench_client import Client, client_proc  # noqa: F401  (Client: used by beanstalk_rss.py)
from bench_common import BODY_SIZE, COMMANDS_PER_JOB, MODES, WORKLOADS, BenchError
from bench_report import (DEFAULT_RATIOS, _ms, finish, percentile, pick_median, print_tables,
                          run_meta)
from bench_servers import (  # noqa: F401  (child_pids, proc_status_kb: used by beanstalk_rss.py)
    DEFAULT_TARGETS, Server, add_run_args, add_server_args, beanstalkd_version, child_pids,
    comma_list, connection_counts, install_signal_cleanup,
    machine_busy_seconds, proc_cpu_seconds, proc_status_kb, resolve_targets, run_guarded,
    serve_null, wait_quiet)


def run_cell(server: Server, workload: str, pipelined: bool, conns: int, args,
             prefill_per_conn: int, port: int | None = None, proc=client_proc,
             commands_per_job: float | None = None, spec_extra: dict | None = None) -> dict:
    """One timed cell: `conns` client processes (`proc`, client_proc's signature) against
    `port` (default server.port), each on its own tube/queue. spec_extra: more keys for every
    connection's spec (a dialect's own options). Returns the result dict; the connections'
    checks (client_proc's check hook), when there are any, as "checks"."""
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(conns + 1)
    duration = args.duration if args.jobs is None else args.max_seconds
    job_limit = args.jobs if args.jobs is not None else 1 << 62
    procs, pipes = [], []
    result = {"target": server.name, "workload": workload,
              "mode": "pipelined" if pipelined else "unpipelined", "connections": conns,
              "batch": args.batch if pipelined else 1, "client": "python"}
    run_id = f"{os.getpid()}-{time.monotonic_ns() % 10**9}"
    try:
        for i in range(conns):
            tube = (f"bench-{run_id}" if args.shared_tube else f"bench-{run_id}-{i}")
            spec = {"port": port or server.port, "tube": tube, "workload": workload,
                    "pipelined": pipelined, "batch": args.batch, "duration": duration,
                    "job_limit": job_limit, "prefill": prefill_per_conn,
                    "prefill_timeout": args.prefill_timeout, "io_timeout": args.io_timeout,
                    "barrier_timeout": args.prefill_timeout + 30,
                    "shared_tube": args.shared_tube, "recv_mode": args.recv, **(spec_extra or {})}
            parent_end, child_end = ctx.Pipe(duplex=False)
            p = ctx.Process(target=proc, args=(i, spec, barrier, child_end), daemon=True)
            p.start()
            child_end.close()
            procs.append(p)
            pipes.append(parent_end)
        srv_cpu0 = wall0 = busy0 = None
        try:
            barrier.wait(args.prefill_timeout + 30)
            srv_cpu0, wall0 = proc_cpu_seconds(server.pid), time.monotonic()
            busy0 = machine_busy_seconds()
        except threading.BrokenBarrierError:
            pass   # a client failed before the start; its error arrives through its pipe
        outs = []
        hard_deadline = time.monotonic() + duration + args.prefill_timeout + 60
        for pe in pipes:
            left = max(0.1, hard_deadline - time.monotonic())
            if pe.poll(left):
                try:
                    outs.append(pe.recv())
                except EOFError:
                    outs.append({"ok": False, "error": "client process died"})
            else:
                outs.append({"ok": False, "error": "client timed out"})
        srv_cpu1, wall1 = proc_cpu_seconds(server.pid), time.monotonic()
        busy1 = machine_busy_seconds()
    except BaseException:   # interrupted: do not wait for the clients
        for p in procs:
            if p.is_alive():
                p.terminate()
        raise
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()   # our own child, by its PID
                p.join(timeout=5)
        for pe in pipes:
            pe.close()
    errors = [o["error"] for o in outs if not o.get("ok")]
    if errors:
        result["error"] = "; ".join(sorted(set(errors)))[:500]
        result["server_log_tail"] = server.log_tail(800)
        return result
    jobs = sum(o["jobs"] for o in outs)
    t0 = min(o["t0"] for o in outs)
    t1 = max(o["t1"] for o in outs)
    secs = max(t1 - t0, 1e-9)
    lat = sorted(x for o in outs for x in o["lat"])
    result.update({
        "jobs": jobs,
        "seconds": round(secs, 4),
        "jobs_per_s": round(jobs / secs, 1),
        "commands_per_s": round(jobs * (commands_per_job or COMMANDS_PER_JOB[workload]) / secs,
                                1),
        "latency_unit": "batch" if pipelined else "command",
        "latency_ms": {
            "n": len(lat),
            "p50": _ms(percentile(lat, 50)), "p90": _ms(percentile(lat, 90)),
            "p99": _ms(percentile(lat, 99)), "max": _ms(lat[-1] if lat else None),
        },
        "client_cpu_pct_per_conn": round(100.0 * sum(o["cpu"] for o in outs) / conns / secs, 1),
        "client_cpu_pct_per_proc": round(100.0 * sum(o["cpu"] for o in outs) / conns / secs, 1),
        "client_cpu_us_per_job": round(1e6 * sum(o["cpu"] for o in outs) / jobs, 2) if jobs else None,
        "drained_early": any(o["drained"] for o in outs),
        "prefilled": sum(o["prefilled"] for o in outs),
        "conn_jobs": [o["jobs"] for o in outs],
    })
    if any(o.get("check") is not None for o in outs):
        result["checks"] = [o.get("check") for o in outs]
    if srv_cpu0 is not None and srv_cpu1 is not None and wall0 is not None:
        wall = max(wall1 - wall0, 1e-9)
        srv_pct = 100.0 * (srv_cpu1 - srv_cpu0) / wall
        result["server_cpu_pct"] = round(srv_pct, 1)
        if busy0 is not None and busy1 is not None:
            # CPU used by everything else on the machine (other processes, interrupts), in % of
            # one core: a noisy neighbour shows up here. Steal time is not counted as busy.
            other = (100.0 * (busy1 - busy0) / wall - srv_pct
                     - 100.0 * sum(o["cpu"] for o in outs) / secs)
            result["other_cpu_pct"] = round(max(other, 0.0), 1)
    return result


def prefill_count(args, target: str, mode: str, conns: int, results: list[dict],
                  rate_workload: str = "put") -> int:
    """Jobs to pre-load per connection for reserve-delete (sized by the `rate_workload` rate)."""
    if args.jobs is not None:
        return args.jobs
    est = None
    for r in results:
        if (r["target"] == target and r["workload"] == rate_workload and r["mode"] == mode
                and r["connections"] == conns and r.get("jobs_per_s")):
            est = max(r.get("runs_jobs_per_s") or [r["jobs_per_s"]])
    # Floor: reserve-delete can outrun put (unpipelined rates swing with the VM's wake-up cost),
    # and a pipelined fill is cheap.
    est = max(est or 0.0, args.prefill_rate / 2)
    total = min(args.max_prefill, math.ceil(est * args.duration * 1.3) + args.batch * conns)
    per = max(args.batch, math.ceil(total / conns))
    return int(math.ceil(per / args.batch) * args.batch)


def run_one(t: str, template: str, subst: dict, w: str, mode: str, conns: int, args,
            results: list[dict], failed_start: dict[str, str], cell=None) -> dict:
    """One measurement: fresh server, one cell, server stopped and its dir removed.
    cell(server) -> result dict replaces the beanstalk cell (another dialect's workload)."""
    pre = (prefill_count(args, t, mode, conns, results)
           if w == "reserve-delete" and cell is None else 0)
    quiet = wait_quiet(args.wait_quiet, args.quiet_threshold) if args.wait_quiet > 0 else None
    srv = None
    for attempt in (1, 2):   # one retry: a server that fails twice is skipped from then on
        srv = Server(t, template, subst, args.ready_timeout)
        try:
            srv.start()
            break
        except BenchError as e:
            msg = str(e)
            print(f"! start attempt {attempt}: {msg}", file=sys.stderr)
            if attempt == 2:
                failed_start[t] = msg.splitlines()[0][:300]
                return {"target": t, "workload": w, "mode": mode, "connections": conns,
                        "error": failed_start[t], "server_log_tail": msg[-1500:]}
            time.sleep(1.0)
    try:
        if cell is not None:
            r = cell(srv)
        elif getattr(args, "loadgen", None):
            r = run_cell_c(args.loadgen, srv, w, mode == "pipelined", conns, args, pre)
        else:
            r = run_cell(srv, w, mode == "pipelined", conns, args, pre)
    finally:
        srv.stop()
    if quiet is not None:
        r["machine_busy_before_pct"] = quiet
    if r.get("error"):
        print(f"! {t} {w} {mode} c={conns}: {r['error']}", file=sys.stderr)
    else:
        print(f"  {t:<16} {w:<19} {mode:<11} c={conns}  "
              f"{r['jobs_per_s']:>10,.0f} jobs/s  p50 {r['latency_ms']['p50']} ms"
              f"  p99 {r['latency_ms']['p99']} ms  srv {r.get('server_cpu_pct')}%"
              f"  cli {r.get('client_cpu_pct_per_proc', r['client_cpu_pct_per_conn'])}%"
              + ("  (drained early)" if r.get("drained_early") else ""), file=sys.stderr)
    return r


def run_targets(names: list[str], templates: dict[str, str], subst: dict, w: str, mode: str,
                conns: int, args, results: list[dict], failed_start: dict[str, str],
                cell=None) -> None:
    """`--repeat` runs of one cell on every target, the targets interleaved within each round
    (same conditions); appends each target's median run, or its start failure, to results.
    cell: as in run_one."""
    runs: dict[str, list[dict]] = {t: [] for t in names}
    for _ in range(args.repeat):
        for t in names:
            if t not in failed_start:
                runs[t].append(run_one(t, templates[t], subst, w, mode, conns, args, results,
                                       failed_start, cell=cell))
    for t in names:
        if runs[t]:
            results.append(pick_median(runs[t]))
        elif t in failed_start:
            results.append({"target": t, "workload": w, "mode": mode, "connections": conns,
                            "error": failed_start[t]})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="See benchmarks/README.md for the workload definitions.")
    add_server_args(ap, "beanstalkd,beanstalkd-b")
    ap.add_argument("--duration", type=float, default=3.0,
                    help="seconds per workload cell (default %(default)s)")
    ap.add_argument("--jobs", type=int, default=None,
                    help="instead of --duration: jobs per connection per cell (bounded by "
                         "--max-seconds)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS),
                    help="comma-separated subset of " + ", ".join(WORKLOADS))
    ap.add_argument("--modes", default=",".join(MODES), help="pipelined,unpipelined")
    ap.add_argument("--shared-tube", action="store_true",
                    help="all connections of a cell use one tube (default: one tube each)")
    ap.add_argument("--prefill-rate", type=float, default=100000.0,
                    help="reserve-delete pre-fill is sized for max(the put rate measured just "
                         "before, half this rate) jobs/s (default %(default)s)")
    ap.add_argument("--max-prefill", type=int, default=400000,
                    help="cap on pre-filled jobs per cell, all connections (default %(default)s)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 0.5 s cells, pre-fill capped at 50k")
    add_run_args(ap, repeat=1)
    ap.add_argument("--client", choices=("c", "python"), default=None,
                    help="c: one compiled process (loadgen.c, built with cc) drives all "
                         "connections; python: one Python process per connection. Default: c "
                         "when it builds, else python")
    ap.add_argument("--c-threads", type=int, default=0, metavar="N",
                    help="threads of the C client (default: half the CPUs, at least 1, at most "
                         "one per connection)")
    ap.add_argument("--serve-null", type=int, default=None, metavar="PORT",
                    help=argparse.SUPPRESS)
    ap.add_argument("--serve-null-c", type=int, default=None, metavar="PORT",
                    help=argparse.SUPPRESS)

    args = ap.parse_args(argv)

    if args.serve_null is not None:
        return serve_null(args.serve_null)
    if args.serve_null_c is not None:   # the null-c target: become the C server (same PID)
        binary = build("nullserver")
        os.execv(binary, [binary, str(args.serve_null_c)])

    if args.quick:
        args.duration = min(args.duration, 0.5)
        args.max_prefill = min(args.max_prefill, 50000)
    if args.jobs is not None and args.jobs <= 0:
        raise SystemExit("--jobs must be positive")
    if args.repeat < 1 or args.batch < 1 or args.duration <= 0 or args.max_prefill < 1:
        raise SystemExit("--repeat, --batch, --duration and --max-prefill must be positive")
    names, templates, subst = resolve_targets(args)
    args.client, args.loadgen = resolve_client(args.client)
    if "null-c" in names and templates["null-c"] == DEFAULT_TARGETS["null-c"]:
        try:
            build("nullserver")   # here, not in the first server start: one clear error
        except BenchError as e:
            raise SystemExit(f"null-c: {e}")
    conn_list = connection_counts(args.connections, 1024 if args.client == "c" else 64)
    workloads = comma_list(args.workloads, WORKLOADS)
    modes = comma_list(args.modes, MODES, "mode")
    # put first, so its measured rate sizes the reserve-delete pre-fill
    workloads.sort(key=WORKLOADS.index)

    install_signal_cleanup()
    meta = run_meta(args, names, templates, beanstalkd=beanstalkd_version(args.beanstalkd),
                    body_bytes=BODY_SIZE, duration=args.duration, jobs_per_connection=args.jobs,
                    shared_tube=args.shared_tube, client=args.client)
    results: list[dict] = []
    failed_start: dict[str, str] = {}

    def run_all():
        for conns in conn_list:
            for mode in modes:
                for w in workloads:
                    run_targets(names, templates, subst, w, mode, conns, args, results,
                                failed_start)
    run_guarded(run_all)

    meta["loadavg_end"] = os.getloadavg()
    print_tables(results, names, DEFAULT_RATIOS)
    return finish(args.json, {"meta": meta, "results": results}, results)


if __name__ == "__main__":
    sys.exit(main())
