"""Figures of every node (shared mode, issue 19; docs/scaling.md "Figures of every node"): the
counters a dialect keeps per process that its commands answer for all the nodes together, such
as bunqueue's `Metrics` totals (totalPushed, totalPulled, totalCompleted, totalFailed,
activeConnections) and `Stats`' failed total and push / pull rates.

A dialect registers providers (Port.share_figures(name, fn): `fn()` -> {field: int}; several
under one name add up: bunqueue's TCP listener and its HTTP API; a field `started` takes the
earliest). Every
FIGURES_MS a node writes its providers' values, in one statement, as rows of `jobgate_meta`
(migration 0001's table: key varchar(64), value bigint) under `fig:<node number>:<name>.<field>`,
with `fig:<node number>:at`, the wall ms of the write. A reader (Port.figures_of_other_nodes)
takes the other nodes' values from their rows, leaving out a node whose `at` is older than
STALE_MS (gone without a clean stop, or cut off from the database), and adds its own, live,
from its providers. A node that stops cleanly deletes its rows (core.shared_store.close), so a
stopped node's counters leave the totals, as a restarted server's do. Another node's figure is
at most FIGURES_MS (plus a write's time) old.

No I/O here: the statements run on the node's claim thread (SharedNode.query). Units: ms.
Errors: the driver's (psycopg.Error), after a rollback.
"""
from __future__ import annotations

from .shared_reads import _run

#: ms between a node's writes of its figures
FIGURES_MS = 1000
#: ms after which a node's figures no longer count (its last write is older)
STALE_MS = 10_000
#: the jobgate_meta key prefix of figures
PREFIX = "fig:"
#: a bigint's range: figures beyond it are written clamped
_BIG = 2 ** 63 - 1


def write_figures(conn, number: int, values: dict, now_ms: int) -> None:
    """Write node `number`'s figures, `values` ({"<name>.<field>": int}), and its `at` (wall
    ms `now_ms`) in one statement."""
    keys = [f"{PREFIX}{number}:{k}" for k in values] + [f"{PREFIX}{number}:at"]
    vals = [max(-_BIG, min(_BIG, int(v))) for v in values.values()] + [now_ms]

    def go(cur):
        cur.execute(
            "INSERT INTO jobgate_meta (key, value) SELECT * FROM unnest(%s::varchar[], "
            "%s::bigint[]) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            (keys, vals))
    _run(conn, go)


def read_figures(conn, number: int, name: str, now_ms: int) -> list:
    """The figures `name` of the nodes other than `number` whose last write is at most
    STALE_MS old: [{field: int, ..., "at": wall ms of that write}], one dict per node."""
    def go(cur):
        cur.execute("SELECT key, value FROM jobgate_meta WHERE key LIKE %s", (PREFIX + "%",))
        return cur.fetchall()
    nodes: dict = {}
    for key, value in _run(conn, go):
        _, num, field = key.split(":", 2)
        if num == str(number):
            continue
        if field == "at":
            nodes.setdefault(num, {})["at"] = value
        elif field.startswith(name + "."):
            nodes.setdefault(num, {})[field[len(name) + 1:]] = value
    return [f for f in nodes.values()
            if f.get("at", -1) >= now_ms - STALE_MS and len(f) > 1]


def delete_figures(conn, number: int) -> None:
    """Delete node `number`'s figures (it stops cleanly); the caller commits. `conn`: a
    SQLAlchemy connection (core.shared_store's join connection)."""
    conn.exec_driver_sql("DELETE FROM jobgate_meta WHERE key LIKE %s",
                         (f"{PREFIX}{number}:%",))


class SharedFigures:
    """A node's figure providers and their periodic write (core.shared.SharedNode.figures);
    the module docstring says how."""

    def __init__(self, node) -> None:
        self.node = node
        self.providers: dict = {}    # name -> [fn() -> {field: int}]
        self.last = None             # wall ms of the last write started
        self.busy = False            # a write runs
        self.failures = 0            # writes that failed (stats, tests)

    @property
    def number(self) -> int:
        """This node's number (core.shared_store's, kept by the gateway in `calls.number`)."""
        return self.node.calls.number

    def provide(self, name: str, fn) -> None:
        """Register `fn() -> {field: int}` among the figures `name` (fields of 16 characters
        at most). Raises ValueError for a name with ':' or longer than 30 characters (a key
        must fit jobgate_meta's 64)."""
        if ":" in name or len(name) > 30:
            raise ValueError(f"figure name {name!r}: no ':' and at most 30 characters")
        self.providers.setdefault(name, []).append(fn)

    def own(self, name: str) -> dict | None:
        """This node's figures `name`, live: its providers' added up (`started`: the
        earliest; a value that is not an int is left out); None when nothing provides
        them."""
        fns = self.providers.get(name)
        if not fns:
            return None
        out: dict = {}
        for fn in fns:
            for field, v in fn().items():
                if v.__class__ is not int:   # a bool, float, None: not a figure
                    continue
                if field not in out:
                    out[field] = v
                elif field == "started":
                    out[field] = min(out[field], v)
                else:
                    out[field] += v
        return out

    def tick(self, now_ms: int) -> None:
        """Called by the node's timer (gateway/shared.py) with wall ms: write the figures when
        FIGURES_MS passed since the last write and none runs."""
        if not self.providers or self.busy or (
                self.last is not None and now_ms - self.last < FIGURES_MS):
            return
        values = {}
        for name in self.providers:
            for field, v in self.own(name).items():
                if len(field) <= 16:   # a longer one would not fit the key
                    values[f"{name}.{field}"] = v
        self.last = now_ms
        self.busy = True
        self.node.query(write_figures, (self.number, values, now_ms), self._written)

    def _written(self, res) -> None:
        self.busy = False
        if isinstance(res, Exception):
            self.failures += 1
            self.last = None     # the next tick tries again

    def others(self, name: str, now_ms: int, callback) -> None:
        """`callback(list)`: the figures `name` of the other live nodes (read_figures), or
        the Exception the database raised."""
        self.node.query(read_figures, (self.number, name, now_ms), callback)


__all__ = ["SharedFigures", "write_figures", "read_figures", "delete_figures",
           "FIGURES_MS", "STALE_MS"]
