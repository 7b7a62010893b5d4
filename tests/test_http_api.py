"""The `http` listener (protocols/http, docs/http.md): bunqueue 2.9.5's HTTP API over the
canonical engine, on real sockets with httpx, SQLite files and a greenstalk client.

- every step of tests/data/bunqueue-http-golden.json (recorded against the real bunqueue
  server by conformance/bunqueue_http_record.py) answers with the reference's status, content
  type and normalised body;
- Bearer tokens: the bunqueue listener's tokens; 401 without or with a wrong one, the probes
  open; no tokens configured: no Authorization needed;
- a job POSTed over HTTP is reserved by a beanstalk worker, and a beanstalk job is seen,
  pulled and acked over HTTP; a waiting pull is answered by a beanstalk put;
- /ready and /health answer 503 while storage is unavailable;
- hostile input: malformed and non-object JSON, odd paths and methods, a junk timeout;
- `/ws`: the engine's job events (every dialect's) as the reference's legacy messages
  (golden "ws"), per queue with `/ws/queues/:q`, behind the token.
"""
from __future__ import annotations

import json
import threading
from pathlib import Path

import greenstalk
import httpx
import pytest

from conformance.bunqueue_http import TOKEN, play, play_ws
from gateway.config import Listener

from .inproc import InProcServer
from .support import ROOT

GOLDEN = json.loads((Path(ROOT) / "tests" / "data" / "bunqueue-http-golden.json").read_text())
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def derived_uid(beanstalk_id: int) -> str:
    """The bunqueue id of beanstalk job `beanstalk_id` (docs/mapping.md)."""
    return f"6a6f6267-6174-4000-8000-{beanstalk_id:012x}"


def _server(tmp_path, tokens=(TOKEN,)) -> InProcServer:
    return InProcServer(f"sqlite:///{tmp_path / 'jobgate.db'}",
                        bunqueue={"auth_tokens": list(tokens)},
                        listeners=[Listener("beanstalk", "127.0.0.1", 0, open=True),
                                   Listener("http", "127.0.0.1", 0)])


@pytest.fixture
def srv(tmp_path):
    s = _server(tmp_path)
    yield s
    s.stop()


@pytest.fixture
def http(srv):
    with httpx.Client(base_url=f"http://127.0.0.1:{srv.ports['http']}", timeout=10) as c:
        yield c


@pytest.fixture
def gs(srv):
    clients = []

    def make(tube: str) -> greenstalk.Client:
        c = greenstalk.Client(("127.0.0.1", srv.ports["beanstalk"]), encoding=None, use=tube,
                             watch=tube)
        clients.append(c)
        return c
    yield make
    for c in clients:
        c.close()


# ------------------------------------------------------------------ golden
@pytest.fixture(scope="module")
def played(tmp_path_factory):
    s = _server(tmp_path_factory.mktemp("golden"))
    try:
        with httpx.Client(timeout=10) as c:
            return {r["name"]: r for r in play(c, f"http://127.0.0.1:{s.ports['http']}")}
    finally:
        s.stop()


@pytest.mark.parametrize("step", GOLDEN["steps"], ids=lambda s: s["name"])
def test_endpoint_answers_as_the_reference(played, step):
    got = played[step["name"]]
    assert (got["status"], got["content_type"]) == (step["status"], step["content_type"])
    assert got["cors"] == step["cors"]
    assert got["body"] == step["body"]


def test_golden_covers_every_endpoint_of_item_1():
    paths = {(s["request"]["method"], s["request"]["path"]) for s in GOLDEN["steps"]}
    for want in [("GET", "/health"), ("GET", "/healthz"), ("GET", "/ready"), ("GET", "/stats"),
                 ("POST", "/queues/emails/jobs"), ("GET", "/queues/emails/jobs"),
                 ("GET", "/jobs/{job1}"), ("POST", "/jobs/{job1}/ack"),
                 ("POST", "/jobs/{job2}/fail")]:
        assert want in paths


def test_prometheus_is_open_and_text(http):
    r = http.get("/prometheus")
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "\nbunqueue_jobs_waiting " in "\n" + r.text


