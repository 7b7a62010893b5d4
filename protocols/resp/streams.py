"""The consumer side the wire protocol names (glide-mq-wire-protocol.txt "Consumer Group";
docs/glide-mq.md): `XGROUP CREATE <prefix>:{Q}:stream workers <id> [MKSTREAM]`,
`XREADGROUP GROUP workers <consumer> [COUNT n] [BLOCK ms] STREAMS <stream> >` reserving jobs
of the canonical queue Q (any job, whichever dialect put it: glide-mq's own order — prioritized,
then LIFO, then FIFO — is the canonical rank), and `XACK <stream> workers <id>...` completing
them (a producer polling `HGET … state` sees `completed`).

An entry id is `<created wall ms>-<canonical job id>` (`stream_id`): XACK finds the job by the
part after the dash. A reserved job is leased for its TTR (glide-mq's lockDuration, default
30 s; beanstalk sees the same TTR); a consumer that disconnects keeps its pending entries
until their TTR ends, when they are ready again (as Redis keeps a PEL until it is claimed).
A glide-mq Node Worker needs far more (about 20 functions): docs/glide-mq.md says what.
"""
from __future__ import annotations

from .commands import command
from .encode import Error, Map, NullArray
from .glide import DIALECT, parse_key, split_member
from .session import WAIT

OK = None


def stream_id(created_ms: int, job_id: int) -> str:
    """The stream entry id of a job: `<created wall ms>-<canonical id>`."""
    return f"{created_ms}-{job_id}"


def parse_stream_id(s: bytes) -> int | None:
    """The canonical job id of an entry id from stream_id, or None."""
    ms, dash, seq = s.partition(b"-")
    if not dash or not ms.isdigit() or not seq.isdigit():
        return None
    return int(seq)


def _stream_key(raw: bytes):
    k = parse_key(raw)
    return k if k is not None and k.kind == "stream" and k.arg is None else None


@command("XGROUP", -4, sub="CREATE", write=False)
def xgroup_create(sess, args):
    """XGROUP CREATE key group id [MKSTREAM] [ENTRIESREAD n]: OK, or BUSYGROUP when the group
    exists (glide-mq ignores that error)."""
    key, group = args[1], args[2]
    k = _stream_key(key)
    if k is None:
        return Error("ERR jobgate: consumer groups exist only on glide-mq stream keys "
                     "(<prefix>:{<queue>}:stream)")
    mk = any(a.upper() == b"MKSTREAM" for a in args[4:])
    st = sess.state
    if group != b"workers":
        return Error("ERR jobgate: the consumer group of a glide-mq stream is 'workers'")
    name = key.decode()
    if name in st.groups:
        return Error("BUSYGROUP Consumer Group name already exists")
    if not mk and st.counter(k.base) == 0 and sess.port.queue(k.queue) is None:
        return Error("ERR The XGROUP subcommand requires the key to exist. Note that for "
                     "CREATE you may want to use the MKSTREAM option to create an empty "
                     "stream automatically.")
    st.groups.add(name)
    from .encode import Simple
    return Simple("OK")


@command("XGROUP", 4, sub="DESTROY")
def xgroup_destroy(sess, args):
    """XGROUP DESTROY key group: 1 when it existed, else 0."""
    name = args[1].decode("utf-8", "replace")
    if args[2] == b"workers" and name in sess.state.groups:
        sess.state.groups.discard(name)
        return 1
    return 0


def _entry(view) -> list:
    from .glide import glide_of
    g = glide_of(view)
    ext = view.ext or {}
    jid = g["id"] if g is not None else view.uid
    name = ext.get("name")
    return [stream_id(view.created_ms, view.id),
            ["jobId", jid, "name", "" if name is None else str(name)]]


def _reply(sess, key: bytes, entries: list):
    if sess.proto == 3:
        return Map([(key, entries)])
    return [[key, entries]]


