// The real bunqueue client (Queue + Worker, TCP mode) driving a bunqueue-dialect server through one
// whole workflow. Prints ONE JSON object with everything it observed on stdout and exits 0; on any
// exception prints the error on stderr (and a JSON object with "error") and exits 1.
//
//   bun workflow.ts [--host H] [--port P] [--token T] [--jobs N]
//   env: BUNQUEUE_HOST, BUNQUEUE_PORT, BUNQUEUE_TOKEN, WORKFLOW_JOBS (defaults 127.0.0.1, 6789, none, 20)
//
// Jobs on one unique queue:
//   single  - Queue.add, 1 job, returns {doubled: 2*i}
//   bulk    - Queue.addBulk, N jobs, returns {doubled: 2*i}
//   flaky   - attempts 3, backoff 50 ms: throws on its first attempt, succeeds on the second
//   doomed  - attempts 2, backoff 50 ms: always throws -> failed, in the DLQ
//   slow    - runs ~4 heartbeat intervals (heartbeatInterval 150 ms), reports progress 10, 60, 100
// A Worker with concurrency 5 processes them all.
import { Queue, Worker } from "bunqueue/client";
import { installTrace, onCommand, trace } from "./trace.ts";

installTrace();

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

const host = arg("host") ?? process.env.BUNQUEUE_HOST ?? "127.0.0.1";
const port = Number(arg("port") ?? process.env.BUNQUEUE_PORT ?? 6789);
const token = arg("token") ?? process.env.BUNQUEUE_TOKEN ?? undefined;
const N = Number(arg("jobs") ?? process.env.WORKFLOW_JOBS ?? 20);
const HEARTBEAT_MS = 150;
const SLOW_MS = 4 * HEARTBEAT_MS + 100;
const DEADLINE_MS = 20_000;

const qname = `jgwf-${Date.now()}-${Math.random().toString(36).slice(2, 8)}`;
const connection: Record<string, unknown> = { host, port, commandTimeout: 10_000 };
if (token) connection.token = token;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function waitFor<T>(what: string, fn: () => Promise<T | null | undefined | false>, ms = DEADLINE_MS): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v as T;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

function jobView(job: any) {
  if (!job) return null;
  return {
    id: job.id,
    name: job.name,
    data: job.data,
    attemptsMade: job.attemptsMade,
    progress: job.progress,
    returnvalue: job.returnvalue ?? null,
    failedReason: job.failedReason ?? null,
    priority: job.priority,
    processedOn: job.processedOn ?? null,
    finishedOn: job.finishedOn ?? null,
    timestamp: job.timestamp,
    opts: { attempts: job.opts?.attempts ?? null, backoff: job.opts?.backoff ?? null },
  };
}

