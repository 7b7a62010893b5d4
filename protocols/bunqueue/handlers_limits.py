"""Queue limit and stall config commands: RateLimit, RateLimitClear, SetConcurrency,
ClearConcurrency, GetQueueLimits, SetStallConfig, GetStallConfig (bunqueue-tcp-protocol.txt
"Rate Limiting Commands"; reference bunqueue 2.9.5
infrastructure/server/handlers/advanced/queue.js, advanced/configNumbers.js, introspection.js).

The limits are canonical (core/limits.py, docs/mapping.md "Queue limits (issue 16)"): a
beanstalk reserve or a workq lease on a limited queue waits as a PULL does. Replies and error
texts are the reference's (docs/bunqueue.md "Rate and concurrency limits (issue 16)"):

- `limit` (and `duration`, `ttl`, the stall config's numbers) go through the reference's
  toFiniteNumber (JavaScript `Number()`): "7" is 7, true is 1, "" is 0; a missing or
  non-finite limit answers `limit must be a finite number`;
- the queue is not validated (any string, even empty); a missing, nil or non-empty array
  queue answers the JavaScript TypeError text the reference answers (QUEUE_ERRORS).
"""
from __future__ import annotations

import math
import re

from core.api import RESERVED

from .codec import _js_string, js_num
from .handlers_query import global_counts
from .registry import command, err, ok_empty

_LIMIT_ERROR = "limit must be a finite number"
#: The reference's answers for a queue its FNV hash cannot read (shared/hash.js fnv1a).
QUEUE_MISSING = "undefined is not an object (evaluating 'str.length')"
QUEUE_NULL = "null is not an object (evaluating 'str.length')"
QUEUE_NOT_STRING = ("str.charCodeAt is not a function. (In 'str.charCodeAt(i)', "
                    "'str.charCodeAt' is undefined)")
#: SetStallConfig's numeric keys (reference handleSetStallConfig).
_STALL_NUMBERS = ("stallInterval", "maxStalls", "gracePeriod")

_DEC = re.compile(r"[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)\Z")
_RADIX = {"0x": 16, "0o": 8, "0b": 2}
_NAN = float("nan")


def js_number(v):
    """JavaScript `Number(v)` for a decoded MessagePack value: an int or float (NaN or an
    infinity when JavaScript gives one), or None for undefined / nil."""
    c = v.__class__
    if c is int or c is float:
        return v
    if v is None:
        return None
    if c is bool:
        return 1 if v else 0
    if c is str:
        s = v.strip()
        if not s:
            return 0
        r = _RADIX.get(s[:2].lower())
        if r is not None:
            try:
                return int(s[2:], r)
            except ValueError:
                return _NAN
        if s in ("Infinity", "+Infinity", "-Infinity"):
            return float(s.replace("Infinity", "inf"))
        if _DEC.match(s) is None:
            return _NAN
        f = float(s)
        return int(f) if f.is_integer() and abs(f) < 2**53 else f
    if c is list or c is bytes:   # an array's String() joins its items with ","
        if len(v) == 0:
            return 0
        if len(v) == 1 and (v[0].__class__ in (int, float, str) or c is bytes):
            return js_number(str(v[0]) if c is bytes else _js_string(v[0]))
        return _NAN
    return _NAN


def finite_number(v):
    """The reference's toFiniteNumber: a finite number, or None."""
    n = js_number(v)
    if n is None or n.__class__ is float and not math.isfinite(n):
        return None
    return n


def queue_arg(cmd: dict):
    """(queue name, None) or (None, the reference's error) for `cmd`'s queue."""
    if "queue" not in cmd:
        return None, QUEUE_MISSING
    q = cmd["queue"]
    c = q.__class__
    if c is str:
        return q, None
    if q is None:
        return None, QUEUE_NULL
    if (c is list or c is bytes) and len(q):
        return None, QUEUE_NOT_STRING
    if c is dict:
        return "[object Object]", None
    if c is list or c is bytes:
        return "", None
    return _js_string(q), None


