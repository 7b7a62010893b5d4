"""Connection-level resource limits (issue 15 item 2; gateway/limits.py, gateway/accept.py,
docs/operations.md "Resource limits"): a server with fewer descriptors than clients stays up and
serves later clients; accept errors back off and recover; idle, half-sent and unauthenticated
connections are closed by the sweep; the server-wide budget of buffered partial input pauses the
big senders and bounds memory.

Timeouts run on the in-process server's ManualClock: the test moves the clock and runs the sweep
(`limits.sweep()`) on the server's thread, so nothing sleeps for a timeout. The descriptor and
memory tests use real server subprocesses under `prlimit` and read /proc.
"""
from __future__ import annotations

import os
import socket
import subprocess
import threading
import time

import pytest

from .bunqueue_support import BQ, frame
from .inproc import InProcServer
from .server_support import HOST, no_reply, read_eof, send_unfinished, serve_argv, wait_until
from .support import Raw, free_port, wait_serving
from .workq_support import WorkqRaw

PING = {"cmd": "Ping", "reqId": "p"}


def _config(tmp_path, ports: dict, extra: str = "", durability: str = "commit") -> str:
    lst = "".join(f"  {d}: {{host: 127.0.0.1, port: {p}}}\n" for d, p in ports.items())
    p = tmp_path / "jobgate.yaml"
    p.write_text(f"listeners:\n{lst}database: {{url: 'sqlite:///{tmp_path}/j.db'}}\n"
                 f"durability: {durability}\nlog: {{level: info}}\n{extra}")
    return str(p)


def _every_dialect_answers(ports: dict) -> None:
    b = Raw(ports["beanstalk"])
    assert b.cmd(b"list-tube-used\r\n") == b"USING default\r\n"
    b.close()
    w = WorkqRaw(ports["workq"])
    assert w.cmd(b"inspect server\r\n").startswith(b"+OK")
    w.sock.close()
    c = BQ(ports["bunqueue"])
    assert c.call("Ping")["ok"] is True
    c.sock.close()


def _ports() -> dict:
    return {"beanstalk": free_port(), "workq": free_port(), "bunqueue": free_port()}


def _log(p) -> str:
    return p.stop()[2].decode()


# ======================================================================= descriptors

def test_more_clients_than_descriptors_the_server_stays_up_and_serves_later_clients(
        procs, tmp_path):
    ports = _ports()
    p = procs(["prlimit", "--nofile=128:128",
               *serve_argv("--config", _config(tmp_path, ports))])
    wait_serving(ports["beanstalk"], p.proc)
    wait_until(lambda: _current(ports) == 0, what="probes gone")
    clients = []
    for _ in range(150):      # more clients than the process has descriptors
        s = socket.create_connection((HOST, ports["beanstalk"]), timeout=5)
        s.sendall(b"list-tube-used\r\n")
        clients.append(s)
    served = refused = 0
    for s in clients:
        d = read_until_or_eof(s, b"\r\n")
        if d == b"USING default\r\n":
            served += 1
        else:
            assert d == b"", d            # refused: closed at accept (beanstalkd has no reply)
            refused += 1
    # max_connections (10000) was capped at 128 - 32 descriptors of headroom
    assert served == 96 and refused == 54
    assert p.proc.poll() is None
    for s in clients:
        s.close()
    wait_until(lambda: _current(ports) == 0, what="clients gone")
    _every_dialect_answers(ports)         # later clients are served, on every dialect
    log = _log(p)
    assert '"max_connections lowered to fit the open-files limit"' in log
    assert '"effective": 96' in log and '"nofile": 128' in log
    assert log.count("connection limit reached") == 1       # once per episode
    assert '"accepting connections again", "refused": 54' in log


def test_accept_errors_back_off_and_the_waiting_clients_are_served_later(procs, tmp_path):
    ports = _ports()
    p = procs(["prlimit", "--nofile=256:256",
               *serve_argv("--config", _config(tmp_path, ports))])
    wait_serving(ports["beanstalk"], p.proc)
    assert len(os.listdir(f"/proc/{p.proc.pid}/fd")) > 12
    # lower the soft limit below what the process holds: every accept() now fails (EMFILE)
    subprocess.run(["prlimit", "--pid", str(p.proc.pid), "--nofile=10:256"], check=True)
    b = Raw(ports["beanstalk"])
    b.send(b"list-tube-used\r\n")
    w = WorkqRaw(ports["workq"])
    w.send(b"inspect server\r\n")
    q = BQ(ports["bunqueue"])
    q.send(PING)
    time.sleep(1.5)                       # several back-off rounds (50 ms doubling to 1 s)
    assert no_reply(b) and no_reply(w) and p.proc.poll() is None
    subprocess.run(["prlimit", "--pid", str(p.proc.pid), "--nofile=256:256"], check=True)
    # the clients waited in the listen backlog: served once descriptors are free again
    assert b.reply() == b"USING default\r\n"
    assert w.reply().startswith(b"+OK")
    assert q.recv(timeout=5)["ok"] is True
    _every_dialect_answers(ports)
    b.close()
    w.sock.close()
    q.sock.close()
    log = _log(p)
    for d in ports:
        listener = f'"listener": "{d} 127.0.0.1:{ports[d]}"'
        assert log.count(f'"accept failed, backing off", {listener}, "error": "EMFILE"') == 1
        assert f'"accepting again", {listener}' in log


