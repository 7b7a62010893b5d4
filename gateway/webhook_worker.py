"""The webhook delivery process (`python -m gateway.webhook_worker CONFIG_JSON`): renders,
signs and POSTs the events the server hands it, with retries, on its own asyncio loop and one
httpx.AsyncClient. gateway/webhooks.py starts it and talks to it over its stdin / stdout;
its module docstring says what is sent and why delivery is a process of its own.

Frames both ways: 4-byte big-endian length + one MessagePack array.
In (server -> worker):
  ["hooks", [[id, url, secret | None], ...]]    the enabled webhooks (replaces the list)
  ["events", [[ids, name, jobId, queue, at_ms, blob, fmt, extra], ...]]
      ids: the webhooks to deliver to; blob/fmt: the result (job.completed) or the job's
      payload (job.failed) as stored, else None; extra: the error text (job.failed) or the
      progress value (job.progress)
Out (worker -> server):
  ["done", {id: [successes, failures]}, stats]  outcomes after retries, then the counters
  ["stats", stats]                              the counters, when they changed (every 0.2 s)
  ["log", level, message, fields]               for the server's log
stats: {"queued", "in_flight", "dropped", "delivered", "failed", "refused"} (events).
The worker exits when its stdin closes (the server stopped or died).
"""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
import os
import socket
import struct
import sys
from collections import deque
from urllib.parse import unquote, urlunsplit

import msgpack

from core.api import AllowList, address_refused, parse_host, split_url

_LEN = struct.Struct(">I")


class Refused(Exception):
    """The receiver's address is refused by the SSRF rules (no retry)."""


def _undefined(v) -> bool:
    return v.__class__ is msgpack.ExtType and v.code == 0


def _jsonable(v):
    """A decoded payload value as JSON carries it (JavaScript's JSON.stringify: undefined
    members left out, undefined in arrays and NaN/Infinity as null; bytes as UTF-8 text)."""
    c = v.__class__
    if c is dict:
        return {str(k): _jsonable(x) for k, x in v.items() if not _undefined(x)}
    if c is list or c is tuple:
        return [None if _undefined(x) else _jsonable(x) for x in v]
    if c is bytes:
        return v.decode("utf-8", "replace")
    if c is float and (v != v or v in (float("inf"), float("-inf"))):
        return None
    if _undefined(v) or c is msgpack.ExtType:
        return None
    return v


