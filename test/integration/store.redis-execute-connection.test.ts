// The execute script's own connection (src/store/redis/script-connection.ts) against a real
// Redis: it answers as ioredis does, logs in and selects the database the URL names, and under
// the faults a hot path meets (a Redis that stops answering, a connection cut after the script
// ran, a store closing) it fails closed, as unavailable, and never hands one call another's reply.
// The store falls back to its command connection while this one is down.
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { RedisAuditRecords } from '../../src/store/redis/audit-records.ts';
import { RedisAgentRecords } from '../../src/store/redis/agent-records.ts';
import { describeRedisFailure, isRedisUnavailable } from '../../src/store/redis/connection.ts';
import { RedisDecisionRecords } from '../../src/store/redis/decision-records.ts';
import { keyLayout } from '../../src/store/redis/keys.ts';
import { redisParts } from '../../src/store/redis/parts.ts';
import { RedisReplyError } from '../../src/store/redis/resp-replies.ts';
import { ScriptConnection, ScriptConnectionError, scriptConnectionAddress } from '../../src/store/redis/script-connection.ts';
import { SCRIPTS } from '../../src/store/redis/scripts.ts';
import { createRedisStore } from '../../src/store/redis/redis-store.ts';
import { activeAgentSnapshot } from '../support/agent-snapshot.ts';
import { runsScript, startFaultProxy, type FaultProxy } from '../support/redis-faults.ts';
import { deletePrefix, redisUrlForTests, startThrowawayRedis, uniquePrefix } from '../support/redis.ts';

/** Echoes its key and argument back with a count, so every reply says which call it answers. */
const ECHO = {
  numberOfKeys: 1,
  lua: "local n = redis.call('INCR', KEYS[1]) return {KEYS[1], ARGV[1], n, false, {ARGV[2] or 'none', -7}}",
};
const FAILS = { numberOfKeys: 0, lua: "return redis.error_reply('ERR agentgate test failure')" };

let url: string;
const prefix = uniquePrefix('script-connection');
const opened: Array<{ close(): unknown }> = [];

function open(target: string, options: { script?: { lua: string; numberOfKeys: number }; commandTimeoutMs?: number; errors?: Error[] } = {}): ScriptConnection {
  const address = scriptConnectionAddress(new Redis(target, { lazyConnect: true }).options);
  if (address === null) throw new Error(`no address in ${target}`);
  const connection = new ScriptConnection(address, {
    script: options.script ?? ECHO,
    // Generous, so that a machine busy with other test files never makes a healthy call time out.
    connectTimeoutMs: 5000,
    commandTimeoutMs: options.commandTimeoutMs ?? 5000,
    // Reconnects come quickly here, so a test waits on the connection, not on the back-off.
    reconnectDelayMs: () => 20,
    onConnectionError: (error) => options.errors?.push(error),
  });
  opened.push({ close: () => connection.close(100) });
  return connection;
}

async function openReady(target: string, options: Parameters<typeof open>[1] = {}): Promise<ScriptConnection> {
  const connection = open(target, options);
  await connection.firstAttempt();
  expect(connection.ready).toBe(true);
  return connection;
}

beforeAll(async () => {
  url = await redisUrlForTests();
});
afterEach(async () => {
  await Promise.all(opened.splice(0).map((connection) => connection.close()));
});
afterAll(async () => {
  await deletePrefix(url, prefix);
});

describe('the execute script connection answers as ioredis does', () => {
  it('gives the same values for the same script: strings, numbers, nil and nested arrays', async () => {
    const connection = await openReady(url);
    const ioredis = new Redis(url);
    opened.push({ close: () => ioredis.disconnect() });
    const key = `${prefix}echo-${randomUUID()}`;
    const text = 'é€😀 "quoted" \r\n line';
    const ours = await connection.run([key, text, 'second']);
    const theirs = await ioredis.eval(ECHO.lua, 1, key, text, 'second');
    expect(ours).toEqual([key, text, 1, null, ['second', -7]]);
    expect(theirs).toEqual([key, text, 2, null, ['second', -7]]);
  });

  it('rejects an error reply with Redis\'s message, which the store does not count as an outage', async () => {
    const connection = await openReady(url, { script: FAILS });
    const error = await connection.run([]).then(() => null, (err: unknown) => err);
    expect(error).toBeInstanceOf(RedisReplyError);
    expect((error as Error).message).toMatch(/^ERR agentgate test failure/);
    expect(isRedisUnavailable(error)).toBe(false);
    expect(connection.ready).toBe(true);
  });

  it('many calls written together each get their own reply, in order', async () => {
    const connection = await openReady(url);
    const key = `${prefix}order-${randomUUID()}`;
    const replies = await Promise.all(Array.from({ length: 500 }, (_, i) => connection.run([key, `call-${i}`])));
    replies.forEach((reply, i) => expect((reply as unknown[])[1]).toBe(`call-${i}`));
  });
});

