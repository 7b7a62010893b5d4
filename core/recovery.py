"""Loading stored jobs back into an engine at start (DESIGN.md, "Storage and durability").

Rules, as beanstalkd does after a restart with a binlog: reserved jobs come back ready, buried
stay buried (in id order), delayed keep their wall-clock deadline (already past: ready at the
first tick), ids continue after the highest ever handed out. Completed jobs keep their result;
TTLs keep their wall-clock end (already past: evicted at the first tick); attempts and fails
counts are kept. One exception (core/leases.py): a reserved job whose lease was stored (a
bunqueue lock) stays reserved with the same token until the stored deadline, held by an owner
of that name that belongs to no connection.
"""
from __future__ import annotations

from heapq import heappush

import msgpack

from .model import BURIED, COMPLETED, DELAYED, READY, RESERVED, TOKEN_REQUIRED
from .records import Job, Owner


def restore(engine, loaded) -> int:
    """Rebuild `engine` (empty, core.engine.Engine) from `loaded` (core.storage.Loaded: job rows
    as a list or a stream, in id order, and the stored next id).

    Returns the number of jobs restored. Jobs whose state changed (reserved -> ready) are marked
    dirty in the engine's journal so storage catches up.
    """
    j = engine.journal
    if j is not None and j.open_batch == 1:
        # batch 1 stands for "what was loaded": committed by definition
        j.open_batch, j.committed = 2, 1
    now_mono = engine.clock.monotonic_ms()
    now_wall = engine.clock.wall_ms()
    owners: dict = {}
    n = 0
    top = 0
    # Rows bring a fresh object for every value; jobs made at run time share their queue
    # name, dialect, priority, TTR and creation ms (Engine.new_job). Share them here too, so
    # that a restart does not cost more memory than the run before it (issue 14).
    strs: dict = {}
    for r in loaded.jobs:
        job = job_of_row(engine, r, strs)
        top = job.id
        adopt(engine, job, r, now_mono, now_wall)
        q = engine.queue(job.queue)
        q.ids.append(job.id)   # the listing index (core/paging.py)
        q.total_jobs += 1
        st = r["state"]
        if st == RESERVED and r.get("lease_token") and r.get("lease_until_ms") is not None:
            _lease(engine, job, q, r, owners, now_mono, now_wall)
        else:
            index_stored(engine, job, q, r, now_mono, now_wall)
            if st == RESERVED and engine.journal is not None:
                engine.journal.mark(job)
        n += 1
    engine.total_jobs += n
    for q in engine.queues.values():
        q.ids.sort()   # rows come in id order (then this is a linear check); else sorted now
    engine.next_id = max(engine.next_id, loaded.next_id, top + 1)
    assert all(x.state in (READY, DELAYED, BURIED, COMPLETED, RESERVED)
               for x in engine.jobs.values())
    return n


def job_of_row(engine, r: dict, strs: dict | None = None) -> Job:
    """A Job made from stored row `r` (a dict of the jobs columns), indexed nowhere and in no
    state yet: its fields, counters, result, payload encoding and extras, `in_db` set.
    `strs` (a dict) shares equal queue and dialect strings between the jobs it makes."""
    q, d = r["queue"], r["dialect"]
    if strs is not None:
        q, d = strs.setdefault(q, q), strs.setdefault(d, d)
    job = engine.new_job(r["id"], q, bytes(r["payload"]), r["priority"], r["ttr_ms"],
                         r["delay_ms"], r["created_ms"], d, r["uid"])
    job.reserves = r["reserves"]
    # the rarely set fields only when set (each write goes through a property: core.records)
    for name in _MORE_COLUMNS:
        v = r[name]
        if v:
            setattr(job, name, v)
    if r["result"] is not None:
        job.result = bytes(r["result"])
        job.result_ok = bool(r["result_ok"])
    if r["payload_fmt"]:
        job.fmt = r["payload_fmt"]
    if r["extras"] is not None:
        job.ext = msgpack.unpackb(r["extras"], raw=False, strict_map_key=False)
    job.in_db = 1
    return job


def adopt(engine, job: Job, r: dict, now_mono: int, now_wall: int) -> None:
    """Make `job` (from row `r`) the engine's: in its job and uid maps, its extras indexed,
    its stored expiry (wall ms) armed on the monotonic clock. Its state's index is the
    caller's."""
    engine.jobs[job.id] = job
    if job.uid is not None:
        engine.by_uid[job.uid] = job
    if job.ext is not None:
        engine.index_extras(job)
    if r["expires_at_ms"] is not None:
        engine._expire_at(job, now_mono + (r["expires_at_ms"] - now_wall))


def index_stored(engine, job: Job, q, r: dict, now_mono: int, now_wall: int) -> None:
    """Index `job` (from row `r`, adopted) in queue `q` in the state its row has: delayed
    (its timer armed at the stored ready_at_ms, wall ms), buried, completed; any other state
    (ready, a reservation without a lease to restore) as ready."""
    st = r["state"]
    if st == DELAYED and r["ready_at_ms"] is not None:
        engine._to_delayed(job, q, now_mono + (r["ready_at_ms"] - now_wall))
    elif st == BURIED:
        engine._to_buried(job, q)
    elif st == COMPLETED:
        job.state = COMPLETED
        q.n_done += 1
        q.done[job.id] = job
    else:
        engine._to_ready(job, q)


_MORE_COLUMNS = ("timeouts", "releases", "buries", "kicks", "fails", "ttl_ms", "max_attempts",
                 "max_fails", "sched_ms")


def _lease(engine, job: Job, q, r: dict, owners: dict, now_mono: int, now_wall: int) -> None:
    """Put `job` back in the reserved state its stored lease describes (core/leases.py)."""
    name = r.get("lease_owner") or f"{job.dialect}#restored"
    owner = owners.get(name)
    if owner is None:
        owner = owners[name] = Owner(job.dialect, margin=False, name=name)
    job.state = RESERVED
    job.hver += 1
    job.owner = owner
    job.token = r["lease_token"]
    job.lease_mode = TOKEN_REQUIRED
    job.deadline = now_mono + (r["lease_until_ms"] - now_wall)
    heappush(engine._reserved, (job.deadline, job.id, job.hver, job.id))
    q.n_reserved += 1
    engine.n_reserved += 1
    owner.reserved[job.id] = job
    engine._arm(job.deadline)
