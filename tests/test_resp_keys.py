"""glide-mq's keys as a read-only view (protocols/resp/keys.py and keys_*.py), sans-IO: real
engine ports (memory mode, ManualClock), glide jobs created through port.put with the
extras protocols/resp/glide.py documents, the handlers called with a plain session object.
Expected values follow /work/shared/reference/glide-mq-golden.txt (sections G, H14-H21, I)
and redis-server 7.0.15's answers for the edge cases (noted per test).
"""
from __future__ import annotations



from protocols.resp import keys
from protocols.resp.commands import COMMANDS, WRONGTYPE
from protocols.resp.glide import SCORE_SHIFT, uid_of
from protocols.resp.keys_refused import REFUSED

from .resp_keys_support import K, WALL0, add_glide_job, hmap, reserve, run
from .resp_keys_support import env_fixture  # noqa: F401  (the `env` fixture)


# ---------------------------------------------------------------- job hashes (G01-G23, I06)
def test_job_hash_fields_and_state_waiting(env):
    port, state, s3, s2 = env
    add_glide_job(port, "probe", "1", "send-email", '{"to":"user@example.com"}')
    h = hmap(run(s3, "HGETALL", K("probe", "job:1")))
    assert h == {b"id": b"1", b"name": b"send-email", b"data": b'{"to":"user@example.com"}',
                 b"opts": b"{}", b"timestamp": str(WALL0).encode(), b"attemptsMade": b"0",
                 b"delay": b"0", b"priority": b"0", b"maxAttempts": b"0",
                 b"state": b"waiting"}                                       # G01
    assert run(s2, "HGETALL", K("probe", "job:1")) == run(s3, "HGETALL", K("probe", "job:1"))
    assert run(s3, "HGET", K("probe", "job:1"), "data") == b'{"to":"user@example.com"}'  # G18
    assert run(s3, "HGET", K("probe", "job:1"), "returnvalue") is None                   # G20
    assert run(s3, "HLEN", K("probe", "job:1")) == 10                                    # G22
    assert run(s3, "HEXISTS", K("probe", "job:1"), "name") == 1                          # G23
    assert run(s3, "HEXISTS", K("probe", "job:1"), "nosuch") == 0
    assert run(s2, "HMGET", K("probe", "job:1"), "name", "nosuch") == [b"send-email", None]
    assert run(s3, "HKEYS", K("probe", "job:1"))[0] == b"id"
    assert run(s3, "HSTRLEN", K("probe", "job:1"), "name") == 10


def test_hmget_metadata_fields_g21(env):
    port, state, s3, _ = env
    add_glide_job(port, "probe", "6", "retry", "{}", max_attempts=3,
                  opts='{"attempts":3,"backoff":{"type":"exponential","delay":1000}}')
    fields = ("id name opts timestamp attemptsMade state delay priority maxAttempts "
              "processedOn finishedOn failedReason parentId parentQueue orderingKey "
              "orderingSeq groupKey cost expireAt progress revoked lastActive schedulerName "
              "parentIds parentQueues suspendReason suspendedAt suspendTimeout signals "
              "tpmTokens").split()
    got = run(s3, "HMGET", K("probe", "job:6"), *fields)
    assert got[:9] == [b"6", b"retry",
                       b'{"attempts":3,"backoff":{"type":"exponential","delay":1000}}',
                       str(WALL0).encode(), b"0", b"waiting", b"0", b"0", b"3"]
    assert got[9:] == [None] * 21 and len(got) == 30


