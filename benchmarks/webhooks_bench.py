#!/usr/bin/env python3
"""Job throughput with cron schedules firing and webhooks subscribed (issue 16, "Performance":
>= 0.9x of the same run without them): the same bunqueue load on a fresh jobgate server
(SQLite, durability commit) without either; with --crons (100) cron schedules firing every
second (`repeatEvery` 1000 ms, `preventOverlap` false so that every run makes a job, each on a
queue of its own that nobody consumes, registered before the load); with --hooks (10) webhooks
subscribed to every event of the queue; with both;
and with both plus one receiver that never answers.
Prints jobs/s per phase and the ratio to the run without either, how many webhook POSTs the
receivers answered (median; events beyond what delivery keeps up with are dropped from the
bounded queues), and the CPU time the server
process itself used per job operation (a push or a pull+ack; the delivery worker process not
included), which is what webhooks cost job traffic on a machine with a free core: the
throughput ratios also measure how the worker's CPU competes with the server's on this one.

Load, one connection, --window (20) commands in flight: PUSHB of --batch (100) jobs until
--jobs jobs are in, then PULLB of --batch + ACKB of their ids until the queue is empty. Each
job makes three webhook events (job.pushed, job.started, job.completed), each delivered to
every webhook. Receivers: a small asyncio HTTP server in its own process answering 200 at once
(or never, `hang`). Raw sockets on 127.0.0.1; never part of the test run.

    .venv/bin/python benchmarks/webhooks_bench.py --jobs 10000 --repeat 3     # ~1 min
"""
from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import msgpack

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.support import free_port, stop_process, wait_port   # noqa: E402


