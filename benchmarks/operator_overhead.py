"""Operator overhead (issue 18): job throughput of one jobgate server without observers (A)
and with them (B): `/metrics` and `/prometheus` scraped every second and one live-update
stream held open (default: the dashboard's Server-Sent Events, `/ui/events`, what an open
dashboard reads; `--live-url` takes another, e.g. `/ws`, bunqueue's WebSocket of every event:
ws:// or wss:// is read as a WebSocket, http:// or a path as a streamed GET). The goal, with
the dashboard: B / A >= 0.95.

Workload: `--workers` client processes, each a beanstalk put / reserve / delete cycle in
pipelined batches on its own tube (benchmarks/bench_client.py's client and loop). A and B
alternate `--rounds` times in one process run against the same server, so drift of the
machine hits both; the report gives jobs/s per run, B/A per round and the median ratio.

    .venv/bin/python benchmarks/operator_overhead.py --rounds 4 --duration 3

Standard library plus what the server installs (aiohttp for the WebSocket and HTTP reads).
"""
from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_client import Client, run_workload   # noqa: E402
from bench_common import HOST, REPO_ROOT   # noqa: E402
from bench_servers import Server, install_signal_cleanup, proc_cpu_seconds   # noqa: E402

TEMPLATE = (f"{sys.executable} -m gateway.cli serve --listen beanstalk={HOST}:{{PORT}} "
            f"--listen http={HOST}:{{HTTP_PORT}} --database sqlite:///{{DIR}}/jobgate.db "
            "--log-level warning")


def worker(idx: int, port: int, duration: float, batch: int, out) -> None:
    """One client process: put / reserve / delete batches on tube `ov<idx>` for `duration`
    s; sends the number of jobs done."""
    c = Client(port, 10.0)
    try:
        c.setup_tube(f"ov{idx}")
        jobs, _ = run_workload(c, "put-reserve-delete", True, batch,
                               time.monotonic() + duration, 1 << 62, [])
        out.send(jobs)
    finally:
        c.close()
        out.close()


def run_load(port: int, workers: int, duration: float, batch: int) -> tuple:
    """(jobs per second, jobs) of `workers` processes for `duration` s."""
    ctx = mp.get_context("fork")
    pipes, procs = [], []
    for i in range(workers):
        r, w = ctx.Pipe(duplex=False)
        p = ctx.Process(target=worker, args=(i, port, duration, batch, w))
        p.start()
        pipes.append(r)
        procs.append(p)
    t0 = time.monotonic()
    jobs = sum(r.recv() for r in pipes)
    for p in procs:
        p.join()
    return jobs / max(time.monotonic() - t0, 1e-9), jobs


def measured(srv, args) -> tuple:
    """(jobs/s, server CPU µs per job) of one run."""
    c0 = proc_cpu_seconds(srv.pid) or 0.0
    rate, jobs = run_load(srv.port, args.workers, args.duration, args.batch)
    c1 = proc_cpu_seconds(srv.pid) or 0.0
    return rate, (c1 - c0) * 1e6 / max(jobs, 1)


