// Agent and host lifecycle (protocol §4.3–§4.10, §7) over HTTP with a manual clock: nothing sleeps.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Client, code } from '../support/client.ts';
import { newEd25519 } from '../support/keys.ts';
import { forEachStore, startTestServer, type TestServer } from '../support/server.ts';

const SESSION_TTL_SECONDS = 60;
const MAX_LIFETIME_SECONDS = 600;
const ABSOLUTE_LIFETIME_SECONDS = 3600;

forEachStore('lifecycle', (storeKind) => {
  let server: TestServer;
  let c: Client;

  beforeAll(async () => {
    server = await startTestServer({
      store: storeKind,
      env: {
        AGENT_SESSION_TTL_SECONDS: String(SESSION_TTL_SECONDS),
        AGENT_MAX_LIFETIME_SECONDS: String(MAX_LIFETIME_SECONDS),
        AGENT_ABSOLUTE_LIFETIME_SECONDS: String(ABSOLUTE_LIFETIME_SECONDS),
      },
    });
    c = new Client(server);
  });
  afterAll(() => server.close());

  const advance = (seconds: number) => server.clock.advance(seconds * 1000);

  it('the session slides: each execute extends it, and idling past the TTL expires the agent', async () => {
    const agent = await c.activeAgent();
    for (let i = 0; i < 3; i++) {
      advance(SESSION_TTL_SECONDS - 10);
      expect((await c.execute(agent, 'echo', {})).status).toBe(200);
    }
    advance(SESSION_TTL_SECONDS + 1);
    expect(code(await c.execute(agent, 'echo', {}))).toBe('403 agent_expired');
    expect((await c.status(agent.host, agent.id)).json.status).toBe('expired');
  });

  it('the max lifetime since activation expires an agent however active it is, and reactivation resets it', async () => {
    const agent = await c.activeAgent();
    for (let elapsed = 0; elapsed < MAX_LIFETIME_SECONDS; elapsed += 50) {
      advance(50);
      await c.execute(agent, 'echo', {});
    }
    expect(code(await c.execute(agent, 'echo', {}))).toBe('403 agent_expired');
    const before = (await c.status(agent.host, agent.id)).json;
    const body = (await c.hostPost('/agent/reactivate', agent.host, { agent_id: agent.id })).json;
    expect(body.status).toBe('active');
    expect(body.activated_at).not.toBe(before.activated_at);
    expect((await c.execute(agent, 'echo', {})).status).toBe(200);
  });

  it('the absolute lifetime is not reset by reactivation and revokes the agent for good', async () => {
    const agent = await c.activeAgent();
    const step = SESSION_TTL_SECONDS * 2;
    for (let i = 0; i < Math.floor((ABSOLUTE_LIFETIME_SECONDS - 1) / step); i++) {
      advance(step);
      expect(code(await c.execute(agent, 'echo', {}))).toBe('403 agent_expired');
      expect((await c.hostPost('/agent/reactivate', agent.host, { agent_id: agent.id })).status).toBe(200);
    }
    advance(step);
    expect(code(await c.execute(agent, 'echo', {}))).toBe('403 absolute_lifetime_exceeded');
    expect(code(await c.hostPost('/agent/reactivate', agent.host, { agent_id: agent.id }))).toBe('403 absolute_lifetime_exceeded');
    await expect.poll(async () => (await c.status(agent.host, agent.id)).json.status).toBe('revoked');
  });

  it("reactivation resets grants to the host's current defaults; escalations must be re-requested", async () => {
    const agent = await c.activeAgent(['echo']);
    const req = await c.requestCapability(agent, { capabilities: ['weather_lookup'] });
    expect(req.json).toMatchObject({ status: 'pending', approval: { method: 'device_authorization' } });
    expect(typeof req.json.approval.user_code).toBe('string');
    expect(typeof req.json.agent_capability_grants[0].id).toBe('string');
    expect((await c.admin('POST', `/admin/agents/${agent.id}/approve`, { capabilities: ['weather_lookup'], user_id: 'user-1' })).status).toBe(200);
    expect((await c.execute(agent, 'weather_lookup', { city: 'Oslo' })).status).toBe(200);

    advance(SESSION_TTL_SECONDS + 1);
    expect((await c.hostPost('/agent/reactivate', agent.host, { agent_id: agent.id })).json.status).toBe('active');
    const grants = (await c.status(agent.host, agent.id)).json.agent_capability_grants as Array<{ capability: string; status: string }>;
    expect(grants.filter((g) => g.status === 'active').map((g) => g.capability)).toEqual(['echo']);
    expect(code(await c.execute(agent, 'weather_lookup', {}))).toBe('403 grant_revoked');
    expect((await c.execute(agent, 'echo', {})).status).toBe(200);
  });

  it('a pending registration retried with the same key is idempotent; other states are agent_exists', async () => {
    const host = await newEd25519();
    const key = await newEd25519();
    const first = await c.register(host, { mode: 'delegated' }, { agentKey: key });
    const again = await c.register(host, { mode: 'delegated' }, { agentKey: key });
    expect(again.res.json).toMatchObject({ agent_id: first.agent!.id, status: 'pending' });
    expect(again.res.json.approval.verification_uri).toMatch(/^http/);

    const active = await c.activeAgent();
    advance(SESSION_TTL_SECONDS + 1);
    expect(code((await c.register(active.host, {}, { agentKey: active.key })).res)).toBe('409 agent_exists');
    const elsewhere = await c.register(await newEd25519(), {}, { agentKey: active.key });
    expect(elsewhere.res.status).toBe(200);
    expect(elsewhere.agent!.id).not.toBe(active.id);
  });

  it('approving a delegated agent of a pending host activates and links the host, claiming its autonomous agents', async () => {
    const host = await newEd25519();
    const { agent: auto } = await c.register(host, { mode: 'autonomous', capabilities: ['echo'] });
    expect(auto!.registration.status).toBe('active');
    expect((await c.execute(auto!, 'echo', {})).status).toBe(200);
    const { agent: delegated } = await c.register(host, { mode: 'delegated', capabilities: ['echo', 'weather_lookup'] });
    expect(delegated!.registration.status).toBe('pending');
    const approved = await c.admin('POST', `/admin/agents/${delegated!.id}/approve`, { capabilities: ['echo'], user_id: 'alice' });
    expect(approved.json.status).toBe('active');
    const grants = Object.fromEntries((approved.json.agent_capability_grants as Array<{ capability: string; status: string }>).map((g) => [g.capability, g.status]));
    expect(grants).toEqual({ echo: 'active', weather_lookup: 'denied' });
    expect((await c.admin('GET', `/admin/agents/${delegated!.id}`)).json.user_id).toBe('alice');
    expect((await c.status(host, auto!.id)).json.status).toBe('claimed');
    expect(code(await c.execute(auto!, 'echo', {}))).toBe('403 agent_claimed');
    expect((await c.execute(delegated!, 'echo', {})).status).toBe(200);
  });

  it('denying a pending registration rejects the agent', async () => {
    const host = await c.linkedHost([]);
    const { agent } = await c.register(host, { capabilities: ['echo'] });
    expect((await c.admin('POST', `/admin/agents/${agent!.id}/deny`, { user_id: 'user-1' })).json.status).toBe('rejected');
    expect(code(await c.execute(agent!, 'echo', {}))).toBe('403 agent_rejected');
  });

  it('revoking a host revokes every agent under it and reports how many', async () => {
    const first = await c.activeAgent();
    const { agent: second } = await c.register(first.host, { capabilities: ['echo'] });
    const res = await c.hostPost('/host/revoke', first.host);
    expect(res.json).toMatchObject({ status: 'revoked', agents_revoked: 2 });
    for (const agent of [first, second!]) expect(code(await c.execute(agent, 'echo', {}))).toBe('403 host_revoked');
    expect((await c.admin('GET', `/admin/agents/${first.id}`)).json.status).toBe('revoked');
  });

  it('a revoked host may repeat its own revocation (how it confirms one not yet durable) and nothing else', async () => {
    const agent = await c.activeAgent();
    expect((await c.hostPost('/host/revoke', agent.host)).json).toMatchObject({ status: 'revoked', agents_revoked: 1 });
    expect((await c.hostPost('/host/revoke', agent.host)).json).toMatchObject({ status: 'revoked', agents_revoked: 0 });
    expect(code(await c.hostPost('/agent/revoke', agent.host, { agent_id: agent.id }))).toBe('403 host_revoked');
    expect(code(await c.status(agent.host, agent.id))).toBe('403 host_revoked');
  });

  it('revoking an agent revokes its grants and is idempotent', async () => {
    const agent = await c.activeAgent();
    expect((await c.hostPost('/agent/revoke', agent.host, { agent_id: agent.id })).json).toEqual({ agent_id: agent.id, status: 'revoked' });
    expect((await c.hostPost('/agent/revoke', agent.host, { agent_id: agent.id })).status).toBe(200);
    const view = (await c.status(agent.host, agent.id)).json;
    expect(view.agent_capability_grants.every((g: { status: string }) => g.status === 'revoked')).toBe(true);
  });

  it('a revoked grant is not silently granted again from the host defaults', async () => {
    const agent = await c.activeAgent(['echo']);
    await c.hostPost('/agent/revoke-capability', agent.host, { agent_id: agent.id, capabilities: ['echo'] });
    const res = await c.requestCapability(agent, { capabilities: ['echo'] });
    expect(res.json.status).toBe('pending');
    expect(code(await c.execute(agent, 'echo', {}))).toBe('403 grant_revoked');
  });

  it('request-capability within the defaults of a linked host is granted at once; the agent stays active while other requests wait', async () => {
    const host = await c.linkedHost(['echo', 'weather_lookup']);
    const { agent } = await c.register(host, { capabilities: ['echo'] });
    const res = await c.requestCapability(agent!, { capabilities: ['weather_lookup'] });
    expect(res.json).toMatchObject({ agent_id: agent!.id, status: 'active', agent_capability_grants: [{ capability: 'weather_lookup', status: 'active' }] });
    const pending = await c.requestCapability(agent!, { capabilities: ['transfer_money'] });
    expect(pending.json.status).toBe('pending');
    expect((await c.execute(agent!, 'weather_lookup', {})).status).toBe(200);
  });
});
