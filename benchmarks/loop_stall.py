#!/usr/bin/env python3
"""Loop-stall benchmark (issue 15, item 2): does one bunqueue client's big work stall every
other connection?

Starts `jobgate serve` (bunqueue listener, SQLite in a temp dir, durability commit) on a free
port, stops it by PID at the end. One connection pings (`Ping`, one in flight) in a loop for the
whole run; meanwhile another connection sends, one after the other:

  frame64   one 64 MiB frame: a PUSH whose data is a map of --entries (1,000,000) entries,
            the rest of 64 MiB an extra `pad` field (bin)
  pushb     one PUSHB of --jobs (10,000) jobs ({"i": n, "s": 20 chars})

and waits for each reply. Reported, for the pinger: round trips, max and p99 latency in ms while
idle (before the work) and during each piece of work. Goal: max under 50 ms during the work.
The server is started from the tree in PYTHONPATH (default: this repository), so the same
script measures another checkout (e.g. PYTHONPATH=/path/to/old/tree).

    .venv/bin/python benchmarks/loop_stall.py [--entries N] [--jobs N] [--json FILE]
Never part of the test run.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import msgpack

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Conn:
    """A blocking bunqueue connection: call(cmd, **fields) -> reply dict."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=600)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.n = 0

    def send_body(self, body: bytes) -> None:
        self.sock.sendall(len(body).to_bytes(4, "big") + body)

    def recv(self) -> dict:
        while True:
            if len(self.buf) >= 4:
                n = int.from_bytes(self.buf[:4], "big")
                if len(self.buf) >= 4 + n:
                    body, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                    return msgpack.unpackb(body, raw=False, strict_map_key=False,
                                           ext_hook=lambda c, d: None)
            d = self.sock.recv(1 << 20)
            if not d:
                raise EOFError("server closed the connection")
            self.buf += d

    def call(self, cmd: str, **fields) -> dict:
        self.n += 1
        self.send_body(msgpack.packb(dict(fields, cmd=cmd, reqId=str(self.n)),
                                     use_bin_type=True))
        return self.recv()


def wait_port(port: int, proc) -> None:
    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError("server exited: " + proc.stderr.read().decode(errors="replace"))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server did not start")


class Pinger:
    """Pings in a loop in a child process (so that the client's own work, such as packing the
    PUSHB, cannot delay the pinger under the GIL); `mark(label)` starts a new bucket of
    latencies (ms). The first ping (the server's first command loads its session code) is a
    warm-up and not counted."""

    LABELS = ("idle", "frame64", "pushb", "after")

    def __init__(self, port: int) -> None:
        import multiprocessing as mp
        ctx = mp.get_context("fork")
        self.port = port
        self.phase = ctx.Value("i", 0)
        self.stop = ctx.Event()
        self.ready = ctx.Event()
        self.recv_end, send_end = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=self._run, args=(send_end,), daemon=True)

    def start(self) -> None:
        self.proc.start()
        self.ready.wait(30)

    def mark(self, label: str) -> None:
        self.phase.value = self.LABELS.index(label)

    def _run(self, out) -> None:
        c = Conn(self.port)
        c.call("Ping")               # warm-up
        self.ready.set()
        buckets: dict = {}
        while not self.stop.is_set():
            label = self.LABELS[self.phase.value]   # counts for the phase it was sent in
            t = time.perf_counter()
            r = c.call("Ping")
            assert r.get("ok"), r
            buckets.setdefault(label, []).append((time.perf_counter() - t) * 1000)
        out.send(buckets)

    def finish(self) -> dict:
        self.stop.set()
        buckets = self.recv_end.recv()
        self.proc.join(10)
        return buckets


def summary(lat: list) -> dict:
    lat = sorted(lat)
    if not lat:
        return {"pings": 0}
    return {"pings": len(lat), "max_ms": round(lat[-1], 1),
            "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", type=int, default=1_000_000, help="map entries of the frame")
    ap.add_argument("--jobs", type=int, default=10_000, help="jobs of the PUSHB")
    ap.add_argument("--idle-s", type=float, default=1.0, help="s of idle pinging first")
    ap.add_argument("--json", help="write the results here too")
    a = ap.parse_args()

    port = free_port()
    tmp = tempfile.mkdtemp(prefix="loopstall")
    env = dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH") or REPO)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--listen", f"bunqueue=127.0.0.1:{port}",
         "--database", f"sqlite:///{tmp}/jobgate.db", "--log-level", "warning"],
        cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_port(port, proc)
        data = {str(i): i for i in range(a.entries)}
        head = msgpack.packb({"cmd": "PUSH", "queue": "stall", "reqId": "big", "data": data},
                             use_bin_type=True)
        pad = max(0, 64 * 1024 * 1024 - len(head) - 12)
        body = msgpack.packb({"cmd": "PUSH", "queue": "stall", "reqId": "big", "data": data,
                              "pad": b"\0" * pad}, use_bin_type=True)
        jobs = [{"data": {"i": i, "s": "x" * 20}} for i in range(a.jobs)]
        pushb = msgpack.packb({"cmd": "PUSHB", "queue": "stall", "reqId": "pushb",
                               "jobs": jobs}, use_bin_type=True)
        worker = Conn(port)
        pinger = Pinger(port)
        pinger.start()
        time.sleep(a.idle_s)
        results = {}
        pinger.mark("frame64")
        t = time.perf_counter()
        worker.send_body(body)
        r = worker.recv()
        results["frame64_reply"] = {"ok": r.get("ok"), "error": r.get("error"),
                                    "frame_bytes": len(body),
                                    "s": round(time.perf_counter() - t, 2)}
        pinger.mark("pushb")
        t = time.perf_counter()
        worker.send_body(pushb)
        r = worker.recv()
        results["pushb_reply"] = {"ok": r.get("ok"), "ids": len(r.get("ids") or ()),
                                  "s": round(time.perf_counter() - t, 2)}
        pinger.mark("after")
        time.sleep(1.0)
        for k, v in pinger.finish().items():
            results[k] = summary(v)
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    print(json.dumps(results, indent=2))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
