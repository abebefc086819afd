// The audit trail costs execute no command of its own. Measured on the wire as
// execute.round-trips.test.ts measures it (test/support/redis-proxy.ts counts every command and
// round trip of the server's Redis connection), with the audit trail on: an execute's event waits
// in the in-process queue, and the next execute's one command, its script, appends it (an XADD
// inside the script: the stream is among its keys, the event among its arguments). An execute
// nobody follows is written by the idle flush (an XADD of its own), AUDIT_FLUSH_MS later, well
// after any 50 ms settle. A refusal repeated within its aggregation window is only
// counted in process (audit/log.ts), so it costs Redis nothing at all.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, type HttpResult } from '../support/client.ts';
import { executeScriptEvents, measureWire, scriptKeys, startRedisProxy, type ProxiedCommand, type RedisProxy } from '../support/redis-proxy.ts';
import { redisUrlForTests } from '../support/redis.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const CONSTRAINED = { name: 'transfer_money', constraints: { amount: { max: 1000 }, currency: { in: ['USD', 'EUR'] } } };
const ALLOWED = { amount: 250, currency: 'USD' };
const VIOLATING = { amount: 5000, currency: 'USD' };
/** Refused with another code (400 invalid_request: amount must be a number), so it is not a repeat of VIOLATING. */
const MALFORMED = { amount: 'lots', currency: 'USD' };

let proxy: RedisProxy;

beforeAll(async () => {
  proxy = await startRedisProxy(await redisUrlForTests());
});
afterAll(async () => {
  await proxy?.close();
});

/** How long a test waits for the idle flush (AUDIT_FLUSH_MS is 400 ms); only a failure waits it out. */
const FLUSH_WAIT_MS = 10_000;

/** The idle flush's XADD's event JSON (XADD key MAXLEN ~ n * e <json>; its first 200 bytes, as the proxy records it). */
const xaddEvent = (command: ProxiedCommand): string => command.args[6] ?? '';

/** What one call sent, measured on the wire. */
const measure = (call: () => Promise<HttpResult>) => measureWire(proxy, call);

describe('Redis round trips of execute with the audit trail on', () => {
  let server: TestServer;
  let c: Client;
  beforeAll(async () => {
    // A long idle flush, so only the executes themselves can carry the events here.
    server = await startTestServer({ store: 'redis', redisUrl: proxy.url, env: { AUDIT_FLUSH_MS: '20000' } });
    c = new Client(server);
  });
  afterAll(() => server?.close());

  it('a sequence of executes is still one command each, and each carries the previous execute\'s event', async () => {
    const agent = await c.activeAgent([CONSTRAINED]);
    // Loads the scripts and fills the key cache; its own event waits in the queue.
    expect((await c.execute(agent, 'transfer_money', ALLOWED)).status).toBe(200);

    // Allowed and refused in turn, so each event names which execute it records. The two refusals
    // differ in code: a repeat of the same one within its window would only be counted.
    const sequence = [VIOLATING, ALLOWED, MALFORMED, ALLOWED, ALLOWED];
    const statusOf = (args: object) => (args === ALLOWED ? 200 : args === VIOLATING ? 403 : 400);
    let previous: 'execute.allowed' | 'execute.refused' = 'execute.allowed';
    for (const args of sequence) {
      const { res, commands, roundTrips } = await measure(() => c.execute(agent, 'transfer_money', args));
      expect(res.status, res.text).toBe(statusOf(args));
      expect(roundTrips).toEqual([1]);
      // One command: the script, which spends the budgets and appends the event.
      expect(commands.map((command) => command.name)).toEqual(['EVALSHA']);
      expect(scriptKeys(commands[0]!)).toContain(`${server.config.REDIS_KEY_PREFIX}audit`);
      const events = executeScriptEvents(commands[0]!);
      expect(events).toHaveLength(1);
      expect(events[0]).toContain(`"type":"${previous}"`);
      expect(events[0]).toContain(agent.id);
      previous = args === ALLOWED ? 'execute.allowed' : 'execute.refused';
    }

    // Every execute is in the trail, newest first (reading writes the last one first).
    const trail = await c.admin('GET', `/admin/audit?agent_id=${agent.id}&type=execute`);
    expect(trail.status, trail.text).toBe(200);
    const kinds = trail.json.events.map((event: { type: string; code?: string }) => `${event.type}${event.code ? ` ${event.code}` : ''}`);
    expect(kinds).toEqual([
      'execute.allowed', 'execute.allowed', 'execute.refused invalid_request', 'execute.allowed',
      'execute.refused constraint_violated', 'execute.allowed',
    ]);
    // No event holds the refused argument's value. Compared value by value: the trail's ids are
    // timestamps and may contain the digits 5000 by chance.
    const leaves = (value: unknown): unknown[] => (value !== null && typeof value === 'object' ? Object.values(value).flatMap(leaves) : [value]);
    expect(leaves(trail.json.events)).not.toContain(5000);
    expect(leaves(trail.json.events)).not.toContain('5000');
  });

  it('a refusal repeated within its window is only counted: the next execute carries nothing for it', async () => {
    const agent = await c.activeAgent([CONSTRAINED]);
    expect((await c.execute(agent, 'transfer_money', ALLOWED)).status).toBe(200);
    expect((await c.execute(agent, 'transfer_money', VIOLATING)).status).toBe(403);
    // The first refusal's event rides with this execute; this repeat of it is counted, not queued.
    const repeat = await measure(() => c.execute(agent, 'transfer_money', VIOLATING));
    expect(repeat.res.status).toBe(403);
    expect(repeat.roundTrips).toEqual([1]);
    expect(repeat.commands).toHaveLength(1);
    expect(executeScriptEvents(repeat.commands[0]!)).toEqual([expect.stringContaining('"type":"execute.refused"')]);
    const next = await measure(() => c.execute(agent, 'transfer_money', ALLOWED));
    expect(next.res.status).toBe(200);
    expect(next.roundTrips).toEqual([1]);
    expect(next.commands).toHaveLength(1);
    expect(executeScriptEvents(next.commands[0]!)).toEqual([]);
    expect(scriptKeys(next.commands[0]!)).not.toContain(`${server.config.REDIS_KEY_PREFIX}audit`);
  });

  it('a batch is one command too, and carries what waited', async () => {
    const agent = await c.activeAgent(['echo']);
    expect((await c.execute(agent, 'echo', {})).status).toBe(200);
    const calls = [{ id: 'a', capability: 'echo', arguments: {} }, { id: 'b', capability: 'echo', arguments: {} }];
    const { res, commands, roundTrips } = await measure(() => c.batchExecute(agent, calls));
    expect(res.status, res.text).toBe(200);
    expect(roundTrips).toEqual([1]);
    expect(commands).toHaveLength(1);
    expect(executeScriptEvents(commands[0]!)).toEqual([expect.stringContaining('"type":"execute.allowed"')]);
  });

  it('the events of a batch ride in the next execute\'s one command, not one command each', async () => {
    const agent = await c.activeAgent(['echo']);
    const calls = ['a', 'b', 'c'].map((id) => ({ id, capability: 'echo', arguments: {} }));
    expect((await c.batchExecute(agent, calls)).status).toBe(200);
    const { res, commands, roundTrips } = await measure(() => c.execute(agent, 'echo', {}));
    expect(res.status, res.text).toBe(200);
    expect(roundTrips).toEqual([1]);
    expect(commands).toHaveLength(1);
    expect(executeScriptEvents(commands[0]!)).toHaveLength(3);
    const trail = await c.admin('GET', `/admin/audit?agent_id=${agent.id}&type=execute`);
    expect(trail.json.events.map((event: { type: string }) => event.type)).toEqual(['execute.allowed', 'execute.allowed', 'execute.allowed', 'execute.allowed']);
  });
});

