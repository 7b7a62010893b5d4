"""Hostile RESP clients on the glidemq listener (issue 17; protocols/resp/session.py, codec.py;
DESIGN.md "Protocols: sans-IO": a parser keeps a bounded buffer, malformed input is answered,
never a crash).

What Redis 7.0 does is the contract where the spec is silent (checked against a scratch
redis-server 7.0.15 with proto-max-bulk-len 1mb): a bad multibulk or bulk length, a bulk over
proto-max-bulk-len (`limits.glidemq.max_bulk_bytes` here, set to 4 KiB), a nested array, an
inline request over 64 KiB without a newline are answered `-ERR Protocol error: ...` and the
connection is closed — on the header, before any body; `*0` / `*-5` are skipped; inline
commands (`PING\\r\\n`) are read as Redis reads them. After each case the server still
answers PING on a new connection and its log has no traceback.

Bounds (gateway/limits.py): the bytes of an unfinished command count in the server's buffer
budget (`partial_input`), so a big sender is paused past `limits.max_buffered_bytes`, five
unfinished 60 MiB bulks do not grow the process by their size, and a half-sent command is
closed by the half-sent timeout. The in-process tests move the ManualClock (no sleeps).
"""
from __future__ import annotations

import random
import socket
import threading

import hiredis
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from .inproc import InProcServer
from .resp_support import (GlideServer, RespConn, add_job_args, command, decode_all,
                           job_keys, load_library)
from .server_support import send_unfinished, wait_until

MAX_BULK = 4096
CONFIG = f"limits:\n  glidemq: {{max_bulk_bytes: {MAX_BULK}}}\n"


@pytest.fixture(scope="module")
def hs(tmp_path_factory):
    """One jobgate (SQLite) with beanstalk + glidemq listeners and max_bulk_bytes 4 KiB."""
    d = tmp_path_factory.mktemp("hostile")
    s = GlideServer(f"sqlite:///{d}/jobgate.db", d, config=CONFIG)
    yield s
    s.stop()


@pytest.fixture
def healthy(hs):
    """After the test: the server runs, a new connection gets PONG, and the log it wrote
    during the test has no traceback (an exception that ended a connection is a crash of
    that connection, whatever the client saw)."""
    mark = len(hs.log())
    yield hs
    assert hs.alive(), hs.log()[mark:]
    c = RespConn(hs.glide_port)
    try:
        assert c.call("PING") == b"PONG"
    finally:
        c.close()
    new = hs.log()[mark:]
    if "Traceback" in new or "Fatal error" in new:
        last = new[new.rfind("Traceback"):].strip().splitlines()
        pytest.fail(f"the server logged a traceback: {last[-1] if last else new[-300:]}\n"
                    f"{new[-1500:]}", pytrace=False)


def probe(port: int, data: bytes, shut: bool = False, timeout: float = 5.0):
    """Send `data` on a new connection (then half-close when `shut`); read until the server
    closes or `timeout` s of silence. Returns (decoded replies, closed?)."""
    c = RespConn(port)
    try:
        c.send_raw(data)
        if shut:
            c.sock.shutdown(socket.SHUT_WR)
        got, closed = c.read_until_close(timeout)
    finally:
        c.close()
    return decode_all(got), closed


def is_protocol_error(r) -> bool:
    return isinstance(r, hiredis.ReplyError) and str(r).startswith("ERR Protocol error")


# ======================================================================= protocol errors
PROTOCOL_ERRORS = {
    "bad multibulk length": b"*abc\r\n",
    "star without a length": b"*\r\n",
    "bad bulk length": b"*1\r\n$abc\r\n",
    "negative bulk length": b"*1\r\n$-3\r\n",
    "huge declared bulk": b"*2\r\n$999999999999\r\n",
    "huge multibulk count": b"*99999999999\r\n",
    "bulk over max_bulk_bytes": b"*2\r\n$4\r\nECHO\r\n$%d\r\n" % (MAX_BULK + 1),
    "deep nesting": b"*1\r\n" * 100_000,
    "nested array": b"*2\r\n$4\r\nECHO\r\n*1\r\n$1\r\nx\r\n",
    "array as the command name": b"*1\r\n*1\r\n$4\r\nPING\r\n",
    "integer argument": b"*2\r\n$4\r\nECHO\r\n:5\r\n",
    "inline over 64 KiB": b"A" * (64 * 1024 + 100),
}


@pytest.mark.parametrize("data", PROTOCOL_ERRORS.values(), ids=PROTOCOL_ERRORS.keys())
def test_bad_input_is_answered_protocol_error_and_closed(healthy, data):
    """The header alone decides: nothing more is sent, yet the answer and the close come."""
    replies, closed = probe(healthy.glide_port, data)
    assert len(replies) == 1 and is_protocol_error(replies[0]), replies
    assert closed