def _current(ports) -> int:
    """Other beanstalk connections the server holds."""
    r = Raw(ports["beanstalk"])
    r.send(b"stats\r\n")
    body = r.reply().decode()
    r.close()
    return int(body.split("current-connections: ")[1].split("\n")[0]) - 1


def read_until_or_eof(s: socket.socket, end: bytes) -> bytes:
    s.settimeout(5)
    d = b""
    while not d.endswith(end):
        try:
            chunk = s.recv(4096)
        except ConnectionResetError:
            return d
        if not chunk:
            return d
        d += chunk
    return d


# ========================================================================== timeouts

@pytest.fixture
def inproc():
    made = []

    def start(**config) -> InProcServer:
        s = InProcServer(None, **config)
        made.append(s)
        return s
    yield start
    for s in made:
        s.stop()


def _sweep(s: InProcServer, after_ms: int) -> None:
    s.advance(after_ms)
    s.call(s.runtime.limits.sweep)


def _is_closed(sock: socket.socket) -> bool:
    return read_eof(sock, timeout=5) == b""


def test_idle_timeout_closes_an_idle_connection_and_leaves_beanstalk_alone(inproc):
    s = inproc(workq={"idle_timeout_s": 5})
    bean = Raw(s.ports["beanstalk"])               # idle timeout off by default (beanstalkd)
    idle = WorkqRaw(s.ports["workq"])
    busy = WorkqRaw(s.ports["workq"])
    wait_until(lambda: s.call(lambda: s.runtime.connections) == 3, what="accepted")
    _sweep(s, 3000)
    assert busy.cmd(b"inspect server\r\n").startswith(b"+OK")
    _sweep(s, 1000)                                # the sweep sees busy's traffic at 4 s
    _sweep(s, 1500)                                # 5.5 s: idle's 5 s are over, busy's not
    assert _is_closed(idle.sock)
    assert busy.cmd(b"inspect server\r\n").startswith(b"+OK")
    busy.sock.close()
    _sweep(s, 3_600_000)                           # an hour later
    assert bean.cmd(b"list-tube-used\r\n") == b"USING default\r\n"
    assert s.call(lambda: s.runtime.limits.closed["idle"]) == 1
    bean.close()


def test_half_sent_line_and_frame_are_closed_complete_traffic_stays(inproc):
    s = inproc(beanstalk={"half_sent_timeout_s": 2}, bunqueue={"half_sent_timeout_s": 2})
    line = Raw(s.ports["beanstalk"])
    body = Raw(s.ports["beanstalk"])
    good = Raw(s.ports["beanstalk"])
    bq = BQ(s.ports["bunqueue"])
    line.send(b"list-tube")                        # half a command line
    body.send(b"put 0 0 10 5\r\nhel")              # a put whose body is half sent
    bq.send_raw(frame(PING)[:7])                   # a frame cut after 3 bytes of its body
    held = 9 + 3 + 7                               # the frame's 4-byte header is held too
    wait_until(lambda: s.call(lambda: s.runtime.limits.buffered) == held, what="read")
    _sweep(s, 0)
    _sweep(s, 1000)
    body.send(b"l")                                # a slowloris trickle is no progress
    wait_until(lambda: s.call(lambda: s.runtime.limits.buffered) == held + 1, what="read")
    assert good.cmd(b"list-tube-used\r\n") == b"USING default\r\n"
    _sweep(s, 1000)
    for c in (line.sock, body.sock, bq.sock):
        assert _is_closed(c)
    assert s.call(lambda: s.runtime.limits.closed["half-sent"]) == 3
    assert s.call(lambda: s.runtime.limits.buffered) == 0
    _sweep(s, 60_000)
    assert good.cmd(b"list-tube-used\r\n") == b"USING default\r\n"
    fresh = BQ(s.ports["bunqueue"])                # bunqueue still answers
    assert fresh.call("Ping")["ok"] is True
    fresh.sock.close()
    good.close()


