"""The commit pipeline (gateway/writer.py, gateway/runner.py; issue 14): with a writer thread
(PostgreSQL's default, `database.writer_thread: on` for SQLite) the event loop keeps serving
while a batch commits; on the loop (SQLite's default) durability and reply order still hold.

A real server in this process (tests/inproc.py) on a real SQLite file or PostgreSQL; the
writer's test hook (`Writer.before_commit`, run on the writer thread before each batch is
written) holds a commit open until the test lets it go, so "while a batch commits" is a state
the test controls, not a race it hopes to win. Real sockets on 127.0.0.1.
"""
from __future__ import annotations

import socket
import threading

import pytest

from .inproc import InProcServer
from .support import Raw


class Gate:
    """A before_commit hook: records each batch's new-job count and blocks the writer thread
    while closed (at most 20 s, then the commit fails and the test with it)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()
        self.sizes: list[int] = []

    def __call__(self, batch) -> None:
        self.sizes.append(len(batch.inserts) + len(batch.inserts_full))
        self.entered.set()
        if not self.opened.wait(20):
            raise RuntimeError("the test never opened the gate")


@pytest.fixture(params=["uvloop", "asyncio"])
def loop(request):
    """Each event loop the server runs on: uvloop (installed here, as in production), then the
    standard asyncio loop (what runs where uvloop is not installed)."""
    if request.param == "uvloop":
        pytest.importorskip("uvloop")
    return request.param


@pytest.fixture
def gated(db_url, loop):
    """A server whose commits the test holds open (Gate). SQLite commits on the loop by
    default (database.writer_thread auto); here both databases use the writer thread."""
    srv = InProcServer(db_url, dialects=("beanstalk", "workq"), uvloop=loop == "uvloop",
                       writer_thread="on")
    gate = Gate()
    srv.runtime.writer.before_commit = gate
    yield srv, gate
    gate.opened.set()
    srv.stop()


def nothing_to_read(r: Raw) -> bool:
    """True when no reply byte has arrived for `r` (checked without waiting)."""
    if r.buf:
        return False
    r.sock.setblocking(False)
    try:
        r.sock.recv(1, socket.MSG_PEEK)
        return False
    except BlockingIOError:
        return True
    finally:
        r.sock.settimeout(10)


def stats(r: Raw, cmd: bytes = b"stats\r\n") -> dict:
    rep = r.cmd(cmd)
    assert rep.startswith(b"OK "), rep
    body = rep.split(b"\r\n", 1)[1]
    return dict(line.split(": ", 1) for line in body.decode().splitlines()[1:] if ": " in line)


def until_ready(r: Raw, n: int) -> None:
    """Ask `stats` until the server holds `n` ready jobs (the puts were processed)."""
    for _ in range(2000):
        if int(stats(r)["current-jobs-ready"]) == n:
            return
    raise AssertionError(f"the server never held {n} ready jobs")


def test_slow_commit_does_not_stop_other_connections(gated):
    """While a batch commits, other connections' reads and non-mutating replies go on (every
    dialect shares the runner: beanstalk and workq here); the put waits for its commit."""
    srv, gate = gated
    a = Raw(srv.ports["beanstalk"], timeout=10)
    b = Raw(srv.ports["beanstalk"], timeout=10)
    w = socket.create_connection(("127.0.0.1", srv.ports["workq"]), timeout=10)
    try:
        a.send(b"put 0 0 60 1\r\na\r\n")
        assert gate.entered.wait(10), "the put never reached the writer"
        # the commit is held open: the loop still answers everyone else
        assert b.cmd(b"list-tubes\r\n") == b"OK 14\r\n---\n- default\n\r\n"
        assert int(stats(b, b"stats-tube default\r\n")["current-jobs-ready"]) == 1
        assert b.cmd(b"peek-ready\r\n") == b"FOUND 1 1\r\na\r\n"
        w.sendall(b"inspect queues 0 10\r\n")
        assert w.recv(100).startswith(b"+OK")
        assert nothing_to_read(a), "INSERTED went out before its batch committed"
        gate.opened.set()
        assert a.reply() == b"INSERTED 1\r\n"
    finally:
        a.close()
        b.close()
        w.close()


def test_replies_stay_in_order_while_their_batch_commits(gated):
    """A connection's later, non-durable replies wait behind its durable one."""
    srv, gate = gated
    a = Raw(srv.ports["beanstalk"], timeout=10)
    b = Raw(srv.ports["beanstalk"], timeout=10)
    c = Raw(srv.ports["beanstalk"], timeout=10)
    try:
        a.send(b"put 0 0 60 1\r\na\r\n")          # batch 1, held open by the gate
        assert gate.entered.wait(10)
        b.send(b"put 0 0 60 1\r\nb\r\nlist-tubes\r\nput 0 0 60 1\r\nc\r\nstats-job 1\r\n")
        until_ready(c, 3)                          # b's commands all ran
        assert nothing_to_read(b), "a reply overtook the put it follows"
        gate.opened.set()
        assert a.reply() == b"INSERTED 1\r\n"
        assert b.reply() == b"INSERTED 2\r\n"
        assert b.reply() == b"OK 14\r\n---\n- default\n\r\n"
        assert b.reply() == b"INSERTED 3\r\n"
        assert b.reply().startswith(b"OK ")
        assert gate.sizes[0] == 1 and sum(gate.sizes) == 3
    finally:
        for r in (a, b, c):
            r.close()


