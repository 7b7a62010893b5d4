"""glide-mq's keys as a read-only view, part 2 (streams, lists, sets, the key space, refused
writes, costs, wire shapes; part 1: tests/test_resp_keys.py) (protocols/resp/keys.py and keys_*.py), sans-IO: real
engine ports (memory mode, ManualClock), glide jobs created through port.put with the
extras protocols/resp/glide.py documents, the handlers called with a plain session object.
Expected values follow /work/shared/reference/glide-mq-golden.txt (sections G, H14-H21, I)
and redis-server 7.0.15's answers for the edge cases (noted per test).
"""
from __future__ import annotations


import pytest

from core.api import COMPLETED, RESERVED, Principal
from protocols.resp.commands import COMMANDS
from protocols.resp.globmatch import glob_match
from protocols.resp.keys_refused import REFUSED, refusal

from .resp_keys_support import K, Sess, WALL0, add_glide_job, hmap, reserve, run
from .resp_keys_support import env_fixture  # noqa: F401  (the `env` fixture)


# ---------------------------------------------------------------- streams (G25-G28, G44-G46)
def test_stream_entries_order_and_ranges(env):
    port, state, s3, s2 = env
    ids = []
    for gid in ("1", "2", "6", "order-42"):
        ids.append(add_glide_job(port, "probe", gid, "n" + gid, "{}"))
        port.clock.advance(1)
    add_glide_job(port, "probe", "102", "lifo", "{}", lifo=True)
    add_glide_job(port, "probe", "4", "prio", "{}", priority=5)
    add_glide_job(port, "probe", "3", "later", "{}", delay=5000)
    k = K("probe", "stream")
    assert run(s3, "XLEN", k) == 4                                                   # G25
    all_ = run(s3, "XRANGE", k, "-", "+")
    assert [e[1] for e in all_] == [[b"jobId", g.encode(), b"name", b"n" + g.encode()]
                                    for g in ("1", "2", "6", "order-42")]            # G26
    sids = [e[0] for e in all_]
    assert sids == [b"%d-%d" % (WALL0 + i, ids[i]) for i in range(4)]
    parsed = [tuple(map(int, s.split(b"-"))) for s in sids]
    assert parsed == sorted(parsed) and len(set(parsed)) == 4
    assert run(s3, "XRANGE", k, "-", "+", "COUNT", 2) == all_[:2]                    # G27
    assert run(s3, "XREVRANGE", k, "+", "-", "COUNT", 1) == all_[-1:]                # G28
    assert run(s2, "XRANGE", k, "-", "+") == all_                                    # I15
    assert run(s3, "XRANGE", k, b"(" + sids[0], "+") == all_[1:]
    assert run(s3, "XRANGE", k, "-", b"(" + sids[2]) == all_[:2]
    assert run(s3, "XRANGE", k, str(WALL0 + 1), str(WALL0 + 2)) == all_[1:3]
    assert run(s3, "XREVRANGE", k, str(WALL0 + 2), str(WALL0 + 1)) == all_[2:0:-1]
    assert run(s3, "XRANGE", k, "+1", "+") == all_          # strtoull reads "+1" (Redis)
    assert run(s3, "XRANGE", k, "-", "+", "COUNT", 0) == "null-array"     # Redis 7.0
    assert run(s3, "XRANGE", k, "-", "+", "COUNT", -3) == "null-array"
    assert run(s3, "XRANGE", K("probe", "nostream"), "-", "+", "COUNT", 0) == []
    bad = "ERR Invalid stream ID specified as stream command argument"
    for lo, hi in (("(", "+"), ("-", "(+"), ("(-", "+"), ("abc", "+"), ("1-x", "+"),
                   ("1.5", "+"), ("-1", "+"), ("1-", "+"), ("", "+"),
                   ("18446744073709551616", "+")):
        assert run(s3, "XRANGE", k, lo, hi) == ("error", bad), lo
        assert run(s3, "XRANGE", K("probe", "none"), lo, hi) == ("error", bad)
    assert run(s3, "XRANGE", k, "(18446744073709551615-18446744073709551615", "+") == (
        "error", "ERR invalid start ID for the interval")
    assert run(s3, "XRANGE", k, "0", "(0-0") == ("error", "ERR invalid end ID for the interval")
    assert run(s3, "XRANGE", k, "-", "+", "COUNT") == ("error", "ERR syntax error")
    assert run(s3, "XRANGE", k, "-", "+", "FOO", 1) == ("error", "ERR syntax error")
    assert run(s3, "XRANGE", k, "-", "+", "COUNT", "x") == (
        "error", "ERR value is not an integer or out of range")


