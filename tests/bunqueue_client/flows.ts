// The real bunqueue client's FlowProducer (TCP mode) driving flows on a bunqueue-dialect server.
// Prints ONE JSON object with everything it observed on stdout and exits 0; on any exception
// prints the error on stderr (and a JSON object with "error") and exits 1.
//
//   bun flows.ts [--host H] [--port P]
//
// Three flows on fresh queues (P = parents, C = children):
//   tree    - report (P) <- [a (C), b (C) <- [b1 (C)]]: children run before parents; each
//             parent reads job.getChildrenValues() in its processor and returns them
//   ignored - parent (P) <- [ok (C), bad (C, ignoreDependencyOnFailure, attempts 1)]:
//             the parent runs and reads job.getIgnoredChildrenFailures()
//   doomed  - parent (P) <- [bad (C, failParentOnFailure, attempts 1)]: the parent fails
//   legacy  - addChain s1 -> s2 -> s3 and addBulkThen [p1, p2] -> merge on queue L
// Before any worker exists, the states of the tree (flow node job.getState()) are recorded.
import { FlowProducer, Queue, Worker } from "bunqueue/client";

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

const host = arg("host") ?? "127.0.0.1";
const port = Number(arg("port") ?? 6789);
const connection = { host, port, commandTimeout: 10_000 };
const tag = `${Date.now()}-${Math.random().toString(36).slice(2, 8)}`;
const P = `jgfp-${tag}`;
const C = `jgfc-${tag}`;
const L = `jgfl-${tag}`;
const DEADLINE_MS = 20_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function waitFor<T>(what: string, fn: () => Promise<T | null | undefined | false>): Promise<T> {
  const end = Date.now() + DEADLINE_MS;
  for (;;) {
    const v = await fn();
    if (v) return v as T;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

async function main() {
  const out: Record<string, any> = { parents: P, children: C };
  const flow = new FlowProducer({ connection });
  const pq = new Queue(P, { connection, embedded: false });
  const workers: Worker[] = [];
  try {
    const tree = await flow.add({
      name: "report", queueName: P, data: { kind: "tree" },
      children: [
        { name: "a", queueName: C, data: { n: 1 } },
        { name: "b", queueName: C, data: { n: 2 },
          children: [{ name: "b1", queueName: C, data: { n: 3 } }] },
      ],
    });
    const ids = {
      report: tree.job.id,
      a: tree.children![0].job.id,
      b: tree.children![1].job.id,
      b1: tree.children![1].children![0].job.id,
    };
    out.ids = ids;
    out.statesBefore = {
      report: await tree.job.getState(),
      a: await tree.children![0].job.getState(),
      b: await tree.children![1].job.getState(),
      b1: await tree.children![1].children![0].job.getState(),
    };
    const rj = await pq.getJob(ids.report);
    out.reportBefore = { id: rj?.id, name: rj?.name, data: rj?.data };
    out.countsBefore = await pq.getJobCounts();

    const ignored = await flow.add({
      name: "parent", queueName: P, data: { kind: "ignored" },
      children: [
        { name: "ok", queueName: C, data: { n: 10 } },
        { name: "bad", queueName: C, data: { n: 11 },
          opts: { ignoreDependencyOnFailure: true, attempts: 1 } },
      ],
    });
    out.ignoredIds = { parent: ignored.job.id, ok: ignored.children![0].job.id,
                       bad: ignored.children![1].job.id };
    const doomed = await flow.add({
      name: "parent", queueName: P, data: { kind: "doomed" },
      children: [{ name: "bad", queueName: C, data: { n: 20 },
                   opts: { failParentOnFailure: true, attempts: 1 } }],
    });
    out.doomedIds = { parent: doomed.job.id, bad: doomed.children![0].job.id };

    // legacy API: a chain (each step waits for the one before) and parallel-then-merge; the
    // later steps have the higher priorities, so only the dependencies keep them back
    const chain = await flow.addChain([
      { name: "s1", queueName: L, data: { n: 1 } },
      { name: "s2", queueName: L, data: { n: 2 }, opts: { priority: 5 } },
      { name: "s3", queueName: L, data: { n: 3 }, opts: { priority: 10 } },
    ]);
    const then = await flow.addBulkThen(
      [{ name: "p1", queueName: L, data: { n: 4 } }, { name: "p2", queueName: L, data: { n: 5 } }],
      { name: "merge", queueName: L, data: { n: 6 }, opts: { priority: 20 } },
    );
    out.chainIds = chain.jobIds;
    out.thenIds = then;
    const legacy: string[] = [];
    workers.push(new Worker(L, async (job) => {
      legacy.push(job.name);
      return { n: (job.data as any).n };
    }, { connection, embedded: false, concurrency: 1 }));

    const order: string[] = [];
    const parentSeen: Record<string, any> = {};
    workers.push(new Worker(C, async (job) => {
      order.push(`${job.name}:${(job.data as any).n}`);
      if (job.name === "bad") throw new Error(`bad child ${(job.data as any).n}`);
      return { n: (job.data as any).n, sq: (job.data as any).n ** 2 };
    }, { connection, embedded: false, concurrency: 1 }));
    workers.push(new Worker(P, async (job) => {
      const kind = (job.data as any).kind;
      order.push(`${job.name}:${kind}`);
      const values = await job.getChildrenValues();
      const ignoredF = await (job as any).getIgnoredChildrenFailures();
      parentSeen[job.id] = { kind, values, ignored: ignoredF };
      return { sum: Object.values(values).reduce((s: number, v: any) => s + (v?.n ?? 0), 0) };
    }, { connection, embedded: false, concurrency: 1 }));

    await waitFor("tree parent completed", async () => (await pq.getJobState(ids.report)) === "completed");
    await waitFor("ignored parent completed", async () => (await pq.getJobState(ignored.job.id)) === "completed");
    await waitFor("doomed parent failed", async () => (await pq.getJobState(doomed.job.id)) === "failed");
    const lq = new Queue(L, { connection, embedded: false });
    await waitFor("chain done", async () => (await lq.getJobState(chain.jobIds[2])) === "completed");
    await waitFor("merge done", async () => (await lq.getJobState(then.finalId)) === "completed");
    await lq.close();
    out.legacyOrder = legacy;
    out.order = order;
    out.parentSeen = parentSeen;
    out.reportResult = (await pq.getJob(ids.report))?.returnvalue ?? null;
    out.treeFlow = await flow.getFlow({ id: ids.report, queueName: P });
    out.treeFlow = {
      id: out.treeFlow?.job?.id,
      children: (out.treeFlow?.children ?? []).map((c: any) => ({
        id: c.job?.id, children: (c.children ?? []).map((g: any) => g.job?.id) })),
    };
    out.ok = true;
  } finally {
    for (const w of workers) await w.close(true);
    await pq.close();
    await flow.close();
  }
  console.log(JSON.stringify(out));
}

main().then(() => process.exit(0)).catch((e) => {
  console.error(e?.stack ?? String(e));
  console.log(JSON.stringify({ error: String(e?.message ?? e) }));
  process.exit(1);
});
