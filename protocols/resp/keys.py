"""glide-mq's keys as a READ-ONLY view of jobgate's canonical jobs (issue 17; glide-mq-NOTES.md
"Keys are the API", "Reads a producer or dashboard does"). Importing this module registers
every key command in protocols/resp/commands.py's table.

Dashboards and glide-mq's own Queue (getJob, getJobs, getJobCounts, Job.getState,
getJobLogs, isPaused, searchJobs) read Redis keys directly. jobgate keeps no such keys: each
read computes the key's value from the engine (core.api Port) and GlideState, so it shows
what ANY dialect did (a glide job completed by a beanstalk `delete`, a workq `complete` or a
bunqueue ACK reads `state completed` and sits in `:completed`).

| key (`<prefix>:{<queue>}:...`) | type | content (module) |
| --- | --- | --- |
| `job:<id>` | hash | glide.job_hash of the job named `<prefix>:{<queue>}:<id>` (keys_hashes) |
| `meta`, `dedup`, `ordering`, `group:<key>` | hash | GlideState records (keys_hashes) |
| `id` | string | the id counter (keys_hashes); `list-active`: never exists |
| `stream` | stream | ready/reserved plain jobs, FIFO, `jobId <id> name <name>` (keys_streams) |
| `events` | stream | GlideState.events (keys_streams) |
| `scheduled` | zset | delayed + prioritized jobs, priority*2^42 + due (keys_zsets) |
| `completed`, `failed` | zset | finished jobs by finishedOn (keys_zsets) |
| `suspended`, `ratelimited` | zset | never exist |
| `lifo` | list | ready lifo jobs, RPUSH order (keys_lists) |
| `priority`, `groupq:<key>` | list | never exist (keys_lists says why) |
| `log:<id>` | list | the job's log messages (keys_lists) |
| `deps:<id>` | set | a flow parent's children (keys_lists) |
| tryLock lock keys | string | the token while held (keys_hashes GET, keys_generic TTL) |

Only jobs whose extras have ``glide`` (created over RESP) and whose prefix is the key's
appear; other jobs of the queue have no glide-mq id. Redis semantics: a missing key reads as
empty (HGETALL an empty map, LRANGE [], ZCARD 0, GET null, TYPE `none`), a key of another
type answers `WRONGTYPE Operation against a key holding the wrong kind of value`, a key
that is not a glide-mq key does not exist, arity errors come from the table. Empty
hashes/lists/sets/zsets do not exist (Redis deletes them); an emptied `:stream` exists while
its consumer group does.

Commands (each module's docstring has the details and the golden steps it matches):
keys_hashes HGETALL HGET HMGET HLEN HEXISTS HKEYS HVALS HSTRLEN GET MGET;
keys_streams XLEN XRANGE XREVRANGE XPENDING; keys_zsets ZCARD ZSCORE ZMSCORE ZCOUNT ZRANK
ZREVRANK ZRANGE ZREVRANGE ZRANGEBYSCORE ZREVRANGEBYSCORE; keys_lists LLEN LRANGE LINDEX
SMEMBERS SCARD SISMEMBER SMISMEMBER; keys_generic TYPE EXISTS TTL PTTL SCAN KEYS DBSIZE;
keys_refused: the data-writing commands (HSET, SET, DEL, XADD, ZADD, LPUSH, SADD, INCR,
EXPIRE, ...), each refused with one error naming it (keys_refused.refusal).

Cost: `HGET <job> state` (polled by producers) finds the job by its uid (port.lookup): O(1)
plus the hash's fields. Queue-level keys list the queue's jobs (port.jobs), SCAN / KEYS /
DBSIZE every visible queue's jobs: reads of dashboards, not of the hot path.
"""
from __future__ import annotations

from . import keys_generic, keys_hashes, keys_lists, keys_refused, keys_streams, keys_zsets

MODULES = (keys_hashes, keys_streams, keys_zsets, keys_lists, keys_generic, keys_refused)

__all__ = ["MODULES"]
