// A busy port is a failed start, never a quiet success (docs/stances.md). A second agentgate on a
// port another process holds used to log "agentgate listening" and exit 0 (memory store), or stay
// alive serving nothing (Redis: its connection kept the process up); in cluster mode the primary
// restarted the failing workers forever. Now every variant exits non-zero within seconds, says
// EADDRINUSE and the port, and never claims to listen.
//
// What is checked is that the process exits by itself: the bugs above never exited at all. How soon
// it exits is not measured, since a busy machine decides that; a process still running after the
// start-up bound (test/support/agentgate-process.ts) is killed and the test fails with its output.
import { createServer, type Server } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exitOf, spawnAgentgate, WITH_SERVERS_TIMEOUT_MS } from '../support/agentgate-process.ts';
import { freePort } from '../support/net.ts';
import { deletePrefix, redisUrlForTests, uniquePrefix } from '../support/redis.ts';

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
  output: string;
}

/** Starts src/main.ts on the held port: its exit status and everything it printed. */
async function startOnBusyPort(env: Record<string, string>): Promise<Outcome> {
  const started = spawnAgentgate({ PORT: String(port), ...env });
  // Rejects, with the output, if the process does not exit by itself.
  const { code, signal } = await exitOf(started, `agentgate on the busy port ${port}`);
  return { code, signal, output: started.output() };
}

function expectFailedStart(result: Outcome): void {
  expect(result.signal, result.output).toBeNull();
  expect(result.code, result.output).toBe(1);
  expect(result.output).toMatch(/cannot listen; exiting/);
  expect(result.output).toContain('EADDRINUSE');
  expect(result.output).toContain(`"port":${port}`);
  expect(result.output).not.toMatch(/agentgate listening/);
}

describe('a port already in use', () => {
  it('with the memory store, the second instance exits with status 1 and says EADDRINUSE', async () => {
    expectFailedStart(await startOnBusyPort({ REDIS_URL: '' }));
  }, WITH_SERVERS_TIMEOUT_MS);

  it('with Redis, neither the Redis connection nor the plugin workers keep the process alive', async () => {
    expectFailedStart(await startOnBusyPort({ REDIS_URL: redisUrl, REDIS_KEY_PREFIX: prefix }));
  }, WITH_SERVERS_TIMEOUT_MS);

  it('in cluster mode, the primary stops instead of restarting workers that cannot listen', async () => {
    const result = await startOnBusyPort({ REDIS_URL: redisUrl, REDIS_KEY_PREFIX: prefix, WORKERS: '2' });
    expectFailedStart(result);
    expect(result.output).toMatch(/a worker failed to start; stopping/);
    expect(result.output).not.toMatch(/worker exited; starting another/);
  }, WITH_SERVERS_TIMEOUT_MS);
});
