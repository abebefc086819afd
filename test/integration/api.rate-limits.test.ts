// Rate limits (protocol §11.5): each dimension trips on its own with 429 rate_limited and
// a Retry-After in whole seconds; two server processes on one Redis share a budget; a limiter
// that cannot reach Redis refuses (503) rather than letting requests through.
import { afterAll, describe, expect, it } from 'vitest';
import { startAgentgate, WITH_SERVERS_TIMEOUT_MS, type Agentgate } from '../support/agentgate-process.ts';
import { Client, code, http, type HttpResult } from '../support/client.ts';
import { hostJwt, newEd25519 } from '../support/keys.ts';
import { deletePrefix, redisUrlForTests, startThrowawayRedis, uniquePrefix } from '../support/redis.ts';
import { freePort } from '../support/net.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

function expectLimited(res: HttpResult) {
  expect(code(res)).toBe('429 rate_limited');
  expect(res.headers.get('retry-after')).toMatch(/^[1-9]\d*$/);
}

async function withServer(env: Record<string, string>, fn: (c: Client, s: TestServer) => Promise<void>, extra: Parameters<typeof startTestServer>[0] = {}) {
  const server = await startTestServer({ store: 'redis', env, ...extra });
  try {
    await fn(new Client(server), server);
  } finally {
    await server.close();
  }
}

describe('each dimension', () => {
  it('per host: executes of all its agents and its own calls share one budget', () =>
    withServer({ RATE_LIMIT_HOST_PER_MINUTE: '5' }, async (c) => {
      const first = await c.activeAgent();
      const { agent: second } = await c.register(first.host, { capabilities: ['echo'] });
      // The two registrations spent two of the host's five points.
      expect((await c.execute(first, 'echo', {})).status).toBe(200);
      expect((await c.execute(second!, 'echo', {})).status).toBe(200);
      expect((await c.execute(first, 'echo', {})).status).toBe(200);
      expectLimited(await c.execute(second!, 'echo', {}));
      const other = await c.activeAgent();
      expect((await c.execute(other, 'echo', {})).status).toBe(200);
    }));

  it("per host: its agents' other calls (request-capability) spend the host's budget too, so many agents cannot multiply what one may cost", () =>
    withServer({ RATE_LIMIT_HOST_PER_MINUTE: '5', RATE_LIMIT_AGENT_PER_MINUTE: '100' }, async (c) => {
      const first = await c.activeAgent();
      const { agent: second } = await c.register(first.host, { capabilities: ['echo'] });
      // Two registrations spent two of the host's five points; each request spends one more.
      expect((await c.requestCapability(first, { capabilities: ['weather_lookup'] })).status).toBe(200);
      expect((await c.requestCapability(second!, { capabilities: ['weather_lookup'] })).status).toBe(200);
      expect((await c.requestCapability(first, { capabilities: ['legacy_report'] })).status).toBe(200);
      expectLimited(await c.requestCapability(second!, { capabilities: ['legacy_report'] }));
    }));

  it('status polling has its own budget, which does not eat the host budget', () =>
    withServer({ RATE_LIMIT_STATUS_PER_MINUTE: '2', RATE_LIMIT_HOST_PER_MINUTE: '3' }, async (c) => {
      const agent = await c.activeAgent();
      expect((await c.status(agent.host, agent.id)).status).toBe(200);
      expect((await c.status(agent.host, agent.id)).status).toBe(200);
      expectLimited(await c.status(agent.host, agent.id));
      expect((await c.execute(agent, 'echo', {})).status).toBe(200);
    }));

  it('per client address on unauthenticated routes', () =>
    withServer({ RATE_LIMIT_IP_PER_MINUTE: '2' }, async (c) => {
      expect((await http('GET', c.url('/.well-known/agent-configuration'))).status).toBe(200);
      expect((await http('GET', c.url('/capability/list'))).status).toBe(200);
      expectLimited(await http('GET', c.url('/capability/describe?name=echo')));
    }));

  it('registrations from unknown hosts are strictly limited per address; known hosts are not', () =>
    withServer({ RATE_LIMIT_UNKNOWN_HOST_REGISTRATIONS_PER_HOUR: '2' }, async (c) => {
      expect((await c.register(await newEd25519(), {})).res.status).toBe(200);
      expect((await c.register(await newEd25519(), {})).res.status).toBe(200);
      expectLimited((await c.register(await newEd25519(), {})).res);
      const known = await c.linkedHost([]);
      expect((await c.register(known, {})).res.status).toBe(200);
    }));

  it('per capability, from the catalog, per agent', () =>
    withServer({}, async (c) => {
      const agent = await c.activeAgent(['transfer', 'echo']);
      expect((await c.execute(agent, 'transfer', {})).status).toBe(200);
      expect((await c.execute(agent, 'transfer', {})).status).toBe(200);
      expectLimited(await c.execute(agent, 'transfer', {}));
      expect((await c.execute(agent, 'echo', {})).status).toBe(200);
      const another = await c.activeAgent(['transfer']);
      expect((await c.execute(another, 'transfer', {})).status).toBe(200);
    }, {
      capabilities: [
        { name: 'echo', description: 'echo', handler: { type: 'echo' } },
        { name: 'transfer', description: 'high risk', rateLimit: { points: 2, durationSeconds: 3600 }, handler: { type: 'echo' } },
      ],
    }));
});

