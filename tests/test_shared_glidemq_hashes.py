"""glide-mq's hashes read as keys on several nodes of one PostgreSQL (issue 19;
docs/scaling.md "glide-mq across nodes"): the `meta` hash (Queue.isPaused) reads the last
pause or resume through any node, the `dedup` hash lists every node's entries. Real node
processes on one fresh database, real RESP sockets.

Needs JOBGATE_TEST_PG_URL (skipped with a clear reason without it).
"""
from __future__ import annotations

from .resp_support import dedup_keys, meta_keys
from .test_shared_glidemq import _conn, _dd


def test_meta_hash_reads_the_pause_any_node_made(nodes):
    """Queue.isPaused (`HGET glide:{Q}:meta paused`) through any node reads the pause or
    resume made through another (it read the node's own record: nil on b after a pause on
    a, "1" on a after a resume on b)."""
    a, b = nodes(2, glide=True)
    ca, cb = _conn(a), _conn(b)
    meta = meta_keys("mq")[0]
    assert cb.call("HGET", meta, "paused") is None
    assert ca.fcall("glidemq_pause", meta_keys("mq"), []) == 1
    assert cb.call("HGET", meta, "paused") == b"1"
    assert cb.call("HGETALL", meta) == [b"paused", b"1"]
    assert cb.call("EXISTS", meta) == 1
    assert cb.fcall("glidemq_resume", meta_keys("mq"), []) == 1
    assert ca.call("HGET", meta, "paused") == b"0"
    assert ca.call("HGET", meta_keys("other")[0], "paused") is None


def test_dedup_hash_reads_every_node_s_entries(nodes):
    """The `dedup` hash as a key read (HGETALL, HGET, HLEN) lists the entries stored through
    every node (it listed the node's own): d1 added through a, d2 through b."""
    a, b = nodes(2, glide=True)
    ca, cb = _conn(a), _conn(b)
    first = _dd(ca, "hq", "d1", "simple", data='"one"')
    second = _dd(cb, "hq", "d2", "simple", data='"two"')
    key = dedup_keys("hq")[0]
    for c in (ca, cb):
        got = c.call("HGETALL", key)
        fields = dict(zip(got[::2], got[1::2]))
        assert sorted(fields) == [b"d1", b"d2"]
        assert fields[b"d1"].startswith(first + b":")
        assert fields[b"d2"].startswith(second + b":")
        assert c.call("HLEN", key) == 2
    assert cb.call("HGET", key, "d1") == fields[b"d1"]
    assert ca.call("HGETALL", dedup_keys("other")[0]) == []
    _dd(ca, "hxq", "d9", "simple")   # LIKE's `_` is escaped: h_q's entries are not hxq's
    assert cb.call("HGETALL", dedup_keys("h_q")[0]) == []
    assert cb.call("HLEN", dedup_keys("hxq")[0]) == 1