def test_stream_keeps_reserved_jobs_and_ids_are_stable(env):
    port, state, s3, _ = env
    add_glide_job(port, "q", "1", "a", "{}")
    port.clock.advance(3)
    add_glide_job(port, "q", "2", "b", "{}")
    before = run(s3, "XRANGE", K("q", "stream"), "-", "+")
    owner, r = reserve(port, "q")
    assert run(s3, "XRANGE", K("q", "stream"), "-", "+") == before
    port.release(owner, r.id, 0, 0)               # back to ready: the same entry id
    assert run(s3, "XRANGE", K("q", "stream"), "-", "+") == before


def test_xpending_nogroup_then_summary(env):
    port, state, s3, s2 = env
    k = K("probe", "stream")
    add_glide_job(port, "probe", "1", "a", "{}")
    add_glide_job(port, "probe", "2", "b", "{}")
    nogroup = ("error", "NOGROUP No such key 'glide:{probe}:stream' or consumer group "
                        "'workers'")
    assert run(s3, "XPENDING", k, "workers") == nogroup                              # G44
    assert run(s2, "XPENDING", k, "workers") == nogroup                              # I22
    assert run(s3, "XPENDING", K("tasks", "stream"), "workers") == (
        "error", "NOGROUP No such key 'glide:{tasks}:stream' or consumer group 'workers'")
    state.groups.add(k)
    assert run(s3, "XPENDING", k, "workers") == [0, None, None, "null-array"]
    assert run(s3, "XPENDING", k, "other") == (
        "error", "NOGROUP No such key 'glide:{probe}:stream' or consumer group 'other'")
    port.clock.advance(10)
    reserve(port, "probe", "beanstalk", "worker-a")
    port.clock.advance(250)
    sids = [e[0] for e in run(s3, "XRANGE", k, "-", "+")]
    assert run(s3, "XPENDING", k, "workers") == [1, sids[0], sids[0],
                                                 [[b"worker-a", b"1"]]]
    assert run(s3, "XPENDING", k, "workers", "-", "+", 10) == [
        [sids[0], b"worker-a", 250, 1]]
    assert run(s3, "XPENDING", k, "workers", "IDLE", 1000, "-", "+", 10) == []
    assert run(s3, "XPENDING", k, "workers", "-", "+", 10, "nobody") == []
    assert run(s3, "XPENDING", k, "workers", "-", "+", -1) == []
    assert run(s3, "XPENDING", k, "workers", "-", "+") == ("error", "ERR syntax error")
    assert run(s3, "XPENDING", k, "workers", "IDLE", 5, "-", "+") == (
        "error", "ERR syntax error")
    assert run(s3, "XPENDING", k, "workers", "-", "+", "abc") == (
        "error", "ERR value is not an integer or out of range")
    # an emptied stream exists while its group does (Redis keeps it)
    state.groups.add(K("empty", "stream"))
    state.set_counter("glide:{empty}", 1)
    assert run(s3, "TYPE", K("empty", "stream")) == ("simple", "stream")
    assert run(s3, "XPENDING", K("empty", "stream"), "workers") == [
        0, None, None, "null-array"]


def test_events_stream(env):
    port, state, s3, s2 = env
    base = "glide:{probe}"
    for i in range(3):
        state.add_event(base, ["event", "added", "jobId", str(i + 1), "name", "n"])
    state.add_event(base, ["event", "paused", "jobId", "0"])
    k = K("probe", "events")
    assert run(s3, "XLEN", k) == 4
    got = run(s2, "XRANGE", k, "-", "+", "COUNT", 2)                                 # I16
    assert [e[1] for e in got] == [[b"event", b"added", b"jobId", b"1", b"name", b"n"],
                                   [b"event", b"added", b"jobId", b"2", b"name", b"n"]]
    rev = run(s3, "XREVRANGE", k, "+", "-", "COUNT", 3)                              # F09
    assert rev[0][1] == [b"event", b"paused", b"jobId", b"0"]
    ids = [e[0] for e in reversed(rev)]
    assert ids == sorted(ids, key=lambda s: tuple(map(int, s.split(b"-"))))
    assert run(s3, "TYPE", k) == ("simple", "stream")                                # G53