# ------------------------------------------------------------------ auth
@pytest.mark.parametrize("method,path", [("GET", "/stats"), ("POST", "/queues/q/jobs"),
                                         ("GET", "/queues/q/jobs"), ("GET", "/jobs/1"),
                                         ("POST", "/jobs/1/ack"), ("POST", "/jobs/1/fail"),
                                         ("GET", "/no/such/route")])
@pytest.mark.parametrize("header", [None, "Bearer nope", "Basic " + TOKEN, TOKEN + "x", ""])
def test_refused_without_the_token(http, method, path, header):
    h = {} if header is None else {"Authorization": header}
    r = http.request(method, path, headers=h, content=b'{"data": 1}')
    assert r.status_code == 401
    assert r.json() == {"ok": False, "error": "Unauthorized"}


def test_token_without_bearer_prefix_is_accepted_as_the_reference(http):
    # the reference strips "Bearer " when present and compares the rest (http.js checkAuth)
    assert http.get("/stats", headers={"Authorization": TOKEN}).status_code == 200


def test_refused_request_changes_nothing(http, gs):
    http.post("/queues/guarded/jobs", json={"data": "x"}, headers={"Authorization": "Bearer n"})
    with pytest.raises(greenstalk.TimedOutError):
        gs("guarded").reserve(timeout=0)


@pytest.mark.parametrize("path", ["/health", "/healthz", "/live", "/ready", "/prometheus"])
def test_probes_need_no_token(http, path):
    assert http.get(path).status_code == 200


def test_open_server_needs_no_token(tmp_path):
    s = InProcServer(f"sqlite:///{tmp_path / 'open.db'}", dialects=("http",))
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{s.ports['http']}") as c:
            r = c.post("/queues/q/jobs", json={"data": "x"})
            assert r.status_code == 200 and r.json()["ok"] is True
            assert c.get("/stats").json()["stats"]["waiting"] == 1
    finally:
        s.stop()


# ------------------------------------------------------------------ across dialects
def test_job_posted_over_http_is_reserved_over_beanstalk(http, gs):
    r = http.post("/queues/mail/jobs", json={"data": "hello", "priority": 5}, headers=AUTH)
    assert r.status_code == 200
    jid = r.json()["id"]
    g = gs("mail")
    job = g.reserve(timeout=2)
    assert job.body == b"hello"
    j = http.get(f"/jobs/{jid}", headers=AUTH).json()["job"]
    assert j["queue"] == "mail" and j["priority"] == 5
    assert http.get("/stats", headers=AUTH).json()["stats"]["active"] == 1   # beanstalk holds it
    g.delete(job)
    assert http.get(f"/jobs/{jid}", headers=AUTH).status_code == 404


def test_beanstalk_job_is_seen_pulled_and_acked_over_http(http, gs):
    g = gs("work")
    bid = g.put(b"payload", priority=10)
    uid = derived_uid(bid)
    got = http.get(f"/jobs/{uid}", headers=AUTH)
    assert got.status_code == 200 and got.json()["job"]["data"] == "payload"
    pulled = http.get("/queues/work/jobs", headers=AUTH).json()
    assert pulled["ok"] is True and pulled["job"]["id"] == uid
    assert g.stats_job(bid)["state"] == "reserved"
    assert http.post(f"/jobs/{uid}/ack", json={"result": 1}, headers=AUTH).json() == {"ok": True}
    with pytest.raises(greenstalk.NotFoundError):
        g.stats_job(bid)


def test_beanstalk_job_failed_over_http_is_buried(http, gs):
    g = gs("fails")
    bid = g.put(b"x")
    uid = derived_uid(bid)
    http.get("/queues/fails/jobs", headers=AUTH)
    r = http.post(f"/jobs/{uid}/fail", json={"error": "boom"}, headers=AUTH)
    assert r.status_code == 200
    # a beanstalk job has one attempt: failed, it is in the DLQ (buried for beanstalk)
    assert g.stats_job(bid)["state"] == "buried"


def test_waiting_pull_is_answered_by_a_beanstalk_put(http, gs):
    out = {}

    def pull():
        out["r"] = http.get("/queues/later/jobs", params={"timeout": 10000}, headers=AUTH)
    t = threading.Thread(target=pull)
    t.start()
    gs("later").put(b"late job")
    t.join(15)
    assert not t.is_alive()
    assert out["r"].status_code == 200 and out["r"].json()["job"]["data"] == "late job"


