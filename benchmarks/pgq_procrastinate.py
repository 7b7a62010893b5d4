"""Procrastinate driver of pg_queues_bench.py, run with the benchmark venv's interpreter (the one
that has procrastinate; never the project's). P producer processes `defer_async` a task in a
closed loop (at most --cap jobs waiting or running); this process runs Procrastinate's own worker
(App.run_worker_async, concurrency N: one fetch loop, N job slots, LISTEN/NOTIFY wake-ups).

Usage: python pgq_procrastinate.py SPEC_JSON
  SPEC: {conninfo, producers, workers, warmup_s, duration_s, cap, pool, rate (total jobs/s,
         0 = as fast as the cap allows)}
Prints "window <start_ns> <end_ns>" when the producers start, then one JSON result line
(completed, enqueued, e2e_ms[], fetch_ms[], errors[])."""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import multiprocessing
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pgq_common import Backlog, Window, json_payload  # noqa: E402

import procrastinate  # noqa: E402

QUEUE = "bench"


def make_app(conninfo: str, pool: int) -> tuple[procrastinate.App, object]:
    """An App on conninfo with a psycopg pool of at most `pool` connections, and its task."""
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(
        conninfo=conninfo, min_size=min(4, pool), max_size=pool))

    @app.task(name="bench", queue=QUEUE, pass_context=True)
    async def bench(context, t: int, p: str) -> None:
        PICKED[context.job.id] = time.monotonic_ns()

    return app, bench


PICKED: dict[int, int] = {}


async def _apply_schema(conninfo: str) -> None:
    app, _ = make_app(conninfo, 1)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()


def producer(idx: int, spec: dict, backlog: Backlog, barrier, ctl, pipe) -> None:
    async def body():
        app, task = make_app(spec["conninfo"], 1)   # one defer at a time: one connection
        async with app.open_async():
            await asyncio.to_thread(barrier.wait, 60)
            start, end = ctl[0], ctl[1]
            enqueued = 0
            interval = int(spec["producers"] / spec["rate"] * 1e9) if spec.get("rate") else 0
            next_t = time.monotonic_ns()
            while True:
                if interval:
                    now = time.monotonic_ns()
                    if now < next_t:
                        await asyncio.sleep((next_t - now) / 1e9)
                    next_t += interval
                while backlog.level() >= backlog.cap and time.monotonic_ns() < end:
                    await asyncio.sleep(0.0002)
                t = time.monotonic_ns()
                if t >= end:
                    break
                await task.defer_async(**json_payload(t))
                backlog.enq[idx] += 1
                if t >= start:
                    enqueued += 1
            return enqueued
    try:
        pipe.send({"enqueued": asyncio.run(body())})
    except BaseException as e:
        with contextlib.suppress(Exception):
            barrier.abort()
        pipe.send({"enqueued": 0, "error": f"producer {idx}: {type(e).__name__}: {e}"})


async def run_worker(spec: dict, backlog: Backlog, barrier, ctl) -> dict:
    app, _ = make_app(spec["conninfo"], spec["pool"])
    win = Window(0, 0)
    orig_finish = app.job_manager.finish_job

    async def finish_job(job, status, delete_job):
        # Measurement only: the completion the worker acknowledges after the task returns.
        await orig_finish(job=job, status=status, delete_job=delete_job)
        t = time.monotonic_ns()
        backlog.done[0] += 1
        tp = PICKED.pop(job.id, t)
        win.record(job.task_kwargs.get("t"), tp, t)

    app.job_manager.finish_job = finish_job
    async with app.open_async():
        worker = asyncio.create_task(app.run_worker_async(
            queues=[QUEUE], concurrency=spec["workers"], install_signal_handlers=False,
            wait=True))
        await asyncio.to_thread(barrier.wait, 60)
        win.start_ns, win.end_ns = ctl[0], ctl[1]
        print(f"window {win.start_ns} {win.end_ns}", flush=True)
        await asyncio.sleep(max(0.0, (win.end_ns - time.monotonic_ns()) / 1e9))
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError, asyncio.TimeoutError):
            await asyncio.wait_for(worker, 10)
    return win.result()


def main() -> int:
    spec = json.loads(sys.argv[1])
    logging.basicConfig(level=logging.WARNING)
    # "App is instantiated in the main Python module": true and harmless here (one script).
    logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)
    asyncio.run(_apply_schema(spec["conninfo"]))
    ctx = multiprocessing.get_context("fork")
    backlog = Backlog(spec["producers"], 1, spec["cap"])
    ctl = ctx.RawArray("q", 2)

    def set_window():
        t0 = time.monotonic_ns()
        ctl[0] = t0 + int(spec["warmup_s"] * 1e9)
        ctl[1] = ctl[0] + int(spec["duration_s"] * 1e9)

    barrier = ctx.Barrier(spec["producers"] + 1, action=set_window)
    pipes, procs = [], []
    for i in range(spec["producers"]):
        r, w = ctx.Pipe(duplex=False)
        p = ctx.Process(target=producer, args=(i, spec, backlog, barrier, ctl, w), daemon=True)
        p.start()
        w.close()
        pipes.append(r)
        procs.append(p)
    errors = []
    try:
        res = asyncio.run(run_worker(spec, backlog, barrier, ctl))
    except BaseException as e:
        res = {"completed": 0, "e2e_ms": [], "fetch_ms": []}
        errors.append(f"worker: {type(e).__name__}: {e}")
    enqueued = 0
    for r in pipes:
        if r.poll(15):
            m = r.recv()
            enqueued += m.get("enqueued", 0)
            if m.get("error"):
                errors.append(m["error"])
    for p in procs:
        p.join(5)
        if p.is_alive():
            p.kill()
    window_s = spec["duration_s"]
    res.update(enqueued=enqueued, errors=errors, window_s=window_s,
               jobs_per_s=res["completed"] / window_s)
    print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
