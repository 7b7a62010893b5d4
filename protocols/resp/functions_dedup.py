"""glidemq_dedup: addJob after a deduplication check (glide-mq-NOTES.md "Deduplication";
golden D01–D13; docs/glide-mq.md). The dedup hash is a dialect record per entry
(protocols/resp/state.py), written only when a job is created, never expired by addJob.
"""
from __future__ import annotations

from .encode import Error
from .functions_jobs import (JobArgs, Refused, _add, _fn, _num, _queue_key, _s, _ts_int,
                             custom_taken)
from .glide import DIALECT, state_of


@_fn("dedup")
def dedup(sess, keys, argv):
    """glidemq_dedup: as addJob after the dedup check of argument 3's mode: simple (skip while
    the recorded job is unfinished), throttle (skip within ttlMs of the recorded producer
    timestamp), debounce (replace a recorded job that is still delayed or prioritized, skip
    one that is waiting or active); any other mode adds without a check. Replies: id,
    "skipped", "duplicate", "ERR:COST_EXCEEDS_CAPACITY" (golden D01–D13)."""
    try:
        if len(keys) < 5:
            raise Refused(f"ERR glidemq_dedup needs the keys dedup, id, stream, scheduled and "
                          f"events (got {len(keys)})")
        dk = _queue_key(keys[0], "dedup")
        if len(argv) < 3:
            raise Refused("ERR glidemq_dedup needs dedupId, ttlMs and mode")
        dedup_id, ttl, mode = _s(argv[0]), _num(_s(argv[1])), _s(argv[2])
        rest = list(argv[3:])
        if len(rest) >= 18 and len(rest) <= 20:   # v93: 21 lifo, 22 parentQueue, 23 skip
            rest = rest[:17] + rest[17:18] + rest[18:19] + [b""] + rest[19:20]
        args = JobArgs(rest)
        _ts_int(args, 0)
        st = sess.state
        base = dk.base
        p = sess.prepared   # shared mode: the entry as the database holds it (resp/shared.py)
        rec = st.dedup(base, dedup_id) if p is None else p.record
        port = sess.port
        if rec is not None and mode in ("simple", "throttle", "debounce"):
            jid, _, rts = rec.rpartition(":")
            uid = f"{base}:{jid}"
            view = port.lookup(uid)
            held = p is not None and uid in p.held   # active on another node
            if mode == "simple":
                if held or (view is not None and view.state not in ("completed", "buried")):
                    return "skipped"
            elif mode == "throttle":
                if ttl > 0 and _num(args.ts) - _num(rts) < ttl:
                    return "skipped"
            elif held:   # debounce: an active job is kept
                return "skipped"
            elif view is not None:   # debounce
                s = state_of(view)
                if s in ("delayed", "prioritized"):
                    if args.custom_id and custom_taken(sess, f"{base}:{args.custom_id}"):
                        return "duplicate"
                    port.remove(view.id, DIALECT, event="remove")
                    st.add_event(base, ["event", "removed", "jobId", jid])
                elif s in ("waiting", "active", "waiting-children"):
                    return "skipped"
        gid, reply = _add(sess, keys[1:], rest, "glidemq_dedup")
        if gid is not None:
            st.set_dedup(base, dedup_id, f"{gid}:{args.ts}")
        return reply
    except Refused as e:
        return Error(str(e))
