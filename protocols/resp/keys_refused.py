"""Data-writing Redis commands, refused (protocols/resp/keys.py has the overview).

glide-mq's keys are a view computed from jobgate's canonical jobs: writing them directly
(HSET a job's state, XADD the stream, DEL a key...) has no meaning there, so each command
below answers, after the table's arity check, the error

    ERR jobgate: '<name>' is not supported: glide-mq keys are a read-only view of jobgate's
    jobs; change jobs with FCALL glidemq_* functions

(one line; `<name>` lower case, as Redis names commands in its errors). redis-py raises it
as ResponseError, glide-mq as a command error. Nothing is changed, so none of them is a
`write` command of the table (they answer at once, also while storage is down).

Not here, because the lead's session / worker modules own them: XGROUP, XREADGROUP, XREAD,
XACK, XCLAIM, XAUTOCLAIM, MULTI/EXEC and FUNCTION. A module registered later under the same
name replaces the refusal (commands.COMMANDS is a dict).
"""
from __future__ import annotations

from .commands import command
from .encode import Error

#: name -> Redis 7.0 arity (COMMAND INFO).
REFUSED = {
    # hashes
    "hset": -4, "hsetnx": 4, "hmset": -4, "hdel": -3, "hincrby": 4, "hincrbyfloat": 4,
    # strings
    "set": -3, "setnx": 3, "setex": 4, "psetex": 4, "mset": -3, "msetnx": -3, "getset": 3,
    "getdel": 2, "getex": -2, "append": 3, "setrange": 4, "incr": 2, "incrby": 3,
    "incrbyfloat": 3, "decr": 2, "decrby": 3,
    # keys
    "del": -2, "unlink": -2, "expire": -3, "pexpire": -3, "expireat": -3, "pexpireat": -3,
    "persist": 2, "rename": 3, "renamenx": 3, "copy": -3, "move": 3, "restore": -4,
    "flushdb": -1, "flushall": -1, "swapdb": 3,
    # streams
    "xadd": -5, "xdel": -3, "xtrim": -4, "xsetid": -3,
    # sorted sets
    "zadd": -4, "zrem": -3, "zincrby": 4, "zpopmin": -2, "zpopmax": -2, "bzpopmin": -3,
    "bzpopmax": -3, "zmpop": -4, "bzmpop": -5, "zremrangebyscore": 4, "zremrangebyrank": 4,
    "zremrangebylex": 4, "zunionstore": -4, "zinterstore": -4, "zdiffstore": -4,
    "zrangestore": -5,
    # lists
    "lpush": -3, "rpush": -3, "lpushx": -3, "rpushx": -3, "lpop": -2, "rpop": -2, "lset": 4,
    "lrem": 4, "ltrim": 4, "linsert": 5, "lmove": 5, "rpoplpush": 3, "blpop": -3,
    "brpop": -3, "blmove": 6, "brpoplpush": 4, "lmpop": -4, "blmpop": -5,
    # sets
    "sadd": -3, "srem": -3, "spop": -2, "smove": 4, "sinterstore": -3, "sunionstore": -3,
    "sdiffstore": -3,
}


def refusal(name: str) -> str:
    """The error text for data-writing command `name` (lower case)."""
    return (f"ERR jobgate: '{name}' is not supported: glide-mq keys are a read-only view of "
            f"jobgate's jobs; change jobs with FCALL glidemq_* functions")


def _refuse(name: str):
    text = refusal(name)

    def fn(sess, args):
        return Error(text)
    fn.__name__ = f"refuse_{name}"
    fn.__doc__ = f"{name.upper()}: refused ({text})."
    return fn


for _name, _arity in REFUSED.items():
    command(_name.upper(), _arity)(_refuse(_name))
