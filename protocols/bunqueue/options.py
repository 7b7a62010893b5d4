"""PUSH / PUSHB options: validation with the reference's limits and error strings, and the
canonical job they describe (bunqueue-tcp-protocol.txt "PUSH"; reference: bunqueue 2.9.5
server/protocol/validation: the checks run in this order and the first error is answered).

A JavaScript number is an int or float here; an integer that msgpackr would decode as BigInt
(outside int32/uint32) is not a number. Units: ms.
"""
from __future__ import annotations

import re

from .codec import pack

_QUEUE_RE = re.compile(r"[a-zA-Z0-9_\-.:]+\Z")
DATA_MAX = 10 * 1024 * 1024          # "Job data too large (max 10MB)"
DAY_MS = 24 * 60 * 60 * 1000
YEAR_MS = 365 * DAY_MS
_I_MIN, _U_MAX = -0x80000000, 0xFFFFFFFF

#: (field, min, max) in the reference's check order; priority, attempts and maxAttempts must
#: also be integers.
NUMERIC = (("priority", -1_000_000, 1_000_000), ("delay", 0, YEAR_MS), ("timeout", 0, DAY_MS),
           ("maxAttempts", 1, 1000), ("backoff", 0, DAY_MS), ("ttl", 0, YEAR_MS),
           ("stallTimeout", 0, DAY_MS))
_INTEGRAL = ("priority", "attempts", "maxAttempts")


def queue_error(name) -> str | None:
    """The reference's error for a queue name, or None when it is valid."""
    if name is None or name == "" or name is False or name == 0:
        return "Queue name is required"
    if name.__class__ is not str:
        return None if name.__class__ is int else "Queue name contains invalid characters"
    if len(name) > 256:
        return "Queue name too long (max 256 characters)"
    if _QUEUE_RE.match(name) is None:
        return "Queue name contains invalid characters"
    return None


def queue_name(name) -> str:
    """A valid queue value as the canonical queue name (a number names the queue by its
    decimal form, as JavaScript's regex test reads it)."""
    return name if name.__class__ is str else str(name)


def number_error(value, name: str, lo: float, hi: float, required: bool = False) -> str | None:
    """The reference's validateNumericField."""
    if value is None:
        return f"{name} is required" if required else None
    c = value.__class__
    if c is int:
        if value < _I_MIN or value > _U_MAX:
            return f"{name} must be a number"   # a BigInt in JavaScript
    elif c is float:
        if value != value or value in (float("inf"), float("-inf")):
            return f"{name} must be a finite number"
        if not value.is_integer() and name in _INTEGRAL:
            return f"{name} must be an integer"
    else:
        return f"{name} must be a number"
    if value < lo:
        return f"{name} must be at least {lo}"
    if value > hi:
        return f"{name} must be at most {hi}"
    return None


def _has_bigint(v) -> bool:
    c = v.__class__
    if c is int:
        return v < _I_MIN or v > _U_MAX
    if c is dict:
        return any(_has_bigint(k) or _has_bigint(x) for k, x in v.items())
    if c is list:
        return any(_has_bigint(x) for x in v)
    return False


def data_error(data) -> str | None:
    """validateJobData: JSON-serialisable (no BigInt) and at most 10 MB. Size is measured on
    the MessagePack encoding (the reference measures JSON text; docs/bunqueue.md)."""
    if (data.__class__ is dict or data.__class__ is list or data.__class__ is int) \
            and _has_bigint(data):
        return "Job data must be JSON serializable"
    return None


def backoff_error(value) -> str | None:
    if value is None:
        return None
    if value.__class__ is dict:
        if value.get("type") not in ("fixed", "exponential"):
            return "backoff.type must be 'fixed' or 'exponential'"
        return number_error(value.get("delay"), "backoff.delay", 0, DAY_MS, required=True)
    return number_error(value, "backoff", 0, DAY_MS)


_NO_OPTIONS = frozenset(("data", "name", "removeOnComplete", "removeOnFail", "cmd", "queue",
                         "reqId", "durable", "tags", "jobId", "customId", "uniqueKey",
                         "dependsOn", "lifo", "repeat"))


def group_id_error(g) -> str | None:
    """The reference's error text for a bad `groupId` (None or a valid one: None): a non-empty
    string of at most 256 characters (validateJobOptions; PUSH and PUSHF alike)."""
    if g is None:
        return None
    if g.__class__ is not str:
        return "groupId must be a string"
    if not g:
        return "groupId must be a non-empty string"
    if len(g) > 256:
        return "groupId must be at most 256 characters"
    return None


def options_error(opts: dict) -> str | None:
    """validateJobOptions (and groupId), in the reference's order."""
    if opts.keys() <= _NO_OPTIONS:
        return None
    msg = group_id_error(opts.get("groupId"))
    if msg:
        return msg
    for name, lo, hi in NUMERIC:
        if name == "backoff":
            err = backoff_error(opts.get("backoff"))
        else:
            v = opts.get(name)
            err = None if v is None else number_error(v, name, lo, hi)
        if err:
            return err
    return None


NAME_ERROR = "Job name must be a non-empty string of at most 256 characters"


def take_name(opts: dict) -> str | None:
    """The reference's normalizeLegacyJobPayload (domain/job/payload.js) on one PUSH / PUSHB
    job, in place: without a `name`, a `name` string inside a map `data` becomes the job's
    name and leaves the data (data = the other keys); a name (given or taken) must be a
    non-empty string of at most 256 characters. Returns NAME_ERROR or None. A nil `name` counts
    as absent (the decoder reads nil and undefined alike; the reference refuses nil)."""
    name = opts.get("name")
    if name is None:
        data = opts.get("data")
        if data.__class__ is not dict:
            return None
        name = data.get("name")
        if name.__class__ is not str:
            return None
        opts["data"] = {k: v for k, v in data.items() if k != "name"}
        opts["name"] = name
    if name.__class__ is not str or not name or len(name) > 256:
        return NAME_ERROR
    return None


def encode_data(data) -> tuple[bytes, int]:
    """(payload, fmt) for `data`: a str is stored as its UTF-8 bytes (other dialects read it
    as is), anything else as its MessagePack encoding (fmt 1)."""
    if data.__class__ is str:
        return data.encode("utf-8"), 0
    return pack(data), 1


_EXT_KEYS = ("tags", "groupId", "lifo", "removeOnComplete", "removeOnFail", "durable",
             "repeat", "timeout", "uniqueKey", "stackTraceLimit")


def build_ext(opts: dict, custom_id, deps_unmet: list) -> dict | None:
    """The canonical job's extras for these options (only what differs from the defaults)."""
    ext = None
    name = opts.get("name")
    if name is not None and name != "default":
        ext = {"name": name if name.__class__ is str else str(name)}
    for k in _EXT_KEYS:
        v = opts.get(k)
        if v is not None and v is not False and v != []:
            if ext is None:
                ext = {}
            ext[k] = v
    b = opts.get("backoff")
    if b is not None:
        if ext is None:
            ext = {}
        if b.__class__ is dict:
            ext["backoff"] = b.get("delay")
            ext["backoffConfig"] = {"type": b["type"], "delay": b.get("delay")}
        else:
            ext["backoff"] = b
    if custom_id is not None:
        if ext is None:
            ext = {}
        ext["customId"] = custom_id
    deps = opts.get("dependsOn")
    if deps:
        if ext is None:
            ext = {}
        ext["dependsOn"] = [str(d) for d in deps]
        if deps_unmet:
            ext["deps"] = deps_unmet
            ext["firstState"] = "waiting-children"   # its first timeline entry (jobview)
    return ext

