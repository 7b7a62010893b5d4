"""The queue-level glidemq functions: pause and resume (glide-mq-NOTES.md; golden F01–F09),
and the three a glide-mq Queue calls in the background: tryLock, unlock, sweepSuspended
(golden G67–G72). docs/glide-mq.md.
"""
from __future__ import annotations

from .encode import Error
from .functions_jobs import Refused, _fn, _num, _queue_key, _s
from .state import PAUSE_FOREVER_MS


@_fn("pause")
def pause(sess, keys, argv):
    """glidemq_pause: meta paused "1", a `paused` event, the canonical queue paused in every
    dialect (a beanstalk pause-tube without end); integer 1 (golden F02, F04)."""
    return _pause(sess, keys, True)


@_fn("resume")
def resume(sess, keys, argv):
    """glidemq_resume: meta paused "0", a `resumed` event, the queue served again; 1."""
    return _pause(sess, keys, False)




def _pause(sess, keys, on: bool):
    name = "glidemq_pause" if on else "glidemq_resume"
    if len(keys) < 2:
        return Error(f"ERR {name} needs the keys meta and events (got {len(keys)})")
    try:
        k = _queue_key(keys[0], "meta")
    except Refused as e:
        return Error(str(e))
    st = sess.state
    port = sess.port
    st.set_meta(k.base, "paused", "1" if on else "0")
    port.keep(k.queue, True)
    port.pause(k.queue, PAUSE_FOREVER_MS if on else 0)
    st.add_event(k.base, ["event", "paused" if on else "resumed", "jobId", "0"])
    sess.need_commit = True
    return 1


@_fn("tryLock")
def try_lock(sess, keys, argv):
    """glidemq_tryLock key token ttlMs: SET NX PX; 1 taken, 0 held (golden G68, G69)."""
    if not keys or len(argv) < 2:
        return Error("ERR glidemq_tryLock needs a key, a token and ttlMs")
    return 1 if sess.state.try_lock(_s(keys[0]), argv[0], _num(_s(argv[1]))) else 0


@_fn("unlock")
def unlock(sess, keys, argv):
    """glidemq_unlock key token: 1 when the token held the lock, else 0 (golden G71, G72)."""
    if not keys or not argv:
        return Error("ERR glidemq_unlock needs a key and a token")
    return 1 if sess.state.unlock(_s(keys[0]), argv[0]) else 0


@_fn("sweepSuspended")
def sweep_suspended(sess, keys, argv):
    """glidemq_sweepSuspended: 0 — jobgate has no suspended jobs (a Worker feature; golden
    G70)."""
    return 0
