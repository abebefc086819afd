// Recorded policy decisions cost execute's round trip no command of its own on a single Redis:
// measured on the wire as execute.round-trips.test.ts measures it (test/support/redis-proxy.ts counts
// every command and round trip of the store's connections), a round trip carrying decision records
// and audit events is still the one execute script, with the decision stream as its ninth key and
// the records among its arguments (src/store/redis/scripts.ts EXECUTE_ROUND_TRIP). Asked of the
// store itself: which decisions an execute records is the recorder's business, not this test's.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AgentSnapshot } from '../../src/domain/types.ts';
import { keyLayout } from '../../src/store/redis/keys.ts';
import { createRedisStore, type RedisStore } from '../../src/store/redis/redis-store.ts';
import type { ExecuteRoundTrip } from '../../src/store/store.ts';
import { executeScriptArgs, executeScriptDecisions, executeScriptEvents, measureWire, scriptKeys, startRedisProxy, type RedisProxy } from '../support/redis-proxy.ts';
import { deletePrefix, redisUrlForTests, uniquePrefix } from '../support/redis.ts';
import { activeAgentSnapshot } from '../support/agent-snapshot.ts';

let proxy: RedisProxy;
let store: RedisStore;
let url: string;
const keyPrefix = uniquePrefix('decision-round-trips');
const keys = keyLayout(keyPrefix);

beforeAll(async () => {
  url = await redisUrlForTests();
  proxy = await startRedisProxy(url);
  store = await createRedisStore({ url: proxy.url, keyPrefix });
});
afterAll(async () => {
  await store?.close();
  await proxy?.close();
  await deletePrefix(url, keyPrefix);
});

const agentSnapshot = activeAgentSnapshot;

const roundTrip = (snapshot: AgentSnapshot, extra: Partial<ExecuteRoundTrip> = {}): ExecuteRoundTrip => ({
  agentId: snapshot.agent.id, keyVersion: 1, jti: randomUUID(), jtiTtlMs: 60_000, capabilities: ['echo'], nowMs: Date.now(), sessionTtlMs: 60_000, ...extra,
});

describe('Redis round trips of execute carrying decision records', () => {
  it('decision records and audit events ride in the one execute script: the decision stream its ninth key, the records its arguments', async () => {
    const snapshot = agentSnapshot();
    expect((await store.createAgent(snapshot)).created).toBe(true);
    // The first call may load the script into Redis (NOSCRIPT, then EVAL).
    expect((await store.executeRoundTrip(roundTrip(snapshot))).kind).toBe('ok');

    const marker = randomUUID();
    const records = [JSON.stringify({ marker, n: 1 }), JSON.stringify({ marker, n: 2 })];
    const event = { at: new Date().toISOString(), type: 'execute.allowed', actor: 'agent' as const, marker };
    const request = roundTrip(snapshot, { decisions: { records, maxRecords: 1000 }, audit: { records: [event], maxEvents: 1000 } });
    const { res, commands, roundTrips } = await measureWire(proxy, () => store.executeRoundTrip(request));
    expect(res).toMatchObject({ kind: 'ok', auditWritten: [true], decisionsWritten: [true, true] });
    expect(roundTrips).toEqual([1]);
    expect(commands.map((command) => command.name)).toEqual(['EVALSHA']);
    const script = commands[0]!;
    const scriptKeyList = scriptKeys(script);
    expect(scriptKeyList).toHaveLength(9);
    expect(scriptKeyList[0]).toBe(keys.agent(snapshot.agent.id));
    expect(scriptKeyList[7]).toBe(keys.auditStream);
    expect(scriptKeyList[8]).toBe(keys.decisionStream);
    expect(executeScriptArgs(script)[9]).toBe('1000');
    expect(executeScriptDecisions(script)).toEqual(records);
    expect(executeScriptEvents(script)).toEqual([JSON.stringify(event)]);
    // The capability names still come last, after the records.
    expect(executeScriptArgs(script).at(-1)).toBe('echo');

    const stored = await store.readDecisionRecords(10);
    expect(stored.map((decision) => decision.json).slice(0, 2)).toEqual([...records].reverse());
    expect((await store.readAuditEvents(null, 1))[0]).toMatchObject({ marker });
  });

  it('a round trip carrying no records names the agent\'s key in the stream\'s place and passes none', async () => {
    const snapshot = agentSnapshot();
    expect((await store.createAgent(snapshot)).created).toBe(true);
    expect((await store.executeRoundTrip(roundTrip(snapshot))).kind).toBe('ok');
    const { res, commands, roundTrips } = await measureWire(proxy, () => store.executeRoundTrip(roundTrip(snapshot)));
    expect(res).toMatchObject({ kind: 'ok', auditWritten: [], decisionsWritten: [] });
    expect(roundTrips).toEqual([1]);
    expect(commands).toHaveLength(1);
    const scriptKeyList = scriptKeys(commands[0]!);
    expect(scriptKeyList).toHaveLength(9);
    expect(scriptKeyList).not.toContain(keys.decisionStream);
    expect(scriptKeyList[8]).toBe(keys.agent(snapshot.agent.id));
    expect(executeScriptDecisions(commands[0]!)).toEqual([]);
  });

  it('an unknown agent still appends what the round trip carries, in the same one command', async () => {
    const marker = randomUUID();
    const records = [JSON.stringify({ marker, n: 1 })];
    const unknown = agentSnapshot();
    const { res, commands, roundTrips } = await measureWire(proxy, () => store.executeRoundTrip(roundTrip(unknown, { decisions: { records, maxRecords: 1000 } })));
    expect(res).toEqual({ kind: 'not_found', auditWritten: [], decisionsWritten: [true] });
    expect(roundTrips).toEqual([1]);
    expect(commands).toHaveLength(1);
    expect(scriptKeys(commands[0]!)[8]).toBe(keys.decisionStream);
    expect((await store.readDecisionRecords(1))[0]!.json).toBe(records[0]);
  });
});
