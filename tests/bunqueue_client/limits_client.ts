// The real bunqueue client's queue limit API (TCP mode) against a bunqueue-dialect server:
// Queue.setGlobalConcurrencyAsync / getGlobalConcurrency / isMaxed / removeGlobalConcurrencyAsync,
// setGlobalRateLimitAsync / getGlobalRateLimit / getRateLimitTtl / rateLimit /
// removeGlobalRateLimitAsync, setStallConfigAsync / getStallConfigAsync, and a Worker of
// concurrency 5 held to the queue's global concurrency 2 and to a rate limit by the server.
// Prints ONE JSON object (time-dependent values reduced to what must hold) and exits 0; on an
// exception prints it on stderr and exits 1. The same script runs against the reference server
// (tests/test_bunqueue_limits_client.py compares the two outputs).
//
//   bun limits_client.ts --host H --port P
import { Queue, Worker } from "bunqueue/client";

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

const host = arg("host") ?? "127.0.0.1";
const port = Number(arg("port") ?? 6789);
const connection = { host, port, commandTimeout: 10_000 };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const tag = `${Date.now()}-${Math.random().toString(36).slice(2, 8)}`;

async function until(what: string, fn: () => Promise<boolean>, ms = 20_000) {
  const end = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

async function concurrency(out: Record<string, unknown>) {
  const queue = new Queue(`jglim-c-${tag}`, { connection, embedded: false });
  out.concurrencyBefore = await queue.getGlobalConcurrency();
  await queue.setGlobalConcurrencyAsync(2);
  out.concurrency = await queue.getGlobalConcurrency();
  out.maxedIdle = await queue.isMaxed();
  await queue.addBulk(Array.from({ length: 8 }, (_, i) => ({ name: "c", data: { i } })));
  let active = 0;
  let maxActive = 0;
  let done = 0;
  let sawMaxed = false;
  const worker = new Worker(
    queue.name,
    async () => {
      active++;
      maxActive = Math.max(maxActive, active);
      await sleep(150);
      active--;
      done++;
      return null;
    },
    { connection, embedded: false, concurrency: 5 },
  );
  await until("concurrency jobs", async () => {
    if (!sawMaxed && active === 2) sawMaxed = await queue.isMaxed();
    return done === 8;
  });
  await worker.close();
  out.concurrencyMaxActive = maxActive;
  out.sawMaxed = sawMaxed;
  await queue.removeGlobalConcurrencyAsync();
  out.concurrencyAfter = await queue.getGlobalConcurrency();
  out.maxedAfter = await queue.isMaxed();
  queue.close();
}

async function rate(out: Record<string, unknown>) {
  const queue = new Queue(`jglim-r-${tag}`, { connection, embedded: false });
  out.rateBefore = await queue.getGlobalRateLimit();
  out.rateTtlBefore = await queue.getRateLimitTtl();
  await queue.setGlobalRateLimitAsync(4, 1000);
  out.rate = await queue.getGlobalRateLimit();
  out.rateTtlFull = await queue.getRateLimitTtl();
  await queue.addBulk(Array.from({ length: 8 }, (_, i) => ({ name: "r", data: { i } })));
  const started: number[] = [];
  const worker = new Worker(
    queue.name,
    async () => {
      started.push(Date.now());
      return null;
    },
    { connection, embedded: false, concurrency: 8 },
  );
  await until("rate jobs", async () => started.length === 8);
  await worker.close();
  // 4 at once, then 4 per second: the eighth starts about a second after the first
  out.rateSpreadOk = started[7] - started[0] >= 900;
  const used = await queue.getRateLimitTtl();   // at most one token's time: 250 ms
  out.rateTtlUsedOk = used >= 0 && used <= 250;
  await queue.removeGlobalRateLimitAsync();
  out.rateAfter = await queue.getGlobalRateLimit();
  out.rateTtlAfter = await queue.getRateLimitTtl();
  // a temporary limit: limit 1 with a ttl; the TTL left counts down from 5000
  await queue.rateLimit(5000);
  out.temporary = await queue.getGlobalRateLimit();
  const ttl = await queue.getRateLimitTtl();
  out.temporaryTtlOk = ttl > 4000 && ttl <= 5000;
  await queue.removeGlobalRateLimitAsync();
  queue.close();
}

async function stall(out: Record<string, unknown>) {
  const queue = new Queue(`jglim-s-${tag}`, { connection, embedded: false });
  out.stallDefault = await queue.getStallConfigAsync();
  await queue.setStallConfigAsync({ maxStalls: 5, stallInterval: 10_000 });
  out.stall = await queue.getStallConfigAsync();
  await queue.setStallConfigAsync({ enabled: false });
  out.stallDisabled = await queue.getStallConfigAsync();
  queue.close();
}

async function main() {
  const out: Record<string, unknown> = {};
  await concurrency(out);
  await rate(out);
  await stall(out);
  console.log(JSON.stringify(out));
  process.exit(0);
}

main().catch((e) => {
  console.error(e?.stack ?? String(e));
  console.log(JSON.stringify({ error: String(e?.message ?? e) }));
  process.exit(1);
});