# ------------------------------------------------------------------ readiness
def test_ready_and_health_follow_storage(srv, http):
    assert http.get("/ready").json() == {"ok": True, "ready": True}
    srv.call(lambda: srv.port.set_storage_state("disk I/O error"))
    try:
        r = http.get("/ready")
        assert r.status_code == 503
        body = r.json()
        assert body["ok"] is False and body["ready"] is False
        assert body["storage"]["error"] == "disk I/O error"
        h = http.get("/health")
        assert h.status_code == 503 and h.json()["status"] == "degraded"
        # a mutation is refused while storage is down (not run)
        p = http.post("/queues/q/jobs", json={"data": 1}, headers=AUTH)
        assert p.status_code == 400 and p.json()["ok"] is False
    finally:
        srv.call(lambda: srv.port.set_storage_state(None))
    assert http.get("/ready").status_code == 200


# ------------------------------------------------------------------ hostile input
@pytest.mark.parametrize("body", [b"", b"{", b"[1,2]", b"null", b"42", b"\xff\xfe",
                                  b'"str"'])
def test_push_with_a_bad_body_is_400(http, body):
    r = http.post("/queues/q/jobs", content=body, headers=AUTH)
    assert r.status_code == 400
    assert r.json() == {"ok": False, "error": "Invalid JSON body"}


@pytest.mark.parametrize("path", ["/queues//jobs", "/jobs/", "/jobs/1/ack/x", "/queues/q/jobz",
                                  "/%2e%2e/stats", "/stats/"])
def test_unknown_paths_are_404(http, path):
    r = http.get(path, headers=AUTH)
    assert r.status_code == 404 and r.json() == {"ok": False, "error": "Not found"}


def test_wrong_method_is_404(http):
    assert http.delete("/stats", headers=AUTH).status_code == 404
    assert http.put("/queues/q/jobs", headers=AUTH).status_code == 404


def test_junk_timeout_and_bad_queue_name(http):
    r = http.get("/queues/q/jobs", params={"timeout": "soon"}, headers=AUTH)
    assert r.status_code == 200 and r.json() == {"ok": True, "job": None}
    r = http.post("/queues/" + "x" * 300 + "/jobs", json={"data": 1}, headers=AUTH)
    assert r.status_code == 400 and r.json()["ok"] is False


def test_ack_with_a_bad_body_is_400_and_the_job_stays_active(http, gs):
    http.post("/queues/acks/jobs", json={"data": "x"}, headers=AUTH)
    jid = http.get("/queues/acks/jobs", headers=AUTH).json()["job"]["id"]
    r = http.post(f"/jobs/{jid}/ack", content=b"{oops", headers=AUTH)
    assert r.status_code == 400 and r.json() == {"ok": False, "error": "Invalid JSON body"}
    assert http.get("/stats", headers=AUTH).json()["stats"]["active"] == 1


def test_cors_preflight(http):
    r = http.options("/queues/q/jobs")
    assert r.status_code == 204
    assert r.headers["access-control-allow-origin"] == ""


def test_cors_origins_option(tmp_path):
    s = InProcServer(None, dialects=("http",), http={"cors_origins": ["https://a.example",
                                                                     "https://b.example"]})
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{s.ports['http']}") as c:
            want = "https://a.example, https://b.example"
            assert c.get("/health").headers["access-control-allow-origin"] == want
            assert c.get("/stats").headers["access-control-allow-origin"] == want
            assert c.options("/stats").headers["access-control-allow-origin"] == want
    finally:
        s.stop()


def test_token_principal_limits_queues_as_on_the_bunqueue_listener(tmp_path):
    access = {"principals": [("token", "tok-a", "a", ("a*",))], "anonymous": ("*",)}
    s = InProcServer(f"sqlite:///{tmp_path / 'acc.db'}", access=access,
                     listeners=[Listener("http", "127.0.0.1", 0)])
    h = {"Authorization": "Bearer tok-a"}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{s.ports['http']}") as c:
            ok = c.post("/queues/alpha/jobs", json={"data": 1}, headers=h)
            assert ok.status_code == 200
            no = c.post("/queues/beta/jobs", json={"data": 1}, headers=h)
            assert no.status_code == 400
            assert no.json() == {"ok": False, "error": "Access denied: queue beta"}
            assert c.get("/stats").status_code == 401
    finally:
        s.stop()



