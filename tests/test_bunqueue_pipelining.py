"""bunqueue framing, pipelining, reqId, auth, rate limit and hostile input over real sockets
against jobgate (bunqueue-tcp-protocol.txt "Wire Format", "Pipelining", "Authentication",
"Rate Limiting"; bunqueue-protocol-architecture.txt; golden steps 104-123).

Several frames go out in ONE write where a test says so (BQ.send); replies are read in arrival
order (recv / recv_n). Cases where jobgate answers otherwise than bunqueue 2.9.5 are
xfail(strict=True) with the reference's answer in the reason.
"""
from __future__ import annotations

import random
import time

import pytest

from .bunqueue_support import (BQ, UNDEF, bq_server_start, frame, frame_raw, pack, qname,
                               reference_mode)

TOO_LARGE = "Frame too large: {} bytes exceeds maximum 67108864"


# =========================================================================== reqId
@pytest.mark.parametrize("rid", ["r1", "", 7, -3, 0, 1.5, True, [1], {"a": 1}, 2 ** 40],
                         ids=repr)
def test_req_id_is_echoed_as_sent(bq, rid):
    c = bq()
    c.send({"cmd": "Ping", "reqId": rid})
    r = c.recv()
    assert r["ok"] is True and r["reqId"] == rid and type(r["reqId"]) is type(rid)
    c.send({"cmd": "Bogus", "reqId": rid})          # errors echo it too
    assert c.recv() == {"ok": False, "error": "Unknown command: Bogus", "reqId": rid}


def test_absent_req_id_is_undefined(bq):
    c = bq()
    c.send({"cmd": "Ping"})
    r = c.recv()
    assert list(r) == ["ok", "data", "reqId"] and r["reqId"] is UNDEF
    c.send({"cmd": "Ping", "reqId": UNDEF})           # the client sends undefined itself
    assert c.recv()["reqId"] is UNDEF
    c.send({"cmd": "Hello", "protocolVersion": 3})
    assert c.recv()["reqId"] is UNDEF


def test_nil_req_id_is_echoed_as_nil(bq):
    """B11 (fixed in issue 16): nil is echoed as nil, undefined as undefined, also when a nil
    `reqId` key sits inside the data or the command fails."""
    c = bq()
    c.send({"cmd": "Ping", "reqId": None})
    assert c.recv()["reqId"] is None
    c.send({"cmd": "Bogus", "reqId": None})
    assert c.recv() == {"ok": False, "error": "Unknown command: Bogus", "reqId": None}
    c.send({"cmd": "PUSH", "queue": qname(), "data": {"reqId": None}, "reqId": UNDEF})
    assert c.recv()["reqId"] is UNDEF
    c.send({"cmd": "PUSH", "queue": qname(), "data": {"reqId": "x"}, "reqId": None})
    r = c.recv()
    assert r["ok"] is True and r["reqId"] is None


# ====================================================================== pipelining
def test_six_pipelined_frames_answer_in_completion_order(bq):
    """Golden step 'Pipelined 6 in one write': the long-poll PULL, sent first, answers last."""
    c = bq()
    q, empty = qname(), qname("empty")
    c.send({"cmd": "PULL", "queue": empty, "timeout": 300, "reqId": "p1"},
           {"cmd": "Ping", "reqId": "p2"},
           {"cmd": "PUSH", "queue": q, "data": 1, "reqId": "p3"},
           {"cmd": "PUSH", "queue": q, "data": 2, "reqId": "p4"},
           {"cmd": "Bogus", "reqId": "p5"},
           {"cmd": "Stats", "reqId": "p6"})
    rs = c.recv_n(6, timeout=10)
    by = {r["reqId"]: r for r in rs}
    assert sorted(by) == ["p1", "p2", "p3", "p4", "p5", "p6"]
    assert rs[-1]["reqId"] == "p1"
    assert by["p1"] == {"ok": True, "job": None, "reqId": "p1"}
    assert by["p2"]["data"]["pong"] is True
    assert by["p3"]["ok"] is True and by["p4"]["ok"] is True and by["p3"]["id"] != by["p4"]["id"]
    assert by["p5"] == {"ok": False, "error": "Unknown command: Bogus", "reqId": "p5"}
    assert by["p6"]["ok"] is True and "stats" in by["p6"]
    # the two PUSHes ran in the order sent (FIFO in the queue)
    assert c.pull(q)["job"]["id"] == by["p3"]["id"]