def test_group_commit_gathers_across_connections(gated):
    """32 unpipelined producers whose puts arrive while a batch commits: the next batch holds
    all 32 (one commit, not 32), and each producer gets its INSERTED after it."""
    srv, gate = gated
    first = Raw(srv.ports["beanstalk"], timeout=10)
    watcher = Raw(srv.ports["beanstalk"], timeout=10)
    producers = [Raw(srv.ports["beanstalk"], timeout=10) for _ in range(32)]
    try:
        first.send(b"put 0 0 60 1\r\n0\r\n")
        assert gate.entered.wait(10)
        for i, p in enumerate(producers):
            p.send(b"put 0 0 60 2\r\n%02d\r\n" % i)
        until_ready(watcher, 33)
        gate.opened.set()
        assert first.reply() == b"INSERTED 1\r\n"
        ids = sorted(int(p.reply().split()[1]) for p in producers)
        assert ids == list(range(2, 34))
        assert gate.sizes == [1, 32]
    finally:
        for r in (first, watcher, *producers):
            r.close()


def test_slow_reader_is_bounded_and_others_are_served(tmp_path, loop):
    """A client that pipelines 4,000 `peek`s of a 20 KB job (80 MB of replies) and does not
    read: the server stops running its commands once its socket is full (its write buffer
    stays small), serves another client meanwhile, and delivers every reply, in order, once the
    reader reads."""
    srv = InProcServer(f"sqlite:///{tmp_path}/jobgate.db", dialects=("beanstalk",),
                       uvloop=loop == "uvloop")
    body = bytes(range(256)) * 80
    n = 4000
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect(("127.0.0.1", srv.ports["beanstalk"]))
    slow.settimeout(30)
    other = Raw(srv.ports["beanstalk"], timeout=10)
    try:
        assert other.cmd(b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body)) == b"INSERTED 1\r\n"
        sender = threading.Thread(target=slow.sendall, args=(b"peek 1\r\n" * n,), daemon=True)
        sender.start()
        sender.join(5)   # all 32 KB fit in the kernel's buffers even when nothing is read

        def buffered():
            return max(c.t.get_write_buffer_size() for c in srv.runtime.live)
        # the loop is free: another client is served, and the slow one's replies wait in a
        # bounded buffer, not in the process (80 MB if every peek had run)
        for _ in range(3):
            assert other.cmd(b"stats-job 1\r\n").startswith(b"OK ")
            assert srv.call(buffered) < 4 << 20
        want = b"FOUND 1 %d\r\n%s\r\n" % (len(body), body)
        got = bytearray()
        while len(got) < n * len(want):
            chunk = slow.recv(1 << 20)
            assert chunk, "the server closed the slow reader"
            got += chunk
        assert bytes(got) == want * n
    finally:
        slow.close()
        other.close()
        srv.stop()


@pytest.mark.parametrize("writer_thread", ["on", "off"])
def test_order_and_group_commit_without_a_gate(tmp_path, writer_thread):
    """Both writer modes: 32 producers pipelining put + list-tubes get INSERTED then OK, in
    order, with ids that are all distinct, and every job is stored (a restart finds them)."""
    url = f"sqlite:///{tmp_path}/jobgate.db"
    srv = InProcServer(url, dialects=("beanstalk",), writer_thread=writer_thread)
    assert srv.runtime.writer.thread is (writer_thread == "on")
    conns = [Raw(srv.ports["beanstalk"], timeout=10) for _ in range(32)]
    try:
        for _ in range(5):
            for i, c in enumerate(conns):
                c.send(b"put 0 0 60 2\r\n%02d\r\nlist-tubes\r\n" % i)
            ids = []
            for c in conns:
                rep = c.reply()
                assert rep.startswith(b"INSERTED "), rep
                ids.append(int(rep.split()[1]))
                assert c.reply() == b"OK 14\r\n---\n- default\n\r\n"
            assert len(set(ids)) == 32
    finally:
        for c in conns:
            c.close()
        srv.stop()
    again = InProcServer(url, dialects=("beanstalk",))
    try:
        r = Raw(again.ports["beanstalk"], timeout=10)
        assert int(stats(r)["current-jobs-ready"]) == 160
        r.close()
    finally:
        again.stop()