describe('the idle flush', () => {
  let server: TestServer;
  let c: Client;
  beforeAll(async () => {
    server = await startTestServer({ store: 'redis', redisUrl: proxy.url, env: { AUDIT_FLUSH_MS: '400' } });
    c = new Client(server);
  });
  afterAll(() => server?.close());

  it('writes a lone execute\'s event AUDIT_FLUSH_MS later, after the response and on its own', async () => {
    const agent = await c.activeAgent(['echo']);
    proxy.reset();
    expect((await c.execute(agent, 'echo', {})).status).toBe(200);
    // The idle flush writes the queue, this execute's event last. Waiting for that write, rather than
    // for a time a busy machine may outlast, leaves nothing waiting for the next execute to carry.
    const flushed = (type: string) => proxy.commands.some((command) => command.name === 'XADD' && xaddEvent(command).includes(`"type":"${type}"`));
    await expect.poll(() => flushed('execute.allowed'), { timeout: FLUSH_WAIT_MS }).toBe(true);
    const { res, commands, roundTrips } = await measure(() => c.execute(agent, 'echo', { lone: true }));
    expect(res.status, res.text).toBe(200);
    // Nothing was waiting (the idle flush wrote the previous event), and nothing is written yet.
    expect(roundTrips).toEqual([1]);
    expect(commands).toHaveLength(1);
    expect(executeScriptEvents(commands[0]!)).toEqual([]);

    await expect.poll(() => flushed('execute.allowed'), { timeout: FLUSH_WAIT_MS }).toBe(true);
    // The audit trail's appends: the decision log's idle flush (grants decisions) writes to its own stream.
    const appends = proxy.commands.filter((command) => command.name === 'XADD' && command.args[0] === `${server.config.REDIS_KEY_PREFIX}audit`);
    expect(appends).toHaveLength(1);
    expect(appends[0]!.args[6]).toContain('"type":"execute.allowed"');
    const stored = await server.store.readAuditEvents(null, 1);
    expect(stored[0]).toMatchObject({ type: 'execute.allowed', agent_id: agent.id, capability: 'echo', outcome: 'completed' });
  });
});