@pytest.mark.parametrize("head", [b"*-5\r\n", b"*0\r\n", b"*-1\r\n"])
def test_empty_or_negative_multibulk_is_skipped_as_redis_does(healthy, head):
    replies, closed = probe(healthy.glide_port, head + command("PING"))
    assert replies == [b"PONG"] and not closed


def test_a_bulk_of_exactly_max_bulk_bytes_is_read(healthy):
    c = RespConn(healthy.glide_port)
    try:
        assert c.call("ECHO", b"b" * MAX_BULK) == b"b" * MAX_BULK
        c.send_raw(command("ECHO", b"c" * (MAX_BULK + 1))[:40])   # header + a little body
        got, closed = c.read_until_close()
    finally:
        c.close()
    assert [str(r) for r in decode_all(got)] == ["ERR Protocol error: invalid bulk length"]
    assert closed


def test_replies_before_a_protocol_error_come_first_in_order(healthy):
    data = command("PING") + command("ECHO", "hi") + b"*1\r\n$abc\r\n" + command("PING")
    replies, closed = probe(healthy.glide_port, data)
    assert replies[:2] == [b"PONG", b"hi"]
    assert len(replies) == 3 and is_protocol_error(replies[2]), replies
    assert closed


def test_a_protocol_error_does_not_touch_another_connections_command(healthy):
    other = RespConn(healthy.glide_port)
    try:
        whole = command("ECHO", b"z" * 3000)
        other.send_raw(whole[:1000])
        replies, closed = probe(healthy.glide_port, b"*1\r\n$abc\r\n")
        assert closed and is_protocol_error(replies[0])
        other.send_raw(whole[1000:])
        assert other.reply() == b"z" * 3000
    finally:
        other.close()


# ================================================================================ inline
def test_inline_commands_are_read_as_redis_reads_them(healthy):
    replies, closed = probe(healthy.glide_port, b"PING\r\nECHO hello\r\nPING\n")
    assert replies == [b"PONG", b"hello", b"PONG"] and not closed


@pytest.mark.parametrize("line", [b"+PING", b"-ERR x", b":1", b"$4"])
def test_a_reply_type_byte_at_the_start_is_an_inline_word(healthy, line):
    """Redis reads `+PING` as an inline command named `+PING`: unknown command, goes on."""
    replies, closed = probe(healthy.glide_port, line + b"\r\n" + command("PING"))
    assert len(replies) == 2 and str(replies[0]).startswith("ERR unknown command"), replies
    assert replies[1] == b"PONG" and not closed


def test_inline_garbage_gets_an_error_reply(healthy):
    replies, closed = probe(healthy.glide_port, b"\x01\x02garbage \xff\r\n" + command("PING"))
    assert replies and isinstance(replies[0], hiredis.ReplyError), replies
    assert str(replies[0]).startswith("ERR "), replies
    if not closed:                  # Redis: unknown command, the connection goes on
        assert replies[1:] == [b"PONG"], replies


# ============================================================================ random bytes
RESP_TOKENS = [b"*", b"$", b"+", b"-", b":", b"%", b"~", b"\r\n", b"\n", b"\r", b"0", b"1",
               b"-1", b"9", b"99999999999", b"PING", b"FCALL", b"glidemq_addJob", b"ECHO",
               b"HELLO", b"3", b'"', b"'", b" ", b"\x00", b"\xff", b"{", b"}"]


def _soup(rng: random.Random) -> bytes:
    if rng.random() < 0.3:
        return rng.randbytes(rng.randint(1, 2000))
    return b"".join(rng.choice(RESP_TOKENS) for _ in range(rng.randint(1, 300)))


def test_seeded_random_byte_soups_get_replies_or_a_close(healthy):
    rng = random.Random(1717)
    for i in range(300):
        data = _soup(rng)
        try:
            replies, closed = probe(healthy.glide_port, data, shut=True)
        except (hiredis.ProtocolError, AssertionError) as e:
            raise AssertionError(f"case {i}: {data[:200]!r}: replies are no RESP: {e}")
        assert closed, f"case {i}: {data[:200]!r}: not closed after end of input"
        assert healthy.alive(), f"case {i}: {data[:200]!r}"


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(min_size=1, max_size=600))
def test_random_bytes_never_crash_the_server(healthy, data):
    replies, closed = probe(healthy.glide_port, data, shut=True)
    assert closed
    assert healthy.alive()


# ============================================================================== half-sent
def test_half_sent_commands_then_close_create_nothing(healthy):
    q = "hs-half"
    c = RespConn(healthy.glide_port)
    load_library(c)
    whole = command("FCALL", "glidemq_addJob", 4, *job_keys(q), *add_job_args("h", b"half"))
    for cut in range(1, len(whole), 13):
        h = socket.create_connection(("127.0.0.1", healthy.glide_port))
        h.sendall(whole[:cut])
        h.close()
    assert c.call("ECHO", "sync") == b"sync"
    assert c.add_job(q, "h", b"whole") == b"1"         # nothing was created before
    c.close()


