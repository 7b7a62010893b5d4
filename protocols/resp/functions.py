"""FUNCTION and FCALL: glide-mq's function library, answered natively (docs/glide-mq.md).

`FUNCTION LOAD [REPLACE] <source>` of a `#!lua name=glidemq` library is accepted and never run:
the server answers as Redis does (bulk "glidemq"; glide-mq-golden B05–B08) and from then on
`FCALL glidemq_*` runs jobgate's own implementation of each function (functions_jobs.py),
atomically on the canonical engine. The loaded flag is kept across restarts (a dialect record),
as Redis keeps its functions. `glidemq_version` answers LIBRARY_VERSION ("93"), so that today's
clients do not reload the library on every connect (glide-mq-NOTES.md "What a real client
sends on connect").

Errors are Redis's texts (golden B02, B06, B08, B11, H01–H05, H24).
"""
from __future__ import annotations

from .commands import command, wrong_args
from .encode import Error, Map, Set
from .state import LIBRARY_NAME, LIBRARY_VERSION

#: The 45 functions of library v93 (glide-mq 0.15.4), as FUNCTION LIST names them (golden B12).
LIBRARY_FUNCTIONS = (
    "addFlow", "addJob", "changeDelay", "changePriority", "checkBudget", "checkConcurrency",
    "clean", "complete", "completeAndFetchNext", "completeChild", "dedup", "deferActive",
    "drain", "fail", "getActiveListJobIds", "healListActive", "moveActiveToDelayed",
    "moveToActive", "moveToWaitingChildren", "nextDue", "pause", "popLists", "promote",
    "promoteJob", "promoteRateLimited", "rateLimit", "rateLimitGroup",
    "rateLimitGroupExternal", "reclaimStalled", "reclaimStalledListJobs",
    "recordUsageAndCheckBudget", "registerParent", "removeJob", "renewLock", "resume",
    "retryJobs", "revoke", "rpopAndReserve", "searchByName", "signal", "suspend",
    "sweepSuspended", "tryLock", "unlock", "version",
)
FUNCTION_NAMES = frozenset(b"glidemq_" + n.encode() for n in LIBRARY_FUNCTIONS)

NOT_FOUND = "ERR Function not found"


def library_name(source: bytes) -> str | None:
    """The library name of a `#!lua name=<name>` first line, or None without that metadata."""
    first = source.split(b"\n", 1)[0].strip()
    if not first.startswith(b"#!"):
        return None
    words = first[2:].split()
    if not words or words[0] != b"lua":
        return None
    for w in words[1:]:
        if w.startswith(b"name="):
            return w[5:].decode("utf-8", "replace") or None
    return None


@command("FUNCTION", -3, sub="LOAD", write=True)
def function_load(sess, args):
    """FUNCTION LOAD [REPLACE] <source>: bulk "glidemq" (golden B05, B07); `ERR Library
    'glidemq' already exists` without REPLACE (B06); `ERR Missing library metadata` (B08)."""
    replace = False
    rest = args[1:]
    while len(rest) > 1 and rest[0].upper() == b"REPLACE":
        replace = True
        rest = rest[1:]
    if len(rest) != 1:
        return Error("ERR Unknown option given: " + (rest[0].decode("utf-8", "replace")
                                                      if rest else ""))
    name = library_name(rest[0])
    if name is None:
        return Error("ERR Missing library metadata")
    if name != LIBRARY_NAME:
        return Error(f"ERR jobgate answers only glide-mq's function library natively; "
                     f"library '{name}' cannot be loaded")
    st = sess.state
    if st.loaded and not replace:
        return Error(f"ERR Library '{LIBRARY_NAME}' already exists")
    if not st.loaded:
        st.set_loaded(True)
        sess.need_commit = True
    return LIBRARY_NAME


def _glob(pattern: bytes, name: bytes) -> bool:
    import fnmatch
    return fnmatch.fnmatchcase(name.decode("utf-8", "replace"),
                               pattern.decode("utf-8", "replace"))