def test_optional_fields_lifo_and_binary_data(env):
    port, state, s3, _ = env
    add_glide_job(port, "probe", "102", "lifo", '{"n":11}', lifo=True, opts='{"lifo":true}')
    add_glide_job(port, "probe", "106", "ord", "{}", x=[["groupKey", "cust-1"],
                                                         ["orderingSeq", "1"]])
    add_glide_job(port, "probe", "110", "uni", '{"s": "héllo ☃"}')
    assert hmap(run(s3, "HGETALL", K("probe", "job:102")))[b"lifo"] == b"1"        # G08
    h = hmap(run(s3, "HGETALL", K("probe", "job:106")))                             # G12
    assert (h[b"groupKey"], h[b"orderingSeq"], len(h)) == (b"cust-1", b"1", 12)
    assert run(s3, "HGET", K("probe", "job:110"), "data") == '{"s": "héllo ☃"}'.encode()
    # a payload that is not UTF-8 comes back byte for byte
    port.put("probe", b"\xff\xfe", 0, 0, 1000, "glidemq", uid=uid_of("glide", "probe", "bin"),
             ext={"name": "b", "glide": {"id": "bin", "pfx": "glide"}})
    assert run(s3, "HGET", K("probe", "job:bin"), "data") == b"\xff\xfe"


def test_missing_and_foreign_keys_read_as_missing(env):
    port, state, s3, s2 = env
    add_glide_job(port, "probe", "1", "a", "{}")
    # a bunqueue job whose uid looks like a glide key has no glide id
    port.put("probe", b"x", 0, 0, 1000, "bunqueue", uid="glide:{probe}:7")
    # a uid naming another queue than the job's own does not make a glide key
    port.put("elsewhere", b"x", 0, 0, 1000, "glidemq", uid="glide:{probe}:8",
             ext={"name": "n", "glide": {"id": "8", "pfx": "glide"}})
    for key in (K("probe", "job:999"), K("probe", "job:7"), K("probe", "job:8"),
                K("other", "job:1"),
                K("probe", "job:1", prefix="bull"), "plain-key", "glide:{probe}",
                K("probe", "job"), K("probe", "stream:extra"), K("probe", "nosuchkind"),
                b"glide:{\xff}:job:1", "glide:{}:job:1"):
        assert run(s3, "TYPE", key) == ("simple", "none"), key
        assert run(s3, "HGETALL", key) == ("map", [])                              # G17
        assert run(s3, "HGET", key, "state") is None
        assert run(s3, "GET", key) is None
        assert run(s3, "EXISTS", key) == 0
        assert run(s3, "LRANGE", key, 0, -1) == []
        assert run(s3, "ZCARD", key) == 0
        assert run(s3, "XLEN", key) == 0
        assert run(s3, "XRANGE", key, "-", "+") == []
        assert run(s3, "SMEMBERS", key) == ("set", [])
        assert run(s3, "ZSCORE", key, "1") is None
        assert run(s3, "PTTL", key) == -2
    assert run(s2, "HGET", K("probe", "meta"), "paused") is None                      # I11


def test_wrongtype_h14_to_h19(env):
    port, state, s3, s2 = env
    add_glide_job(port, "probe", "1", "a", "{}")
    state.set_meta("glide:{probe}", "paused", "0")
    err = ("error", WRONGTYPE)
    for s in (s3, s2):
        assert run(s, "HGETALL", K("probe", "stream")) == err                        # H14
        assert run(s, "XLEN", K("probe", "meta")) == err                             # H15
        assert run(s, "LRANGE", K("probe", "job:1"), 0, -1) == err                   # H16
        assert run(s, "ZCARD", K("probe", "stream")) == err                          # H17
        assert run(s, "SMEMBERS", K("probe", "job:1")) == err                        # H18
        assert run(s, "GET", K("probe", "job:1")) == err                             # H19
        assert run(s, "HGET", K("probe", "stream"), "x") == err
        assert run(s, "XRANGE", K("probe", "job:1"), "-", "+") == err
        assert run(s, "ZRANGE", K("probe", "job:1"), 0, -1) == err
        assert run(s, "ZSCORE", K("probe", "job:1"), "1") == err
        assert run(s, "LLEN", K("probe", "stream")) == err
        assert run(s, "SCARD", K("probe", "meta")) == err
        assert run(s, "XPENDING", K("probe", "meta"), "workers") == err
        assert run(s, "LINDEX", K("probe", "job:1"), 0) == err
    # MGET reads another type as null (Redis)
    assert run(s3, "MGET", K("probe", "job:1"), K("probe", "id")) == [None, None]


