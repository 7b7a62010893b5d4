"""SQLite only: batch INSERTs with fewer bound parameters (core/storage.py's hot path).

A group commit's rows are bound one parameter at a time by CPython's sqlite3, under the GIL,
and binding was more than half of a batch's SQLite write (docs/performance.md, "SQLite binding").
Two measures cut it without changing what is stored:

- `fast_sqlite_binding()`: bytes and None parameters skip a failed attribute lookup (below).
- `folded(head, width, rows)`: a column whose value is the same in every row of a chunk is
  bound once and referenced from every row with SQLite's numbered parameters (`?3`): a batch
  of 100 glide-mq addJobs binds 13 of each job row's 18 values once instead of 100 times
  (the queue, state, dialect, ttr, limits, ...). The rows' other values are bound as usual.

PostgreSQL keeps its plain multi-row VALUES (numbered `?NNN` parameters are SQLite syntax).
"""
from __future__ import annotations

from itertools import chain

#: chunks of fewer rows are bound as they are: folding a handful of rows saves little, and
#: every (row count, folded columns) pair is a statement text of its own to prepare and cache
FOLD_MIN_ROWS = 8

#: characters of statement text a Folder keeps (a few hundred (rows, columns) shapes)
TEXT_CHARS = 16_000_000

_NONE_ADAPTER = {}.get   # one object: registering it again replaces it with itself


def fast_sqlite_binding() -> None:
    """Let CPython's sqlite3 bind bytes and None parameters without a failed attribute lookup.

    Python 3.11's sqlite3 binds int, float, str and bytearray directly; every other value
    (bytes and None among them) goes through its adaptation protocol, which looks up
    `__adapt__` on the protocol type and raises and clears an AttributeError with a formatted
    message: a third of a glide-mq job row's binding time (docs/performance.md, "SQLite
    binding").
    An adapter registered for the exact type is found in the adapters dict first: `bytes`
    returns an exact bytes object itself, `{}.get` returns None for None, both in C, so what
    is bound does not change. Process-wide (sqlite3's adapters are module state) and
    idempotent; an adapter for bytes or NoneType does not make sqlite3 adapt every value (only
    one for int, float, str or bytearray does)."""
    import sqlite3
    sqlite3.register_adapter(bytes, bytes)
    sqlite3.register_adapter(type(None), _NONE_ADAPTER)


class Folder:
    """Multi-row INSERT texts with constant columns bound once (SQLite's `?NNN` parameters).

    `folded(head, width, rows)` -> (sql, params) for `rows` (a list of tuples of `width`
    values, at most 32766 // width of them: SQLite's parameter limit), `head` the statement up
    to and including "VALUES ". Texts are made once per (head, row count, folded columns) and
    kept (all dropped once they hold TEXT_CHARS characters: a 500-row text is ~100 kB).

    A column is folded when every row's value equals the first row's (`==`). For the values
    a batch row holds (int, str, bytes, None; core.journal) equal values are stored alike: an
    int and an equal float or bool in an INTEGER column are both stored as the integer, equal
    bytes, bytearray and memoryview as the same BLOB; str never equals int or bytes.
    """

    __slots__ = ("_texts", "_chars")

    def __init__(self) -> None:
        self._texts: dict = {}
        self._chars = 0

    def folded(self, head: str, width: int, rows: list) -> tuple:
        n = len(rows)
        cols = list(zip(*rows))
        mask = 0
        consts = []
        bit = 1
        for c in cols:
            v = c[0]
            if c.count(v) == n:
                mask |= bit
                consts.append(v)
            bit <<= 1
        k = (head, n, mask)
        sql = self._texts.get(k)
        if sql is None:
            if self._chars > TEXT_CHARS:
                self._texts.clear()
                self._chars = 0
            sql = self._texts[k] = head + _values(width, n, mask)
            self._chars += len(sql)
        if not mask:
            return sql, tuple(chain.from_iterable(rows))
        var = [c for i, c in enumerate(cols) if not mask >> i & 1]
        if not var:   # every row alike (the same event twice in one ms): the constants only
            return sql, tuple(consts)
        return sql, tuple(consts) + tuple(chain.from_iterable(zip(*var)))


def _values(width: int, n: int, mask: int) -> str:
    """The VALUES list of `n` rows of `width` columns: a folded column (bit i of `mask`) is
    the same parameter in every row, numbered first (?1, ?2, ...); the other columns' values
    follow row by row."""
    consts = [i for i in range(width) if mask >> i & 1]
    ref = {c: f"?{j + 1}" for j, c in enumerate(consts)}
    nxt = len(consts) + 1
    rows = []
    for _ in range(n):
        parts = []
        for i in range(width):
            p = ref.get(i)
            if p is None:
                p = f"?{nxt}"
                nxt += 1
            parts.append(p)
        rows.append("(" + ", ".join(parts) + ")")
    return ", ".join(rows)
