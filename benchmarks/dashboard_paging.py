"""The dashboard's job list at 1M jobs (issue 18: <= 100 ms at any page, on SQLite and on
PostgreSQL storage), and the listing index's cost on the put/reserve/delete hot path.

`pages` (default): a real server in this process (tests/inproc.py: the gateway's Runtime on
its own thread) on a SQLite file and/or a fresh PostgreSQL database, `--jobs` jobs put into
one tube over a pipelined beanstalk connection, `--buried` of them (spread evenly) reserved
and buried over beanstalk. Then, for the first, middle and last page of every filter (all,
ready, buried = a few among 1M, reserved = none): the port operation's time on the server's
thread (Port.job_page, `--limit` jobs) and the whole HTTP request's (GET /ui/jobs, the page
rendered), best and median of `--reps`. The page comes from the engine whichever storage is
used; storage only holds the jobs across restarts.

`clustered`: the index's worst case in the engine (memory mode): half the jobs completed,
then the other half ready, so a filter's walk from one end crosses the other cluster.

`hotpath TREE [TREE...]`: put + reserve + delete of `--jobs` jobs through the engine port
(memory mode) in a subprocess per source tree, alternated `--rounds` times in one run, so a
tree without the index (e.g. a `git archive` of the commit before it) and one with it compare
side by side; `--subscribed`: with one feed subscription drained as the dashboard's live hub
drains it (the engine's cost of an open dashboard; compare with a run without it).

    python benchmarks/dashboard_paging.py pages --jobs 1000000 --storage sqlite,postgres
    python benchmarks/dashboard_paging.py clustered --jobs 1000000
    python benchmarks/dashboard_paging.py hotpath /path/to/old/tree . --jobs 300000
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)


def fill(port: int, tube: str, n: int, batch: int = 10_000) -> list:
    """Put `n` jobs into `tube` over one pipelined beanstalk connection; their ids."""
    ids: list = []
    with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
        f = s.makefile("rb")
        s.sendall(f"use {tube}\r\n".encode())
        f.readline()
        body = b"x" * 100
        put = b"put 1024 0 60 100\r\n" + body + b"\r\n"
        for lo in range(0, n, batch):
            k = min(batch, n - lo)
            s.sendall(put * k)
            for _ in range(k):
                ids.append(int(f.readline().split()[1]))
    return ids


def bury(port: int, tube: str, ids: list) -> None:
    """reserve-job + bury each of `ids` (pipelined)."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        f = s.makefile("rb")
        s.sendall(b"".join(b"reserve-job %d\r\nbury %d 0\r\n" % (i, i) for i in ids))
        for _ in ids:
            line = f.readline()
            assert line.startswith(b"RESERVED"), line
            f.read(int(line.split()[2]) + 2)
            assert f.readline() == b"BURIED\r\n"


def _pg_database(admin: str):
    from tests.support import make_pg_database
    return make_pg_database(admin)