def test_importing_keys_registers_every_handler():
    fns = {c.fn for c in COMMANDS.values()}
    handlers = [f for m in keys.MODULES for f in vars(m).values() if hasattr(f, "__wrapped__")]
    assert len(handlers) == 38 and all(f in fns for f in handlers)
    assert all(n.upper().encode() in COMMANDS for n in REFUSED)


def test_arity_errors_come_from_the_table(env):
    assert COMMANDS[b"HGET"].arity == 3
    s = env[2]
    assert run(s, "HGET", K("probe", "job:1")) == (
        "error", "ERR wrong number of arguments for 'hget' command")                 # H21
    assert run(s, "KEYS") == ("error", "ERR wrong number of arguments for 'keys' command")
    for name, arity in (("XRANGE", -4), ("ZRANGE", -4), ("EXISTS", -2), ("SCAN", -2),
                        ("DBSIZE", 1), ("HMGET", -3), ("XPENDING", -3), ("LRANGE", 4)):
        assert COMMANDS[name.encode()].arity == arity, name
        assert not COMMANDS[name.encode()].write


# ---------------------------------------------------------------- state across dialects
def test_state_follows_every_dialect(env):
    port, state, s3, _ = env
    key = K("jobs", "job:1")
    jid = add_glide_job(port, "jobs", "1", "a", "{}")
    assert run(s3, "HGET", key, "state") == b"waiting"
    owner, r = reserve(port, "jobs", "beanstalk")
    assert r.id == jid
    assert run(s3, "HGET", key, "state") == b"active"
    assert port.delete(owner, jid)               # beanstalk delete completes a glide job
    assert run(s3, "HGET", key, "state") == b"completed"
    h = hmap(run(s3, "HGETALL", key))
    assert h[b"finishedOn"] == str(WALL0).encode() and h[b"attemptsMade"] == b"1"
    assert run(s3, "ZRANGE", K("jobs", "completed"), 0, -1, "WITHSCORES") == [
        [b"1", ("double", float(WALL0))]]
    # workq complete / bunqueue ACK (port.complete) of other jobs
    port.clock.advance(5)
    a = add_glide_job(port, "jobs", "2", "b", "{}")
    b = add_glide_job(port, "jobs", "3", "c", "{}")
    port.clock.advance(5)
    assert port.complete(a, b'{"ok":1}', "workq")
    port.clock.advance(5)
    reserve(port, "jobs", "bunqueue")
    assert port.complete(b, b"42", "bunqueue")
    assert run(s3, "HGET", K("jobs", "job:2"), "returnvalue") == b'{"ok":1}'
    assert run(s3, "HGET", K("jobs", "job:3"), "state") == b"completed"
    assert run(s3, "ZRANGE", K("jobs", "completed"), 0, -1) == [b"1", b"2", b"3"]
    assert run(s3, "ZCARD", K("jobs", "completed")) == 3
    assert run(s3, "XLEN", K("jobs", "stream")) == 0
    assert run(s3, "TYPE", K("jobs", "failed")) == ("simple", "none")


def test_failed_job(env):
    port, state, s3, s2 = env
    jid = add_glide_job(port, "jobs", "1", "a", "{}")
    assert run(s3, "ZCARD", K("jobs", "failed")) == 0                                # G35
    assert run(s3, "TYPE", K("jobs", "completed")) == ("simple", "none")             # G58
    reserve(port, "jobs", "workq")
    port.clock.advance(100)
    assert port.fail(jid, b"boom", "workq") == "dead"
    assert run(s3, "HGET", K("jobs", "job:1"), "state") == b"failed"
    assert run(s3, "HGET", K("jobs", "job:1"), "failedReason") == b"boom"
    assert run(s3, "TYPE", K("jobs", "failed")) == ("simple", "zset")
    assert run(s2, "ZRANGE", K("jobs", "failed"), 0, -1, "WITHSCORES") == [
        b"1", str(WALL0 + 100).encode()]


