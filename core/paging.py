"""Keyset pages of a queue's jobs by id (the dashboard's job list, docs/dashboard.md).

Index: each Queue keeps `ids`, the ids of the jobs put in it in ascending order (ids are
assigned in increasing order and a job never changes queue). A put appends its id; a delete
only counts (`ids_dead`); when deleted ids outnumber half the list (+1024) the list is
compacted in one pass (`compact_ids`), so the hot path pays one append per put and one
increment per delete, and the list stays under 2x the live jobs + 1024 entries.

A page is found by bisecting the list for the cursor and walking it in chunks; the job
records come from `engine.jobs` with C-level map / compress (no Python code per id), so a
page costs about (ids walked until `limit` matches) x ~0.1-0.2 us (memory bound). A state
that is sparse in the queue (fewer than 1/SPARSE of its ids) is not walked for: its ids are
taken from the state's own index (ready heap, delayed heap, buried dict, completed dict, the
engine's reserved heap), sorted and bisected, which costs O(that state's count). The worst
case is a dense state clustered away from the cursor (e.g. the first 500k of 1M jobs
completed, the rest ready, listing ready from the start): the walk crosses the other
cluster. Units: ids are ints; `limit` jobs per page.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import compress, repeat
from operator import attrgetter, is_not
from typing import NamedTuple

from .model import BURIED, COMPLETED, DELAYED, LIVE_STATES, READY, RESERVED
from .records import live_job

#: the states a page may be filtered by: the live states, and "failed" (a buried job with a
#: result: dead-lettered), a subset of "buried"
FILTERS = LIVE_STATES + ("failed",)
#: a state with fewer than 1/SPARSE of the queue's ids is read from its own index
SPARSE = 8
#: ids an existence check (more_before / more_after) looks at, at most
EXISTS_BUDGET = 1 << 16
_CHUNK0 = 256
_CHUNK_MAX = 1 << 16
_state = attrgetter("state")


class _Gone:
    """Stands for a deleted id while walking (engine.jobs.get's default)."""
    state = "gone"   # a str: str.__eq__ against it is a bool
    result = None


_GONE = _Gone()


class Page(NamedTuple):
    """One page of jobs (core.records.Job here; the port turns them into JobViews).

    `jobs`: ascending by id, at most `limit`; `more_before` / `more_after`: whether a job of the
    same filter exists before the first / after the last one (for prev / next links). The side
    the page was read towards is exact; the other side (behind the cursor) is looked up within
    EXISTS_BUDGET ids of a walked filter and is True when that could not tell."""

    jobs: list
    more_before: bool
    more_after: bool


def compact_ids(engine, q) -> None:
    """Drop the ids of deleted jobs from `q.ids` (one pass, order kept)."""
    jobs = engine.jobs
    q.ids = [i for i in q.ids if i in jobs]
    q.ids_dead = 0


def _count(engine, q, state: str) -> int:
    if state is READY:
        return q.n_ready
    if state is DELAYED:
        return q.n_delayed
    if state is RESERVED:
        return engine.n_reserved   # the index read is engine-wide
    if state is BURIED or state == "failed":
        return len(q.buried)
    return q.n_done


def _sparse_ids(engine, q, state: str) -> list:
    """The sorted ids of `q`'s jobs in `state`, from that state's own index."""
    if state is READY or state is DELAYED:
        heap = q.ready if state is READY else q.delayed
        jobs = engine.jobs
        ids = [e[3] for e in heap if live_job(jobs, e) is not None]
    elif state is RESERVED:
        name = q.name
        jobs = engine.jobs
        ids = [e[3] for e in engine._reserved if (j := live_job(jobs, e)) is not None
               and j.queue == name and j.state is RESERVED]
    elif state is COMPLETED:
        ids = list(q.done)
    elif state == "failed":
        ids = [i for i, j in q.buried.items() if j.result is not None]
    else:
        ids = list(q.buried)
    ids.sort()
    return ids


def _walk(engine, ids: list, pos: int, forward: bool, state):
    """Yield the live jobs of `ids` from index `pos` on (forward) or from `pos - 1` down
    (backward) that are in `state` (None: any; "failed": buried with a result), in chunks."""
    get = engine.jobs.get
    want = BURIED if state == "failed" else state
    chunk = _CHUNK0
    n = len(ids)
    while (pos < n) if forward else (pos > 0):
        if forward:
            part = ids[pos:pos + chunk]
            pos += chunk
        else:
            lo = max(0, pos - chunk)
            part = ids[lo:pos]
            part.reverse()
            pos = lo
        js = list(map(get, part, repeat(_GONE)))
        if want is None:
            sel = compress(js, map(is_not, js, repeat(_GONE)))
        else:
            sel = compress(js, map(want.__eq__, map(_state, js)))
        if state == "failed":
            sel = (j for j in sel if j.result is not None)
        yield from sel
        chunk = min(chunk * 4, _CHUNK_MAX)


def _exists(engine, ids: list, pos: int, forward: bool, state) -> bool:
    """Whether a job in `state` lies after index `pos` (forward) or before it; looks at
    EXISTS_BUDGET ids at most and answers True when it could not tell (a prev / next link
    that may lead to an empty page, which the dashboard turns into the first / last)."""
    if forward:
        sub = ids[pos:pos + EXISTS_BUDGET]
        start, beyond = 0, pos + EXISTS_BUDGET < len(ids)
    else:
        sub = ids[max(0, pos - EXISTS_BUDGET):pos]
        start, beyond = len(sub), pos > EXISTS_BUDGET
    if next(_walk(engine, sub, start, forward, state), None) is not None:
        return True
    return beyond


def _take(it, n: int) -> list:
    out = []
    for j in it:
        out.append(j)
        if len(out) == n:
            break
    return out


def page(engine, queue: str, state: str | None = None, after: int | None = None,
         before: int | None = None, limit: int = 50) -> Page | None:
    """Up to `limit` jobs of `queue` (in `state` when given: one of FILTERS) in ascending id
    order: the first ones with id > `after`, or the last ones with id < `before`, or the first
    page when neither is given. `before` may be larger than any id (the last page).
    Returns None when the queue does not exist. Raises ValueError for an unknown `state`, a
    `limit` < 1, or both cursors given."""
    if state is not None:
        if state not in FILTERS:
            raise ValueError(f"unknown state {state!r}")
        state = next(s for s in FILTERS if s == state)   # the interned constant
    if limit < 1:
        raise ValueError("limit must be >= 1")
    if after is not None and before is not None:
        raise ValueError("after and before are exclusive")
    q = engine.queues.get(queue)
    if q is None:
        return None
    ids = q.ids
    forward = before is None
    c = _count(engine, q, state) if state is not None else -1
    if 0 <= c and c * SPARSE < len(ids):
        # sparse: its own sorted ids, then the jobs (a job may have left the state since only
        # when it is stale in a heap, which the hver check already dropped)
        ids = _sparse_ids(engine, q, state)
        get = engine.jobs.__getitem__
        if forward:
            i = 0 if after is None else bisect_right(ids, after)
            sel = ids[i:i + limit + 1]
            return Page([get(x) for x in sel[:limit]], i > 0, len(sel) > limit)
        i = bisect_left(ids, before)
        lo = max(0, i - limit)
        return Page([get(x) for x in ids[lo:i]], lo > 0, i < len(ids))
    if forward:
        i = 0 if after is None else bisect_right(ids, after)
        got = _take(_walk(engine, ids, i, True, state), limit + 1)
        more_after = len(got) > limit
        del got[limit:]
        more_before = i > 0 and _exists(engine, ids, i, False, state)
        return Page(got, more_before, more_after)
    i = bisect_left(ids, before)
    got = _take(_walk(engine, ids, i, False, state), limit + 1)
    more_before = len(got) > limit
    del got[limit:]
    got.reverse()
    more_after = i < len(ids) and _exists(engine, ids, i, True, state)
    return Page(got, more_before, more_after)


__all__ = ["Page", "FILTERS", "page", "compact_ids"]
