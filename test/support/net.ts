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
 * Resolves with agentgate's start-up line ("agentgate listening", parsed) from a child started with
 * LOG_LEVEL info and its stdout piped; rejects if none comes within `timeoutMs`.
 */
export function startupLine(child: ChildProcess, timeoutMs = 15_000): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no start-up line within ${timeoutMs} ms`)), timeoutMs);
    let partialLine = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      const lines = (partialLine + chunk.toString()).split('\n');
      partialLine = lines.pop() ?? '';
      const found = lines.find((line) => line.includes('"msg":"agentgate listening"'));
      if (found) {
        clearTimeout(timer);
        resolve(JSON.parse(found) as Record<string, unknown>);
      }
    });
  });
}
