"""Real Redis/Valkey clients against jobgate's glidemq listener (issue 17; docs/glide-mq.md).

- redis-py: the seed's "Python Example" (glide-mq-wire-protocol.txt) runs UNCHANGED (only host
  and port differ), in RESP2 and with `protocol=3`, after the library was loaded the way the
  spec's Option B says (`FUNCTION LOAD REPLACE "#!lua name=glidemq\\n..."`; jobgate accepts a
  stand-in text and never runs it).
- valkey-glide (PyPI `valkey-glide`, the Rust core glide-mq's own client is a fork of): its
  GlideClient connects (HELLO 3, CLIENT SETINFO, INFO REPLICATION: glide-mq-NOTES.md "What a
  real client sends on connect"), `FCALL glidemq_version 0` answers "93", and jobs added with
  its `fcall` API (one by one, and as a non-atomic Batch: a pipeline, as glide-mq's addBulk)
  exist: a beanstalk client reserves them with the same bytes. Every glide test runs through
  a logging proxy (tests/resp_support.LogProxy) so a failure shows what was said.

Tests that read keys (HGETALL, XLEN, ZCARD, HGET) need the key view (protocols/resp/keys*).
"""
from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import json

import greenstalk
import pytest
import redis

from .resp_support import LIBRARY_STANDIN, GlideServer, LogProxy, add_job_args, job_keys

# The seed's example, verbatim (glide-mq-wire-protocol.txt "Python Example", lines 254-299).
SEED_EXAMPLE = """\
import redis
import json
import time
r = redis.Redis(host='localhost', port=6379, decode_responses=True)
queue_name = 'tasks'
prefix = 'glide'
p = f'{prefix}:{{{queue_name}}}'
# Add a simple job
job_data = json.dumps({'to': 'user@example.com', 'subject': 'Hello'})
job_opts = json.dumps({})
timestamp = str(int(time.time() * 1000))
result = r.fcall(
'glidemq_addJob',
4, # numkeys
f'{p}:id', # key 1: id counter
f'{p}:stream', # key 2: stream
f'{p}:scheduled', # key 3: scheduled ZSet
f'{p}:events', # key 4: events stream
'send-email', # arg 1: jobName
job_data, # arg 2: jobData
job_opts, # arg 3: jobOpts
timestamp, # arg 4: timestamp
'0', # arg 5: delay
'0', # arg 6: priority
'', # arg 7: parentId
'0', # arg 8: maxAttempts
'', # arg 9: orderingKey
'0', # arg 10: groupConcurrency
'0', # arg 11: groupRateMax
'0', # arg 12: groupRateDuration
'0', # arg 13: tbCapacity
'0', # arg 14: tbRefillRate
'0', # arg 15: jobCost
'0', # arg 16: ttl
'', # arg 17: customJobId
)
print(f'Job created with ID: {result}')
# Read the job back
job_hash = r.hgetall(f'{p}:job:{result}')
print(f'Job data: {job_hash}')
# Get job counts
stream_len = r.xlen(f'{p}:stream')
completed = r.zcard(f'{p}:completed')
failed = r.zcard(f'{p}:failed')
delayed = r.zcard(f'{p}:scheduled')
print(f'Waiting: {stream_len}, Completed: {completed}, Failed: {failed}, Delayed: {delayed}')
"""
EXAMPLE_DATA = json.dumps({'to': 'user@example.com', 'subject': 'Hello'})


def example_for(port: int, protocol: int, upto: str | None = None) -> str:
    """SEED_EXAMPLE with only host and port changed (and `protocol=3` for RESP3); `upto`: cut
    the text before that line (a verbatim prefix of the example)."""
    old = "host='localhost', port=6379, decode_responses=True"
    assert SEED_EXAMPLE.count(old) == 1
    new = f"host='127.0.0.1', port={port}, decode_responses=True"
    if protocol == 3:
        new += ", protocol=3"
    text = SEED_EXAMPLE.replace(old, new)
    if upto is not None:
        text = text[:text.index(upto)]
    return text


def run_example(text: str) -> list[str]:
    """Run the example's text as a script; the lines it printed."""
    out = io.StringIO()
    ns: dict = {"__name__": "__seed_example__"}
    with contextlib.redirect_stdout(out):
        exec(compile(text, "<glide-mq-wire-protocol.txt Python Example>", "exec"), ns)
    ns["r"].close()
    return out.getvalue().splitlines()