def test_a_connection_that_does_not_authenticate_is_closed_after_auth_timeout(inproc):
    s = inproc(dialects=("bunqueue",),
               bunqueue={"auth_tokens": ["sesame"], "auth_timeout_s": 3})
    anon = BQ(s.ports["bunqueue"])
    authed = BQ(s.ports["bunqueue"])
    assert authed.call("Auth", token="sesame")["ok"] is True
    assert anon.call("Ping") == {"ok": False, "error": "Not authenticated"}   # traffic, no Auth
    _sweep(s, 2000)
    assert authed.call("Ping")["ok"] is True
    _sweep(s, 1000)
    assert _is_closed(anon.sock)
    assert authed.call("Ping")["ok"] is True
    assert s.call(lambda: s.runtime.limits.closed["auth"]) == 1
    authed.sock.close()


# ===================================================================== buffer budget

def test_buffer_budget_pauses_big_senders_and_every_frame_completes(inproc):
    s = inproc(dialects=("bunqueue",), max_buffered_bytes=1 << 20)
    lim = s.runtime.limits
    size = 4 << 20
    big = frame({"cmd": "Ping", "reqId": "big", "pad": b"x" * size})
    cut = 3 << 20
    conns = [BQ(s.ports["bunqueue"], timeout=30) for _ in range(3)]
    go = threading.Event()
    replies = []

    def client(c):
        c.send_raw(big[:cut])                      # blocks while the server does not read
        go.wait(30)
        c.send_raw(big[cut:])
        replies.append(c.recv(timeout=30))
    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in conns]
    for t in threads:
        t.start()
    # one connection may finish its command past the budget; the others are paused
    wait_until(lambda: s.call(lambda: lim.exempt is not None and lim.exempt.partial == cut
                              and len(lim.paused) == 2), what="two paused")
    held = s.call(lambda: lim.buffered)
    assert held < 2 * cut          # the budget (1 MiB) + the one big frame + a read or two,
                                   # not the 3 x 3 MiB the clients sent
    go.set()
    for t in threads:
        t.join(30)
    assert [r["ok"] for r in replies] == [True] * 3 and {r["reqId"] for r in replies} == {"big"}
    assert s.call(lambda: (lim.buffered, lim.paused, lim.exempt)) == (0, [], None)
    for c in conns:
        c.sock.close()


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_five_unfinished_62_mib_frames_do_not_grow_rss_by_their_size(procs, tmp_path):
    """The issue's measurement: 5 bunqueue connections each sending 62 MiB of an unfinished
    frame grew RSS by 417 MB. With a 32 MiB budget the server holds the budget plus one frame."""
    ports = {"bunqueue": free_port()}
    p = procs(serve_argv("--config", _config(tmp_path, ports, durability="memory",
                                             extra="limits: {max_buffered_bytes: 33554432}\n")))
    p.wait_tcp(ports["bunqueue"])
    probe = BQ(ports["bunqueue"])
    assert probe.call("Ping")["ok"] is True
    before = _rss_kb(p.proc.pid)
    size = 62 << 20
    socks = []
    for _ in range(5):
        c = socket.create_connection((HOST, ports["bunqueue"]))
        c.setblocking(False)
        c.send(size.to_bytes(4, "big"))             # the header: a 62 MiB frame follows
        socks.append(c)
    sent = send_unfinished(socks, size)             # never its last byte: unfinished
    time.sleep(0.5)
    grown_mb = (_rss_kb(p.proc.pid) - before) / 1024
    assert p.proc.poll() is None
    assert sent > 90 * 2**20                       # the clients did send past the budget
    assert grown_mb < 200, grown_mb                # 32 MiB budget + one 62 MiB frame + slack
    assert probe.call("Ping")["ok"] is True        # the server still answers
    for c in socks:
        c.close()
    probe.sock.close()


# ============================================================================ config

def test_limit_keys_are_read_from_their_sections_and_validated():
    from gateway.config import ConfigError, from_dict
    c = from_dict({"limits": {"max_buffered_bytes": 1 << 24,
                              "beanstalk": {"idle_timeout_s": 600},
                              "workq": {"half_sent_timeout_s": 5}},
                   "bunqueue": {"idle_timeout_s": 30}})
    assert c.max_buffered_bytes == 1 << 24
    assert c.option("beanstalk", "idle_timeout_s") == 600
    assert c.option("beanstalk", "half_sent_timeout_s") == 30
    assert c.option("workq", "half_sent_timeout_s") == 5
    assert c.option("workq", "idle_timeout_s") == 0
    assert (c.option("bunqueue", "idle_timeout_s"), c.option("bunqueue", "half_sent_timeout_s")) \
        == (30, 60)
    for raw, key in (({"limits": {"max_buffered_bytes": 10}}, "limits.max_buffered_bytes"),
                     ({"limits": {"workq": {"idle_timeout_s": -1}}}, "limits.workq.idle_timeout_s"),
                     ({"bunqueue": {"half_sent_timeout_s": "x"}}, "bunqueue.half_sent_timeout_s")):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            from_dict(raw)