def render(name: str, job_id: str, queue: str, at_ms: int, blob, fmt: int, extra) -> bytes:
    """The JSON body of one webhook event (gateway/webhooks.py docstring: the shape)."""
    from protocols.bunqueue.codec import unpack_value
    d = {"event": name, "timestamp": at_ms, "jobId": job_id, "queue": queue}
    if name == "job.progress":
        d["progress"] = extra
    elif name in ("job.completed", "job.failed"):
        # an ACK without a result is stored as b"" (MessagePack): no `data`, as the
        # reference leaves out an undefined result
        if blob is not None and (blob or fmt == 0):
            v = unpack_value(blob, fmt)
            if not _undefined(v):
                d["data"] = _jsonable(v)
        if name == "job.failed" and extra is not None:
            d["error"] = extra
    return json.dumps(d, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def sign(body: bytes, secret: str) -> str:
    """X-Webhook-Signature: hex HMAC-SHA256 of `body` keyed by `secret` (UTF-8)."""
    return hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


class _HookQueue:
    __slots__ = ("items", "running", "dropped")

    def __init__(self) -> None:
        self.items: deque = deque()
        self.running = 0
        self.dropped = 0


class Worker:
    """The delivery loop of the worker process (module docstring). `cfg`: {allow,
    timeout_ms, max_attempts, retry_delay_ms, queue_size, concurrency}."""

    def __init__(self, cfg: dict, out) -> None:
        self.allow = AllowList(cfg["allow"])
        self.timeout_s = cfg["timeout_ms"] / 1000
        self.max_attempts = cfg["max_attempts"]
        self.retry_delay_s = cfg["retry_delay_ms"] / 1000
        self.queue_size = cfg["queue_size"]
        self.concurrency = cfg["concurrency"]
        self.out = out
        self.hooks: dict = {}       # id -> (url, secret)
        self.queues: dict = {}      # id -> _HookQueue
        self.results: dict = {}     # id -> [successes, failures] since the last flush
        self.counts = {"dropped": 0, "delivered": 0, "failed": 0, "refused": 0}
        self.in_flight = 0
        self._flush_armed = False
        self._last_stats = None
        self.client = None
        self.loop = None
        self._done = None

    def stats(self) -> dict:
        return {"queued": sum(len(q.items) for q in self.queues.values()),
                "in_flight": self.in_flight, **self.counts}

    def _write(self, msg) -> None:
        body = msgpack.packb(msg, use_bin_type=True)
        try:
            self.out.write(_LEN.pack(len(body)) + body)
            self.out.flush()
        except OSError:   # the server is gone (a broken pipe): stop
            if self._done is not None:
                self._done.set()

    def log(self, level: str, msg: str, **fields) -> None:
        self._write(["log", level, msg, fields])

    # ----------------------------------------------------------------- input
    def handle(self, msg) -> None:
        kind = msg[0]
        if kind == "hooks":
            self.hooks = {h[0]: (h[1], h[2]) for h in msg[1]}
        elif kind == "events":
            for ids, name, job_id, queue, at_ms, blob, fmt, extra in msg[1]:
                # one body per event, shared by its webhooks (signatures differ by secret)
                item = (name, at_ms, render(name, job_id, queue, at_ms, blob, fmt, extra))
                for hid in ids:
                    if hid in self.hooks:
                        self._enqueue(hid, item)

    def _enqueue(self, hid: str, item) -> None:
        hq = self.queues.get(hid)
        if hq is None:
            hq = self.queues[hid] = _HookQueue()
        if len(hq.items) >= self.queue_size:
            hq.items.popleft()
            if not hq.dropped:   # once per episode (the queue is made anew once idle)
                self.log("warning", "webhook queue full: dropping the oldest events",
                         webhook=hid, queue_size=self.queue_size)
            hq.dropped += 1
            self.counts["dropped"] += 1
        hq.items.append(item)
        if hq.running < self.concurrency:
            hq.running += 1
            self.loop.create_task(self._sender(hid, hq))

    # -------------------------------------------------------------- delivery
    async def _sender(self, hid: str, hq: _HookQueue) -> None:
        try:
            while hq.items:
                item = hq.items.popleft()
                hook = self.hooks.get(hid)
                if hook is None:        # removed or disabled meanwhile
                    continue
                self.in_flight += 1
                try:
                    ok = await self._deliver(hid, hook, item)
                finally:
                    self.in_flight -= 1
                self.counts["delivered" if ok else "failed"] += 1
                r = self.results.get(hid)
                if r is None:
                    r = self.results[hid] = [0, 0]
                r[0 if ok else 1] += 1
                self._arm_flush()
        finally:
            hq.running -= 1
            if not hq.running and not hq.items:
                self.queues.pop(hid, None)

    def _arm_flush(self) -> None:
        if not self._flush_armed:
            self._flush_armed = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_armed = False
        if self.results:
            res, self.results = self.results, {}
            self._last_stats = self.stats()
            self._write(["done", res, self._last_stats])

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(0.2)
            s = self.stats()
            if s != self._last_stats:
                self._last_stats = s
                self._write(["stats", s])

    async def _target(self, url: str):
        """(request URL, extra headers, request extensions) for `url`: split as registration
        read it (core.api.split_url), its host checked (gateway/webhooks.py docstring, SSRF)
        and, unless allow-listed by name, replaced by the checked address (a name is resolved
        here; the Host header and TLS SNI keep it). Raises Refused, or OSError."""
        parts = split_url(url)
        host = unquote(parts.hostname or "").lower()
        scheme = parts.scheme.lower()
        port = parts.port or (443 if scheme == "https" else 80)
        userinfo = parts.netloc.rpartition("@")[0]
        headers, ext = {}, {}
        if self.allow.allows_host(host):
            netloc = f"{host}:{port}"
        else:
            ip = parse_host(host)
            if ip is not None:
                why = address_refused(ip, self.allow)
                if why:
                    raise Refused(f"{ip} ({why})")
            else:
                infos = await self.loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
                if not infos:
                    raise OSError(f"{host}: no address")
                for info in infos:
                    a = ipaddress.ip_address(info[4][0].split("%")[0])
                    why = address_refused(a, self.allow)
                    if why:
                        raise Refused(f"{host} resolves to {a} ({why})")
                ip = ipaddress.ip_address(infos[0][4][0].split("%")[0])
                headers["Host"] = host if parts.port is None else f"{host}:{port}"
                if scheme == "https":
                    ext["sni_hostname"] = host
            netloc = (f"[{ip}]" if ip.version == 6 else str(ip)) + f":{port}"
        if userinfo:
            netloc = f"{userinfo}@{netloc}"
        return urlunsplit((scheme, netloc, parts.path or "/", parts.query, "")), headers, ext

    async def _deliver(self, hid: str, hook, item) -> bool:
        """POST one event with retries; True on a 2xx answer."""
        import httpx
        url, secret = hook
        name, at_ms, body = item
        headers = {"Content-Type": "application/json", "X-Webhook-Event": name,
                   "X-Webhook-Timestamp": str(at_ms)}
        if secret:
            headers["X-Webhook-Signature"] = sign(body, secret)
        last = None
        for attempt in range(self.max_attempts):
            try:
                target, extra_headers, ext = await self._target(url)
                r = await self.client.post(target, content=body,
                                           headers={**headers, **extra_headers},
                                           extensions=ext, timeout=self.timeout_s)
                if 200 <= r.status_code < 300:
                    return True
                last = f"HTTP {r.status_code}"
            except Refused as e:
                self.counts["refused"] += 1
                self.log("warning", "webhook address refused", webhook=hid, cause=str(e))
                return False
            except (httpx.HTTPError, OSError) as e:
                last = f"{e.__class__.__name__}: {e}"
            if attempt < self.max_attempts - 1:
                await asyncio.sleep(self.retry_delay_s * (attempt + 1))
        self.log("info", "webhook delivery failed", webhook=hid, event=name, cause=last)
        return False

    # ------------------------------------------------------------------- run
    async def run(self, fd: int) -> None:
        import httpx
        self.loop = asyncio.get_running_loop()
        os.set_blocking(fd, False)
        done = self._done = asyncio.Event()
        buf = bytearray()

        def readable():
            try:
                data = os.read(fd, 1 << 20)
            except BlockingIOError:
                return
            if not data:
                self.loop.remove_reader(fd)
                done.set()
                return
            buf.extend(data)
            while len(buf) >= 4:
                n = _LEN.unpack_from(buf)[0]
                if len(buf) < 4 + n:
                    break
                msg = msgpack.unpackb(bytes(buf[4:4 + n]), raw=False, strict_map_key=False)
                del buf[:4 + n]
                self.handle(msg)

        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
        async with httpx.AsyncClient(follow_redirects=False, trust_env=False,
                                     limits=limits) as client:
            self.client = client
            self.loop.add_reader(fd, readable)
            ticker = self.loop.create_task(self._ticker())
            await done.wait()
            ticker.cancel()
            for t in [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
                t.cancel()


#: Delivery is background work: the worker runs under Linux's SCHED_IDLE policy (it gets a CPU
#: only when no normal process wants it), so on a busy machine the CPU goes to the server first
#: (job traffic) and the worker drops what it cannot deliver in time from its bounded queues.
#: Measured (docs/performance.md "Webhooks"): at nice 10 the worker still took 87% of a core
#: from a 2-CPU machine running the server and its clients, and PUSHB fell to 0.7x. Where
#: SCHED_IDLE is not available, the niceness increment NICE is used instead.
NICE = 19


def background() -> str:
    """Lower this process's CPU priority as far as it goes: SCHED_IDLE (Linux), else nice +NICE,
    else nothing. Returns which ("idle", "nice" or "none")."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return "idle"
    except (AttributeError, OSError):   # not Linux, or refused: niceness instead
        pass
    try:
        os.nice(NICE)
        return "nice"
    except OSError:   # not allowed here: run at the server's priority
        return "none"


def main() -> int:
    import signal
    cfg = json.loads(sys.argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # a terminal's Ctrl-C: the server decides
    background()
    w = Worker(cfg, sys.stdout.buffer)
    try:
        asyncio.run(w.run(sys.stdin.fileno()))
    except (BrokenPipeError, KeyboardInterrupt):   # the server is gone
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