# ============================================================ bounds (in process, clocked)
@pytest.fixture
def inproc():
    made = []

    def start(**config) -> InProcServer:
        s = InProcServer(None, dialects=("glidemq",), **config)
        made.append(s)
        return s
    yield start
    for s in made:
        s.stop()


def _sweep(s: InProcServer, after_ms: int) -> None:
    s.advance(after_ms)
    s.call(s.runtime.limits.sweep)


def test_an_unfinished_command_counts_in_the_buffer_budget(inproc):
    s = inproc(glidemq={"max_bulk_bytes": 1 << 20})
    lim = s.runtime.limits
    c = RespConn(s.ports["glidemq"])
    whole = command("ECHO", b"u" * 300_000)
    c.send_raw(whole[:200_000])
    wait_until(lambda: s.call(lambda: lim.buffered) >= 190_000, what="partial input counted")
    c.send_raw(whole[200_000:])
    assert c.reply() == b"u" * 300_000
    assert s.call(lambda: lim.buffered) == 0
    c.send_raw(whole[:100_000])
    wait_until(lambda: s.call(lambda: lim.buffered) >= 90_000, what="partial input counted")
    c.close()
    wait_until(lambda: s.call(lambda: lim.buffered) == 0, what="released on close")


def test_a_half_sent_command_is_closed_by_the_half_sent_timeout(inproc):
    s = inproc(glidemq={"half_sent_timeout_s": 2})
    half = RespConn(s.ports["glidemq"])
    good = RespConn(s.ports["glidemq"])
    half.send_raw(command("ECHO", "never finished")[:15])
    wait_until(lambda: s.call(lambda: s.runtime.limits.buffered) > 0, what="read")
    _sweep(s, 0)
    _sweep(s, 1000)
    half.send_raw(b"n")                                  # a trickle is no progress
    assert good.call("PING") == b"PONG"
    _sweep(s, 1000)
    got, closed = half.read_until_close()
    assert closed
    assert s.call(lambda: s.runtime.limits.closed["half-sent"]) == 1
    _sweep(s, 60_000)
    assert good.call("PING") == b"PONG"                  # complete traffic stays
    good.close()


def test_buffer_budget_pauses_big_senders_and_every_command_completes(inproc):
    s = inproc(max_buffered_bytes=1 << 20, glidemq={"max_bulk_bytes": 8 << 20})
    lim = s.runtime.limits
    size = 4 << 20
    big = command("ECHO", b"x" * size)
    cut = 3 << 20
    conns = [RespConn(s.ports["glidemq"], timeout=30) for _ in range(3)]
    go = threading.Event()
    replies = []

    def client(c):
        c.send_raw(big[:cut])                       # blocks while the server does not read
        go.wait(30)
        c.send_raw(big[cut:])
        replies.append(c.reply(timeout=30))
    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in conns]
    for t in threads:
        t.start()
    # one connection may finish its command past the budget; the others are paused
    wait_until(lambda: s.call(lambda: lim.exempt is not None and len(lim.paused) == 2),
               what="two paused")
    held = s.call(lambda: lim.buffered)
    assert held < 2 * cut          # the budget + the one big command + a read or two
    go.set()
    for t in threads:
        t.join(30)
    assert len(replies) == 3 and all(r == b"x" * size for r in replies)
    assert s.call(lambda: (lim.buffered, lim.paused, lim.exempt)) == (0, [], None)
    for c in conns:
        c.close()


def test_five_unfinished_60_mib_bulks_do_not_grow_rss_by_their_size(tmp_path):
    """As tests/test_limits.py does for bunqueue frames: with a 32 MiB budget the server
    holds the budget plus one command, not 5 x 60 MiB."""
    s = GlideServer(None, tmp_path, config="limits:\n  max_buffered_bytes: 33554432\n"
                                           "  glidemq: {max_bulk_bytes: 67108864}\n")
    try:
        probe_c = RespConn(s.glide_port)
        assert probe_c.call("PING") == b"PONG"
        before = s.rss_kb()
        size = 60 << 20
        socks = []
        for _ in range(5):
            c = socket.create_connection(("127.0.0.1", s.glide_port))
            c.sendall(b"*2\r\n$4\r\nECHO\r\n$%d\r\n" % size)
            c.setblocking(False)
            socks.append(c)
        sent = send_unfinished(socks, size)             # never its last byte: unfinished
        grown_mb = (s.rss_kb() - before) / 1024
        assert s.alive()
        assert sent > 90 * 2**20                       # the clients did send past the budget
        assert grown_mb < 200, grown_mb                # 32 MiB budget + one 60 MiB bulk + slack
        assert probe_c.call("PING") == b"PONG"
        for c in socks:
            c.close()
        probe_c.close()
    finally:
        s.stop()
