"""SQLite's batch INSERTs with columns alike in every row bound once (core/sqlite_rows.py) and
the bytes/None adapters, on real SQLite files: what is stored is exactly what the plain
multi-row VALUES path stores (each value and its SQLite type), for payloads of every byte
(NULs, invalid UTF-8, empty), NULLs, 64-bit extremes, equal values of different Python
objects, and chunks above and below the folding threshold.
"""
from __future__ import annotations

import random
import sqlite3

import msgpack
import pytest

from core import schema
from core.journal import Batch
from core.sqlite_rows import FOLD_MIN_ROWS, Folder, _values
from core.storage import Store
from migrations import upgrade

BIG = 2**63 - 1
SMALL = -(2**63)
PAYLOADS = [b"", b"\x00", b"a\x00b\r\nc", bytes(range(256)), b"\xff\xfe\x80", b"\xc3(",
            "h\u00e9llo \u2603 \U0001f600".encode(), b'{"x": "y"}', b"\x00" * 3000]


def open_store(path) -> Store:
    s = Store(f"sqlite:///{path}")
    upgrade(s.engine)
    return s


def dump(path, table: str) -> list[tuple]:
    """Every row of `table` with each column's SQLite type beside its value."""
    db = sqlite3.connect(path)
    try:
        cols = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
        sel = ", ".join(f"{c}, typeof({c})" for c in cols)
        return db.execute(f"SELECT {sel} FROM {table} ORDER BY rowid").fetchall()
    finally:
        db.close()


def job_row(i: int, payload=b"p", extras=None, **kw) -> tuple:
    """A JOB_NEW_COLUMNS row for job `i` (column values overridable by name)."""
    vals = dict(id=i, uid=f"u{i}", queue="q", payload=payload, priority=0, state="ready",
                created_ms=1_700_000_000_000, ready_at_ms=None, delay_ms=0, ttr_ms=30_000,
                dialect="glidemq", ttl_ms=0, expires_at_ms=None, max_attempts=0, max_fails=0,
                sched_ms=0, payload_fmt=0, extras=extras, dedup_key=None)
    vals.update(kw)
    return tuple(vals[c] for c in schema.JOB_NEW_COLUMNS)


def event_row(job_id: int, **kw) -> tuple:
    vals = dict(job_id=job_id, queue="q", dialect="glidemq", event="add",
                at_ms=1_700_000_000_000, attempt=0, uid=f"u{job_id}", priority=0,
                payload_size=1, worker=None, error=None)
    vals.update(kw)
    return tuple(vals[c] for c in schema.EVENT_COLUMNS)


def write_both(tmp_path, batches) -> tuple:
    """Write `batches` (callables returning a Batch) folded and plain into two files; return
    the two files' (jobs, job_events) dumps."""
    out = []
    for name, fold in (("folded.db", True), ("plain.db", False)):
        path = tmp_path / name
        s = open_store(path)
        try:
            if not fold:
                s._folder = None
            for make in batches:
                s.write(make())
        finally:
            s.close()
        out.append((dump(path, "jobs"), dump(path, "job_events")))
    return out[0], out[1]


def test_values_text():
    assert _values(3, 2, 0b010) == "(?2, ?1, ?3), (?4, ?1, ?5)"
    assert _values(2, 2, 0) == "(?1, ?2), (?3, ?4)"
    assert _values(2, 3, 0b11) == "(?1, ?2), (?1, ?2), (?1, ?2)"


def test_folder_binds_alike_columns_once():
    rows = [(i, "q", b"same", None, "x" + str(i)) for i in range(FOLD_MIN_ROWS)]
    sql, params = Folder().folded("INSERT INTO t (a, b, c, d, e) VALUES ", 5, rows)
    assert params[:3] == ("q", b"same", None)
    assert params[3:] == tuple(v for i in range(FOLD_MIN_ROWS) for v in (i, "x" + str(i)))
    assert sql.count("?2") == FOLD_MIN_ROWS


