// The real bunqueue client (TCP mode) driving issue 16's manual moves and job logs: Queue.promoteJobs
// (PromoteJobs), Queue.moveJobToWait (MoveToWait of a delayed job and of an active job with its
// lock token), Queue.changeJobDelay (ChangeDelay), Queue.addJobLog / getJobLogs / clearJobLogs
// (AddLog, GetLogs, ClearLogs), and a manual Worker's getNextJob / extendJobLocks (PULL with a
// lock, ExtendLocks). Prints ONE JSON object with what it observed and exits 0; on an exception
// prints it on stderr (and a JSON object with "error") and exits 1.
//
//   bun moves.ts [--host H] [--port P]
import { Queue, Worker } from "bunqueue/client";

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

const host = arg("host") ?? "127.0.0.1";
const port = Number(arg("port") ?? 6789);
const qname = `jgmv-${Date.now()}-${Math.random().toString(36).slice(2, 8)}`;
const connection = { host, port, commandTimeout: 10_000 };
const LONG = 600_000;

async function main() {
  const out: Record<string, any> = { queue: qname };
  const queue = new Queue(qname, { connection, embedded: false });
  const queues = [queue];
  let worker: Worker | null = null;
  try {
    // ---- PromoteJobs: the oldest delayed jobs first
    const delayed = [];
    for (let i = 0; i < 3; i++) delayed.push(await queue.add("later", { i }, { delay: LONG }));
    out.promotedTwo = await queue.promoteJobs({ count: 2 });
    out.statesAfterTwo = await Promise.all(delayed.map((j) => queue.getJobState(j.id)));
    out.promotedRest = await queue.promoteJobs();
    out.promotedNone = await queue.promoteJobs();
    out.statesAfterAll = await Promise.all(delayed.map((j) => queue.getJobState(j.id)));

    // ---- MoveToWait of a delayed job
    const d = await queue.add("delayed-one", { d: 1 }, { delay: LONG });
    out.delayedBefore = await queue.getJobState(d.id);
    out.moveDelayed = await queue.moveJobToWait(d.id);
    out.delayedAfter = await queue.getJobState(d.id);

    // ---- ChangeDelay
    const c = await queue.add("change", { c: 1 });
    await queue.changeJobDelay(c.id, LONG);
    out.changedState = await queue.getJobState(c.id);
    const cj = await queue.getJob(c.id);
    out.changedDelayMs = cj ? (cj as any).delay ?? null : null;
    await queue.changeJobDelay(c.id, 0);
    out.changedBackState = await queue.getJobState(c.id);

    // ---- job logs
    const l = await queue.add("logged", { l: 1 });
    out.logAdds = [];
    for (const line of ["first", "second", "third"]) out.logAdds.push(await queue.addJobLog(l.id, line));
    out.logs = await queue.getJobLogs(l.id);
    await queue.clearJobLogs(l.id, 1);
    out.logsKeep1 = await queue.getJobLogs(l.id);
    await queue.clearJobLogs(l.id);
    out.logsCleared = await queue.getJobLogs(l.id);

    // ---- an active job with a lock, on a queue of its own: ExtendLocks, MoveToWait
    const q2 = new Queue(`${qname}-a`, { connection, embedded: false });
    queues.push(q2);
    const a = await q2.add("active", { a: 1 });
    worker = new Worker(`${qname}-a`, null as any, { connection, embedded: false, autorun: false, useLocks: true,
                                              lockDuration: 60_000 } as any);
    // a PULL with timeout 0 may run before the reference has indexed the add: try again briefly
    let got: any;
    for (let i = 0; i < 100 && !got; i++) {
      got = await worker.getNextJob("manual-token");
      if (!got) await new Promise((r) => setTimeout(r, 20));
    }
    out.pulledId = got ? got.id === a.id : null;
    out.pulledHasToken = Boolean(got?.token);
    out.activeState = await q2.getJobState(a.id);
    out.extended = await (worker as any).extendJobLocks([a.id], [got.token], 30_000);
    let refused = null;
    try {
      await q2.moveJobToWait(a.id, "not-the-token");
    } catch (e) {
      refused = String((e as Error).message ?? e);
    }
    out.moveWrongToken = refused;
    out.moveActive = await q2.moveJobToWait(a.id, got.token);
    out.activeAfter = await q2.getJobState(a.id);
    const again: any = await worker.getNextJob("manual-token-2");
    out.pulledAgain = again ? again.id === a.id : null;
    console.log(JSON.stringify(out));
  } finally {
    if (worker) await worker.close(true).catch(() => {});
    for (const q of queues) q.close();
  }
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    console.log(JSON.stringify({ error: String(e?.message ?? e) }));
    process.exit(1);
  },
);
