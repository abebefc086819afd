// DESIGN §2 step 4: an allowed execute costs exactly one Redis command. Measured on the wire, not
// asserted from the code: the server's Redis connection goes through a counting proxy
// (test/support/redis-proxy.ts) that records every command and every round trip, and each allowed
// execute must send the execute script, with the agent's and the host's budgets among its keys
// (they are counters the script spends), and nothing else. A capability with a budget of its own
// in the catalog costs one command more, sent beside it (on the command connection, while the
// script goes on a connection of its own: store/redis/script-connection.ts). Redis standalone; on a Redis Cluster
// the host's budget lives in another slot, so its counter goes to its node in parallel with the
// script (store.redis-cluster.test.ts). The audit trail is off here, so the counts are the hot
// path's own; execute.audit-round-trips.test.ts proves that with it on, its appends ride in the
// same command.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '../support/client.ts';
import { measureWire, scriptKeys, startRedisProxy, type RedisProxy } from '../support/redis-proxy.ts';
import { redisUrlForTests } from '../support/redis.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const CONSTRAINED = { name: 'transfer_money', constraints: { amount: { max: 1000 }, currency: { in: ['USD', 'EUR'] } } };
const ALLOWED = { amount: 250, currency: 'USD' };

let proxy: RedisProxy;
let server: TestServer;
let c: Client;

beforeAll(async () => {
  proxy = await startRedisProxy(await redisUrlForTests());
  server = await startTestServer({ store: 'redis', redisUrl: proxy.url, env: { AUDIT_ENABLED: 'false' } });
  c = new Client(server);
});
afterAll(async () => {
  await server?.close();
  await proxy?.close();
});

describe('Redis round trips of POST /capability/execute', () => {
  it('an allowed execute with a constrained grant is one command: the execute script, which also spends the agent and host budgets', async () => {
    const agent = await c.activeAgent([CONSTRAINED]);
    // The first call may load the scripts into Redis (NOSCRIPT, then EVAL) and fill the key cache.
    expect((await c.execute(agent, 'transfer_money', ALLOWED)).status).toBe(200);

    for (let i = 0; i < 5; i++) {
      const { res, commands, roundTrips } = await measureWire(proxy, () => c.execute(agent, 'transfer_money', ALLOWED));
      expect(res.status, res.text).toBe(200);
      expect(roundTrips).toEqual([1]);
      expect(commands).toHaveLength(1);
      expect(commands[0]!.name).toBe('EVALSHA');
      const keys = scriptKeys(commands[0]!);
      expect(keys[0]).toBe(`${server.config.REDIS_KEY_PREFIX}{${agent.id}}`);
      // The budgets carry hash tags (DESIGN §10): the agent's lives in the agent's slot, the host's in the host's.
      expect(keys.filter((key) => key.endsWith(`rl:agent:{${agent.id}}`))).toHaveLength(1);
      expect(keys.filter((key) => /rl:host:\{[^}]+\}$/.test(key))).toHaveLength(1);
    }
  });

  it('a constraint-violating execute costs the same single command (the jti is burnt and the budgets spent)', async () => {
    const agent = await c.activeAgent([CONSTRAINED]);
    expect((await c.execute(agent, 'transfer_money', ALLOWED)).status).toBe(200);
    const { res, commands, roundTrips } = await measureWire(proxy, () => c.execute(agent, 'transfer_money', { amount: 5000, currency: 'USD' }));
    expect(res.status, res.text).toBe(403);
    expect(roundTrips).toEqual([1]);
    expect(commands).toHaveLength(1);
  });

  it('the count is real: a cold key cache costs one more round trip, for reading the agent', async () => {
    const agent = await c.activeAgent([CONSTRAINED]);
    expect((await c.execute(agent, 'transfer_money', ALLOWED)).status).toBe(200);
    server.app.deps.keys.invalidate(agent.id);
    const { res, waits, commands } = await measureWire(proxy, () => c.execute(agent, 'transfer_money', ALLOWED));
    expect(res.status, res.text).toBe(200);
    // The read goes on the command connection and the script on its own (script-connection.ts):
    // two round trips, the second sent once the first was answered.
    expect(waits).toBe(2);
    expect(commands.map((command) => command.name)).toEqual(['EVALSHA', 'EVALSHA']);
  });
});

describe('a capability with a budget of its own (catalog rateLimit)', () => {
  let metered: TestServer;
  let client: Client;
  beforeAll(async () => {
    metered = await startTestServer({
      store: 'redis',
      redisUrl: proxy.url,
      env: { AUDIT_ENABLED: 'false' },
      capabilities: [{ name: 'metered', description: 'has its own budget', input: { type: 'object' }, rateLimit: { points: 1000, durationSeconds: 60 }, handler: { type: 'echo' } }],
    });
    client = new Client(metered);
  });
  afterAll(() => metered?.close());

  it('spends that budget in the same round trip: one command more, sent beside the script', async () => {
    const agent = await client.activeAgent(['metered']);
    expect((await client.execute(agent, 'metered', {})).status).toBe(200);
    const { res, commands, roundTrips, waits } = await measureWire(proxy, () => client.execute(agent, 'metered', {}));
    expect(res.status, res.text).toBe(200);
    // The budget goes on the command connection, the script on its own: one round trip on each,
    // both sent before either was answered.
    expect(roundTrips).toEqual([1, 1]);
    expect(waits).toBe(1);
    expect(commands.map((command) => command.name)).toEqual(['EVALSHA', 'EVALSHA']);
    expect(commands.filter((command) => command.key?.includes('rl:cap:metered'))).toHaveLength(1);
  });
});