# ---------------------------------------------------------------- lists, sets, strings
def test_lifo_list_in_rpush_order(env):
    port, state, s3, _ = env
    for gid in ("102", "103", "104"):
        add_glide_job(port, "probe", gid, "l", "{}", lifo=True)
    k = K("probe", "lifo")
    assert run(s3, "LRANGE", k, 0, -1) == [b"102", b"103", b"104"]                   # G37
    assert run(s3, "LLEN", k) == 3                                                   # G38
    assert run(s3, "LRANGE", k, -2, -1) == [b"103", b"104"]
    assert run(s3, "LRANGE", k, 5, 10) == []
    assert run(s3, "LINDEX", k, -1) == b"104"
    assert run(s3, "LINDEX", k, 9) is None
    owner, r = reserve(port, "probe")             # RPOP side: the newest is served first
    assert run(s3, "HGET", K("probe", f"job:{104}"), "state") == b"active"
    assert run(s3, "LRANGE", k, 0, -1) == [b"102", b"103"]
    assert run(s3, "LRANGE", k, "a", 1) == ("error", "ERR value is not an integer or out of "
                                                     "range")
    assert run(s3, "LINDEX", K("probe", "nolist"), "x") is None     # key first (Redis)
    assert run(s3, "LINDEX", k, "x") == ("error", "ERR value is not an integer or out of "
                                                  "range")
    assert run(s3, "TYPE", k) == ("simple", "list")                                  # G56


def test_job_log_list(env):
    port, state, s3, _ = env
    jid = add_glide_job(port, "probe", "1", "a", "{}")
    assert run(s3, "LRANGE", K("probe", "log:1"), 0, -1) == []                       # G41
    assert run(s3, "LLEN", K("probe", "log:1")) == 0                                 # G42
    port.update_extras(jid, {"logs": [["step 1", "info", WALL0], ["step 2", "warn", WALL0]]})
    assert run(s3, "LRANGE", K("probe", "log:1"), 0, -1) == [b"step 1", b"step 2"]
    assert run(s3, "TYPE", K("probe", "log:1")) == ("simple", "list")


def test_deps_set(env):
    port, state, s3, s2 = env
    add_glide_job(port, "probe-child", "1", "c", "{}")
    add_glide_job(port, "probe-flow", "2", "c", "{}")
    members = ["glide:{probe-child}:1", "glide:{probe-flow}:2"]
    add_glide_job(port, "probe-flow", "1", "p", "{}", deps=members)
    assert run(s3, "HGET", K("probe-flow", "job:1"), "state") == b"waiting-children"
    k = K("probe-flow", "deps:1")
    assert run(s3, "SMEMBERS", k) == ("set", [m.encode() for m in members])
    assert run(s2, "SMEMBERS", k) == ("set", [m.encode() for m in members])          # I14
    assert run(s3, "SCARD", k) == 2
    assert run(s3, "SISMEMBER", k, members[0]) == 1
    assert run(s3, "SMISMEMBER", k, members[1], "x") == [1, 0]
    assert run(s3, "TYPE", k) == ("simple", "set")                                   # G60
    assert run(s3, "ZCARD", K("probe-flow", "scheduled")) == 0   # waiting-children: nowhere
    assert run(s3, "XLEN", K("probe-flow", "stream")) == 1


