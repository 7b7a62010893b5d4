// The real bunqueue client's job-scheduler API (Queue.upsertJobScheduler, getJobScheduler,
// getJobSchedulers, getJobSchedulersCount, removeJobScheduler: bunqueue's Cron, CronList and
// CronDelete commands) against a bunqueue-dialect server, with a Worker taking the runs.
// Prints ONE JSON object with what it observed and exits 0; on an exception prints it on
// stderr (and a JSON object with "error") and exits 1.
//
//   bun cron.ts [--host H] [--port P]
//
// Schedulers on one unique queue:
//   every  - every 300 ms, limit 3, job name "tick", data {n: 1}, priority 2; a Worker
//            processes the runs (3 of them, then the scheduler is exhausted)
//   hourly - pattern "0 * * * *" in Europe/Rome (never fires during the script)
import { Queue, Worker } from "bunqueue/client";

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

const host = arg("host") ?? "127.0.0.1";
const port = Number(arg("port") ?? 6789);
const qname = `jgcron-${Date.now()}-${Math.random().toString(36).slice(2, 8)}`;
const connection: Record<string, unknown> = { host, port, commandTimeout: 10_000 };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const out: Record<string, any> = { queue: qname };
  const queue = new Queue(qname, { connection, embedded: false });
  let worker: Worker | null = null;
  try {
    const t0 = Date.now();
    out.every = await queue.upsertJobScheduler("every", { every: 300, limit: 3 },
      { name: "tick", data: { n: 1 }, opts: { priority: 2 } });
    out.everyNextDelta = out.every.next - t0;
    out.hourly = await queue.upsertJobScheduler("hourly",
      { pattern: "0 * * * *", timezone: "Europe/Rome" }, { name: "report", data: { r: true } });
    out.hourlyNextMinute = new Date(out.hourly.next).getUTCMinutes();
    out.count = await queue.getJobSchedulersCount();
    out.list = (await queue.getJobSchedulers()).map((s: any) => ({ id: s.id, name: s.name,
      pattern: s.pattern ?? null, every: s.every ?? null, limit: s.limit ?? null }));
    const seen: any[] = [];
    worker = new Worker(qname, async (job: any) => {
      seen.push({ name: job.name, data: job.data, priority: job.priority });
      return { ok: true };
    }, { connection, embedded: false, concurrency: 1 });
    const end = Date.now() + 15_000;
    while (seen.length < 3 && Date.now() < end) await sleep(50);
    await sleep(1000);   // a 4th run would come now if the limit did not hold
    out.seen = seen;
    const got = await queue.getJobScheduler("every");
    out.everyAfter = got ? { name: got.name, limit: got.limit ?? null } : null;
    out.removed = await queue.removeJobScheduler("hourly");
    out.removedAgain = await queue.removeJobScheduler("hourly");
    out.countAfter = await queue.getJobSchedulersCount();
    console.log(JSON.stringify(out));
  } finally {
    if (worker) await worker.close();
    await queue.close();
  }
}

main().then(() => process.exit(0)).catch((e) => {
  console.error(e);
  console.log(JSON.stringify({ error: String(e) }));
  process.exit(1);
});