describe('the execute script connection logs in as the URL says', () => {
  let redis: Awaited<ReturnType<typeof startThrowawayRedis>>;
  beforeAll(async () => {
    redis = await startThrowawayRedis([], { password: 'p@ss word' });
  });
  afterAll(async () => {
    await redis?.stop();
  });

  it('authenticates and selects the URL\'s database', async () => {
    const inDatabase3 = `${redis.url}/3`;
    const connection = await openReady(inDatabase3);
    await connection.run(['db-check', 'x']);
    const reader = new Redis(inDatabase3);
    opened.push({ close: () => reader.disconnect() });
    expect(await reader.get('db-check')).toBe('1');
    expect(await reader.select(0).then(() => reader.exists('db-check'))).toBe(0);
  });

  it('a wrong password: never ready, the refusal reported, calls refused as unavailable', async () => {
    const errors: Error[] = [];
    const connection = open(redis.url.replace('p%40ss%20word', 'wrong'), { errors });
    await connection.firstAttempt();
    expect(connection.ready).toBe(false);
    expect(errors[0]?.message).toMatch(/WRONGPASS|invalid username-password/);
    // Named as the command connection's refusal is, so the log says to check the credentials.
    expect(describeRedisFailure(errors[0]).code).toBe('WRONGPASS');
    const refused = await connection.run(['k', 'v']).then(() => null, (err: unknown) => err);
    expect(refused).toBeInstanceOf(ScriptConnectionError);
    expect(isRedisUnavailable(refused)).toBe(true);
  });
});

describe('the execute script connection under faults fails closed', () => {
  let proxy: FaultProxy;
  beforeAll(async () => {
    proxy = await startFaultProxy(url);
  });
  afterEach(() => {
    proxy.disarm();
    proxy.restore();
  });
  afterAll(async () => {
    await proxy?.close();
  });

  it('a Redis that stops answering: the call fails as a timeout, and the connection is replaced', async () => {
    const connection = await openReady(proxy.url, { commandTimeoutMs: 1500 });
    const key = `${prefix}frozen-${randomUUID()}`;
    expect(((await connection.run([key, 'before'])) as unknown[]).slice(0, 3)).toEqual([key, 'before', 1]);
    proxy.freezeNow();
    const frozen = await connection.run([key, 'frozen']).then(() => null, (err: unknown) => err);
    expect(frozen).toBeInstanceOf(ScriptConnectionError);
    expect((frozen as Error).message).toMatch(/^Command timed out/);
    expect(isRedisUnavailable(frozen)).toBe(true);
    proxy.restore();
    await expect.poll(() => connection.ready, { timeout: 5000 }).toBe(true);
    const after = (await connection.run([key, 'after'])) as unknown[];
    expect(after[1]).toBe('after');
  });

  it('an answer that comes late is never taken for a later call\'s: every call behind the late one fails with it', async () => {
    // A script that keeps Redis busy past the command timeout: its answer does come, late, on the same
    // socket. On a Redis of its own, so that no other test waits behind it.
    const redis = await startThrowawayRedis();
    opened.push({ close: () => redis.stop() });
    const slow = { numberOfKeys: 1, lua: "local t0 = redis.call('TIME') repeat local t = redis.call('TIME') until (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) > tonumber(ARGV[2]) return ARGV[1]" };
    const connection = await openReady(redis.url, { script: slow, commandTimeoutMs: 1500 });
    const key = `${prefix}late-${randomUUID()}`;
    expect(await connection.run([key, 'warm', '0'])).toBe('warm');
    const late = connection.run([key, 'late', '4000000']);
    const behind = connection.run([key, 'behind', '0']);
    const [lateOutcome, behindOutcome] = await Promise.allSettled([late, behind]);
    expect(lateOutcome.status).toBe('rejected');
    expect(behindOutcome).toMatchObject({ status: 'rejected', reason: expect.any(ScriptConnectionError) });
    // Once Redis is free the connection is back, and each call gets its own answer.
    await expect.poll(() => connection.ready, { timeout: 10_000 }).toBe(true);
    expect(await connection.run([key, 'after', '0'])).toBe('after');
  });

  it('a connection cut after the script ran: the call fails as unavailable and is not sent again', async () => {
    const connection = await openReady(proxy.url);
    const key = `${prefix}cut-${randomUUID()}`;
    // Loads the script, so the call below runs at its first send (no NOSCRIPT round first).
    await connection.run([`${key}-load`, 'load']);
    proxy.record();
    const fired = proxy.arm('cut-after', (command) => command.name === 'EVALSHA' || command.name === 'EVAL');
    const cut = await connection.run([key, 'once']).then(() => null, (err: unknown) => err);
    await fired;
    expect(cut).toBeInstanceOf(ScriptConnectionError);
    expect(isRedisUnavailable(cut)).toBe(true);
    proxy.restore();
    await expect.poll(() => connection.ready, { timeout: 5000 }).toBe(true);
    // The script ran once (the count is 1), and nothing sent it again after the cut.
    expect(((await connection.run([key, 'next'])) as unknown[]).slice(0, 3)).toEqual([key, 'next', 2]);
    expect(proxy.commands.filter((command) => command.args.includes('once'))).toHaveLength(1);
  });

  it('close() lets calls already sent answer, then refuses new ones and does not reconnect', async () => {
    const connection = await openReady(url);
    const key = `${prefix}close-${randomUUID()}`;
    const sent = connection.run([key, 'in flight']);
    const closing = connection.close(2000);
    expect(connection.ready).toBe(false);
    expect(((await sent) as unknown[]).slice(0, 3)).toEqual([key, 'in flight', 1]);
    await closing;
    const refused = await connection.run([key, 'late']).then(() => null, (err: unknown) => err);
    expect(refused).toBeInstanceOf(ScriptConnectionError);
  });
});