@pytest.fixture
def gsrv(tmp_path):
    """A fresh jobgate (SQLite file, durability commit) with beanstalk and glidemq listeners."""
    s = GlideServer(f"sqlite:///{tmp_path}/jobgate.db", tmp_path)
    yield s
    s.stop()


def _load(port: int, protocol: int = 2) -> None:
    r = redis.Redis(host="127.0.0.1", port=port, protocol=protocol)
    assert r.function_load(LIBRARY_STANDIN, replace=True) in (b"glidemq", "glidemq")
    r.close()


def _reserve_all(port: int, tube: str) -> list[bytes]:
    g = greenstalk.Client(("127.0.0.1", port), encoding=None, use=tube, watch=tube)
    bodies = []
    try:
        while True:
            try:
                job = g.reserve(timeout=0)
            except greenstalk.TimedOutError:
                return bodies
            bodies.append(job.body)
    finally:
        g.close()


# ===================================================================== redis-py, the seed
def test_without_the_library_the_example_fails_with_function_not_found(gsrv):
    with pytest.raises(redis.ResponseError, match="^Function not found$"):
        run_example(example_for(gsrv.glide_port, 2, upto="print(f'Job created"))
    assert _reserve_all(gsrv.port, "tasks") == []


@pytest.mark.parametrize("protocol", [2, 3])
def test_seed_example_adds_the_job_a_beanstalk_client_then_reserves(gsrv, protocol):
    """The example up to its first key read (a verbatim prefix): the id, and the job as a
    beanstalk client sees it (tube = queue, body = jobData's bytes)."""
    _load(gsrv.glide_port, protocol)
    lines = run_example(example_for(gsrv.glide_port, protocol, upto="# Read the job back"))
    assert lines == ["Job created with ID: 1"]
    lines = run_example(example_for(gsrv.glide_port, protocol, upto="# Read the job back"))
    assert lines == ["Job created with ID: 2"]
    assert _reserve_all(gsrv.port, "tasks") == [EXAMPLE_DATA.encode()] * 2


@pytest.mark.parametrize("protocol", [2, 3])
def test_seed_python_example_runs_unchanged(gsrv, protocol):
    """The whole example: its job hash and its counts (needs the key view)."""
    _load(gsrv.glide_port, protocol)
    lines = run_example(example_for(gsrv.glide_port, protocol))
    assert len(lines) == 3, lines
    assert lines[0] == "Job created with ID: 1"
    assert lines[1].startswith("Job data: {")
    job = ast.literal_eval(lines[1][len("Job data: "):])
    ts = int(job["timestamp"])
    assert job == {"id": "1", "name": "send-email", "data": EXAMPLE_DATA, "opts": "{}",
                   "timestamp": str(ts), "attemptsMade": "0", "delay": "0", "priority": "0",
                   "maxAttempts": "0", "state": "waiting"}
    assert lines[2] == "Waiting: 1, Completed: 0, Failed: 0, Delayed: 0"
    # run again: the counter goes on, the stream has both
    lines = run_example(example_for(gsrv.glide_port, protocol))
    assert lines[0] == "Job created with ID: 2"
    assert ast.literal_eval(lines[1][len("Job data: "):])["id"] == "2"
    assert lines[2] == "Waiting: 2, Completed: 0, Failed: 0, Delayed: 0"


# ========================================================================= valkey-glide
def _glide_run(port: int, resp: int, body):
    """Run `await body(client)` with a valkey-glide GlideClient connected to 127.0.0.1:`port`
    through a LogProxy; returns (body's result, the proxy). A failure carries the transcript."""
    from glide import GlideClient, GlideClientConfiguration, NodeAddress, ProtocolVersion
    proxy = LogProxy(port)

    async def main():
        cfg = GlideClientConfiguration(
            [NodeAddress("127.0.0.1", proxy.port)], request_timeout=5000,
            protocol=ProtocolVersion.RESP3 if resp == 3 else ProtocolVersion.RESP2)
        client = await asyncio.wait_for(GlideClient.create(cfg), 20)
        try:
            return await body(client)
        finally:
            await client.close()
    try:
        return asyncio.run(main()), proxy
    except BaseException as e:
        raise AssertionError(f"valkey-glide against jobgate failed: {e!r}\n"
                             f"what was said (n> client, n< jobgate):\n"
                             f"{proxy.transcript()}") from e
    finally:
        proxy.close()


