// DESIGN §2 step 4 for batch execute: the lifecycle, replay, session and budget part of a whole
// batch costs one Redis command, however many items it carries. Measured on the wire, as
// execute.round-trips.test.ts measures execute: the server's Redis connection goes through a
// counting proxy (test/support/redis-proxy.ts), and a batch of 10 must send one execute script
// (naming every capability the items name, and spending 10 points of the agent's and host's
// budgets, which are among its keys), plus one command per item whose capability has a budget of
// its own, sent beside the script (on the command connection, while the script goes on its own),
// and nothing else. Redis standalone. The audit trail is off here, so the counts are
// the hot path's own (execute.audit-round-trips.test.ts measures them with it on).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '../support/client.ts';
import { measureWire, scriptKeys, startRedisProxy, type RedisProxy } from '../support/redis-proxy.ts';
import { redisUrlForTests } from '../support/redis.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const CONSTRAINED = { name: 'transfer_money', constraints: { amount: { max: 1000 }, currency: { in: ['USD', 'EUR'] } } };

let proxy: RedisProxy;
let server: TestServer;
let c: Client;

beforeAll(async () => {
  proxy = await startRedisProxy(await redisUrlForTests());
  server = await startTestServer({
    store: 'redis',
    redisUrl: proxy.url,
    env: { AUDIT_ENABLED: 'false' },
    capabilities: [
      { name: 'echo', description: 'echo', input: { type: 'object' }, handler: { type: 'echo' } },
      { name: 'transfer_money', description: 'constrained', input: { type: 'object', properties: { amount: { type: 'number' }, currency: { type: 'string' } } }, handler: { type: 'echo' } },
      { name: 'metered', description: 'has its own budget', input: { type: 'object' }, rateLimit: { points: 1000, durationSeconds: 60 }, handler: { type: 'echo' } },
    ],
  });
  c = new Client(server);
});
afterAll(async () => {
  await server?.close();
  await proxy?.close();
});

/** Ten items: allowed and refused ones, over two capabilities. */
const TEN_ITEMS = Array.from({ length: 10 }, (_, i) => (i % 2 === 0
  ? { id: `t${i}`, capability: 'transfer_money', arguments: { amount: i % 4 === 0 ? 250 : 5000, currency: 'USD' } }
  : { id: `e${i}`, capability: 'echo', arguments: { i } }));

describe('Redis round trips of POST /capability/batch-execute', () => {
  it('a batch of 10 is one command: one execute script for both capabilities, which spends 10 points of the agent and host budgets', async () => {
    const agent = await c.activeAgent([CONSTRAINED, 'echo']);
    // The first call may load the scripts into Redis (NOSCRIPT, then EVAL) and fill the key cache.
    expect((await c.batchExecute(agent, TEN_ITEMS)).status).toBe(200);

    for (let i = 0; i < 3; i++) {
      const { res, commands, roundTrips } = await measureWire(proxy, () => c.batchExecute(agent, TEN_ITEMS));
      expect(res.status, res.text).toBe(200);
      expect((res.json.responses as Array<{ status: string }>).map((item) => item.status)).toEqual(
        TEN_ITEMS.map((item, index) => (item.capability === 'transfer_money' && index % 4 !== 0 ? 'failed' : 'completed')),
      );
      expect(roundTrips).toEqual([1]);
      expect(commands).toHaveLength(1);
      const [script] = commands;
      expect(script!.name).toBe('EVALSHA');
      // The script names each distinct capability once, after its other arguments.
      expect(script!.args.slice(-2).sort()).toEqual(['echo', 'transfer_money']);
      const keys = scriptKeys(script!);
      const argv = script!.args.slice(2 + keys.length);
      // Two counters, each spent by 10 points (scripts.ts EXECUTE_ROUND_TRIP lays out the pairs after eleven arguments).
      expect(argv[4]).toBe('2');
      expect(argv.slice(11, 15)).toEqual(['10', '60', '10', '60']);
      expect(keys.filter((key) => key.includes('rl:agent') || key.includes('rl:host'))).toHaveLength(2);
    }
  });

  it('a batch of 10 whose items are all refused costs the same single command (the jti is burnt and the budgets spent)', async () => {
    const agent = await c.activeAgent([CONSTRAINED]);
    expect((await c.batchExecute(agent, [{ capability: 'transfer_money', arguments: { amount: 1 } }])).status).toBe(200);
    const refused = Array.from({ length: 10 }, () => ({ capability: 'transfer_money', arguments: { amount: 5000, currency: 'USD' } }));
    const { res, commands, roundTrips } = await measureWire(proxy, () => c.batchExecute(agent, refused));
    expect(res.status, res.text).toBe(200);
    expect((res.json.responses as Array<{ status: string }>).every((item) => item.status === 'failed')).toBe(true);
    expect(roundTrips).toEqual([1]);
    expect(commands).toHaveLength(1);
  });

  it('the count is real: a cold key cache costs one more round trip, for reading the agent', async () => {
    const agent = await c.activeAgent([CONSTRAINED, 'echo']);
    expect((await c.batchExecute(agent, TEN_ITEMS)).status).toBe(200);
    server.app.deps.keys.invalidate(agent.id);
    const { res, waits, commands } = await measureWire(proxy, () => c.batchExecute(agent, TEN_ITEMS));
    expect(res.status, res.text).toBe(200);
    // The read on the command connection, then the script on its own: the second sent once the first was answered.
    expect(waits).toBe(2);
    expect(commands.map((command) => command.name)).toEqual(['EVALSHA', 'EVALSHA']);
  });

  it("items of a capability with a budget of its own spend it in the same round trip: one command per item, sent beside the script", async () => {
    const agent = await c.activeAgent(['metered']);
    const items = Array.from({ length: 10 }, (_, i) => ({ id: `m${i}`, capability: 'metered' }));
    expect((await c.batchExecute(agent, items)).status).toBe(200);
    const { res, commands, roundTrips, waits } = await measureWire(proxy, () => c.batchExecute(agent, items));
    expect(res.status, res.text).toBe(200);
    // The budgets go in one pipeline on the command connection, the script on its own
    // (store/redis/script-connection.ts): one round trip on each, both sent before either was answered.
    expect(roundTrips).toEqual([1, 1]);
    expect(waits).toBe(1);
    expect(commands).toHaveLength(11);
    expect(commands.every((command) => command.name === 'EVALSHA')).toBe(true);
    expect(commands.filter((command) => command.key?.includes('rl:cap:metered'))).toHaveLength(10);
  });
});
