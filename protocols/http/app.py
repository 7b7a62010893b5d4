"""The `http` listener's aiohttp application: bunqueue 2.9.5's HTTP routes (reference:
dist/infrastructure/server/http.js, httpRouter.js, httpRouteJobs.js,
http-routes/queueJobs.js; golden: tests/data/bunqueue-http-golden.json).

Routing as the reference: OPTIONS answers the CORS preflight (204); `/health`, `/healthz`
(`/live`), `/ready`, `/prometheus` and jobgate's `/metrics` (docs/metrics.md) need no token;
every other path needs `Authorization: Bearer <token>` when tokens are configured (401
`{"ok":false,"error":"Unauthorized"}`), then an unknown path or method is 404
`{"ok":false,"error":"Not found"}`. Replies but the 401 and the 500 carry
`Access-Control-Allow-Origin` (option `http.cors_origins`; none configured: an empty value,
as the reference's default).
"""
from __future__ import annotations

import asyncio
import json
import math
import logging
import resource

from aiohttp import web

log = logging.getLogger("jobgate.http")

#: the app's set of open /ws connections
WEBSOCKETS = web.AppKey("websockets", set)
_PROM_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def reply(data, status: int = 200, cors: str | None = None) -> web.Response:
    """A JSON response as the reference's jsonResponse (compact JSON; the CORS header when
    `cors` is not None)."""
    headers = None if cors is None else {"Access-Control-Allow-Origin": cors}
    return web.Response(body=json.dumps(data, separators=(",", ":")).encode(), status=status,
                        content_type="application/json", headers=headers)


async def _json_body(request, empty_ok: bool):
    """The request's JSON body; {} for an empty one when `empty_ok` (parseJsonBody), None for
    a malformed one (then 400 "Invalid JSON body")."""
    text = (await request.read()).decode("utf-8", "replace")   # as fetch's text()
    if empty_ok and not text.strip():
        return {}
    try:
        return json.loads(text)
    except ValueError:
        return None


def _memory() -> dict:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    mb = round(rss / 1024 / 1024)
    return {"heapUsed": mb, "heapTotal": mb, "rss": mb}


#: s `/stats` and `/prometheus` wait for a shared-mode node's database reads: then `/stats`
#: answers 503 Storage unavailable and `/prometheus` this node's own counts (a Prometheus
#: scrape times out after 10 s by default)
GLOBAL_WAIT_S = 5.0


