// The Redis store against the shared store contract, plus what only Redis has: the server checks at
// start-up, failing closed and bounded when Redis dies or hangs, the one-command hot path, the key
// layout and hash slots of DESIGN §3, and defensive decoding of stored records.
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { decisionPages } from '../../src/store/decision-pages.ts';
import { keyLayout } from '../../src/store/redis/keys.ts';
import { createRedisStore, type RedisStore } from '../../src/store/redis/redis-store.ts';
import {
  deletePrefix,
  freePort,
  redisStoresUnderTest,
  redisUrlForTests,
  sleep,
  startThrowawayRedis,
  uniquePrefix,
  type ThrowawayRedis,
} from '../support/redis.ts';
import { storeContract } from './store.contract.ts';
import { activeAgentSnapshot } from '../support/agent-snapshot.ts';

storeContract('redis', async () => redisStoresUnderTest({ url: await redisUrlForTests() }, 'store-contract'));

// ---- helpers -------------------------------------------------------------------------------------

/** Things a test opened, closed after it whatever happened. */
const opened: { close(): Promise<void> }[] = [];
const servers: ThrowawayRedis[] = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((item) => item.close().catch(() => {})));
  await Promise.all(servers.splice(0).map((server) => server.stop()));
});

async function throwaway(extraArgs: string[] = [], port?: number): Promise<ThrowawayRedis> {
  const server = await startThrowawayRedis(extraArgs, port === undefined ? {} : { port });
  servers.push(server);
  return server;
}

async function storeOn(url: string, keyPrefix = uniquePrefix('store-redis')): Promise<RedisStore> {
  const store = await createRedisStore({ url, keyPrefix });
  opened.push(store);
  return store;
}

function rawClient(url: string): Redis {
  const client = new Redis(url, { commandTimeout: 2000, maxRetriesPerRequest: 1 });
  opened.push({ close: async () => void client.disconnect() });
  return client;
}

/** A store on the suite's Redis under a key prefix of its own (`<name>` made unique), whose keys are deleted after the test. */
async function storeOnOwnPrefix(name: string): Promise<{ url: string; keyPrefix: string; store: RedisStore }> {
  const url = await redisUrlForTests();
  const keyPrefix = uniquePrefix(name);
  opened.push({ close: () => deletePrefix(url, keyPrefix).then(() => undefined) });
  return { url, keyPrefix, store: await storeOn(url, keyPrefix) };
}

/** Resolves with how long the promise took to settle, and whether it rejected. */
async function settle(promise: Promise<unknown>): Promise<{ elapsedMs: number; rejected: boolean; error?: Error }> {
  const started = Date.now();
  try {
    await promise;
    return { elapsedMs: Date.now() - started, rejected: false };
  } catch (error) {
    return { elapsedMs: Date.now() - started, rejected: true, error: error as Error };
  }
}

const agentSnapshot = activeAgentSnapshot;

// ---- start-up checks -----------------------------------------------------------------------------

describe('redis store: start-up refuses a Redis it cannot trust', () => {
  it('refuses a server whose maxmemory-policy evicts keys, and says how to fix it', async () => {
    const server = await throwaway(['--maxmemory-policy', 'allkeys-lru']);
    await expect(createRedisStore({ url: server.url })).rejects.toThrow(/maxmemory-policy "allkeys-lru".*noeviction.*Fix:/s);
  });

  it('accepts a server where CONFIG is disabled (managed Redis), since the policy cannot be read', async () => {
    const server = await throwaway(['--rename-command', 'CONFIG', '']);
    const store = await storeOn(server.url);
    await expect(store.ping()).resolves.toBeUndefined();
  });

  it('an unreachable Redis fails creation within ~2 s with a message naming the URL', async () => {
    const port = await freePort();
    const outcome = await settle(createRedisStore({ url: `redis://:secret@127.0.0.1:${port}` }));
    expect(outcome.rejected).toBe(true);
    expect(outcome.elapsedMs).toBeLessThan(3000);
    expect(outcome.error?.message).toMatch(new RegExp(`cannot connect to Redis redis://:\\*\\*\\*@127.0.0.1:${port}`));
    expect(outcome.error?.message).not.toContain('secret');
  });

  it('a key prefix with braces is refused (it would break the hash tags)', async () => {
    await expect(createRedisStore({ url: await redisUrlForTests(), keyPrefix: 'ag:{x}:' })).rejects.toThrow(/must not contain/);
  });
});