def test_payloads_byte_exact_with_nulls_and_extremes(tmp_path):
    """One folded batch: the payload, extras, uid, dedup_key and ready_at columns vary (bytes of every
    kind, NULLs), the queue, state and dialect are alike; every value reads back as written
    (bytes as BLOBs, None as NULL, 64-bit extremes as integers)."""
    ext = msgpack.packb({"name": "job", "glide": {"id": "1"}}, use_bin_type=True)
    rows = [job_row(i + 1, payload=PAYLOADS[i % len(PAYLOADS)],
                    extras=None if i % 3 else ext, uid=None if i % 4 == 0 else f"u{i}",
                    priority=(BIG, SMALL, 0, -1)[i % 4], ready_at_ms=None if i % 2 else BIG,
                    created_ms=SMALL, dedup_key=None if i % 5 else f"k\u2603{i}")
            for i in range(3 * len(PAYLOADS))]
    events = [event_row(r[0], error=None if i % 2 else "fail \u2603", priority=BIG)
              for i, r in enumerate(rows)]
    path = tmp_path / "j.db"
    s = open_store(path)
    try:
        s.write(Batch(1, inserts=rows, events=events, next_id=len(rows) + 1))
    finally:
        s.close()
    db = sqlite3.connect(path)
    try:
        cols = ", ".join(schema.JOB_NEW_COLUMNS)
        got = db.execute(f"SELECT {cols} FROM jobs ORDER BY id").fetchall()
        types = db.execute("SELECT typeof(payload), typeof(extras), typeof(priority) FROM jobs "
                           "ORDER BY id").fetchall()
        ecols = ", ".join(schema.EVENT_COLUMNS)
        got_ev = db.execute(f"SELECT {ecols} FROM job_events ORDER BY id").fetchall()
    finally:
        db.close()
    assert got == rows
    assert got_ev == events
    assert all(t[0] == "blob" and t[1] in ("blob", "null") and t[2] == "integer" for t in types)


def test_chunks_above_and_below_the_threshold(tmp_path):
    """1,205 rows: chunks of 500, 500 and 205 folded; 5 rows (below FOLD_MIN_ROWS) and a lone
    row plain; the same rows as the plain path."""
    def big():
        rows = [job_row(i, payload=bytes([i % 256]) * (i % 7)) for i in range(1, 1206)]
        return Batch(1, inserts=rows, events=[event_row(r[0]) for r in rows], next_id=1206)

    def small():
        rows = [job_row(i) for i in range(2000, 2005)]
        return Batch(2, inserts=rows, events=[event_row(2000)], next_id=2005)

    def one():
        return Batch(3, inserts=[job_row(3000, payload=b"\xff")], next_id=3001)

    folded, plain = write_both(tmp_path, [big, small, one])
    assert folded == plain
    assert len(folded[0]) == 1211 and len(folded[1]) == 1206


def test_rows_all_alike(tmp_path):
    """The same event many times in one batch (every column folded): every row stored."""
    ev = [event_row(7, event="touch")] * 12
    folded, plain = write_both(tmp_path, [lambda: Batch(1, events=list(ev))])
    assert folded == plain and len(folded[1]) == 12


@pytest.mark.parametrize("seed", range(6))
def test_random_batches_store_what_the_plain_path_stores(tmp_path, seed):
    """Random batches whose columns are alike in every row or not, by chance, with values
    that are equal but distinct objects (int(str(n)), a bool among ints, 2.0 among 2 in
    integer columns, equal bytes objects): column for column and type for type the same
    tables as without folding."""
    rnd = random.Random(seed)

    def pick(choices):
        return rnd.choice(choices) if rnd.random() < 0.5 else choices[0]

    def make(number, first):
        n = rnd.choice([1, 3, FOLD_MIN_ROWS, 9, 40, 100])
        rows, events = [], []
        for i in range(first, first + n):
            payload = pick([b"same", bytes(b"same"), rnd.randbytes(rnd.randrange(0, 40)),
                            b"\x00\xff"])
            rows.append(job_row(
                i, payload=payload,
                extras=pick([None, msgpack.packb({"n": i}), b""]),
                uid=pick([None, f"u{i}", "\u2603"]),
                priority=pick([int("5"), 5, True, 2.0, 2, BIG, SMALL]),
                ready_at_ms=pick([None, 1_700_000_000_000, int("1700000000000")]),
                queue=pick(["q", "r\u00e9"]), state=pick(["ready", "delayed"])))
            events.append(event_row(i, at_ms=pick([1, i]), worker=pick([None, "w"]),
                                    error=pick([None, "e\x00rr"])))
        return Batch(number, inserts=rows, events=events, next_id=first + n)

    batches = []
    first = 1
    for number in range(1, 6):
        b = make(number, first)
        first = b.next_id
        batches.append(lambda b=b: b)
    folded, plain = write_both(tmp_path, batches)
    assert folded == plain


def test_statement_texts_are_bounded(monkeypatch):
    """Past TEXT_CHARS characters of statement text the Folder starts over; the texts it
    hands out stay right."""
    import core.sqlite_rows as sr
    monkeypatch.setattr(sr, "TEXT_CHARS", 2000)
    f = Folder()
    head = "INSERT INTO t (a, b) VALUES "
    for n in range(FOLD_MIN_ROWS, 60):
        rows = [(i, "k") for i in range(n)]
        sql, params = f.folded(head, 2, rows)
        assert sql == head + _values(2, n, 0b10)
        assert params == ("k",) + tuple(range(n))
        assert f._chars <= 2000 + len(sql)
    assert len(f._texts) < 52
