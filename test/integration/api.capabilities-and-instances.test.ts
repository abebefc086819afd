// Capability listing and describe in their three auth modes (protocol §4.1–§4.2), and two app
// instances on one Redis: shared rate limits, shared replay records, revocation seen everywhere.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, code, http } from '../support/client.ts';
import { uniquePrefix } from '../support/redis.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

describe('capability listing and describe', () => {
  let server: TestServer;
  let c: Client;
  beforeAll(async () => {
    server = await startTestServer();
    c = new Client(server);
  });
  afterAll(() => server.close());

  it('anonymous listing shows only public capabilities; a host sees them all', async () => {
    const anonymous = (await http('GET', c.url('/capability/list'))).json.capabilities.map((x: { name: string }) => x.name);
    expect(anonymous).toContain('echo');
    expect(anonymous).not.toContain('purge_all_data');
    const host = await c.linkedHost([]);
    const all = (await http('GET', c.url('/capability/list'), { token: await c.hostToken(host) })).json.capabilities.map((x: { name: string }) => x.name);
    expect(all).toContain('purge_all_data');
  });

  it('an agent sees grant_status on every entry', async () => {
    const agent = await c.activeAgent(['echo']);
    const list = (await http('GET', c.url('/capability/list'), { token: await c.agentToken(agent) })).json.capabilities as Array<{ name: string; grant_status: string }>;
    expect(list.every((x) => x.grant_status === (x.name === 'echo' ? 'granted' : 'not_granted'))).toBe(true);
    const described = await http('GET', c.url('/capability/describe?name=weather_lookup'), { token: await c.agentToken(agent) });
    expect(described.json).toMatchObject({ name: 'weather_lookup', grant_status: 'not_granted', input: { type: 'object' } });
  });

  it('cursor pagination walks the whole list once, and a forged cursor is refused', async () => {
    const names: string[] = [];
    let cursor: string | null = null;
    for (let page = 0; page < 10; page++) {
      const res = await http('GET', c.url(`/capability/list?limit=2${cursor ? `&cursor=${cursor}` : ''}`));
      names.push(...res.json.capabilities.map((x: { name: string }) => x.name));
      cursor = res.json.next_cursor;
      expect(res.json.has_more).toBe(cursor !== null);
      if (!cursor) break;
    }
    const everything = (await http('GET', c.url('/capability/list?limit=100'))).json.capabilities.map((x: { name: string }) => x.name);
    expect(names).toEqual(everything);
    expect(code(await http('GET', c.url('/capability/list?cursor=bm90LWEtbnVtYmVy')))).toBe('400 invalid_request');
  });

  it('query filters by name and description', async () => {
    const res = await http('GET', c.url('/capability/list?query=weather'));
    expect(res.json.capabilities.map((x: { name: string }) => x.name)).toEqual(['weather_lookup']);
  });
});

describe('two instances on one Redis', () => {
  let a: TestServer;
  let b: TestServer;
  let ca: Client;
  beforeAll(async () => {
    const env = { REDIS_KEY_PREFIX: uniquePrefix('shared'), RATE_LIMIT_AGENT_PER_MINUTE: '5' };
    a = await startTestServer({ store: 'redis', env });
    b = await startTestServer({ store: 'redis', env: { ...env, ISSUER: a.config.issuer } });
    ca = new Client(a);
  });
  afterAll(async () => {
    await b.close();
    await a.close();
  });

  it('a rate limit is shared, not doubled', async () => {
    const agent = await ca.activeAgent();
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) statuses.push((await ca.execute(agent, 'echo', {})).status);
    for (let i = 0; i < 2; i++) statuses.push((await http('POST', `${b.baseUrl}/capability/execute`, { token: await ca.agentToken(agent, { aud: a.config.executeUrl }), json: { capability: 'echo' } })).status);
    expect(statuses).toEqual([200, 200, 200, 200, 200]);
    const sixth = await http('POST', `${b.baseUrl}/capability/execute`, { token: await ca.agentToken(agent, { aud: a.config.executeUrl }), json: { capability: 'echo' } });
    expect(code(sixth)).toBe('429 rate_limited');
    expect(sixth.headers.get('retry-after')).toMatch(/^\d+$/);
  });

  it('a jti used on one instance is a replay on the other, and a revocation on one is seen by the other', async () => {
    const agent = await ca.activeAgent();
    const token = await ca.agentToken(agent, { aud: a.config.executeUrl });
    expect((await http('POST', a.config.executeUrl, { token, json: { capability: 'echo' } })).status).toBe(200);
    expect(code(await http('POST', `${b.baseUrl}/capability/execute`, { token, json: { capability: 'echo' } }))).toBe('401 invalid_jwt');
    // Warm B's key cache, then revoke and rotate on A: B must refuse at once.
    expect((await http('POST', `${b.baseUrl}/capability/execute`, { token: await ca.agentToken(agent, { aud: a.config.executeUrl }), json: { capability: 'echo' } })).status).toBe(200);
    expect((await ca.hostPost('/agent/revoke', agent.host, { agent_id: agent.id })).status).toBe(200);
    expect(code(await http('POST', `${b.baseUrl}/capability/execute`, { token: await ca.agentToken(agent, { aud: a.config.executeUrl }), json: { capability: 'echo' } }))).toBe('403 agent_revoked');
  });
});