class Observers:
    """The B side: a thread with its own event loop scraping `/metrics` and `/prometheus`
    every `every` s and holding `live_url` open, reading everything it sends. `stats`: scrapes
    done, live messages (or bytes, for a streamed GET) read."""

    def __init__(self, http_base: str, live_url: str | None, every: float = 1.0,
                 scrape: bool = True) -> None:
        self.http_base, self.live_url, self.every = http_base, live_url, every
        self.scrape = scrape
        self.stats = {"scrapes": 0, "live": 0, "errors": 0}
        self._stop = None
        self._loop = None
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._ready = threading.Event()

    def __enter__(self):
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc):
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _main(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        import aiohttp
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with aiohttp.ClientSession() as s:
            live = asyncio.ensure_future(self._live(s))
            self._ready.set()
            while not self._stop.is_set():
                for path in ("/metrics", "/prometheus") if self.scrape else ():
                    try:
                        async with s.get(self.http_base + path) as r:
                            await r.read()
                            self.stats["scrapes"] += 1
                    except aiohttp.ClientError:
                        self.stats["errors"] += 1
                try:
                    await asyncio.wait_for(self._stop.wait(), self.every)
                except asyncio.TimeoutError:
                    pass
            live.cancel()
            try:
                await live
            except asyncio.CancelledError:
                pass

    async def _live(self, s) -> None:
        url = self.live_url
        if url is None:
            return
        if url.startswith(("ws://", "wss://")):
            async with s.ws_connect(url) as ws:
                async for _ in ws:
                    self.stats["live"] += 1
        else:
            async with s.get(url) as r:
                async for chunk in r.content.iter_any():
                    self.stats["live"] += len(chunk)


def sink_cost(n: int = 100_000) -> None:
    """In-process: µs per put / reserve / delete cycle of the engine port, with and without
    the metrics' feed sink (gateway/metrics.py FeedMetrics), journal on (durable) and off
    (memory mode, where no other sink runs). Alternated 3 times, best of each printed."""
    sys.path.insert(0, REPO_ROOT)
    from core.api import Port
    from gateway.metrics import FeedMetrics

    def cycle(durable: bool, sink: bool) -> float:
        port = Port.create(durable=durable)
        if sink:
            port.observe(FeedMetrics().record)
        owner = port.new_owner("beanstalk")
        j = port.persistence
        t0 = time.perf_counter()
        for i in range(n):
            port.put("t", b"x", 0, 0, 60_000, "beanstalk")
            r = port.reserve(owner, ["t"], 0, None)
            port.delete(owner, r.id)
            if j is not None and i % 100 == 99:
                j.take()   # what the writer does: keep the journal small
        return (time.perf_counter() - t0) * 1e6 / n

    for durable in (True, False):
        best = {False: 1e9, True: 1e9}
        for _ in range(3):
            for sink in (False, True):
                best[sink] = min(best[sink], cycle(durable, sink))
        print(f"sink cost ({'journal on' if durable else 'memory mode'}): "
              f"{best[False]:.2f} µs/cycle without, {best[True]:.2f} with "
              f"(+{best[True] - best[False]:.2f} µs per 3 events)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4, help="A/B pairs (default 4)")
    ap.add_argument("--duration", type=float, default=3.0, help="s per run (default 3)")
    ap.add_argument("--workers", type=int, default=3, help="client processes (default 3)")
    ap.add_argument("--batch", type=int, default=10, help="jobs per pipelined batch")
    ap.add_argument("--live-url", default=None,
                    help="live-update stream held open in B (default /ui/events, the "
                         "dashboard's; a path is on the http listener; ws://<http>/ws: "
                         "bunqueue's WebSocket)")
    ap.add_argument("--sink-only", action="store_true",
                    help="only measure the feed sink in-process (no server)")
    ap.add_argument("--observers", default="scrape,live",
                    help="what B runs: scrape, live or both (default scrape,live)")
    args = ap.parse_args(argv)
    kinds = set(args.observers.split(","))
    if args.sink_only:
        sink_cost()
        return 0
    install_signal_cleanup()
    srv = Server("jobgate", TEMPLATE, {}, 20.0, cwd=REPO_ROOT).start()
    try:
        http = f"http://{HOST}:{srv.ports['HTTP_PORT']}"
        live = args.live_url or "/ui/events"
        if live == "/ws":
            live = f"ws://{HOST}:{srv.ports['HTTP_PORT']}/ws"
        if live.startswith("/"):   # a path on the http listener, e.g. /ui/events
            live = http + live
        run_load(srv.port, args.workers, 1.0, args.batch)   # warm-up
        rows = []
        for i in range(args.rounds):
            a, ca = measured(srv, args)
            with Observers(http, live if "live" in kinds else None,
                           scrape="scrape" in kinds) as obs:
                b, cb = measured(srv, args)
            rows.append((a, b, obs.stats))
            print(f"round {i + 1}: A {a:7.0f} jobs/s {ca:5.1f} µs/job   "
                  f"B {b:7.0f} jobs/s {cb:5.1f} µs/job   B/A {b / a:.3f}   "
                  f"(scrapes {obs.stats['scrapes']}, live {obs.stats['live']}, "
                  f"errors {obs.stats['errors']})", flush=True)
        ratios = [b / a for a, b, _ in rows]
        print(f"median B/A {statistics.median(ratios):.3f} over {len(rows)} rounds "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f}); "
              f"A median {statistics.median(r[0] for r in rows):.0f} jobs/s, "
              f"B median {statistics.median(r[1] for r in rows):.0f} jobs/s")
    finally:
        srv.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