def test_records_and_strings(env):
    port, state, s3, s2 = env
    base = "glide:{probe}"
    state.set_counter(base, 120)
    state.set_meta(base, "paused", "0")
    state.set_dedup(base, "d1", "114:1700000000000")
    state.set_ordering(base, "cust-1", "1")
    state.set_group(base, "cust-1", {"maxConcurrency": "1", "nextSeq": "1"})
    assert run(s3, "GET", K("probe", "id")) == b"120"                                # G24
    assert run(s3, "GET", K("probe", "list-active")) is None                         # G40
    assert run(s3, "GET", K("other", "id")) is None
    assert hmap(run(s3, "HGETALL", K("probe", "meta"))) == {b"paused": b"0"}         # F08
    assert run(s2, "HGET", K("probe", "meta"), "paused") == b"0"
    assert hmap(run(s3, "HGETALL", K("probe", "dedup"))) == {b"d1": b"114:1700000000000"}
    assert hmap(run(s3, "HGETALL", K("probe", "ordering"))) == {b"cust-1": b"1"}     # G63
    assert hmap(run(s3, "HGETALL", K("probe", "group:cust-1"))) == {                 # G62
        b"maxConcurrency": b"1", b"nextSeq": b"1"}
    types = {"id": "string", "meta": "hash", "dedup": "hash", "ordering": "hash",
             "group:cust-1": "hash", "list-active": "none", "suspended": "none",
             "priority": "none", "schedulers": "none", "ratelimited": "none"}
    for rest, t in types.items():                                                     # G50-G61
        assert run(s3, "TYPE", K("probe", rest)) == ("simple", t), rest
    assert run(s3, "MGET", K("probe", "id"), K("x", "id")) == [b"120", None]


def test_locks_are_string_keys(env):
    port, state, s3, _ = env
    lk = "glide:{probe}:suspended:lock:__sweep__"
    assert state.try_lock(lk, b"0123456789abcdef", 5000)
    assert run(s3, "GET", lk) == b"0123456789abcdef"
    assert run(s3, "TYPE", lk) == ("simple", "string")
    assert run(s3, "PTTL", lk) == 5000 and run(s3, "TTL", lk) == 5
    assert run(s3, "KEYS", "*lock*") == [lk.encode()]
    port.clock.advance(5000)
    assert run(s3, "GET", lk) is None and run(s3, "EXISTS", lk) == 0
    assert run(s3, "KEYS", "*") == []


# ---------------------------------------------------------------- key space
def _probe(port, state):
    add_glide_job(port, "probe", "1", "a", "{}")
    add_glide_job(port, "probe", "2", "a", "{}")
    add_glide_job(port, "probe", "3", "l", "{}", delay=100)
    add_glide_job(port, "probe", "102", "l", "{}", lifo=True)
    add_glide_job(port, "probe", "p", "p", "{}", deps=["glide:{probe}:1"])
    add_glide_job(port, "probe-child", "1", "c", "{}")
    port.put("probe", b"beanstalk", 0, 0, 1000, "beanstalk")      # not a glide job
    state.set_counter("glide:{probe}", 102)
    state.set_counter("glide:{probe-child}", 1)
    state.set_meta("glide:{probe}", "paused", "0")
    state.set_group("glide:{probe}", "cust-1", {"nextSeq": "1"})
    state.add_event("glide:{probe}", ["event", "added", "jobId", "1"])


PROBE_KEYS = sorted(K("probe", r) for r in (
    "job:1", "job:2", "job:3", "job:102", "job:p", "deps:p", "id", "meta", "events",
    "stream", "scheduled", "lifo", "group:cust-1")) + sorted(
    K("probe-child", r) for r in ("job:1", "id", "stream"))


def test_keys_scan_dbsize_exists(env):
    port, state, s3, s2 = env
    _probe(port, state)
    assert run(s3, "KEYS", "*") == sorted(k.encode() for k in PROBE_KEYS)
    assert run(s3, "KEYS", "glide:{probe-child}:*") == [                             # G66
        k.encode() for k in sorted(PROBE_KEYS) if "probe-child" in k]
    assert run(s3, "DBSIZE") == len(PROBE_KEYS)
    assert run(s3, "EXISTS", K("probe", "job:1"), K("probe", "job:2"),
               K("probe", "job:999")) == 2                                           # G49
    assert run(s3, "EXISTS", K("probe", "job:1"), K("probe", "job:1")) == 2
    # SCAN loop (G64, G65): every key once, whatever COUNT
    for count in (1, 3, 100):
        seen, cur = [], b"0"
        for _ in range(100):
            cur, batch = run(s3, "SCAN", cur, "MATCH", "glide:{probe}:*", "COUNT", count)
            seen += batch
            if cur == b"0":
                break
        assert sorted(seen) == sorted(k.encode() for k in PROBE_KEYS
                                      if k.startswith("glide:{probe}:"))
    seen, cur = [], b"0"
    while True:
        cur, batch = run(s2, "SCAN", cur, "MATCH", "glide:{probe}:job:*", "TYPE", "HASH")
        seen += batch
        if cur == b"0":
            break
    assert sorted(seen) == [K("probe", f"job:{i}").encode() for i in ("1", "102", "2", "3",
                                                                      "p")]
    assert run(s3, "SCAN", 0, "TYPE", "nosuch", "COUNT", 1000)[1] == []
    assert run(s3, "SCAN", 0, "COUNT", 1000)[0] == b"0"
    for bad, text in ((("abc",), "ERR invalid cursor"),
                      (("18446744073709551616",), "ERR invalid cursor"),
                      ((" 0",), "ERR invalid cursor"),
                      ((0, "COUNT", 0), "ERR syntax error"),
                      ((0, "COUNT", "x"), "ERR value is not an integer or out of range"),
                      ((0, "MATCH"), "ERR syntax error"),
                      ((0, "FOO", "bar"), "ERR syntax error")):
        assert run(s3, "SCAN", *bad) == ("error", text), bad
    assert run(s3, "SCAN", "18446744073709551615", "COUNT", 1000)[0] == b"0"
    assert run(s3, "SCAN", "-1")[0] == b"0"       # strtoul wraps -1 to the last cursor