def _no_group(key: bytes) -> Error:
    return Error(f"NOGROUP No such key '{key.decode('utf-8', 'replace')}' or consumer group "
                 f"'workers' in XREADGROUP with GROUP option")


@command("XREADGROUP", -7, write=True)
def xreadgroup(sess, args):
    """XREADGROUP GROUP group consumer [COUNT n] [BLOCK ms] [NOACK] STREAMS key id: up to n
    jobs of the stream's queue, reserved for this connection (one stream per call)."""
    if args[0].upper() != b"GROUP":
        return Error("ERR syntax error")
    group, consumer = args[1], args[2]
    count, block, i = 1, None, 3
    while i < len(args) and args[i].upper() != b"STREAMS":
        opt = args[i].upper()
        if opt in (b"COUNT", b"BLOCK") and i + 1 < len(args):
            try:
                v = int(args[i + 1])
            except ValueError:
                return Error("ERR value is not an integer or out of range")
            if v < 0:
                return Error("ERR timeout is negative" if opt == b"BLOCK"
                             else "ERR value is out of range, must be positive")
            if opt == b"COUNT":
                count = max(1, v)
            else:
                block = v
            i += 2
        elif opt == b"NOACK":
            i += 1
        else:
            return Error("ERR syntax error")
    rest = args[i + 1:]
    if not rest or len(rest) % 2:
        return Error("ERR Unbalanced 'xreadgroup' list of streams: for each stream key an ID "
                     "or '>' must be specified.")
    if len(rest) != 2:
        return Error("ERR jobgate: XREADGROUP reads one stream per call")
    key, since = rest
    k = _stream_key(key)
    if k is None or group != b"workers" or key.decode("utf-8", "replace") \
            not in sess.state.groups:
        return _no_group(key)
    if since != b">":
        return _reply(sess, key, [])   # this consumer's history: jobgate keeps none
    port = sess.port
    owner = _owner(sess, consumer)
    got = port.reserve_many(owner, k.queue, count)
    if got:
        sess.need_commit = False
        return _reply(sess, key, [_entry(port.job(r.id)) for r in got])
    if block is None:
        return None if sess.proto == 3 else NullArray
    timeout = None if block == 0 else block

    def answered(r):
        from core.api import Reserved
        if isinstance(r, Reserved):
            sess.wake(_reply(sess, key, [_entry(port.job(r.id))]))
        else:
            sess.wake(None if sess.proto == 3 else NullArray)

    r = port.reserve(owner, [k.queue], timeout, answered)
    from core.api import WAITING, Reserved
    if isinstance(r, Reserved):
        return _reply(sess, key, [_entry(port.job(r.id))])
    if r is not WAITING:
        return None if sess.proto == 3 else NullArray
    sess.waiting = lambda: port.cancel_wait(owner)
    return WAIT


def _owner(sess, consumer: bytes):
    o = getattr(sess, "owner", None)
    if o is None:
        o = sess.owner = sess.port.new_owner(DIALECT, margin=False)
    o_name = "glidemq:" + consumer.decode("utf-8", "replace")
    sess.owner_name = o_name
    return o


@command("XACK", -4, write=True)
def xack(sess, args):
    """XACK key group id...: completes each job (empty result) that is reserved; the count
    of those acknowledged."""
    key, group = args[0], args[1]
    if _stream_key(key) is None or group != b"workers" \
            or key.decode("utf-8", "replace") not in sess.state.groups:
        return 0
    port = sess.port
    n = 0
    for raw in args[2:]:
        jid = parse_stream_id(raw)
        if jid is None:
            return Error("ERR Invalid stream ID specified as stream command argument")
        v = port.job(jid)
        if v is None or v.state != "reserved":
            continue
        if port.complete(jid, b"", DIALECT):
            n += 1
    if n:
        sess.need_commit = True
    return n


__all__ = ["stream_id", "parse_stream_id", "split_member"]