// ---- failing closed ------------------------------------------------------------------------------

describe('redis store: a dead or hung Redis makes calls reject quickly, never hang', () => {
  it('a killed server: calls reject within ~2 s, and the store recovers when Redis returns', async () => {
    const server = await throwaway();
    const store = await storeOn(server.url);
    await server.stop();
    for (const call of [store.ping(), store.getAgent('agt_x'), store.recordHostJti('thp', 'jti', 1000)]) {
      const outcome = await settle(call);
      expect(outcome.rejected).toBe(true);
      expect(outcome.elapsedMs).toBeLessThan(3000);
    }
    await throwaway([], server.port);
    const deadline = Date.now() + 5000;
    while ((await settle(store.ping())).rejected) {
      if (Date.now() > deadline) throw new Error('the store did not reconnect');
      await sleep(100);
    }
  });

  it('a hung server (SIGSTOP): calls reject after the command timeout', async () => {
    const server = await throwaway();
    const store = await storeOn(server.url);
    server.process.kill('SIGSTOP');
    try {
      const outcomes = await Promise.all([settle(store.ping()), settle(store.executeRoundTrip({
        agentId: 'agt_x', keyVersion: 1, jti: 'j', jtiTtlMs: 1000, capabilities: ['echo'], nowMs: Date.now(), sessionTtlMs: 1000,
      }))]);
      for (const outcome of outcomes) {
        expect(outcome.rejected).toBe(true);
        expect(outcome.error?.message).toMatch(/timed out/i);
        expect(outcome.elapsedMs).toBeGreaterThanOrEqual(1900);
        expect(outcome.elapsedMs).toBeLessThan(3000);
      }
    } finally {
      server.process.kill('SIGCONT');
    }
  });

  it('close() returns promptly even when the server is gone', async () => {
    const server = await throwaway();
    const store = await storeOn(server.url);
    store.onAgentInvalidation(() => {});
    await server.stop();
    const outcome = await settle(store.close());
    expect(outcome.elapsedMs).toBeLessThan(3000);
  });
});

// ---- the hot path's one round trip ---------------------------------------------------------------

describe('redis store: executeRoundTrip is one command on the wire', () => {
  it('sends exactly one command, EVALSHA, and EVAL once more when Redis does not have the script yet', async () => {
    const server = await throwaway();
    const store = await storeOn(server.url);
    const snapshot = agentSnapshot('hst_1');
    await store.createAgent(snapshot);
    const request = () => ({
      agentId: snapshot.agent.id, keyVersion: 1, jti: randomUUID(), jtiTtlMs: 60_000, capabilities: ['echo'], nowMs: Date.now(), sessionTtlMs: 60_000,
    });
    const seen: { args: string[]; source: string }[] = [];
    const monitor = await rawClient(server.url).monitor();
    opened.push({ close: async () => void monitor.disconnect() });
    monitor.on('monitor', (_time: string, args: string[], source: string) => seen.push({ args, source }));
    const markers = rawClient(server.url);
    const waitFor = async (marker: string): Promise<number> => {
      await markers.echo(marker);
      const deadline = Date.now() + 2000;
      while (!seen.some((event) => event.args[1] === marker)) {
        if (Date.now() > deadline) throw new Error(`MONITOR never showed ${marker}`);
        await sleep(10);
      }
      return seen.findIndex((event) => event.args[1] === marker);
    };

    /** The commands the store sent during one executeRoundTrip, by name. */
    const commandsOf = async (label: string): Promise<(string | undefined)[]> => {
      const start = await waitFor(`${label}-start`);
      expect((await store.executeRoundTrip(request())).kind).toBe('ok');
      const end = await waitFor(`${label}-end`);
      // Commands run inside the script show up with source "lua"; only client commands count.
      return seen.slice(start + 1, end).filter((event) => event.source !== 'lua').map((event) => event.args[0]?.toLowerCase());
    };
    expect(await commandsOf('cold')).toEqual(['evalsha', 'eval']);
    expect(await commandsOf('warm')).toEqual(['evalsha']);
    await markers.script('FLUSH');
    expect(await commandsOf('flushed')).toEqual(['evalsha', 'eval']);
    expect(await commandsOf('reloaded')).toEqual(['evalsha']);
  });
});

