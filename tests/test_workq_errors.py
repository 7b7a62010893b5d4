"""workq over real sockets: every error line of the reference (golden transcript and
../shared/reference/README.md), and hostile input: a line past the read limit or a bare LF
closes the connection, random bytes get error lines and the connection keeps answering, a
payload over 1 MiB is refused and exactly 1 MiB is accepted.

One real `jobgate serve` subprocess (SQLite, durability commit, a workq listener) is shared by
the whole module; every test opens its own connection.
"""
from __future__ import annotations

import random

import pytest

from .workq_support import (NOT_FOUND, OK, add_cmd, complete_cmd, err,
                            lease_frame, new_uid, result_frame)


@pytest.fixture
def c(wq_conns):
    """A fresh connection to the module's server."""
    return wq_conns()


# ================================================================== every error line
V = "22222222-2222-4222-8222-000000000001"     # a valid UUIDv4 that is never added
V1 = "6ba7b810-9dad-11d1-80b4-00c04fd430c4"    # the spec's example id: a UUIDv1
PAST = "2000-01-01T00:00:00Z"
A = "add %s q-err 1000 60000 1" % V
ERRORS = [
    # (request, replies); a payload refused before it is read is then read as a line
    ("foo bar\r\n", ["Unknown command"]),
    ("\r\n", ["Unknown command"]),
    ("ADD %s q 1000 60000 1\r\nx\r\n" % V, ["Unknown command", "Unknown command"]),
    (" " + A + "\r\nx\r\n", ["Unknown command", "Unknown command"]),
    ("inspect foo\r\n", ["Unknown command"]),
    ("inspect\rserver\r\n", ["Unknown command"]),
    ("add %s q 1000 1\r\nx\r\n" % V, ["Invalid command args", "Unknown command"]),
    (A + " -foo=1 -priority=1 -max-attempts=1 -max-fails=1\r\nx\r\n", ["Invalid command args"]),
    ("schedule %s q 1000 5000 1\r\nx\r\n" % V, ["Invalid command args", "Unknown command"]),
    ("run %s q 1000 200 1 -priority=1 -x=2\r\nx\r\n" % V, ["Invalid command args"]),
    ("result %s 10 -a=1\r\n" % V, ["Invalid command args"]),
    ("result %s\r\n" % V, ["Invalid command args"]),
    ("delete %s x\r\n" % V, ["Invalid command args"]),
    ("lease 100\r\n", ["Invalid command args"]),
    ("lease q 100 -x=1\r\n", ["Invalid command args"]),
    ("complete %s\r\n" % V, ["Invalid command args"]),
    ("inspect\r\n", ["Invalid command args"]),
    ("inspect server x\r\n", ["Invalid command args"]),
    ("inspect job\r\n", ["Invalid command args"]),
    ("inspect queues 0\r\n", ["Invalid command args"]),
    (A + " -priority=\r\nx\r\n", ["Invalid command flags", "Unknown command"]),
    (A + " -priority=1 -priority=2\r\nx\r\n", ["Invalid command flags", "Unknown command"]),
    ("add %s q 1000 60000 x\r\nx\r\n" % V, ["Invalid payload size", "Unknown command"]),
    ("add %s q 1000 60000 -1\r\nx\r\n" % V, ["Invalid payload size", "Unknown command"]),
    ("add %s q 1000 60000 1048577\r\n" % V, ["Invalid payload size"]),
    ("complete %s 1048577\r\n" % V, ["Invalid payload size"]),
    ("fail %s x\r\nx\r\n" % V, ["Invalid result size", "Unknown command"]),
    ("fail %s 1048577\r\n" % V, ["Invalid result size"]),
    ("add not-a-uuid q 1000 60000 1\r\nx\r\n", ["Invalid ID"]),
    ("add 00000000-0000-0000-0000-000000000000 q 1000 60000 1\r\nx\r\n", ["Invalid ID"]),
    ("add %s q 1000 60000 1\r\nx\r\n" % V1, ["Invalid ID"]),
    ("schedule %s q 1000 60000 2030-01-01T00:00:00Z 1\r\nx\r\n" % V1, ["Invalid ID"]),
    ("run xyz q 1000 100 1\r\nx\r\n", ["Invalid ID"]),
    ("result %s 1000\r\n" % V1, ["Invalid ID"]),
    ("complete %s 1\r\nx\r\n" % V1, ["Invalid ID"]),
    ("fail %s 1\r\nx\r\n" % V1, ["Invalid ID"]),
    ("delete xyz\r\n", ["Invalid ID"]),
    ("inspect job xyz\r\n", ["Invalid ID"]),
    ("add %s bad!name 1000 60000 1\r\nx\r\n" % V, ["Invalid Name"]),
    ("add %s %s 1000 60000 1\r\nx\r\n" % (V, "a" * 256), ["Invalid Name"]),
    ("run %s bad!name 1000 100 1\r\nx\r\n" % V, ["Invalid Name"]),
    ("schedule %s bad!name 1000 5000 2030-01-01T00:00:00Z 1\r\nx\r\n" % V, ["Invalid Name"]),
    ("lease bad!name 100\r\n", ["Invalid Name"]),
    ("lease q-ok bad!name 100\r\n", ["Invalid Name"]),
    ("inspect queue bad!name\r\n", ["Invalid Name"]),
    ("inspect jobs bad!name 0 10\r\n", ["Invalid Name"]),
    ("inspect scheduled-jobs bad!name 0 10\r\n", ["Invalid Name"]),
    ("add %s q 0 60000 1\r\nx\r\n" % V, ["Invalid TTR"]),
    ("add %s q 86400001 60000 1\r\nx\r\n" % V, ["Invalid TTR"]),
    ("add %s q abc 60000 1\r\nx\r\n" % V, ["Invalid TTR"]),
    ("add %s q -1 60000 1\r\nx\r\n" % V, ["Invalid TTR"]),
    ("run %s q 0 100 1\r\nx\r\n" % V, ["Invalid TTR"]),
    ("add %s q 1000 0 1\r\nx\r\n" % V, ["Invalid TTL"]),
    ("add %s q 1000 2592000001 1\r\nx\r\n" % V, ["Invalid TTL"]),
    ("schedule %s q 1000 abc 2030-01-01T00:00:00Z 1\r\nx\r\n" % V, ["Invalid TTL"]),
    (A + " -max-attempts=256\r\nx\r\n", ["Invalid Max Attempts"]),
    (A + " -max-attempts=-1\r\nx\r\n", ["Invalid Max Attempts"]),
    (A + " -max-fails=256\r\nx\r\n", ["Invalid Max Fails"]),
    (A + " -priority=2147483648\r\nx\r\n", ["Invalid Priority"]),
    (A + " -priority=-2147483649\r\nx\r\n", ["Invalid Priority"]),
    (A + " -priority=abc\r\nx\r\n", ["Invalid Priority"]),
    ("run %s q 1000 100 1 -priority=x\r\nx\r\n" % V, ["Invalid Priority"]),
    # the spec gives schedule / run priorities up to 2^32; the reference takes int32 everywhere
    ("schedule %s q 1000 5000 2030-01-01T00:00:00Z 1 -priority=4294967295\r\nx\r\n" % V,
     ["Invalid Priority"]),
    ("schedule %s q 1000 5000 %s 1\r\nx\r\n" % (V, PAST), ["Invalid Time"]),
    ("schedule %s q 1000 5000 2030-01-01T00:00:00+00:00 1\r\nx\r\n" % V, ["Invalid Time"]),
    ("schedule %s q 1000 5000 2030-13-01T00:00:00Z 1\r\nx\r\n" % V, ["Invalid Time"]),
    ("result %s abc\r\n" % V, ["Invalid wait timeout"]),
    ("result %s 86400001\r\n" % V, ["Invalid wait timeout"]),
    ("lease q abc\r\n", ["Invalid wait timeout"]),
    ("lease q 86400001\r\n", ["Invalid wait timeout"]),
    ("lease q -1\r\n", ["Invalid wait timeout"]),
    ("run %s q 1000 abc 1\r\nx\r\n" % V, ["Invalid wait timeout"]),
    ("inspect queues -1 10\r\n", ["Invalid cursor offset"]),
    ("inspect jobs q x 10\r\n", ["Invalid cursor offset"]),
    ("inspect scheduled-jobs q -1 10\r\n", ["Invalid cursor offset"]),
    ("inspect queues 0 0\r\n", ["Invalid limit"]),
    ("inspect queues 0 101\r\n", ["Invalid limit"]),
    ("inspect jobs q 0 0\r\n", ["Invalid limit"]),
    ("inspect scheduled-jobs q 0 101\r\n", ["Invalid limit"]),
    ("result %s 1000\r\n" % V, ["-NOT-FOUND"]),
    ("complete %s 1\r\nx\r\n" % V, ["-NOT-FOUND"]),
    ("fail %s 1\r\nx\r\n" % V, ["-NOT-FOUND"]),
    ("delete %s\r\n" % V, ["-NOT-FOUND"]),
    ("inspect job %s\r\n" % V, ["-NOT-FOUND"]),
    ("inspect job %s\r\n" % V1, ["-NOT-FOUND"]),    # inspect does not check the version
    ("inspect queue never-seen\r\n", ["-NOT-FOUND"]),
    ("inspect jobs never-seen 0 10\r\n", ["-NOT-FOUND"]),
    ("inspect scheduled-jobs never-seen 0 10\r\n", ["-NOT-FOUND"]),
    ("lease never-filled 0\r\n", ["-TIMEOUT"]),
    ("delete %s\r\n" % V1, ["+OK"]),                # reference: a non-v4 id is "deleted"
]


