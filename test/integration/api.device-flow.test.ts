// RFC 8628 device authorization as the protocol uses it (protocol §10): the approval object a
// waiting agent carries, a fresh code on request (POST /agent/device/code), slow_down for clients
// that poll much faster than the interval, and the finality of a denial. Both stores.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Client, code, http } from '../support/client.ts';
import { newEd25519 } from '../support/keys.ts';
import { forEachStore, startTestServer, type TestServer } from '../support/server.ts';

const INTERVAL_SECONDS = 1;
const USER_CODE = /^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

forEachStore('device authorization', (storeKind) => {
  let server: TestServer;
  let c: Client;

  beforeAll(async () => {
    server = await startTestServer({ store: storeKind, env: { APPROVAL_INTERVAL_SECONDS: String(INTERVAL_SECONDS) } });
    c = new Client(server);
  });
  afterAll(() => server.close());

  const pendingAgent = async () => {
    const { res, agent } = await c.register(await newEd25519(), { mode: 'delegated', capabilities: ['echo'] });
    expect(res.json.status).toBe('pending');
    return agent!;
  };
  const deviceCode = async (host: Parameters<Client['hostPost']>[1], agentId: string) => c.hostPost('/agent/device/code', host, { agent_id: agentId });

  it('a waiting agent carries an RFC 8628 approval: a consonant XXXX-XXXX code, the page, the interval', async () => {
    const agent = await pendingAgent();
    const approval = agent.registration.approval;
    expect(approval).toMatchObject({ method: 'device_authorization', verification_uri: `${c.issuer}/device`, interval: INTERVAL_SECONDS });
    expect(approval.user_code).toMatch(USER_CODE);
    expect(approval.verification_uri_complete).toBe(`${c.issuer}/device?user_code=${approval.user_code}`);
    expect(approval.expires_in).toBeGreaterThan(0);
  });

  it('the code is never stored: not in the agent record, not as the lookup key; a status poll shows the same code', async () => {
    const agent = await pendingAgent();
    const code = agent.registration.approval.user_code as string;
    const stored = JSON.stringify(await server.store.getAgent(agent.id));
    expect(stored).not.toContain(code);
    expect(stored).not.toContain(code.replace('-', ''));
    expect(await server.store.findAgentIdByUserCode(code)).toBeNull();
    expect(await server.store.findAgentIdByUserCode(server.app.deps.userCodes.lookupKey(code.toLowerCase())!)).toBe(agent.id);
    expect((await c.status(agent.host, agent.id)).json.approval.user_code).toBe(code);
  });

  it('a client polling much faster than the interval is told slow_down (429, Retry-After), one at the interval never is', async () => {
    const agent = await pendingAgent();
    // Two polls at once: one answered, the other far inside the interval however slowly a busy
    // machine runs them (one after the other, a pause past half the interval would make it legal).
    const [first, second] = await Promise.all([c.status(agent.host, agent.id), c.status(agent.host, agent.id)]);
    expect([code(first), code(second)].sort()).toEqual(['200', '429 slow_down']);
    const fast = code(first) === '200' ? second : first;
    expect(fast.headers.get('retry-after')).toBe(String(INTERVAL_SECONDS));
    await sleep(INTERVAL_SECONDS * 1000);
    for (let i = 0; i < 3; i++) {
      expect((await c.status(agent.host, agent.id)).status).toBe(200);
      await sleep(INTERVAL_SECONDS * 1000);
    }
  });

  it('an active agent with nothing waiting is never slowed down', async () => {
    const agent = await c.activeAgent(['echo']);
    for (let i = 0; i < 3; i++) expect((await c.status(agent.host, agent.id)).status).toBe(200);
  });

  it('POST /agent/device/code issues a fresh code for a waiting agent; the old code decides nothing', async () => {
    const agent = await pendingAgent();
    const oldCode = agent.registration.approval.user_code as string;
    const fresh = await deviceCode(agent.host, agent.id);
    expect(fresh.status, fresh.text).toBe(200);
    expect(fresh.headers.get('cache-control')).toBe('no-store');
    expect(fresh.json).toMatchObject({ verification_uri: `${c.issuer}/device`, interval: INTERVAL_SECONDS });
    expect(fresh.json.user_code).toMatch(USER_CODE);
    expect(fresh.json.user_code).not.toBe(oldCode);
    expect(typeof fresh.json.device_code).toBe('string');
    expect(code(await c.admin('POST', `/admin/agents/${agent.id}/approve`, { user_id: 'user-1', user_code: oldCode }))).toBe('400 invalid_request');
    const approved = await c.admin('POST', `/admin/agents/${agent.id}/approve`, { user_id: 'user-1', user_code: fresh.json.user_code });
    expect(approved.json.status).toBe('active');
  });

  it('POST /agent/device/code: another host cannot ask, an agent with nothing waiting gets 400, a denied one access_denied', async () => {
    const agent = await pendingAgent();
    expect(code(await deviceCode(await c.linkedHost([]), agent.id))).toBe('403 unauthorized');
    const active = await c.activeAgent(['echo']);
    expect(code(await deviceCode(active.host, active.id))).toBe('400 invalid_request');
    await c.admin('POST', `/admin/agents/${agent.id}/deny`, { user_id: 'user-1' });
    expect(code(await deviceCode(agent.host, agent.id))).toBe('403 access_denied');
    await sleep(INTERVAL_SECONDS * 1000);
    expect((await c.status(agent.host, agent.id)).json.status).toBe('rejected');
  });

  it('an expired code leaves nothing approvable until the host asks for a new one', async () => {
    const agent = await pendingAgent();
    server.clock.advance((server.config.APPROVAL_EXPIRES_IN_SECONDS + 1) * 1000);
    try {
      expect(code(await c.admin('POST', `/admin/agents/${agent.id}/approve`, { user_id: 'user-1' }))).toBe('400 expired_token');
      const fresh = await deviceCode(agent.host, agent.id);
      expect(fresh.status).toBe(200);
      expect((await c.admin('POST', `/admin/agents/${agent.id}/approve`, { user_id: 'user-1', user_code: fresh.json.user_code })).json.status).toBe('active');
    } finally {
      server.clock.advance(-(server.config.APPROVAL_EXPIRES_IN_SECONDS + 1) * 1000);
    }
  });

  it('the discovery document names the device-code endpoint and device authorization', async () => {
    const discovery = (await http('GET', c.url('/.well-known/agent-configuration'))).json;
    expect(discovery.approval_methods).toEqual(['device_authorization']);
    expect(discovery.endpoints.device_code).toBe('/agent/device/code');
    expect(discovery.verification_uri).toBe(`${c.issuer}/device`);
  });
});