def test_scan_survives_removals_between_calls(env):
    port, state, s3, _ = env
    ids = [add_glide_job(port, "q", str(i), "n", "{}") for i in range(30)]
    state.set_counter("glide:{q}", 30)
    cur, seen = b"0", []
    cur, batch = run(s3, "SCAN", cur, "MATCH", "*:job:*", "COUNT", 7)
    seen += batch
    gone = {b"glide:{q}:job:%d" % i for i in range(0, 30, 2)} - set(seen)
    for i in range(0, 30, 2):
        port.remove(ids[i], "workq")
    while cur != b"0":
        cur, batch = run(s3, "SCAN", cur, "MATCH", "*:job:*", "COUNT", 7)
        seen += batch
    kept = {b"glide:{q}:job:%d" % i for i in range(1, 30, 2)}
    assert kept <= set(seen) and len(seen) == len(set(seen))
    assert not gone & set(seen)


@pytest.mark.parametrize("pattern,subject,ok", [
    (b"*", b"", True), (b"a*b", b"axxb", True), (b"a*b", b"axxc", False),
    (b"h?llo", b"hello", True), (b"h?llo", b"hllo", False),
    (b"h[ae]llo", b"hallo", True), (b"h[^e]llo", b"hello", False),
    (b"h[a-b]llo", b"hbllo", True), (b"h[b-a]llo", b"hbllo", True),
    (b"\\*", b"*", True), (b"\\*", b"a", False), (b"[ab", b"a", True), (b"[ab", b"[", False),
    (b"[]", b"]", False), (b"[^]", b"x", True), (b"[a-]", b"]", True),
    (b"[\\]]", b"]", True), (b"a\\", b"a\\", True), (b"glide:{probe}:*", b"glide:{probe}:id",
                                                    True),
    (b"[\x01-\xff]", b"\x80", False),    # a signed range: 1..-1 is -1..1 in C chars
    (b"*a*a*a*a*a*b", b"a" * 40, False),
])
def test_glob_matches_redis(pattern, subject, ok):
    assert glob_match(pattern, subject) is ok


def test_access_scoped_port_hides_other_queues(env):
    port, state, s3, _ = env
    _probe(port, state)
    sp = port.scoped(Principal("token:t", "token", ["probe-child"]))
    s = Sess(state, sp, 3)
    assert run(s, "HGET", K("probe", "job:1"), "state") is None
    assert run(s, "GET", K("probe", "id")) is None
    assert run(s, "HGETALL", K("probe", "meta")) == ("map", [])
    assert run(s, "XLEN", K("probe", "stream")) == 0
    assert run(s, "XLEN", K("probe", "events")) == 0
    assert run(s, "TYPE", K("probe", "group:cust-1")) == ("simple", "none")
    assert run(s, "KEYS", "*") == [k.encode() for k in PROBE_KEYS if "probe-child" in k]
    assert run(s, "HGET", K("probe-child", "job:1"), "state") == b"waiting"


