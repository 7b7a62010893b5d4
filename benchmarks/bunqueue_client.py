"""The bunqueue load client: a minimal pipelined client of bunqueue's TCP framing (4-byte
big-endian length + MessagePack, through the `msgpack` package) built on the beanstalk
benchmark's Client (same socket setup and receive buffer), the bunqueue workload loops, the
post-run check, and the per-connection client process.

Pipelining: every command carries a reqId (a decimal string, as the real client sends); a
connection keeps up to `window` commands in flight (the real server runs at most 50 of one
connection's commands at once) and matches each reply to its command by reqId (replies come in
completion order). Whenever replies arrive, the freed slots are refilled in one write.

Job data: a 100-character ASCII string (BODY as text; msgpack str8, 102 bytes packed). Each
connection pushes to and pulls from its own queue, so connections never take each other's jobs.

Workloads (N = jobs for this connection, `batch` = 100):

  push        N `PUSH {queue, data}`, window in flight; each reply must be ok:true with an id.
  pushb       N/batch `PUSHB {queue, jobs: [{data}] x batch}`; each reply ok:true with `batch` ids.
  pull-ack    the queue is pre-filled with N jobs (pipelined PUSHB, not timed); N `PULL {queue}`
              (no owner, no long poll) and, for every job pulled, `ACK {id}` (no result). The
              window holds PULLs and ACKs together; ACKs are sent first. Jobs = ACKs answered ok.
  pullb-ackb  pre-filled likewise; N/batch `PULLB {queue, count: batch}`, and for every reply one
              `ACKB {ids}` of the jobs it returned. Jobs = ids of the ACKBs answered ok.

Encoding rules of the real server and client: integers outside int32 travel as float64 (the
client decodes 64-bit integers as BigInt and rejects them), and replies may hold MessagePack ext
type 0 (JavaScript `undefined`), decoded here as None.
"""
from __future__ import annotations

import struct
import time
from collections import deque

import msgpack

from bench_client import Client, client_proc
from bench_common import BODY, BenchError

DATA = BODY.decode("ascii")   # the job's `data`: a 100-character string
DEFAULT_WINDOW = 50           # the real server runs 50 commands of a connection at once
BUNQUEUE_WORKLOADS = ("push", "pushb", "pull-ack", "pullb-ackb")
PULL_WORKLOADS = ("pull-ack", "pullb-ackb")
# commands per job, `batch` jobs per PUSHB / PULLB / ACKB
COMMANDS_PER_JOB = {"push": lambda batch: 1, "pushb": lambda batch: 1 / batch,
                    "pull-ack": lambda batch: 2, "pullb-ackb": lambda batch: 2 / batch}
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1

_LEN = struct.Struct(">I")
_pack = msgpack.Packer(use_bin_type=True).pack