describe('what a budget is spent on', () => {
  const metered = {
    capabilities: [
      { name: 'echo', description: 'echo', handler: { type: 'echo' } },
      { name: 'transfer', description: 'high risk', rateLimit: { points: 2, durationSeconds: 3600 }, handler: { type: 'echo' } },
    ],
  };

  it('per agent: one agent\'s calls share its budget; another agent of the same host keeps its own', () =>
    withServer({ RATE_LIMIT_AGENT_PER_MINUTE: '2' }, async (c) => {
      const first = await c.activeAgent();
      const { agent: second } = await c.register(first.host, { capabilities: ['echo'] });
      expect((await c.execute(first, 'echo', {})).status).toBe(200);
      expect((await c.execute(first, 'echo', {})).status).toBe(200);
      expectLimited(await c.execute(first, 'echo', {}));
      expect((await c.execute(second!, 'echo', {})).status).toBe(200);
    }));

  it('a captured token replayed again and again does not drain the capability\'s own budget', () =>
    withServer({}, async (c) => {
      const agent = await c.activeAgent(['transfer']);
      const token = await c.agentToken(agent, { aud: c.executeUrl });
      expect((await c.execute(agent, 'transfer', {}, { token })).status).toBe(200);
      for (let i = 0; i < 3; i++) expect(code(await c.execute(agent, 'transfer', {}, { token }))).toBe('401 invalid_jwt');
      // The replays gave their points back: the second of two points is still there.
      expect((await c.execute(agent, 'transfer', {})).status).toBe(200);
      expectLimited(await c.execute(agent, 'transfer', {}));
    }, metered));

  it('a token restricted to other capabilities cannot spend a capability\'s own budget', () =>
    withServer({}, async (c) => {
      const agent = await c.activeAgent(['transfer', 'echo']);
      for (let i = 0; i < 3; i++) expect(code(await c.execute(agent, 'transfer', {}, { capabilities: ['echo'] }))).toBe('403 capability_not_granted');
      expect((await c.execute(agent, 'transfer', {})).status).toBe(200);
      expect((await c.execute(agent, 'transfer', {})).status).toBe(200);
      expectLimited(await c.execute(agent, 'transfer', {}));
    }, metered));

  it('a revoked agent over its budget is told it is revoked, not to retry later (lifecycle before budgets, DESIGN §2)', () =>
    withServer({ RATE_LIMIT_AGENT_PER_MINUTE: '1' }, async (c) => {
      const agent = await c.activeAgent();
      expect((await c.execute(agent, 'echo', {})).status).toBe(200);
      expectLimited(await c.execute(agent, 'echo', {}));
      expect((await c.hostPost('/agent/revoke', agent.host, { agent_id: agent.id })).status).toBe(200);
      expect(code(await c.execute(agent, 'echo', {}))).toBe('403 agent_revoked');
    }));
});

describe('fail closed', () => {
  it('a limiter whose Redis is gone refuses with 503 instead of letting requests through', async () => {
    // A Redis of its own (test/support/redis.ts waits until it answers PING), since this one is killed.
    const redis = await startThrowawayRedis();
    try {
      const server = await startTestServer({ store: 'redis', redisUrl: redis.url });
      const c = new Client(server);
      try {
        expect((await http('GET', c.url('/.well-known/agent-configuration'))).status).toBe(200);
        await redis.stop();
        const res = await http('GET', c.url('/.well-known/agent-configuration'));
        expect(code(res)).toBe('503 service_unavailable');
      } finally {
        // The Redis is gone, so the harness cannot delete the test's keys: nothing to clean.
        await server.close().catch(() => {});
      }
    } finally {
      await redis.stop();
    }
  });
});

describe('two server processes on one Redis', () => {
  const servers: Agentgate[] = [];
  const prefix = uniquePrefix('two-processes');
  afterAll(async () => {
    await Promise.all(servers.map((server) => server.stop('SIGKILL')));
    await deletePrefix(await redisUrlForTests(), prefix);
  });

  it('share the budget instead of doubling it', async () => {
    const redisUrl = await redisUrlForTests();
    const adminToken = 'two-processes-admin-token';
    const ports = [await freePort(), await freePort()];
    const issuer = `http://127.0.0.1:${ports[0]}`;
    const env = { ISSUER: issuer, REDIS_URL: redisUrl, REDIS_KEY_PREFIX: prefix, ADMIN_TOKEN: adminToken, RATE_LIMIT_AGENT_PER_MINUTE: '4' };
    // Both are stopped afterwards even when one of them failed to start.
    const settled = await Promise.allSettled(ports.map((port) => startAgentgate({ port, env })));
    servers.push(...settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : [])));
    for (const s of settled) if (s.status === 'rejected') throw s.reason;
    const host = await newEd25519();
    expect((await http('POST', `${issuer}/admin/hosts`, { token: adminToken, json: { public_key: host.publicJwk, default_capabilities: ['echo'], user_id: 'user-1' } })).status).toBe(201);
    const agentKey = await newEd25519();
    const reg = await http('POST', `${issuer}/agent/register`, { token: await hostJwt(host, issuer, { agentKey }), json: { name: 'shared', capabilities: ['echo'] } });
    expect(reg.json.status).toBe('active');
    const agent = { id: reg.json.agent_id as string, key: agentKey, host, registration: reg.json };
    const fakeServer = { baseUrl: issuer, config: { issuer, executeUrl: `${issuer}/capability/execute` }, clock: { nowMs: () => Date.now() } };
    const c = new Client(fakeServer as unknown as TestServer);
    const onPort = async (port: number) => http('POST', `http://127.0.0.1:${port}/capability/execute`, { token: await c.agentToken(agent, { aud: `${issuer}/capability/execute` }), json: { capability: 'echo' } });
    const statuses = [await onPort(ports[0]!), await onPort(ports[1]!), await onPort(ports[0]!), await onPort(ports[1]!)].map((r) => r.status);
    expect(statuses).toEqual([200, 200, 200, 200]);
    expectLimited(await onPort(ports[1]!));
    expectLimited(await onPort(ports[0]!));
  }, WITH_SERVERS_TIMEOUT_MS);
});
