// A busy port is a failed start, never a quiet success (docs/stances.md). A second agentgate on a
// port another process holds used to log "agentgate listening" and exit 0 (memory store), or stay
// alive serving nothing (Redis: its connection kept the process up); in cluster mode the primary
// restarted the failing workers forever. Now every variant exits non-zero within seconds, says
// EADDRINUSE and the port, and never claims to listen.
import { spawn } from 'node:child_process';
import { createServer, type Server } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../support/net.ts';
import { deletePrefix, redisUrlForTests, uniquePrefix } from '../support/redis.ts';
import { SERVICE_POLICY_ENV } from '../support/policies.ts';

// Start-up (policy, plugin workers, Redis) takes 1 to 2 s, several times that on a busy machine, so
// promptness is measured from the refusal to listen; past GIVE_UP_MS the process counts as stuck.
const EXIT_AFTER_REFUSAL_MS = 2000;
const GIVE_UP_MS = 15_000;

let holder: Server;
let port: number;
let redisUrl: string;
const prefix = uniquePrefix('busy-port');

beforeAll(async () => {
  redisUrl = await redisUrlForTests();
  port = await freePort();
  holder = createServer((socket) => socket.destroy());
  await new Promise<void>((resolve) => holder.listen(port, '127.0.0.1', resolve));
});

afterAll(async () => {
  await new Promise((resolve) => holder.close(resolve));
  await deletePrefix(redisUrl, prefix);
});

interface Outcome {
  code: number | null;
  signal: string | null;
  /** From the first "cannot listen" log line to the exit. */
  exitAfterRefusalMs: number;
  output: string;
}

/** Starts src/main.ts on the held port: its exit status, how soon it exited and everything it printed. */
async function startOnBusyPort(env: Record<string, string>): Promise<Outcome> {
  let refusedAt = Number.NaN;
  const child = spawn(process.execPath, ['src/main.ts'], {
    env: { ...process.env, ...SERVICE_POLICY_ENV, PORT: String(port), HOST: '127.0.0.1', POLICY_WATCH: 'false', LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const collect = (chunk: string) => {
    output += chunk;
    if (Number.isNaN(refusedAt) && output.includes('cannot listen')) refusedAt = performance.now();
  };
  child.stdout.setEncoding('utf8').on('data', collect);
  child.stderr.setEncoding('utf8').on('data', collect);
  const killer = setTimeout(() => child.kill('SIGKILL'), GIVE_UP_MS);
  const [code, signal] = await new Promise<[number | null, string | null]>((resolve) => child.once('exit', (c, s) => resolve([c, s])));
  clearTimeout(killer);
  return { code, signal, exitAfterRefusalMs: performance.now() - refusedAt, output };
}

function expectFailedStart(result: Outcome): void {
  // Killed by the test's timer means it did not exit by itself.
  expect(result.signal, `still running after ${GIVE_UP_MS} ms; output:\n${result.output}`).toBeNull();
  expect(result.code, result.output).toBe(1);
  expect(result.output).toMatch(/cannot listen; exiting/);
  expect(result.output).toContain('EADDRINUSE');
  expect(result.output).toContain(`"port":${port}`);
  expect(result.output).not.toMatch(/agentgate listening/);
  expect(result.exitAfterRefusalMs).toBeLessThan(EXIT_AFTER_REFUSAL_MS);
}

describe('a port already in use', () => {
  it('with the memory store, the second instance exits with status 1 and says EADDRINUSE', async () => {
    expectFailedStart(await startOnBusyPort({ REDIS_URL: '' }));
  });

  it('with Redis, neither the Redis connection nor the plugin workers keep the process alive', async () => {
    expectFailedStart(await startOnBusyPort({ REDIS_URL: redisUrl, REDIS_KEY_PREFIX: prefix }));
  });

  it('in cluster mode, the primary stops instead of restarting workers that cannot listen', async () => {
    const result = await startOnBusyPort({ REDIS_URL: redisUrl, REDIS_KEY_PREFIX: prefix, WORKERS: '2' });
    expectFailedStart(result);
    expect(result.output).toMatch(/a worker failed to start; stopping/);
    expect(result.output).not.toMatch(/worker exited; starting another/);
  });
});
