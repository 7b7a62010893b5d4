// Push N jobs with the real bunqueue client, many `Queue.add` calls in flight at once (a sliding
// window), and report every acknowledged id once ALL have been acknowledged, for kill -9 tests:
// the caller kills the server as soon as it reads the final "ACKED <n>" line, restarts it and counts.
//
//   bun push_many.ts --port P [--host H] [--token T] [--n 10000] [--window 1000]
//                    [--queue NAME] [--mode batch|single] [--out FILE] [--trace] [--kill-pid PID]
//   env: BUNQUEUE_HOST, BUNQUEUE_PORT, BUNQUEUE_TOKEN
//
// --mode batch  (default) the client as shipped: concurrent add() calls are coalesced by its
//               auto-batcher into PUSHB frames (up to 50 jobs each).
// --mode single autoBatch disabled: every add() is its own PUSH frame, pipelined over the pool.
//
// Output: one line per acknowledged job, "<i> <id>" (i = 0..n-1 as in data.i), to --out FILE or
// stdout; then, on stdout, "ACKED <n>" after everything else has been written. Job data: {i}.
// On any failed add: "ERROR <message>" on stderr, no ACKED line, exit 1.
// --kill-pid PID: send SIGKILL to PID (the server) the moment the last add is acknowledged, before
//               anything is written, so the server has no time to flush after its last reply.
// --trace: also print a JSON summary of the commands the client sent, on stderr, before ACKED.
import { Queue } from "bunqueue/client";
import { closeSync, openSync, writeSync } from "node:fs";
import { installTrace, trace } from "./trace.ts";

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

const host = arg("host") ?? process.env.BUNQUEUE_HOST ?? "127.0.0.1";
const port = Number(arg("port") ?? process.env.BUNQUEUE_PORT ?? 6789);
const token = arg("token") ?? process.env.BUNQUEUE_TOKEN ?? undefined;
const n = Number(arg("n") ?? 10000);
const windowSize = Math.max(1, Number(arg("window") ?? 1000));
const mode = arg("mode") ?? "batch";
const qname = arg("queue") ?? `jgpush-${Date.now()}-${Math.random().toString(36).slice(2, 8)}`;
const outPath = arg("out");
const killPid = arg("kill-pid") ? Number(arg("kill-pid")) : null;
const tracing = process.argv.includes("--trace");
if (tracing) installTrace();
if (mode !== "batch" && mode !== "single") throw new Error(`--mode must be batch or single, not ${mode}`);

const connection: Record<string, unknown> = { host, port, commandTimeout: 30_000 };
if (token) connection.token = token;

async function main(): Promise<string[]> {
  const queue = new Queue(qname, {
    connection,
    embedded: false,
    autoBatch: mode === "single" ? { enabled: false } : undefined,
  });
  const ids: string[] = new Array(n);
  let next = 0;
  let acked = 0;
  let failed: unknown = null;
  async function lane() {
    while (failed === null) {
      const i = next++;
      if (i >= n) return;
      try {
        const job = await queue.add("pm", { i });
        ids[i] = job.id;
        if (++acked === n && killPid !== null) process.kill(killPid, "SIGKILL");
      } catch (e) {
        failed ??= e;
      }
    }
  }
  const t0 = performance.now();
  await Promise.all(Array.from({ length: Math.min(windowSize, n) }, lane));
  const secs = (performance.now() - t0) / 1000;
  if (failed !== null) throw failed;
  process.stderr.write(`pushed ${n} to ${qname} (${mode}, window ${windowSize}) in ${secs.toFixed(2)}s\n`);
  queue.close();
  return ids;
}

main().then(
  (ids) => {
    const lines = ids.map((id, i) => `${i} ${id}\n`).join("");
    if (outPath) {
      const fd = openSync(outPath, "w");
      writeSync(fd, lines);
      closeSync(fd);
    } else {
      writeSync(1, lines);
    }
    if (tracing) process.stderr.write(`TRACE ${JSON.stringify(trace)}\n`);
    writeSync(1, `ACKED ${ids.length}\n`);
    process.exit(0);
  },
  (err) => {
    process.stderr.write(`ERROR ${err?.message ?? err}\n`);
    process.exit(1);
  },
);
