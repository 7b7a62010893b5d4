"""The workq load client: a raw-socket client tuned for pipelined batches (built on the beanstalk
benchmark's Client: same socket setup and batch reading), the workq workload loop, and the
per-connection client process. Standard library only.

Workloads (each connection adds to and leases from its own queue, so connections never take each
other's jobs):

  add             one write of `batch` (100) `add <id> <queue> 60000 3600000 100` commands with
                  their 100-byte payloads, then read the `batch` `+OK` replies (1 round trip).
  lease-complete  the queue is pre-filled with pipelined adds (not timed). One batch = one write
                  of 100 `lease <queue> 1000`, read the 100 leased jobs, then one write of the
                  100 `complete <id> 0` (empty result), read the 100 `+OK` (2 round trips, as the
                  beanstalk reserve-delete batch). A connection never asks for more leases than
                  its queue holds, so no lease waits for its 1000 ms timeout.

Job ids are unique UUIDv4s: a random per-connection v4 prefix (8-4-4-4- with version 4 and the
RFC 4122 variant) followed by a 12-hex-digit counter, so ids are cheap to make and never repeat
within a run (every run uses a fresh server and database anyway).
"""
from __future__ import annotations

import os
import time

from bench_client import Client, client_proc
from bench_common import BODY, BODY_SIZE, CRLF, BenchError

ADD_TTR_MS = 60000          # as the beanstalk benchmark's `put ... 60 ...` (seconds there)
ADD_TTL_MS = 3600000        # 1 h: no job expires during a run
LEASE_TIMEOUT_MS = 1000
MIN_OK_REPLY = len(b"+OK\r\n")          # any reply to add or complete is at least this long
MIN_LEASE_REPLY = len(b"-TIMEOUT\r\n")  # any reply to lease is at least this long
WORKQ_WORKLOADS = ("add", "lease-complete")
COMMANDS_PER_JOB = {"add": 1, "lease-complete": 2}
# The uid prefix jobgate derives for jobs of other dialects (core/model.py derived_uid): never
# used by the benchmark, or add would answer `Duplicate job`.
_DERIVED_PREFIX = b"6a6f6267-6174-"


def v4_prefix() -> bytes:
    """A random UUIDv4 prefix `xxxxxxxx-xxxx-4xxx-Yxxx-` (Y in 8..b); 12 hex digits follow."""
    while True:
        h = os.urandom(10).hex()
        variant = "89ab"[int(h[15], 16) & 3]
        p = f"{h[:8]}-{h[8:12]}-4{h[12:15]}-{variant}{h[16:19]}-".encode()
        if not p.startswith(_DERIVED_PREFIX):
            return p


