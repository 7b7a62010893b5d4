// The real bunqueue client (Queue + Worker, TCP mode) driving the scheduling API of a
// bunqueue-dialect server: job schedulers (Cron / CronList / CronDelete), the global concurrency
// limit (SetConcurrency / ClearConcurrency / GetQueueLimits) and the global rate limit
// (RateLimit / RateLimitClear). Prints ONE JSON object with what it observed and exits 0; on an
// exception prints it on stderr (and a JSON object with "error") and exits 1.
//
//   bun schedule.ts [--host H] [--port P] [--token T]
//
// Three unique queues:
//   every  - upsertJobScheduler(every 300 ms, limit 3) with a job template: the Worker gets
//            exactly 3 jobs named after the template, carrying its data; then nothing more.
//   cron   - upsertJobScheduler(pattern '0 30 3 * * *', timezone Asia/Tokyo): listed with its
//            next run (03:30 Tokyo = 18:30 UTC), then removed.
//   conc   - setGlobalConcurrency(2): a Worker of concurrency 6 never has more than 2 jobs
//            active at once; then removeGlobalConcurrency.
//   rate   - setGlobalRateLimit(3 per 2000 ms): of 6 jobs 3 start at once, the rest spread
//            over the next 2 s (the reference refills one start every 2000/3 ms).
import { Queue, Worker } from "bunqueue/client";

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

const host = arg("host") ?? "127.0.0.1";
const port = Number(arg("port") ?? 6789);
const token = arg("token");
const tag = `${Date.now()}-${Math.random().toString(36).slice(2, 8)}`;
const connection: Record<string, unknown> = { host, port, commandTimeout: 10_000 };
if (token) connection.token = token;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function waitFor<T>(what: string, fn: () => T | null | undefined | false, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = fn();
    if (v) return v as T;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

async function everyScheduler(out: Record<string, any>) {
  const q = new Queue(`jgsch-every-${tag}`, { connection, embedded: false });
  const seen: { name: string; data: unknown }[] = [];
  const w = new Worker(q.name, async (job) => { seen.push({ name: job.name, data: job.data }); return 1; },
    { connection, embedded: false, concurrency: 1 });
  try {
    const info = await q.upsertJobScheduler("tick", { every: 300, limit: 3 }, { name: "tick-job", data: { k: 1 } });
    out.everyUpsert = info && { id: info.id, name: info.name, every: info.every ?? null, limit: info.limit ?? null, nextIsNumber: typeof info.next === "number" };
    const listed = await q.getJobSchedulers();
    out.everyListed = listed.map((s) => ({ id: s.id, every: s.every ?? null, limit: s.limit ?? null, nextIsNumber: typeof s.next === "number" }));
    await waitFor("3 scheduled jobs", () => seen.length >= 3);
    await sleep(1200); // four more periods: the limit of 3 must hold
    out.everyJobs = seen;
    out.everyRemoved = await q.removeJobScheduler("tick");
    out.everyListedAfter = (await q.getJobSchedulers()).length;
  } finally {
    await w.close();
    q.close();
  }
}

async function cronScheduler(out: Record<string, any>) {
  const q = new Queue(`jgsch-cron-${tag}`, { connection, embedded: false });
  try {
    const info = await q.upsertJobScheduler("nightly", { pattern: "0 30 3 * * *", timezone: "Asia/Tokyo" }, { name: "nightly-job", data: { n: 1 } });
    out.cronUpsertPattern = info?.pattern ?? null;
    const one = await q.getJobScheduler("nightly");
    const next = one ? new Date(one.next) : null;
    out.cronGet = one && { id: one.id, pattern: one.pattern ?? null, nextUtc: next && `${next.getUTCHours()}:${next.getUTCMinutes()}:${next.getUTCSeconds()}`, nextInFuture: one.next > Date.now(), nextWithinDay: one.next - Date.now() <= 86_400_000 };
    out.cronRemoved = await q.removeJobScheduler("nightly");
    out.cronGetAfter = await q.getJobScheduler("nightly");
  } finally {
    q.close();
  }
}

async function concurrency(out: Record<string, any>) {
  const q = new Queue(`jgsch-conc-${tag}`, { connection, embedded: false });
  let active = 0;
  let maxActive = 0;
  let done = 0;
  try {
    await q.setGlobalConcurrencyAsync(2);
    out.concurrencyGet = await q.getGlobalConcurrency();
    await q.addBulk(Array.from({ length: 8 }, (_, i) => ({ name: "c", data: { i } })));
    const w = new Worker(q.name, async () => {
      active++; maxActive = Math.max(maxActive, active);
      await sleep(150);
      active--; done++;
      return 1;
    }, { connection, embedded: false, concurrency: 6 });
    try {
      await waitFor("8 jobs done", () => done >= 8);
    } finally {
      await w.close();
    }
    out.concurrencyMaxActive = maxActive;
    await q.removeGlobalConcurrencyAsync();
    out.concurrencyGetAfter = await q.getGlobalConcurrency();
  } finally {
    q.close();
  }
}

async function rateLimit(out: Record<string, any>) {
  const q = new Queue(`jgsch-rate-${tag}`, { connection, embedded: false });
  const starts: number[] = [];
  try {
    await q.setGlobalRateLimitAsync(3, 2000);
    const limits = await q.getGlobalRateLimit();
    out.rateGet = limits;
    await q.addBulk(Array.from({ length: 6 }, (_, i) => ({ name: "r", data: { i } })));
    const t0 = Date.now();
    const w = new Worker(q.name, async () => { starts.push(Date.now() - t0); return 1; },
      { connection, embedded: false, concurrency: 6 });
    try {
      await waitFor("6 rate-limited jobs", () => starts.length >= 6, 30_000);
    } finally {
      await w.close();
    }
    starts.sort((a, b) => a - b);
    out.rateBurst = starts.filter((s) => s < starts[0] + 400).length;
    out.rateSpanMs = starts[starts.length - 1] - starts[0];
    out.rateAll = starts.length;
    await q.removeGlobalRateLimitAsync();
    out.rateGetAfter = await q.getGlobalRateLimit();
  } finally {
    q.close();
  }
}

async function main() {
  const out: Record<string, any> = {};
  await everyScheduler(out);
  await cronScheduler(out);
  await concurrency(out);
  await rateLimit(out);
  console.log(JSON.stringify(out));
  process.exit(0);
}

main().catch((e) => {
  console.error(e?.stack ?? String(e));
  console.log(JSON.stringify({ error: String(e?.message ?? e) }));
  process.exit(1);
});
