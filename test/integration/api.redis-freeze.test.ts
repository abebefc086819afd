// During a Redis freeze (SIGSTOP: connections stay open, nothing answers), every
// request is refused with 503 within the command timeout plus a small margin, whatever the
// concurrency. Commands that wait behind a frozen auto-pipeline batch used to take two timeouts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, code, http, type TestAgent } from '../support/client.ts';
import { startThrowawayRedis, type ThrowawayRedis } from '../support/redis.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const COMMAND_TIMEOUT_MS = 2000;
/**
 * One command timeout and half of one more: the margin (1 s) covers the store's own deadline (100 ms)
 * and HTTP on a busy 2-core machine, and still tells one timeout from the two a request behind a
 * frozen batch used to take.
 */
const ALLOWED_MS = COMMAND_TIMEOUT_MS * 1.5;

let redis: ThrowawayRedis;
let server: TestServer;
let c: Client;
let agents: TestAgent[];

beforeAll(async () => {
  redis = await startThrowawayRedis();
  server = await startTestServer({ store: 'redis', redisUrl: redis.url, env: { REDIS_COMMAND_TIMEOUT_MS: String(COMMAND_TIMEOUT_MS) } });
  c = new Client(server);
  agents = await Promise.all(Array.from({ length: 8 }, () => c.activeAgent(['echo'])));
  // Warm the key caches, so executes go straight to the one round trip.
  for (const agent of agents) expect((await c.execute(agent, 'echo', {})).status).toBe(200);
});
afterAll(async () => {
  redis.process.kill('SIGCONT');
  await server.close();
  await redis.stop();
});

/** Runs the requests while Redis is frozen; answers each status and how long it took. */
async function whileFrozen(requests: Array<() => Promise<{ status: number; json: unknown }>>) {
  redis.process.kill('SIGSTOP');
  try {
    const startedMs = performance.now();
    return await Promise.all(requests.map(async (send) => {
      const res = await send();
      return { res, ms: performance.now() - startedMs };
    }));
  } finally {
    redis.process.kill('SIGCONT');
    // Let the connection settle before the next case.
    await expect.poll(async () => (await http('GET', c.url('/readyz'))).status, { timeout: 5000 }).toBe(200);
  }
}

describe('a Redis freeze', () => {
  it.each([1, 4, 16])('refuses %i concurrent executes with 503 within one command timeout (plus margin)', async (n) => {
    const tokens = await Promise.all(Array.from({ length: n }, (_, i) => c.agentToken(agents[i % agents.length]!, { aud: c.executeUrl })));
    const results = await whileFrozen(tokens.map((token) => () => http('POST', c.executeUrl, { token, json: { capability: 'echo', arguments: {} } })));
    for (const { res, ms } of results) {
      expect(code(res as never)).toBe('503 service_unavailable');
      expect(ms).toBeLessThan(ALLOWED_MS);
    }
  });

  it('refuses 16 concurrent host calls (several store calls and a rate limit each) within one command timeout', async () => {
    const results = await whileFrozen(Array.from({ length: 16 }, (_, i) => () => c.status(agents[i % agents.length]!.host, agents[i % agents.length]!.id)));
    for (const { res, ms } of results) {
      expect(code(res as never)).toBe('503 service_unavailable');
      expect(ms).toBeLessThan(ALLOWED_MS);
    }
  });
});
