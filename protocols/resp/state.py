"""The glide-mq dialect's server-wide state (one per server; protocols/contract.py
`make_state`): what glide-mq keeps in Redis keys beside the jobs.

Stored as dialect records (core.api Port.set_dialect_record; table dialect_state), committed
with the jobs they go with and loaded back at start:

- ``glidemq:lib``: the function library was loaded (FUNCTION LOAD): its name ("glidemq");
- ``glidemq:id:<base>``: the per-queue id counter (int; `<base>` is `<prefix>:{<queue>}`);
- ``glidemq:meta:<base>``: the queue's meta hash ({field: value str}, e.g. paused "1"/"0");
- ``glidemq:dedup:<base>:<dedupId>``: a dedup entry "<jobId>:<timestamp>";
- ``glidemq:ordering:<base>``: the ordering hash ({orderingKey: seq str});
- ``glidemq:group:<base>:<key>``: an ordering key's group hash ({field: value str}).

Kept in memory only (lost on restart, documented in docs/glide-mq.md): the `:events` stream
(EVENTS_MAXLEN entries per queue, with increasing ids), tryLock locks (with their PX expiry
on the injectable clock), which queue streams have the consumer group `workers`, and the
connection id counter.

Units: ms (wall for stream ids, monotonic for lock expiry).
"""
from __future__ import annotations

from collections import deque

from .glide import DIALECT

#: Entries kept per `:events` stream (glide-mq trims with XADD MAXLEN ~ 1000).
EVENTS_MAXLEN = 1000
#: A glide-mq pause has no end; the canonical pause takes a duration: about 100 years (ms).
PAUSE_FOREVER_MS = 100 * 365 * 86_400_000
#: The library version this server reports (glide-mq 0.15.4's LIBRARY_VERSION).
LIBRARY_VERSION = "93"
LIBRARY_NAME = "glidemq"


