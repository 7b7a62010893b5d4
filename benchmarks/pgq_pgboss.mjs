// pg-boss driver of pg_queues_bench.py: P producers (P concurrent `send` loops, closed, on one
// PgBoss instance with a pool of P, in one worker_thread) and, in the main thread, one PgBoss instance whose
// `work()` runs `localConcurrency` workers (pg-boss's own fetch + complete loop). The backlog
// (sent minus completed) is capped through a SharedArrayBuffer, as the Python drivers do.
//
// Usage: node pgq_pgboss.mjs SPEC_JSON
//   SPEC: {module_dir, url, producers, workers, warmup_s, duration_s, cap, pool, batch_size,
//          notify, polling_s, local_concurrency (default workers), rate (total jobs/s, 0 = as fast as the cap allows)}
// Prints "window <start_ns> <end_ns>" when the producers start, then one JSON line (the
// result: completed, enqueued, e2e_ms[], fetch_ms[], errors[]). Times: process.hrtime.bigint()
// (CLOCK_MONOTONIC, the clock of Python's time.monotonic_ns()).
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { pathToFileURL } from 'node:url';
import path from 'node:path';

const QUEUE = 'bench';
const PAYLOAD_SIZE = 100;
const now = () => process.hrtime.bigint();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function payload(tNs) {
  // compact JSON of {"t": <ns>, "p": "xx..."} is exactly 100 bytes, as pgq_common.json_payload
  const t = Number(tNs);
  const base = JSON.stringify({ t, p: '' }).length;
  return { t, p: 'x'.repeat(Math.max(0, PAYLOAD_SIZE - base)) };
}

async function loadPgBoss(moduleDir) {
  const dist = path.join(moduleDir, 'node_modules', 'pg-boss', 'dist');
  const { PgBoss } = await import(pathToFileURL(path.join(dist, 'index.js')).href);
  const Manager = (await import(pathToFileURL(path.join(dist, 'manager.js')).href)).default;
  return { PgBoss, Manager };
}

function level(enq, done) {
  let s = 0n;
  for (let i = 0; i < enq.length; i++) s += Atomics.load(enq, i);
  return s - Atomics.load(done, 0);
}

async function producer() {
  // One thread, one PgBoss instance (pool of P connections), P concurrent send loops.
  const { spec, enqBuf, doneBuf, ctlBuf } = workerData;
  const enq = new BigInt64Array(enqBuf);
  const done = new BigInt64Array(doneBuf);
  const ctl = new BigInt64Array(ctlBuf);   // [start_ns, end_ns], 0 until the main thread sets them
  const { PgBoss } = await loadPgBoss(spec.module_dir);
  const boss = new PgBoss({ connectionString: spec.url, max: spec.producers, supervise: false,
                            schedule: false, migrate: false, registerInstance: false });
  boss.on('error', (e) => parentPort.postMessage({ error: String(e && e.message || e) }));
  await boss.start();
  parentPort.postMessage({ ready: true });
  while (Atomics.load(ctl, 1) === 0n) await sleep(1);
  const start = Atomics.load(ctl, 0);
  const end = Atomics.load(ctl, 1);
  const cap = BigInt(spec.cap);
  const interval = spec.rate ? BigInt(Math.round(spec.producers / spec.rate * 1e9)) : 0n;
  const loop = async (idx) => {
    let enqueued = 0;
    let nextT = now();
    while (true) {
      if (interval) {
        const n = now();
        if (n < nextT) await sleep(Number(nextT - n) / 1e6);
        nextT += interval;
      }
      while (level(enq, done) >= cap && now() < end) await sleep(0);
      const t = now();
      if (t >= end) break;
      await boss.send(QUEUE, payload(t));
      Atomics.add(enq, idx, 1n);
      if (t >= start) enqueued++;
    }
    return enqueued;
  };
  let enqueued = 0;
  let error = null;
  try {
    for (const n of await Promise.all([...Array(spec.producers).keys()].map(loop))) enqueued += n;
  } catch (e) {
    error = `producer: ${e && e.message || e}`;
  }
  parentPort.postMessage({ finished: true, enqueued, error });
}

