// Observation helper for the client scripts: wraps the real bunqueue TcpClient's send paths to record
// which commands the client puts on the wire, which of their fields are JavaScript `undefined`
// (msgpackr encodes those as MessagePack ext type 0, d4 00 00), and every reply that is not ok.
// It changes nothing the client sends or receives.
//
// The file is imported by path (the package's export map hides dist/client/tcp); it resolves to the
// same module instance that `bunqueue/client` uses, so the patch applies to every connection.
import { TcpClient } from "./node_modules/bunqueue/dist/client/tcp/client.js";

export interface CommandTrace {
  count: number;
  keys: string[];
  undefinedKeys: string[];
  errors: number;
}

export interface Trace {
  commands: Record<string, CommandTrace>;
  errorReplies: { cmd: string; id?: unknown; error: unknown }[];
  rejected: { cmd: string; error: string }[];
}

export const trace: Trace = { commands: {}, errorReplies: [], rejected: [] };

// Callbacks run on each command (name, command object) before it is sent.
const listeners: ((cmd: string, command: Record<string, unknown>) => void)[] = [];
export function onCommand(fn: (cmd: string, command: Record<string, unknown>) => void): void {
  listeners.push(fn);
}

function undefinedPaths(value: unknown, prefix: string, out: Set<string>, depth: number): void {
  if (depth > 3 || value === null || typeof value !== "object") return;
  if (Array.isArray(value)) {
    for (const item of value) undefinedPaths(item, prefix + "[]", out, depth + 1);
    return;
  }
  if (ArrayBuffer.isView(value)) return;
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
    const path = prefix ? `${prefix}.${k}` : k;
    if (v === undefined) out.add(path);
    else undefinedPaths(v, path, out, depth + 1);
  }
}

function record(command: Record<string, unknown>): string {
  const cmd = String(command?.cmd);
  let t = trace.commands[cmd];
  if (!t) {
    t = { count: 0, keys: [], undefinedKeys: [], errors: 0 };
    trace.commands[cmd] = t;
  }
  t.count++;
  const keys = new Set(t.keys);
  for (const k of Object.keys(command)) keys.add(k);
  if (Array.isArray(command.jobs)) {
    for (const job of command.jobs) {
      if (job && typeof job === "object") for (const k of Object.keys(job)) keys.add(`jobs[].${k}`);
    }
  }
  t.keys = [...keys].sort();
  const und = new Set(t.undefinedKeys);
  undefinedPaths(command, "", und, 0);
  t.undefinedKeys = [...und].sort();
  for (const fn of listeners) fn(cmd, command);
  return cmd;
}

function wrap(proto: any, method: string): void {
  const original = proto[method];
  if (typeof original !== "function" || original.__jgTraced) return;
  const wrapped = function (this: unknown, command: Record<string, unknown>) {
    const cmd = record(command);
    const p: Promise<any> = original.call(this, command);
    return p.then(
      (resp: any) => {
        if (resp && resp.ok === false) {
          trace.commands[cmd].errors++;
          if (trace.errorReplies.length < 50) trace.errorReplies.push({ cmd, id: command.id ?? command.ids, error: resp.error });
        }
        return resp;
      },
      (err: unknown) => {
        if (trace.rejected.length < 50) trace.rejected.push({ cmd, error: String(err) });
        throw err;
      },
    );
  };
  (wrapped as any).__jgTraced = true;
  proto[method] = wrapped;
}

function ownerOf(method: string): any {
  let proto = TcpClient.prototype;
  while (proto && !Object.prototype.hasOwnProperty.call(proto, method)) proto = Object.getPrototypeOf(proto);
  return proto;
}

export function installTrace(): void {
  for (const m of ["send", "sendDirect"]) {
    const proto = ownerOf(m);
    if (proto) wrap(proto, m);
  }
}
