// The real bunqueue client over TLS (its `connection.tls` option: {caFile, rejectUnauthorized};
// bunqueue 2.9.5 has no client certificate option): add one job, read it back, count.
//
//   bun tls_check.ts --port P --ca CA.pem [--host H] [--token T]
//
// Prints one JSON object {id, data, counts} on stdout and exits 0; on any error prints it on
// stderr and exits 1. Used by tests/test_tls.py.
import { Queue } from "bunqueue/client";

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

const connection: Record<string, unknown> = {
  host: arg("host") ?? "127.0.0.1",
  port: Number(arg("port") ?? 6789),
  commandTimeout: 10_000,
  tls: { caFile: arg("ca"), rejectUnauthorized: true },
};
const token = arg("token");
if (token) connection.token = token;

async function main() {
  const queue = new Queue(`tls-${Date.now()}`, { connection, embedded: false });
  try {
    const job = await queue.add("tls", { over: "tls" });
    const back = await queue.getJob(job.id);
    const counts = await queue.getJobCounts();
    console.log(JSON.stringify({ id: job.id, data: back?.data ?? null, counts }));
  } finally {
    await queue.close();
  }
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(String(e?.stack ?? e));
    process.exit(1);
  },
);
