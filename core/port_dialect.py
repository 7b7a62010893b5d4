"""The port's dialect records (a base of core.api.Port): small values a dialect keeps beside
the jobs that no other dialect reads, stored in table dialect_state (migration 0008) and
loaded back at start. glide-mq (protocols/resp) keeps its per-queue id counters, dedup
entries, ordering counters and function-library flag here (docs/glide-mq.md).

A record is a key (str, starting with the dialect's name, at most 1024 bytes) and a value
(anything MessagePack encodes: dicts, lists, str, bytes, ints). `set_dialect_record` stores it
with the next commit, in the same transaction as the job changes made before it: a glide-mq
addJob's new job and its queue's id counter commit together, so a kill -9 can neither lose the
job nor reuse its id. In memory mode the records live as long as the process.

Units: none (values are the dialect's). `self._engine` is the engine behind the port.
"""
from __future__ import annotations

import msgpack

_pack = msgpack.Packer(use_bin_type=True).pack   # one Packer (the event loop's thread only)
#: ints MessagePack encodes
_INT_MIN, _INT_END = -(1 << 63), 1 << 64


class DialectOps:
    """Dialect records (see the module docstring); expects `self._engine` and
    `self._journal` (None in memory mode)."""

    def dialect_records(self, prefix: str) -> dict:
        """Every record whose key starts with `prefix`, as {key: value} (values are the
        live objects: do not change them in place; set a new value instead)."""
        d = self._engine.dialect_state
        return {k: v for k, v in d.items() if k.startswith(prefix)}

    def dialect_record(self, key: str, default=None):
        """The value of record `key`, or `default`."""
        return self._engine.dialect_state.get(key, default)

    def set_dialect_record(self, key: str, value) -> None:
        """Store `value` under `key` (None: delete the record) with the next commit.
        Raises TypeError when MessagePack cannot encode `value`; ValueError for a key over
        1024 bytes."""
        if len(key) > 1024 if key.isascii() else len(key.encode()) > 1024:   # (UTF-8 bytes)
            raise ValueError("dialect record key longer than 1024 bytes")
        d = self._engine.dialect_state
        j = self._journal
        if value is None:
            if d.pop(key, None) is not None and j is not None:
                j.put_record("dialect_state", key, None)
            return
        if value.__class__ is int and _INT_MIN <= value < _INT_END:
            d[key] = value
            if j is not None:   # a counter: packed once per commit, not once per change
                j.put_int("dialect_state", "key", key, value)
            return
        row = {"key": key, "spec": _pack(value)}   # raises before anything changed
        d[key] = value
        if j is not None:
            j.put_record("dialect_state", key, row)


    def dialect_record_global(self, key: str, callback) -> None:
        """`callback(value or None)`: record `key`; on a node in shared mode as the database
        holds it, once this node's changes so far are committed (the last record any node
        stored: docs/scaling.md "glide-mq across nodes"), or the Exception the database
        raised. At once on a single server."""
        e = self._engine
        sh = e.shared
        if sh is None:
            callback(e.dialect_state.get(key))
            return
        sh.query_settled(dialect_row, (key,), callback)

    def dialect_records_global(self, prefix: str, callback) -> None:
        """`callback({key: value})`: dialect_records(prefix); on a node in shared mode the
        records every node stored, as the database holds them (at most RECORDS_MAX, once this
        node's changes so far are committed), or the Exception the database raised. At once
        on a single server."""
        e = self._engine
        sh = e.shared
        if sh is None:
            callback(self.dialect_records(prefix))
            return
        sh.query_settled(dialect_rows, (prefix,), callback)


#: at most this many records a prefix read takes from the database (dialect_records_global)
RECORDS_MAX = 100_000


def dialect_rows(conn, prefix: str) -> dict:
    """Shared mode, on the claim thread: {key: value} of the stored dialect records whose key
    starts with `prefix` (at most RECORDS_MAX), in the keys' byte order (a single server's
    records keep the order they were made in: the database keeps none)."""
    from .shared_reads import _run
    like = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"

    def go(cur):
        cur.execute("SELECT key, spec FROM dialect_state WHERE key LIKE %s ORDER BY key "
                    "COLLATE \"C\" LIMIT %s", (like, RECORDS_MAX))
        return {k: msgpack.unpackb(bytes(v), raw=False, strict_map_key=False)
                for k, v in cur.fetchall()}
    return _run(conn, go)


def dialect_row(conn, key: str):
    """Shared mode, on the claim thread: the stored value of dialect record `key`, or None."""
    from .shared_reads import _run

    def go(cur):
        cur.execute("SELECT spec FROM dialect_state WHERE key = %s", (key,))
        r = cur.fetchone()
        return None if r is None else msgpack.unpackb(bytes(r[0]), raw=False,
                                                      strict_map_key=False)
    return _run(conn, go)


def load_dialect_state(engine, rows) -> int:
    """Install stored dialect records (rows of store.load_records("dialect_state")) into
    `engine.dialect_state` at start; returns how many."""
    d = engine.dialect_state
    for r in rows:
        d[r["key"]] = msgpack.unpackb(r["spec"], raw=False, strict_map_key=False)
    return len(rows)
