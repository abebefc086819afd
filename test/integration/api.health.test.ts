// /healthz and /readyz, on a real server: liveness never depends on Redis, so an
// orchestrator does not restart every instance during a Redis outage; readiness says what is wrong,
// in the error body every other refusal uses, so traffic goes elsewhere until it is fixed.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startAgentgate, WITH_SERVERS_TIMEOUT_MS } from '../support/agentgate-process.ts';
import { http } from '../support/client.ts';
import { startThrowawayRedis, type ThrowawayRedis } from '../support/redis.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

describe('health (memory store)', () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer({ store: 'memory' });
  });
  afterAll(() => server.close());

  it('GET /healthz: 200 with the policy this instance enforces', async () => {
    const res = await http('GET', `${server.baseUrl}/healthz`);
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ status: 'ok', policy: { sha256: expect.stringMatching(/^[0-9a-f]{64}$/), generation: 1 } });
    expect(res.headers.get('cache-control')).toBe('no-store');
  });

  it('GET /readyz: 200 with every check ok, naming the built-in operators', async () => {
    const res = await http('GET', `${server.baseUrl}/readyz`);
    expect(res.status).toBe(200);
    expect(res.json.status).toBe('ready');
    expect(res.json.checks.store).toEqual({ ok: true, kind: 'memory' });
    expect(res.json.checks.policy).toMatchObject({ ok: true, generation: 1 });
    expect(res.json.checks.operators.ok).toBe(true);
    expect(res.json.checks.operators.builtin).toEqual(expect.arrayContaining(['eq', 'max', 'min', 'in', 'not_in']));
  });
});

describe('health while Redis is frozen', () => {
  let redis: ThrowawayRedis;
  let server: TestServer;
  beforeAll(async () => {
    redis = await startThrowawayRedis();
    server = await startTestServer({ store: 'redis', redisUrl: redis.url, env: { REDIS_COMMAND_TIMEOUT_MS: '500' } });
  });
  afterAll(async () => {
    redis.process.kill('SIGCONT');
    await server.close();
    await redis.stop();
  });

  it('readiness fails with 503 naming the store, liveness stays 200, and readiness comes back with Redis', async () => {
    expect((await http('GET', `${server.baseUrl}/readyz`)).status).toBe(200);
    redis.process.kill('SIGSTOP');
    try {
      const ready = await http('GET', `${server.baseUrl}/readyz`);
      expect(ready.status).toBe(503);
      expect(ready.json).toMatchObject({ error: 'service_unavailable', status: 'not_ready', checks: { store: { ok: false, kind: 'redis' } } });
      expect(ready.json.message).toMatch(/^not ready: the redis store cannot be reached/);
      expect((await http('GET', `${server.baseUrl}/healthz`)).status).toBe(200);
    } finally {
      redis.process.kill('SIGCONT');
    }
    await expect.poll(async () => (await http('GET', `${server.baseUrl}/readyz`)).status, { timeout: 5000 }).toBe(200);
  });
});

describe('the start-up line', () => {
  it('src/main.ts says in one line which store, policy, operators, approval methods, sign-in and admin API state are in force', async () => {
    const server = await startAgentgate({ env: { ADMIN_TOKEN: '' } });
    try {
      expect(server.startup).toMatchObject({
        port: server.port,
        store: 'memory (nothing survives a restart)',
        policy: { sha256: expect.stringMatching(/^[0-9a-f]{64}$/) },
        operators: { builtin: expect.arrayContaining(['eq']), plugins: expect.any(Array) },
        approvalMethods: ['device_authorization'],
        signIn: [],
        adminApi: 'off (ADMIN_TOKEN is not set)',
      });
    } finally {
      await server.stop();
    }
  }, WITH_SERVERS_TIMEOUT_MS);
});
