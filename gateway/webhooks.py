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

Where the work runs: in a process of its own (gateway/webhook_worker.py: an asyncio loop with
one httpx.AsyncClient), started when the first webhook is enabled. The server's event loop
only filters the feed's events (a dict lookup and a short list walk per event) and writes them,
one frame per loop turn, to the worker's stdin without blocking; the worker renders the JSON,
signs, resolves, connects, waits and retries. Measured first with a delivery thread in the
server process: a thread busy with HTTP work holds the GIL, and the event loop, which gives it
up at every socket call, waited for it again each time (pull+ack throughput fell to 0.3-0.5x
with 10 webhooks, benchmarks/webhooks_bench.py); a process shares no GIL, and a hanging or
slow receiver cannot reach the server's loop at all. Outcomes come back on the worker's
stdout (read by the loop with add_reader) and update the port's counters.

Bounds: the feed subscription (of the queues the webhooks filter on) holds at most
max(10000, `queue_size`) events (drop-oldest, counted by the feed); the bytes waiting for the
worker's stdin at most OUT_MAX (a frame that does not fit is dropped and its events counted);
in the worker, each webhook queues at most `queue_size` deliveries (the oldest is dropped and
counted when full) and has at most `concurrency` requests in flight. A dead or hanging
receiver therefore costs a bounded amount of memory and one timeout per request, and drops
what it cannot take (stats()). Without an enabled webhook there is no subscription and no
worker: no cost.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import struct
import subprocess
import sys

import msgpack

from core.api import EVENT_KINDS

log = logging.getLogger("jobgate.webhooks")

_LEN = struct.Struct(">I")
#: Bytes of event frames waiting for the worker's stdin at most (then frames are dropped).
OUT_MAX = 16 * 1024 * 1024
_LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