def test_prefix_separates_jobs_of_one_queue(env):
    port, state, s3, _ = env
    add_glide_job(port, "q", "1", "g", "{}")
    add_glide_job(port, "q", "1", "b", "{}", prefix="bull")
    assert run(s3, "HGET", K("q", "job:1"), "name") == b"g"
    assert run(s3, "HGET", K("q", "job:1", prefix="bull"), "name") == b"b"
    assert [e[1][3] for e in run(s3, "XRANGE", K("q", "stream", prefix="bull"), "-", "+")] == [
        b"b"]
    assert run(s3, "XLEN", K("q", "stream")) == 1


# ---------------------------------------------------------------- refused writes
def test_write_commands_are_refused(env):
    port, state, s3, _ = env
    jid = add_glide_job(port, "q", "1", "a", "{}")
    text = ("ERR jobgate: 'hset' is not supported: glide-mq keys are a read-only view of "
            "jobgate's jobs; change jobs with FCALL glidemq_* functions")
    assert refusal("hset") == text
    assert run(s3, "HSET", K("q", "job:1"), "state", "completed") == ("error", text)
    assert run(s3, "HGET", K("q", "job:1"), "state") == b"waiting"
    for name in ("DEL", "XADD", "ZADD", "LPUSH", "RPUSH", "SADD", "INCR", "EXPIRE", "SET",
                 "FLUSHALL", "HDEL", "XDEL", "ZREM"):
        assert name.lower() in REFUSED
        c = COMMANDS[name.encode()]
        assert not c.write
        n = c.arity - 1 if c.arity > 0 else -c.arity - 1
        args = ([K("q", "job:1")] + ["1"] * n)[:n]
        assert run(s3, name, *args) == ("error", refusal(name.lower())), name
    assert run(s3, "SET") == ("error", "ERR wrong number of arguments for 'set' command")
    assert port.job(jid).state == "ready"
    for name in ("XGROUP", "XREADGROUP", "XACK", "FUNCTION", "FCALL"):
        assert name.lower() not in REFUSED


# ---------------------------------------------------------------- cost
class CountingPort:
    """A real Port, counting the listing calls a command makes."""

    def __init__(self, port):
        self._port = port
        self.listings = 0

    def __getattr__(self, name):
        if name in ("jobs", "ready_page", "queue_names"):
            self.listings += 1
        return getattr(self._port, name)


def test_hget_state_finds_the_job_without_listing(env):
    port, state, _, _ = env
    for i in range(50):
        add_glide_job(port, "q", str(i), "n", "{}")
    cp = CountingPort(port)
    s = Sess(state, cp, 3)
    assert run(s, "HGET", K("q", "job:42"), "state") == b"waiting"
    assert run(s, "HGETALL", K("q", "job:7"))[0] == "map"
    assert run(s, "EXISTS", K("q", "job:8")) == 1
    assert cp.listings == 0
    run(s, "XLEN", K("q", "stream"))
    assert cp.listings == 1


def test_reserved_state_and_processing(env):
    port, state, s3, _ = env
    add_glide_job(port, "q", "1", "a", "{}")
    owner, r = reserve(port, "q", "workq")
    assert port.job(r.id).state is RESERVED
    assert run(s3, "HGET", K("q", "job:1"), "state") == b"active"
    assert run(s3, "XLEN", K("q", "stream")) == 1
    assert port.complete(r.id, b"", "workq")
    assert port.job(r.id).state is COMPLETED
    assert run(s3, "XLEN", K("q", "stream")) == 0
    assert run(s3, "HGET", K("q", "job:1"), "returnvalue") == b"null"


