"""Hostile bunqueue clients (issue 15, item 2; docs/bunqueue.md "Hostile clients").

- Before Auth (auth_tokens set) the frame limit is `pre_auth_max_frame` (64 KiB): a bigger
  header is answered with the reference's `Frame too large: N bytes exceeds maximum M` and the
  connection closes before the body is read; `handshake_pending()` is True until Auth.
- A frame over bulk.BIG_FRAME is decoded, and a PUSHB of more than bulk.BATCH_SLICE jobs is
  applied, in slices through `transport.defer`; the reply comes after the last slice, durable.
- Over real sockets: another connection is answered while a 64 MiB frame and a 10,000-job
  PUSHB are processed (no timing asserted; latency is measured in benchmarks/loop_stall.py).

Session-level tests drive protocols.bunqueue.connection.Connection with a transport that
records what it is asked (the connection contract, protocols/contract.py) on a real in-memory
engine; the socket tests run the real server (tests/support.Server).
"""
from __future__ import annotations

import socket
import threading

import msgpack
import pytest

from core.clock import ManualClock
from core.engine import Engine
from protocols.bunqueue.bulk import BATCH_SLICE, BIG_FRAME
from protocols.bunqueue.codec import frame, pack
from protocols.bunqueue.connection import Connection
from protocols.bunqueue.info import BunqueueInfo

from .bunqueue_support import OPEN_LISTENERS_YAML, BQ, UNDEF, qname
from .support import Server


class Recorder:
    """The gateway side of one connection, in memory: sent frames (with their durable flag),
    close, read pauses, and deferred calls run by `drain()`."""

    def __init__(self) -> None:
        self.sent: list = []
        self.closed = False
        self.pauses = 0
        self.deferred: list = []

    def send(self, data: bytes, durable: bool = False) -> None:
        self.sent.append((data, durable))

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.pauses += 1

    def resume_reading(self) -> None:
        self.pauses -= 1

    def defer(self, fn) -> None:
        self.deferred.append(fn)

    def drain(self) -> int:
        """Run deferred calls (and those they defer) until none is left; how many ran."""
        n = 0
        while self.deferred:
            self.deferred.pop(0)()
            n += 1
        return n

    def replies(self) -> list:
        """The sent frames decoded, in order."""
        out = []
        for data, _ in self.sent:
            assert int.from_bytes(data[:4], "big") == len(data) - 4
            out.append(msgpack.unpackb(data[4:], raw=False, strict_map_key=False,
                                       ext_hook=lambda c, d: None))
        return out


def connection(tokens=(), **kw):
    info = BunqueueInfo(Engine(clock=ManualClock()), tokens, **kw)
    t = Recorder()
    return Connection(info, t), t, info


def cmd(**fields) -> bytes:
    return frame(pack(fields))


# ============================================================ before Auth
def test_pre_auth_oversized_header_is_refused_before_its_body_and_the_link_closes():
    c, t, _ = connection(["s3cret"])
    assert c.handshake_pending()
    c.data_received((64 * 1024 + 1).to_bytes(4, "big") + b"\x80" * 1000)
    assert t.replies() == [{"ok": False, "reqId": None,
                            "error": "Frame too large: 65537 bytes exceeds maximum 65536"}]
    assert t.closed
    assert c.partial_input() == 0
    c.data_received(b"\x00" * 100_000)      # nothing more is read or held
    assert c.partial_input() == 0 and len(t.sent) == 1


def test_pre_auth_limit_is_configurable_and_a_frame_at_it_is_read():
    c, t, _ = connection(["s3cret"], pre_auth_max_frame=100)
    body = pack({"cmd": "Ping", "reqId": "p", "pad": "x" * 76})
    assert len(body) == 100
    c.data_received(frame(body))
    assert t.replies() == [{"ok": False, "error": "Not authenticated", "reqId": "p"}]
    assert not t.closed and c.handshake_pending()
    c.data_received((101).to_bytes(4, "big"))
    assert t.replies()[-1]["error"] == "Frame too large: 101 bytes exceeds maximum 100"
    assert t.closed


