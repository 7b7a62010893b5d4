"""The HTTP API steps recorded against the real bunqueue 2.9.5 server and replayed against
jobgate's `http` listener (tests/test_http_api.py; golden: tests/data/bunqueue-http-golden.json,
written by conformance/bunqueue_http_record.py).

A step is (name, method, path, token, body): `token` is "good" (the configured token, TOKEN),
"bad" (a wrong one) or None (no Authorization header); `body` is a JSON value, the raw bytes
of a malformed body, or None. `{job1}`-style markers in a path are the `id` of the named
earlier step's reply (`{pull1}`: the `job.id` of a pull's reply).

`play(client, base)` runs them with an httpx.Client and returns the normalised records
`{name, request, status, content_type, cors (Access-Control-Allow-Origin or null), body}`: volatile values (ids, timestamps, uptime,
memory, version, rates) become markers such as "<id>" and "<ms>" so two servers compare.
"""
from __future__ import annotations

import json

TOKEN = "http-golden-token"

STEPS = [
    ("healthz", "GET", "/healthz", None, None),
    ("health", "GET", "/health", None, None),
    ("ready", "GET", "/ready", None, None),
    ("stats_no_token", "GET", "/stats", None, None),
    ("stats_bad_token", "GET", "/stats", "bad", None),
    ("push_no_token", "POST", "/queues/emails/jobs", None, {"data": {"to": "a"}}),
    ("job1", "POST", "/queues/emails/jobs", "good", {"name": "welcome", "data": {"to": "a@x"}}),
    ("get_job1", "GET", "/jobs/{job1}", "good", None),
    ("pull1", "GET", "/queues/emails/jobs", "good", None),
    ("get_job1_active", "GET", "/jobs/{job1}", "good", None),
    ("ack1", "POST", "/jobs/{job1}/ack", "good", {"result": {"sent": True}}),
    ("get_job1_done", "GET", "/jobs/{job1}", "good", None),
    ("ack1_again", "POST", "/jobs/{job1}/ack", "good", {}),
    ("job2", "POST", "/queues/emails/jobs", "good", {"data": 7, "maxAttempts": 1}),
    ("pull2", "GET", "/queues/emails/jobs", "good", None),
    ("fail2", "POST", "/jobs/{job2}/fail", "good", {"error": "boom"}),
    ("get_job2_failed", "GET", "/jobs/{job2}", "good", None),
    ("pull_empty", "GET", "/queues/emails/jobs", "good", None),
    ("get_unknown", "GET", "/jobs/99999999-no-such", "good", None),
    ("push_bad_json", "POST", "/queues/emails/jobs", "good", b"{not json"),
    ("not_found", "GET", "/no/such/route", "good", None),
    ("stats", "GET", "/stats", "good", None),
]

#: keys whose values differ from run to run (replaced by a marker of their type)
_IDS = {"id", "jobId", "token", "lockToken", "owner", "parentId"}
_MS = {"createdAt", "ts", "startedAt", "completedAt", "runAt", "timestamp", "processedOn",
       "finishedOn", "lastHeartbeat", "stalledAt", "since", "uptime", "expireAt"}


def normalise(v, key=None):
    """A JSON value with its volatile parts replaced: ids -> "<id>", times -> "<ms>", numbers
    under `memory` / `collections` / per-second rates -> "<n>", `version` -> "<version>"."""
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if k in ("memory", "collections"):
                out[k] = "<n>"
            else:
                out[k] = normalise(x, k)
        return out
    if isinstance(v, list):
        return [normalise(x, key) for x in v]
    if v is None or isinstance(v, bool):
        return v
    if key in _IDS:
        return "<id>"
    if key in _MS and isinstance(v, (int, float)):
        return "<ms>"
    if key == "version":
        return "<version>"
    if key is not None and key.endswith("PerSec"):
        return "<n>"
    return v


def play(client, base: str, token: str = TOKEN) -> list:
    """Run STEPS against `base` ("http://127.0.0.1:P") with httpx.Client `client`; the
    normalised records (see the module docstring)."""
    ids: dict = {}
    out = []
    for name, method, path, tok, body in STEPS:
        path = path.format(**ids)
        headers = {}
        if tok == "good":
            headers["Authorization"] = f"Bearer {token}"
        elif tok == "bad":
            headers["Authorization"] = "Bearer wrong-token"
        if isinstance(body, bytes):
            content = body
            headers["Content-Type"] = "application/json"
        elif body is not None:
            content = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        else:
            content = None
        r = client.request(method, base + path, headers=headers, content=content)
        ctype = r.headers.get("content-type", "")
        text = r.text
        for v in ids.values():   # ids quoted in error texts
            text = text.replace(str(v), "<id>")
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = text
        if isinstance(parsed, dict):   # the ids before the replacement
            try:
                raw = r.json()
            except ValueError:
                raw = {}
            if isinstance(raw, dict) and isinstance(raw.get("id"), str):
                ids[name] = raw["id"]
            if isinstance(raw, dict) and isinstance(raw.get("job"), dict):
                ids[name] = raw["job"].get("id")
        out.append({"name": name, "request": {"method": method, "path": path_template(name),
                                              "auth": tok, "body": body if not isinstance(
                                                  body, bytes) else body.decode()},
                    "status": r.status_code, "content_type": ctype.split(";")[0].strip(),
                    "cors": r.headers.get("access-control-allow-origin"),
                    "body": normalise(parsed)})
    return out


def path_template(name: str) -> str:
    """The path of step `name` as written in STEPS (markers unresolved)."""
    for s in STEPS:
        if s[0] == name:
            return s[2]
    raise KeyError(name)


def play_ws(base: str, token: str = TOKEN) -> list:
    """Open `/ws/queues/mine` (Bearer `token`), push a job to `other` and one to `mine`,
    pull and ack the latter over HTTP; the normalised JSON messages received within 2 s of
    the last one (the reference's legacy event format: wsHandler.js broadcast)."""
    import asyncio

    import aiohttp
    import httpx
    h = {"Authorization": f"Bearer {token}"}

    def act():
        with httpx.Client(base_url=base, headers=h, timeout=10) as c:
            c.post("/queues/other/jobs", json={"data": 1})
            jid = c.post("/queues/mine/jobs", json={"data": 2}).json()["id"]
            c.get("/queues/mine/jobs")
            c.post(f"/jobs/{jid}/ack", json={"result": {"r": 1}})

    async def main():
        out = []
        async with aiohttp.ClientSession() as cs:
            async with cs.ws_connect(base + "/ws/queues/mine", headers=h) as ws:
                await asyncio.get_running_loop().run_in_executor(None, act)
                try:
                    while True:
                        m = await asyncio.wait_for(ws.receive(), 2)
                        if m.type != aiohttp.WSMsgType.TEXT:
                            break
                        out.append(normalise(json.loads(m.data)))
                except asyncio.TimeoutError:
                    pass
        return out
    return asyncio.run(main())