def test_waiting_pull_is_answered_by_a_push_later_in_the_same_write(bq):
    c = bq()
    q = qname()
    c.send({"cmd": "PULL", "queue": q, "timeout": 5000, "reqId": "w"},
           {"cmd": "PUSH", "queue": q, "data": "x", "reqId": "p"})
    by = {r["reqId"]: r for r in c.recv_n(2, timeout=10)}
    assert by["w"]["job"]["id"] == by["p"]["id"] and by["w"]["job"]["data"] == "x"


def test_many_frames_in_one_write(bq):
    c = bq()
    q = qname()
    c.send(*[{"cmd": "PUSH", "queue": q, "data": i, "reqId": i} for i in range(200)])
    rs = c.recv_n(200)
    assert sorted(r["reqId"] for r in rs) == list(range(200)) and all(r["ok"] for r in rs)
    assert c.count(q) == 200
    got = [c.pull(q)["job"]["data"] for _ in range(200)]
    assert got == list(range(200))


def test_frame_split_byte_by_byte(bq):
    c = bq()
    q = qname()
    data = frame({"cmd": "PUSH", "queue": q, "data": {"k": "v" * 20}, "reqId": "bb"}) + \
        frame({"cmd": "Ping", "reqId": "pp"})
    for i in range(len(data)):
        c.send_raw(data[i:i + 1])
        if i % 16 == 0:
            time.sleep(0.001)          # let the segments reach the server apart
    rs = {r["reqId"]: r for r in c.recv_n(2)}
    assert rs["bb"]["ok"] is True and rs["pp"]["data"]["pong"] is True
    assert c.pull(q)["job"]["data"] == {"k": "v" * 20}


def test_frame_split_across_writes(bq):
    """Golden 'Frame split across 3 writes': inside the header, then inside the body."""
    c = bq()
    data = frame({"cmd": "Ping", "reqId": "split"})
    for part in (data[:2], data[2:9], data[9:]):
        c.send_raw(part)
        time.sleep(0.05)
    r = c.recv()
    assert r["ok"] is True and r["reqId"] == "split"
    # the tail of one frame and the head of the next in one write
    a, b = frame({"cmd": "Ping", "reqId": "a"}), frame({"cmd": "Ping", "reqId": "b"})
    c.send_raw(a[:5])
    time.sleep(0.05)
    c.send_raw(a[5:] + b[:3])
    time.sleep(0.05)
    c.send_raw(b[3:])
    assert sorted(r["reqId"] for r in c.recv_n(2)) == ["a", "b"]


def test_more_than_50_waiting_pulls_on_one_connection(bq):
    """50 commands of a connection wait at once; the 51st frame is read when a slot frees.
    Nothing is lost: 60 waiting PULLs and a Ping after them all answer once 60 jobs come."""
    c, pusher = bq(), bq()
    q = qname()
    c.send(*[{"cmd": "PULL", "queue": q, "timeout": 10000, "reqId": i} for i in range(60)],
           {"cmd": "Ping", "reqId": "ping"})
    assert c.quiet(0.3)                 # every PULL waits; the Ping is behind them
    for i in range(60):
        pusher.push(q, i)
    rs = c.recv_n(61, timeout=15)
    pulls = [r for r in rs if r["reqId"] != "ping"]
    assert sorted(r["reqId"] for r in pulls) == list(range(60))
    assert len({r["job"]["id"] for r in pulls}) == 60
    assert sorted(r["job"]["data"] for r in pulls) == list(range(60))
    assert [r for r in rs if r["reqId"] == "ping"][0]["data"]["pong"] is True
    assert pusher.counts(q)["active"] == 60 and pusher.count(q) == 0


