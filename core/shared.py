"""The engine's side of a node in shared mode (issue 19, docs/scaling.md): several jobgate
processes on one PostgreSQL, the database the source of truth for jobs that nobody holds.

A node's engine keeps only what is its own: the jobs its clients hold (reserved), its waiting
reservers, its timers. Every other job lives in the database:

- **Spill.** Before each group commit (`spill()`, called by the journal's `take`), every local
  job that is not reserved (ready, delayed, buried, finished) leaves the engine's indexes and
  is written with its state; the store (core/shared_store.py) clears its node and NOTIFYs its
  queue, so any node may claim it. A job put here and reserved here before the commit never
  leaves: its row is inserted reserved, held by this node.
- **Claim.** Reservers that wait here make demand (`demand()`: queue -> how many); the gateway
  claims that many ready rows per queue (`SELECT ... FOR UPDATE SKIP LOCKED`, reserved for this
  node) and hands them to `load()`, which indexes them as ready and serves the waiters,
  longest waiter first, as for a local put. A claimed job no waiter takes any more is spilled
  back at the next commit.
- **Probes.** A reserve that must not wait (beanstalk `reserve-with-timeout 0`, a bunqueue PULL
  without timeout) cannot answer TIMED_OUT from memory: the ready jobs are in the database.
  It waits for one claim round instead, and `end_probes()` times it out after that round.

Units: ms. Nothing here does I/O (the gateway's gateway/shared.py runs the statements).
"""
from __future__ import annotations

import math

from .model import RESERVED, TIMED_OUT
from .paging import compact_ids
from .recovery import adopt, index_stored, job_of_row
from .shared_calls import Calls
from .shared_events import EventRelay
from .shared_flows import SharedFlows
from .shared_settings import SharedSettings
from .shared_slots import SharedSlots
from .shared_tokens import SharedTokens
from .shared_counters import SharedCounters
from .shared_figures import SharedFigures
from .shared_results import RemoteWaits

#: ids a node hands out from one block of sequence jobgate_job_ids (migration 0009)
ID_BLOCK = 1_000_000
#: ask for the next block when fewer ids than this are left in the current one
ID_REFILL = 500_000
#: switch to the next block (at a commit) when fewer ids than this are left
ID_SWITCH = 100_000
#: at most this many jobs claimed for one queue in one claim
CLAIM_MAX = 100

