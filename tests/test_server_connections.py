"""The running server over raw sockets: connection lifecycle (disconnect, reset, half-close,
quit, waiters, pipelining), reserve-job and kicks, and hostile input.

Every server here is a real subprocess on 127.0.0.1, stopped by the fixture that started it.
"""
from __future__ import annotations

import random
import socket
import time

import pytest

from .server_support import HOST, no_reply, read_eof, stats_dict, wait_until, waiting


#: Every reply line the beanstalk dialect can send without a body.
REPLY_WORDS = {
    b"INSERTED", b"BURIED", b"EXPECTED_CRLF", b"JOB_TOO_BIG", b"DRAINING", b"USING",
    b"DEADLINE_SOON", b"TIMED_OUT", b"RESERVED", b"DELETED", b"NOT_FOUND", b"RELEASED",
    b"TOUCHED", b"WATCHING", b"NOT_IGNORED", b"FOUND", b"KICKED", b"OK", b"PAUSED",
    b"BAD_FORMAT", b"UNKNOWN_COMMAND", b"OUT_OF_MEMORY", b"INTERNAL_ERROR",
}


def read_quiet(sock: socket.socket, quiet: float = 0.3, limit: float = 10.0) -> bytes:
    """Read until the peer closes or sends nothing for `quiet` seconds (at most `limit`)."""
    data = b""
    end = time.monotonic() + limit
    sock.settimeout(quiet)
    try:
        while time.monotonic() < end:
            try:
                d = sock.recv(65536)
            except (socket.timeout, TimeoutError, ConnectionResetError):
                break
            if not d:
                break
            data += d
    finally:
        sock.settimeout(5.0)
    return data


def split_frames(data: bytes) -> list[bytes]:
    """Split a stream of replies into frames (a line, plus the body of RESERVED/FOUND/OK)."""
    frames = []
    while data:
        i = data.find(b"\r\n")
        assert i >= 0, f"reply without CRLF: {data[:80]!r}"
        parts = data[:i].split(b" ")
        n = 0
        if parts[0] in (b"RESERVED", b"FOUND") and len(parts) == 3:
            n = int(parts[2]) + 2
        elif parts[0] == b"OK" and len(parts) == 2:
            n = int(parts[1]) + 2
        assert len(data) >= i + 2 + n, f"truncated frame: {data[:80]!r}"
        frames.append(data[:i + 2 + n])
        data = data[i + 2 + n:]
    return frames


# ================================================================== connection lifecycle

