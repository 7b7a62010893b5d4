"""The glide-mq load client: a minimal RESP client on the beanstalk benchmark's Client (same
socket setup and receive buffer), the pipelined `FCALL glidemq_addJob` workloads, and the
per-connection client process. Standard library only.

A connection sends `HELLO 3` first (what glide-mq's client does; `--protocol 2` skips it), then
writes `batch` FCALLs at once and reads exactly `batch` replies before the next write. Every
reply must be a bulk string holding a job id: for auto ids decimal digits, increasing along the
connection (one queue counter, commands run in order); for custom ids exactly the id sent. An
error reply, `duplicate`, `ERR:...` or any other type stops the run with that reply.

Workloads (KEYS glide:{Q}:id, :stream, :scheduled, :events; name `bench`; data DATA, a 100-byte
JSON object; timestamp = the client's clock in ms when the batch is built):

  add         the 21-argument form of glide-mq 0.15 (library v93) with opts `{}`, as Queue.add
              sends it without options (golden step C02)
  add-delayed the same with delay 60000 and opts `{"delay":60000}` (C03): the job goes to the
              scheduled zset
  add-custom  a unique custom id per job, `j<connection>-<n>`, in ARGV 17 and in opts
              `{"jobId":"..."}` (C07)
  add-17      the seed's 17-argument form (library v41 and earlier clients; C01)
"""
from __future__ import annotations

import time

from bench_client import Client, client_proc
from bench_common import BenchError

DATA = b'{"x":"' + b"0123456789" * 9 + b'01"}'      # 100 bytes of JSON
assert len(DATA) == 100
JOB_NAME = b"bench"
GLIDEMQ_WORKLOADS = ("add", "add-delayed", "add-custom", "add-17")
DELAY_MS = 60000


def bulk(b: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(b), b)


def bulks(*args) -> bytes:
    """The arguments (str / int / bytes) as consecutive RESP bulk strings."""
    return b"".join(bulk(a if isinstance(a, bytes) else str(a).encode()) for a in args)


def encode(*args) -> bytes:
    """One command as a RESP array of bulk strings (str / int / bytes arguments)."""
    return b"*%d\r\n" % len(args) + bulks(*args)


class RespError:
    """An error reply (`-...` or `!...`), kept as a value so callers can show it."""

    def __init__(self, text: bytes):
        self.text = text.decode("utf-8", "replace")

    def __repr__(self) -> str:
        return f"RespError({self.text!r})"


class _Incomplete(Exception):
    pass


def parse(buf, pos: int):
    """One RESP2/RESP3 reply from buf at pos -> (value, position after it); raises _Incomplete
    when the buffer ends first. Aggregates become lists (maps: lists of pairs), strings bytes,
    errors RespError, nulls None. For set-up and checks, not the hot path."""
    j = buf.find(b"\r\n", pos)
    if j < 0:
        raise _Incomplete
    t, line, nxt = buf[pos:pos + 1], bytes(buf[pos + 1:j]), j + 2
    if t in (b"+", b"("):
        return line, nxt
    if t == b"-":
        return RespError(line), nxt
    if t == b":":
        return int(line), nxt
    if t == b",":
        return float(line), nxt
    if t == b"#":
        return line == b"t", nxt
    if t == b"_":
        return None, nxt
    if t in (b"$", b"=", b"!"):
        n = int(line)
        if n < 0:
            return None, nxt
        if len(buf) < nxt + n + 2:
            raise _Incomplete
        data = bytes(buf[nxt:nxt + n])
        return (RespError(data) if t == b"!" else data), nxt + n + 2
    if t in (b"*", b"~", b">", b"%", b"|"):
        n = int(line)
        if n < 0:
            return None, nxt
        count = 2 * n if t in (b"%", b"|") else n
        items = []
        for _ in range(count):
            v, nxt = parse(buf, nxt)
            items.append(v)
        if t == b"|":            # attributes precede the real reply
            return parse(buf, nxt)
        if t == b"%":
            return list(zip(items[::2], items[1::2])), nxt
        return items, nxt
    raise BenchError(f"not a RESP reply: {bytes(buf[pos:pos + 80])!r}")


def queue_keys(queue: str) -> list[bytes]:
    """KEYS of glidemq_addJob for queue: id, stream, scheduled, events."""
    return [f"glide:{{{queue}}}:{k}".encode() for k in ("id", "stream", "scheduled", "events")]


