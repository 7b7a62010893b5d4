"""Helpers of the glide-mq key-view tests (tests/test_resp_keys*.py): a plain session object
(the attributes a handler reads), `run` (arity checked as the session does), reply
normalisation, and glide jobs made through port.put with the extras protocols/resp/glide.py
documents.
"""
from __future__ import annotations

import dataclasses

import pytest

from core.api import TIMED_OUT, ManualClock, Port
from protocols.resp import keys  # noqa: F401  (importing it registers the key handlers)
from protocols.resp.commands import COMMANDS, wrong_args
from protocols.resp.glide import DEFAULT_LOCK_MS, rank, uid_of
from protocols.resp.state import make_state

WALL0 = 1_700_000_000_000



# ---------------------------------------------------------------- helpers
class Sess:
    """The attributes a handler reads from the connection's Session."""

    def __init__(self, state, port, proto=3):
        self.state = state
        self.port = port
        self.proto = proto
        self.clock = port.clock
        # shared mode's rows read first (resp/shared_reads.py)
        self.remote = self.rows = self.counters = self.metas = None


def run(sess, *words):
    """Call command words[0] with the rest as bytes args, checking the table's arity first
    (as the session does)."""
    name = words[0].upper().encode()
    args = [w if isinstance(w, bytes) else str(w).encode() for w in words[1:]]
    c = COMMANDS[name]
    n = len(args) + 1
    if (c.arity > 0 and n != c.arity) or (c.arity < 0 and n < -c.arity):
        return ("error", wrong_args(c.name))
    return norm(c.fn(sess, args))


def _payload(v) -> list:
    if dataclasses.is_dataclass(v):
        return [getattr(v, f.name) for f in dataclasses.fields(v)]
    if isinstance(v, tuple):
        return list(v)
    if isinstance(v, (str, float, list)):
        return [v.__class__.__mro__[-2](v)]
    if hasattr(v, "__dict__") and vars(v):
        return list(vars(v).values())
    return [getattr(v, s) for s in v.__class__.__slots__]


def norm(v):
    """A reply value as plain data: ("map", [(k, v)]), ("set", [...]), ("double", x),
    ("simple", s), ("error", s), lists, bytes, ints, None (whatever the codec's value classes
    are made of)."""
    name = v.__class__.__name__
    if name == "Map":
        (pairs,) = _payload(v)
        return ("map", [(norm(a), norm(b)) for a, b in pairs])
    if name == "Set":
        (items,) = _payload(v)
        return ("set", [norm(x) for x in items])
    if name == "Double":
        (x,) = _payload(v)
        return ("double", float(x))
    if name == "Simple":
        return ("simple", str(_payload(v)[0]))
    if name == "Error":
        return ("error", str(_payload(v)[0]))
    if name == "_NullArray":
        return "null-array"
    if isinstance(v, list):
        return [norm(x) for x in v]
    assert v is None or v.__class__ in (bytes, int), v
    return v


def add_glide_job(port, queue, gid, name, data, *, prefix="glide", delay=0, priority=0,
                  lifo=False, max_attempts=0, opts="{}", x=(), deps=None, ts=None):
    """Create a job as glidemq_addJob does (extras per protocols/resp/glide.py): returns the
    canonical id."""
    ts = port.clock.wall_ms() if ts is None else ts
    fields = list(x) + ([["lifo", "1"]] if lifo else [])
    g = {"id": gid, "pfx": prefix, "opts": opts, "ts": str(ts), "delay": str(delay),
         "priority": str(priority), "maxAttempts": str(max_attempts),
         "due": ts + delay if delay else None, "x": fields, "backoff": None,
         "roc": None, "rof": None}
    ext = {"name": name, "glide": g}
    if lifo:
        ext["lifo"] = True
    if deps:
        g["deps"] = list(deps)
        ext["deps"] = list(deps)
    return port.put(queue, data.encode(), rank(priority, lifo), delay, DEFAULT_LOCK_MS,
                    "glidemq", uid=uid_of(prefix, queue, gid), ext=ext,
                    max_fails=max(1, max_attempts))


@pytest.fixture(name="env")
def env_fixture():
    port = Port.create(ManualClock(WALL0), durable=False)
    state = make_state(port, {}, None)
    return port, state, Sess(state, port, 3), Sess(state, port, 2)


def reserve(port, queue, dialect="beanstalk", name=None):
    owner = port.new_owner(dialect, name=name)
    r = port.reserve(owner, [queue], 0, lambda r: None)
    assert r is not TIMED_OUT
    return owner, r


def hmap(reply) -> dict:
    assert reply[0] == "map"
    return dict(reply[1])


def K(q, rest, prefix="glide"):
    return f"{prefix}:{{{q}}}:{rest}"


