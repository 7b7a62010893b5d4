// Real bunqueue Workers (TCP mode) taking jobs from one queue until told to stop, for the
// cross-dialect limit tests (tests/test_limits_cross_dialect.py): several workers of several
// dialects share one queue whose rate or concurrency limit the server enforces.
//
//   bun limits_worker.ts --host H --port P --queue Q [--workers 3] [--work-ms 100]
//                        [--poll-timeout-ms 1000]
//
// Starts `workers` Workers of concurrency 1; each job sleeps `work-ms` ms and completes. The
// workers long-poll (pollTimeout, default 1000 ms: a waiting PULL), as the beanstalk and workq workers
// of the test wait in reserve / lease: waiting reserves are served longest-waiter first, so a
// worker that only polls (the default pollTimeout 0) gets a job of a limited queue only when
// no reserve waits for it.
// Prints "ready" once the workers run; on a line "stop" on stdin (or stdin closing) it closes
// the workers and prints ONE JSON object {processed, errors} and exits 0.
import { Worker } from "bunqueue/client";

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

const host = arg("host") ?? "127.0.0.1";
const port = Number(arg("port") ?? 6789);
const queue = arg("queue") ?? "limits";
const n = Number(arg("workers") ?? 3);
const workMs = Number(arg("work-ms") ?? 100);
// A PULL that times out joins the back of the waiters again: under a rate limit it must
// outlast a whole turn of the other waiters, or it is never served.
const pollTimeout = Number(arg("poll-timeout-ms") ?? 1000);
const connection = { host, port, commandTimeout: 30_000 };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let processed = 0;
const errors: string[] = [];
const workers: Worker[] = [];
for (let k = 0; k < n; k++) {
  const w = new Worker(
    queue,
    async () => {
      await sleep(workMs);
      processed++;
      return { ok: true };
    },
    { connection, embedded: false, concurrency: 1, pollTimeout },
  );
  w.on("error", (e: Error) => errors.push(String(e?.message ?? e)));
  workers.push(w);
}
console.log("ready");

const decoder = new TextDecoder();
let buf = "";
for await (const chunk of Bun.stdin.stream()) {
  buf += decoder.decode(chunk);
  if (buf.includes("stop")) break;
}
await Promise.all(workers.map((w) => w.close()));
console.log(JSON.stringify({ processed, errors }));
process.exit(0);