def test_retry_with_backoff_is_scheduled_by_the_engine_due_time(env):
    port, state, s3, _ = env
    jid = add_glide_job(port, "jobs", "1", "a", "{}", max_attempts=3)
    reserve(port, "jobs", "workq")
    assert port.fail(jid, b"e", "glidemq", backoff_ms=2000) == "retried"
    assert run(s3, "HGET", K("jobs", "job:1"), "state") == b"delayed"
    assert run(s3, "ZSCORE", K("jobs", "scheduled"), "1") == ("double", float(WALL0 + 2000))
    assert run(s3, "XLEN", K("jobs", "stream")) == 0
    port.clock.advance(2000)
    port.tick()
    assert run(s3, "HGET", K("jobs", "job:1"), "state") == b"waiting"
    assert run(s3, "XLEN", K("jobs", "stream")) == 1


# ---------------------------------------------------------------- scheduled (G29-G33, I12-I13)
def test_scheduled_delayed_and_prioritized(env):
    port, state, s3, s2 = env
    add_glide_job(port, "probe", "3", "later", "{}", delay=60_000)
    add_glide_job(port, "probe", "4", "prio", "{}", priority=5)
    add_glide_job(port, "probe", "5", "prio-later", "{}", priority=3, delay=30_000)
    add_glide_job(port, "probe", "119", "dd", "{}", delay=10_500)
    assert run(s3, "HGET", K("probe", "job:3"), "state") == b"delayed"               # G19
    assert run(s3, "HGET", K("probe", "job:4"), "state") == b"prioritized"
    assert run(s3, "HGET", K("probe", "job:5"), "state") == b"delayed"
    assert run(s3, "ZCARD", K("probe", "scheduled")) == 4                            # G29
    s5 = 3 * SCORE_SHIFT + WALL0 + 30_000
    assert run(s3, "ZRANGE", K("probe", "scheduled"), 0, -1, "WITHSCORES") == [      # G30
        [b"119", ("double", float(WALL0 + 10_500))], [b"3", ("double", float(WALL0 + 60_000))],
        [b"5", ("double", float(s5))], [b"4", ("double", 21990232555520.0)]]
    assert run(s2, "ZRANGE", K("probe", "scheduled"), 0, -1, "WITHSCORES") == [      # I12
        b"119", str(WALL0 + 10_500).encode(), b"3", str(WALL0 + 60_000).encode(),
        b"5", str(s5).encode(), b"4", b"21990232555520"]
    assert run(s3, "ZRANGE", K("probe", "scheduled"), 0, -1) == [b"119", b"3", b"5", b"4"]
    assert run(s3, "ZSCORE", K("probe", "scheduled"), "3") == ("double", float(WALL0 + 60_000))
    assert run(s2, "ZSCORE", K("probe", "scheduled"), "4") == b"21990232555520"      # I13
    assert run(s3, "ZRANGEBYSCORE", K("probe", "scheduled"), 0, 4398046511103) == [  # G33
        b"119", b"3"]
    assert run(s3, "XLEN", K("probe", "stream")) == 0
    # the producer's clock decides the due time of an addJob delay
    add_glide_job(port, "probe", "200", "skew", "{}", delay=1000, ts=WALL0 - 5000)
    assert run(s2, "ZSCORE", K("probe", "scheduled"), "200") == str(WALL0 - 4000).encode()


def test_delayed_job_promoted_moves_to_the_stream(env):
    port, state, s3, _ = env
    add_glide_job(port, "q", "1", "a", "{}", delay=1000)
    add_glide_job(port, "q", "2", "p", "{}", delay=1000, priority=2)
    port.clock.advance(1000)
    port.tick()
    assert run(s3, "HGET", K("q", "job:1"), "state") == b"waiting"
    assert run(s3, "HGET", K("q", "job:2"), "state") == b"prioritized"
    assert [e[1] for e in run(s3, "XRANGE", K("q", "stream"), "-", "+")] == [
        [b"jobId", b"1", b"name", b"a"]]
    assert run(s3, "ZRANGE", K("q", "scheduled"), 0, -1, "WITHSCORES") == [
        [b"2", ("double", float(2 * SCORE_SHIFT))]]
    assert run(s3, "LLEN", K("q", "priority")) == 0                                  # G39


