// The audit trail over HTTP: every event that creates, changes or uses authority
// is recorded and says who acted; nothing secret is in it; GET /admin/audit filters, pages by
// cursor, validates its query and reads a bounded number of events per request. Both stores.
import { exportJWK } from 'jose';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Client, code, http, type TestAgent } from '../support/client.ts';
import { newEd25519, type TestKey } from '../support/keys.ts';
import { PersonBrowser } from '../support/person-browser.ts';
import { forEachStore, ADMIN_TOKEN, startTestServer, type TestServer } from '../support/server.ts';
import { removeStalePending } from '../../src/services/cleanup.ts';
import { CAPPED_EVENTS_PER_WINDOW } from '../../src/audit/log.ts';

type Event = Record<string, any> & { id: string; type: string };

/** The private part of a test key, to be sure it appears nowhere. */
const privateD = async (key: TestKey) => (await exportJWK(key.privateKey as Parameters<typeof exportJWK>[0])).d as string;

forEachStore('the audit trail', (storeKind) => {
  let server: TestServer;
  let c: Client;

  beforeAll(async () => {
    server = await startTestServer({ store: storeKind, env: { INSECURE_DEV_SIGN_IN: 'true' } });
    c = new Client(server);
  });
  afterAll(() => server.close());

  /** One page of GET /admin/audit with these query parameters. */
  const page = async (query: Record<string, string | number> = {}) => {
    const res = await c.admin('GET', `/admin/audit?${new URLSearchParams(Object.entries(query).map(([k, v]): [string, string] => [k, String(v)]))}`);
    expect(res.status, res.text).toBe(200);
    return res.json as { events: Event[]; next_cursor: string | null };
  };

  /** Every event the query matches, newest first, following cursors (bounded). */
  const all = async (query: Record<string, string | number> = {}): Promise<Event[]> => {
    const events: Event[] = [];
    let cursor: string | null = null;
    for (let i = 0; i < 200; i++) {
      const next = await page({ limit: 500, ...query, ...(cursor ? { cursor } : {}) });
      events.push(...next.events);
      if (next.next_cursor === null) return events;
      cursor = next.next_cursor;
    }
    throw new Error('the trail did not end within 200 pages');
  };

  const adminHost = async (defaults: string[], userId = 'user-1') => {
    const host = await newEd25519();
    const created = await c.admin('POST', '/admin/hosts', { public_key: host.publicJwk, default_capabilities: defaults, user_id: userId });
    expect(created.status).toBe(201);
    return { host, hostId: created.json.host_id as string };
  };

  it('records who created, changed and used authority: hosts, agents, approvals, grants, keys, executes', async () => {
    const { host, hostId } = await adminHost(['echo']);
    const registered = await c.register(host, { mode: 'delegated', capabilities: ['echo'] });
    let agent = registered.agent!;
    expect((await c.execute(agent, 'echo', {})).status).toBe(200);
    expect(code(await c.execute(agent, 'weather_lookup', { city: 'Oslo' }))).toBe('403 capability_not_granted');
    expect((await c.requestCapability(agent, { capabilities: ['weather_lookup'] })).json.status).toBe('pending');
    expect((await c.admin('POST', `/admin/agents/${agent.id}/approve`, { user_id: 'user-1' })).status).toBe(200);
    expect((await c.requestCapability(agent, { capabilities: ['legacy_report'] })).json.status).toBe('pending');
    expect((await c.admin('POST', `/admin/agents/${agent.id}/deny`, { user_id: 'user-1' })).status).toBe(200);
    const revokeCapability = await http('POST', c.url('/agent/revoke-capability'), { token: await c.agentToken(agent), json: { capabilities: ['weather_lookup'] } });
    expect(revokeCapability.status).toBe(200);
    const newAgentKey = await newEd25519();
    expect((await c.hostPost('/agent/rotate-key', host, { agent_id: agent.id, public_key: newAgentKey.publicJwk })).status).toBe(200);
    agent = { ...agent, key: newAgentKey };
    expect((await c.admin('POST', `/admin/agents/${agent.id}/expire`)).status).toBe(200);
    expect((await c.hostPost('/agent/reactivate', host, { agent_id: agent.id })).json.status).toBe('active');
    const newHostKey = await newEd25519();
    expect((await c.hostPost('/host/rotate-key', host, { public_key: newHostKey.publicJwk })).status).toBe(200);
    const second = (await c.register(newHostKey, { mode: 'delegated', capabilities: ['echo'] })).agent!;
    expect((await c.admin('POST', `/admin/agents/${second.id}/revoke`)).status).toBe(200);
    expect((await c.hostPost('/host/revoke', newHostKey)).status).toBe(200);

    const events = (await all({ host_id: hostId })).reverse();
    const of = (type: string) => events.filter((e) => e.type === type);
    expect(of('host.registered')).toEqual([expect.objectContaining({ actor: 'admin', person_id: 'user-1', default_capabilities: ['echo'] })]);
    expect(of('host.linked')).toEqual([expect.objectContaining({ actor: 'admin', person_id: 'user-1' })]);
    expect(of('agent.registered')).toEqual([
      expect.objectContaining({ actor: 'host', agent_id: agent.id, outcome: 'active', granted: ['echo'], pending: [], person_id: 'user-1' }),
      expect.objectContaining({ actor: 'host', agent_id: second.id }),
    ]);
    expect(of('execute.allowed')[0]).toMatchObject({ actor: 'agent', agent_id: agent.id, capability: 'echo', outcome: 'completed', grant_id: expect.any(String) });
    expect(of('execute.refused')[0]).toMatchObject({ actor: 'agent', agent_id: agent.id, capability: 'weather_lookup', outcome: 'refused', code: 'capability_not_granted' });
    expect(of('capability.requested').map((e) => [e.outcome, e.pending])).toEqual([['pending', ['weather_lookup']], ['pending', ['legacy_report']]]);
    expect(of('approval.approved')).toEqual([expect.objectContaining({ actor: 'admin', via: 'admin_api', person_id: 'user-1', approved: ['weather_lookup'], denied: [] })]);
    expect(of('approval.denied')).toEqual([expect.objectContaining({ actor: 'admin', person_id: 'user-1', denied: ['legacy_report'] })]);
    expect(of('grant.revoked')).toEqual([expect.objectContaining({ actor: 'agent', agent_id: agent.id, capabilities: ['weather_lookup'] })]);
    expect(of('agent.key_rotated')).toEqual([expect.objectContaining({ actor: 'host', agent_id: agent.id, key_version: 2 })]);
    expect(of('agent.expired')).toEqual([expect.objectContaining({ actor: 'admin', agent_id: agent.id })]);
    expect(of('agent.reactivated')).toEqual([expect.objectContaining({ actor: 'host', agent_id: agent.id, outcome: 'active', granted: ['echo'] })]);
    expect(of('host.key_rotated')).toEqual([expect.objectContaining({ actor: 'host' })]);
    expect(of('agent.revoked')).toEqual([expect.objectContaining({ actor: 'admin', agent_id: second.id })]);
    expect(of('host.revoked')).toEqual([expect.objectContaining({ actor: 'host', agents_revoked: 2 })]);
    // The admin's calls on this host's agents are there too, by path and status (under the agent they name).
    const calls = await all({ agent_id: agent.id, type: 'admin.call' });
    expect(calls.map((e) => `${e.method} ${e.path} ${e.status}`)).toContain(`POST /admin/agents/${agent.id}/approve 200`);
    expect(calls.every((e) => e.actor === 'admin' && e.outcome === 'ok')).toBe(true);
    for (const event of events) {
      expect(event.host_id).toBe(hostId);
      expect(Date.parse(event.at)).not.toBeNaN();
    }
  });

  it('records an unknown host\'s own registration, the absolute lifetime\'s revocation and the clean-up, as the system', async () => {
    const unknown = await newEd25519();
    const { res, agent } = await c.register(unknown, { mode: 'autonomous', capabilities: ['echo'] });
    expect(res.status).toBe(200);
    const hostId = res.json.host_id as string;
    expect((await page({ host_id: hostId, type: 'host' })).events).toEqual([expect.objectContaining({ type: 'host.registered', actor: 'host', dynamic: true })]);

    expect((await c.admin('POST', `/admin/agents/${agent!.id}/exceed-absolute-lifetime`)).status).toBe(200);
    expect(code(await c.execute(agent!, 'echo', {}))).toBe('403 absolute_lifetime_exceeded');
    await expect.poll(async () => (await page({ agent_id: agent!.id, type: 'agent.revoked' })).events).toEqual([
      expect.objectContaining({ actor: 'system', reason: 'absolute_lifetime' }),
    ]);

    const waiting = (await c.register(await newEd25519(), { mode: 'delegated', capabilities: ['echo'] })).agent!;
    const maxAgeMs = server.config.PENDING_MAX_AGE_SECONDS * 1000;
    server.clock.advance(maxAgeMs + 1000);
    try {
      expect((await removeStalePending(server.app.deps, maxAgeMs)).agentsRemoved).toBeGreaterThanOrEqual(1);
    } finally {
      server.clock.advance(-(maxAgeMs + 1000));
    }
    expect((await page({ agent_id: waiting.id, type: 'agent.removed' })).events).toEqual([expect.objectContaining({ actor: 'system', reason: 'pending_too_long' })]);
  });

  it('a person\'s decisions, grants and revocations say it was that person, through which door', async () => {
    const browser = new PersonBrowser(server.baseUrl);
    await browser.signIn('Audra');
    const me = await http('GET', c.url('/people/me'), { headers: { cookie: browser.cookie } });
    const personId = me.json.person_id as string;
    const post = (path: string, json: unknown = {}) => http('POST', c.url(path), { json, headers: { cookie: browser.cookie, 'x-csrf-token': me.json.csrf_token } });
    const { host, hostId } = await adminHost(['echo'], personId);
    const waiting = (await c.register(host, { mode: 'delegated', capabilities: ['echo', 'weather_lookup'] })).agent!;
    const approvalId = (await server.store.getAgent(waiting.id))!.agent.approval!.id;
    expect((await post(`/people/me/approvals/${approvalId}`, { verdict: 'approve' })).status).toBe(200);
    expect((await post(`/people/me/agents/${waiting.id}/grants`, { capability: 'legacy_report' })).status).toBe(201);
    const grantId = (await server.store.getAgent(waiting.id))!.grants.find((g) => g.capability === 'legacy_report' && g.status === 'active')!.id;
    expect((await post(`/people/me/agents/${waiting.id}/grants/${grantId}/revoke`)).status).toBe(200);
    expect((await post(`/people/me/hosts/${hostId}/unlink`)).status).toBe(200);

    const events = (await all({ host_id: hostId })).reverse();
    const person = { actor: 'person', via: 'people_api', person_id: personId };
    expect(events.find((e) => e.type === 'approval.approved')).toMatchObject({ ...person, agent_id: waiting.id, approved: ['weather_lookup'], denied: [] });
    expect(events.find((e) => e.type === 'grant.granted')).toMatchObject({ ...person, capability: 'legacy_report', grant_id: grantId });
    expect(events.find((e) => e.type === 'grant.revoked')).toMatchObject({ ...person, grant_ids: [grantId] });
    expect(events.find((e) => e.type === 'host.unlinked')).toMatchObject({ ...person, agents_revoked: 1 });
  });

  it('records reloads of the policy and the operator plugins, and every admin call, refused ones included', async () => {
    expect((await c.admin('POST', '/admin/policy/reload')).status).toBe(200);
    expect((await c.admin('POST', '/admin/operators/reload')).status).toBe(200);
    expect(code(await http('GET', c.url('/admin/approvals'), { token: 'not-the-admin-token-at-all' }))).toBe('403 unauthorized');
    const events = await all({ since: Date.now() - 60_000 });
    expect(events.find((e) => e.type === 'policy.reloaded')).toMatchObject({ actor: 'admin', trigger: 'admin', outcome: 'accepted', sha256: expect.any(String) });
    expect(events.find((e) => e.type === 'operators.reloaded')).toMatchObject({ actor: 'admin', outcome: 'accepted', operators: expect.arrayContaining(['eq', 'regex']) });
    const calls = events.filter((e) => e.type === 'admin.call');
    expect(calls.find((e) => e.path === '/admin/policy/reload')).toMatchObject({ method: 'POST', status: 200, outcome: 'ok' });
    expect(calls.find((e) => e.path === '/admin/approvals' && e.status === 403)).toMatchObject({ outcome: 'refused', code: 'unauthorized' });
  });

  it('batch execute: one event per item, and one for a batch refused whole, with or without a verified caller', async () => {
    const agent = await c.activeAgent(['echo']);
    const token = await c.agentToken(agent, { aud: c.executeUrl });
    const calls = [{ id: 'ok', capability: 'echo', arguments: {} }, { id: 'no', capability: 'weather_lookup', arguments: {} }];
    expect((await http('POST', c.url('/capability/batch-execute'), { token, json: { requests: calls } })).status).toBe(200);
    expect(code(await http('POST', c.url('/capability/batch-execute'), { token, json: { requests: calls } }))).toBe('401 invalid_jwt');
    const events = (await page({ agent_id: agent.id, type: 'execute' })).events;
    // Items run concurrently, so their events come in the order they finished.
    expect(events.slice(1).map((e) => [e.type, e.call_id, e.code, e.batch]).sort()).toEqual([
      ['execute.allowed', 'ok', undefined, true],
      ['execute.refused', 'no', 'capability_not_granted', true],
    ]);
    expect(events[0]).toMatchObject({ type: 'execute.refused', code: 'invalid_jwt', batch: true, calls: 2, outcome: 'refused' });
    expect(events[0]).not.toHaveProperty('call_id');

    const stranger = { ...agent, key: await newEd25519() };
    const marker = Date.now() - 1;
    expect(code(await c.batchExecute(stranger, calls))).toBe('401 invalid_jwt');
    const forged = (await all({ type: 'execute.refused', since: marker })).filter((e) => e.calls === 2 && e.agent_id === undefined);
    expect(forged.length).toBeGreaterThanOrEqual(1);
  });

  it('the trail holds no secret: no token, key, user code or execute argument', async () => {
    const { host } = await adminHost(['echo']);
    const agentKey = await newEd25519();
    const hostToken = await c.hostToken(host, { agentKey });
    const registered = await http('POST', c.url('/agent/register'), { token: hostToken, json: { name: 'secretive', mode: 'delegated', capabilities: ['echo', 'weather_lookup'] } });
    const agent: TestAgent = { id: registered.json.agent_id, key: agentKey, host, registration: registered.json };
    const userCode = registered.json.approval.user_code as string;
    expect((await c.admin('POST', `/admin/agents/${agent.id}/approve`, { user_id: 'user-1', user_code: userCode })).status).toBe(200);
    const agentToken = await c.agentToken(agent, { aud: c.executeUrl });
    const argument = 'the-secret-argument-7f3a91';
    expect((await http('POST', c.executeUrl, { token: agentToken, json: { capability: 'echo', arguments: { note: argument } } })).status).toBe(200);
    expect(code(await http('POST', c.executeUrl, { token: agentToken, json: { capability: 'echo', arguments: { note: argument } } }))).toBe('401 invalid_jwt');

    const trail = JSON.stringify(await all());
    expect(trail).toContain(agent.id);
    const secrets: Record<string, string> = {
      adminToken: ADMIN_TOKEN, hostToken, agentToken, userCode, userCodeCompact: userCode.replace('-', ''), argument,
      hostPrivate: await privateD(host), agentPrivate: await privateD(agentKey), agentPublic: agentKey.publicJwk.x as string,
    };
    for (const [name, secret] of Object.entries(secrets)) expect(trail.includes(secret), name).toBe(false);
  });

  it('filters by agent, host, type (exact or family) and time (ISO 8601 or epoch ms, inclusive), newest first', async () => {
    const one = await c.activeAgent(['echo']);
    const two = await c.activeAgent(['echo']);
    expect((await c.execute(one, 'echo', {})).status).toBe(200);
    expect(code(await c.execute(one, 'weather_lookup', {}))).toBe('403 capability_not_granted');
    expect((await c.execute(two, 'echo', {})).status).toBe(200);

    const mine = (await page({ agent_id: one.id })).events;
    expect(mine.every((e) => e.agent_id === one.id)).toBe(true);
    expect(mine.map((e) => e.type)).toEqual(['execute.refused', 'execute.allowed', 'agent.registered']);
    expect((await page({ agent_id: one.id, type: 'execute' })).events.map((e) => e.type)).toEqual(['execute.refused', 'execute.allowed']);
    expect((await page({ agent_id: one.id, type: 'execute.allowed' })).events).toHaveLength(1);
    // Not a prefix match, and not silently empty: a type of no family is refused, naming the families.
    expect(code(await c.admin('GET', `/admin/audit?agent_id=${one.id}&type=exec`))).toBe('400 invalid_request');
    const hostId = mine[0]!.host_id as string;
    expect((await page({ host_id: hostId })).events.every((e) => e.host_id === hostId)).toBe(true);

    const [refused, allowed] = mine;
    const at = Date.parse(refused!.at);
    expect((await page({ agent_id: one.id, since: refused!.at })).events.map((e) => e.id)).toContain(refused!.id);
    expect((await page({ agent_id: one.id, since: at + 1 })).events.map((e) => e.id)).not.toContain(refused!.id);
    expect((await page({ agent_id: one.id, until: allowed!.at })).events.map((e) => e.id)).toContain(allowed!.id);
    expect((await page({ agent_id: one.id, until: String(Date.parse(allowed!.at) - 1) })).events.map((e) => e.id)).not.toContain(allowed!.id);
    expect((await page({ agent_id: one.id, since: allowed!.at, until: refused!.at })).events.map((e) => e.id)).toEqual([refused!.id, allowed!.id]);
  });

  it('pages by cursor, newest first, without repeats or gaps', async () => {
    const agent = await c.activeAgent(['echo']);
    for (let i = 0; i < 7; i++) expect((await c.execute(agent, 'echo', {})).status).toBe(200);
    const whole = (await page({ agent_id: agent.id, limit: 500 })).events;
    expect(whole).toHaveLength(8);
    const seen: string[] = [];
    let cursor: string | null = null;
    for (let i = 0; i < 10; i++) {
      const next = await page({ agent_id: agent.id, limit: 3, ...(cursor ? { cursor } : {}) });
      seen.push(...next.events.map((e) => e.id));
      cursor = next.next_cursor;
      if (cursor === null) break;
    }
    expect(seen).toEqual(whole.map((e) => e.id));
    const unfiltered = await page({ limit: 2 });
    expect(unfiltered.events).toHaveLength(2);
    expect(unfiltered.next_cursor).toBe(unfiltered.events[1]!.id);
  });

  it('a rare filter cannot make one request read the whole trail: it stops and answers a cursor', async () => {
    await server.store.appendAuditEvents([{ at: new Date().toISOString(), type: 'test.rare', actor: 'system', agent_id: 'agt_rare' }], 100_000);
    const filler = Array.from({ length: 2500 }, (_, i) => ({ at: new Date().toISOString(), type: 'test.filler', actor: 'system' as const, i }));
    for (let i = 0; i < filler.length; i += 500) await server.store.appendAuditEvents(filler.slice(i, i + 500), 100_000);
    const first = await page({ agent_id: 'agt_rare', limit: 1 });
    expect(first.events).toEqual([]);
    expect(first.next_cursor).not.toBeNull();
    let cursor = first.next_cursor;
    let found: Event[] = [];
    for (let i = 0; i < 5 && cursor !== null && found.length === 0; i++) {
      const next = await page({ agent_id: 'agt_rare', limit: 1, cursor });
      found = next.events;
      cursor = next.next_cursor;
    }
    expect(found).toEqual([expect.objectContaining({ type: 'test.rare', agent_id: 'agt_rare' })]);
  });

  it('an unknown caller cannot flush the trail: refusals of unverified or replayed tokens are capped per window', async () => {
    const agent = await c.activeAgent(['echo']);
    const forger = { ...agent, key: await newEd25519() };
    const since = Date.now();
    for (let i = 0; i < CAPPED_EVENTS_PER_WINDOW + 30; i++) expect(code(await c.execute(forger, 'echo', {}))).toBe('401 invalid_jwt');
    // A token captured once (from a log, say) replayed over and over: verified, yet refused every time.
    const captured = await c.agentToken(agent, { aud: c.executeUrl });
    expect((await c.execute(agent, 'echo', {}, { token: captured })).status).toBe(200);
    for (let i = 0; i < CAPPED_EVENTS_PER_WINDOW + 30; i++) expect(code(await c.execute(agent, 'echo', {}, { token: captured }))).toBe('401 invalid_jwt');
    const refused = await all({ type: 'execute.refused', since });
    expect(refused.filter((e) => e.agent_id === undefined).length).toBeLessThanOrEqual(CAPPED_EVENTS_PER_WINDOW);
    expect(refused.filter((e) => e.agent_id === agent.id).length).toBeLessThanOrEqual(CAPPED_EVENTS_PER_WINDOW);
    expect((await page({ agent_id: agent.id, type: 'execute.allowed' })).events).toHaveLength(1);
  });

  it('GET /admin/audit needs the admin token and refuses a malformed query with 400', async () => {
    expect(code(await http('GET', c.url('/admin/audit')))).toBe('401 authentication_required');
    expect(code(await http('GET', c.url('/admin/audit'), { token: 'wrong-token-of-some-length' }))).toBe('403 unauthorized');
    for (const query of ['limit=0', 'limit=501', 'limit=ten', 'cursor=abc', 'since=yesterday', 'until=1e12', 'type=Execute!', 'agent=agt_1',
      `agent_id=${'a'.repeat(129)}`, 'since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z', 'agent_id=a&agent_id=b']) {
      expect(code(await c.admin('GET', `/admin/audit?${query}`)), query).toBe('400 invalid_request');
    }
    expect((await c.admin('GET', '/admin/audit?limit=500&since=0&until=9999999999999')).status).toBe(200);
  });
});
