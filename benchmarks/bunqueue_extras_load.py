#!/usr/bin/env python3
"""Issue 16's performance goal: bunqueue job throughput on jobgate with 100 cron schedules
firing every second and 10 webhooks subscribed to every event stays >= 0.9x of the same run
without them.

Each repeat runs both variants, in alternating order, each on a fresh jobgate (SQLite file,
durability commit, bunqueue listener on a free port): `plain`, and `extras` = the same server
after `Cron` x100 (repeatEvery 1000 ms, each on its own queue, nobody consuming them) and
`AddWebhook` x10 (every event, any queue) pointing at a local receiver (a separate process
answering 200 at once; allow-listed in the server's config). Workloads on one connection,
pipelined (window 50): `push` (PUSH per job), `pull-ack` (PULL + ACK per job on a pre-filled
queue), `pushb` (PUSHB of 100). Reported: jobs/s per variant and workload (median of the
repeats), the extras/plain ratio, and what the receiver got (POSTs, and the server's webhook
counters from ListWebhooks) so that a run where nothing was delivered cannot pass for a fast
one.

    .venv/bin/python benchmarks/bunqueue_extras_load.py --repeat 3 --jobs 20000

127.0.0.1 only; every process started is stopped by PID. Never part of the test run.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import REPO_ROOT  # noqa: E402
from bunqueue_client import BunqueueClient, run_bunqueue_workload  # noqa: E402

PY = os.path.join(REPO_ROOT, ".venv", "bin", "python")
if not os.path.exists(PY):
    PY = sys.executable

RECEIVER = r'''
import sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
n = [0]
lock = threading.Lock()
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with lock:
            n[0] += 1
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def do_GET(self):
        body = str(n[0]).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body)))
        self.end_headers(); self.wfile.write(body)
    def log_message(self, *a):
        pass
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server did not listen")


def stop(proc) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start_jobgate(tmp: str, port: int):
    cfg = os.path.join(tmp, "jobgate.yaml")
    with open(cfg, "w") as f:
        f.write("webhooks:\n  allow: ['127.0.0.1/32']\n")
    argv = [PY, "-m", "gateway.cli", "serve", "--config", cfg, "--database",
            f"sqlite:///{tmp}/jobgate.db", "--listen", f"bunqueue=127.0.0.1:{port}"]
    proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                            stderr=open(os.path.join(tmp, "server.log"), "w"))
    wait_port(port, proc)
    return proc


def add_extras(port: int, receiver_port: int, crons: int, hooks: int) -> None:
    c = BunqueueClient(port, 30.0, "setup")
    try:
        c.hello()
        for i in range(crons):
            r = c.call({"cmd": "Cron", "name": f"bench-cron-{i}", "queue": f"bench-cron-{i}",
                        "data": {"i": i}, "repeatEvery": 1000})
            assert r.get("ok") is True, r
        for i in range(hooks):
            r = c.call({"cmd": "AddWebhook",
                        "url": f"http://127.0.0.1:{receiver_port}/hook/{i}",
                        "events": ["job.pushed", "job.started", "job.completed", "job.failed",
                                   "job.progress", "job.stalled"]})
            assert r.get("ok") is True, r
    finally:
        c.close()


def webhook_counters(port: int) -> dict:
    c = BunqueueClient(port, 30.0, "setup")
    try:
        c.hello()
        r = c.call({"cmd": "ListWebhooks"})
        hooks = (r.get("data") or {}).get("webhooks") or r.get("webhooks") or []
        return {"successCount": sum(h.get("successCount") or 0 for h in hooks),
                "failureCount": sum(h.get("failureCount") or 0 for h in hooks)}
    finally:
        c.close()


def run_workload(port: int, workload: str, jobs: int, batch: int) -> float:
    """jobs/s of one workload on a fresh queue of one connection."""
    q = f"bench-{workload}-{time.monotonic_ns()}"
    c = BunqueueClient(port, 60.0, q)
    try:
        c.hello()
        available = c.prefill(jobs, 100, 120.0) if workload == "pull-ack" else 0
        t0 = time.perf_counter()
        done, _ = run_bunqueue_workload(c, workload, True, batch, time.monotonic() + 300, jobs,
                                        [], available)
        dt = time.perf_counter() - t0
        if done != jobs:
            raise RuntimeError(f"{workload}: {done} of {jobs} jobs")
        return jobs / dt
    finally:
        c.close()


def one_run(variant: str, args, receiver_port: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        proc = start_jobgate(tmp, port)
        try:
            if variant == "extras":
                add_extras(port, receiver_port, args.crons, args.webhooks)
                time.sleep(1.5)   # let the schedules fire at least once before timing
            out = {w: run_workload(port, w, args.jobs, 100) for w in args.workloads}
            if variant == "extras":
                out["webhooks"] = webhook_counters(port)
            return out
        finally:
            stop(proc)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--crons", type=int, default=100)
    ap.add_argument("--webhooks", type=int, default=10)
    ap.add_argument("--workloads", default="push,pull-ack,pushb")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    args.workloads = args.workloads.split(",")
    rec = subprocess.Popen([PY, "-c", RECEIVER], stdout=subprocess.PIPE, text=True)
    try:
        receiver_port = int(rec.stdout.readline())
        runs = {"plain": [], "extras": []}
        for i in range(args.repeat):
            order = ("plain", "extras") if i % 2 == 0 else ("extras", "plain")
            for v in order:
                r = one_run(v, args, receiver_port)
                runs[v].append(r)
                print(f"repeat {i + 1} {v}: " + json.dumps(r), flush=True)
        with socket.create_connection(("127.0.0.1", receiver_port)) as s:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            posts = s.recv(1000).split(b"\r\n\r\n", 1)[1].decode()
    finally:
        stop(rec)
    table = {}
    for w in args.workloads:
        p = statistics.median(r[w] for r in runs["plain"])
        e = statistics.median(r[w] for r in runs["extras"])
        table[w] = {"plain_jobs_s": round(p), "extras_jobs_s": round(e), "ratio": round(e / p, 3)}
    print("\n| workload | plain jobs/s | with 100 crons + 10 webhooks | ratio |\n|---|---|---|---|")
    for w, t in table.items():
        print(f"| {w} | {t['plain_jobs_s']} | {t['extras_jobs_s']} | {t['ratio']} |")
    print(f"\nreceiver got {posts} POSTs in all; server counters per extras run: "
          + json.dumps([r.get("webhooks") for r in runs["extras"]]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"table": table, "runs": runs, "receiver_posts": int(posts)}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
