"""Loading stored jobs back into an engine at start (DESIGN.md, "Storage and durability").

Rules, as beanstalkd does after a restart with a binlog: reserved jobs come back ready, buried
stay buried (in id order), delayed keep their wall-clock deadline (already past: ready at the
first tick), ids continue after the highest ever handed out. Completed jobs keep their result;
TTLs keep their wall-clock end (already past: evicted at the first tick); attempts and fails
counts are kept.
"""
from __future__ import annotations

import msgpack

from .model import BURIED, COMPLETED, DELAYED, READY, RESERVED, Job


def restore(engine, loaded) -> int:
    """Rebuild `engine` (empty, core.engine.Engine) from `loaded` (core.storage.Loaded).

    Returns the number of jobs restored. Jobs whose state changed (reserved -> ready) are marked
    dirty in the engine's journal so storage catches up.
    """
    j = engine.journal
    if j is not None and j.open_batch == 1:
        # batch 1 stands for "what was loaded": committed by definition
        j.open_batch, j.committed = 2, 1
    now_mono = engine.clock.monotonic_ms()
    now_wall = engine.clock.wall_ms()
    n = 0
    for r in loaded.jobs:
        job = Job(r["id"], r["queue"], bytes(r["payload"]), r["priority"], r["ttr_ms"],
                  r["delay_ms"], r["created_ms"], r["dialect"], r["uid"])
        job.reserves = r["reserves"]
        job.timeouts = r["timeouts"]
        job.releases = r["releases"]
        job.buries = r["buries"]
        job.kicks = r["kicks"]
        job.fails = r["fails"]
        job.ttl_ms = r["ttl_ms"]
        job.max_attempts = r["max_attempts"]
        job.max_fails = r["max_fails"]
        job.sched_ms = r["sched_ms"]
        if r["result"] is not None:
            job.result = bytes(r["result"])
            job.result_ok = bool(r["result_ok"])
        job.fmt = r["payload_fmt"]
        if r["extras"] is not None:
            job.ext = msgpack.unpackb(r["extras"], raw=False, strict_map_key=False)
        job.in_db = 1
        engine.jobs[job.id] = job
        if job.uid is not None:
            engine.by_uid[job.uid] = job
        if job.ext is not None:
            engine.index_extras(job)
        if r["expires_at_ms"] is not None:
            engine._expire_at(job, now_mono + (r["expires_at_ms"] - now_wall))
        q = engine.queue(job.queue)
        q.total_jobs += 1
        st = r["state"]
        if st == DELAYED and r["ready_at_ms"] is not None:
            engine._to_delayed(job, q, now_mono + (r["ready_at_ms"] - now_wall))
        elif st == BURIED:
            engine._to_buried(job, q)
        elif st == COMPLETED:
            job.state = COMPLETED
            q.n_done += 1
        else:
            engine._to_ready(job, q)
            if st == RESERVED and engine.journal is not None:
                engine.journal.mark(job)
        n += 1
    engine.total_jobs += n
    engine.next_id = max(engine.next_id, loaded.next_id)
    assert all(j.state in (READY, DELAYED, BURIED, COMPLETED) for j in engine.jobs.values())
    return n
