"""The dashboard's pages and actions (docs/dashboard.md): aiohttp handlers over the engine port.

Routes (all under /ui): `/` overview, `/jobs?queue=&state=&after=|before=|last=1&limit=` a
queue's jobs (`&fragment=1`: the list only, for live refresh), `/job/{id}`, `/fragment/queues`,
`/confirm/{action}` (the confirmation step) and `POST /action/{action}`, `/login`, `/logout`,
`/events` (live.py), `/static/`. Hostile input (an unknown queue or job, a bad id, cursor,
state or limit) answers a 400 / 404 page, never a 500.
"""
from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import urlencode

import jinja2
from aiohttp import web

from core.api import AccessDenied
from core.model import QueueView

from . import present
from .auth import Auth
from .live import Hub, sse


HERE = Path(__file__).parent
#: jobs per page by default / at most
LIMIT, MAX_LIMIT = 50, 500
#: a `before` cursor past every id (the last page)
END = 1 << 63
PAUSE_FOREVER_MS = 100 * 365 * 86_400_000
#: s a page waits for the database's answer in shared mode (then a 503 page)
ANSWER_S = 10
STATES = ("ready", "delayed", "reserved", "buried", "failed", "completed")
#: action -> (what it applies to, confirmation text)
ACTIONS = {
    "pause": ("queue", "Pause queue {queue}: no job is reserved from it until it is resumed."),
    "resume": ("queue", "Resume queue {queue}."),
    "drain": ("queue", "Drain queue {queue}: delete all its ready and delayed jobs."),
    "kick": ("job", "Kick job {id} back to ready."),
    "retry": ("job", "Retry job {id}: back to ready, its result cleared."),
    "promote": ("job", "Promote delayed job {id} to ready now."),
    "delete": ("job", "Delete job {id} for good."),
}
_DIALECT = "http"   # the history's dialect of actions taken here