class Delivery:
    """Hands the engine's events to the webhook worker process (see the module docstring).

    `port`: the engine port (used on the server's loop only); `config`: gateway Config (the
    webhook_* settings). `start()` on the server's loop; `stop()` there at shutdown (queued
    deliveries are dropped, as the reference's in-memory ones are at exit).
    `stats()`: {"queued", "in_flight", "dropped", "delivered", "failed", "refused"} (events;
    the worker's counters as last reported, plus what the server dropped before it).
    """

    def __init__(self, port, config) -> None:
        self.port = port
        self.cfg = {"allow": list(config.webhook_allow),
                    "timeout_ms": config.webhook_timeout_ms,
                    "max_attempts": config.webhook_max_attempts,
                    "retry_delay_ms": config.webhook_retry_delay_ms,
                    "queue_size": config.webhook_queue_size,
                    "concurrency": config.webhook_concurrency}
        self.loop = None
        self.sub = None             # feed subscription while a webhook is enabled
        self._version = -1
        self._hooks: list = []      # enabled WebhookViews
        self._targets: dict = {}
        self._draining = False
        self.proc = None            # the worker process
        self._out = bytearray()     # frames waiting for its stdin
        self._writing = False
        self._in = bytearray()
        self.dropped = 0            # events dropped before the worker (stdin backlog full)
        self.worker_stats = {"queued": 0, "in_flight": 0, "dropped": 0, "delivered": 0,
                             "failed": 0, "refused": 0}

    # ------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Begin delivering (call on the server's running loop, after the registrations were
        restored)."""
        self.loop = asyncio.get_running_loop()
        self.port.on_webhooks_changed(self._changed)
        self._changed()

    def stop(self) -> None:
        """Stop delivering: close the subscription and the worker's stdin (it exits), wait a
        little for it, then kill it."""
        if self.sub is not None:
            self.sub.close()
            self.sub = None
        self.port.on_webhooks_changed(None)
        self._end_worker()

    def _end_worker(self) -> None:
        p, self.proc = self.proc, None
        if p is None:
            return
        for fd, remove in ((p.stdin.fileno(), self.loop.remove_writer),
                           (p.stdout.fileno(), self.loop.remove_reader)):
            try:
                remove(fd)
            except (ValueError, OSError):
                pass
        self._writing = False
        self._out.clear()
        self._in.clear()
        for f in (p.stdin, p.stdout):
            try:
                f.close()
            except OSError:
                pass
        try:
            p.wait(2)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def _start_worker(self) -> None:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"]
                                    if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.webhook_worker", json.dumps(self.cfg)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True)
        os.set_blocking(self.proc.stdin.fileno(), False)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.loop.add_reader(self.proc.stdout.fileno(), self._readable)

    # ---------------------------------------------------------- server loop
    def _changed(self) -> None:
        hooks = [h for h in self.port.webhooks() if h.enabled]
        self._hooks = hooks
        self._targets = {}   # (event kind, queue) -> ids of the webhooks that take it
        self._version = self.port.webhooks_version()
        if hooks and self.sub is None:
            self.sub = self.port.subscribe(maxlen=max(10_000, self.cfg["queue_size"]),
                                           notify=self._ready)
        elif not hooks and self.sub is not None:
            self.sub.close()
            self.sub = None
        if self.sub is not None:   # only the queues some webhook filters on (None: all)
            self.sub.set_queues(None if any(h.queue is None for h in hooks)
                                else {h.queue for h in hooks})
        if hooks or self.proc is not None:
            self._send(["hooks", [[h.id, h.url, h.secret] for h in hooks]], 0)

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
        targets = self._targets
        batch = []
        n = 0
        # the worker is OUT_MAX bytes behind: count what is dropped, build and pack nothing
        full = len(self._out) >= OUT_MAX
        for ev in sub.take():
            q = ev.queue
            ids = targets.get((ev.kind, q))
            if ids is None:   # first (kind, queue) since the last registration change
                name = EVENT_KINDS.get(ev.kind)
                ids = () if name is None else tuple(
                    h.id for h in hooks
                    if name in h.events and (h.queue is None or h.queue == q))
                if len(targets) >= 100_000:
                    targets.clear()
                targets[(ev.kind, q)] = ids
            if not ids:
                continue
            if full:
                n += len(ids)
                continue
            name = EVENT_KINDS[ev.kind]
            blob, fmt, extra = None, 0, None
            if name == "job.completed":
                blob, fmt = ev.result, ev.result_fmt
            elif name == "job.failed":
                if ev.detail is not None:
                    blob, fmt = ev.detail
                extra = ev.error
            elif name == "job.progress":
                extra = ev.detail
            batch.append((ids, name, ev.uid, q, ev.at_ms, blob, fmt, extra))
            n += len(ids)
        if full:
            self.dropped += n
        elif batch:
            self._send(["events", batch], n)

    def _send(self, msg, n_events: int) -> None:
        """Queue one frame for the worker's stdin (starting the worker when there is none);
        drop it, counting `n_events`, when OUT_MAX bytes already wait."""
        if self.proc is None:
            self._start_worker()
            if msg[0] != "hooks":
                self._send(["hooks", [[h.id, h.url, h.secret] for h in self._hooks]], 0)
        body = msgpack.packb(msg, use_bin_type=True)
        if n_events and len(self._out) + len(body) > OUT_MAX:
            self.dropped += n_events
            return
        self._out += _LEN.pack(len(body))
        self._out += body
        if not self._writing:   # else the pipe is full: the writer callback goes on
            self._flush()

    def _flush(self) -> None:
        p = self.proc
        if p is None:
            return
        out = self._out
        fd = p.stdin.fileno()
        while out:
            mv = memoryview(out)
            try:
                n = os.write(fd, mv[:1 << 20])   # no copy of the (up to 16 MiB) backlog
            except BlockingIOError:
                break
            except OSError as e:   # the worker died: start a new one with the next frame
                log.error("webhook worker is gone; restarting it",
                          extra={"fields": {"cause": str(e)}})
                self._end_worker()
                return
            finally:
                mv.release()
            del out[:n]
        if out and not self._writing:
            self._writing = True
            self.loop.add_writer(fd, self._flush)
        elif not out and self._writing:
            self._writing = False
            self.loop.remove_writer(fd)

    def _readable(self) -> None:
        p = self.proc
        if p is None:
            return
        try:
            data = os.read(p.stdout.fileno(), 1 << 20)
        except BlockingIOError:
            return
        if not data:
            log.error("webhook worker exited; restarting it with the next event",
                      extra={"fields": {"status": p.poll()}})
            self._end_worker()
            return
        buf = self._in
        buf += data
        port = self.port
        while len(buf) >= 4:
            n = _LEN.unpack_from(buf)[0]
            if len(buf) < 4 + n:
                break
            msg = msgpack.unpackb(bytes(buf[4:4 + n]), raw=False, strict_map_key=False)
            del buf[:4 + n]
            if msg[0] == "done":
                for id, (ok, failed) in msg[1].items():
                    port.webhook_delivered(id, ok, failed)
                self.worker_stats = msg[2]
            elif msg[0] == "stats":
                self.worker_stats = msg[1]
            elif msg[0] == "log":
                log.log(_LEVELS.get(msg[1], logging.INFO), msg[2],
                        extra={"fields": msg[3]})

    def stats(self) -> dict:
        """See the class docstring."""
        s = dict(self.worker_stats)
        s["dropped"] += self.dropped + (self.sub.dropped if self.sub is not None else 0)
        return s
