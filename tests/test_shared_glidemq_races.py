"""glide-mq on shared-mode nodes, the cases a review found (issue 19; docs/scaling.md
"glide-mq across nodes"): ids a look-ahead took for commands that never got them, the order
of automatic ids around a numeric custom id in one pipeline, a custom id checked free for a
command that did not run, a debounce whose custom id another node holds, and dedup calls of
one id on several connections of one node at once. Each failed before its fix. Real node
processes on one fresh PostgreSQL database, real RESP sockets.

Needs JOBGATE_TEST_PG_URL (skipped with a clear reason without it).
"""
from __future__ import annotations

import hiredis

from .resp_support import LIBRARY_STANDIN, add_job_args, dedup_keys, job_keys, now_ms
from .shared_support import rows
from .test_shared_glidemq import _conn, _dd, _state


def _add(q: str, **kw) -> tuple:
    return ("FCALL", "glidemq_addJob", 4, *job_keys(q), *add_job_args(**kw))


def test_an_id_taken_for_a_refused_addjob_is_not_handed_out_later(nodes):
    """An addJob refused after its id was taken (a timestamp that is not a number, with a
    delay) leaves that id unused; a custom id "1" is then created: the next automatic id is
    2, as on a single server (the stocked 1 was handed out again: two jobs 1)."""
    (a,) = nodes(1, glide=True)
    ca, cb = _conn(a), _conn(a)
    assert isinstance(ca.call(*_add("lq", ts="x", delay=5)), hiredis.ReplyError)
    assert cb.add_job("lq", custom_id="1") == b"1"
    assert ca.add_job("lq") == b"2"
    assert len(rows(nodes.url, "SELECT uid FROM jobs WHERE queue = 'lq'")) == 2


def test_automatic_ids_around_a_numeric_custom_id_in_one_pipeline(nodes):
    """[auto, "40", auto] in one write answers 1, 40, 41 as a single server (41, 40, 42)."""
    (a,) = nodes(1, glide=True)
    ca = _conn(a)
    ca.send(_add("oq"), _add("oq", custom_id="40"), _add("oq"))
    assert [ca.reply() for _ in range(3)] == [b"1", b"40", b"41"]


def test_a_custom_id_checked_for_a_command_that_did_not_run_is_asked_again(nodes):
    """A pipeline's look-ahead checks custom id X free, but that addJob fails (the library
    was flushed before it); X is then stored through b; a's next addJob of X is a duplicate
    (it was trusted and created twice)."""
    a, b = nodes(2, glide=True)
    ca, cb = _conn(a), _conn(b)
    ca.send(_add("kq"), ("FUNCTION", "FLUSH"), _add("kq", custom_id="X"))
    got = [ca.reply() for _ in range(3)]
    assert got[0] == b"1" and isinstance(got[2], hiredis.ReplyError)
    assert ca.call("FUNCTION", "LOAD", "REPLACE", LIBRARY_STANDIN) == b"glidemq"
    assert cb.add_job("kq", custom_id="X") == b"X"
    assert ca.add_job("kq", custom_id="X") == b"duplicate"
    assert len(rows(nodes.url, "SELECT uid FROM jobs WHERE queue = 'kq'")) == 2


def test_a_debounce_whose_custom_id_another_node_holds_keeps_the_old_job(nodes):
    """A single server answers "duplicate" and keeps the delayed job; it was removed."""
    a, b = nodes(2, glide=True)
    ca, cb = _conn(a), _conn(b)
    t = now_ms()
    first = _dd(ca, "dbq", "d1", "debounce", delay=60_000, ts=t, data='"old"')
    assert first == b"1"
    assert cb.add_job("dbq", custom_id="C") == b"C"
    assert _dd(ca, "dbq", "d1", "debounce", delay=60_000, ts=t + 5,
               custom_id="C") == b"duplicate"
    assert _state(ca, "dbq", first) == b"delayed"
    assert rows(nodes.url, "SELECT uid FROM jobs WHERE uid = 'glide:{dbq}:1'") != []


def test_one_dedup_id_on_four_connections_of_one_node_at_once(nodes):
    """Four connections send a simple dedup of one id at the same moment: one job, three
    "skipped", as on a single server (each read the entry before any was stored: four
    jobs)."""
    (a,) = nodes(1, glide=True)
    cs = [_conn(a) for _ in range(4)]
    for c in cs:
        c.send(("FCALL", "glidemq_dedup", 5, *dedup_keys("sq"), "s1", "0", "simple",
                *add_job_args(data='"x"')))
    got = [c.reply() for c in cs]
    assert sorted(got) == [b"1", b"skipped", b"skipped", b"skipped"]