// ---- key layout and hash slots -------------------------------------------------------------------

/** The part of a key Redis Cluster hashes: the text inside the first {...}, if non-empty. */
function hashTag(key: string): string {
  const open = key.indexOf('{');
  const close = key.indexOf('}', open + 1);
  return open >= 0 && close > open + 1 ? key.slice(open + 1, close) : key;
}

describe('redis store: key layout (DESIGN §3)', () => {
  it('every key of one agent, and of one host, shares one hash tag', () => {
    const keys = keyLayout('ag:');
    const agentKeys = [keys.agent('agt_1'), keys.session('agt_1'), keys.grants('agt_1'), keys.grantsByCapability('agt_1'), keys.agentJti('agt_1', 'j}{')];
    expect(new Set(agentKeys.map(hashTag))).toEqual(new Set(['agt_1']));
    const hostKeys = [keys.host('hst_1'), keys.hostAgents('hst_1'), keys.hostAgentKey('hst_1', 'akt')];
    expect(new Set(hostKeys.map(hashTag))).toEqual(new Set(['hst_1']));
  });

  it('writes the documented keys, and the session key expires at the deadline in Redis too', async () => {
    const { url, keyPrefix, store } = await storeOnOwnPrefix('layout');
    const host = { id: 'hst_1', thumbprint: 'thp_1', publicJwk: { kty: 'OKP' }, status: 'active' as const, defaultCapabilities: [], createdAtMs: 1, updatedAtMs: 1 };
    await store.createHost(host);
    const snapshot = agentSnapshot('hst_1');
    await store.createAgent(snapshot);
    await store.recordHostJti('thp_1', 'hj', 60_000);
    const id = snapshot.agent.id;
    await store.executeRoundTrip({ agentId: id, keyVersion: 1, jti: 'aj', jtiTtlMs: 60_000, capabilities: ['echo'], nowMs: Date.now(), sessionTtlMs: 60_000 });

    const raw = rawClient(url);
    const found = (await raw.keys(`${keyPrefix}*`)).map((key) => key.slice(keyPrefix.length)).sort();
    expect(found).toEqual(
      [
        `{${id}}`, `{${id}}:session`, `{${id}}:grants`, `{${id}}:grants:cap`, `{${id}}:jti:aj`,
        'host:{hst_1}', 'host:{hst_1}:agents', `host:{hst_1}:agentkey:${snapshot.agent.keyThumbprint}`,
        'hostkey:{thp_1}', 'hostjti:{thp_1}:hj',
      ].sort(),
    );
    const sessionPttlMs = await raw.pttl(`${keyPrefix}{${id}}:session`);
    expect(sessionPttlMs).toBeGreaterThan(50_000);
    expect(sessionPttlMs).toBeLessThanOrEqual(60_000);
    expect(await raw.pttl(`${keyPrefix}{${id}}:jti:aj`)).toBeGreaterThan(50_000);
    expect(await raw.hget(`${keyPrefix}{${id}}:grants:cap`, 'echo')).toBe(JSON.stringify([snapshot.grants[0]!.id]));
  });
});

// ---- defensive decoding --------------------------------------------------------------------------