# -------------------------------------------------------------------- rate limit
@command("RateLimit", mutating=True)
def rate_limit(sess, cmd: dict):
    limit = finite_number(cmd.get("limit"))
    if limit is None:
        return err(_LIMIT_ERROR)
    duration = finite_number(cmd.get("duration"))
    ttl = finite_number(cmd.get("ttl"))
    q, msg = queue_arg(cmd)
    if msg:
        return err(msg)
    sess.port.set_rate_limit(q, limit, duration, ttl)
    return ok_empty()


@command("RateLimitClear", mutating=True)
def rate_limit_clear(sess, cmd: dict):
    q, msg = queue_arg(cmd)
    if msg:
        return err(msg)
    sess.port.clear_rate_limit(q)
    return ok_empty()


# -------------------------------------------------------------------- concurrency
@command("SetConcurrency", mutating=True)
def set_concurrency(sess, cmd: dict):
    limit = finite_number(cmd.get("limit"))
    if limit is None:
        return err(_LIMIT_ERROR)
    q, msg = queue_arg(cmd)
    if msg:
        return err(msg)
    sess.port.set_concurrency(q, limit)
    return ok_empty()


@command("ClearConcurrency", mutating=True)
def clear_concurrency(sess, cmd: dict):
    q, msg = queue_arg(cmd)
    if msg:
        return err(msg)
    sess.port.clear_concurrency(q)
    return ok_empty()


@command("GetQueueLimits")
def get_queue_limits(sess, cmd: dict):
    """{rateLimit, rateLimitTtl, concurrencyLimit, maxed} (reference getQueueLimitStatus).
    With a concurrency limit, `maxed` compares it with the queue's active jobs as
    GetJobCounts counts them (Port.job_counts_global): in shared mode those of every node,
    answered once the database has (PENDING meanwhile; docs/scaling.md)."""
    q, msg = queue_arg(cmd)
    if msg:
        return err(msg)
    mj = cmd.get("maxJobs")
    if mj is not None:
        mj = js_number(mj)
    st = sess.port.queue_limits(q, mj)
    rate = st["rateLimit"]
    if rate is not None:
        rate = {"max": js_num(rate["max"]), "duration": js_num(rate["duration"])}
    c = st["concurrencyLimit"]

    def answer(maxed: bool) -> dict:
        return {"ok": True, "data": {"limits": {
            "rateLimit": rate, "rateLimitTtl": js_num(st["rateLimitTtl"]),
            "concurrencyLimit": None if c is None else js_num(c), "maxed": maxed}}}
    if c is None:
        return answer(st["maxed"])
    return global_counts(sess, q, lambda counts: answer(counts[RESERVED] >= c))


# -------------------------------------------------------------------- stall config
def _config_of(v) -> dict:
    """The entries JavaScript's object spread `{...v}` takes from `v`, numbers sanitized as
    the reference's sanitizeConfigNumbers does (a non-finite one is dropped, nil kept)."""
    c = v.__class__
    if c is dict:
        out = {}
        for k, x in v.items():
            k = k if k.__class__ is str else _js_string(k)
            if k in _STALL_NUMBERS and x is not None:
                x = finite_number(x)
                if x is None:
                    continue
            out[k] = x
        return out
    if c is str or c is list or c is bytes:   # spread by index
        return {str(i): x for i, x in enumerate(v)}
    return {}


def _js_order(d: dict) -> dict:
    """`d` in JavaScript's property order: array-index keys ascending, then the others in
    insertion order."""
    idx = [k for k in d if k.isascii() and k.isdigit() and (k == "0" or k[0] != "0")
           and int(k) < 2**32 - 1]
    if not idx:
        return d
    out = {k: d[k] for k in sorted(idx, key=int)}
    out.update((k, x) for k, x in d.items() if k not in out)
    return out


@command("SetStallConfig", mutating=True)
def set_stall_config(sess, cmd: dict):
    config = _config_of(cmd.get("config"))
    q, msg = queue_arg(cmd)
    if msg:
        return err(msg)
    sess.port.set_stall_config(q, config)
    return ok_empty()


@command("GetStallConfig")
def get_stall_config(sess, cmd: dict):
    q, msg = queue_arg(cmd)
    if msg:
        return err(msg)
    conf = sess.port.stall_config(q)
    out = {k: js_num(x) if x.__class__ in (int, float) else x for k, x in conf.items()}
    return {"ok": True, "config": _js_order(out)}