class SharedNode:
    """The shared-mode state of one engine (core.engine.Engine): see the module docstring.

    `node`: this node's name (core/shared_store.py `SharedStore.node`); `on_demand()` (set by
    the gateway) is called when a reserver starts waiting here, so that a claim runs soon;
    `on_ids()` when the id block runs low (the gateway fetches the next with `set_block`).
    """

    #: ids in one block of sequence jobgate_job_ids
    block_size = ID_BLOCK

    def __init__(self, engine, node: str) -> None:
        self.e = engine
        self.node = node
        self.probes: list = []        # waiters that answer TIMED_OUT after the next claim round
        self.in_round: list = []      # probes the claim running now answers for
        self.more: dict = {}          # queue -> extra jobs batch reserves asked for
        self.on_demand = None
        self.on_ids = None
        self.on_query = None          # gateway: on_query(fn, args, callback), see query()
        self.settling: list = []      # (commit mark, fn, args, callback): query_settled()
        self.results = RemoteWaits(self)   # result waits for jobs not here (shared_results)
        self.events = EventRelay(self)     # events to and from the other nodes (shared_events)
        self.calls = Calls(self)           # commands forwarded to a job's node (shared_calls)
        self.flows = SharedFlows(self)     # flow parents told of children (shared_flows)
        self.settings = SharedSettings(self)   # queue settings on every node (shared_settings)
        self.slots = SharedSlots(self)     # concurrency limits across nodes (shared_slots)
        self.tokens = SharedTokens(self)   # rate limits across nodes (shared_tokens)
        self.counters = SharedCounters(self)   # counters of every node (shared_counters)
        self.figures = SharedFigures(self)     # dialects' figures of every node (shared_figures)
        self.block_end = 0            # the end (exclusive) of the current id block
        self.next_block = 0           # the start of the next block, 0 while not fetched
        self.asking_ids = False
        self.spilled = 0              # jobs given back to the database (stats)
        # heap-entry versions of claimed jobs: a job spilled and claimed back is a new Job
        # under the same id, and the heap entries the old one left (looked up by id:
        # core.records.live_job) must stay stale: each claim starts 2**16 higher, and above
        # the last version of every job spilled (spill), so a version never repeats for an id
        self._hver = 1 << 32
        self.claimed = 0              # jobs claimed from it
        # queues whose last claim found fewer rows than it asked for and that no ready
        # notification named since: a reserver starting to wait for one claims nothing
        # (the NOTIFY of the next ready row, or the poll, claims for it); see found()
        self.emptied: set = set()
        self._asked: dict = {}        # the demand of the claim running now (found())
        self.fresh: list = []         # jobs claimed since the last commit (spill candidates)

    # ---------------------------------------------------------------- queries
    def query(self, fn, args: tuple, callback) -> None:
        """Run `fn(conn, *args)` (a function of core that reads or writes the shared tables
        on a DB-API connection and commits) off the event loop, then `callback(result)` on
        it; on a database error `callback` gets the exception instead (an Exception
        instance: the dialect answers its server error). The gateway sets `on_query`."""
        self.on_query(fn, args, callback)

    def query_settled(self, fn, args: tuple, callback) -> None:
        """query(), once every change made on this node so far is committed (and so spilled:
        the statement sees this node's jobs as its clients last saw them; a client's pipelined
        `bury` then `kick` kicks the job). At once when nothing waits for the writer."""
        j = self.e.journal
        mark = j.commit_mark()
        if mark <= j.committed:
            self.query(fn, args, callback)
        else:
            self.settling.append((mark, fn, args, callback))

    def after_commit(self, fn) -> None:
        """Call `fn()` once every change made on this node so far is committed (at once when
        nothing waits for the writer): a forwarded command's reply (core/shared_calls.py)."""
        j = self.e.journal
        mark = j.commit_mark()
        if mark <= j.committed:
            fn()
        else:
            self.settling.append((mark, None, None, fn))

    def committed(self, number: int) -> None:
        """Batch `number` committed (core.journal.Persistence.done): run the settled queries
        that waited for it, in order."""
        s = self.settling
        if not s:
            return
        i = 0
        while i < len(s) and s[i][0] <= number:
            i += 1
        if i:
            ready, self.settling = s[:i], s[i:]
            for _, fn, args, callback in ready:
                if fn is None:
                    callback()   # after_commit
                else:
                    self.query(fn, args, callback)

    # ------------------------------------------------------------------ ids
    def set_block(self, start: int) -> None:
        """A block of ids from the sequence: [start, start + ID_BLOCK). The first one is used
        at once; later ones when the current block runs low (at a commit)."""
        self.asking_ids = False
        if self.block_end == 0:
            self.e.next_id = start
            self.block_end = start + ID_BLOCK
        else:
            self.next_block = start

    def _check_ids(self) -> None:
        left = self.block_end - self.e.next_id
        if left < ID_SWITCH and self.next_block:
            self.e.next_id = self.next_block
            self.block_end = self.next_block + ID_BLOCK
            self.next_block = 0
            left = ID_BLOCK
        if left < ID_REFILL and not self.next_block and not self.asking_ids \
                and self.on_ids is not None:
            self.asking_ids = True
            self.on_ids()

    # ---------------------------------------------------------------- spill
    def spill(self) -> None:
        """Give every local job that nobody here holds back to the database (see the module
        docstring): out of the engine's indexes and maps, marked for the commit being taken.
        Result waiters here of a job that leaves wait for it through the database
        (shared_results.RemoteWaits.take_over)."""
        e = self.e
        self._check_ids()
        waiters = e.result_waiters
        j = e.journal
        jobs = e.jobs
        # only jobs changed since the last commit, or claimed since, can have left the
        # reserved state: the others were spilled already or are still held
        fresh, self.fresh = self.fresh, []
        gone = {}
        for job in [*j.dirty.values(), *fresh]:
            if job.state is RESERVED or jobs.get(job.id) is not job:
                continue
            if waiters and job.id in waiters:   # its result waiters wait through the database
                for w in waiters.pop(job.id):
                    if not w.done:
                        self.results.take_over(job, w)
            gone[job.id] = job
        if not gone:
            return
        hver = self._hver
        for job in gone.values():
            q = e.queues[job.queue]
            e._leave(job, q)          # counts and heap entries (stale now); state kept
            if job.hver >= hver:      # a claim back starts above every entry it left
                hver = job.hver + 1
            del e.jobs[job.id]
            if job.uid is not None:
                e.by_uid.pop(job.uid, None)
            if job.ext is not None:
                e._unindex(job)
                deps = job.ext.get("deps")
                if deps:   # a flow parent leaving: the notes of its children find its row
                    e._unlink_deps(job.id, deps)
            q.ids_dead += 1
            if q.ids_dead > (len(q.ids) >> 1) + 1024:
                compact_ids(e, q)
            j.mark(job)               # its row is written with the state it has
            e._gc(q)
        self._hver = hver
        self.spilled += len(gone)

    # ---------------------------------------------------------------- claim
    def demand(self) -> dict:
        """queue name -> how many jobs to claim for it: its waiting reservers plus what batch
        reserves asked for (want_more), at most CLAIM_MAX, for the queues not paused here."""
        e = self.e
        now = e.clock.monotonic_ms()
        out = {}
        more = self.more
        for name, q in e.queues.items():
            if q.waiting and q.paused_until <= now and q.n_ready == 0 and (
                    q.limits is None or e._admits(q, now)):
                n = q.waiting + more.get(name, 0)
                s = q.limits
                c = s.concurrency if s is not None else None
                if c is not None:   # a concurrency limit: no more than it admits now
                    n = min(n, math.ceil(e._cap(q, c)) - q.n_reserved)
                if s is not None and s.rate_max is not None and s.granted:
                    n = min(n, math.floor(s.tokens))   # and its rate limit's tokens here
                out[name] = min(n, CLAIM_MAX)
        return out

    def wants_claim(self) -> bool:
        """True when a claim round would do something: reservers wait for jobs here
        (demand()), for concurrency slots (the poll: another node's slots may have
        lapsed) or for rate-limit tokens."""
        return (bool(self.demand()) or bool(self.slots.wants(self.more, set(), retry=True))
                or bool(self.tokens.wants(self.more, retry=True)))

    def waits_for(self, queue: str) -> bool:
        """True when reservers wait here for `queue` (a notification for it is worth a
        claim): one lookup, not the whole demand()."""
        q = self.e.queues.get(queue)
        return q is not None and q.waiting > 0

    def hint(self, queue: str) -> None:
        """A ready notification named `queue`: the database may hold claimable rows of it
        again (it leaves `emptied`, and the claim running now cannot put it back)."""
        self.emptied.discard(queue)
        self._asked.pop(queue, None)

    def forget_emptied(self) -> None:
        """Notifications may have been missed (the poll, a reconnected listener): the next
        round claims for every queue reservers wait for."""
        self.emptied.clear()
        self._asked = {}
        self.slots.forget_denied()   # and slots given back unnoticed (a lapsed row)
        self.tokens.forget_due()     # and tokens given back unnoticed

    def found(self, rows: list) -> None:
        """The claim of this round committed and brought `rows`: each queue it got fewer
        rows of than it asked for had no more claimable rows when the claim ran, and stays
        `emptied` until a notification names it (hint) or the next forget_emptied(). Every
        change that makes a row claimable NOTIFYs its queue at its commit, and a commit the
        claim did not see notifies after the round started, so no ready row is missed."""
        asked, self._asked = self._asked, {}
        if not asked:
            return
        got: dict = {}
        for r in rows:
            got[r["queue"]] = got.get(r["queue"], 0) + 1
        for name, n in asked.items():
            if got.get(name, 0) < n:
                self.emptied.add(name)

    def want_more(self, queues: list, n: int) -> None:
        """A waiting batch reserve (bunqueue PULLB) will take `n` more jobs of `queues` than
        one when it wakes: the next claim round brings them (then forgotten)."""
        for name in queues:
            self.more[name] = self.more.get(name, 0) + n

    def lease_rows(self, jobs) -> tuple:
        """(ids, deadlines) of the reserved ones of `jobs` (being written): each one's lease
        deadline in wall ms, so that its row says when another node may rescue it."""
        ids, until = [], []
        c = self.e.clock
        off = c.wall_ms() - c.monotonic_ms()
        for job in jobs:
            if job.state is RESERVED:
                ids.append(job.id)
                until.append(job.deadline + off)
        return ids, until

    def held_ids(self) -> list:
        """The ids of the jobs this node has in memory (reserved, or claimed and not yet
        given back): its rows that are not stranded (SharedStore.sweep)."""
        return list(self.e.jobs)

    def wait_started(self) -> None:
        """A reserver started waiting here (the port calls it): claim soon."""
        if self.on_demand is not None:
            self.on_demand()

    def probe(self, waiter) -> None:
        """`waiter` (a Waiter without timeout) answers TIMED_OUT after the next claim round
        unless a claimed job reaches it first."""
        self.probes.append(waiter)
        self.wait_started()

    def start_round(self) -> tuple:
        """A claim round starts now: (demand, wants). `demand` (see demand()) leaves out
        the `emptied` queues unless a probe waits (a probe answers TIMED_OUT only after a
        claim, which sees every committed row); `wants`: the concurrency slots to take first
        (core.shared_slots.SharedSlots.wants; {} unless a limited queue's waiters need
        more). The rate-limit tokens to take before them are in `tokens.asked`
        (core.shared_tokens.SharedTokens.wants). The probes waiting now are answered by this
        round (end_probes), later ones by the next."""
        self.in_round += self.probes
        self.probes = []
        d = self.demand()
        skip = self.emptied if not self.in_round else set()
        wants = self.slots.wants(self.more, skip)
        tw = self.tokens.wants(self.more, skip)
        # a batch reserve's extra jobs are asked for again by the round after the take
        self.more = {name: n for name, n in self.more.items() if name in wants or name in tw}
        if self.emptied and not self.in_round:
            d = {name: n for name, n in d.items() if name not in self.emptied}
        self._asked = dict(d)
        self.slots.start(d, wants)
        self.tokens.start(tw)
        return d, wants

    def carry_probes(self) -> None:
        """The round that ends now took concurrency slots before its claim could use them:
        its probes are answered by the next round (which claims under the new slots), not
        timed out by this one."""
        if self.in_round:
            self.probes[:0] = self.in_round
            self.in_round = []

    def end_probes(self) -> None:
        """After a claim round: every probe it answered for that is still waiting times out."""
        if not self.in_round:
            return
        probes, self.in_round = self.in_round, []
        e = self.e
        for w in probes:
            if not w.done:
                e._finish_waiter(w)
                w.callback(TIMED_OUT)

    def adopt_rows(self, rows: list) -> None:
        """Index rows that no node held, taken for this node (core/shared_calls.py `reach`),
        in the state each has: ready, delayed (its timer armed), buried, or finished. They
        are this node's until its next commit gives back what nobody here reserved (spill),
        so a command about one of them runs here as on a single server. A row whose id is
        here already is skipped."""
        e = self.e
        now_mono = e.clock.monotonic_ms()
        now_wall = e.clock.wall_ms()
        for r in rows:
            if r["id"] in e.jobs:
                continue
            job = job_of_row(e, r)
            adopt(e, job, r, now_mono, now_wall)
            q = e.queue(job.queue)
            job.hver = self._hver
            self._hver += 1 << 16
            index_stored(e, job, q, r, now_mono, now_wall)
            self.fresh.append(job)
            e.journal.mark(job)   # a commit soon gives it back unless reserved here

    def load(self, rows: list) -> int:
        """Index claimed rows (dicts of jobs columns, reserved for this node in the database)
        as ready jobs here and serve the waiting reservers; then end the probes. A row whose
        id is already here (cannot happen while claims are exclusive) is skipped. Returns how
        many claimed jobs no waiter took: they go back to the database with the next commit
        (started now)."""
        e = self.e
        now_mono = e.clock.monotonic_ms()
        now_wall = e.clock.wall_ms()
        touched = []
        for r in rows:
            if r["id"] in e.jobs:
                continue
            job = job_of_row(e, r)
            job.reserves = max(0, r["reserves"] - 1)   # the local reserve counts it again
            adopt(e, job, r, now_mono, now_wall)
            q = e.queue(job.queue)   # not in q.ids: that listing is of jobs put here
            job.hver = self._hver
            self._hver += 1 << 16
            e._to_ready(job, q)
            self.fresh.append(job)
            touched.append(q)
        self.claimed += len(touched)
        for q in touched:
            e._serve(q)
        self.end_probes()
        left = 0
        for job in self.fresh:
            if job.state is not RESERVED and e.jobs.get(job.id) is job:
                left += 1
                e.journal.mark(job)   # a commit soon gives it back (spill)
        return left
