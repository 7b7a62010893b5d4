"""Webhook delivery: job events POSTed as JSON to the registered receivers (issue 16;
reference bunqueue 2.9.5 dist/application/webhookManager.js and eventsManager.js).

What is sent, as the reference sends it: `POST url` with body
`{"event", "timestamp", "jobId", "queue", ...}` (compact JSON; `data` = the result on
job.completed, the job's data on job.failed, with `error`; `progress` on job.progress; keys
whose value is undefined are left out), headers `Content-Type: application/json`,
`X-Webhook-Event: <event>`, `X-Webhook-Timestamp: <timestamp ms>` and, when the webhook has a
secret, `X-Webhook-Signature: <hex HMAC-SHA256 of the exact body bytes, keyed by the secret>`
(no prefix). A 2xx answer is a success; anything else, a network error or the timeout is
retried up to `max_attempts` attempts in all, attempt n waiting n x `retry_delay_ms` after it
fails (reference: 3 attempts, 1 s and 2 s, 10 s timeout). Redirects are not followed (a
redirect could lead to a refused address). After the last attempt the webhook's failureCount
grows; on success successCount and lastTriggered (core/port_webhooks.py).

SSRF at delivery: the receiver's host name is resolved and every address checked
(core.api.address_refused: only global unicast addresses, unless the config allow-list has
them); the request then goes to the checked address itself (Host header and TLS SNI keep the
name), so a DNS answer that changes between check and connect cannot redirect it. A refused
address is a failure without retries.

Threading: delivery runs on its own thread with its own asyncio loop and one
httpx.AsyncClient. The server's event loop only filters events (one dict lookup and a short
list walk per event) and appends them to a bounded hand-off deque; rendering JSON, signing,
DNS, connecting and waiting all happen on the delivery thread, so a slow or hanging receiver
never holds the server's loop (an asyncio task on the server's own loop would put every
receiver's socket events and HTTP parsing on the loop that serves job traffic). Outcomes come
back in batches through `call_soon_threadsafe`.

Bounds: the feed subscription (of the queues the webhooks filter on) holds at most
max(10000, `queue_size`) events (drop-oldest, counted by the feed); the hand-off at most
max(1000, `queue_size`) per enabled webhook; each webhook queues at most
`queue_size` deliveries (the oldest is dropped and counted when full) and has at most
`concurrency` requests in flight. A dead or hanging receiver therefore costs a bounded amount
of memory and one timeout per request, and drops what it cannot take (stats()).
The subscription exists only while some webhook is enabled: no cost otherwise.
"""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
import logging
import socket
import threading
from collections import deque
from urllib.parse import urlsplit, urlunsplit

from core.api import EVENT_KINDS, AllowList, address_refused, parse_host

log = logging.getLogger("jobgate.webhooks")


class Refused(Exception):
    """The receiver's address is refused by the SSRF rules (no retry)."""


def _jsonable(v):
    """A decoded payload value as JSON can carry it (JavaScript's JSON.stringify: undefined
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
    if _undefined(v):
        return None
    return v


def _undefined(v) -> bool:
    return getattr(v, "code", None) == 0 and v.__class__.__name__ == "ExtType"


def render(name: str, ev) -> bytes:
    """The JSON body for webhook event `name` of feed event `ev` (core.api.Event)."""
    from protocols.bunqueue.codec import unpack_value
    d = {"event": name, "timestamp": ev.at_ms, "jobId": ev.uid, "queue": ev.queue}
    if name == "job.progress":
        d["progress"] = ev.detail
    elif name == "job.completed":
        if ev.result is not None:
            v = unpack_value(ev.result, ev.result_fmt)
            if not _undefined(v):
                d["data"] = _jsonable(v)
    elif name == "job.failed":
        if ev.detail is not None:
            v = unpack_value(*ev.detail)
            if not _undefined(v):
                d["data"] = _jsonable(v)
        if ev.error is not None:
            d["error"] = ev.error
    return json.dumps(d, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def sign(body: bytes, secret: str) -> str:
    """The X-Webhook-Signature value: hex HMAC-SHA256 of `body` keyed by `secret` (UTF-8)."""
    return hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


class _HookQueue:
    """One webhook's pending deliveries on the delivery thread."""

    __slots__ = ("items", "running", "dropped")

    def __init__(self) -> None:
        self.items: deque = deque()
        self.running = 0
        self.dropped = 0


