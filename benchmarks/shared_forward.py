"""Latency of bunqueue lock commands presented on another node in shared mode (issue 19:
docs/scaling.md "Locks presented on another node").

Two `jobgate serve --database-mode shared` nodes with bunqueue listeners on one fresh
PostgreSQL database (created and dropped here). Each round pushes a job on node A and pulls it
there with a lock (owner, lockTtl), then times one `JobHeartbeat` and the `ACK` sent either to
A (the node holding the lock: the baseline) or to B (which forwards both to A over
`jobgate_calls` and answers with A's reply). Reports p50/p90/p99/max per case, in ms, from
just before the command is written to its reply.

    .venv/bin/python benchmarks/shared_forward.py --rounds 300

Run from the repository root with the project's virtualenv. Nothing here is part of the test
suite.
"""
from __future__ import annotations

import argparse
import itertools
import os
import socket
import struct
import sys
import time

import msgpack

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shared_common import pct, pg_option, shared_nodes  # noqa: E402

_rids = itertools.count(1)


class BQ:
    """A minimal blocking bunqueue connection: one command, its reply."""

    def __init__(self, port: int) -> None:
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def call(self, **cmd) -> dict:
        rid = f"r{next(_rids)}"
        body = msgpack.packb({**cmd, "reqId": rid}, use_bin_type=True)
        self.s.sendall(struct.pack(">I", len(body)) + body)
        while True:
            while len(self.buf) < 4 or len(self.buf) < 4 + struct.unpack(">I", self.buf[:4])[0]:
                d = self.s.recv(65536)
                if not d:
                    raise EOFError("closed")
                self.buf += d
            n = struct.unpack(">I", self.buf[:4])[0]
            r = msgpack.unpackb(self.buf[4:4 + n], raw=False, strict_map_key=False,
                                ext_hook=lambda c, d: None)
            self.buf = self.buf[4 + n:]
            if r.get("reqId") == rid:
                return r


def measure(a: BQ, via: BQ, rounds: int) -> tuple[list, list]:
    hb, ack = [], []
    for i in range(rounds):
        jid = a.call(cmd="PUSH", queue="fwd", data={"i": i})["id"]
        r = a.call(cmd="PULL", queue="fwd", owner="w", lockTtl=60_000)
        tok = r["token"]
        assert r["job"]["id"] == jid, r
        t0 = time.perf_counter()
        r1 = via.call(cmd="JobHeartbeat", id=jid, token=tok)
        t1 = time.perf_counter()
        r2 = via.call(cmd="ACK", id=jid, token=tok)
        t2 = time.perf_counter()
        assert r1.get("ok") and r2.get("ok"), (r1, r2)
        hb.append((t1 - t0) * 1000)
        ack.append((t2 - t1) * 1000)
    return hb, ack


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    pg_option(ap)
    ap.add_argument("--rounds", type=int, default=300)
    args = ap.parse_args()
    with shared_nodes(args.pg, "jobgate_fwd_", bunqueue=True) as (_, (pa, pb)):
        a, b = BQ(pa), BQ(pb)
        measure(a, b, 20)   # warm-up
        print("| command | sent to | rounds | p50 ms | p90 ms | p99 ms | max ms |")
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
        for label, via in (("A (holds the lock)", a), ("B (forwards to A)", b)):
            hb, ack = measure(a, via, args.rounds)
            for name, lat in (("JobHeartbeat", hb), ("ACK", ack)):
                print(f"| {name} | {label} | {len(lat)} | {pct(lat, .5):.2f} | "
                      f"{pct(lat, .9):.2f} | {pct(lat, .99):.2f} | {max(lat):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
