"""Helpers of the glide-mq tests (test_glidemq_*.py): a raw RESP connection, glide-mq's FCALL
argument lists, a jobgate server subprocess with a glidemq listener, and a logging TCP proxy.

- `RespConn(port)`: a blocking socket speaking RESP2 (or RESP3 after HELLO 3); `call(*args)`
  sends one command as an array of bulk strings and returns the decoded reply (hiredis:
  bulk -> bytes, error -> hiredis.ReplyError instance, not raised); `send_raw`, `reply`,
  `replies_until_close` for hostile input.
- `add_job_args(...)` / `job_keys(q)`: glidemq_addJob's 4 keys and 17 (seed, v41) or 18 (v93,
  with lifo) arguments as the wire-protocol spec lists them ("FCALL glidemq_addJob").
- `GlideServer`: `jobgate serve` with beanstalk + glidemq listeners (and bunqueue / workq on
  request), stdout/stderr in files so a test can read the log while it runs (`log()`).
- `LogProxy`: forwards 127.0.0.1:`port` to a server and keeps every chunk both ways (to see
  exactly what a client library sends, e.g. valkey-glide's handshake).
- `LIBRARY_STANDIN`: our own stand-in text for `FUNCTION LOAD` (glide-mq-wire-protocol.txt
  "Prerequisites", Option B): jobgate accepts a `#!lua name=glidemq` library and never runs
  it (protocols/resp/functions.py). It is not glide-mq's library (never commit that).
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import hiredis

from .support import ROOT, free_port, stop_process, wait_port, wait_serving

#: A stand-in for glide-mq's library text: the metadata line jobgate checks, then our own Lua.
LIBRARY_STANDIN = (
    "#!lua name=glidemq\n"
    "-- jobgate test stand-in: jobgate answers glidemq_* natively and never runs this text\n"
    "redis.register_function('glidemq_version', function(keys, args) return '93' end)\n")


def job_keys(q: str, prefix: str = "glide") -> list[str]:
    """addJob's 4 keys for queue `q`: id, stream, scheduled, events."""
    p = f"{prefix}:{{{q}}}"
    return [f"{p}:id", f"{p}:stream", f"{p}:scheduled", f"{p}:events"]


def dedup_keys(q: str, prefix: str = "glide") -> list[str]:
    """glidemq_dedup's 5 keys: dedup, then addJob's 4."""
    return [f"{prefix}:{{{q}}}:dedup"] + job_keys(q, prefix)


def meta_keys(q: str, prefix: str = "glide") -> list[str]:
    """glidemq_pause / glidemq_resume's 2 keys: meta, events."""
    p = f"{prefix}:{{{q}}}"
    return [f"{p}:meta", f"{p}:events"]


def now_ms() -> int:
    """The wall clock in ms (a producer's `timestamp` argument)."""
    return int(time.time() * 1000)


def add_job_args(name: str = "job", data: str | bytes = "{}", opts: str = "{}",
                 ts: int | None = None, delay: int = 0, priority: int = 0,
                 parent_id: str = "", max_attempts: int = 0, ordering_key: str = "",
                 cost: int = 0, ttl: int = 0, custom_id: str = "",
                 lifo: bool | None = None) -> list:
    """addJob's arguments in the spec's order (17; an 18th, v93's lifo "0"/"1", when `lifo`
    is not None). `ts`: the producer's timestamp in ms (default: now)."""
    a = [name, data, opts, str(now_ms() if ts is None else ts), str(delay), str(priority),
         parent_id, str(max_attempts), ordering_key, "0", "0", "0", "0", "0", str(cost),
         str(ttl), custom_id]
    if lifo is not None:
        a.append("1" if lifo else "0")
    return a


def _b(x) -> bytes:
    if isinstance(x, bytes):
        return x
    if isinstance(x, int):
        return str(x).encode()
    return x.encode()


def command(*args) -> bytes:
    """One command as a RESP array of bulk strings (str, bytes or int arguments)."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = _b(a)
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class RespConn:
    """A raw RESP connection (see the module docstring). `timeout`: socket timeout in s."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 5.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.reader = hiredis.Reader()
        self.raw = b""          # every byte received, for failure messages

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, *commands) -> None:
        """Write several commands (each a list of arguments) in one write (a pipeline)."""
        self.sock.sendall(b"".join(command(*c) for c in commands))

    def reply(self, timeout: float | None = None):
        """The next reply, decoded; EOFError when the server closed first."""
        while True:
            r = self.reader.gets()
            if r is not False:
                return r
            self.sock.settimeout(self.timeout if timeout is None else timeout)
            d = self.sock.recv(1 << 20)
            if not d:
                raise EOFError(f"connection closed by the server (got {self.raw[-200:]!r})")
            self.raw += d
            self.reader.feed(d)

    def call(self, *args):
        """Send one command, return its reply."""
        self.send(args)
        return self.reply()

    def fcall(self, fn: str, keys: list, args: list):
        """FCALL `fn` with `keys` and `args`; its reply."""
        return self.call("FCALL", fn, len(keys), *keys, *args)

    def add_job(self, q: str, *args, **kw):
        """FCALL glidemq_addJob on queue `q` with add_job_args(*args, **kw); the reply."""
        return self.fcall("glidemq_addJob", job_keys(q), add_job_args(*args, **kw))

    def read_until_close(self, timeout: float = 5.0) -> tuple[bytes, bool]:
        """Read until the server closes or `timeout` s pass without a byte: (what arrived,
        closed?). Resets count as closed."""
        got = b""
        self.sock.settimeout(timeout)
        try:
            while True:
                d = self.sock.recv(1 << 20)
                if not d:
                    return got, True
                got += d
        except (ConnectionResetError, BrokenPipeError):
            return got, True
        except (socket.timeout, TimeoutError):
            return got, False
        finally:
            self.sock.settimeout(self.timeout)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def load_library(conn: RespConn) -> None:
    """FUNCTION LOAD REPLACE the stand-in library (Option B); asserts the bulk "glidemq"."""
    r = conn.call("FUNCTION", "LOAD", "REPLACE", LIBRARY_STANDIN)
    assert r == b"glidemq", r