def pages(args) -> None:
    import httpx

    from gateway.config import Listener
    from tests.inproc import InProcServer

    print(f"jobs: {args.jobs:,} in one tube, {args.buried} buried; page: {args.limit} jobs; "
          f"best / median of {args.reps} (ms)")
    for storage in args.storage.split(","):
        drop = None
        tmp = tempfile.TemporaryDirectory()
        if storage == "sqlite":
            url = f"sqlite:///{tmp.name}/bench.db"
        else:
            admin = args.pg_url or os.environ.get("JOBGATE_TEST_PG_URL")
            if not admin:
                print("postgres: skipped (no --pg-url / JOBGATE_TEST_PG_URL)")
                continue
            url, drop = _pg_database(admin)
        srv = InProcServer(url, listeners=[Listener("beanstalk", "127.0.0.1", 0, open=True),
                                           Listener("http", "127.0.0.1", 0)])
        try:
            t = time.perf_counter()
            ids = fill(srv.ports["beanstalk"], "big", args.jobs)
            t_fill = time.perf_counter() - t
            step = max(1, len(ids) // max(1, args.buried))
            bury(srv.ports["beanstalk"], "big", ids[step // 2::step][:args.buried])
            print(f"\n{storage}: filled in {t_fill:.1f} s ({len(ids) / t_fill:,.0f} puts/s, "
                  f"committed to storage)")
            print(f"{'filter':9} {'page':7} {'port op':>16} {'HTTP page':>16} {'jobs':>5}")
            mid = ids[len(ids) // 2]
            base = f"http://127.0.0.1:{srv.ports['http']}/ui/jobs?queue=big&limit={args.limit}"
            with httpx.Client(timeout=30) as http:
                for state in ("all", "ready", "buried", "reserved"):
                    st = None if state == "all" else state
                    for name, kw, q in (("first", {}, ""), ("middle", {"after": mid},
                                                            f"&after={mid}"),
                                        ("last", {"before": 1 << 63}, "&last=1")):
                        def op(st=st, kw=kw):
                            t0 = time.perf_counter()
                            r = srv.port.job_page("big", st, limit=args.limit, **kw)
                            return time.perf_counter() - t0, len(r[0])
                        ops = [srv.call(op) for _ in range(args.reps)]
                        url_ = base + q + ("" if st is None else f"&state={st}")
                        hs = []
                        for _ in range(args.reps):
                            t0 = time.perf_counter()
                            r = http.get(url_)
                            hs.append(time.perf_counter() - t0)
                            assert r.status_code == 200, r.status_code
                        o = [x[0] * 1000 for x in ops]
                        h = [x * 1000 for x in hs]
                        print(f"{state:9} {name:7} {min(o):7.2f} / {statistics.median(o):6.2f}"
                              f" {min(h):7.2f} / {statistics.median(h):6.2f} {ops[0][1]:5}")
        finally:
            srv.stop()
            if drop is not None:
                drop()
            tmp.cleanup()


_HOT = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from core.api import Port
n = int(sys.argv[2])
p = Port.create(durable=False)
o = p.new_owner("beanstalk")
sub = p.subscribe(None, 20000) if sys.argv[3] == "1" else None   # a dashboard open
t = time.perf_counter()
for i in range(n):
    p.put("q", b"x", 0, 0, 60000, "beanstalk")
    if sub is not None and not i % 1000:
        sub.take()   # the hub takes the buffer every 250 ms
for i in range(n):
    r = p.reserve(o, ["q"], 0, None)
    p.delete(o, r.id)
    if sub is not None and not i % 1000:
        sub.take()
print(n * 3 / (time.perf_counter() - t))
"""


def hotpath(args) -> None:
    rates: dict = {t: [] for t in args.trees}
    for _ in range(args.rounds):
        for tree in args.trees:
            out = subprocess.run([sys.executable, "-c", _HOT, os.path.abspath(tree),
                                  str(args.jobs), "1" if args.subscribed else "0"], capture_output=True, text=True, check=True,
                                 env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
            rates[tree].append(float(out.stdout))
    first = statistics.median(rates[args.trees[0]])
    print(f"put + reserve + delete of {args.jobs:,} jobs through the port (memory mode"
          f"{', a dashboard subscription open' if args.subscribed else ''}), "
          f"median of {args.rounds} alternated rounds")
    for tree, r in rates.items():
        m = statistics.median(r)
        print(f"{tree:40} {m:12,.0f} ops/s  {m / first:5.3f}x  "
              f"({', '.join(f'{x:,.0f}' for x in r)})")


def clustered(args) -> None:
    """The index's known worst case, in the engine (memory mode): the first half of the
    queue's jobs completed, the rest ready; pages of each filter from each end."""
    from core.api import Port
    p = Port.create(durable=False)
    n = args.jobs
    for lo in range(0, n, 10_000):
        p.put_many("q", [(b"x", 0, f"u{lo + i}", None) for i in range(min(10_000, n - lo))],
                   60_000, "bunqueue", 0, "push")
    o = p.new_owner("bunqueue")
    for r in p.reserve_many(o, "q", n // 2):
        p.complete(r.id, b"ok", "bunqueue")
    print(f"{n:,} jobs: ids 1..{n // 2:,} completed, the rest ready; best of 3 (ms)")
    print(f"{'filter':10} {'first':>8} {'middle':>8} {'last':>8}")
    for st in (None, "ready", "completed"):
        cells = []
        for kw in ({}, {"after": n // 2}, {"before": 1 << 63}):
            best = min(_timed(p, st, kw, args.limit) for _ in range(3))
            cells.append(f"{best * 1000:8.2f}")
        print(f"{st or 'all':10} {' '.join(cells)}")


def _timed(p, st, kw, limit) -> float:
    t = time.perf_counter()
    p.job_page("q", st, limit=limit, **kw)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    p = sub.add_parser("pages")
    p.add_argument("--jobs", type=int, default=1_000_000)
    p.add_argument("--buried", type=int, default=50)
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--storage", default="sqlite,postgres")
    p.add_argument("--pg-url", default=None)
    c = sub.add_parser("clustered")
    c.add_argument("--jobs", type=int, default=1_000_000)
    c.add_argument("--limit", type=int, default=50)
    h = sub.add_parser("hotpath")
    h.add_argument("trees", nargs="+")
    h.add_argument("--jobs", type=int, default=300_000)
    h.add_argument("--rounds", type=int, default=5)
    h.add_argument("--subscribed", action="store_true",
                   help="with a feed subscription drained as the dashboard's hub drains it")
    args = ap.parse_args(sys.argv[1:] if len(sys.argv) > 1 else ["pages"])
    if args.cmd == "hotpath":
        hotpath(args)
    elif args.cmd == "clustered":
        clustered(args)
    else:
        pages(args)


if __name__ == "__main__":
    main()