# ------------------------------------------------------------------ receiver
async def _serve(port: int, hang: bool) -> None:
    async def conn(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                n = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        n = int(line.split(b":")[1])
                await reader.readexactly(n)
                if hang:
                    await asyncio.sleep(3600)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
    srv = await asyncio.start_server(conn, "127.0.0.1", port, backlog=1024)
    async with srv:
        await srv.serve_forever()


def receiver(hang: bool) -> tuple:
    port = free_port()
    # niced: the receiver stands for a service on another machine, whose CPU is not the
    # server's; on this 2-CPU box it would otherwise take a core from job traffic
    p = subprocess.Popen([sys.executable, __file__, "--receiver", str(port)]
                         + (["--hang"] if hang else []), preexec_fn=lambda: os.nice(19))
    wait_port(port, p)
    return p, port


# -------------------------------------------------------------------- client
class Conn:
    def __init__(self, port: int) -> None:
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.rid = 0

    def send(self, cmd: dict) -> None:
        self.rid += 1
        body = msgpack.packb(dict(cmd, reqId=str(self.rid)), use_bin_type=True)
        self.s.sendall(struct.pack(">I", len(body)) + body)

    def recv(self) -> dict:
        while True:
            if len(self.buf) >= 4:
                n = struct.unpack(">I", self.buf[:4])[0]
                if len(self.buf) >= 4 + n:
                    body, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                    r = msgpack.unpackb(body, raw=False, ext_hook=lambda c, d: None,
                                        strict_map_key=False)
                    assert r.get("ok") is True, r
                    return r
            d = self.s.recv(1 << 20)
            if not d:
                raise EOFError
            self.buf += d

    def call(self, cmd: dict) -> dict:
        self.send(cmd)
        return self.recv()


def load(port: int, queue: str, jobs: int, batch: int, window: int) -> tuple:
    c = Conn(port)
    job = [{"data": "x" * 100} for _ in range(batch)]
    t0 = time.perf_counter()
    sent = inflight = 0
    while sent < jobs or inflight:
        while sent < jobs and inflight < window:
            c.send({"cmd": "PUSHB", "queue": queue, "jobs": job})
            sent += batch
            inflight += 1
        c.recv()
        inflight -= 1
    push_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    done = 0
    while done < jobs:
        r = c.call({"cmd": "PULLB", "queue": queue, "count": batch})
        got = r.get("jobs") or []
        ids = [j["id"] for j in got]
        toks = r.get("tokens")
        cmd = {"cmd": "ACKB", "ids": ids}
        if toks:
            cmd["tokens"] = toks
        c.call(cmd)
        done += len(ids)
    return jobs / push_s, jobs / (time.perf_counter() - t0)


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by process `pid` (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(args, hooks: int, hang: bool, crons: int = 0) -> tuple:
    tmp = tempfile.mkdtemp(prefix="jobgate-wh-")
    cfg = os.path.join(tmp, "jobgate.yaml")
    with open(cfg, "w") as f:
        f.write("webhooks:\n  allow: ['127.0.0.1/32']\n")
    for attempt in range(3):   # a free port can be taken before the server binds it
        bq, bs = free_port(), free_port()
        srv = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--listen",
                                f"bunqueue=127.0.0.1:{bq}", "--listen", f"beanstalk=127.0.0.1:{bs}",
                                "--database", f"sqlite:///{tmp}/jobgate.db", "--config", cfg,
                                "--log-level", "error"], cwd=ROOT,
                               env=dict(os.environ, PYTHONPATH=ROOT))
        try:
            wait_port(bq, srv)
            break
        except RuntimeError:
            stop_process(srv)
            if attempt == 2:
                raise
    procs = []
    try:
        c = Conn(bq)
        events = ["job.pushed", "job.started", "job.completed", "job.failed", "job.progress"]
        for i in range(hooks + (1 if hang else 0)):
            if i == 0 or (hang and i == hooks):
                p, rport = receiver(hang and i == hooks)
                procs.append(p)
            c.call({"cmd": "AddWebhook", "url": f"http://127.0.0.1:{rport}/h{i}",
                    "events": events, "queue": "bench", "secret": "s"})
        for i in range(crons):
            c.call({"cmd": "Cron", "name": f"bench-cron-{i}", "queue": f"bench-cron-{i}",
                    "data": {"i": i}, "repeatEvery": 1000, "preventOverlap": False})
        load(bq, "warmup", 2000, args.batch, args.window)   # a queue no webhook watches
        cpu0 = _cpu_s(srv.pid)
        push, pull = load(bq, "bench", args.jobs, args.batch, args.window)
        cpu = (_cpu_s(srv.pid) - cpu0) * 1e6 / (2 * args.jobs)
        if crons:   # the schedules did fire during the load: their jobs are there
            fired = sum(c.call({"cmd": "Count", "queue": f"bench-cron-{i}"})["count"]
                        for i in range(crons))
            assert fired >= crons, f"{crons} cron schedules fired only {fired} jobs"
        delivered = 0
        if hooks:   # what the receivers got (the rest was dropped from the bounded queues)
            time.sleep(0.5)
            delivered = sum(h["successCount"] for h in
                            c.call({"cmd": "ListWebhooks"})["data"]["webhooks"])
        return push, pull, cpu, delivered
    finally:
        stop_process(srv)
        for p in procs:
            p.send_signal(signal.SIGTERM)
            p.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--window", type=int, default=20)
    ap.add_argument("--hooks", type=int, default=10)
    ap.add_argument("--crons", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--verbose", action="store_true", help="print every run")
    ap.add_argument("--only", help="case names separated by | to run (default all; "
                    "'neither' is always run, as the base)")
    ap.add_argument("--receiver", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--hang", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.receiver:
        asyncio.run(_serve(args.receiver, args.hang))
        return 0
    k, h = args.crons, args.hooks
    cases = [("neither", 0, False, 0), (f"{k} crons", 0, False, k),
             (f"{h} webhooks, every event", h, False, 0),
             (f"{k} crons + {h} webhooks", h, False, k),
             (f"{k} crons + {h} webhooks + 1 hanging", h, True, k)]
    if args.only:
        keep = {"neither", *args.only.split("|")}
        cases = [c for c in cases if c[0] in keep]
    runs: dict = {c[0]: [] for c in cases}
    n = len(cases)
    for i in range(args.repeat):        # interleaved and rotated: load changes hit every case
        for label, hooks, hang, crons in cases[i % n:] + cases[:i % n]:
            runs[label].append(run(args, hooks, hang, crons))
            if args.verbose:
                print(label, runs[label][-1], flush=True)
    med = {k: tuple(statistics.median(r[i] for r in v) for i in range(4))
           for k, v in runs.items()}
    base = med["neither"]
    print(f"medians of {args.repeat} runs, {args.jobs} jobs, load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'run':38} {'push jobs/s':>12} {'pull+ack jobs/s':>16} {'ratio push / pull':>18}"
          f" {'server CPU us/job-op':>21} {'ratio':>6} {'POSTs delivered':>16}")
    for label, *_ in cases:
        r = med[label]
        print(f"{label:38} {r[0]:12.0f} {r[1]:16.0f} "
              f"{r[0] / base[0]:10.2f} / {r[1] / base[1]:4.2f} {r[2]:21.1f} {r[2] / base[2]:6.2f}"
              f" {r[3]:16.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