# ============================================================================ auth
@pytest.fixture(scope="module")
def auth_server(tmp_path_factory):
    s = bq_server_start(tmp_path_factory.mktemp("bqauth"), token="s3cret")
    yield s
    s.stop()


def test_auth_required(auth_server):
    c = BQ(auth_server.bunqueue_port)
    try:
        q = qname()
        for cmd, f in (("Ping", {}), ("Hello", {"protocolVersion": 3}),
                       ("PUSH", {"queue": q, "data": 1}), ("Bogus", {})):
            assert c.call(cmd, **f) == {"ok": False, "error": "Not authenticated"}, cmd
        c.send({"cmd": "Ping"})
        assert c.recv() == {"ok": False, "error": "Not authenticated", "reqId": UNDEF}
        assert c.call("Auth", token="wrong") == {"ok": False, "error": "Invalid token"}
        assert c.call("Ping") == {"ok": False, "error": "Not authenticated"}
        assert c.call("Auth", token="s3cret") == {"ok": True, "id": UNDEF}
        assert c.call("PUSH", queue=q, data=1)["ok"] is True
        # a wrong token after success: refused, but the session stays authenticated
        assert c.call("Auth", token="wrong") == {"ok": False, "error": "Invalid token"}
        assert c.call("PUSH", queue=q, data=2)["ok"] is True
        assert c.count(q) == 2
    finally:
        c.close()


@pytest.mark.skipif(reference_mode(), reason="reference bug B1 (docs/bunqueue.md)")
def test_auth_without_token_is_invalid(auth_server):
    c = BQ(auth_server.bunqueue_port)
    try:
        assert c.call("Auth") == {"ok": False, "error": "Invalid token"}
        assert c.call("Auth", token=5) == {"ok": False, "error": "Invalid token"}
        assert c.call("Ping") == {"ok": False, "error": "Not authenticated"}
    finally:
        c.close()


def test_auth_is_per_connection(auth_server):
    a, b = BQ(auth_server.bunqueue_port), BQ(auth_server.bunqueue_port)
    try:
        assert a.call("Auth", token="s3cret")["ok"] is True
        assert b.call("Ping") == {"ok": False, "error": "Not authenticated"}
        assert a.call("Ping")["ok"] is True
    finally:
        a.close()
        b.close()


def test_unauthenticated_pipeline_creates_nothing(auth_server):
    c, admin = BQ(auth_server.bunqueue_port), BQ(auth_server.bunqueue_port)
    try:
        q = qname()
        c.send(*[{"cmd": "PUSH", "queue": q, "data": i, "reqId": i} for i in range(5)])
        assert all(r["error"] == "Not authenticated" for r in c.recv_n(5))
        admin.ok("Auth", token="s3cret")
        assert admin.count(q) == 0
    finally:
        c.close()
        admin.close()


# ====================================================================== rate limit
@pytest.fixture(scope="module")
def limited_server(tmp_path_factory):
    s = bq_server_start(tmp_path_factory.mktemp("bqrate"), rate_limit=5)
    yield s
    s.stop()