def js_value(v):
    """v as the real client would send it: integers outside int32 become float64."""
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int):
        return v if INT32_MIN <= v <= INT32_MAX else float(v)
    if isinstance(v, dict):
        return {k: js_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [js_value(x) for x in v]
    return v


def _ext_hook(code: int, data: bytes):
    return None if code == 0 else msgpack.ExtType(code, data)   # ext 0: JS undefined


def decode(body) -> object:
    """A reply with text as str (setup and checks)."""
    return msgpack.unpackb(body, raw=False, ext_hook=_ext_hook, strict_map_key=False)


def decode_raw(body) -> object:
    """A reply with text left as bytes (keys too): the workloads' hot path. Skipping UTF-8
    decoding makes a 100-job PULLB reply 2.5x cheaper to decode (3.4 instead of 8.4 us/job)."""
    return msgpack.unpackb(body, raw=True, ext_hook=_ext_hook, strict_map_key=False,
                           use_list=False)


def frame(cmd: dict) -> bytes:
    """One framed command (any command; the hot paths use Template)."""
    body = _pack(js_value(cmd))
    return _LEN.pack(len(body)) + body


def _map_header(n: int) -> bytes:
    return bytes([0x80 | n]) if n < 16 else b"\xde" + struct.pack(">H", n)


def pack_str(b: bytes) -> bytes:
    """UTF-8 bytes packed as a msgpack str (the `bytes` type would pack as bin)."""
    n = len(b)
    if n < 32:
        return bytes([0xa0 | n]) + b
    return (b"\xd9" + bytes([n]) if n < 256 else b"\xda" + struct.pack(">H", n)) + b


def pack_str_array(items) -> bytes:
    """A msgpack array of strs from UTF-8 bytes."""
    n = len(items)
    head = bytes([0x90 | n]) if n < 16 else b"\xdc" + struct.pack(">H", n)
    return head + b"".join(map(pack_str, items))


class Template:
    """A command packed once: the fixed entries of its map, then the entries named in `keys`
    (values given packed to frame()) and a final `reqId`."""

    def __init__(self, fixed: dict, *keys: str):
        self.head = (_map_header(len(fixed) + len(keys) + 1)
                     + b"".join(_pack(k) + _pack(v) for k, v in js_value(fixed).items()))
        self.keys = [_pack(k) for k in keys]
        self.rid_key = _pack("reqId")

    def frame(self, rid: bytes, *packed: bytes) -> bytes:
        """rid: the reqId, UTF-8 bytes (sent as a str); packed: each key's value, packed."""
        parts = [self.head]
        for k, v in zip(self.keys, packed):
            parts.append(k)
            parts.append(v)
        parts.append(self.rid_key)
        parts.append(pack_str(rid))
        body = b"".join(parts)
        return _LEN.pack(len(body)) + body


class BunqueueClient(Client):
    """A blocking bunqueue client on one socket, pushing to and pulling from one queue."""

    def __init__(self, port: int, timeout: float, queue: str, recv_mode: str = "plain",
                 window: int = DEFAULT_WINDOW):
        super().__init__(port, timeout, recv_mode)
        self.queue = queue
        self.window = window
        self.rid = 0
        self.stats: dict[str, int] = {}
        self._push = Template({"cmd": "PUSH", "queue": queue, "data": DATA})
        self._pull = Template({"cmd": "PULL", "queue": queue})
        self._ack = Template({"cmd": "ACK"}, "id")
        self._ackb = Template({"cmd": "ACKB"}, "ids")
        self._pushb: dict[int, Template] = {}
        self._pullb: dict[int, Template] = {}

    def pushb_template(self, n: int) -> Template:
        t = self._pushb.get(n)
        if t is None:
            t = self._pushb[n] = Template({"cmd": "PUSHB", "queue": self.queue,
                                           "jobs": [{"data": DATA}] * n})
        return t

    def pullb_template(self, n: int) -> Template:
        t = self._pullb.get(n)
        if t is None:
            t = self._pullb[n] = Template({"cmd": "PULLB", "queue": self.queue, "count": n})
        return t

    def replies(self, decoder=decode_raw) -> list:
        """The decoded replies of every complete frame in the buffer; receives until there is
        at least one."""
        buf = self.buf
        while True:
            out = []
            pos, n = 0, len(buf)
            need = 0
            with memoryview(buf) as mv:
                while n - pos >= 4:
                    end = pos + 4 + _LEN.unpack_from(buf, pos)[0]
                    if end > n:
                        need = end - n
                        break
                    out.append(decoder(mv[pos + 4:end]))
                    pos = end
            if pos:
                del buf[:pos]
            if out:
                return out
            self._fill(need)
            buf = self.buf

    def call(self, cmd: dict) -> dict:
        """One command, unpipelined: send it and wait for its reply (text as str)."""
        self.rid += 1
        rid = str(self.rid)
        self.sock.sendall(frame(dict(cmd, reqId=rid)))
        while True:
            for r in self.replies(decode):
                if isinstance(r, dict) and r.get("reqId") == rid:
                    return r

    def hello(self) -> dict:
        r = self.call({"cmd": "Hello", "protocolVersion": 2, "capabilities": ["pipelining"]})
        if r.get("ok") is not True:
            raise BenchError(f"Hello: {r!r}"[:300])
        return r

    def pump(self, issue, handle, deadline: float, lat: list[float]) -> bool:
        """Keep up to `window` commands in flight. issue(rid) -> (frame, tag), or None when
        there is nothing to send now (rid: the reqId, bytes); handle(tag, reply) takes every
        reply, decoded by decode_raw (and may give issue() follow-up commands). Appends each
        command's round trip (send to reply, seconds) to lat. Returns True when nothing is left
        to send or in flight; False when the deadline passed first (it then sends nothing more,
        and returns once every command in flight has its reply, so the connection is quiet)."""
        inflight: dict[bytes, tuple] = {}
        window = self.window
        now = time.perf_counter
        mono = time.monotonic
        send = self.sock.sendall
        late = False
        while True:
            if not late and mono() >= deadline:
                late = True
            if not late and len(inflight) < window:
                out = []
                t = now()
                while len(inflight) < window:
                    rid = b"%d" % (self.rid + 1)
                    item = issue(rid)
                    if item is None:
                        break
                    self.rid += 1
                    out.append(item[0])
                    inflight[rid] = (item[1], t)
                if out:
                    send(b"".join(out))
            if not inflight:
                return not late
            replies = self.replies()
            t = now()
            for r in replies:
                try:
                    tag, t0 = inflight.pop(r[b"reqId"])
                except (KeyError, TypeError) as e:
                    what = "error reply" if r.get(b"ok") is False else "reply"
                    raise _fail(f"{what} to no command in flight", r) from e
                lat.append(t - t0)
                handle(tag, r)

    def prefill(self, n: int, batch: int, time_limit: float) -> int:
        """Pipelined PUSHBs of n jobs into our queue; stops early at time_limit seconds."""
        jobs, _ = run_bunqueue_workload(self, "pushb", True, batch,
                                        time.monotonic() + time_limit, n, [])
        self.stats = {}
        return jobs


def _fail(what: str, r) -> BenchError:
    return BenchError(f"{what}: {r!r}"[:300])


def run_bunqueue_workload(c: BunqueueClient, workload: str, pipelined: bool, batch: int,
                          deadline: float, job_limit: int, lat: list[float], available: int = 0,
                          shared_tube: bool = False) -> tuple[int, bool]:
    """Run until job_limit jobs are done or the deadline (monotonic) passes; returns (jobs done,
    drained early). One latency per command. Counts in c.stats. bench_client.run_workload's
    signature, so bench_client.client_proc can drive it; pipelined only."""
    if not pipelined:
        raise BenchError("the bunqueue benchmark runs pipelined only")
    st = c.stats = {"sent_jobs": 0, "done": 0, "pulled": 0, "empty_pulls": 0}
    if workload in ("push", "pushb"):
        tpl = c._push

        def issue(rid):
            k = min(batch if workload == "pushb" else 1, job_limit - st["sent_jobs"])
            if k <= 0:
                return None
            st["sent_jobs"] += k
            if workload == "push":
                return tpl.frame(rid), 1
            return c.pushb_template(k).frame(rid), k

        def handle(k, r):
            if r.get(b"ok") is not True:
                raise _fail("push", r)
            if workload == "push":
                if not r.get(b"id"):
                    raise _fail("PUSH reply without an id", r)
            elif len(r.get(b"ids") or ()) != k:
                raise _fail(f"PUSHB of {k} jobs", r)
            st["done"] += k
    elif workload in PULL_WORKLOADS:
        limit = job_limit if shared_tube else min(job_limit, available)
        acks: deque = deque()
        single = workload == "pull-ack"
        ack, ackb = c._ack, c._ackb
        pull = c._pull

        def issue(rid):
            if acks:
                ids = acks.popleft()
                if single:
                    return ack.frame(rid, pack_str(ids)), 1
                return ackb.frame(rid, pack_str_array(ids)), len(ids)
            k = min(1 if single else batch, limit - st["sent_jobs"])
            if k <= 0:
                return None
            st["sent_jobs"] += k
            return (pull.frame(rid) if single else c.pullb_template(k).frame(rid)), -k

        def handle(k, r):
            if r.get(b"ok") is not True:
                raise _fail("pull" if k < 0 else "ack", r)
            if k > 0:               # an ACK / ACKB of k jobs
                st["done"] += k
                return
            if single:
                jl = () if r.get(b"job") is None else (r[b"job"],)
            else:
                jl = r.get(b"jobs") or ()
            got = [j[b"id"] for j in jl if j[b"data"] == BODY]
            if len(got) != len(jl):
                raise _fail(f"pulled a job whose data is not the {len(DATA)}-character string", r)
            st["pulled"] += len(got)
            if len(got) < -k:       # the queue ran dry: pull no more
                st["empty_pulls"] += 1
                st["sent_jobs"] = limit
            if got:
                acks.append(got[0] if single else got)
    else:
        raise BenchError(f"unknown bunqueue workload {workload}")
    c.pump(issue, handle, deadline, lat)
    return st["done"], st["empty_pulls"] > 0


def check_bunqueue(c: BunqueueClient, spec: dict, jobs: int) -> dict:
    """After the timed part: did this connection move exactly its jobs? Raises BenchError when
    not. Push workloads: GetJobCounts shows them all waiting. Pull workloads: every job pulled
    was acked, a PULL finds the queue empty and GetJobCounts shows nothing waiting or active.
    A server that does not answer GetJobCounts is noted (counts: None), not failed."""
    w = spec["workload"]
    want = spec["job_limit"]
    st = c.stats
    out = {"jobs": jobs, "expected": want, "counts": None}
    if jobs != want:
        raise BenchError(f"{w}: moved {jobs} of {want} jobs ({st})")
    if w in PULL_WORKLOADS:
        if st["pulled"] != jobs:
            raise BenchError(f"{w}: pulled {st['pulled']} jobs, acked {jobs}")
        r = c.call({"cmd": "PULL", "queue": c.queue, "timeout": 0})
        if r.get("ok") is not True or r.get("job") is not None:
            raise _fail(f"{w}: queue not empty after the run, PULL", r)
    r = c.call({"cmd": "GetJobCounts", "queue": c.queue})
    counts = r.get("counts") if r.get("ok") is True else None
    if isinstance(counts, dict):
        out["counts"] = counts
        waiting = (counts.get("waiting") or 0) + (counts.get("prioritized") or 0)
        active = counts.get("active") or 0
        want_waiting = jobs if w in ("push", "pushb") else 0
        if waiting != want_waiting or active:
            raise BenchError(f"{w}: after {jobs} jobs GetJobCounts says {counts!r}"[:300])
    return out


def warm_up(spec: dict) -> None:
    """Untimed, before the cell: its workload for up to spec["warmup"] jobs or
    spec["warmup_seconds"] (half of it at most for a pull workload's PUSHB fill), on a
    connection and queue of its own. The real server runs on Bun's JIT, which reaches its speed
    only after some thousands of commands of a kind."""
    n = spec.get("warmup", 0)
    if n <= 0:
        return
    w, secs = spec["workload"], spec["warmup_seconds"]
    c = BunqueueClient(spec["port"], spec["io_timeout"], spec["tube"] + "-warmup",
                       spec["recv_mode"], spec.get("window", DEFAULT_WINDOW))
    try:
        c.hello()
        deadline = time.monotonic() + secs
        filled = c.prefill(n, spec["batch"], secs / 2) if w in PULL_WORKLOADS else 0
        run_bunqueue_workload(c, w, True, spec["batch"], deadline, n, [], filled)
    finally:
        c.close()


def bunqueue_connect(spec: dict) -> BunqueueClient:
    """A BunqueueClient for one connection of a cell (queue spec["tube"]), after the warm-up
    and Hello."""
    warm_up(spec)
    c = BunqueueClient(spec["port"], spec["io_timeout"], spec["tube"], spec["recv_mode"],
                       spec.get("window", DEFAULT_WINDOW))
    try:
        c.hello()
    except BaseException:
        c.close()
        raise
    return c


def bunqueue_client_proc(idx: int, spec: dict, barrier, pipe) -> None:
    """One bunqueue connection in its own process (bench_client.client_proc with these parts)."""
    client_proc(idx, spec, barrier, pipe, connect=bunqueue_connect,
                workload=run_bunqueue_workload, check=check_bunqueue)