def build_app(state, hooks) -> web.Application:
    """The aiohttp Application of HttpState `state` (ServeHooks `hooks`)."""
    from protocols.bunqueue.handlers_metrics import node_totals, prometheus_text
    from protocols.bunqueue.handlers_query import counts_of
    from protocols.bunqueue.registry import STORAGE_UNAVAILABLE
    from protocols.bunqueue.info import SPEAKS_VERSION

    from protocols.bunqueue.session import event_dict

    from .state import jsonable

    port = state.port
    cors = {"Access-Control-Allow-Origin": state.cors}

    def creply(data, status: int = 200) -> web.Response:
        # routed replies carry the CORS header (the reference's routeHttpRequest); the
        # 401 and the 500 do not
        return reply(data, status, state.cors)

    def uptime_s() -> int:
        return max(0, (port.clock.wall_ms() - state.started_ms) // 1000)

    def storage_extra() -> dict:
        st = port.storage_state()
        return {"diskFull": False, "error": st["cause"], "since": st["since_ms"] or None}

    async def dispatch(request: web.Request) -> web.StreamResponse:
        path, method = request.path, request.method
        if method == "OPTIONS":
            return web.Response(status=204, headers={
                **cors, "Access-Control-Allow-Methods": "GET, POST, PUT, DELETE, OPTIONS",
                "Access-Control-Allow-Headers": "Content-Type, Authorization",
                "Access-Control-Max-Age": "86400"})
        if path == "/health":
            st = port.stats()
            ok = port.storage_state()["available"]
            body = {"ok": ok, "status": "healthy" if ok else "degraded", "uptime": uptime_s(),
                    "version": SPEAKS_VERSION,
                    "queues": {"waiting": st.ready, "active": st.reserved,
                               "delayed": st.delayed, "completed": st.completed,
                               "dlq": st.buried},
                    "connections": {"tcp": 0, "ws": 0, "sse": 0}, "memory": _memory()}
            if not ok:
                body["storage"] = storage_extra()
            return reply(body, 200 if ok else 503, state.cors)
        if path in ("/healthz", "/live"):
            return web.Response(text="OK", headers=cors)
        if path == "/ready":
            # the listener serves only after recovery (gateway/server.py): ready = storage up
            ok = port.storage_state()["available"]
            body = {"ok": ok, "ready": ok}
            if not ok:
                body["storage"] = storage_extra()
            return reply(body, 200 if ok else 503, state.cors)
        if path == "/metrics" and method == "GET" and hooks.metrics is not None:
            body, ctype = await hooks.metrics()   # every dialect's (docs/metrics.md); no token
            return web.Response(body=body, headers={**cors, "Content-Type": ctype})
        if path == "/prometheus" and method == "GET":
            try:   # shared mode: every node's counts, unless the database does not answer
                r = await asyncio.wait_for(run(None, {"cmd": "Prometheus"}), GLOBAL_WAIT_S)
            except asyncio.TimeoutError:
                r = None
            if r is None or r.get("ok") is not True:   # then this node's own counts
                r = {"data": {"metrics": prometheus_text(state.info, port)}}
            return web.Response(body=r["data"]["metrics"].encode(),
                                headers={**cors, "Content-Type": _PROM_TYPE})
        ok, principal = state.principal(request.headers.get("Authorization"))
        if not ok:
            return reply({"ok": False, "error": "Unauthorized"}, 401)
        if path == "/ws" or path.startswith("/ws/queues/"):
            return await websocket(request, path, principal)
        try:
            return await route(request, path, method, principal)
        except web.HTTPException:
            raise
        except Exception as e:   # as the reference: 500 with the error's text
            log.exception("http request failed")
            return reply({"ok": False, "error": str(e) or e.__class__.__name__}, 500)

    late: dict = {}   # reqId -> future of a command answering later
    sockets: set = set()   # open /ws connections (closed first when the server stops)

    def on_late(rid, r, need):
        fut = late.pop(rid, None)
        if fut is not None and not fut.done():
            fut.set_result((r, need))
    state.on_late = on_late

    async def run(principal, cmd):
        r, rid, need = state.start(principal, cmd)
        if r is None:
            fut = asyncio.get_running_loop().create_future()
            late[rid] = fut
            try:
                r, need = await fut
            finally:
                late.pop(rid, None)
                state.forget(rid)
        if need:
            await hooks.wait_durable()
        return r

    async def route(request, path, method, principal):
        parts = path.split("/")[1:]
        if path == "/stats" and method == "GET":
            try:   # shared mode: read from the database, which may not answer
                r = await asyncio.wait_for(stats(principal), GLOBAL_WAIT_S)
                return creply(r, 200 if r["ok"] else 503)
            except asyncio.TimeoutError:
                return creply({"ok": False, "error": STORAGE_UNAVAILABLE}, 503)
        if len(parts) == 3 and parts[0] == "queues" and parts[2] == "jobs" and parts[1]:
            from urllib.parse import unquote
            queue = unquote(parts[1])
            if method == "POST":
                body = await _json_body(request, empty_ok=False)
                if not isinstance(body, dict):
                    return creply({"ok": False, "error": "Invalid JSON body"}, 400)
                cmd = {"cmd": "PUSH", "queue": queue,
                       "name": body["name"] if isinstance(body.get("name"), str) else "default"}
                for k in _PUSH_KEYS:
                    if k in body:
                        cmd[k] = body[k]
                if "maxAttempts" not in body and "attempts" in body:
                    cmd["maxAttempts"] = body["attempts"]
                r = await run(principal, cmd)
                return creply(r, 200 if r.get("ok") else 400)
            if method == "GET":
                try:
                    timeout = int(request.query.get("timeout", "0"))
                except ValueError:
                    timeout = 0   # parseInt of junk is NaN: no wait
                return creply(await run(principal, {"cmd": "PULL", "queue": queue,
                                                   "timeout": max(0, timeout)}))
        if len(parts) in (2, 3) and parts[0] == "jobs" and parts[1]:
            jid = parts[1]
            if len(parts) == 2 and method == "GET":
                r = await run(principal, {"cmd": "GetJob", "id": jid})
                return creply(r, 200 if r.get("ok") else 404)
            if len(parts) == 3 and method == "POST" and parts[2] in ("ack", "fail"):
                body = await _json_body(request, empty_ok=True)
                if not isinstance(body, dict):
                    return creply({"ok": False, "error": "Invalid JSON body"}, 400)
                if parts[2] == "ack":
                    cmd = {"cmd": "ACK", "id": jid}
                    keys = ("result", "token")
                else:
                    cmd = {"cmd": "FAIL", "id": jid}
                    keys = ("error", "token", "unrecoverable", "stack")
                for k in keys:
                    if k in body:
                        cmd[k] = body[k]
                r = await run(principal, cmd)
                return creply(r, 200 if r.get("ok") else 400)
        return creply({"ok": False, "error": "Not found"}, 404)

    async def websocket(request, path, principal):
        """`/ws` (every queue) or `/ws/queues/:q`: the engine's job events as the reference
        sends them to a client without subscriptions (wsHandler.js broadcast, legacy format):
        one text message per event, JSON.stringify of {eventType, queue, jobId, timestamp[,
        data | error]}. Messages from the client are not answered (see docs/http.md)."""
        from urllib.parse import unquote
        ws = web.WebSocketResponse(heartbeat=120)
        await ws.prepare(request)
        sockets.add(ws)
        wake = asyncio.Event()
        sess = state.event_session(principal, lambda data, _commit: None,
                                   lambda _fn: wake.set())
        queue = unquote(path[len("/ws/queues/"):]) if path.startswith("/ws/queues/") else None
        try:
            sess.subscribe({queue} if queue else set())
        except Exception as e:   # a queue the principal may not use
            await ws.send_str(json.dumps({"ok": False, "error": str(e)}))
            await ws.close()
            sess.close()
            return ws

        async def drain_input():
            async for _ in ws:   # ignored; ends when the client closes
                pass
            wake.set()
        reader = asyncio.ensure_future(drain_input())
        try:
            sub = sess.subscription
            while not ws.closed:
                await wake.wait()
                wake.clear()
                # the subscription's buffer straight to JSON (the bunqueue event object,
                # without the frame's MessagePack round trip)
                for ev in sub.take():
                    e = event_dict(ev)
                    if e is not None:
                        await ws.send_str(json.dumps(jsonable(e), separators=(",", ":")))
        except ConnectionResetError:
            pass
        finally:
            reader.cancel()
            sess.close()
            sockets.discard(ws)
        return ws

    async def stats(principal) -> dict:
        m = (await run(principal, {"cmd": "Metrics"})).get("metrics")
        s = (await run(principal, {"cmd": "Stats"})).get("stats")
        sess = state.session(principal)
        t = {"waiting": 0, "prioritized": 0, "delayed": 0, "active": 0, "waiting-children": 0}
        fut = asyncio.get_running_loop().create_future()
        # every queue's counts: in shared mode every node's (read after the commands above)
        sess.port.job_counts_all_global(lambda x: fut.done() or fut.set_result(x))
        every = await fut
        # the rates: in shared mode each node's total over its own uptime, added up
        fut = asyncio.get_running_loop().create_future()
        node_totals(sess, lambda x: fut.done() or fut.set_result(x))
        totals = await fut
        if isinstance(every, Exception) or isinstance(totals, Exception) or s is None \
                or m is None:
            return {"ok": False, "error": STORAGE_UNAVAILABLE}
        rates = totals[1]
        for jc in every.values():
            c = counts_of(jc)
            for k in t:
                t[k] += c[k]
        return {"ok": True, "stats": {
            "waiting": t["waiting"], "prioritized": t["prioritized"], "delayed": t["delayed"],
            "active": t["active"], "dlq": s["dlq"], "completed": s["completed"],
            "waiting-children": t["waiting-children"],
            "totalPushed": m["totalPushed"], "totalPulled": m["totalPulled"],
            "totalCompleted": m["totalCompleted"], "totalFailed": m["totalFailed"],
            "uptime": s["uptime"], "cronJobs": 0, "cronPending": 0,
            "pushPerSec": s["pushPerSec"], "pullPerSec": s["pullPerSec"],
            "completePerSec": _rate(rates["completed"]),
            "failPerSec": _rate(rates["failed"])},
            "memory": dict(_memory(), external=0, arrayBuffers=0), "collections": {}}

    app = web.Application(client_max_size=64 * 1024 * 1024)
    from .ui import mount as mount_ui   # the web dashboard at /ui (docs/dashboard.md)
    mount_ui(app, state)
    app.router.add_route("*", "/{tail:.*}", dispatch)
    app[WEBSOCKETS] = sockets
    return app


def _rate(per_s: float) -> float:
    """A rate per second as the reference prints it: 2 decimals, an int when whole."""
    r = round(per_s, 2)
    return int(r) if math.isclose(r, int(r)) else r


#: the PUSH fields the reference's POST /queues/:q/jobs passes on (http-routes/queueJobs.js)
_PUSH_KEYS = ("data", "priority", "delay", "maxAttempts", "backoff", "timeout", "jobId",
              "removeOnComplete", "removeOnFail", "durable", "ttl", "uniqueKey", "groupId",
              "dependsOn", "tags", "lifo", "repeat")


#: s that requests in flight may take to finish when the server stops
SHUTDOWN_S = 2.0


class _Server:
    """A running aiohttp listener; `await aclose()` stops it and ends the HTTP sessions."""

    def __init__(self, runner, state) -> None:
        self.runner, self.state = runner, state
        self.accepted = 0
        srv = runner.server
        made = srv.connection_made

        def connection_made(handler, transport):   # counts them (aiohttp keeps no total)
            self.accepted += 1
            made(handler, transport)
        srv.connection_made = connection_made

    def connections(self) -> tuple:
        """(HTTP connections open now, accepted since start): jobgate_connections."""
        srv = self.runner.server
        return (0 if srv is None else len(srv.connections)), self.accepted

    async def aclose(self) -> None:
        for ws in list(self.runner.app[WEBSOCKETS]):
            await ws.close(code=1001, message=b"server stopping")
        await self.runner.cleanup()
        self.state.close()


async def serve(state, sock, hooks):
    """Registration.serve (protocols/contract.py): serve `state`'s app on the bound
    listening socket `sock` (TLS with hooks.ssl_context); returns the server to aclose()."""
    # stopping: requests in flight (a waiting pull) get SHUTDOWN_S, then are cancelled
    runner = web.AppRunner(build_app(state, hooks), access_log=None, handle_signals=False,
                           shutdown_timeout=SHUTDOWN_S)
    await runner.setup()
    site = web.SockSite(runner, sock, ssl_context=hooks.ssl_context)
    await site.start()
    return _Server(runner, state)