async function main() {
  const spec = JSON.parse(process.argv[2]);
  const { PgBoss, Manager } = await loadPgBoss(spec.module_dir);
  const picked = new Map();   // job id -> the time the handler got it (ns)
  const e2e = [];
  const fetch = [];
  let completed = 0;
  let start = 0n;
  let end = 0n;
  const errors = [];
  const enqBuf = new SharedArrayBuffer(8 * spec.producers);
  const doneBuf = new SharedArrayBuffer(8);
  const ctlBuf = new SharedArrayBuffer(16);
  const done = new BigInt64Array(doneBuf);
  const ctl = new BigInt64Array(ctlBuf);

  // Measurement only: time the completion that pg-boss's worker runs after the handler returns
  // (Manager.complete, called by the worker loop with the fetched job objects).
  const origComplete = Manager.prototype.complete;
  Manager.prototype.complete = async function (name, jobs, ...rest) {
    const res = await origComplete.call(this, name, jobs, ...rest);
    if (name === QUEUE) {
      const t = now();
      for (const job of (Array.isArray(jobs) ? jobs : [jobs])) {
        if (typeof job !== 'object') continue;
        const tp = picked.get(job.id);
        picked.delete(job.id);
        Atomics.add(done, 0, 1n);
        if (start && t >= start && t <= end) {
          completed++;
          const te = BigInt(Math.round(job.data.t));
          e2e.push(Math.round(Number(t - te) / 1e3) / 1e3);
          if (tp !== undefined) fetch.push(Math.round(Number(tp - te) / 1e3) / 1e3);
        }
      }
    }
    return res;
  };

  const boss = new PgBoss({ connectionString: spec.url, max: spec.pool,
                            useListenNotify: !!spec.notify, registerInstance: false });
  boss.on('error', (e) => { if (errors.length < 5) errors.push(String(e && e.message || e)); });
  await boss.start();
  await boss.createQueue(QUEUE, { notify: !!spec.notify });

  const threads = [];
  let ready = 0;
  const finished = [];
  for (let i = 0; i < 1; i++) {
    const w = new Worker(new URL(import.meta.url), {
      workerData: { spec, enqBuf, doneBuf, ctlBuf },
    });
    w.on('message', (m) => {
      if (m.ready) ready++;
      if (m.finished) finished.push(m);
      if (m.error && !m.finished && errors.length < 5) errors.push(m.error);
    });
    w.on('error', (e) => errors.push(`producer thread: ${e.message}`));
    threads.push(w);
  }
  const workOpts = { localConcurrency: spec.local_concurrency || spec.workers, batchSize: spec.batch_size,
                     pollingIntervalSeconds: spec.polling_s };
  if (spec.batch_size > 1) workOpts.burstWhenBatchFull = true;
  await boss.work(QUEUE, workOpts, async (jobs) => {
    const t = now();
    for (const job of jobs) picked.set(job.id, t);
  });
  const readyBy = Date.now() + 60000;
  while (ready < 1 && Date.now() < readyBy && errors.length === 0) await sleep(5);
  const t0 = now();
  start = t0 + BigInt(Math.round(spec.warmup_s * 1e9));
  end = start + BigInt(Math.round(spec.duration_s * 1e9));
  Atomics.store(ctl, 0, start);
  Atomics.store(ctl, 1, end);
  process.stdout.write(`window ${start} ${end}\n`);
  while (now() < end) await sleep(Math.max(1, Math.min(200, Number(end - now()) / 1e6)));
  const waitBy = Date.now() + 10000;
  while (finished.length < 1 && Date.now() < waitBy) await sleep(5);
  let enqueued = 0;
  for (const f of finished) {
    enqueued += f.enqueued;
    if (f.error) errors.push(f.error);
  }
  const out = { completed, enqueued, e2e_ms: e2e, fetch_ms: fetch, errors,
                window_s: spec.duration_s, jobs_per_s: completed / spec.duration_s };
  process.stdout.write(JSON.stringify(out) + '\n', () => process.exit(0));
}

if (isMainThread) {
  main().catch((e) => {
    process.stdout.write(JSON.stringify({ completed: 0, errors: [String(e && e.stack || e)] }) + '\n',
                         () => process.exit(1));
  });
} else {
  producer().catch((e) => parentPort.postMessage({ finished: true, enqueued: 0,
                                                   error: String(e && e.message || e) }));
}
