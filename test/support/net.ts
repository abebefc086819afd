// Small networking helpers for tests and benchmarks that start their own processes.
import type { ChildProcess } from 'node:child_process';
import { connect, createServer } from 'node:net';

/** A free loopback port (closed again at once; the caller binds it). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const address = probe.address();
      probe.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
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