def test_numbers_are_written_as_javascript_writes_them(http):
    # MessagePack carries the times as float64; the reference's JSON has 1795650001007
    jid = http.post("/queues/nums/jobs", json={"data": 1.5}, headers=AUTH).json()["id"]
    text = http.get(f"/jobs/{jid}", headers=AUTH).text
    created = text.split('"createdAt":', 1)[1].split(",", 1)[0]
    assert created.isdigit()
    assert '"data":1.5' in text and '"priority":0,' in text


# ------------------------------------------------------------------ /ws
def _ws_events(srv, path: str, headers: dict, act, n: int) -> list:
    """Open websocket `path`, run `act()` (on a thread: it uses blocking clients), return the
    first `n` JSON messages (10 s at most)."""
    import asyncio

    import aiohttp

    async def main():
        async with aiohttp.ClientSession() as cs:
            async with cs.ws_connect(f"http://127.0.0.1:{srv.ports['http']}{path}",
                                     headers=headers) as ws:
                await asyncio.get_running_loop().run_in_executor(None, act)
                out = []
                while len(out) < n:
                    msg = await asyncio.wait_for(ws.receive(), 10)
                    out.append(json.loads(msg.data))
                return out
    return asyncio.run(main())


def test_ws_streams_job_events_of_every_dialect(srv, http, gs):
    ids = {}

    def act():
        ids["b"] = derived_uid(gs("wsq").put(b"from beanstalk"))
        ids["h"] = http.post("/queues/wsq/jobs", json={"data": 1}, headers=AUTH).json()["id"]
    got = _ws_events(srv, "/ws", AUTH, act, 2)
    assert [(e["queue"], e["jobId"]) for e in got] == [("wsq", ids["b"]), ("wsq", ids["h"])]
    assert all(e["eventType"] == "pushed" and isinstance(e["timestamp"], int) for e in got)


def test_ws_queue_filter_and_completion(srv, http, gs):
    def act():
        http.post("/queues/other/jobs", json={"data": 1}, headers=AUTH)
        jid = http.post("/queues/mine/jobs", json={"data": 2}, headers=AUTH).json()["id"]
        http.get("/queues/mine/jobs", headers=AUTH)
        http.post(f"/jobs/{jid}/ack", json={"result": {"r": 1}}, headers=AUTH)
    got = _ws_events(srv, "/ws/queues/mine", AUTH, act, 3)
    assert {e["queue"] for e in got} == {"mine"}
    assert [e["eventType"] for e in got] == ["pushed", "pulled", "completed"]
    assert got[-1]["data"] == {"r": 1}


def test_ws_answers_as_the_reference(tmp_path):
    s = _server(tmp_path)
    try:
        assert play_ws(f"http://127.0.0.1:{s.ports['http']}") == GOLDEN["ws"]
    finally:
        s.stop()


def test_ws_needs_the_token(http):
    r = http.get("/ws", headers={"Connection": "Upgrade", "Upgrade": "websocket"})
    assert r.status_code == 401 and r.json() == {"ok": False, "error": "Unauthorized"}


def test_stopping_closes_open_websockets_and_waiting_pulls(tmp_path):
    import asyncio

    import aiohttp
    s = _server(tmp_path)
    base = f"http://127.0.0.1:{s.ports['http']}"
    out = {}

    def pull():
        try:
            out["pull"] = httpx.get(base + "/queues/none/jobs", params={"timeout": 60000},
                                    headers=AUTH, timeout=30).status_code
        except httpx.HTTPError as e:
            out["pull"] = type(e).__name__
    t = threading.Thread(target=pull)
    t.start()

    async def main():
        async with aiohttp.ClientSession() as cs:
            async with cs.ws_connect(base + "/ws", headers=AUTH) as ws:
                await asyncio.get_running_loop().run_in_executor(None, s.stop)
                msg = await asyncio.wait_for(ws.receive(), 10)
                return msg.type, msg.data
    kind, code = asyncio.run(main())
    t.join(30)
    assert kind in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED) and code == 1001
    assert not t.is_alive() and "pull" in out
