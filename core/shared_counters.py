"""Counters shared by the nodes of one database (shared mode, issue 19; docs/scaling.md
"glide-mq across nodes"): a dialect's per-queue sequence that must not hand out one value
twice whichever node asks, such as glide-mq's job id counter (`INCR glide:{Q}:id`).

A counter is a row of `jobgate_meta` (migration 0009's table: key varchar(64), value bigint)
under the key `ctr:` + the first 32 hex digits of the BLAKE2b digest of its name (a dialect's
names are longer than 64 characters). `count_up(conn, wants)` moves several counters in one
transaction: each to GREATEST(its value, floor) + n, returning the new value, so the n values
(new - n, new] are this caller's alone. A floor moves a counter up without taking values (a
glide-mq numeric custom id above the counter; a counter a single-node server kept as a
dialect record before the database was shared).

`SharedCounters` batches a node's requests: while one statement runs on the claim thread, the
requests that come meanwhile wait and go together in the next (one statement per counter
name however many requests it has). Values are taken at once and never given back: a request
whose job is never created (the node stops before its commit, the client goes) leaves a gap.

A read (`read_counter`, `SharedCounters.read`: glide-mq's `GET glide:{Q}:id`) is a plain
SELECT of the row, at least the caller's floor, sent after the takes this node asked for
before it: those in flight run first on the claim thread, those still waiting are sent first.

Units: none. Errors: the driver's (psycopg.Error), after a rollback; a request's callback then
gets the exception.
"""
from __future__ import annotations

import hashlib

from .shared_reads import _run

#: a counter's key in jobgate_meta: this prefix and 32 hex digits
KEY_PREFIX = "ctr:"


def counter_key(name: str) -> str:
    """The jobgate_meta key of counter `name` (str of any length): 36 characters."""
    return KEY_PREFIX + hashlib.blake2b(name.encode("utf-8", "surrogatepass"),
                                        digest_size=16).hexdigest()


def count_up(conn, wants: dict) -> dict:
    """Move each counter of `wants` ({name: (n >= 0, floor)}) to GREATEST(value, floor) + n
    (a missing counter counts as 0) in one transaction; returns {name: new value}."""
    def go(cur):
        out = {}
        for name, (n, floor) in wants.items():
            cur.execute(
                "INSERT INTO jobgate_meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO "
                "UPDATE SET value = GREATEST(jobgate_meta.value, %s) + %s RETURNING value",
                (counter_key(name), max(floor, 0) + n, floor, n))
            out[name] = cur.fetchone()[0]
        return out
    return _run(conn, go)


def read_counter(conn, name: str, floor: int) -> int:
    """The value of counter `name` as the database holds it, at least `floor` (what count_up
    with n = 0 would answer), without writing: a counter no node moved yet reads `floor`."""
    def go(cur):
        cur.execute("SELECT value FROM jobgate_meta WHERE key = %s", (counter_key(name),))
        row = cur.fetchone()
        return max(row[0] if row else 0, floor)
    return _run(conn, go)


class SharedCounters:
    """A node's counter requests (core.shared.SharedNode.counters), batched as the module
    docstring says."""

    def __init__(self, node) -> None:
        self.node = node
        self._waiting: list = []     # (name, n, floor, callback) not yet sent
        self._reads: list = []       # (name, floor, callback) waiting for takes not yet sent
        self._busy = False

    def take(self, name: str, n: int, floor: int, callback) -> None:
        """Take `n` values of counter `name` after moving it up to `floor`: `callback(last)`
        later, on the event loop, with the last value taken (the values are last - n + 1 ..
        last; with n = 0 the counter's value), or the exception the database raised."""
        self._waiting.append((name, n, floor, callback))
        if not self._busy:
            self._send()

    def _send(self) -> None:
        batch, self._waiting = self._waiting, []
        wants: dict = {}
        for name, n, floor, _cb in batch:
            t, f = wants.get(name, (0, 0))
            wants[name] = (t + n, max(f, floor))
        self._busy = True

        def done(res) -> None:
            self._busy = False
            if self._waiting:
                self._send()
            reads, self._reads = self._reads, []
            for name, floor, cb in reads:   # queued behind the takes just sent, if any
                self.node.query(read_counter, (name, floor), cb)
            # the batch's values of a name, (new - total, new], in request order
            nxt = None if isinstance(res, Exception) else {
                name: res[name] - t for name, (t, _f) in wants.items()}
            err = None
            for name, n, _f, cb in batch:
                try:   # one failing caller does not leave the others waiting
                    if nxt is None:
                        cb(res)
                    else:
                        nxt[name] += n
                        cb(nxt[name])
                except Exception as e:
                    err = err or e
            if err is not None:
                raise err
        self.node.query(count_up, (wants,), done)

    def read(self, name: str, floor: int, callback) -> None:
        """`callback(value)` later: counter `name`'s value, at least `floor` (read_counter,
        no write), after the takes this node sent or queued so far (it waits behind them),
        or the exception the database raised."""
        if self._waiting:   # takes not sent yet (one batch in flight): read after them
            self._reads.append((name, floor, callback))
            return   # (a take in flight runs before this read: the claim thread is FIFO)
        self.node.query(read_counter, (name, floor), callback)


__all__ = ["SharedCounters", "count_up", "counter_key", "read_counter"]
