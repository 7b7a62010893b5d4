"""Big work in slices, so that one client's large frame or batch does not stall the event loop
for every other connection (issue 15, item 2; docs/bunqueue.md "Hostile clients").

A *steps* handler is a generator: it yields None between slices and returns its reply (as the
plain handlers of registry.py do). protocols/bunqueue/connection.py runs its first slice at
once and each further slice in a later loop iteration (`transport.defer`), and runs no other
frame of the same connection meanwhile, so replies keep their order; the reply of a mutating
command is sent durable after its last slice, when every job it made is committed.

- `pack_steps(value)`: MessagePack encoding of a decoded value, byte for byte what
  `codec.pack` writes, NODE_BUDGET values per slice, and whether it holds an integer a
  JavaScript client would read as BigInt (options.data_error's test) — for the data of a frame
  over BIG_FRAME, where a single PUSH may carry a map of a million entries.
- `push_batch_steps`: PUSHB. Every job is checked and encoded before any is created (all or
  nothing, as the reference validates the whole batch first), then the jobs are created
  BATCH_SLICE per slice.
"""
from __future__ import annotations

from itertools import chain

from .codec import array_header, map_header, pack
from .options import DATA_MAX, data_error, options_error, queue_error, queue_name, take_name

#: Frames larger than this (bytes) are decoded in slices (codec.decode_steps) and their data
#: encoded in slices (pack_steps).
BIG_FRAME = 256 * 1024
#: Values checked and encoded per slice of pack_steps.
NODE_BUDGET = 20_000
#: Jobs of a PUSHB checked, or created, per slice.
BATCH_SLICE = 500

_I_MIN, _U_MAX = -0x80000000, 0xFFFFFFFF
_JSON = "Job data must be JSON serializable"
_TOO_LARGE = "Job data too large (max 10MB)"


def pack_steps(value, budget: int = NODE_BUDGET, cap: int = 0):
    """Generator: encodes `value` (a decoded MessagePack value: dict, list, scalars) yielding
    None after every `budget` values; returns (bytes, has_bigint), bytes equal to
    `pack(value)`, has_bigint True when an int (key or value) lies outside int32/uint32. With
    `cap`, an encoding longer than `cap` bytes is not kept (None) but still checked."""
    chunks: list = []
    parts: list = []
    size = 0
    big = False
    n = 0
    stack = [iter((value,))]
    while stack:
        for v in stack[-1]:
            n += 1
            if n >= budget:
                n = 0
                if parts:   # one slice's pieces joined (and freed) in that slice
                    chunk = b"".join(parts)
                    parts.clear()
                    size += len(chunk)
                    if cap and size > cap:
                        chunks = None
                    if chunks is not None:
                        chunks.append(chunk)
                yield None
            c = v.__class__
            if c is dict:
                parts.append(map_header(len(v)))
                if v:
                    stack.append(chain.from_iterable(v.items()))
                    break
            elif c is list:
                parts.append(array_header(len(v)))
                if v:
                    stack.append(iter(v))
                    break
            else:
                if c is int and (v < _I_MIN or v > _U_MAX):
                    big = True
                parts.append(pack(v))
        else:
            stack.pop()
    if chunks is None:
        return None, big
    chunks.append(b"".join(parts))
    out = b"".join(chunks)
    return (None if cap and len(out) > cap else out), big


def release_steps(value, budget: int = NODE_BUDGET):
    """Generator: empties the big containers of a decoded value a slice at a time, so that
    freeing a million-entry map does not stall the loop. Only for values nothing else holds
    (a job's `data`, which is stored as its encoding)."""
    stack = [value]
    n = 0
    while stack:
        v = stack.pop()
        c = v.__class__
        if c is dict:
            pop = v.popitem
        elif c is list:
            pop = v.pop
        else:
            continue
        while v:
            x = pop()
            if c is dict:
                x = x[1]
            if (x.__class__ is dict or x.__class__ is list) and x:
                stack.append(x)
            n += 1
            if n >= budget:
                n = 0
                yield None


