"""glidemq_addFlow: a parent job and its children in one atomic call (glide-mq-NOTES.md
"Flows"; golden E01–E13, I21, H23; docs/glide-mq.md).

KEYS: the parent queue's id, stream, scheduled, events, then the same four per child (each in
its own queue). ARGV: 9 for the parent (name, data, opts, timestamp, delay, priority,
maxAttempts, numChildren, customId), 9 per child (name, data, opts, delay, priority,
maxAttempts, child queue key prefix `<prefix>:{C}`, the parent's queue name, customId), then
numExtraDeps and that many deps members (`<prefix>:{C}:<id>` of existing jobs).

Canonically the parent waits for its dependencies (core/flows.py: DELAYED, parked) — the
children's uids, which are exactly the deps members — and becomes ready when the last one
completes, in whichever dialect: a bunqueue ACK, a workq complete, or a beanstalk delete of
the reserved child (the glidemq job policy makes that a completion). Reply: the JSON text
`["<parentId>","<child1>",...]`, or `["duplicate"]` when a custom id is taken (nothing is
created then).
"""
from __future__ import annotations

import json

from .encode import Error
from .functions_jobs import (JobArgs, Refused, _create, _fn, _next_id, _num, _queue_key, _s,
                             _ts_int, custom_taken)
from .glide import parse_key


def _child_args(c: list, ts: bytes, parent_id: str) -> JobArgs:
    """A child's 9 arguments as addJob's layout."""
    name, data, opts, delay, prio, maxa, _prefix, pqueue, custom = c
    a = [name, data, opts, ts, delay, prio, parent_id.encode(), maxa, b"", b"0", b"0", b"0",
         b"0", b"0", b"0", b"0", custom, b"0", pqueue]
    return JobArgs(a)


@_fn("addFlow")
def add_flow(sess, keys, argv):
    """glidemq_addFlow (see the module docstring)."""
    try:
        return _add_flow(sess, keys, argv)
    except Refused as e:
        return Error(str(e))


def _add_flow(sess, keys, argv):
    if len(keys) < 4:
        raise Refused(f"ERR glidemq_addFlow needs the parent queue's keys id, stream, "
                      f"scheduled and events (got {len(keys)})")
    if len(argv) < 9:
        raise Refused("ERR glidemq_addFlow needs 9 parent arguments")
    pk = _queue_key(keys[0], "id")
    n = _num(_s(argv[7]))
    if n < 0 or len(argv) < 9 + 9 * n or len(keys) < 4 + 4 * n:
        raise Refused(f"ERR glidemq_addFlow: numChildren {n} does not match the keys and "
                      f"arguments given")
    rest = argv[9 + 9 * n:]
    n_extra = _num(_s(rest[0])) if rest else 0
    if n_extra < 0 or len(rest) < 1 + n_extra:
        raise Refused(f"ERR glidemq_addFlow: numExtraDeps {n_extra} does not match the "
                      f"arguments given")
    extra = [_s(m) for m in rest[1:1 + n_extra]]
    for m in extra:
        mk = parse_key(m.encode())
        if mk is None or not mk.kind or mk.arg is not None:
            raise Refused(f"ERR glidemq_addFlow: bad deps member {m}")
    ts = argv[3]
    parent_args = JobArgs([argv[0], argv[1], argv[2], ts, argv[4], argv[5], b"", argv[6],
                           b"", b"0", b"0", b"0", b"0", b"0", b"0", b"0", argv[8]])
    _ts_int(parent_args, 0)
    children = []
    for i in range(n):
        c = argv[9 + 9 * i: 18 + 9 * i]
        ck = _queue_key(keys[4 + 4 * i], "id")
        children.append((ck, c))
        _ts_int(_child_args(c, ts, "x"), 0)
    # custom ids first: a taken one creates nothing
    customs = [(pk.base, parent_args.custom_id)] + [(ck.base, _s(c[8])) for ck, c in children]
    seen = set()
    for base, cid in customs:
        if cid and (custom_taken(sess, f"{base}:{cid}") or (base, cid) in seen):
            return json.dumps(["duplicate"])
        seen.add((base, cid))
    pid = _next_id(sess, pk.base, parent_args.custom_id)
    ids = [pid]
    members = []
    made = []
    for ck, c in children:
        cargs = _child_args(c, ts, pid)
        cid = _next_id(sess, ck.base, cargs.custom_id)
        ids.append(cid)
        members.append(f"{ck.base}:{cid}")
        made.append((ck, cargs, cid))
    for ck, cargs, cid in made:
        _create(sess, ck.prefix, ck.queue, cargs, cid)
    _create(sess, pk.prefix, pk.queue, parent_args, pid, flow_deps=members + extra)
    sess.need_commit = True
    return json.dumps(ids, separators=(",", ":"))