@command("FUNCTION", -2, sub="LIST")
def function_list(sess, args):
    """FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE]: the glidemq library (engine LUA, its 45
    functions without description or flags) once loaded (golden B01, B12, B13, I18)."""
    pattern = None
    rest = args[1:]
    while rest:
        opt = rest[0].upper()
        if opt == b"LIBRARYNAME" and len(rest) > 1:
            pattern = rest[1]
            rest = rest[2:]
        elif opt == b"WITHCODE":
            rest = rest[1:]
        else:
            return Error("ERR Unknown argument " + rest[0].decode("utf-8", "replace"))
    if not sess.state.loaded or (pattern is not None
                                 and not _glob(pattern, LIBRARY_NAME.encode())):
        return []
    funcs = [Map([("name", "glidemq_" + n), ("description", None), ("flags", Set([]))])
             for n in LIBRARY_FUNCTIONS]
    return [Map([("library_name", LIBRARY_NAME), ("engine", "LUA"), ("functions", funcs)])]


@command("FUNCTION", 3, sub="DELETE", write=True)
def function_delete(sess, args):
    """FUNCTION DELETE <name>: OK for the loaded glidemq library; `ERR Library not found`
    (golden H24)."""
    if args[1].decode("utf-8", "replace") != LIBRARY_NAME or not sess.state.loaded:
        return Error("ERR Library not found")
    sess.state.set_loaded(False)
    sess.need_commit = True
    return _ok()


@command("FUNCTION", -2, sub="FLUSH", write=True)
def function_flush(sess, args):
    """FUNCTION FLUSH [ASYNC|SYNC]: forget the library (jobs stay)."""
    if sess.state.loaded:
        sess.state.set_loaded(False)
        sess.need_commit = True
    return _ok()


def _ok():
    from .encode import Simple
    return Simple("OK")


def parse_numkeys(args: list):
    """FCALL's `numkeys keys... args...` -> (keys, argv) or an Error with Redis's text."""
    try:
        n = int(args[1])
    except ValueError:
        return Error("ERR Bad number of keys provided")
    if n < 0:
        return Error("ERR Number of keys can't be negative")
    if n > len(args) - 2:
        return Error("ERR Number of keys can't be greater than number of args")
    return args[2:2 + n], args[2 + n:]


def _fcall(sess, args, ro: bool):
    name = args[0]
    parsed = parse_numkeys(args)
    if parsed.__class__ is Error:
        return parsed
    if not sess.state.loaded or name not in FUNCTION_NAMES:
        return Error(NOT_FOUND)
    if ro:
        return Error("ERR Can not execute a script with write flag using *_ro command.")
    fn = IMPLEMENTED.get(name)
    if fn is None:
        n = name.decode()
        return Error(f"ERR jobgate: {n} is a glide-mq Worker function, not supported "
                     f"(producers only; see docs/glide-mq.md)")
    keys, argv = parsed
    if sess.shared:   # a node in shared mode: what the database knows first
        return run_function(sess, name, fn, keys, argv)
    return fn(sess, keys, argv)


@command("FCALL", -3, write=True)
def fcall(sess, args):
    """FCALL <function> <numkeys> <key>... <arg>...: the function's reply (golden B, C, D, E,
    F, G68–G72, H)."""
    return _fcall(sess, args, False)


@command("FCALL_RO", -3)
def fcall_ro(sess, args):
    """FCALL_RO: every glidemq function is a writer (golden B11)."""
    return _fcall(sess, args, True)


from .functions_jobs import IMPLEMENTED  # noqa: E402  (registers the functions)
from .shared import run_function  # noqa: E402

__all__ = ["LIBRARY_FUNCTIONS", "FUNCTION_NAMES", "LIBRARY_VERSION", "library_name",
           "parse_numkeys", "wrong_args"]