def encode_steps(data, sliced: bool):
    """Generator returning (payload, fmt, has_bigint) for a job's `data`: a str as its UTF-8
    bytes (fmt 0), anything else as MessagePack (fmt 1); `sliced`: through pack_steps (data
    of a big frame), where a payload over DATA_MAX comes back as None, else at once."""
    if data.__class__ is str:
        return data.encode("utf-8"), 0, False
    if sliced:
        payload, big = yield from pack_steps(data, cap=DATA_MAX)
        return payload, 1, big
    return pack(data), 1, data_error(data) is not None


def too_large(payload) -> bool:
    """True when an encoded payload (None: over the cap already) exceeds DATA_MAX."""
    return payload is None or len(payload) > DATA_MAX


def push_batch_steps(sess, cmd: dict, create_one, create_plain, plain_keys, sliced: bool):
    """PUSHB as steps (see the module docstring); the reply dict. `create_one(sess, queue,
    opts, prefix, encoded)` creates one job and returns its id or an error reply (a dependency
    gone meanwhile: the jobs before it stay, as in the reference); `create_plain(sess, queue,
    items)` creates jobs of no options from (payload, fmt, opts) items and returns their ids;
    `plain_keys`: the option keys that make a job plain; `sliced`: encode each job's data in
    slices too (a frame over BIG_FRAME). Errors name the job: `jobs[i]: ...`."""
    q = cmd.get("queue")
    msg = queue_error(q)
    if msg:
        return {"ok": False, "error": msg}
    queue = queue_name(q)
    jobs = cmd.get("jobs")
    if jobs.__class__ is not list:
        return {"ok": False, "error": "jobs must be an array"}
    e = sess.port
    plain = True
    batch_ids = set()
    for i, o in enumerate(jobs):
        if i % 4096 == 4095:
            yield None
        if o.__class__ is not dict:
            plain = False
            continue
        if not o.keys() <= plain_keys:
            plain = False
        c = o.get("customId") or o.get("jobId")
        if c:
            batch_ids.add(str(c))
    encoded = []
    for i, opts in enumerate(jobs):   # check all before creating any (no half batch)
        if i % BATCH_SLICE == BATCH_SLICE - 1:
            yield None
        if opts.__class__ is not dict:
            return {"ok": False, "error": f"jobs[{i}]: Invalid job"}
        msg = take_name(opts)   # a name inside data moves to the job's name (options.py)
        if msg:
            return {"ok": False, "error": f"jobs[{i}]: {msg}"}
        enc = yield from encode_steps(opts.get("data"), sliced)
        msg = _JSON if enc[2] else (None if plain else options_error(opts))
        if msg:
            return {"ok": False, "error": f"jobs[{i}]: {msg}"}
        if too_large(enc[0]):
            return {"ok": False, "error": f"jobs[{i}]: {_TOO_LARGE}"}
        if not plain:
            for d in opts.get("dependsOn") or ():
                if str(d) not in batch_ids and e.find(str(d)) is None \
                        and str(d) not in sess.linked_elsewhere:   # shared: held elsewhere
                    return {"ok": False, "error": f"jobs[{i}]: Dependency job not found: {d}"}
        encoded.append(enc)
    ids: list = []
    for start in range(0, len(jobs), BATCH_SLICE):
        if start:
            yield None
        part = jobs[start:start + BATCH_SLICE]
        if plain:
            ids += create_plain(sess, queue, [(enc[0], enc[1], o) for enc, o in
                                              zip(encoded[start:start + BATCH_SLICE], part)])
            continue
        for i, opts in enumerate(part, start):
            r = create_one(sess, queue, opts, f"jobs[{i}]: ", encoded[i])
            if r.__class__ is dict:
                return r
            ids.append(r)
    return {"ok": True, "ids": ids}
