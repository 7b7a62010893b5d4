"""The benchmark's beanstalk client: a raw-socket Client tuned for pipelined batches, the
workload loops, and the per-connection client process. Standard library only."""
from __future__ import annotations

import os
import signal
import socket
import struct
import time

from bench_common import (CRLF, HOST, MIN_DELETE_REPLY, MIN_PUT_REPLY, MIN_RESERVE_REPLY,
                          MIN_RESERVED_REPLY, PUT_ONE, RBUF_SIZE, RESERVE_ONE, BenchError)

class Client:
    """A blocking beanstalk client on one socket, tuned for batches: replies are parsed from a
    bytearray with find/count (C speed), never one recv per reply."""

    def __init__(self, port: int, timeout: float, recv_mode: str = "plain"):
        sock = socket.create_connection((HOST, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # A Python-level timeout makes every recv a poll()+recv pair. Use a plain blocking
        # socket bounded by the kernel's SO_RCVTIMEO/SO_SNDTIMEO instead: one syscall per recv.
        sock.settimeout(None)
        tv = struct.pack("ll", int(timeout), int((timeout % 1) * 1e6))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
        self.sock = sock
        self.recv_mode = recv_mode
        self._rbuf = bytearray(RBUF_SIZE)   # recv_into: no allocation per recv
        self._rmv = memoryview(self._rbuf)
        self.buf = bytearray()
        self._batches: dict[int, tuple[bytes, bytes]] = {}

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def _fill(self, need: int = 0) -> None:
        """Receive more bytes. need > 0 is a lower bound on the bytes the server still owes for
        the current batch; in recv mode "waitall" the client waits for them in the kernel
        (MSG_WAITALL), otherwise it takes whatever has arrived (see RECV_MODES)."""
        try:
            if need > 1 and self.recv_mode == "waitall":
                k = self.sock.recv_into(self._rbuf, min(need, RBUF_SIZE), socket.MSG_WAITALL)
            else:
                k = self.sock.recv_into(self._rbuf)
        except BlockingIOError as e:  # SO_RCVTIMEO expired
            raise BenchError(f"timed out waiting for the server; have {bytes(self.buf[-120:])!r}") from e
        if not k:
            raise BenchError("server closed the connection")
        self.buf += self._rmv[:k]

    def line(self) -> bytes:
        while True:
            i = self.buf.find(CRLF)
            if i >= 0:
                out = bytes(self.buf[:i])
                del self.buf[:i + 2]
                return out
            if len(self.buf) > 65536:
                raise BenchError(f"reply line too long: {bytes(self.buf[:80])!r}...")
            self._fill()

    def take(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def command(self, cmd: bytes) -> bytes:
        self.sock.sendall(cmd)
        return self.line()

    def setup_tube(self, tube: str) -> None:
        t = tube.encode()
        r = self.command(b"use " + t + CRLF)
        if r != b"USING " + t:
            raise BenchError(f"use {tube}: {r!r}")
        r = self.command(b"watch " + t + CRLF)
        if not r.startswith(b"WATCHING "):
            raise BenchError(f"watch {tube}: {r!r}")
        if tube != "default":
            r = self.command(b"ignore default\r\n")
            if r != b"WATCHING 1":
                raise BenchError(f"ignore default: {r!r}")

    def batch_bytes(self, n: int) -> tuple[bytes, bytes]:
        b = self._batches.get(n)
        if b is None:
            b = self._batches[n] = (PUT_ONE * n, RESERVE_ONE * n)
        return b

    # --- pipelined primitives: send n commands in one write, read exactly n replies ---------

    def expect_lines(self, n: int, token: bytes, min_len: int) -> None:
        """Read exactly n one-line replies, each containing token (e.g. b"INSERTED ").
        min_len: a lower bound on the length of any reply the server may send here."""
        buf = self.buf
        have = buf.count(CRLF)
        while have < n:
            scanned = len(buf)
            last = buf.rfind(CRLF)
            partial = scanned - (last + 2 if last >= 0 else 0)
            self._fill((n - have) * min_len - partial)
            buf = self.buf
            # count only the new bytes (from scanned-1: a CRLF split across two recvs)
            have += buf.count(CRLF, scanned - 1 if scanned else 0)
        if have != n or buf.count(token) != n:
            for ln in bytes(buf).split(CRLF)[:-1]:
                if token not in ln + CRLF:
                    raise BenchError(f"expected {token!r}..., got {ln!r}")
            raise BenchError(f"expected {n} replies, got {have}")
        del buf[:]

    def put_batch(self, n: int) -> None:
        self.sock.sendall(self.batch_bytes(n)[0])
        self.expect_lines(n, b"INSERTED ", MIN_PUT_REPLY)

    def reserve_batch(self, n: int, all_ready: bool) -> tuple[list[bytes], int]:
        """n pipelined `reserve-with-timeout 0`; returns (job ids, TIMED_OUT count).
        all_ready: this connection knows at least n of our jobs are ready in its tube, so every
        reply is a RESERVED with a BODY_SIZE body (a larger lower bound, fewer recvs)."""
        self.sock.sendall(self.batch_bytes(n)[1])
        min_len = MIN_RESERVED_REPLY if all_ready else MIN_RESERVE_REPLY
        ids: list[bytes] = []
        timed_out = 0
        pos = 0
        got = 0
        buf = self.buf
        while got < n:
            j = buf.find(CRLF, pos)
            if j < 0:
                self._fill((n - got) * min_len - (len(buf) - pos))
                buf = self.buf
                continue
            if buf.startswith(b"RESERVED ", pos):
                parts = buf[pos + 9:j].split()
                if len(parts) != 2:
                    raise BenchError(f"bad reply {bytes(buf[pos:j])!r}")
                end = j + 2 + int(parts[1]) + 2
                if len(buf) < end:
                    self._fill(end - len(buf) + (n - got - 1) * min_len)
                    buf = self.buf
                    while len(buf) < end:
                        self._fill(end - len(buf))
                if buf[end - 2:end] != CRLF:
                    raise BenchError("RESERVED body not followed by CRLF")
                ids.append(bytes(parts[0]))
                pos = end
            elif buf.startswith(b"TIMED_OUT\r\n", pos):
                timed_out += 1
                pos = j + 2
            else:
                raise BenchError(f"reserve: unexpected reply {bytes(buf[pos:j])!r}")
            got += 1
        if pos != len(buf):
            raise BenchError(f"reserve: {len(buf) - pos} unexpected trailing bytes")
        del buf[:]
        return ids, timed_out

    def delete_batch(self, ids: list[bytes]) -> None:
        self.sock.sendall(b"delete " + b"\r\ndelete ".join(ids) + CRLF)
        self.expect_lines(len(ids), b"DELETED\r\n", MIN_DELETE_REPLY)

    # --- unpipelined primitives ---------------------------------------------------------------

    def put_one(self) -> None:
        self.sock.sendall(PUT_ONE)
        r = self.line()
        if not r.startswith(b"INSERTED "):
            raise BenchError(f"put: {r!r}")

    def reserve_one(self) -> bytes | None:
        self.sock.sendall(RESERVE_ONE)
        r = self.line()
        if r.startswith(b"RESERVED "):
            parts = r.split()
            if len(parts) != 3:
                raise BenchError(f"bad reply {r!r}")
            body = self.take(int(parts[2]) + 2)
            if body[-2:] != CRLF:
                raise BenchError("RESERVED body not followed by CRLF")
            return parts[1]
        if r == b"TIMED_OUT":
            return None
        raise BenchError(f"reserve: {r!r}")

    def delete_one(self, jid: bytes) -> None:
        self.sock.sendall(b"delete " + jid + CRLF)
        r = self.line()
        if r != b"DELETED":
            raise BenchError(f"delete {jid!r}: {r!r}")

    def prefill(self, n: int, batch: int, time_limit: float) -> int:
        """Pipelined puts of n jobs into the used tube; stops early at time_limit seconds."""
        done = 0
        deadline = time.monotonic() + time_limit
        while done < n and time.monotonic() < deadline:
            k = min(batch, n - done)
            self.put_batch(k)
            done += k
        return done


def run_workload(c: Client, workload: str, pipelined: bool, batch: int, deadline: float,
                 job_limit: int, lat: list[float], available: int = 0,
                 shared_tube: bool = False) -> tuple[int, bool]:
    """Run until deadline (monotonic) or job_limit jobs. Returns (jobs done, drained early).
    Appends latencies in seconds to lat: per batch when pipelined, per command otherwise."""
    now = time.perf_counter
    mono = time.monotonic
    jobs = 0
    if pipelined:
        if workload == "put":
            while jobs < job_limit and mono() < deadline:
                k = min(batch, job_limit - jobs)
                t = now()
                c.put_batch(k)
                lat.append(now() - t)
                jobs += k
        elif workload == "reserve-delete":
            while jobs < job_limit and mono() < deadline:
                k = min(batch, job_limit - jobs)
                if not shared_tube:
                    k = min(k, available - jobs)   # own tube: we know how many are left
                    if k <= 0:
                        return jobs, True
                t = now()
                ids, timed_out = c.reserve_batch(k, not shared_tube)
                if ids:
                    c.delete_batch(ids)
                    jobs += len(ids)
                if timed_out:
                    return jobs, True   # tube empty: a partial last batch is not a sample
                lat.append(now() - t)
        elif workload == "put-reserve-delete":
            while jobs < job_limit and mono() < deadline:
                k = min(batch, job_limit - jobs)
                t = now()
                c.put_batch(k)
                # every reserve finds a job: a connection reserves only after its own puts
                ids, timed_out = c.reserve_batch(k, True)
                if ids:
                    c.delete_batch(ids)
                if timed_out:
                    raise BenchError(f"reserve timed out {timed_out}x right after put")
                lat.append(now() - t)
                jobs += k
        else:
            raise BenchError(f"unknown workload {workload}")
    else:
        if workload == "put":
            while jobs < job_limit and mono() < deadline:
                t = now()
                c.put_one()
                lat.append(now() - t)
                jobs += 1
        elif workload == "reserve-delete":
            while jobs < job_limit and mono() < deadline:
                t = now()
                jid = c.reserve_one()
                t2 = now()
                if jid is None:
                    return jobs, True
                lat.append(t2 - t)
                c.delete_one(jid)
                lat.append(now() - t2)
                jobs += 1
        elif workload == "put-reserve-delete":
            while jobs < job_limit and mono() < deadline:
                t = now()
                c.put_one()
                t2 = now()
                jid = c.reserve_one()
                t3 = now()
                if jid is None:
                    raise BenchError("reserve timed out right after put")
                c.delete_one(jid)
                t4 = now()
                lat.append(t2 - t)
                lat.append(t3 - t2)
                lat.append(t4 - t3)
                jobs += 1
        else:
            raise BenchError(f"unknown workload {workload}")
    return jobs, False


def connect(spec: dict) -> Client:
    """A beanstalk Client for one connection of a cell, using and watching spec["tube"]."""
    c = Client(spec["port"], spec["io_timeout"], spec["recv_mode"])
    try:
        c.setup_tube(spec["tube"])
    except BaseException:
        c.close()
        raise
    return c


def client_proc(idx: int, spec: dict, barrier, pipe, connect=connect,
                workload=run_workload, check=None) -> None:
    """One connection in its own process. Sends one result dict through pipe.
    connect(spec) -> a set-up client with prefill(n, batch, time_limit) and close();
    workload: run_workload's signature (another dialect passes its own pair);
    check(client, spec, jobs) -> dict, run after the timed part (verifies what the workload
    did; raises BenchError when it is wrong), is sent along as "check"."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    c = None
    try:
        c = connect(spec)
        prefilled = 0
        if spec["prefill"]:
            prefilled = c.prefill(spec["prefill"], spec["batch"], spec["prefill_timeout"])
        barrier.wait(spec["barrier_timeout"])
        lat: list[float] = []
        cpu0 = os.times()
        t0 = time.monotonic()
        jobs, drained = workload(c, spec["workload"], spec["pipelined"], spec["batch"],
                                 t0 + spec["duration"], spec["job_limit"], lat,
                                 prefilled, spec["shared_tube"])
        t1 = time.monotonic()
        cpu1 = os.times()
        cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
        checked = check(c, spec, jobs) if check is not None else None
        pipe.send({"ok": True, "idx": idx, "jobs": jobs, "t0": t0, "t1": t1, "cpu": cpu,
                   "drained": drained, "prefilled": prefilled, "lat": lat, "check": checked})
    except BaseException as e:  # report, never hang the parent
        try:
            barrier.abort()
        except Exception:
            pass
        try:
            pipe.send({"ok": False, "idx": idx, "error": f"{type(e).__name__}: {e}"})
        except Exception:
            pass
    finally:
        if c is not None:
            c.close()
        pipe.close()