class TestConnections:
    def test_disconnect_releases_reservations(self, raws):
        a, b = raws(), raws()
        a.cmd(b"put 0 0 60 1\r\nA\r\n")
        a.cmd(b"put 0 0 60 1\r\nB\r\n")
        assert a.cmd(b"reserve\r\n") == b"RESERVED 1 1\r\nA\r\n"
        assert a.cmd(b"reserve-job 2\r\n") == b"RESERVED 2 1\r\nB\r\n"
        assert stats_dict(b)["current-jobs-reserved"] == "2"
        a.close()
        wait_until(lambda: stats_dict(b)["current-jobs-ready"] == "2", what="jobs ready again")
        st = stats_dict(b, b"stats-job 1\r\n")
        assert (st["state"], st["reserves"], st["releases"], st["timeouts"]) == \
            ("ready", "1", "0", "0")
        assert b.cmd(b"reserve-with-timeout 0\r\n") == b"RESERVED 1 1\r\nA\r\n"

    def test_reset_connection_releases_and_drops_waiter(self, raws):
        a, b = raws(), raws()
        a.cmd(b"put 0 0 60 1\r\nA\r\n")
        a.cmd(b"reserve\r\n")
        a.send(b"reserve\r\n")
        wait_until(lambda: waiting(b) == 1, what="a waiting")
        # abortive close (RST)
        a.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        a.close()
        wait_until(lambda: stats_dict(b)["current-connections"] == "1", what="a gone")
        st = stats_dict(b)
        assert st["current-waiting"] == "0" and st["current-jobs-ready"] == "1"
        b.cmd(b"put 0 0 60 1\r\nB\r\n")
        assert b.cmd(b"reserve-with-timeout 0\r\n") == b"RESERVED 1 1\r\nA\r\n"
        assert b.cmd(b"reserve-with-timeout 0\r\n") == b"RESERVED 2 1\r\nB\r\n"

    def test_half_close_while_reserve_waits(self, raws):
        a, b = raws(), raws()
        a.send(b"reserve\r\n")
        wait_until(lambda: waiting(b) == 1, what="a waiting")
        a.sock.shutdown(socket.SHUT_WR)
        assert a.reply() == b"TIMED_OUT\r\n"
        assert read_eof(a.sock) == b""
        wait_until(lambda: waiting(b) == 0, what="waiter withdrawn")
        # the withdrawn waiter does not swallow the next job
        b.cmd(b"put 0 0 60 1\r\nx\r\n")
        assert stats_dict(b)["current-jobs-ready"] == "1"

    def test_half_close_in_same_write_as_reserve(self, raws):
        a, b = raws(), raws()
        a.send(b"use t\r\nwatch t\r\nreserve\r\n")
        a.sock.shutdown(socket.SHUT_WR)
        assert a.reply() == b"USING t\r\n"
        assert a.reply() == b"WATCHING 2\r\n"
        assert a.reply() == b"TIMED_OUT\r\n"
        assert read_eof(a.sock) == b""
        wait_until(lambda: stats_dict(b)["current-connections"] == "1", what="a gone")
        assert waiting(b) == 0

    def test_half_close_after_more_data_while_reserve_waits(self, raws):
        """Regression: the waiting reserve must keep watching the socket after more data."""
        a, b = raws(), raws()
        a.sock.settimeout(2)
        a.send(b"reserve\r\n")
        wait_until(lambda: waiting(b) == 1, what="a waiting")
        a.send(b"list-tube-used\r\n")
        time.sleep(0.1)
        a.sock.shutdown(socket.SHUT_WR)
        assert a.reply() == b"TIMED_OUT\r\n"
        assert a.reply() == b"USING default\r\n"
        assert read_eof(a.sock, timeout=2) == b""

    def test_close_after_more_data_while_reserve_waits(self, raws):
        """Regression: a closed waiter must not keep a waiter nor be handed the next job."""
        a, b = raws(), raws()
        a.send(b"reserve\r\n")
        wait_until(lambda: waiting(b) == 1, what="a waiting")
        a.send(b"list-tube-used\r\n")
        time.sleep(0.1)
        a.close()
        wait_until(lambda: stats_dict(b)["current-connections"] == "1", timeout=2,
                   what="closed connection gone")
        assert waiting(b) == 0
        assert b.cmd(b"put 0 0 60 1\r\nx\r\n") == b"INSERTED 1\r\n"
        time.sleep(0.2)
        st = stats_dict(b, b"stats-job 1\r\n")
        assert (st["state"], st["reserves"]) == ("ready", "0")  # never handed to the dead conn

    def test_half_close_answers_commands_behind_reserve(self, raws):
        """Regression: commands pipelined behind the reserve are answered after TIMED_OUT."""
        a = raws()
        a.sock.settimeout(2)
        a.send(b"reserve\r\nlist-tube-used\r\n")
        a.sock.shutdown(socket.SHUT_WR)
        assert a.reply() == b"TIMED_OUT\r\n"
        assert a.reply() == b"USING default\r\n"

    @pytest.mark.parametrize("before", [b"list-tube-used\r\n",
                                        b"use other\r\nput 0 0 60 1\r\no\r\n"],
                             ids=["after-reply", "after-committed-put"])
    def test_job_arriving_while_earlier_replies_are_sent(self, raws, before):
        """A pipelined `<command>, reserve` while another connection puts at the same moment:
        the reserve must get the job (or TIMED_OUT), never silence."""
        for attempt in range(5):
            a, b = raws(), raws()
            a.sock.settimeout(3)
            tube = b"race%d" % attempt
            assert a.cmd(b"watch " + tube + b"\r\n") == b"WATCHING 2\r\n"
            assert b.cmd(b"use " + tube + b"\r\n") == b"USING " + tube + b"\r\n"
            a.send(before + b"reserve-with-timeout 1\r\n")
            b.send(b"put 0 0 60 4\r\nrace\r\n")
            inserted = b.reply()
            assert inserted.startswith(b"INSERTED ")
            jid = inserted.split()[1]
            n_before = before.count(b"\r\n") - before.count(b"put ")
            for _ in range(n_before):
                a.reply()
            assert a.reply() == b"RESERVED %s 4\r\nrace\r\n" % jid, f"attempt {attempt}"
            a.close()
            b.close()

    def test_megabytes_sent_while_reserve_waits(self, raws):
        """Input that arrives while a reserve waits is held (bounded) and answered after it."""
        import threading
        a, b = raws(), raws()
        a.send(b"reserve\r\n")
        wait_until(lambda: waiting(b) == 1, what="a waiting")
        done = threading.Event()

        def flood():
            try:
                a.sock.sendall(b"z" * (3 << 20) + b"\r\nlist-tube-used\r\n")
            finally:
                done.set()
        t = threading.Thread(target=flood, daemon=True)
        t.start()
        time.sleep(0.3)
        assert b.cmd(b"list-tube-used\r\n") == b"USING default\r\n"  # server still serves
        assert b.cmd(b"put 0 0 60 1\r\nj\r\n") == b"INSERTED 1\r\n"
        assert a.reply() == b"RESERVED 1 1\r\nj\r\n"
        assert a.reply() == b"BAD_FORMAT\r\n"
        assert a.reply() == b"USING default\r\n"
        t.join(20)
        assert done.is_set()

    def test_quit(self, raws):
        a, b = raws(), raws()
        a.send(b"list-tube-used\r\nquit\r\nlist-tube-used\r\n")
        assert a.reply() == b"USING default\r\n"
        assert read_eof(a.sock) == b""
        b.send(b"quitx\r\n")  # prefix match, as beanstalkd
        assert read_eof(b.sock) == b""

    def test_quit_releases_reservation(self, raws):
        a, b = raws(), raws()
        a.cmd(b"put 0 0 60 1\r\nA\r\n")
        a.cmd(b"reserve\r\n")
        a.send(b"quit\r\n")
        assert read_eof(a.sock) == b""
        wait_until(lambda: stats_dict(b)["current-jobs-ready"] == "1", what="job ready again")

    def test_longest_waiter_gets_the_job(self, raws):
        ctl = raws()
        ws = []
        for i in range(4):
            w = raws()
            if i == 2:
                w.cmd(b"watch other\r\n")  # watching two tubes does not change its turn
            w.send(b"reserve\r\n")
            wait_until(lambda: waiting(ctl) == i + 1, what=f"waiter {i}")
            ws.append(w)
        assert stats_dict(ctl, b"stats-tube default\r\n")["current-waiting"] == "4"
        assert stats_dict(ctl, b"stats-tube other\r\n")["current-waiting"] == "1"
        for i in range(4):
            assert ctl.cmd(b"put 0 0 60 1\r\n%d\r\n" % i) == b"INSERTED %d\r\n" % (i + 1)
            assert ws[i].reply() == b"RESERVED %d 1\r\n%d\r\n" % (i + 1, i)
            for later in ws[i + 1:]:
                assert not later.buf
        assert waiting(ctl) == 0

    def test_longest_waiter_across_tubes(self, raws):
        ctl = raws()
        w1, w2 = raws(), raws()
        w1.cmd(b"watch a\r\n")
        w1.cmd(b"watch b\r\n")
        w1.send(b"reserve\r\n")
        wait_until(lambda: waiting(ctl) == 1, what="w1 waiting")
        w2.cmd(b"watch b\r\n")
        w2.send(b"reserve\r\n")
        wait_until(lambda: waiting(ctl) == 2, what="w2 waiting")
        ctl.cmd(b"use b\r\n")
        ctl.cmd(b"put 0 0 60 1\r\nb\r\n")
        assert w1.reply() == b"RESERVED 1 1\r\nb\r\n"
        ctl.cmd(b"put 0 0 60 1\r\nc\r\n")
        assert w2.reply() == b"RESERVED 2 1\r\nc\r\n"

    def test_pipelined_commands_one_write(self, raws):
        a = raws()
        a.send(b"use bar\r\nput 0 0 60 2\r\nhi\r\nlist-tube-used\r\npeek-ready\r\n")
        assert a.reply() == b"USING bar\r\n"
        assert a.reply() == b"INSERTED 1\r\n"
        assert a.reply() == b"USING bar\r\n"
        assert a.reply() == b"FOUND 1 2\r\nhi\r\n"

    def test_pipelined_after_waiting_reserve(self, raws):
        """Commands sent behind a waiting reserve are answered after it, in order."""
        a, b = raws(), raws()
        a.send(b"reserve\r\nlist-tube-used\r\n")
        wait_until(lambda: waiting(b) == 1, what="a waiting")
        b.cmd(b"put 0 0 60 1\r\nx\r\n")
        assert a.reply() == b"RESERVED 1 1\r\nx\r\n"
        assert a.reply() == b"USING default\r\n"