describe('redis store: a malformed stored record throws instead of being served', () => {
  const cases: [string, string, string][] = [
    ['a number field that is not a number', 'keyVersion', 'one'],
    ['an unknown status', 'status', 'superuser'],
    ['a JSON field that is not JSON', 'publicJwk', '{not json'],
  ];
  /** A store holding one agent, the agent as written, and where its records are, for a raw client to spoil them. */
  async function storeWithOneAgent() {
    const { url, keyPrefix, store } = await storeOnOwnPrefix('malformed');
    const snapshot = agentSnapshot('hst_1');
    await store.createAgent(snapshot);
    return { store, snapshot, raw: rawClient(url), keys: keyLayout(keyPrefix) };
  }

  it.each(cases)('%s', async (_label, field, value) => {
    const { store, snapshot, raw, keys } = await storeWithOneAgent();
    await raw.hset(keys.agent(snapshot.agent.id), field, value);
    await expect(store.getAgent(snapshot.agent.id)).rejects.toThrow(/malformed.*field "/);
  });

  it('a grant that is not valid JSON', async () => {
    const { store, snapshot, raw, keys } = await storeWithOneAgent();
    await raw.hset(keys.grants(snapshot.agent.id), snapshot.grants[0]!.id, '{"id":"g","status":"maybe"}');
    await expect(store.getAgent(snapshot.agent.id)).rejects.toThrow(/malformed/);
  });
});

describe('redis store: an audit append Redis refuses says so per event, never throws', () => {
  const record = (n: number) => ({ at: '2026-11-24T00:00:00.000Z', type: 'test.event', actor: 'system' as const, n });

  it('one event (XADD) and several (one script call) answer false for each when the stream key holds another type', async () => {
    const { url, keyPrefix, store } = await storeOnOwnPrefix('audit-refused');
    await rawClient(url).set(keyLayout(keyPrefix).auditStream, 'not a stream');
    expect(await store.appendAuditEvents([record(1)], 100)).toEqual([false]);
    expect(await store.appendAuditEvents([record(1), record(2), record(3)], 100)).toEqual([false, false, false]);
    await rawClient(url).del(keyLayout(keyPrefix).auditStream);
    expect(await store.appendAuditEvents([record(1), record(2), record(3)], 100)).toEqual([true, true, true]);
    expect((await store.readAuditEvents(null, 10)).map((event) => event.n)).toEqual([3, 2, 1]);
  });
});

describe('redis store: the decision stream', () => {
  it('an append Redis refuses says so per record, never throws, for one record (XADD) and several (one script call)', async () => {
    const { url, keyPrefix, store } = await storeOnOwnPrefix('decisions-refused');
    const stream = keyLayout(keyPrefix).decisionStream;
    await rawClient(url).set(stream, 'not a stream');
    expect(await store.appendDecisionRecords(['{"n":1}'], 100)).toEqual([false]);
    expect(await store.appendDecisionRecords(['{"n":1}', '{"n":2}'], 100)).toEqual([false, false]);
    await rawClient(url).del(stream);
    expect(await store.appendDecisionRecords(['{"n":1}', '{"n":2}'], 100)).toEqual([true, true]);
    expect((await store.readDecisionRecords(10)).map((decision) => decision.json)).toEqual(['{"n":2}', '{"n":1}']);
  });

  it('an entry without the record field (written by something else) is skipped, not thrown, and the read goes on past it', async () => {
    const { url, keyPrefix, store } = await storeOnOwnPrefix('decisions-foreign');
    const stream = keyLayout(keyPrefix).decisionStream;
    await store.appendDecisionRecords(['{"n":1}'], 100);
    await rawClient(url).xadd(stream, '*', 'other', 'x');
    await store.appendDecisionRecords(['{"n":3}'], 100);
    const read = await store.readDecisionRecords(10);
    expect(read.map((decision) => decision.json)).toEqual(['{"n":3}', '{"n":1}']);
    expect(await store.readDecisionRecords(10, read[0]!.id)).toEqual([read[1]]);
  });

  it('a whole page of foreign entries does not end the walk: a preview reads the records older than them too', async () => {
    const { url, keyPrefix, store } = await storeOnOwnPrefix('decisions-foreign-page');
    const stream = keyLayout(keyPrefix).decisionStream;
    await store.appendDecisionRecords(['{"n":1}', '{"n":2}'], 100);
    const raw = rawClient(url);
    for (let i = 0; i < 25; i++) await raw.xadd(stream, '*', 'other', String(i));
    await store.appendDecisionRecords(['{"n":3}'], 100);
    const pages: string[][] = [];
    for await (const page of decisionPages(store, 100, 10)) pages.push(page.map((decision) => decision.json));
    expect(pages).toEqual([['{"n":3}'], ['{"n":2}', '{"n":1}']]);
  });
});
