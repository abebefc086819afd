// Small networking helpers for tests and benchmarks that start their own processes.
import type { ChildProcess } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { connect, createServer } from 'node:net';

/**
 * Ports freePort picks from: below Linux's ephemeral range (32768-60999, where listen(0) and every
 * outgoing connection take their local port), so that between the pick and the bind no connection
 * of this or another process (a suite running beside this one) can be given the port by the kernel.
 * It used to be listen(0)'s own pick, and a server started on it sometimes found it taken.
 */
const PICKED_PORTS = { from: 20_000, to: 32_767 };
const PICK_ATTEMPTS = 100;

/** A loopback port free now, at random in PICKED_PORTS (the caller binds it). */
export async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < PICK_ATTEMPTS; attempt++) {
    const port = PICKED_PORTS.from + randomInt(PICKED_PORTS.to - PICKED_PORTS.from + 1);
    if (await bindable(port)) return port;
  }
  throw new Error(`no free loopback port in ${PICKED_PORTS.from}-${PICKED_PORTS.to} after ${PICK_ATTEMPTS} tries`);
}

/** Whether the loopback port can be bound now (nothing listens on it, on 127.0.0.1 or on every address). */
function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = createServer();
    probe.once('error', () => resolve(false));
    probe.listen(port, '127.0.0.1', () => probe.close(() => resolve(true)));
  });
}

/** True when something accepts TCP connections on the loopback port. */
export function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => (socket.destroy(), resolve(true)));
    socket.once('error', () => resolve(false));
  });
}

/** Polls `check` every 100 ms until it answers true; bounded by `timeoutMs`. */
export async function waitFor(check: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      if (await check()) return;
    } catch {
      // not ready yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out after ${timeoutMs} ms`);
}

/**
 * Resolves with agentgate's start-up lines ("agentgate listening", parsed) once `count` of them have
 * been logged (in cluster mode each worker logs its own), from a child started with LOG_LEVEL info
 * and its stdout piped. Rejects if the child exits first, or if `timeoutMs` passes; the caller owns
 * the child and decides what to do with it then (test/support/agentgate-process.ts kills it and
 * reports its output).
 */
export function startupLines(child: ChildProcess, count: number, timeoutMs: number): Promise<Record<string, unknown>[]> {
  const startedAtMs = performance.now();
  const lines: Record<string, unknown>[] = [];
  let partialLine = '';
  return new Promise<Record<string, unknown>[]>((resolve, reject) => {
    const onData = (chunk: Buffer | string) => {
      const split = (partialLine + chunk.toString()).split('\n');
      partialLine = split.pop() ?? '';
      for (const line of split) {
        if (!line.includes('"msg":"agentgate listening"')) continue;
        lines.push(JSON.parse(line) as Record<string, unknown>);
        if (lines.length === count) settle();
      }
    };
    const onExit = (code: number | null, signal: NodeJS.Signals | null) => settle(`exited (${signal ?? `status ${code}`}) before it listened`);
    const timer = setTimeout(() => settle(`did not log "agentgate listening" within ${timeoutMs} ms`), timeoutMs);
    function settle(failure?: string): void {
      clearTimeout(timer);
      child.stdout!.off('data', onData);
      child.off('close', onExit);
      if (failure === undefined) resolve(lines);
      else reject(new Error(`${failure} (${lines.length} of ${count} listening after ${Math.round(performance.now() - startedAtMs)} ms)`));
    }
    child.stdout!.on('data', onData);
    // 'close' follows the exit once the output is all read, so a report of the failure has all of it.
    child.once('close', onExit);
  });
}

/** The first start-up line of a child that runs one server (see startupLines). */
export async function startupLine(child: ChildProcess, timeoutMs = 60_000): Promise<Record<string, unknown>> {
  return (await startupLines(child, 1, timeoutMs))[0]!;
}