class WorkqClient(Client):
    """A blocking workq client on one socket, adding to and leasing from one queue."""

    def __init__(self, port: int, timeout: float, queue: str, recv_mode: str = "plain"):
        super().__init__(port, timeout, recv_mode)
        self.queue = queue.encode()
        self._prefix = b"add " + v4_prefix()
        self._add_tail = (b" %s %d %d %d\r\n" % (self.queue, ADD_TTR_MS, ADD_TTL_MS, BODY_SIZE)
                          + BODY + CRLF)
        self._lease_one = b"lease %s %d\r\n" % (self.queue, LEASE_TIMEOUT_MS)
        self._next = 0

    def add_batch(self, n: int) -> None:
        """n pipelined adds with fresh ids in one write; reads the n `+OK` replies."""
        k = self._next
        self._next = k + n
        pre, tail = self._prefix, self._add_tail
        self.sock.sendall(b"".join([pre + b"%012x" % i + tail for i in range(k, k + n)]))
        self.expect_lines(n, b"+OK\r\n", MIN_OK_REPLY)

    def lease_batch(self, n: int, all_ready: bool) -> tuple[list[bytes], int]:
        """n pipelined `lease <queue> 1000`; returns (leased job ids, -TIMEOUT count).
        all_ready: at least n jobs are ready in our queue, so every reply is a leased job."""
        self.sock.sendall(self._lease_one * n)
        min_len = MIN_LEASE_REPLY
        if all_ready:
            min_len = len(b"+OK 1\r\n%s %s %d %d\r\n" % (b"x" * 36, self.queue, ADD_TTR_MS,
                                                          BODY_SIZE)) + BODY_SIZE + 2
        ids: list[bytes] = []
        timed_out = got = pos = 0
        buf = self.buf
        while got < n:
            j = buf.find(CRLF, pos)
            if j < 0:
                self._fill((n - got) * min_len - (len(buf) - pos))
                buf = self.buf
                continue
            if buf.startswith(b"+OK 1\r\n", pos):
                k = buf.find(CRLF, j + 2)
                if k < 0:   # the job line is not complete yet
                    self._fill((n - got) * min_len - (len(buf) - pos))
                    buf = self.buf
                    continue
                parts = buf[j + 2:k].split()
                if len(parts) != 4:
                    raise BenchError(f"lease: bad job line {bytes(buf[j + 2:k])!r}")
                end = k + 2 + int(parts[3]) + 2
                while len(buf) < end:
                    self._fill(end - len(buf) + (n - got - 1) * min_len)
                    buf = self.buf
                if buf[end - 2:end] != CRLF:
                    raise BenchError("lease: payload not followed by CRLF")
                ids.append(bytes(parts[0]))
                pos = end
            elif buf.startswith(b"-TIMEOUT\r\n", pos):
                timed_out += 1
                pos = j + 2
            else:
                raise BenchError(f"lease: unexpected reply {bytes(buf[pos:j])!r}")
            got += 1
        if pos != len(buf):
            raise BenchError(f"lease: {len(buf) - pos} unexpected trailing bytes")
        del buf[:]
        return ids, timed_out

    def complete_batch(self, ids: list[bytes]) -> None:
        """`complete <id> 0` (empty result) for every id in one write; reads the `+OK`s."""
        self.sock.sendall(b"complete " + b" 0\r\n\r\ncomplete ".join(ids) + b" 0\r\n\r\n")
        self.expect_lines(len(ids), b"+OK\r\n", MIN_OK_REPLY)

    def prefill(self, n: int, batch: int, time_limit: float) -> int:
        """Pipelined adds of n jobs into our queue; stops early at time_limit seconds."""
        done = 0
        deadline = time.monotonic() + time_limit
        while done < n and time.monotonic() < deadline:
            k = min(batch, n - done)
            self.add_batch(k)
            done += k
        return done


def run_workq_workload(c: WorkqClient, workload: str, pipelined: bool, batch: int,
                       deadline: float, job_limit: int, lat: list[float], available: int = 0,
                       shared_tube: bool = False) -> tuple[int, bool]:
    """Run until deadline (monotonic) or job_limit jobs; returns (jobs done, drained early).
    Appends one latency per batch (seconds) to lat. Pipelined only (bench_client.run_workload's
    signature, so bench_client.client_proc can drive it)."""
    if not pipelined:
        raise BenchError("the workq benchmark runs pipelined batches only")
    now = time.perf_counter
    mono = time.monotonic
    jobs = 0
    if workload == "add":
        while jobs < job_limit and mono() < deadline:
            k = min(batch, job_limit - jobs)
            t = now()
            c.add_batch(k)
            lat.append(now() - t)
            jobs += k
    elif workload == "lease-complete":
        while jobs < job_limit and mono() < deadline:
            k = min(batch, job_limit - jobs)
            if not shared_tube:
                k = min(k, available - jobs)   # own queue: we know how many are left
                if k <= 0:
                    return jobs, True
            t = now()
            ids, timed_out = c.lease_batch(k, not shared_tube)
            if ids:
                c.complete_batch(ids)
                jobs += len(ids)
            if timed_out:
                return jobs, True   # queue empty: a partial last batch is not a sample
            lat.append(now() - t)
    else:
        raise BenchError(f"unknown workq workload {workload}")
    return jobs, False


def workq_connect(spec: dict) -> WorkqClient:
    """A WorkqClient for one connection of a cell: spec["port"], queue spec["tube"]."""
    return WorkqClient(spec["port"], spec["io_timeout"], spec["tube"], spec["recv_mode"])


def workq_client_proc(idx: int, spec: dict, barrier, pipe) -> None:
    """One workq connection in its own process (bench_client.client_proc with workq parts)."""
    client_proc(idx, spec, barrier, pipe, connect=workq_connect, workload=run_workq_workload)
