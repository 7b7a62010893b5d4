"""Where jobgate's glide-mq dialect deliberately does not answer what Redis + glide-mq's Lua
library answered in the golden (tests/data/glide-mq-golden.txt), as data.

``KNOWN`` maps a golden step id to the reason. A known step is still played (later steps may
depend on it). Its reply is checked:

- against ``JOBGATE_EXPECTS[step_id]`` when there is one: the replies jobgate must give, in
  the golden's notation (one ``S<`` text per command; T0 placeholders allowed; R steps in the
  R notation), checked exactly like a golden reply -> PASS or FAIL;
- else against the golden: a match is PASS, a mismatch is KNOWN (not a failure).

``python -m conformance.glidemq --reference`` ignores this module and expects the golden
everywhere (to check a real Redis with the library).

The entries so far are the probe-edge steps of glide-mq-NOTES.md ("No rollback", "Lenient
arguments"): Redis runs the Lua library without rollback, so a Lua error after a write leaves
the write, and ``ERR:COST_EXCEEDS_CAPACITY`` comes back after the id counter advanced; the
golden keeps these cases on queues nobody reads afterwards. jobgate is atomic and may refuse
malformed input with its own clear error. The lead fills in ``JOBGATE_EXPECTS`` once the
dialect's replies are fixed.
"""

from __future__ import annotations

__all__ = ["KNOWN", "JOBGATE_EXPECTS", "check_known"]

_ATOMIC_COUNTER = (
    "C16's aftermath: Redis answered ERR:COST_EXCEEDS_CAPACITY after the probe-edge id counter "
    "had advanced to 1 (golden comment at C16); jobgate is atomic and does not spend an id on "
    "a refused job, so every later auto id on probe-edge is one lower")
_LUA_ERROR = (
    "Lua error after a partial write in Redis (no rollback; glide-mq-NOTES.md 'No rollback'); "
    "jobgate checks the call first and answers its own error without writing anything")
_LENIENT = (
    "Redis's Lua is lenient with malformed arguments (glide-mq-NOTES.md 'Lenient arguments': "
    "a missing timestamp stored as the text 'nil', non-numeric delay/priority taken as 0); "
    "jobgate may refuse such a call with an error reply")

_SETINFO = (
    "CLIENT SETINFO: the golden's Redis 7.0 did not know it; jobgate answers as Redis 7.2+ and "
    "Valkey do (+OK, or its option error), which every client accepts (glide-mq-NOTES.md "
    "'What a real client sends on connect': answer OK)")

_EMPTY_FLOW = (
    "a flow parent with no children and no extra dependencies (R25's addFlow) waits for "
    "nothing in jobgate, so it is ready at once and sits in the stream; Redis leaves it in "
    "waiting-children with nothing that would ever requeue it")

KNOWN: dict[str, str] = {
    "R27": _EMPTY_FLOW,
    "R37": _EMPTY_FLOW,
    "A02": _SETINFO,
    "A03": _SETINFO,
    "A16": _SETINFO + " (an unknown attribute: Redis 7.2's 'Unrecognized option' error)",
    "I01": _SETINFO,
    "I02": _SETINFO,
    "C20": _ATOMIC_COUNTER + " (golden '2')",
    "D12": _ATOMIC_COUNTER + " (golden '3')",
    "G15": _ATOMIC_COUNTER + " (the golden reads job 2 of probe-edge, C20's job)",
    "H06": _LENIENT + " (3 ARGV, no timestamp); the golden's id also follows C16's counter",
    "H07": _LENIENT + " (reads back H06's timestamp 'nil')",
    "H08": _LENIENT + " (delay 'soon', priority 'high'); the golden's id also follows C16's "
                      "counter",
    "H09": _LUA_ERROR + " (3 keys: the events key is missing; Redis wrote the job hash and "
                        "stream entry, then failed at the event XADD)",
    "H10": _LUA_ERROR + " (the id key lacks the ':id' suffix; Redis's text quotes a Lua "
                        "line number)",
    "H11": _LUA_ERROR + " (non-numeric timestamp with a delay; Redis had done INCR and HSET)",
    "H12": _LUA_ERROR + " (numkeys 0; Redis's text quotes a Lua line number)",
    "H13": _LUA_ERROR + " (the id key holds a hash: WRONGTYPE, with the Lua line in Redis's "
                        "text)",
    "H22": _LUA_ERROR + " (pause with 1 key: Redis set meta paused=1, then failed at XADD)",
    "H23": _LUA_ERROR + " (addFlow announces 1 child and gives none: Redis wrote the parent)",
}

#: step id -> the replies jobgate gives there (golden notation, one per command)
JOBGATE_EXPECTS: dict[str, list[str]] = {
    "A02": ['simple "OK"'],
    "A03": ['simple "OK"'],
    "A16": ['error "ERR Unrecognized option \'NOPE\'"'],
    "I01": ['simple "OK"'],
    "I02": ['simple "OK"'],
    "H09": ['error "ERR glidemq_addJob needs the keys id, stream, scheduled and events (got 3)"'],
    "H10": ['error "ERR unexpected key format: glide:{probe-edge}:ident"'],
    "H11": ['error "ERR glidemq_addJob: timestamp must be an integer (ms) with a delay"'],
    "H12": ['error "ERR glidemq_addJob needs the keys id, stream, scheduled and events (got 0)"'],
    "H13": ['error "ERR unexpected key format: glide:{probe-edge}:bad:id"'],
    "H22": ['error "ERR glidemq_pause needs the keys meta and events (got 1)"'],
    "H23": ['error "ERR glidemq_addFlow: numChildren 1 does not match the keys and arguments '
            'given"'],
}


def check_known(step_ids: list[str]) -> list[str]:
    """Problems with this data against the golden's step ids (empty list = consistent):
    every entry names a step, and every JOBGATE_EXPECTS entry is a known difference."""
    ids = set(step_ids)
    problems = [f"KNOWN names no golden step: {s}" for s in KNOWN if s not in ids]
    problems += [f"JOBGATE_EXPECTS {s} is not in KNOWN" for s in JOBGATE_EXPECTS
                 if s not in KNOWN]
    return problems