@pytest.mark.parametrize("request_text, replies", ERRORS, ids=[e[0][:50] for e in ERRORS])
def test_error_lines(c, request_text, replies):
    c.send(request_text.encode())
    want = [r.encode() + b"\r\n" if r[0] in "-+" else err(r) for r in replies]
    assert [c.reply() for _ in want] == want
    # the connection still answers, and nothing else was sent
    assert c.cmd(b"inspect job %s\r\n" % V.encode()) == NOT_FOUND
    assert c.buf == b""


# ================================================================== hostile input
def test_huge_line_closes_the_connection(c):
    try:
        c.send(b"a" * 1_058_586)
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert c.closed_by_peer()


def test_long_line_below_the_limit_is_an_unknown_command(c):
    assert c.cmd(b"a" * 20_000 + b"\r\n") == err("Unknown command")
    assert c.cmd(b"inspect job %s\r\n" % V.encode()) == NOT_FOUND


@pytest.mark.parametrize("data, sent_before_close", [
    (b"inspect server\n", b""), (b"\n", b""),
    (b"add %s q 1000 60000 3\r\nabcd\r\n" % V.encode(), err("Invalid payload size")),
    (b"fail %s 3\r\nabcd\r\n" % V.encode(), err("Invalid result size"))])
def test_bare_lf_closes_the_connection(c, data, sent_before_close):
    """A bare LF ends the connection silently; after a payload one byte longer than declared,
    the 2 bytes checked for CRLF are `d\\r`, the size error is sent and the LF left over
    closes the connection (as in the reference)."""
    c.send(data)
    assert c.closed_by_peer()
    assert c.buf == sent_before_close