class GlideState:
    """Server-wide glide-mq state over `port` (core.api.Port); see the module docstring.
    `options`: the dialect's options (protocols/resp/__init__.py); `context`: the
    protocols.contract.Context."""

    def __init__(self, port, options: dict, context) -> None:
        self.port = port
        self.options = options
        self.context = context
        self.clock = port.clock
        self.events: dict = {}        # base -> deque of ((ms, seq), (field, value, ...))
        self._ev_ms = 0
        self._ev_seq = 0
        self.locks: dict = {}         # key -> (token bytes, monotonic expiry ms or 0)
        self.groups: set = set()      # stream keys (str) with the consumer group `workers`
        self.next_client_id = 0
        self.connections = 0          # open RESP connections (INFO clients)
        self.ops: dict = {}           # command (bytes; FCALL: the glidemq function) -> count
        self._id_keys: dict = {}      # base -> its counter's record key
        self.dedup_busy: dict = {}    # shared mode: "<base>:<dedupId>" -> deque of waiting
        #                               dedup calls (protocols/resp/shared.py)

    def operations(self) -> dict:
        """{command: times run} since start (protocols/contract.py; /metrics): Redis
        command names, FCALL of a glide-mq function under the function's name."""
        return {k.decode(): v for k, v in self.ops.items()}

    # ------------------------------------------------------------- library
    @property
    def loaded(self) -> bool:
        """True once FUNCTION LOAD of the glidemq library was accepted (kept across
        restarts, as Redis keeps its functions)."""
        return self.port.dialect_record("glidemq:lib") is not None

    def set_loaded(self, on: bool) -> None:
        self.port.set_dialect_record("glidemq:lib", LIBRARY_NAME if on else None)

    # ------------------------------------------------------------- records
    def _id_key(self, base: str) -> str:
        k = self._id_keys.get(base)
        if k is None:
            k = self._id_keys[base] = f"glidemq:id:{base}"
        return k

    def counter(self, base: str) -> int:
        """The id counter of queue `base` (0 before the first job)."""
        return self.port.dialect_record(self._id_key(base), 0)

    def set_counter(self, base: str, n: int) -> None:
        self.port.set_dialect_record(self._id_key(base), n)

    def meta(self, base: str) -> dict:
        """The meta hash of queue `base` ({} when it has none)."""
        return self.port.dialect_record(f"glidemq:meta:{base}", None) or {}

    def set_meta(self, base: str, field: str, value: str) -> None:
        m = dict(self.meta(base))
        m[field] = value
        self.port.set_dialect_record(f"glidemq:meta:{base}", m)

    def dedup(self, base: str, dedup_id: str) -> str | None:
        """The dedup entry "<jobId>:<timestamp>" of `dedup_id` in queue `base`, or None."""
        return self.port.dialect_record(f"glidemq:dedup:{base}:{dedup_id}")

    def set_dedup(self, base: str, dedup_id: str, value: str) -> None:
        self.port.set_dialect_record(f"glidemq:dedup:{base}:{dedup_id}", value)

    def dedup_hash(self, base: str) -> dict:
        """The whole dedup hash of queue `base`: {dedupId: "<jobId>:<timestamp>"}."""
        pfx = f"glidemq:dedup:{base}:"
        return {k[len(pfx):]: v for k, v in self.port.dialect_records(pfx).items()}

    def ordering(self, base: str) -> dict:
        """The ordering hash of queue `base` ({orderingKey: seq str})."""
        return self.port.dialect_record(f"glidemq:ordering:{base}", None) or {}

    def set_ordering(self, base: str, key: str, seq: str) -> None:
        m = dict(self.ordering(base))
        m[key] = seq
        self.port.set_dialect_record(f"glidemq:ordering:{base}", m)

    def group(self, base: str, key: str) -> dict | None:
        """The group hash of ordering key `key` in queue `base`, or None."""
        return self.port.dialect_record(f"glidemq:group:{base}:{key}")

    def set_group(self, base: str, key: str, fields: dict) -> None:
        self.port.set_dialect_record(f"glidemq:group:{base}:{key}", fields)

    def group_keys(self, base: str) -> list:
        """The ordering keys of queue `base` that have a group hash."""
        pfx = f"glidemq:group:{base}:"
        return [k[len(pfx):] for k in self.port.dialect_records(pfx)]

    def bases(self) -> set:
        """Every `<prefix>:{<queue>}` glide-mq has a record for (counter, meta, dedup, ...)."""
        out = set()
        for k in self.port.dialect_records("glidemq:"):
            kind, _, rest = k[len("glidemq:"):].partition(":")
            if kind in ("id", "meta", "ordering"):
                out.add(rest)
            elif kind in ("dedup", "group"):
                i = rest.find("}:")
                if i > 0:
                    out.add(rest[:i + 1])
        return out

    def restore_pauses(self) -> int:
        """At start (after the jobs are restored): pause again every queue whose meta hash says
        paused "1" (a canonical pause is not stored; glide-mq's flag is). Returns how many."""
        n = 0
        for key, meta in self.port.dialect_records("glidemq:meta:").items():
            base = key[len("glidemq:meta:"):]
            i, j = base.find(":{"), base.rfind("}")
            if meta.get("paused") == "1" and 0 <= i < j:
                q = base[i + 2:j]
                self.port.keep(q, True)
                self.port.pause(q, PAUSE_FOREVER_MS)
                n += 1
        return n

    # ------------------------------------------------------------- events
    def next_sid(self) -> tuple:
        """A new stream entry id (ms, seq), greater than every one before (wall ms; the
        sequence continues when the clock stands still or steps back)."""
        now = self.clock.wall_ms()
        if now > self._ev_ms:
            self._ev_ms = now
            self._ev_seq = 0
        else:
            self._ev_seq += 1
        return (self._ev_ms, self._ev_seq)

    def add_event(self, base: str, fields) -> None:
        """XADD to `<base>:events`: `fields` (name, value, ...) str, a tuple or list, kept as
        given (not changed afterwards), trimmed to EVENTS_MAXLEN entries."""
        d = self.events.get(base)
        if d is None:
            d = self.events[base] = deque(maxlen=EVENTS_MAXLEN)
        d.append((self.next_sid(), fields))

    # ------------------------------------------------------------- locks
    def try_lock(self, key: str, token: bytes, ttl_ms: int) -> bool:
        """SET key token NX PX ttl_ms: True when taken."""
        now = self.clock.monotonic_ms()
        held = self.locks.get(key)
        if held is not None and (held[1] == 0 or held[1] > now):
            return False
        self.locks[key] = (token, now + ttl_ms if ttl_ms > 0 else 0)
        return True

    def unlock(self, key: str, token: bytes) -> bool:
        """Delete the lock `key` when `token` holds it: True when it did."""
        held = self.locks.get(key)
        now = self.clock.monotonic_ms()
        if held is None or (held[1] and held[1] <= now) or held[0] != token:
            return False
        del self.locks[key]
        return True


def make_state(port, options: dict, context) -> GlideState:
    """The Registration's make_state: the state, and the dialect's job policy."""
    from .policy import install
    st = GlideState(port, options, context)
    install(port)
    st.restore_pauses()
    return st


__all__ = ["GlideState", "make_state", "DIALECT", "EVENTS_MAXLEN", "LIBRARY_VERSION",
           "LIBRARY_NAME"]
