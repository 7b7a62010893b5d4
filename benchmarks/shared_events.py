"""What relaying job events across nodes costs in shared mode (issue 19: docs/scaling.md
"Events across nodes").

Two `jobgate serve --database-mode shared` nodes with bunqueue listeners on one fresh
PostgreSQL database (created and dropped here). A producer on node A pushes `--jobs` jobs in
pipelined windows of 100 PUSH frames; the run is timed three ways, interleaved `--repeat`
times: with no subscriber anywhere (the relay is off), with a SubscribeEvents subscriber on
node A itself (events are local, nothing is relayed), and with one on node B (every `pushed`
event crosses through NOTIFY). Reports jobs/s (median) and, for the B case, how many events
B's subscriber received by the end (they arrive after A's commits).

    .venv/bin/python benchmarks/shared_events.py --jobs 5000 --repeat 3

Run from the repository root with the project's virtualenv. Nothing here is part of the test
suite.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import sys
import time

import msgpack

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shared_common import pg_option, shared_nodes  # noqa: E402


def frame(obj) -> bytes:
    body = msgpack.packb(obj, use_bin_type=True)
    return struct.pack(">I", len(body)) + body


class Frames:
    """A bunqueue connection read frame by frame."""

    def __init__(self, port: int) -> None:
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def read(self, timeout: float | None = None):
        self.s.settimeout(timeout if timeout is not None else 30)
        while len(self.buf) < 4 or len(self.buf) < 4 + struct.unpack(">I", self.buf[:4])[0]:
            d = self.s.recv(1 << 20)
            if not d:
                raise EOFError
            self.buf += d
        n = struct.unpack(">I", self.buf[:4])[0]
        body, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
        return msgpack.unpackb(body, raw=False, strict_map_key=False, ext_hook=lambda c, d: None)

    def count_events(self, seconds: float) -> int:
        """Event frames that arrive within `seconds` of quiet."""
        n = 0
        while True:
            try:
                r = self.read(seconds)
            except (TimeoutError, socket.timeout):
                return n
            if r.get("type") == "event":
                n += 1


def push_all(prod: Frames, queue: str, jobs: int) -> float:
    """jobs/s of `jobs` PUSHes in pipelined windows of 100."""
    t0 = time.perf_counter()
    sent = 0
    while sent < jobs:
        k = min(100, jobs - sent)
        prod.s.sendall(b"".join(frame({"cmd": "PUSH", "queue": queue, "data": {"i": sent + i},
                                       "reqId": f"p{sent + i}"}) for i in range(k)))
        for _ in range(k):
            r = prod.read()
            assert r.get("ok"), r
        sent += k
    return jobs / (time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    pg_option(ap)
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rates: dict = {"none": [], "on A": [], "on B": []}
    got = []
    with shared_nodes(args.pg, "jobgate_ev_", bunqueue=True) as (_, (pa, pb)):
        prod = Frames(pa)
        push_all(prod, "warm", 500)
        for r in range(args.repeat):
            for case in rates:
                q = f"ev{r}{case[-1]}"
                sub = None
                if case != "none":
                    sub = Frames(pa if case == "on A" else pb)
                    sub.s.sendall(frame({"cmd": "SubscribeEvents", "queue": q, "reqId": "s"}))
                    sub.read()
                    time.sleep(0.3)   # the other node hears of the subscription
                rates[case].append(push_all(prod, q, args.jobs))
                if sub is not None:
                    n = sub.count_events(2.0)
                    if case == "on B":
                        got.append(n)
                    sub.s.close()
    print("| subscriber | jobs/s (median) | runs |")
    print("| --- | ---: | --- |")
    for case, v in rates.items():
        print(f"| {case} | {statistics.median(v):,.0f} | "
              f"{', '.join(f'{x:,.0f}' for x in v)} |")
    print(f"\nevents received on B per run: {got} of {args.jobs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
