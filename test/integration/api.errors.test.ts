// Error answers that tell the truth. A lost race is a 4xx that changed
// nothing; 503 means the store is unreachable and nothing else; a bug or a corrupt record is a 500
// with a request id; contention retries to success or answers 409; refusals keep their reasons.
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { transitionAgent } from '../../src/services/transitions.ts';
import type { Store } from '../../src/store/store.ts';
import { Client, code, http } from '../support/client.ts';
import { newEd25519 } from '../support/keys.ts';
import { redisUrlForTests } from '../support/redis.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

describe('errors that tell the truth (redis store)', () => {
  let server: TestServer;
  let c: Client;
  let redis: Redis;

  beforeAll(async () => {
    server = await startTestServer({ store: 'redis' });
    c = new Client(server);
    redis = new Redis(await redisUrlForTests());
  });
  afterAll(async () => {
    redis.disconnect();
    await server.close();
  });

  it('two agents rotating onto one key: one wins, the loser is 409 agent_exists and keeps its own key', async () => {
    for (let round = 0; round < 15; round++) {
      const host = await c.linkedHost(['echo']);
      const a = (await c.register(host, { mode: 'delegated', capabilities: ['echo'] })).agent!;
      const b = (await c.register(host, { mode: 'delegated', capabilities: ['echo'] })).agent!;
      const key = await newEd25519();
      const [ra, rb] = await Promise.all([
        c.hostPost('/agent/rotate-key', host, { agent_id: a.id, public_key: key.publicJwk }),
        c.hostPost('/agent/rotate-key', host, { agent_id: b.id, public_key: key.publicJwk }),
      ]);
      expect([ra.status, rb.status].sort(), `round ${round}: ${ra.text} ${rb.text}`).toEqual([200, 409]);
      const [winner, loser] = ra.status === 200 ? [a, b] : [b, a];
      const loserResponse = ra.status === 200 ? rb : ra;
      expect(loserResponse.json.error).toBe('agent_exists');
      const stored = (await server.store.getAgent(loser.id))!.agent;
      expect(stored.keyVersion).toBe(1);
      expect(stored.publicJwk).toEqual(loser.key.publicJwk);
      expect((await c.execute(loser, 'echo', {})).status).toBe(200);
      const hostId = stored.hostId;
      expect(await server.store.findAgentIdByKey(hostId, key.thumbprint)).toBe(winner.id);
    }
  });

  it('a corrupt stored record is a 500 internal_error naming a request id, not a 503', async () => {
    const agent = await c.activeAgent(['echo']);
    await redis.hset(`${server.config.REDIS_KEY_PREFIX}{${agent.id}}`, 'mode', 'not-a-mode');
    const res = await c.status(agent.host, agent.id);
    expect(code(res)).toBe('500 internal_error');
    expect(res.json.message).toMatch(/request id \S+/);
  });

  it('concurrent changes to one agent retry to success instead of answering 503', async () => {
    const agent = await c.activeAgent(['echo', 'weather_lookup', 'transfer_money']);
    const calls = Array.from({ length: 12 }, async (_, i) => {
      const token = await c.agentToken(agent);
      const capability = ['echo', 'weather_lookup', 'transfer_money'][i % 3]!;
      return http('POST', c.url('/agent/revoke-capability'), { token, json: { capabilities: [capability] } });
    });
    const statuses = (await Promise.all(calls)).map((r) => r.status);
    expect(statuses.filter((s) => s !== 200 && s !== 409)).toEqual([]);
    expect(statuses.filter((s) => s === 200).length).toBeGreaterThan(0);
  });

  it("a blocked capability's refusal carries the policy's reason", async () => {
    const agent = await c.activeAgent(['echo']);
    const res = await c.requestCapability(agent, { capabilities: ['purge_all_data'] });
    expect(code(res)).toBe('400 invalid_capabilities');
    expect(res.json.message).toMatch(/purge_all_data \(blocked by policy\)/);
    expect(res.json.invalid_capabilities).toEqual(['purge_all_data']);
  });
});

describe('contention', () => {
  it('a transition that keeps losing answers 409 conflict (retry), not 503', async () => {
    const snapshot = {
      agent: { id: 'agt_x', version: 1 },
      grants: [],
      sessionExpiresAtMs: null,
    };
    const racing = {
      getAgent: async () => snapshot,
      casAgent: async () => ({ ok: false as const, reason: 'conflict' as const, snapshot }),
    } as unknown as Store;
    await expect(transitionAgent(racing, 'agt_x', () => ({ set: { updatedAtMs: 1 } }))).rejects.toMatchObject({ code: 'conflict', status: 409 });
  });
});
