"""Where an addJob's time goes, in-process (docs/performance.md, "glide-mq producers"): the
same pipelined `FCALL glidemq_addJob` requests as benchmarks/glidemq_bench.py, fed through the
RESP parser and session into a real engine, without sockets; in durability `commit` each batch
of 100 is taken from the journal and written to a real SQLite file, as the writer does.

    .venv/bin/python benchmarks/glidemq_profile.py [--durability commit|memory] [--batches N]
        [--no-history] [--metrics] [--profile]

Prints µs per addJob for handling (parse, session, glidemq layer, engine) and for the storage
write, as means and for the median batch (steadier when other processes share the CPU); the
server's cyclic-GC settings apply (gateway/server.py tune_gc); `--profile` adds cProfile's top functions by own time. Figures move ±30% on a shared
2-core machine: compare runs made back to back.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from core.api import Port, SystemClock  # noqa: E402
from protocols.contract import Context  # noqa: E402
from protocols.resp import REGISTRATION  # noqa: E402
from protocols.resp.codec import RequestParser  # noqa: E402
from protocols.resp.session import Handler  # noqa: E402
from gateway.metrics import FeedMetrics  # noqa: E402
from gateway.server import tune_gc  # noqa: E402


def _cmd(*words) -> bytes:
    out = [b"*%d\r\n" % len(words)]
    for w in words:
        w = w if isinstance(w, bytes) else str(w).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(w), w))
    return b"".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--durability", choices=("commit", "memory"), default="commit")
    ap.add_argument("--batches", type=int, default=300, help="batches of 100 addJobs")
    ap.add_argument("--no-history", action="store_true", help="no job_events rows")
    ap.add_argument("--profile", action="store_true", help="cProfile's top 25 by own time")
    ap.add_argument("--metrics", action="store_true",
                    help="the /metrics feed sink, as a server with an http listener has")
    a = ap.parse_args(argv)
    store = None
    if a.durability == "commit":
        from gateway.startup import open_database
        tmp = tempfile.mkdtemp(prefix="glidemq-profile-")
        store = open_database(f"sqlite:///{tmp}/jobgate.db", "NORMAL")
    port = Port.create(SystemClock(), durable=store is not None, history=not a.no_history)
    if a.metrics:   # the server's metrics sink, there with an http listener (gateway/server.py)
        port.observe(FeedMetrics().record)
    state = REGISTRATION.make_state(port, {o.name: o.default for o in REGISTRATION.options},
                                    Context())
    h = Handler(state, None)
    tune_gc()   # the server's cyclic-GC settings (gateway/server.py)
    h.handle([b"FUNCTION", b"LOAD", b"#!lua name=glidemq\n-- stand-in\n"])
    p = "glide:{bench}"
    data = json.dumps({"x": "y" * 88})
    one = _cmd("FCALL", "glidemq_addJob", 4, p + ":id", p + ":stream", p + ":scheduled",
               p + ":events", "job", data, "{}", int(time.time() * 1000), 0, 0, "", 0, "", 0,
               0, 0, 0, 0, 0, 0, "", 0, "", "", 0)
    batch = one * 100
    parser = RequestParser()
    spent = {"handle": 0.0, "write": 0.0}
    per_batch: list = []   # (handling s, write s) of each batch: medians resist preemption

    def run():
        for _ in range(a.batches):
            t0 = time.perf_counter()
            for c in parser.feed(batch):
                h.handle(c)
            t1 = time.perf_counter()
            if store is not None:
                store.write(port.persistence.take())
            t2 = time.perf_counter()
            spent["handle"] += t1 - t0
            spent["write"] += t2 - t1
            per_batch.append((t1 - t0, t2 - t1))

    if a.profile:
        prof = cProfile.Profile()
        prof.runcall(run)
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    else:
        run()
    n = a.batches * 100
    print(f"{a.durability}: {n} addJobs, handling {spent['handle'] / n * 1e6:.1f} µs/job, "
          f"storage write {spent['write'] / n * 1e6:.1f} µs/job, "
          f"{n / (spent['handle'] + spent['write']):,.0f} addJob/s in-process")
    med = sorted(per_batch, key=sum)[len(per_batch) // 2]
    print(f"  median batch: handling {med[0] / 100 * 1e6:.1f} µs/job, "
          f"storage write {med[1] / 100 * 1e6:.1f} µs/job, total {sum(med) / 100 * 1e6:.1f}")
    if store is not None:
        store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
