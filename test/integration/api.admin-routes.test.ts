// The admin routes the command-line tool needs (docs/cli.md): revoke an agent, list what waits for
// a person, and read the active policy and operator set. Each is guarded by ADMIN_TOKEN like the
// rest of the admin API; both stores, since the approvals list reads the store's pending indexes.
import { expect, it } from 'vitest';
import { Client, code, http } from '../support/client.ts';
import { newEd25519 } from '../support/keys.ts';
import { forEachStore, testServerForBlock } from '../support/server.ts';

const USER_CODE = /^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/;
const ISO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

forEachStore('admin routes for the CLI', (storeKind) => {
  const server = testServerForBlock({ store: storeKind });
  const c = new Client(server);

  const waiting = async (): Promise<Array<Record<string, any>>> => {
    const res = await c.admin('GET', '/admin/approvals');
    expect(res.status).toBe(200);
    return res.json.approvals;
  };

  it('every new route answers 401 without a token and 403 with a wrong one', async () => {
    const routes: Array<[string, string]> = [
      ['POST', '/admin/agents/agt_anything/revoke'],
      ['GET', '/admin/approvals'],
      ['GET', '/admin/policy'],
      ['GET', '/admin/operators'],
    ];
    for (const [method, path] of routes) {
      expect(code(await http(method, `${server.baseUrl}${path}`)), `${method} ${path}`).toBe('401 authentication_required');
      expect(code(await http(method, `${server.baseUrl}${path}`, { token: 'wrong-token-of-some-length' })), `${method} ${path}`).toBe('403 unauthorized');
    }
  });

  it('POST /admin/agents/:id/revoke revokes the agent and its grants, idempotently; an unknown id is 404', async () => {
    const agent = await c.activeAgent(['echo']);
    expect((await c.execute(agent, 'echo', {})).status).toBe(200);
    const revoked = await c.admin('POST', `/admin/agents/${agent.id}/revoke`);
    expect(revoked.status).toBe(200);
    expect(revoked.json).toMatchObject({ agent_id: agent.id, host_id: expect.any(String), status: 'revoked' });
    expect(revoked.json.agent_capability_grants.map((g: { status: string }) => g.status)).toEqual(['revoked']);
    // The key is forgotten at once: the very next call is refused, not served from a cache.
    expect(code(await c.execute(agent, 'echo', {}))).toBe('403 agent_revoked');
    expect((await c.admin('POST', `/admin/agents/${agent.id}/revoke`)).json.status).toBe('revoked');
    expect(code(await c.admin('POST', '/admin/agents/agt_no_such_agent/revoke'))).toBe('404 agent_not_found');
    expect(code(await c.admin('POST', `/admin/agents/${'a'.repeat(129)}/revoke`))).toBe('400 invalid_request');
  });

  it('revoking a pending agent takes it off the approvals list and frees its host', async () => {
    const { agent } = await c.register(await newEd25519(), { mode: 'delegated', capabilities: ['echo'] });
    expect((await waiting()).map((w) => w.agent_id)).toContain(agent!.id);
    expect((await c.admin('POST', `/admin/agents/${agent!.id}/revoke`)).json.status).toBe('revoked');
    expect((await waiting()).map((w) => w.agent_id)).not.toContain(agent!.id);
  });

  it('GET /admin/approvals lists a pending registration with its code, expiry and requested capabilities', async () => {
    const { agent } = await c.register(await newEd25519(), { name: 'waits-for-alice', mode: 'delegated', capabilities: ['echo', 'weather_lookup'] });
    const item = (await waiting()).find((w) => w.agent_id === agent!.id);
    expect(item).toMatchObject({
      agent_id: agent!.id,
      host_id: agent!.registration.host_id,
      name: 'waits-for-alice',
      mode: 'delegated',
      status: 'pending',
      registration: true,
      user_code: agent!.registration.approval.user_code,
      verification_uri_complete: agent!.registration.approval.verification_uri_complete,
    });
    expect(item!.user_code).toMatch(USER_CODE);
    expect(item!.expires_at).toMatch(ISO_TIME);
    expect(item!.approval_id).toEqual(expect.any(String));
    expect(item!.capabilities.map((g: { capability: string }) => g.capability).sort()).toEqual(['echo', 'weather_lookup']);
    expect(item!.capabilities.every((g: { grant_id: string }) => typeof g.grant_id === 'string')).toBe(true);
    // Decided: no longer waiting.
    await c.admin('POST', `/admin/agents/${agent!.id}/approve`, { user_id: 'admin:alice' });
    expect((await waiting()).map((w) => w.agent_id)).not.toContain(agent!.id);
  });

  it('GET /admin/approvals lists an active agent only while an open approval has grants to decide', async () => {
    const host = await c.linkedHost(['echo']);
    const { agent } = await c.register(host, { capabilities: ['echo'] });
    expect(agent!.registration.status).toBe('active');
    expect((await waiting()).map((w) => w.agent_id)).not.toContain(agent!.id);
    const asked = await c.requestCapability(agent!, { capabilities: ['transfer_money'] });
    expect(asked.json.status).toBe('pending');
    const item = (await waiting()).find((w) => w.agent_id === agent!.id);
    expect(item).toMatchObject({ status: 'active', registration: false, user_code: asked.json.approval.user_code });
    expect(item!.capabilities.map((g: { capability: string }) => g.capability)).toEqual(['transfer_money']);
    await c.admin('POST', `/admin/agents/${agent!.id}/deny`, { user_id: 'admin:alice' });
    expect((await waiting()).map((w) => w.agent_id)).not.toContain(agent!.id);
  });

  it('a pending agent whose approval lapsed is still listed, without a code that would decide nothing', async () => {
    const { agent } = await c.register(await newEd25519(), { mode: 'delegated', capabilities: ['echo'] });
    server.clock.advance((server.config.APPROVAL_EXPIRES_IN_SECONDS + 1) * 1000);
    try {
      const item = (await waiting()).find((w) => w.agent_id === agent!.id);
      expect(item).toMatchObject({ status: 'pending', registration: true });
      expect(item!.user_code).toBeUndefined();
      expect(Date.parse(item!.expires_at)).toBeLessThan(server.clock.nowMs());
    } finally {
      server.clock.advance(-(server.config.APPROVAL_EXPIRES_IN_SECONDS + 1) * 1000);
    }
  });

  it('GET /admin/approvals bounds its list (limit 1..500) and says when it was cut', async () => {
    await c.register(await newEd25519(), { mode: 'delegated', capabilities: ['echo'] });
    await c.register(await newEd25519(), { mode: 'delegated', capabilities: ['echo'] });
    const one = await c.admin('GET', '/admin/approvals?limit=1');
    expect(one.status).toBe(200);
    expect(one.json.approvals).toHaveLength(1);
    expect(one.json.truncated).toBe(true);
    expect((await c.admin('GET', '/admin/approvals')).json.truncated).toBe(false);
    expect(code(await c.admin('GET', '/admin/approvals?limit=0'))).toBe('400 invalid_request');
    expect(code(await c.admin('GET', '/admin/approvals?limit=501'))).toBe('400 invalid_request');
    expect(code(await c.admin('GET', '/admin/approvals?limit=ten'))).toBe('400 invalid_request');
  });

  it('GET /admin/policy names the active artefact; a reload moves its generation', async () => {
    const before = await c.admin('GET', '/admin/policy');
    expect(before.status).toBe(200);
    expect(before.json).toEqual({ sha256: expect.stringMatching(/^[0-9a-f]{64}$/), generation: expect.any(Number), loaded_at: expect.stringMatching(ISO_TIME) });
    const health = await http('GET', `${server.baseUrl}/healthz`);
    expect(health.json.policy).toEqual(before.json);
    const reloaded = await c.admin('POST', '/admin/policy/reload');
    expect(reloaded.status).toBe(200);
    const after = await c.admin('GET', '/admin/policy');
    expect(after.json).toMatchObject({ sha256: reloaded.json.sha256, generation: reloaded.json.generation });
    expect(after.json.generation).toBeGreaterThan(before.json.generation);
  });

  it('GET /admin/operators lists the built-ins and the loaded plugins, by file name only', async () => {
    const res = await c.admin('GET', '/admin/operators');
    expect(res.status).toBe(200);
    const byName = new Map<string, Record<string, string>>(res.json.operators.map((o: Record<string, string>) => [o.name, o]));
    for (const name of ['eq', 'min', 'max', 'in', 'not_in']) expect(byName.get(name)).toMatchObject({ kind: 'built-in', source: 'built-in' });
    for (const name of ['cidr', 'max_length', 'prefix', 'regex']) {
      expect(byName.get(name)).toMatchObject({ kind: 'plugin', description: expect.any(String) });
      expect(byName.get(name)!.source).toMatch(/^[^/\\]+\.(ts|js|mjs)$/);
    }
    // The same set a reload answers.
    expect((await c.admin('POST', '/admin/operators/reload')).json.operators.sort()).toEqual([...byName.keys()].sort());
  });
});