def test_a_frame_pipelined_after_auth_gets_the_full_limit():
    c, t, info = connection(["s3cret"])
    big = cmd(cmd="PUSH", queue="q", data="y" * 200_000, reqId="big")
    c.data_received(cmd(cmd="Auth", token="s3cret", reqId="a") + big)
    t.drain()
    r = t.replies()
    assert [x["reqId"] for x in r] == ["a", "big"]
    assert r[0]["ok"] and r[1]["ok"], r
    assert not c.handshake_pending() and not t.closed
    assert info.total_pushed == 1


def test_wrong_token_keeps_the_small_limit_and_the_handshake_pending():
    c, t, _ = connection(["s3cret"])
    c.data_received(cmd(cmd="Auth", token="nope", reqId="a"))
    assert t.replies() == [{"ok": False, "error": "Invalid token", "reqId": "a"}]
    assert c.handshake_pending()
    c.data_received((1 << 20).to_bytes(4, "big"))
    assert t.closed


def test_no_tokens_no_handshake_and_the_full_limit():
    c, t, _ = connection()
    assert not c.handshake_pending()
    assert c.handshake_timeout_s() == 10
    c.data_received(cmd(cmd="PUSH", queue="q", data="z" * (1 << 20), reqId="x"))
    t.drain()
    assert t.replies()[0]["ok"] and not t.closed


def test_partial_input_counts_the_unfinished_frame():
    c, t, _ = connection(["s3cret"])
    c.data_received((1000).to_bytes(4, "big") + b"\x81" * 10)
    assert c.partial_input() == 14
    assert not t.sent and not t.closed


# ============================================================ big work in slices
def test_big_pushb_runs_in_slices_and_answers_once_durably_after_the_last():
    c, t, info = connection()
    n = 4 * BATCH_SLICE + 7
    c.data_received(cmd(cmd="PUSHB", queue="bq", reqId="b",
                        jobs=[{"data": {"i": i}} for i in range(n)]))
    assert t.sent == [] and t.pauses == 1          # not answered yet; input paused
    c.data_received(cmd(cmd="Ping", reqId="after"))  # held behind the batch (reply order)
    steps = t.drain()
    assert steps >= 4
    (b, durable_b), (p, durable_p) = t.sent
    r = t.replies()
    assert r[0]["reqId"] == "b" and r[0]["ok"] and len(r[0]["ids"]) == n and durable_b
    assert r[1]["reqId"] == "after"
    assert len(set(r[0]["ids"])) == n
    assert info.total_pushed == n and t.pauses == 0


def test_big_pushb_that_fails_validation_creates_nothing():
    c, t, info = connection()
    jobs = [{"data": i} for i in range(3 * BATCH_SLICE)] + [{"data": 2**40}]
    c.data_received(cmd(cmd="PUSHB", queue="bq", reqId="b", jobs=jobs))
    t.drain()
    assert t.replies() == [{"ok": False, "reqId": "b", "error":
                            f"jobs[{3 * BATCH_SLICE}]: Job data must be JSON serializable"}]
    assert info.total_pushed == 0


def test_big_frame_push_is_decoded_in_slices_and_stored_like_a_small_one():
    c, t, info = connection()
    data = {str(i): [i, "v"] for i in range(40_000)}
    body = pack({"cmd": "PUSH", "queue": "bf", "data": data, "reqId": "p"})
    assert len(body) > BIG_FRAME
    c.data_received(frame(body))
    assert t.sent == []
    assert t.drain() > 3
    r = t.replies()[0]
    assert r["ok"] and t.sent[0][1]
    c.data_received(cmd(cmd="GetJob", id=r["id"], reqId="g"))
    t.drain()
    assert t.replies()[-1]["job"]["data"] == data


def test_big_frame_errors_are_the_small_frame_errors():
    c, t, _ = connection()
    body = pack({"cmd": "PUSH", "queue": "bf", "data": list(range(100_000)) + [2**40]})
    c.data_received(frame(body) + frame(pack([1] * 200_000)) + frame(b"\xc1" * 300_000))
    t.drain()
    assert [x["error"] for x in t.replies()] == ["Job data must be JSON serializable",
                                                 "Invalid command", "Invalid command"]