# ================================================================ reserve-job, kick, kick-job

def test_reserve_job_and_kicks(raws):
    a, b = raws(), raws()
    a.send(b"use foo\r\nput 10 0 60 5\r\nhello\r\nput 0 100 60 1\r\nd\r\nput 0 0 60 1\r\nr\r\n")
    assert [a.reply() for _ in range(4)] == [b"USING foo\r\n", b"INSERTED 1\r\n",
                                             b"INSERTED 2\r\n", b"INSERTED 3\r\n"]
    # reserve-job takes ready, delayed and buried jobs
    assert a.cmd(b"reserve-job 1\r\n") == b"RESERVED 1 5\r\nhello\r\n"
    assert a.cmd(b"reserve-job 1\r\n") == b"NOT_FOUND\r\n"
    assert b.cmd(b"reserve-job 1\r\n") == b"NOT_FOUND\r\n"
    assert a.cmd(b"bury 1 7\r\n") == b"BURIED\r\n"
    assert b.cmd(b"reserve-job 1\r\n") == b"RESERVED 1 5\r\nhello\r\n"
    assert a.cmd(b"delete 1\r\n") == b"NOT_FOUND\r\n"
    assert b.cmd(b"bury 1 7\r\n") == b"BURIED\r\n"
    assert a.cmd(b"reserve-job 2\r\n") == b"RESERVED 2 1\r\nd\r\n"
    assert a.cmd(b"release 2 0 100\r\n") == b"RELEASED\r\n"
    assert a.cmd(b"reserve-job 999\r\n") == b"NOT_FOUND\r\n"
    # kick: buried first, then delayed; only the used tube
    assert b.cmd(b"kick 10\r\n") == b"KICKED 0\r\n"  # b uses default
    assert a.cmd(b"kick 10\r\n") == b"KICKED 1\r\n"
    assert stats_dict(a, b"stats-job 1\r\n")["state"] == "ready"
    assert stats_dict(a, b"stats-job 2\r\n")["state"] == "delayed"
    assert a.cmd(b"kick 10\r\n") == b"KICKED 1\r\n"
    assert a.cmd(b"kick 10\r\n") == b"KICKED 0\r\n"
    # kick-job: buried or delayed only, any tube
    assert a.cmd(b"put 0 100 60 1\r\ne\r\n") == b"INSERTED 4\r\n"
    assert b.cmd(b"kick-job 4\r\n") == b"KICKED\r\n"
    assert b.cmd(b"kick-job 4\r\n") == b"NOT_FOUND\r\n"
    assert b.cmd(b"kick-job 999\r\n") == b"NOT_FOUND\r\n"
    assert a.cmd(b"reserve-job 3\r\n") == b"RESERVED 3 1\r\nr\r\n"
    assert b.cmd(b"kick-job 3\r\n") == b"NOT_FOUND\r\n"
    st = stats_dict(a, b"stats-job 1\r\n")
    assert (st["reserves"], st["buries"], st["kicks"]) == ("2", "2", "1")