def test_rate_limit(limited_server):
    """rate_limit: 5 commands/s per connection: a burst of 10 in one write gets 5 answers and
    then 'Rate limit exceeded', with the reqId only when it is a string (golden notes)."""
    c = BQ(limited_server.bunqueue_port)
    try:
        rids = ["a", 1, "b", 2, "c", "d", 3, "e", 4, "f"]
        c.send(*[{"cmd": "Ping", "reqId": r} for r in rids])
        rs = c.recv_n(10)
        oks = [r for r in rs if r["ok"] is True]
        k = len(oks)
        assert k in (5, 6)       # 5 in the bucket (a 6th only if the burst took > 200 ms)
        assert sorted(map(str, (r["reqId"] for r in oks))) == sorted(map(str, rids[:k]))
        limited = [r for r in rs if r["ok"] is False]
        assert all(set(r) == {"ok", "error", "reqId"} for r in limited)
        assert all(r["error"] == "Rate limit exceeded" for r in limited)
        # a string reqId is echoed, any other is undefined
        assert sorted(r["reqId"] for r in limited if r["reqId"] is not UNDEF) == \
            sorted(x for x in rids[k:] if isinstance(x, str))
        assert sum(r["reqId"] is UNDEF for r in limited) == \
            sum(not isinstance(x, str) for x in rids[k:])
    finally:
        c.close()


def test_rate_limited_push_creates_nothing(limited_server):
    c = BQ(limited_server.bunqueue_port)
    other = BQ(limited_server.bunqueue_port)
    try:
        q = qname()
        c.send(*[{"cmd": "PUSH", "queue": q, "data": i, "reqId": f"r{i}"} for i in range(12)])
        rs = c.recv_n(12)
        accepted = [r for r in rs if r["ok"] is True]
        assert all(r["error"] == "Rate limit exceeded" for r in rs if r["ok"] is False)
        assert 5 <= len(accepted) < 12
        assert other.count(q) == len(accepted)
    finally:
        c.close()
        other.close()


def test_rate_limit_is_per_connection(limited_server):
    a, b = BQ(limited_server.bunqueue_port), BQ(limited_server.bunqueue_port)
    try:
        a.send(*[{"cmd": "Ping", "reqId": i} for i in range(8)])
        a.recv_n(8)
        assert b.call("Ping")["ok"] is True
    finally:
        a.close()
        b.close()


# =================================================================== hostile input
def test_oversized_header_gets_one_error_then_eof(bq):
    c = bq()
    c.send_raw(b"\x04\x00\x00\x01")
    assert c.recv() == {"ok": False, "error": TOO_LARGE.format(67108865), "reqId": UNDEF}
    c.expect_eof()


@pytest.mark.skipif(reference_mode(), reason="the reference closes before the PUSH's reply")
def test_oversized_header_after_a_good_frame(bq):
    c = bq()
    q = qname()
    c.send_raw(frame({"cmd": "PUSH", "queue": q, "data": 1, "reqId": "ok"}) +
               b"\xff\xff\xff\xff" + b"junk" * 10)
    rs = c.recv_n(2)
    assert rs[0]["reqId"] == "ok" and rs[0]["ok"] is True
    assert rs[1] == {"ok": False, "error": TOO_LARGE.format(0xFFFFFFFF), "reqId": UNDEF}
    c.expect_eof()
    assert bq().count(q) == 1                        # the good frame's job is there


def test_header_of_exactly_the_limit_is_accepted(bq):
    """A header of 64 MiB is within the limit: no error; the connection waits for the body.
    (Closing before the body arrives leaves nothing behind.)"""
    c = bq()
    c.send_raw((64 * 1024 * 1024).to_bytes(4, "big") + b"\x81")
    assert c.quiet(0.3)
    c.close()
    assert bq().call("Ping")["ok"] is True


#: (frame body, reply error) as the reference answers (golden steps 105-110).
BAD_BODIES = [
    (b"\xc1", "Invalid command"),
    (b"\xa5hello", "Invalid command"),
    (b"\x93\x01\x02\x03", "Invalid command"),
    (b"\x05", "Invalid command"),
    (b"\x80", "Invalid command"),
    (b"", "Invalid command format"),
    (b'{"cmd":"Ping"}', "Invalid command format"),
    (b"\x82\xa3cmd", "Invalid command format"),
    pytest.param(b"\xc0", "Invalid command format"),
    pytest.param(b"\xd4\x00\x00", "Invalid command format"),
]