class AddJobCommands:
    """Builds batches of `FCALL glidemq_addJob` for one workload, queue and connection."""

    def __init__(self, workload: str, queue: str, conn: int):
        if workload not in GLIDEMQ_WORKLOADS:
            raise BenchError(f"unknown glide-mq workload {workload}")
        self.workload = workload
        self.custom = workload == "add-custom"
        self.prefix = b"j%d-" % conn
        self.seq = 0
        delay = DELAY_MS if workload == "add-delayed" else 0
        opts = b'{"delay":%d}' % delay if delay else b"{}"
        nargs = 17 if workload == "add-17" else 21
        # ARGV 5..16 (delay .. ttl) and 18..21 (lifo, parentQueue, schedulerName, skipEvents)
        mid = [delay, 0, b"", 0, b"", 0, 0, 0, 0, 0, 0, 0]
        tail = [0, b"", b"", 0] if nargs == 21 else []
        keys = queue_keys(queue)
        # A command is head + opts + timestamp + mid + custom id + tail, every part RESP bulk.
        self.head = (b"*%d\r\n" % (3 + len(keys) + nargs)
                     + bulks(b"FCALL", b"glidemq_addJob", len(keys), *keys, JOB_NAME, DATA))
        self.opts = bulk(opts)
        self.mid = bulks(*mid)
        self.tail = bulks(*tail)
        self.no_id = bulk(b"")

    def batch(self, n: int) -> tuple[bytes, list[bytes] | None]:
        """(the bytes of n commands, the ids the replies must carry: None for auto ids)."""
        ts = bulk(b"%d" % int(time.time() * 1000))
        if not self.custom:
            one = self.head + self.opts + ts + self.mid + self.no_id + self.tail
            return one * n, None
        ids, out = [], []
        for _ in range(n):
            self.seq += 1
            cid = self.prefix + b"%d" % self.seq
            ids.append(cid)
            out.append(b"".join((self.head, bulk(b'{"jobId":"%s"}' % cid), ts, self.mid,
                                 bulk(cid), self.tail)))
        return b"".join(out), ids


class GlideClient(Client):
    """A blocking RESP client on one socket (bench_client.Client's socket and buffer)."""

    def __init__(self, port: int, timeout: float, recv_mode: str = "plain"):
        super().__init__(port, timeout, recv_mode)
        self.last_id = 0

    def call(self, *args):
        """One command, unpipelined: its reply (parse's values; an error is a RespError)."""
        self.sock.sendall(encode(*args))
        return self.reply()

    def reply(self):
        while True:
            try:
                v, pos = parse(self.buf, 0)
            except _Incomplete:
                self._fill()
                continue
            del self.buf[:pos]
            return v

    def hello(self, protocol: int) -> None:
        """HELLO 3 (RESP3, as glide-mq's client does) or nothing for protocol 2."""
        if protocol == 3:
            r = self.call(b"HELLO", b"3")
            if isinstance(r, RespError) or not isinstance(r, list):
                raise BenchError(f"HELLO 3: {r!r}"[:300])

    def read_ids(self, n: int, expected: list[bytes] | None) -> None:
        """Read exactly n replies, each a bulk job id (expected: the custom ids, in order; None:
        auto ids, decimal and increasing). Raises BenchError with the first wrong reply."""
        buf = self.buf
        pos = got = 0
        last = self.last_id
        while got < n:
            if pos >= len(buf):
                self._fill()
                buf = self.buf
                continue
            j = buf.find(b"\r\n", pos)
            if j < 0:
                self._fill()
                buf = self.buf
                continue
            if buf[pos] != 0x24:     # '$'
                raise BenchError(f"reply {got + 1} of {n} is not a bulk id: "
                                 f"{bytes(buf[pos:j])[:200]!r}")
            end = j + 2 + int(buf[pos + 1:j])
            while len(buf) < end + 2:
                self._fill(end + 2 - len(buf))
                buf = self.buf
            val = bytes(buf[j + 2:end])
            if expected is None:
                if not val.isdigit() or int(val) <= last:
                    raise BenchError(f"reply {got + 1} of {n}: {val[:200]!r} is not a job id "
                                     f"above the last one ({last})")
                last = int(val)
            elif val != expected[got]:
                raise BenchError(f"reply {got + 1} of {n}: {val[:200]!r}, sent custom id "
                                 f"{expected[got]!r}")
            pos = end + 2
            got += 1
        if pos != len(buf):
            raise BenchError(f"{len(buf) - pos} bytes after the batch's {n} replies: "
                             f"{bytes(buf[pos:pos + 80])!r}")
        del buf[:]
        self.last_id = last


def run_glidemq_workload(c: GlideClient, workload: str, pipelined: bool, batch: int,
                         deadline: float, job_limit: int, lat: list[float], available: int = 0,
                         shared_tube: bool = False) -> tuple[int, bool]:
    """Write `batch` addJob FCALLs, read their replies, until the deadline (monotonic) or
    job_limit jobs; one latency sample (seconds) per batch, write to last reply. Returns (jobs
    added, False). bench_client.run_workload's signature, for client_proc; pipelined only."""
    if not pipelined:
        raise BenchError("the glide-mq benchmark runs pipelined only")
    cmds = c.commands
    now, mono = time.perf_counter, time.monotonic
    send = c.sock.sendall
    jobs = 0
    while jobs < job_limit and mono() < deadline:
        k = min(batch, job_limit - jobs)
        data, ids = cmds.batch(k)
        t = now()
        send(data)
        c.read_ids(k, ids)
        lat.append(now() - t)
        jobs += k
    return jobs, False


def glidemq_connect(spec: dict) -> GlideClient:
    """A GlideClient for one connection of a cell: HELLO, then the workload's command builder
    on spec["queue"] (one queue shared by the cell's connections)."""
    c = GlideClient(spec["port"], spec["io_timeout"], spec["recv_mode"])
    try:
        c.hello(spec["protocol"])
        c.commands = AddJobCommands(spec["workload"], spec["queue"], spec["conn_index"])
    except BaseException:
        c.close()
        raise
    return c


def glidemq_client_proc(idx: int, spec: dict, barrier, pipe) -> None:
    """One connection in its own process (bench_client.client_proc with these parts)."""
    client_proc(idx, dict(spec, conn_index=idx), barrier, pipe, connect=glidemq_connect,
                workload=run_glidemq_workload)