class Problem(Exception):
    """A request the dashboard refuses: `status` (400, 403, 404) and a message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def _answer(start):
    """The answer of a port operation's callback form, `start(callback)`: at once on a single
    server, later in shared mode (the database's). A database error, or no answer within
    ANSWER_S seconds, is a 503 page."""
    fut = asyncio.get_running_loop().create_future()

    def got(x) -> None:
        if not fut.done():
            fut.set_result(x)
    start(got)
    try:
        x = await asyncio.wait_for(asyncio.shield(fut), ANSWER_S)
    except asyncio.TimeoutError:   # the node cannot commit (storage down): no reads wait
        raise Problem(503, "the database is unavailable") from None
    if isinstance(x, Exception) and not isinstance(x, Problem):
        raise Problem(503, "the database is unavailable")
    return x


def _see_other(location: str) -> web.Response:
    return web.Response(status=303, headers={"Location": location})


def _int(v, what: str, lo: int = 0, hi: int = END) -> int:
    """`v` (a query or form str) as an int in [lo, hi], else Problem 400."""
    if v is None or not (v.isascii() and v.isdigit()) or len(v) > 19 or not lo <= int(v) <= hi:
        raise Problem(400, f"bad {what}: {v!r}"[:200])
    return int(v)


class Dashboard:
    """The dashboard of one HTTP listener. `state`: its HttpState (port, access)."""

    def __init__(self, state) -> None:
        self.state = state
        self.port = state.port
        self.auth = Auth(state)
        self.hub = Hub(state.port)
        self.stopping = None   # asyncio.Event, made on the loop (startup)
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(HERE / "templates")),
            autoescape=True, trim_blocks=True, lstrip_blocks=True)
        self.env.globals["qs"] = lambda **kw: urlencode(
            {k: v for k, v in kw.items() if v is not None and v != ""})

    # ------------------------------------------------------------------ plumbing
    def render(self, name: str, status: int = 200, **ctx) -> web.Response:
        ctx.setdefault("open", self.auth.open)
        html = self.env.get_template(name).render(**ctx)
        return web.Response(text=html, status=status, content_type="text/html",
                            headers={"Cache-Control": "no-store",
                                     "X-Frame-Options": "DENY",
                                     "Content-Security-Policy":
                                         "default-src 'self'; style-src 'self'; "
                                         "script-src 'self'; frame-ancestors 'none'"})

    @web.middleware
    async def guard(self, request: web.Request, handler):
        """Login, origin check for POSTs, scoped port, and errors as pages."""
        path = request.path
        if path.startswith("/ui/static/") or path in ("/ui/login",):
            return await handler(request)
        ok, principal = self.auth.principal(request)
        if not ok:
            if path.startswith(("/ui/events", "/ui/fragment")) or request.query.get("fragment"):
                return web.Response(status=401, text="login needed")
            raise web.HTTPSeeOther("/ui/login")
        if request.method == "POST" and not self.auth.same_origin(request):
            return self.render("error.html", 403, message="cross-origin request refused")
        request["principal"] = principal
        request["port"] = self.port.scoped(principal)
        try:
            return await handler(request)
        except Problem as p:
            return self.render("error.html", p.status, message=str(p))
        except AccessDenied as e:
            return self.render("error.html", 403, message=f"access denied: queue {e}")

    async def home(self, request):
        raise web.HTTPSeeOther("/ui/")

    # ------------------------------------------------------------------ login
    async def login_form(self, request):
        if self.auth.open:
            raise web.HTTPSeeOther("/ui/")
        return self.render("login.html", error=None)

    async def login(self, request):
        if not self.auth.same_origin(request):
            return self.render("error.html", 403, message="cross-origin request refused")
        form = await request.post()
        token = str(form.get("token", ""))
        if not self.auth.check_token(token):
            return self.render("login.html", 401, error="wrong token")
        resp = _see_other("/ui/")
        self.auth.set_cookie(resp, token, request.secure)
        return resp

    async def logout(self, request):
        resp = _see_other("/ui/login" if not self.auth.open else "/ui/")
        self.auth.clear_cookie(resp)
        return resp

    # ------------------------------------------------------------------ pages
    async def queue_rows(self, port) -> list:
        """The overview's rows: every queue with its counts and failed jobs (in shared mode
        every node's: docs/dashboard.md "Several nodes")."""
        views = await _answer(port.queue_views_global)
        failed = await _answer(port.failed_counts_global)
        return [{"q": qv, "failed": failed.get(qv.name, 0)} for qv in views]

    async def overview(self, request):
        port = request["port"]
        return self.render("overview.html", queues=await self.queue_rows(port),
                           stats=await _answer(self.port.stats_global))

    async def queues_fragment(self, request):
        return self.render("_queues.html", queues=await self.queue_rows(request["port"]))

    async def jobs(self, request):
        port = request["port"]
        q = request.query
        name = q.get("queue")
        if not name:
            raise Problem(400, "no queue named")
        if "\x00" in name:   # no dialect makes such a name (PostgreSQL cannot store one)
            raise Problem(404, f"no queue {name!r}"[:200])
        state = q.get("state") or None
        if state is not None and state not in STATES:
            raise Problem(400, f"unknown state {state!r}"[:200])
        limit = _int(q["limit"], "limit", 1, MAX_LIMIT) if q.get("limit") else LIMIT
        after = _int(q["after"], "after cursor") if q.get("after") else None
        before = _int(q["before"], "before cursor") if q.get("before") else None
        if q.get("last"):
            if after is not None or before is not None:
                raise Problem(400, "last with a cursor")
            before = END
        if after is not None and before is not None:
            raise Problem(400, "both after and before")
        qv = await _answer(lambda cb: port.queue_global(name, cb))
        if qv is None and port.shared:
            # a tube another node knows only by its clients' connections: no jobs anywhere
            qv = QueueView(name, *(0,) * 13, False, 0, 0, False, False)
        if qv is None:
            raise Problem(404, f"no queue {name!r}"[:200])

        def page_of(a, b):
            return _answer(lambda cb: port.job_page_global(name, state, a, b, limit, cb))
        page = await page_of(after, before)
        if page is None and port.shared:
            page = ([], False, False)
        if page is None:
            raise Problem(404, f"no queue {name!r}"[:200])
        views, more_before, more_after = page
        if before is not None and not more_before and len(views) < limit:
            views, more_before, more_after = await page_of(None, None)
        elif after is not None and not views and more_before:
            views, more_before, more_after = await page_of(None, END)
        failed = (await _answer(port.failed_counts_global)).get(name, 0)
        ctx = dict(queue=qv, failed=failed, state=state or "", limit=limit,
                   rows=[present.row(v) for v in views], more_before=more_before,
                   more_after=more_after, states=STATES,
                   first_id=views[0].id if views else None,
                   last_id=views[-1].id if views else None,
                   cursor={"after": q.get("after"), "before": q.get("before"),
                           "last": q.get("last")},
                   back=request.path_qs)
        if q.get("fragment"):
            return self.render("_jobs.html", **ctx)
        return self.render("jobs.html", **ctx)

    async def job(self, request):
        port = request["port"]
        jid = _int(request.match_info["id"], "job id", 1)
        view = await _answer(lambda cb: port.job_global(jid, cb))
        if view is None:
            raise Problem(404, f"no job {jid}")
        d = present.detail(view)
        return self.render("job.html", back=request.path_qs, **d)

    async def events(self, request):
        p = request["principal"]
        allows = None if p is None else p.allows
        return await sse(request, self.hub, allows, self.stopping)

    # ------------------------------------------------------------------ actions
    async def _target(self, port, action: str, data) -> dict:
        if action not in ACTIONS:
            raise Problem(404, f"no action {action!r}"[:200])
        kind, text = ACTIONS[action]
        back = data.get("back") or "/ui/"
        if not back.startswith("/ui/") or back.startswith("/ui//"):
            back = "/ui/"
        if kind == "queue":
            name = data.get("queue")
            if not name or "\x00" in name or \
                    await _answer(lambda cb: port.queue_global(name, cb)) is None:
                raise Problem(404, f"no queue {name!r}"[:200])
            return {"action": action, "queue": name, "id": None, "back": back,
                    "text": text.format(queue=name)}
        jid = _int(data.get("id"), "job id", 1)
        view = await _answer(lambda cb: port.job_global(jid, cb))
        if view is None:
            raise Problem(404, f"no job {jid}")
        return {"action": action, "queue": view.queue, "id": jid, "back": back,
                "text": text.format(id=jid), "job": view}

    async def confirm(self, request):
        t = await self._target(request["port"], request.match_info["action"], request.query)
        t.pop("job", None)
        return self.render("confirm.html", **t)

    async def act(self, request):
        port = request["port"]
        form = await request.post()
        t = await self._target(port, request.match_info["action"], form)
        if form.get("confirm") != "yes":
            raise Problem(400, "not confirmed")
        a, name = t["action"], t["queue"]
        if a == "pause":
            port.keep(name)
            if port.shared:   # every node's reservers pause (docs/mapping.md "Shared mode")
                await _answer(lambda cb: port.pause_global(name, PAUSE_FOREVER_MS, cb))
            else:
                port.pause(name, PAUSE_FOREVER_MS)
        elif a == "resume":
            if port.shared:
                await _answer(lambda cb: port.pause_global(name, 0, cb))
                port.keep(name, False)
            elif port.pause(name, 0):
                port.keep(name, False)
        elif a == "drain":
            await _answer(lambda cb: port.drain_global(name, _DIALECT, cb))
        elif port.shared and port.job(t["id"]) is None:
            await self._remote_job_action(port, a, t["id"])
        else:
            self._job_action(port, a, t["job"])
        raise web.HTTPSeeOther(t["back"] if a != "delete" or "/ui/job/" not in t["back"]
                               else "/ui/jobs?" + urlencode({"queue": name}))

    async def _remote_job_action(self, port, a: str, jid: int) -> None:
        """Shared mode: job `jid` is in the database; it is taken into this node and changed
        here at once (in the same callback: the node gives it back at its next commit), as
        beanstalk `reserve-job` does. A job another node holds (reserved there) cannot be
        changed from here: 409."""
        def start(cb):
            def reached(held) -> None:
                if isinstance(held, Exception):
                    cb(held)
                    return
                job = port.job(jid)
                if held or job is None:
                    cb(Problem(409, f"job {jid} is held by another node"))
                    return
                try:
                    self._job_action(port, a, job)
                except Problem as p:
                    cb(p)
                    return
                cb(None)
            port.reach_ids([jid], reached)
        problem = await _answer(start)
        if problem is not None:
            raise problem

    @staticmethod
    def _job_action(port, a: str, job) -> None:
        st = present.label(job)
        if a == "delete":
            ok = port.remove(job.id, _DIALECT, "delete")
        elif a == "kick":
            ok = st in ("buried", "failed", "delayed") and port.kick_job(job.id, _DIALECT)
        elif a == "promote":
            ok = st == "delayed" and port.requeue(job.id, 0, "promote", _DIALECT)
        else:   # retry: a failed or completed job starts over
            ok = st in ("failed", "completed") and port.requeue(
                job.id, 0, "retry", _DIALECT, None,
                ("failedReason", "stacktrace", "dlqReason", "dlqAt", "completedAt"),
                reset_fails=True)
        if not ok:
            raise Problem(409, f"cannot {a} job {job.id} ({st})")

    # ------------------------------------------------------------------ wiring
    def app(self) -> web.Application:
        """The /ui sub-application."""
        app = web.Application(middlewares=[self.guard])
        r = app.router
        r.add_get("", self.home)
        r.add_get("/", self.overview)
        r.add_get("/login", self.login_form)
        r.add_post("/login", self.login)
        r.add_post("/logout", self.logout)
        r.add_get("/fragment/queues", self.queues_fragment)
        r.add_get("/jobs", self.jobs)
        r.add_get("/job/{id}", self.job)
        r.add_get("/confirm/{action}", self.confirm)
        r.add_post("/action/{action}", self.act)
        r.add_get("/events", self.events)
        r.add_static("/static", str(HERE / "static"))
        return app
