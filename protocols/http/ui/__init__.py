"""The web dashboard at /ui of the `http` listener (docs/dashboard.md): server-rendered pages
(Jinja2 templates in templates/, a few lines of plain JavaScript and CSS in static/), the
engine port only, live updates over Server-Sent Events from the event feed.

`mount(app, state)` adds it to the listener's aiohttp Application (protocols/http/app.py).
"""
from __future__ import annotations

import asyncio

__all__ = ["mount"]


def mount(app, state) -> None:
    """Serve the dashboard under /ui of aiohttp Application `app` (HttpState `state`)."""
    from .views import Dashboard
    d = Dashboard(state)

    async def startup(_app) -> None:
        d.stopping = asyncio.Event()

    async def shutdown(_app) -> None:   # before requests in flight are awaited: SSE ends
        d.stopping.set()
        d.hub.stop()

    app.on_startup.append(startup)
    app.on_shutdown.append(shutdown)
    app.add_subapp("/ui", d.app())
