#!/usr/bin/env python3
"""Memory held by a beanstalk server with 100,000 ready jobs: jobgate against beanstalkd.

For each target: start a fresh server (same target names and command options as
beanstalk_load.py), read its RSS, put --jobs ready jobs with 100-byte bodies into one tube
(pipelined, 100 puts per write, one connection), check the count with `stats-tube`, wait
--settle seconds, then read the server's current RSS (VmRSS) and peak RSS (VmHWM) from
/proc/PID/status. Stops the server by PID and removes its temp dir. Standard library only,
127.0.0.1 only, never part of the test run.

    .venv/bin/python benchmarks/beanstalk_rss.py --targets beanstalkd,beanstalkd-b,jobgate
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import beanstalk_load as bl  # noqa: E402  (same directory)
from bench_report import finish  # noqa: E402
from bench_servers import run_guarded  # noqa: E402


def dir_bytes(path: str | None) -> int:
    total = 0
    if not path:
        return 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def memory(pid: int) -> dict:
    st = bl.proc_status_kb(pid)
    kids = bl.child_pids(pid)
    kid_rss = sum(bl.proc_status_kb(k).get("VmRSS", 0) for k in kids)
    return {"rss_kb": st.get("VmRSS"), "hwm_kb": st.get("VmHWM"), "children": len(kids),
            "children_rss_kb": kid_rss}


def stats_tube_ready(c: bl.Client, tube: str) -> int | None:
    """current-jobs-ready of tube, or None when the server does not answer stats-tube."""
    c.sock.sendall(b"stats-tube " + tube.encode() + b"\r\n")
    head = c.line()
    if not head.startswith(b"OK "):
        return None
    body = c.take(int(head.split()[1]) + 2)
    for line in body.decode("utf-8", "replace").splitlines():
        key, _, val = line.partition(":")
        if key.strip() == "current-jobs-ready":
            try:
                return int(val.strip())
            except ValueError:
                return None
    return None


def measure(name: str, template: str, subst: dict, args) -> dict:
    out: dict = {"target": name, "command": template, "jobs_requested": args.jobs}
    srv = bl.Server(name, template, subst, args.ready_timeout)
    try:
        srv.start()
    except bl.BenchError as e:
        out["error"] = str(e)[:2000]
        return out
    try:
        time.sleep(args.settle)
        before = memory(srv.pid)
        c = bl.Client(srv.port, args.io_timeout)
        try:
            c.setup_tube(args.tube)
            t0 = time.monotonic()
            put = c.prefill(args.jobs, args.batch, args.timeout)
            put_s = time.monotonic() - t0
            time.sleep(args.settle)   # let a group-commit writer finish its batches
            ready = stats_tube_ready(c, args.tube)
            after = memory(srv.pid)
        finally:
            c.close()
        out.update({
            "jobs_put": put, "put_seconds": round(put_s, 3),
            "put_jobs_per_s": round(put / put_s, 1) if put_s > 0 else None,
            "ready_reported": ready,
            "rss_before_kb": before["rss_kb"], "hwm_before_kb": before["hwm_kb"],
            "rss_kb": after["rss_kb"], "hwm_kb": after["hwm_kb"],
            "children": after["children"], "children_rss_kb": after["children_rss_kb"],
            "data_dir_bytes": dir_bytes(srv.base),
        })
        if put and after["rss_kb"] is not None and before["rss_kb"] is not None:
            out["rss_bytes_per_job"] = round((after["rss_kb"] - before["rss_kb"]) * 1024 / put, 1)
        if put < args.jobs:
            out["error"] = f"only {put} of {args.jobs} jobs put within {args.timeout}s"
        elif ready is not None and ready != put:
            out["error"] = f"stats-tube reports {ready} ready, expected {put}"
    except bl.BenchError as e:
        out["error"] = str(e)[:2000]
        out["server_log_tail"] = srv.log_tail(800)
    finally:
        srv.stop()
    return out


def mb(kb) -> str:
    return "-" if kb is None else f"{kb / 1024:.1f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bl.add_server_args(ap, "beanstalkd,beanstalkd-b")
    ap.add_argument("--jobs", type=int, default=100000, help="ready jobs to put (default %(default)s)")
    ap.add_argument("--batch", type=int, default=100, help="puts per write (default %(default)s)")
    ap.add_argument("--tube", default="rss", help="tube to fill (default %(default)s)")
    ap.add_argument("--settle", type=float, default=1.0,
                    help="seconds to wait after start and after the last put (default %(default)s)")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="time limit for the puts of one target (default %(default)s)")
    ap.add_argument("--io-timeout", type=float, default=30.0, help="socket timeout")
    ap.add_argument("--json", default=None, metavar="FILE", help="also write results as JSON")
    args = ap.parse_args(argv)
    if args.jobs <= 0 or args.batch <= 0:
        raise SystemExit("--jobs and --batch must be positive")
    names, templates, subst = bl.resolve_targets(args)
    bl.install_signal_cleanup()

    results = []

    def run_all():
        for t in names:
            r = measure(t, templates[t], subst, args)
            results.append(r)
            if r.get("error"):
                print(f"! {t}: {r['error']}", file=sys.stderr)
            else:
                print(f"  {t}: {r['jobs_put']} jobs in {r['put_seconds']} s, RSS {mb(r['rss_kb'])} MB,"
                      f" peak {mb(r['hwm_kb'])} MB", file=sys.stderr)
    run_guarded(run_all)

    print(f"\n{args.jobs:,} ready jobs, {bl.BODY_SIZE}-byte bodies, one tube, pipelined x{args.batch}:")
    tl = max([len(r["target"]) for r in results] + [6])
    hdr = (f"{'target':<{tl}} {'jobs':>8} {'put s':>7} {'RSS start MB':>12} {'RSS MB':>8} "
           f"{'peak MB':>8} {'B/job':>7} {'disk MB':>8}  note")
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        if "rss_kb" not in r:
            print(f"{r['target']:<{tl}} {'ERROR':>8}  {r.get('error', '')[:120]}")
            continue
        notes = []
        if r.get("children"):
            notes.append(f"+{r['children']} child proc(s), {mb(r['children_rss_kb'])} MB")
        if r.get("ready_reported") is None:
            notes.append("stats-tube n/a")
        if r.get("error"):
            notes.append(r["error"][:80])
        bpj = r.get("rss_bytes_per_job")
        print(f"{r['target']:<{tl}} {r['jobs_put']:>8,} {r['put_seconds']:>7.2f} "
              f"{mb(r['rss_before_kb']):>12} {mb(r['rss_kb']):>8} {mb(r['hwm_kb']):>8} "
              f"{('-' if bpj is None else f'{bpj:.0f}'):>7} {r['data_dir_bytes'] / 1048576:>8.1f}  "
              + "; ".join(notes))
    meta = {"started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "argv": sys.argv, "cpus": os.cpu_count(),
            "beanstalkd": bl.beanstalkd_version(args.beanstalkd), "jobs": args.jobs,
            "body_bytes": bl.BODY_SIZE}
    return finish(args.json, {"meta": meta, "results": results}, results)


if __name__ == "__main__":
    sys.exit(main())
