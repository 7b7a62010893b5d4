"""Live updates of the dashboard: Server-Sent Events from the engine's event feed
(docs/dashboard.md, "Live updates").

One Hub per listener holds ONE counting subscription to the feed (port.count_events: events
per (queue, kind), no Event objects built, so an open dashboard costs the engine a dict
increment per event) while at least one browser listens, and none otherwise. Every TICK_S it
takes the counts and sends each browser one small message: events per second (by kind) and
the queues that changed, of the queues its principal may see. Each browser has its own queue
of at most CLIENT_MAX messages; a browser that does not read is skipped (its `overflow`
counted and reported in its next message, upon which the page reloads what it shows), so a
slow browser costs bounded memory and never slows the engine.
"""
from __future__ import annotations

import asyncio
import json

#: s between two messages
TICK_S = 0.25
#: messages waiting for one browser at most
CLIENT_MAX = 16


class Client:
    """One listening browser: `messages` (bounded), `allows(queue)` (its principal)."""

    def __init__(self, allows) -> None:
        self.messages: asyncio.Queue = asyncio.Queue(CLIENT_MAX)
        self.allows = allows
        self.overflow = 0


class Hub:
    """The shared counting subscription and the listening browsers (module docstring).
    `port`: the unscoped core.api.Port."""

    def __init__(self, port) -> None:
        self.port = port
        self.clients: set = set()
        self.sub = None   # the core.events.Counter while someone listens
        self.task = None

    def join(self, allows) -> Client:
        """A new Client (allows: queue name -> bool); starts the subscription if first."""
        c = Client(allows)
        self.clients.add(c)
        if self.sub is None:
            self.sub = self.port.count_events()
            self.task = asyncio.ensure_future(self._run())
        return c

    def leave(self, c: Client) -> None:
        """`c` stopped listening; the last one ends the subscription."""
        self.clients.discard(c)
        if not self.clients:
            self.stop()

    def stop(self) -> None:
        """End the subscription and the ticks (the clients' streams end on their own)."""
        if self.sub is not None:
            self.sub.close()
            self.sub = None
        if self.task is not None:
            self.task.cancel()
            self.task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            self.flush()

    def flush(self) -> None:
        """Take the counts and queue one message per client."""
        sub = self.sub
        if sub is None:
            return
        counts = sub.take()
        now = self.port.clock.wall_ms()
        for c in list(self.clients):
            kinds: dict = {}
            queues = set()
            allows = c.allows
            for (queue, kind), n in counts.items():
                if allows is None or allows(queue):
                    kinds[kind] = kinds.get(kind, 0) + n
                    queues.add(queue)
            msg = {"t": now, "rate": round(sum(kinds.values()) / TICK_S, 1), "kinds": kinds,
                   "queues": sorted(queues), "overflow": c.overflow}
            try:
                c.messages.put_nowait(json.dumps(msg, separators=(",", ":")))
                c.overflow = 0
            except asyncio.QueueFull:
                c.overflow += 1


async def sse(request, hub: Hub, allows, stopping: asyncio.Event):
    """The `text/event-stream` response of one browser: one `data:` line per hub message,
    until the browser goes or the server stops (`stopping`)."""
    from aiohttp import web
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                       "Cache-Control": "no-store",
                                       "X-Accel-Buffering": "no"})
    await resp.prepare(request)
    c = hub.join(allows)
    stop = asyncio.ensure_future(stopping.wait())
    try:
        await resp.write(b"retry: 1000\n\n")
        while not stopping.is_set():
            get = asyncio.ensure_future(c.messages.get())
            done, _ = await asyncio.wait({get, stop}, return_when=asyncio.FIRST_COMPLETED)
            if get not in done:
                get.cancel()
                break
            await resp.write(b"data: " + get.result().encode() + b"\n\n")
    except ConnectionResetError:
        pass
    finally:
        stop.cancel()
        hub.leave(c)
    return resp