def test_random_bytes_get_error_lines_and_the_connection_lives(c):
    rng = random.Random(20261122)
    alphabet = bytes(b for b in range(256) if b != 10)
    lines = []
    while len(lines) < 200:
        line = bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        if line.split(b" ")[0] not in (b"add", b"schedule", b"run", b"complete", b"fail",
                                       b"lease", b"result", b"delete", b"inspect"):
            lines.append(line)
    c.send(b"".join(x + b"\r\n" for x in lines))
    got = [c.reply() for _ in lines]
    assert all(g.startswith(b"-CLIENT-ERROR ") for g in got), got
    u = new_uid()
    assert c.cmd(add_cmd(u, "after-noise", b"ok")) == OK
    assert c.cmd(b"lease after-noise 0\r\n") == lease_frame(u, "after-noise", 1000, b"ok")


def test_one_mib_payload_and_result_accepted(c):
    u = new_uid()
    big = bytes(range(256)) * 4096                # exactly 1 MiB, every byte value
    assert c.cmd(add_cmd(u, "big", big)) == OK
    assert c.cmd(b"lease big 0\r\n") == lease_frame(u, "big", 1000, big)
    assert c.cmd(complete_cmd(u, big[::-1])) == OK
    assert c.cmd(b"result %s 0\r\n" % u.encode()) == result_frame(u, True, big[::-1])
    assert c.cmd(b"add %s big 1000 60000 1048577\r\n" % new_uid().encode()) == (
        err("Invalid payload size"))
    assert c.cmd(b"inspect queue big\r\n").startswith(b"+OK 1\r\n")