class Delivery:
    """Delivers the engine's events to the registered webhooks (see the module docstring).

    `port`: the engine port (used on the server's loop only); `config`: gateway Config (the
    webhook_* settings). `start()` on the server's loop; `stop()` there at shutdown (queued
    deliveries are dropped, as the reference's in-memory ones are at exit).
    `stats()`: {"queued", "in_flight", "dropped", "delivered", "failed", "refused"}.
    """

    def __init__(self, port, config) -> None:
        self.port = port
        self.allow = AllowList(config.webhook_allow)
        self.timeout_s = config.webhook_timeout_ms / 1000
        self.max_attempts = config.webhook_max_attempts
        self.retry_delay_s = config.webhook_retry_delay_ms / 1000
        self.queue_size = config.webhook_queue_size
        self.concurrency = config.webhook_concurrency
        self.loop = None            # the server's loop
        self.sub = None             # feed subscription while a webhook is enabled
        self._version = -1
        self._hooks: list = []      # enabled WebhookViews
        self._draining = False
        # hand-off server loop -> delivery thread: (WebhookView, event name, Event)
        self.inbox: deque = deque()
        self._inbox_max = max(1000, self.queue_size)   # per enabled webhook
        self._wake_pending = False
        # hand-off delivery thread -> server loop: (webhook id, ok)
        self.outbox: deque = deque()
        self._out_pending = False
        self.thread = None
        self.dloop = None           # the delivery thread's loop
        self._stopping = None
        self._queues: dict = {}     # webhook id -> _HookQueue (delivery thread)
        self.dropped = 0            # dropped at the hand-off or a full webhook queue
        self.delivered = 0
        self.failed = 0
        self.refused = 0
        self.in_flight = 0

    # ----------------------------------------------------------- server loop
    def start(self) -> None:
        """Begin delivering (call on the server's running loop, after the registrations were
        restored)."""
        self.loop = asyncio.get_running_loop()
        self.port.on_webhooks_changed(self._changed)
        self._changed()

    def _changed(self) -> None:
        hooks = [h for h in self.port.webhooks() if h.enabled]
        self._hooks = hooks
        self._version = self.port.webhooks_version()
        if hooks and self.sub is None:
            self._start_thread()
            self.sub = self.port.subscribe(maxlen=max(10_000, self.queue_size),
                                           notify=self._ready)
        elif not hooks and self.sub is not None:
            self.sub.close()
            self.sub = None
        if self.sub is not None:   # only the queues some webhook filters on (None: all)
            self.sub.set_queues(None if any(h.queue is None for h in hooks)
                                else {h.queue for h in hooks})

    def _ready(self) -> None:
        # called inside an engine operation: take the events once it is over
        if not self._draining:
            self._draining = True
            self.loop.call_soon(self._drain)

    def _drain(self) -> None:
        self._draining = False
        sub = self.sub
        if sub is None:
            return
        if self._version != self.port.webhooks_version():
            self._changed()
        hooks = self._hooks
        inbox = self.inbox
        added = False
        for ev in sub.take():
            name = EVENT_KINDS.get(ev.kind)
            if name is None:
                continue
            q = ev.queue
            for h in hooks:
                if name in h.events and (h.queue is None or h.queue == q):
                    if len(inbox) >= self._inbox_max * max(1, len(hooks)):
                        self.dropped += 1
                        continue
                    inbox.append((h, name, ev))
                    added = True
        if added and not self._wake_pending and self.dloop is not None:
            self._wake_pending = True
            self.dloop.call_soon_threadsafe(self._pump)

    def _results(self) -> None:
        self._out_pending = False
        out = self.outbox
        port = self.port
        while out:
            id, ok = out.popleft()
            port.webhook_delivered(id, ok)

    def stop(self) -> None:
        """Stop delivering and join the delivery thread (at most a few seconds)."""
        if self.sub is not None:
            self.sub.close()
            self.sub = None
        self.port.on_webhooks_changed(None)
        if self.thread is not None and self.dloop is not None:
            self.dloop.call_soon_threadsafe(self._stopping.set)
            self.thread.join(5)
        self.thread = None

    def stats(self) -> dict:
        """Counters (events): queued (hand-off plus webhook queues), in_flight, dropped
        (hand-off full, webhook queue full, or the feed subscription's drop-oldest), delivered,
        failed (after retries), refused (SSRF at delivery)."""
        queued = len(self.inbox) + sum(len(q.items) for q in list(self._queues.values()))
        fed = self.sub.dropped if self.sub is not None else 0
        return {"queued": queued, "in_flight": self.in_flight, "dropped": self.dropped + fed,
                "delivered": self.delivered, "failed": self.failed, "refused": self.refused}

    # -------------------------------------------------------- delivery thread
    def _start_thread(self) -> None:
        if self.thread is not None:
            return
        started = threading.Event()
        self.thread = threading.Thread(target=self._thread_main, args=(started,),
                                       name="jobgate-webhooks", daemon=True)
        self.thread.start()
        started.wait(10)

    def _thread_main(self, started: threading.Event) -> None:
        asyncio.run(self._main(started))

    async def _main(self, started: threading.Event) -> None:
        import httpx
        self.dloop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
        async with httpx.AsyncClient(follow_redirects=False, trust_env=False,
                                     limits=limits) as client:
            self.client = client
            started.set()
            await self._stopping.wait()
            for t in [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
                t.cancel()

    def _pump(self) -> None:
        """Move handed-off events into their webhooks' queues and start senders."""
        self._wake_pending = False
        inbox = self.inbox
        qs = self._queues
        while inbox:
            item = inbox.popleft()
            hid = item[0].id
            hq = qs.get(hid)
            if hq is None:
                hq = qs[hid] = _HookQueue()
            if len(hq.items) >= self.queue_size:
                hq.items.popleft()
                if not hq.dropped:   # once per episode (the queue is made anew once idle)
                    log.warning("webhook queue full: dropping the oldest events",
                                extra={"fields": {"webhook": hid,
                                                  "queue_size": self.queue_size}})
                hq.dropped += 1
                self.dropped += 1
            hq.items.append(item)
            if hq.running < self.concurrency:
                hq.running += 1
                self.dloop.create_task(self._sender(hid, hq))

    async def _sender(self, hid: str, hq: _HookQueue) -> None:
        try:
            while hq.items:
                h, name, ev = hq.items.popleft()
                self.in_flight += 1
                try:
                    ok = await self._deliver(h, name, ev)
                finally:
                    self.in_flight -= 1
                self._report(h.id, ok)
        finally:
            hq.running -= 1
            if not hq.running and not hq.items:
                self._queues.pop(hid, None)

    def _report(self, id: str, ok: bool) -> None:
        if ok:
            self.delivered += 1
        else:
            self.failed += 1
        self.outbox.append((id, ok))
        if not self._out_pending:
            self._out_pending = True
            try:
                self.loop.call_soon_threadsafe(self._results)
            except RuntimeError:   # the server's loop is closed: stopping
                pass

    async def _target(self, url: str):
        """(request URL, extra headers, request extensions) for `url`, its host resolved and
        checked (module docstring, SSRF). Raises Refused, or OSError when it does not resolve."""
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if self.allow.allows_host(host):
            return url, {}, {}
        ip = parse_host(host)
        if ip is not None:
            why = address_refused(ip, self.allow)
            if why:
                raise Refused(f"{ip} ({why})")
            return url, {}, {}
        port = parts.port or (443 if parts.scheme == "https" else 80)
        infos = await self.dloop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addrs = []
        for info in infos:
            a = ipaddress.ip_address(info[4][0].split("%")[0])
            why = address_refused(a, self.allow)
            if why:
                raise Refused(f"{host} resolves to {a} ({why})")
            addrs.append(a)
        if not addrs:
            raise OSError(f"{host}: no address")
        a = addrs[0]
        netloc = f"[{a}]" if a.version == 6 else str(a)
        netloc = f"{netloc}:{port}"
        userinfo = parts.netloc.rpartition("@")[0]
        if userinfo:
            netloc = f"{userinfo}@{netloc}"
        hostport = parts.netloc.rpartition("@")[2]
        ext = {"sni_hostname": host} if parts.scheme == "https" else {}
        return (urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, "")),
                {"Host": hostport}, ext)

    async def _deliver(self, h, name: str, ev) -> bool:
        """POST one event to webhook `h` with retries; True on a 2xx answer."""
        import httpx
        body = render(name, ev)
        headers = {"Content-Type": "application/json", "X-Webhook-Event": name,
                   "X-Webhook-Timestamp": str(ev.at_ms)}
        if h.secret:
            headers["X-Webhook-Signature"] = sign(body, h.secret)
        last = None
        for attempt in range(self.max_attempts):
            try:
                url, extra, ext = await self._target(h.url)
                r = await self.client.post(url, content=body, headers={**headers, **extra},
                                           extensions=ext, timeout=self.timeout_s)
                if 200 <= r.status_code < 300:
                    return True
                last = f"HTTP {r.status_code}"
            except Refused as e:
                self.refused += 1
                log.warning("webhook address refused", extra={"fields": {
                    "webhook": h.id, "cause": str(e)}})
                return False
            except (httpx.HTTPError, OSError) as e:
                last = f"{e.__class__.__name__}: {e}"
            if attempt < self.max_attempts - 1:
                await asyncio.sleep(self.retry_delay_s * (attempt + 1))
        log.info("webhook delivery failed", extra={"fields": {
            "webhook": h.id, "event": name, "cause": last}})
        return False