def test_closing_mid_batch_stops_it_quietly():
    c, t, info = connection()
    c.data_received(cmd(cmd="PUSHB", queue="bq", reqId="b",
                        jobs=[{"data": i} for i in range(5 * BATCH_SLICE)]))
    c.connection_lost()
    t.drain()
    assert t.sent == []


# ============================================================ real sockets
def _config(tmp_path, text: str) -> list:
    p = tmp_path / "jobgate.yaml"
    p.write_text(text)
    return ["--config", str(p)]


@pytest.fixture
def authed_server(tmp_path):
    s = Server(f"sqlite:///{tmp_path}/jobgate.db", bunqueue=True,
               extra=_config(tmp_path, "bunqueue:\n  auth_tokens: [s3cret]\n"
                                        + OPEN_LISTENERS_YAML))
    yield s
    s.stop()


def test_socket_pre_auth_1_mib_frame_is_refused_and_the_link_closed(authed_server):
    c = BQ(authed_server.bunqueue_port)
    c.send_raw((1 << 20).to_bytes(4, "big") + b"\x00" * 65536)
    assert c.recv() == {"ok": False, "reqId": UNDEF,
                        "error": "Frame too large: 1048576 bytes exceeds maximum 65536"}
    assert _closed(c.sock)
    ok = BQ(authed_server.bunqueue_port)          # the server is fine
    assert ok.call("Auth", token="s3cret")["ok"]
    assert ok.call("Ping")["ok"]


def _closed(sock: socket.socket) -> bool:
    """True when the peer closed: EOF (or a reset) after whatever was still in flight."""
    sock.settimeout(5)
    try:
        while True:
            d = sock.recv(65536)
            if not d:
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


@pytest.fixture(scope="module")
def open_server(tmp_path_factory):
    s = Server(f"sqlite:///{tmp_path_factory.mktemp('hostile')}/jobgate.db", bunqueue=True)
    yield s
    s.stop()


def _pinger_while(port: int, work, probe=None) -> tuple:
    """Run `work()` in a thread; meanwhile ping on another connection (and call `probe(conn)`
    after each ping). Returns (pings answered while `work` ran, probe results, work's result)."""
    done = threading.Event()
    result = {}

    def run():
        try:
            result["r"] = work()
        finally:
            done.set()

    pinger = BQ(port, timeout=60)
    th = threading.Thread(target=run)
    th.start()
    answered, probes = 0, []
    while not done.is_set():
        assert pinger.call("Ping")["ok"]
        if not done.is_set():
            answered += 1
            if probe is not None:
                probes.append(probe(pinger))
    th.join()
    return answered, probes, result.get("r")


def test_socket_ping_answered_while_a_10000_job_pushb_is_applied(open_server):
    q = qname("stall")
    big = BQ(open_server.bunqueue_port, timeout=120)
    jobs = [{"data": {"i": i, "s": "x" * 20}} for i in range(10_000)]

    def work():
        return big.call("PUSHB", queue=q, jobs=jobs)

    answered, counts, r = _pinger_while(
        open_server.bunqueue_port, work,
        lambda c: c.call("Count", queue=q)["count"])
    assert r["ok"] and len(r["ids"]) == 10_000
    assert answered >= 1
    # the batch was seen half applied: other connections ran between its slices
    assert any(0 < n < 10_000 for n in counts), counts


def test_socket_ping_answered_while_a_64_mib_frame_is_processed(open_server):
    big = BQ(open_server.bunqueue_port, timeout=300)
    data = {str(i): i for i in range(300_000)}
    head = pack({"cmd": "PUSH", "queue": qname("big"), "reqId": "big", "data": data})
    pad = 64 * 1024 * 1024 - len(head) - 12          # the rest of 64 MiB: an unknown field
    body = pack({"cmd": "PUSH", "queue": qname("big"), "reqId": "big", "data": data,
                 "pad": b"\x00" * pad})
    assert 63 * 1024 * 1024 < len(body) <= 64 * 1024 * 1024

    def work():
        big.send_raw(frame(body))
        sent.set()
        return big.recv()

    sent = threading.Event()
    answered, after_sent, r = _pinger_while(open_server.bunqueue_port, work,
                                            lambda c: sent.is_set())
    assert r["reqId"] == "big" and r["ok"], r
    assert any(after_sent)     # answered after the whole frame was sent, before its reply