async function main() {
  const out: Record<string, any> = { queue: qname, jobs: N, heartbeatIntervalMs: HEARTBEAT_MS };
  const queue = new Queue(qname, { connection, embedded: false });
  let worker: Worker | null = null;
  try {
    // ---- producer side, before any worker exists
    const single = await queue.add("single", { i: 0 });
    const bulk = await queue.addBulk(
      Array.from({ length: N }, (_, k) => ({ name: "bulk", data: { i: k + 1 } })),
    );
    const flaky = await queue.add("flaky", { kind: "flaky" }, { attempts: 3, backoff: 50 });
    const doomed = await queue.add("doomed", { kind: "doomed" }, { attempts: 2, backoff: 50 });
    const slow = await queue.add("slow", { kind: "slow" });
    const ids = {
      single: single.id,
      bulk: bulk.map((j) => j.id),
      flaky: flaky.id,
      doomed: doomed.id,
      slow: slow.id,
    };
    out.ids = ids;
    out.addReturned = { name: single.name, data: single.data, bulkNames: [...new Set(bulk.map((j) => j.name))] };
    out.allIdsDistinct = new Set([ids.single, ...ids.bulk, ids.flaky, ids.doomed, ids.slow]).size === N + 4;

    out.getJobWaiting = jobView(await queue.getJob(single.id));
    out.stateWaiting = await queue.getJobState(single.id);
    out.getJobBulkLast = jobView(await queue.getJob(ids.bulk[N - 1]));
    out.getJobFlaky = jobView(await queue.getJob(flaky.id));
    out.getJobMissing = jobView(await queue.getJob("00000000-0000-7000-8000-000000000000"));
    out.stateMissing = await queue.getJobState("00000000-0000-7000-8000-000000000000");
    out.countsBefore = await queue.getJobCounts();
    out.countBefore = await queue.countAsync();

    // ---- consumer side
    let active = 0;
    let maxActive = 0;
    const calls: Record<string, number[]> = {}; // job name -> attemptsMade seen by each call
    const completed: Record<string, any> = {};
    const failedEvents: { id: string; name: string; attemptsMade: number; message: string }[] = [];
    const progressEvents: { id: string; progress: unknown }[] = [];
    const errors: string[] = [];
    let slowDuringRun: any = null;
    let slowStateDuringRun: string | null = null;
    let slowActive = false;
    let slowHeartbeats = 0;
    const slowRaw: any[] = [];
    const rawJob = async (id: string) => {
      const r: any = await (queue as any).tcpPool.send({ cmd: "GetJob", id });
      const j = r?.job ?? {};
      return { ok: r?.ok, state: j.state, startedAt: j.startedAt, lastHeartbeat: j.lastHeartbeat, progress: j.progress };
    };

    onCommand((cmd, command) => {
      if (!slowActive) return;
      if (cmd === "JobHeartbeat" && command.id === ids.slow) slowHeartbeats++;
      if (cmd === "JobHeartbeatB" && Array.isArray(command.ids) && command.ids.includes(ids.slow)) slowHeartbeats++;
    });

    worker = new Worker(
      qname,
      async (job: any) => {
        (calls[job.name] ??= []).push(job.attemptsMade);
        active++;
        maxActive = Math.max(maxActive, active);
        try {
          switch (job.name) {
            case "single":
            case "bulk":
              await sleep(40);
              return { doubled: job.data.i * 2 };
            case "flaky":
              if (job.attemptsMade === 0) throw new Error("flaky first try");
              return { recovered: true, attemptsMade: job.attemptsMade };
            case "doomed":
              throw new Error(`doomed attempt ${job.attemptsMade}`);
            case "slow": {
              slowActive = true;
              await job.updateProgress(10);
              // Progress also stamps lastHeartbeat on the server; between these two reads only the
              // worker's heartbeats can move it. Read through the client's own transport (the public
              // Job has no lastHeartbeat).
              slowRaw.push(await rawJob(job.id));
              await sleep(SLOW_MS / 2);
              slowRaw.push(await rawJob(job.id));
              await job.updateProgress(60, "more than half");
              slowDuringRun = jobView(await queue.getJob(job.id));
              slowStateDuringRun = await queue.getJobState(job.id);
              await sleep(SLOW_MS / 2);
              await job.updateProgress(100);
              slowActive = false;
              return { slept: SLOW_MS };
            }
            default:
              throw new Error(`unexpected job name ${job.name}`);
          }
        } finally {
          active--;
        }
      },
      { connection, embedded: false, concurrency: 5, heartbeatInterval: HEARTBEAT_MS },
    );
    worker.on("completed", (job: any, result: unknown) => {
      completed[job.id] = result;
    });
    worker.on("failed", (job: any, err: Error) => {
      failedEvents.push({ id: job?.id, name: job?.name, attemptsMade: job?.attemptsMade, message: err?.message });
    });
    worker.on("progress", (job: any, progress: unknown) => {
      progressEvents.push({ id: job?.id, progress });
    });
    worker.on("error", (err: Error) => {
      errors.push(String(err?.message ?? err));
    });

    const expectCompleted = N + 3; // single, bulk, flaky, slow
    out.countsAfter = await waitFor("all jobs to finish", async () => {
      const c = await queue.getJobCounts();
      return c.completed === expectCompleted && c.failed === 1 && c.active === 0 && c.waiting === 0 && c.delayed === 0
        ? c
        : null;
    });
    // the worker reports after the server: let its events catch up
    await waitFor("worker completed events", async () => Object.keys(completed).length >= expectCompleted, 5000);
    // the last FAIL's reply (and so the worker's "failed" event) can arrive after another
    // connection already sees the job failed: wait for the events too
    await waitFor("worker failed events", async () => failedEvents.length >= 3, 5000);

    out.maxActive = maxActive;
    out.calls = calls;
    out.completedEvents = Object.keys(completed).length;
    out.completedResults = {
      single: completed[ids.single] ?? null,
      bulkFirst: completed[ids.bulk[0]] ?? null,
      bulkLast: completed[ids.bulk[N - 1]] ?? null,
      flaky: completed[ids.flaky] ?? null,
      slow: completed[ids.slow] ?? null,
    };
    out.failedEvents = failedEvents.sort((a, b) => (a.name + a.attemptsMade).localeCompare(b.name + b.attemptsMade));
    out.progressEvents = progressEvents.filter((e) => e.id === ids.slow).map((e) => e.progress);
    out.workerErrors = errors;
    out.slowDuringRun = slowDuringRun;
    out.slowStateDuringRun = slowStateDuringRun;
    out.slowHeartbeats = slowHeartbeats;
    out.slowRaw = slowRaw;
    out.slowHeartbeatMoved = slowRaw.length === 2 && slowRaw[1].lastHeartbeat > slowRaw[0].lastHeartbeat;

    // ---- after completion
    out.single = jobView(await queue.getJob(ids.single));
    out.singleState = await queue.getJobState(ids.single);
    out.bulkStates = [...new Set(await Promise.all(ids.bulk.map((id) => queue.getJobState(id))))];
    const bulkJobs = await Promise.all(ids.bulk.map((id) => queue.getJob(id)));
    out.bulkReturnvalues = bulkJobs.map((j: any) => j?.returnvalue ?? null);
    out.flaky = jobView(await queue.getJob(ids.flaky));
    out.flakyState = await queue.getJobState(ids.flaky);
    out.doomed = jobView(await queue.getJob(ids.doomed));
    out.doomedState = await queue.getJobState(ids.doomed);
    out.slow = jobView(await queue.getJob(ids.slow));
    out.slowState = await queue.getJobState(ids.slow);

    const dlq = await queue.getDlqAsync();
    out.dlq = dlq.map((e: any) => ({
      id: e.job?.id,
      name: e.job?.name,
      reason: e.reason,
      error: e.error,
      attempts: (e.attempts ?? []).map((a: any) => ({ attempt: a.attempt, reason: a.reason, error: a.error })),
    }));
    out.dlqJobs = (await queue.getDlqJobsAsync()).map((j: any) => j.id);
    out.dlqStats = await queue.getDlqStatsAsync();
    out.failedList = (await queue.getFailedAsync()).map((j: any) => j.id);
    out.countFinal = await queue.countAsync();

    await worker.close();
    worker = null;
    out.countsFinal = await queue.getJobCounts();
    out.trace = trace;
    out.ok = true;
    return out;
  } finally {
    if (worker) await worker.close(true).catch(() => undefined);
    await queue.disconnect().catch(() => undefined);
  }
}

main().then(
  (out) => {
    process.stdout.write(JSON.stringify(out) + "\n");
    process.exit(0);
  },
  (err) => {
    console.error(err?.stack ?? String(err));
    process.stdout.write(JSON.stringify({ ok: false, error: String(err?.message ?? err), trace }) + "\n");
    process.exit(1);
  },
);