@pytest.mark.parametrize("resp", [3, 2])
def test_valkey_glide_connects_and_sees_a_primary(gsrv, resp):
    async def body(c):
        info = await c.custom_command(["INFO", "REPLICATION"])
        ping = await c.custom_command(["PING"])
        return info, ping
    (info, ping), proxy = _glide_run(gsrv.glide_port, resp, body)
    assert b"role:master" in info.split(b"\r\n"), info
    assert ping in (b"PONG", "PONG")
    sent = proxy.sent()
    if resp == 3:
        assert sent.startswith(b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n"), sent[:80]
    assert b"SETINFO" in sent          # what glide does on connect, all answered


@pytest.mark.parametrize("resp", [3, 2])
def test_valkey_glide_loads_the_library_and_reads_the_version(gsrv, resp):
    from glide import RequestError

    async def body(c):
        try:
            await c.fcall("glidemq_version")
            before = None
        except RequestError as e:
            before = str(e)
        loaded = await c.function_load(LIBRARY_STANDIN, replace=True)
        version = await c.fcall("glidemq_version")
        return before, loaded, version
    (before, loaded, version), proxy = _glide_run(gsrv.glide_port, resp, body)
    assert before is not None and "Function not found" in before, before
    assert loaded == b"glidemq"
    assert version == b"93"
    # exactly what glide-mq sends to check the library (glide-mq-NOTES.md, step 4)
    assert b"*3\r\n$5\r\nFCALL\r\n$15\r\nglidemq_version\r\n$1\r\n0\r\n" in proxy.sent()


@pytest.mark.parametrize("resp", [3, 2])
def test_valkey_glide_fcall_adds_jobs_one_by_one_and_as_a_pipeline(gsrv, resp):
    from glide import Batch
    q = "glide-client"
    bodies = [b'{"n":%d}' % i for i in range(7)]

    async def body(c):
        assert await c.function_load(LIBRARY_STANDIN, replace=True) == b"glidemq"
        ids = []
        for b in bodies[:2]:
            ids.append(await c.fcall("glidemq_addJob", keys=job_keys(q),
                                     arguments=add_job_args("n", b)))
        batch = Batch(is_atomic=False)     # a pipeline, as glide-mq's addBulk
        for b in bodies[2:]:
            batch.fcall("glidemq_addJob", keys=job_keys(q), arguments=add_job_args("n", b))
        ids += await c.exec(batch, raise_on_error=True)
        dup = await c.fcall("glidemq_addJob", keys=job_keys(q),
                            arguments=add_job_args("n", b"x", custom_id="5"))
        return ids, dup
    (ids, dup), _ = _glide_run(gsrv.glide_port, resp, body)
    assert ids == [str(i).encode() for i in range(1, 8)]
    assert dup == b"duplicate"
    assert _reserve_all(gsrv.port, q) == bodies


@pytest.mark.parametrize("resp", [3, 2])
def test_valkey_glide_reads_the_job_hash(gsrv, resp):
    """Needs the key view: HGET state / HGETALL through glide's custom_command."""
    q = "glide-keys"

    async def body(c):
        await c.function_load(LIBRARY_STANDIN, replace=True)
        jid = await c.fcall("glidemq_addJob", keys=job_keys(q),
                            arguments=add_job_args("mail", b'{"a":1}', ts=1_700_000_000_000))
        state = await c.custom_command(["HGET", f"glide:{{{q}}}:job:{jid.decode()}", "state"])
        whole = await c.custom_command(["HGETALL", f"glide:{{{q}}}:job:{jid.decode()}"])
        return jid, state, whole
    (jid, state, whole), _ = _glide_run(gsrv.glide_port, resp, body)
    assert jid == b"1" and state == b"waiting"
    if isinstance(whole, list):        # RESP2: a flat field/value array
        whole = dict(zip(whole[::2], whole[1::2]))
    assert whole[b"data"] == b'{"a":1}' and whole[b"name"] == b"mail"
    assert whole[b"timestamp"] == b"1700000000000" and whole[b"state"] == b"waiting"