describe('the store and its execute script connection', () => {
  it('createRedisStore opens one for a single Redis by a plain URL, ready once the store is', async () => {
    const store = await createRedisStore({ url, keyPrefix: prefix });
    try {
      expect(store.executeConnectionReady).toBe(true);
    } finally {
      await store.close();
    }
    expect(store.executeConnectionReady).toBe(false);
  });

  it('executeRoundTrip goes on it when it is ready, and on the command connection while it is down, with the same answer', async () => {
    const keys = keyLayout(prefix);
    const ioredis = new Redis(url);
    for (const [name, script] of Object.entries(SCRIPTS)) ioredis.defineCommand(name, script);
    opened.push({ close: () => ioredis.disconnect() });
    const connection = await openReady(url, { script: SCRIPTS.agentgateExecute });
    const calls: string[] = [];
    const counted = { get ready() { return connection.ready; }, run: (args: readonly string[]) => (calls.push('own'), connection.run(args)) } as unknown as ScriptConnection;
    const parts = redisParts(ioredis, keys, counted);
    const agents = new RedisAgentRecords(parts, new RedisAuditRecords(parts), new RedisDecisionRecords(parts, { url }));
    const snapshot = activeAgentSnapshot('hst_1');
    await agents.createAgent(snapshot);
    const request = () => ({ agentId: snapshot.agent.id, keyVersion: 1, jti: randomUUID(), jtiTtlMs: 60_000, capabilities: ['echo'], nowMs: Date.now(), sessionTtlMs: 60_000 });

    expect((await agents.executeRoundTrip(request())).kind).toBe('ok');
    expect(calls).toEqual(['own']);
    await connection.close(100);
    // Down: the command connection carries the script, and the answer is the same.
    expect((await agents.executeRoundTrip(request())).kind).toBe('ok');
    expect(calls).toEqual(['own']);
  });

  it('a URL with options ioredis reads (here the database) gets one in the same database', async () => {
    // On a Redis of its own: the agent is written to database 5 there and goes with it.
    const redis = await startThrowawayRedis();
    opened.push({ close: () => redis.stop() });
    const store = await createRedisStore({ url: `${redis.url}?db=5`, keyPrefix: prefix });
    try {
      expect(store.executeConnectionReady).toBe(true);
      // The agent is written on the command connection; the script finds it only in the same database.
      const snapshot = activeAgentSnapshot('hst_2');
      await store.createAgent(snapshot);
      const result = await store.executeRoundTrip({ agentId: snapshot.agent.id, keyVersion: 1, jti: randomUUID(), jtiTtlMs: 60_000, capabilities: ['echo'], nowMs: Date.now(), sessionTtlMs: 60_000 });
      expect(result.kind).toBe('ok');
    } finally {
      await store.close();
    }
  });

  it('a script call cut after Redis ran it is 503 for the caller and is not sent again on the command connection', async () => {
    const proxy = await startFaultProxy(url);
    opened.push({ close: () => proxy.close() });
    const store = await createRedisStore({ url: proxy.url, keyPrefix: prefix });
    opened.push({ close: () => store.close() });
    expect(store.executeConnectionReady).toBe(true);
    const snapshot = activeAgentSnapshot('hst_3');
    await store.createAgent(snapshot);
    const request = () => ({ agentId: snapshot.agent.id, keyVersion: 1, jti: randomUUID(), jtiTtlMs: 60_000, capabilities: ['echo'], nowMs: Date.now(), sessionTtlMs: 60_000 });
    expect((await store.executeRoundTrip(request())).kind).toBe('ok');
    proxy.record();
    const fired = proxy.arm('cut-after', runsScript('agentgateExecute'));
    const failed = await store.executeRoundTrip(request()).then(() => null, (err: unknown) => err);
    await fired;
    expect(isRedisUnavailable(failed)).toBe(true);
    proxy.restore();
    await expect.poll(() => store.executeConnectionReady, { timeout: 5000 }).toBe(true);
    expect((await store.executeRoundTrip(request())).kind).toBe('ok');
    expect(proxy.commands.filter(runsScript('agentgateExecute'))).toHaveLength(2);
  });
});