def decode_all(data: bytes) -> list:
    """Every complete RESP reply in `data` (hiredis; errors as ReplyError values). Raises
    hiredis.ProtocolError when `data` is no RESP, AssertionError when it ends mid-reply."""
    r = hiredis.Reader()
    r.feed(data)
    out = []
    while True:
        x = r.gets()
        if x is False:
            break
        out.append(x)
    assert not r.has_data(), f"ends inside a reply: {data[-80:]!r}"
    return out


class GlideServer:
    """`jobgate serve` (subprocess) with beanstalk and glidemq listeners on free ports, plus
    bunqueue / workq when asked; `url` None means durability memory. `config`: YAML text of
    a config file (limits...). stdout / stderr go to files in `logdir`; `log()` reads stderr.

    Attributes: port (beanstalk), glide_port, bunqueue_port, workq_port, proc, url.
    """

    def __init__(self, url: str | None, logdir, *, bunqueue: bool = False,
                 workq: bool = False, config: str | None = None,
                 durability: str = "commit") -> None:
        self.url = url
        self.port = free_port()
        self.glide_port = free_port()
        self.bunqueue_port = free_port() if bunqueue else None
        self.workq_port = free_port() if workq else None
        args = [sys.executable, "-m", "gateway.cli", "serve",
                "--listen", f"beanstalk=127.0.0.1:{self.port}",
                "--listen", f"glidemq=127.0.0.1:{self.glide_port}",
                "--durability", durability if url else "memory", "--log-level", "warning"]
        if bunqueue:
            args += ["--listen", f"bunqueue=127.0.0.1:{self.bunqueue_port}"]
        if workq:
            args += ["--listen", f"workq=127.0.0.1:{self.workq_port}"]
        if url:
            args += ["--database", url]
        os.makedirs(str(logdir), exist_ok=True)
        tag = f"jobgate-{self.glide_port}"
        if config is not None:
            cfg = os.path.join(str(logdir), f"{tag}.yaml")
            with open(cfg, "w") as f:
                f.write(config)
            args += ["--config", cfg]
        self.err_path = os.path.join(str(logdir), f"{tag}.err")
        self._out = open(os.path.join(str(logdir), f"{tag}.out"), "wb")
        self._err = open(self.err_path, "wb")
        self.proc = subprocess.Popen(args, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT),
                                     stdout=self._out, stderr=self._err)
        try:
            wait_serving(self.port, self.proc)
            wait_port(self.glide_port, self.proc)
            for p in (self.bunqueue_port, self.workq_port):
                if p:
                    wait_port(p, self.proc)
        except RuntimeError:
            self.stop()
            raise RuntimeError(f"server did not start: {self.log()}")

    def log(self) -> str:
        """What the server wrote to stderr so far."""
        with open(self.err_path, "rb") as f:
            return f.read().decode(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss_kb(self) -> int:
        """The server process's resident set size (KiB, /proc)."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def conn(self, timeout: float = 5.0) -> RespConn:
        return RespConn(self.glide_port, timeout=timeout)

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM, wait (SIGKILL after `timeout`)."""
        stop_process(self.proc, timeout)
        self._close_files()

    def kill(self) -> None:
        """SIGKILL now and reap."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._close_files()

    def _close_files(self) -> None:
        for f in (self._out, self._err):
            if not f.closed:
                f.close()


class LogProxy:
    """Forward 127.0.0.1:`port` to 127.0.0.1:`target`, keeping every chunk: `log` is a list
    of (connection number, ">" client->server or "<" server->client, bytes). `transcript()`
    renders it for a failure message. `close()` ends every thread's sockets."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.log: list = []
        self._socks: list = []
        self._lock = threading.Lock()
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.port = self.lsock.getsockname()[1]
        self._n = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            try:
                s = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                c.close()
                continue
            n = self._n
            self._n += 1
            with self._lock:
                self._socks += [c, s]
            threading.Thread(target=self._pump, args=(c, s, n, ">"), daemon=True).start()
            threading.Thread(target=self._pump, args=(s, c, n, "<"), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket, n: int, way: str) -> None:
        try:
            while True:
                d = a.recv(65536)
                if not d:
                    break
                with self._lock:
                    self.log.append((n, way, d))
                b.sendall(d)
        except OSError:
            pass
        try:
            b.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def sent(self) -> bytes:
        """Everything the clients sent, in order."""
        with self._lock:
            return b"".join(d for _, w, d in self.log if w == ">")

    def transcript(self, limit: int = 300) -> str:
        with self._lock:
            return "\n".join(f"{n}{w} {d[:limit]!r}" for n, w, d in self.log)

    def close(self) -> None:
        self.lsock.close()
        with self._lock:
            socks = list(self._socks)
        for s in socks:
            try:
                s.close()
            except OSError:
                pass