# ============================================================================ hostile input

class TestHostileInput:
    def test_megabyte_line_without_crlf(self, server, raws):
        a, b = raws(), raws()
        chunk = b"z" * 65536
        for _ in range(16):  # 1 MiB, no line end
            a.send(chunk)
        assert b.cmd(b"list-tube-used\r\n") == b"USING default\r\n"  # server alive meanwhile
        assert no_reply(a, 0.2)  # beanstalkd answers only at the end of the line
        a.send(b"\r\nlist-tube-used\r\n")
        assert a.reply() == b"BAD_FORMAT\r\n"
        assert a.reply() == b"USING default\r\n"
        a.close()
        assert b.cmd(b"put 0 0 60 1\r\nx\r\n") == b"INSERTED 1\r\n"

    def test_megabyte_line_then_close(self, server, raws):
        a, b = raws(), raws()
        try:
            a.send(b"q" * (1 << 20))
        except OSError:
            pass
        a.close()
        assert b.cmd(b"list-tube-used\r\n") == b"USING default\r\n"
        wait_until(lambda: stats_dict(b)["current-connections"] == "1", what="a gone")

    def test_long_lines_exact_errors(self, raws):
        a = raws()
        # golden: unknown command of 222 bytes + CRLF; 223 bytes + CRLF; 1000 bytes + CRLF
        a.send(b"z" * 222 + b"\r\nlist-tube-used\r\n")
        assert a.reply() == b"UNKNOWN_COMMAND\r\n"
        assert a.reply() == b"USING default\r\n"
        a.send(b"z" * 1000 + b"\r\nlist-tube-used\r\n")
        assert a.reply() == b"BAD_FORMAT\r\n"
        assert a.reply() == b"USING default\r\n"
        a.send(b"put " + b"0" * 300 + b"1 0 60 1\r\nx\r\nlist-tube-used\r\n")
        assert a.reply() == b"BAD_FORMAT\r\n"
        assert a.reply() == b"UNKNOWN_COMMAND\r\n"
        assert a.reply() == b"USING default\r\n"

    def test_random_bytes_never_kill_the_server(self, server, raws):
        rng = random.Random(1234)
        b = raws()
        for trial in range(6):
            a = raws()
            if trial % 2:
                data = bytes(rng.getrandbits(8) for _ in range(50_000))
            else:  # printable-ish noise with plenty of line ends and command words
                words = [b"put", b"reserve", b"use", b"peek", b"kick", b"\r\n", b" ", b"0",
                         b"4294967295", b"-", b"\x00", b"\r", b"\n", b"stats-job", b"watch",
                         b"ignore", b"delete", b"release", b"bury", b"touch", b"pause-tube"]
                data = b"".join(rng.choice(words) for _ in range(20_000))
            a.send(data)
            replies = read_quiet(a.sock)
            for frame in split_frames(replies):
                assert frame.split(b"\r\n", 1)[0].split(b" ", 1)[0] in REPLY_WORDS, frame[:80]
            a.close()
            assert b.cmd(b"list-tube-used\r\n") == b"USING default\r\n"
        # (that every noise connection is also forgotten after its close is not asserted here:
        # a `reserve` in the noise hits the bug of test_close_after_more_data_while_reserve_waits)

    def test_put_declaring_4gib_then_close(self, server, raws):
        a, b = raws(), raws()
        a.send(b"put 0 0 60 4294967295\r\n")
        assert no_reply(a, 0.3)  # 1.12 waits to skip 4 GiB
        a.send(b"x" * 100_000)
        assert b.cmd(b"list-tube-used\r\n") == b"USING default\r\n"
        a.close()
        wait_until(lambda: stats_dict(b)["current-connections"] == "1", what="a gone")
        assert b.cmd(b"put 0 0 60 1\r\nx\r\n") == b"INSERTED 1\r\n"
        st = stats_dict(b)
        assert st["total-jobs"] == "1"

    def test_put_with_oversized_declared_bytes(self, raws):
        a = raws()
        # > u32: BAD_FORMAT without consuming a body
        a.send(b"put 0 0 60 4294967296\r\nx\r\n")
        assert a.reply() == b"BAD_FORMAT\r\n"
        assert a.reply() == b"UNKNOWN_COMMAND\r\n"
        a.send(b"put 0 0 60 99999999999999999999999\r\nlist-tube-used\r\n")
        assert a.reply() == b"BAD_FORMAT\r\n"
        assert a.reply() == b"USING default\r\n"

    def test_body_truncated_by_close(self, server, raws):
        a, b = raws(), raws()
        a.send(b"put 0 0 60 65535\r\n" + b"y" * 30000)
        a.close()
        wait_until(lambda: stats_dict(b)["current-connections"] == "1", what="a gone")
        assert stats_dict(b)["total-jobs"] == "0"
        assert b.cmd(b"peek 1\r\n") == b"NOT_FOUND\r\n"

    def test_body_errors_exact(self, raws):
        a = raws()
        # golden 1.12: 2+2 bytes 'abc\r' are read, trailer 'c\r' is wrong; the '\n' left over
        # starts the next command line
        assert a.cmd(b"put 0 0 60 2\r\nabc\r\n") == b"EXPECTED_CRLF\r\n"
        assert a.cmd(b"list-tube-used\r\n") == b"UNKNOWN_COMMAND\r\n"
        assert a.cmd(b"put 0 0 60 1\r\nxyz") == b"EXPECTED_CRLF\r\n"
        assert a.cmd(b"list-tube-used\r\n") == b"USING default\r\n"
        # 'yz' was read as the trailer; what follows is parsed as command lines
        a.send(b"put 0 0 60 1\r\nxyz\r\nlist-tube-used\r\n")
        assert a.reply() == b"EXPECTED_CRLF\r\n"
        assert a.reply() == b"UNKNOWN_COMMAND\r\n"  # the empty line
        assert a.reply() == b"USING default\r\n"
        # as in beanstalkd, each refused body used up a job id (golden 1.12: ids 13-15)
        assert a.cmd(b"put 0 0 60 0\r\n\r\n") == b"INSERTED 4\r\n"

    def test_many_connections_churn(self, server, raws):
        b = raws()
        total0 = int(stats_dict(b)["total-connections"])
        socks = []
        for i in range(200):
            s = socket.create_connection((HOST, server.port), timeout=5)
            s.sendall(b"put 0 0 60 1\r\nx\r\nreserve\r\n" if i % 2 else b"watch t\r\n")
            socks.append(s)
        for s in socks:
            s.close()

        def all_served_and_gone():
            st = stats_dict(b)
            return (int(st["total-connections"]) == total0 + 200
                    and st["current-connections"] == "1")
        wait_until(all_served_and_gone, timeout=20, what="churned connections served and gone")
        st = stats_dict(b)
        assert st["current-jobs-reserved"] == "0"
        assert int(st["current-jobs-ready"]) <= 100
