"""jobgate driver of pg_queues_bench.py: the enqueue -> fetch -> complete cycle over the
beanstalk protocol (put; reserve-with-timeout; delete), one process per producer and per worker
(processes, so that the Python client is not the bottleneck), spread round-robin over the nodes'
ports. All of them use and watch one tube, so a job put on one node may be reserved on another
(the shared multi-node mode). Standard library only (bench_client.Client for the socket)."""
from __future__ import annotations

import contextlib
import multiprocessing
import signal
import time

from bench_client import Client
from bench_common import CRLF, BenchError
from pgq_common import PAYLOAD_SIZE, Backlog, Window, beanstalk_body, body_time, merge_results

TUBE = "bench"
PUT_HEAD = b"put 1024 0 60 %d\r\n" % PAYLOAD_SIZE
RESERVE = b"reserve-with-timeout 1\r\n"


def _connect(port: int, io_timeout: float) -> Client:
    c = Client(port, io_timeout)
    c.setup_tube(TUBE)
    return c


def _producer(idx: int, port: int, spec: dict, backlog: Backlog, barrier, ctl, pipe) -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    c = None
    try:
        c = _connect(port, spec["io_timeout"])
        barrier.wait(60)
        start, end = ctl[0], ctl[1]
        interval = int(spec["producers"] / spec["rate"] * 1e9) if spec.get("rate") else 0
        next_t = time.monotonic_ns()
        mono = time.monotonic_ns
        sock = c.sock
        enqueued = 0
        while True:
            if interval:
                now = mono()
                if now < next_t:
                    time.sleep((next_t - now) / 1e9)
                next_t += interval
            if not backlog.wait_room(end):
                break
            t = mono()
            if t >= end:
                break
            sock.sendall(PUT_HEAD + beanstalk_body(t) + CRLF)
            r = c.line()
            if not r.startswith(b"INSERTED "):
                raise BenchError(f"put: {r!r}")
            backlog.enq[idx] += 1
            if t >= start:
                enqueued += 1
        pipe.send({"enqueued": enqueued})
    except BaseException as e:
        with contextlib.suppress(Exception):
            barrier.abort()
        pipe.send({"error": f"producer {idx}: {type(e).__name__}: {e}"})
    finally:
        if c is not None:
            c.close()
        pipe.close()


def _worker(idx: int, port: int, spec: dict, backlog: Backlog, barrier, ctl, pipe) -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    c = None
    try:
        c = _connect(port, spec["io_timeout"])
        barrier.wait(60)
        win = Window(ctl[0], ctl[1])
        end = ctl[1]
        mono = time.monotonic_ns
        sock = c.sock
        done = backlog.done
        while mono() < end:
            sock.sendall(RESERVE)
            r = c.line()
            if r == b"TIMED_OUT":
                continue
            if not r.startswith(b"RESERVED "):
                raise BenchError(f"reserve: {r!r}")
            _, jid, size = r.split()
            body = c.take(int(size) + 2)
            t_fetch = mono()
            sock.sendall(b"delete " + jid + CRLF)
            r = c.line()
            if r != b"DELETED":
                raise BenchError(f"delete {jid!r}: {r!r}")
            t_done = mono()
            done[idx] += 1
            win.record(body_time(body), t_fetch, t_done)
        pipe.send(win.result())
    except BaseException as e:
        with contextlib.suppress(Exception):
            barrier.abort()
        pipe.send({"error": f"worker {idx}: {type(e).__name__}: {e}"})
    finally:
        if c is not None:
            c.close()
        pipe.close()


def run(ports: list[int], spec: dict, on_window=None) -> dict:
    """Run producers and workers against the nodes' beanstalk ports (producer i and worker i on
    ports[i % len(ports)]). spec: producers, workers, warmup_s, duration_s, cap, rate (total
    jobs/s, 0 = as fast as the cap allows), io_timeout (s). on_window(start_ns, end_ns,
    client_pids) is called once everyone is connected. Returns merge_results()'s dict."""
    ctx = multiprocessing.get_context("fork")
    backlog = Backlog(spec["producers"], spec["workers"], spec["cap"])
    ctl = ctx.RawArray("q", 2)

    def set_window():
        ctl[0] = time.monotonic_ns() + int(spec["warmup_s"] * 1e9)
        ctl[1] = ctl[0] + int(spec["duration_s"] * 1e9)

    n = spec["producers"] + spec["workers"]
    barrier = ctx.Barrier(n + 1, action=set_window)
    procs, pipes = [], []
    for kind, count in (("w", spec["workers"]), ("p", spec["producers"])):
        for i in range(count):
            r, w = ctx.Pipe(duplex=False)
            target = _worker if kind == "w" else _producer
            p = ctx.Process(target=target, daemon=True,
                            args=(i, ports[i % len(ports)], spec, backlog, barrier, ctl, w))
            p.start()
            w.close()
            procs.append(p)
            pipes.append(r)
    parts = []
    try:
        try:
            barrier.wait(90)
        except Exception:
            pass   # a child failed: its error comes through its pipe
        else:
            if on_window:
                on_window(ctl[0], ctl[1], [p.pid for p in procs])
        limit = time.monotonic() + spec["warmup_s"] + spec["duration_s"] + spec["io_timeout"] + 10
        for r in pipes:
            if r.poll(max(0.1, limit - time.monotonic())):
                with contextlib.suppress(EOFError):
                    parts.append(r.recv())
                    continue
            parts.append({"error": "a client process sent no result"})
    finally:
        for p in procs:
            p.join(2)
            if p.is_alive():
                p.kill()
                p.join()
    return merge_results(parts, spec["duration_s"])