def test_hostile_arguments(env):
    port, state, s3, _ = env
    add_glide_job(port, "q", "1", "a", "{}")
    state.groups.add(K("q", "stream"))
    k = K("q", "stream")
    assert run(s3, "HGET", K("q", "job:1"), b"\xff\r\n") is None
    assert run(s3, "XPENDING", b"glide:{q}:stream\r\n", b"w\r\nx") == (
        "error", "NOGROUP No such key 'glide:{q}:stream  ' or consumer group 'w  x'")
    assert run(s3, "XPENDING", k, b"\xff") == (
        "error", "NOGROUP No such key 'glide:{q}:stream' or consumer group '\ufffd'")
    assert run(s3, "LRANGE", K("q", "lifo"), "-9223372036854775808",
               "9223372036854775807") == []
    assert run(s3, "ZRANGE", K("q", "scheduled"), 0, "9223372036854775808") == (
        "error", "ERR value is not an integer or out of range")
    for bad in ("01", "-0", "+1", " 1", "1 ", "1e3", ""):
        assert run(s3, "LRANGE", K("q", "lifo"), bad, 1) == (
            "error", "ERR value is not an integer or out of range"), bad
    assert run(s3, "KEYS", b"*" * 5000 + b"x") == []          # linear, not exponential
    assert run(s3, "KEYS", b"[") == [] and run(s3, "KEYS", b"\\") == []
    assert run(s3, "SCAN", 0, "COUNT", "9223372036854775807")[0] == b"0"
    assert run(s3, "XRANGE", k, "-", "+", "COUNT", "99999999999999999999") == (
        "error", "ERR value is not an integer or out of range")
    big = "9" * 5000
    assert run(s3, "XRANGE", k, big, "+") == (
        "error", "ERR Invalid stream ID specified as stream command argument")
    assert run(s3, "XRANGE", k, "0" * 5000 + "1", "+")[0][1][1] == b"1"   # strtoull: zeros
    assert run(s3, "LRANGE", K("q", "lifo"), big, 1)[0] == "error"
    assert run(s3, "SCAN", big) == ("error", "ERR invalid cursor")
    assert run(s3, "ZRANGEBYSCORE", K("q", "scheduled"), big, "+inf") == []
    assert run(s3, "HGETALL", b"glide:{" + b"x" * 100_000 + b"}:job:1") == ("map", [])


# ---------------------------------------------------------------- wire shapes
def test_wire_bytes_match_redis(env):
    """The encoded replies, byte for byte as redis-server 7.0.15 answered the same data
    (RESP2 and RESP3; golden G30/I12, G32/I13, G43/I14, I06, I11/I25, G44 after XGROUP)."""
    from protocols.resp.encode import encode
    port, state, s3, s2 = env
    add_glide_job(port, "w", "3", "later", "{}", delay=60_000)
    add_glide_job(port, "w", "4", "prio", "{}", priority=5)
    add_glide_job(port, "w", "p", "p", "{}", deps=["glide:{x}:1"])
    state.set_meta("glide:{w}", "paused", "0")
    state.groups.add(K("w", "stream"))

    def wire(s, *words):
        name = words[0].upper().encode()
        args = [w if isinstance(w, bytes) else str(w).encode() for w in words[1:]]
        return encode(COMMANDS[name].fn(s, args), s.proto)

    z = K("w", "scheduled")
    assert wire(s2, "ZRANGE", z, 0, -1, "WITHSCORES") == (
        b"*4\r\n$1\r\n3\r\n$13\r\n1700000060000\r\n$1\r\n4\r\n$14\r\n21990232555520\r\n")
    assert wire(s3, "ZRANGE", z, 0, -1, "WITHSCORES") == (
        b"*2\r\n*2\r\n$1\r\n3\r\n,1700000060000\r\n*2\r\n$1\r\n4\r\n,21990232555520\r\n")
    assert wire(s2, "ZSCORE", z, "4") == b"$14\r\n21990232555520\r\n"
    assert wire(s3, "ZSCORE", z, "4") == b",21990232555520\r\n"
    d = K("w", "deps:p")
    assert wire(s2, "SMEMBERS", d) == b"*1\r\n$11\r\nglide:{x}:1\r\n"
    assert wire(s3, "SMEMBERS", d) == b"~1\r\n$11\r\nglide:{x}:1\r\n"
    m = K("w", "meta")
    assert wire(s2, "HGETALL", m) == b"*2\r\n$6\r\npaused\r\n$1\r\n0\r\n"
    assert wire(s3, "HGETALL", m) == b"%1\r\n$6\r\npaused\r\n$1\r\n0\r\n"
    assert wire(s2, "HGET", m, "nope") == b"$-1\r\n"
    assert wire(s3, "HGET", m, "nope") == b"_\r\n"
    st = K("w", "stream")
    assert wire(s2, "XPENDING", st, "workers") == b"*4\r\n:0\r\n$-1\r\n$-1\r\n*-1\r\n"
    assert wire(s3, "XPENDING", st, "workers") == b"*4\r\n:0\r\n_\r\n_\r\n_\r\n"
    assert wire(s2, "TYPE", st) == b"+stream\r\n"
    assert wire(s2, "HGETALL", st) == (
        b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n")