@pytest.mark.parametrize("body,error", BAD_BODIES,
                         ids=lambda v: v.hex() if isinstance(v, bytes) else None)
def test_bad_frame_bodies_get_an_error_and_the_connection_lives(bq, body, error):
    c = bq()
    c.send_raw(frame_raw(body))
    assert c.recv() == {"ok": False, "error": error, "reqId": UNDEF}
    assert c.call("Ping")["ok"] is True


def test_truncated_and_padded_push_write_nothing(bq):
    c = bq()
    q = qname()
    body = pack({"cmd": "PUSH", "queue": q, "data": {"a": 1}, "reqId": "x"})
    for bad in (body[:-3], body[:len(body) // 2], body + b"\xc0", body + b"\x00junk"):
        c.send_raw(frame_raw(bad))
        assert c.recv() == {"ok": False, "error": "Invalid command format", "reqId": UNDEF}
    assert c.count(q) == 0
    assert c.call("PUSH", queue=q, data=1)["ok"] is True
    assert c.count(q) == 1


def test_random_garbage_frames(bq):
    rnd = random.Random(4242)
    c = bq()
    q = qname()
    c.push(q, "keep")
    for _ in range(150):
        body = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 60)))
        c.send_raw(frame_raw(body))
        r = c.recv()
        assert isinstance(r, dict) and "ok" in r, (body, r)
    assert c.call("Ping")["ok"] is True
    assert c.count(q) == 1


def test_garbage_between_good_frames_in_one_write(bq):
    c = bq()
    q = qname()
    c.send_raw(frame({"cmd": "PUSH", "queue": q, "data": 1, "reqId": 1}) +
               frame_raw(b"\xc1") + frame_raw(b"") +
               frame({"cmd": "PUSH", "queue": q, "data": 2, "reqId": 2}) +
               frame_raw(b"\x93\x01\x02\x03"))
    rs = c.recv_n(5)
    assert sorted(r["reqId"] for r in rs if r["ok"]) == [1, 2]
    assert sorted(r["error"] for r in rs if not r["ok"]) == \
        ["Invalid command", "Invalid command", "Invalid command format"]
    assert c.count(q) == 2


def test_connection_closed_mid_frame_writes_nothing(bq):
    c, other = bq(), bq()
    q = qname()
    data = frame({"cmd": "PUSH", "queue": q, "data": "x" * 1000, "reqId": "half"})
    c.send_raw(data[:len(data) // 2])
    time.sleep(0.05)
    c.close()
    time.sleep(0.1)
    assert other.count(q) == 0
    assert other.call("Ping")["ok"] is True


def test_wrong_field_types_answer_errors(bq):
    """Fields of unexpected types answer an error (never a dropped connection); nothing is
    half-written."""
    c = bq()
    q = qname()
    id = c.push(q, 1)
    odd = [
        {"cmd": "ACK", "id": {"x": 1}},
        {"cmd": "ACKB", "ids": [1, None, {"a": 1}]},
        {"cmd": "FAIL", "id": [1]},
        {"cmd": "GetJob", "id": [1]},
        {"cmd": "PUSH", "queue": q, "data": 1, "tags": 5, "dependsOn": "x"},
        {"cmd": "PUSHB", "queue": q, "jobs": [{"data": 1, "dependsOn": 7}]},
        {"cmd": "PULLB", "queue": q, "count": 2.5},
        {"cmd": "Update", "id": id},
        {"cmd": "JobHeartbeatB", "ids": 5},
        {"cmd": "ChangePriority", "id": id, "priority": None},
        {"cmd": "Clean", "queue": q, "grace": "x"},
        {"cmd": "AddLog", "id": id, "message": {"m": 1}},
    ]
    for i, f in enumerate(odd):
        c.send(dict(f, reqId=f"o{i}"))
        r = c.recv_reply(f"o{i}")
        assert r.get("ok") in (True, False), (f, r)
    assert c.call("Ping")["ok"] is True
    assert c.state(id) in ("waiting", "active")