def test_zrange_options_and_errors(env):
    port, state, s3, s2 = env
    for i, p in enumerate((1, 2, 2, 5)):
        add_glide_job(port, "z", "abcd"[i], "n", "{}", priority=p)
    k = K("z", "scheduled")
    S = SCORE_SHIFT
    assert run(s3, "ZRANGE", k, 0, 1, "REV", "WITHSCORES") == [
        [b"d", ("double", float(5 * S))], [b"c", ("double", float(2 * S))]]
    assert run(s3, "ZRANGE", k, f"({S}", 5 * S, "BYSCORE") == [b"b", b"c", b"d"]
    assert run(s3, "ZRANGE", k, 5 * S, f"({S}", "BYSCORE", "REV") == [b"d", b"c", b"b"]
    assert run(s3, "ZRANGE", k, "-inf", "+inf", "byscore", "limit", 1, 2) == [b"b", b"c"]
    assert run(s3, "ZRANGEBYSCORE", k, "-inf", "+inf", "LIMIT", -1, 2) == []
    assert run(s3, "ZRANGEBYSCORE", k, "-inf", "+inf", "LIMIT", 1, -5) == [b"b", b"c", b"d"]
    assert run(s3, "ZREVRANGEBYSCORE", k, "+inf", "-inf", "LIMIT", 0, 2) == [b"d", b"c"]
    assert run(s3, "ZREVRANGE", k, 0, 0) == [b"d"]
    assert run(s3, "ZRANGE", k, -100, 100) == [b"a", b"b", b"c", b"d"]
    assert run(s3, "ZRANGE", k, 3, 1) == []
    assert run(s3, "ZRANGE", k, 0, -1, "LIMIT", 0, -1) == [b"a", b"b", b"c", b"d"]
    assert run(s3, "ZCOUNT", k, 2 * S, 5 * S) == 3
    assert (run(s3, "ZRANK", k, "c"), run(s3, "ZREVRANK", k, "c")) == (2, 1)
    assert run(s3, "ZRANK", k, "zz") is None
    assert run(s2, "ZMSCORE", k, "a", "zz") == [str(S).encode(), None]
    assert run(s3, "ZRANGEBYSCORE", k, " 0x10", "+inf") == [b"a", b"b", b"c", b"d"]
    errors = {
        ("ZRANGE", k, 0, -1, "LIMIT", 0, 1): "ERR syntax error, LIMIT is only supported in "
                                             "combination with either BYSCORE or BYLEX",
        ("ZRANGE", k, "a", "b"): "ERR value is not an integer or out of range",
        ("ZRANGE", k, 0, 1, "foo"): "ERR syntax error",
        ("ZRANGE", k, 0, 1, "BYLEX"): "ERR syntax error",
        ("ZRANGE", k, "x", "y", "BYSCORE"): "ERR min or max is not a float",
        ("ZRANGEBYSCORE", k, 1, "nan"): "ERR min or max is not a float",
        ("ZRANGEBYSCORE", k, "1 ", 5): "ERR min or max is not a float",
        ("ZRANGEBYSCORE", k, 0, 1, "BYSCORE"): "ERR syntax error",
        ("ZREVRANGE", k, 0, 1, "REV"): "ERR syntax error",
        ("ZRANGE", k, "-inf", "+inf", "BYSCORE", "LIMIT", 1): "ERR syntax error",
        ("ZRANGEBYSCORE", k, 1, 2, "LIMIT", "a", 1): "ERR value is not an integer or out "
                                                     "of range",
        ("ZCOUNT", k, "a", "b"): "ERR min or max is not a float",
        # parsed before the key is read: a missing key answers the same
        ("ZRANGE", K("z", "completed"), "a", "b"): "ERR value is not an integer or out of "
                                                   "range",
    }
    for cmd, text in errors.items():
        assert run(s3, *cmd) == ("error", text), cmd
    # WITHSCORES twice is fine; a missing key is an empty array
    assert len(run(s3, "ZRANGE", k, 0, -1, "WITHSCORES", "WITHSCORES")) == 4
    assert run(s3, "ZRANGE", K("z", "completed"), 0, -1, "WITHSCORES") == []         # G36
    assert run(s3, "ZRANGE", K("z", "suspended"), 0, 0) == []                         # G67
