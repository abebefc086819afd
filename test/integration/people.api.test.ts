// People's own API over HTTP: a signed-in person sees and acts on their own
// hosts, agents and approvals, and nobody else's. Every route is checked for the owner, for another
// signed-in person (404, and nothing in their lists), without a session (401), and every POST
// without or with a wrong CSRF token (403, nothing changed); decisions also with a stale sign-in
// (401). Dev sign-in stands in for the OpenID Connect provider. Both stores.
import { expect, it } from 'vitest';
import { Client, code, http, type TestAgent } from '../support/client.ts';
import { newEd25519, type TestKey } from '../support/keys.ts';
import { PersonBrowser } from '../support/person-browser.ts';
import { forEachStore, testServerForBlock } from '../support/server.ts';

const FRESH_SECONDS = 300;

forEachStore("people's own API", (storeKind) => {
  const server = testServerForBlock({ store: storeKind, env: { INSECURE_DEV_SIGN_IN: 'true', SIGN_IN_FRESH_SECONDS: String(FRESH_SECONDS) } });
  const c = new Client(server);
  let seq = 0;

  /** A person signed in through the dev form, calling the JSON API with their session cookie. */
  class Person {
    readonly browser: PersonBrowser;
    readonly name: string;
    personId = '';
    csrf = '';
    constructor(name: string) {
      this.name = name;
      this.browser = new PersonBrowser(server.baseUrl);
    }

    static async signedIn(prefix: string): Promise<Person> {
      const person = new Person(`${prefix}-${++seq}`);
      await person.browser.signIn(person.name);
      const me = await person.get('/people/me');
      expect(me.status).toBe(200);
      person.personId = me.json.person_id;
      person.csrf = me.json.csrf_token;
      return person;
    }

    get(path: string) {
      return http('GET', c.url(path), { headers: { cookie: this.browser.cookie } });
    }

    /** A POST with the session's CSRF token, another token (a string), or none (null). */
    post(path: string, json: unknown = {}, csrf: string | null = this.csrf) {
      return http('POST', c.url(path), { json, headers: { cookie: this.browser.cookie, ...(csrf === null ? {} : { 'x-csrf-token': csrf }) } });
    }
  }

  interface World {
    host: TestKey;
    hostId: string;
    /** Active, holding echo (the host's default). */
    active: TestAgent;
    /** Pending: its registration and weather_lookup wait for the owner. */
    waiting: TestAgent;
    approvalId: string;
  }

  /** A host an administrator linked to `owner`, an active agent on it, and one waiting for approval. */
  async function worldOf(owner: Person): Promise<World> {
    const host = await newEd25519();
    const created = await c.admin('POST', '/admin/hosts', { public_key: host.publicJwk, default_capabilities: ['echo'], user_id: owner.personId, name: `${owner.name}'s laptop` });
    expect(created.status).toBe(201);
    const active = await c.register(host, { mode: 'delegated', name: 'active bot', capabilities: ['echo'] });
    expect(active.res.json.status).toBe('active');
    const waiting = await c.register(host, {
      mode: 'delegated', name: 'waiting bot', reason: 'to check the weather', capabilities: ['echo', { name: 'weather_lookup', constraints: { city: 'Paris' } }],
    });
    expect(waiting.res.json.status).toBe('pending');
    const approvalId = (await server.store.getAgent(waiting.agent!.id))!.agent.approval!.id;
    return { host, hostId: created.json.host_id, active: active.agent!, waiting: waiting.agent!, approvalId };
  }

  /** Everything a route could change about a world, to compare before and after a refused call. */
  async function stateOf(world: World) {
    const host = await server.store.getHost(world.hostId);
    const agents = await Promise.all([world.active.id, world.waiting.id].map((id) => server.store.getAgent(id)));
    return { host: host!.status, userId: host!.userId, agents: agents.map((s) => ({ status: s!.agent.status, version: s!.agent.version, grants: s!.grants.map((g) => `${g.capability}:${g.status}`) })) };
  }

  /** Every POST route, aimed at one world's ids, each with a body the owner could send. */
  function postRoutes(world: World, grantId: string): Array<[string, unknown]> {
    return [
      [`/people/me/approvals/${world.approvalId}`, { verdict: 'approve' }],
      [`/people/me/agents/${world.active.id}/grants`, { capability: 'weather_lookup' }],
      [`/people/me/agents/${world.active.id}/revoke`, {}],
      [`/people/me/agents/${world.active.id}/grants/${grantId}/revoke`, {}],
      [`/people/me/hosts/${world.hostId}/unlink`, {}],
      [`/people/me/hosts/${world.hostId}/revoke`, {}],
    ];
  }

  const grantIdOf = async (agentId: string, capability: string) =>
    (await server.store.getAgent(agentId))!.grants.find((g) => g.capability === capability && g.status === 'active')!.id;

  const withStaleSignIn = async (run: () => Promise<void>) => {
    server.clock.advance((FRESH_SECONDS + 1) * 1000);
    try {
      await run();
    } finally {
      server.clock.advance(-(FRESH_SECONDS + 1) * 1000);
    }
  };

  it('GET /people/me names the signed-in person and gives out the CSRF token the page uses', async () => {
    const alice = await Person.signedIn('Alice');
    const me = await alice.get('/people/me');
    expect(me.json).toMatchObject({ person_id: `dev|${alice.name}`, name: alice.name });
    expect(me.json.csrf_token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(Math.abs(new Date(me.json.signed_in_at).getTime() - server.clock.nowMs())).toBeLessThan(60_000);
    expect(me.headers.get('cache-control')).toBe('no-store');
  });

  it('a person lists their own hosts, agents and open approvals, and none of anyone else', async () => {
    const alice = await Person.signedIn('Alice');
    const mallory = await Person.signedIn('Mallory');
    const a = await worldOf(alice);
    const m = await worldOf(mallory);

    const hosts = (await alice.get('/people/me/hosts')).json.hosts;
    expect(hosts.map((h: { host_id: string }) => h.host_id)).toEqual([a.hostId]);
    expect(hosts[0]).toMatchObject({ status: 'active', user_id: alice.personId, name: `${alice.name}'s laptop` });

    const agents = (await alice.get('/people/me/agents')).json.agents;
    expect(agents.map((x: { agent_id: string }) => x.agent_id).sort()).toEqual([a.active.id, a.waiting.id].sort());
    const active = agents.find((x: { agent_id: string }) => x.agent_id === a.active.id);
    expect(active.status).toBe('active');
    expect(active.agent_capability_grants.map((g: { capability: string; status: string; id: string }) => [g.capability, g.status, typeof g.id])).toEqual([['echo', 'active', 'string']]);

    const approvals = (await alice.get('/people/me/approvals')).json.approvals;
    expect(approvals).toHaveLength(1);
    expect(approvals[0]).toMatchObject({
      approval_id: a.approvalId,
      registration: true,
      agent: { agent_id: a.waiting.id, name: 'waiting bot', status: 'pending', mode: 'delegated', reason: 'to check the weather' },
      host: { host_id: a.hostId },
      capabilities: [{ capability: 'weather_lookup', constraints: { city: 'Paris' }, reason: 'to check the weather', approval_strength: 'sign_in' }],
    });
    expect(approvals[0].capabilities[0].description).toMatch(/weather/i);
    expect(approvals[0].capabilities[0].grant_id).toEqual(expect.any(String));
    expect(new Date(approvals[0].expires_at).getTime()).toBeGreaterThan(server.clock.nowMs());

    // Mallory's lists hold Mallory's world only: not one of Alice's ids appears in them.
    const seen = JSON.stringify([
      (await mallory.get('/people/me/hosts')).json, (await mallory.get('/people/me/agents')).json, (await mallory.get('/people/me/approvals')).json,
    ]);
    for (const id of [a.hostId, a.active.id, a.waiting.id, a.approvalId]) expect(seen).not.toContain(id);
    for (const id of [m.hostId, m.active.id, m.waiting.id, m.approvalId]) expect(seen).toContain(id);
  });

  it("another signed-in person gets 404 for every one of the owner's ids, and nothing changes", async () => {
    const alice = await Person.signedIn('Alice');
    const mallory = await Person.signedIn('Mallory');
    const a = await worldOf(alice);
    await worldOf(mallory);
    const before = await stateOf(a);
    const expected = ['404 not_found', '404 agent_not_found', '404 agent_not_found', '404 agent_not_found', '404 host_not_found', '404 host_not_found'];
    const routes = postRoutes(a, await grantIdOf(a.active.id, 'echo'));
    for (const [i, [path, body]] of routes.entries()) expect([path, code(await mallory.post(path, body))]).toEqual([path, expected[i]]);
    // The same answers as for ids that never existed: nothing tells Mallory that Alice's exist.
    expect(code(await mallory.post('/people/me/approvals/apr_nope', { verdict: 'approve' }))).toBe('404 not_found');
    expect(code(await mallory.post('/people/me/agents/agt_nope/revoke'))).toBe('404 agent_not_found');
    expect(code(await mallory.post('/people/me/hosts/hst_nope/revoke'))).toBe('404 host_not_found');
    expect(code(await mallory.post('/people/me/hosts/hst_nope/unlink'))).toBe('404 host_not_found');
    expect(await stateOf(a)).toEqual(before);
  });

  it('without a signed-in session every route answers 401 authentication_required', async () => {
    const alice = await Person.signedIn('Alice');
    const a = await worldOf(alice);
    // A session that exists but signed nobody in (the sign-in form gave it a CSRF token) is no better.
    const visitor = new PersonBrowser(server.baseUrl);
    await visitor.request('GET', '/signin');
    expect(visitor.cookie).not.toBe('');
    const gets = ['/people/me', '/people/me/hosts', '/people/me/agents', '/people/me/approvals'];
    for (const cookie of [undefined, visitor.cookie, 'agentgate_session=not-a-session']) {
      const headers = cookie ? { cookie } : undefined;
      for (const path of gets) expect([path, code(await http('GET', c.url(path), { headers }))]).toEqual([path, '401 authentication_required']);
      for (const [path, body] of postRoutes(a, await grantIdOf(a.active.id, 'echo'))) {
        expect([path, code(await http('POST', c.url(path), { json: body, headers: { ...headers, 'x-csrf-token': alice.csrf } }))]).toEqual([path, '401 authentication_required']);
      }
    }
  });

  it('a POST without the session CSRF token, or with a wrong one, is 403 and changes nothing', async () => {
    const alice = await Person.signedIn('Alice');
    const a = await worldOf(alice);
    const before = await stateOf(a);
    const other = await Person.signedIn('Bob');
    for (const [path, body] of postRoutes(a, await grantIdOf(a.active.id, 'echo'))) {
      for (const csrf of [null, '', 'x'.repeat(43), other.csrf]) {
        expect([path, csrf, code(await alice.post(path, body, csrf))]).toEqual([path, csrf, '403 unauthorized']);
      }
    }
    expect(await stateOf(a)).toEqual(before);
  });

  it('decisions need a fresh sign-in: approve, deny and grant after SIGN_IN_FRESH_SECONDS are 401 and change nothing', async () => {
    const alice = await Person.signedIn('Alice');
    const a = await worldOf(alice);
    const before = await stateOf(a);
    await withStaleSignIn(async () => {
      for (const verdict of ['approve', 'deny']) {
        const res = await alice.post(`/people/me/approvals/${a.approvalId}`, { verdict });
        expect(code(res)).toBe('401 authentication_required');
        expect(res.json.message).toMatch(/sign in again/i);
      }
      expect(code(await alice.post(`/people/me/agents/${a.active.id}/grants`, { capability: 'weather_lookup' }))).toBe('401 authentication_required');
      expect(await stateOf(a)).toEqual(before);
      // Reading and revoking take power from no one: they work with an older sign-in.
      expect((await alice.get('/people/me/approvals')).json.approvals).toHaveLength(1);
      expect((await alice.post(`/people/me/agents/${a.waiting.id}/revoke`)).json.status).toBe('revoked');
    });
    // Signing in again is enough.
    await alice.browser.signIn(alice.name);
    const me = (await alice.get('/people/me')).json;
    const fresh = await http('POST', c.url(`/people/me/agents/${a.active.id}/grants`), {
      json: { capability: 'weather_lookup' }, headers: { cookie: alice.browser.cookie, 'x-csrf-token': me.csrf_token },
    });
    expect(fresh.status).toBe(201);
  });

  it('the owner approves an open approval by its id: the agent is active, acting for them, with the approved grants', async () => {
    const alice = await Person.signedIn('Alice');
    const a = await worldOf(alice);
    const res = await alice.post(`/people/me/approvals/${a.approvalId}`, { verdict: 'approve' });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ agent_id: a.waiting.id, status: 'active', user_id: alice.personId });
    const weather = res.json.agent_capability_grants.find((g: { capability: string }) => g.capability === 'weather_lookup');
    expect(weather).toMatchObject({ status: 'active', granted_by: alice.personId, constraints: { city: 'Paris' } });
    expect((await c.execute(a.waiting, 'weather_lookup', { city: 'Paris' })).status).toBe(200);
    // Decided: it is no longer open, and a second click finds nothing.
    expect((await alice.get('/people/me/approvals')).json.approvals).toEqual([]);
    expect(code(await alice.post(`/people/me/approvals/${a.approvalId}`, { verdict: 'approve' }))).toBe('404 not_found');
  });

  it('the owner approves some capabilities (the rest denied), or denies: a denied registration is rejected', async () => {
    const alice = await Person.signedIn('Alice');
    const a = await worldOf(alice);
    const some = await alice.post(`/people/me/approvals/${a.approvalId}`, { verdict: 'approve', capabilities: [] });
    expect(some.json.status).toBe('active');
    expect(Object.fromEntries(some.json.agent_capability_grants.map((g: { capability: string; status: string }) => [g.capability, g.status]))).toEqual({ echo: 'active', weather_lookup: 'denied' });

    const b = await worldOf(alice);
    expect(code(await alice.post(`/people/me/approvals/${b.approvalId}`, { verdict: 'approve', capabilities: ['purge_all_data'] }))).toBe('400 invalid_request');
    const denied = await alice.post(`/people/me/approvals/${b.approvalId}`, { verdict: 'deny' });
    expect(denied.json.status).toBe('rejected');
    expect(code(await c.hostPost('/agent/device/code', b.host, { agent_id: b.waiting.id }))).toBe('403 access_denied');
  });

  it('a capability that needs proof of presence is never approved through the API (the page asks for a passkey)', async () => {
    const alice = await Person.signedIn('Alice');
    const a = await worldOf(alice);
    const risky = await c.register(a.host, { mode: 'delegated', capabilities: ['echo', 'transfer_money'] });
    const approval = (await alice.get('/people/me/approvals')).json.approvals.find((x: { agent: { agent_id: string } }) => x.agent.agent_id === risky.agent!.id);
    expect(approval.capabilities).toMatchObject([{ capability: 'transfer_money', approval_strength: 'presence' }]);
    const refused = await alice.post(`/people/me/approvals/${approval.approval_id}`, { verdict: 'approve' });
    expect(code(refused)).toBe('403 unauthorized');
    expect(refused.json.message).toMatch(/presence/);
    expect((await server.store.getAgent(risky.agent!.id))!.agent.status).toBe('pending');
    // Approving without it, or denying, needs no passkey.
    const without = await alice.post(`/people/me/approvals/${approval.approval_id}`, { verdict: 'approve', capabilities: [] });
    expect(without.json.status).toBe('active');
    expect(code(await alice.post(`/people/me/agents/${risky.agent!.id}/grants`, { capability: 'transfer_money' }))).toBe('403 unauthorized');
  });

  it('the owner grants a capability proactively: an active grant by them that execute honours, within its constraints; the same again is 409', async () => {
    const alice = await Person.signedIn('Alice');
    const a = await worldOf(alice);
    const res = await alice.post(`/people/me/agents/${a.active.id}/grants`, { capability: 'weather_lookup', constraints: { city: { in: ['Paris', 'Lyon'] } } });
    expect(res.status).toBe(201);
    expect(res.json).toMatchObject({ agent_id: a.active.id, grant: { capability: 'weather_lookup', status: 'active', granted_by: alice.personId, constraints: { city: { in: ['Paris', 'Lyon'] } } } });
    expect(res.json.grant.id).toEqual(expect.any(String));
    expect((await c.execute(a.active, 'weather_lookup', { city: 'Lyon' })).status).toBe(200);
    expect(code(await c.execute(a.active, 'weather_lookup', { city: 'Rome' }))).toBe('403 constraint_violated');
    expect(code(await alice.post(`/people/me/agents/${a.active.id}/grants`, { capability: 'weather_lookup', constraints: { city: { in: ['Paris', 'Lyon'] } } }))).toBe('409 already_granted');
    expect(code(await alice.post(`/people/me/agents/${a.active.id}/grants`, { capability: 'echo' }))).toBe('409 already_granted');
    // The admin API sees the same grant.
    const seen = (await c.admin('GET', `/admin/agents/${a.active.id}`)).json.agent_capability_grants;
    expect(seen.find((g: { id: string }) => g.id === res.json.grant.id)).toMatchObject({ status: 'active', granted_by: alice.personId });
  });

  it('a proactive grant cannot pass the catalog, the policy, the constraint checks or the agent lifecycle', async () => {
    const alice = await Person.signedIn('Alice');
    const a = await worldOf(alice);
    const grant = (body: unknown, agentId = a.active.id) => alice.post(`/people/me/agents/${agentId}/grants`, body);
    expect(code(await grant({ capability: 'no_such_capability' }))).toBe('400 invalid_capabilities');
    expect(code(await grant({ capability: 'purge_all_data' }))).toBe('400 invalid_capabilities');
    expect(code(await grant({ capability: 'weather_lookup', constraints: { city: { sounds_like: 'Paris' } } }))).toBe('400 unknown_constraint_operator');
    expect(code(await grant({ capability: 'weather_lookup', constraints: { city: { in: Array.from({ length: 300 }, (_, i) => `c${i}`) } } }))).toBe('400 invalid_request');
    expect(code(await grant({ capability: 'weather_lookup', constraints: 'Paris' }))).toBe('400 invalid_request');
    expect(code(await grant({ capability: 'weather_lookup' }, a.waiting.id))).toBe('403 agent_pending');
    await alice.post(`/people/me/agents/${a.active.id}/revoke`);
    expect(code(await grant({ capability: 'weather_lookup' }))).toBe('403 agent_revoked');
    expect((await server.store.getAgent(a.active.id))!.grants.some((g) => g.capability === 'weather_lookup')).toBe(false);
  });

  it('the owner revokes an agent: it can no longer execute, and revoking again changes nothing', async () => {
    const alice = await Person.signedIn('Alice');
    const a = await worldOf(alice);
    expect((await c.execute(a.active, 'echo', {})).status).toBe(200);
    const res = await alice.post(`/people/me/agents/${a.active.id}/revoke`);
    expect(res.json).toMatchObject({ agent_id: a.active.id, status: 'revoked' });
    expect(res.json.agent_capability_grants.every((g: { status: string }) => g.status === 'revoked')).toBe(true);
    expect(code(await c.execute(a.active, 'echo', {}))).toBe('403 agent_revoked');
    expect((await alice.post(`/people/me/agents/${a.active.id}/revoke`)).json.status).toBe('revoked');
    // The waiting one's approval goes with it.
    await alice.post(`/people/me/agents/${a.waiting.id}/revoke`);
    expect((await alice.get('/people/me/approvals')).json.approvals).toEqual([]);
  });

  it('the owner revokes one grant by its id: that capability stops at once, the others keep working', async () => {
    const alice = await Person.signedIn('Alice');
    const a = await worldOf(alice);
    const weather = (await alice.post(`/people/me/agents/${a.active.id}/grants`, { capability: 'weather_lookup' })).json.grant.id;
    const res = await alice.post(`/people/me/agents/${a.active.id}/grants/${weather}/revoke`);
    expect(res.json).toMatchObject({ agent_id: a.active.id, grant: { id: weather, capability: 'weather_lookup', status: 'revoked' } });
    expect(code(await c.execute(a.active, 'weather_lookup', { city: 'Paris' }))).toBe('403 grant_revoked');
    expect((await c.execute(a.active, 'echo', {})).status).toBe(200);
    // A grant id is looked up within the named agent only.
    const echoOfWaiting = (await server.store.getAgent(a.waiting.id))!.grants.find((g) => g.capability === 'echo')!.id;
    expect(code(await alice.post(`/people/me/agents/${a.active.id}/grants/${echoOfWaiting}/revoke`))).toBe('404 not_found');
    // Withdrawing the pending grant the approval decides leaves the registration to decide.
    const pending = (await server.store.getAgent(a.waiting.id))!.grants.find((g) => g.status === 'pending')!.id;
    expect((await alice.post(`/people/me/agents/${a.waiting.id}/grants/${pending}/revoke`)).json.grant.status).toBe('revoked');
    const left = (await alice.get('/people/me/approvals')).json.approvals;
    expect(left).toMatchObject([{ approval_id: a.approvalId, registration: true, capabilities: [] }]);
  });

  it('the owner revokes a host: the host and every agent on it are revoked, and it stays listed as revoked', async () => {
    const alice = await Person.signedIn('Alice');
    const a = await worldOf(alice);
    const res = await alice.post(`/people/me/hosts/${a.hostId}/revoke`);
    expect(res.json).toEqual({ host_id: a.hostId, status: 'revoked', agents_revoked: 2 });
    expect(code(await c.execute(a.active, 'echo', {}))).toBe('403 host_revoked');
    expect((await alice.get('/people/me/hosts')).json.hosts).toMatchObject([{ host_id: a.hostId, status: 'revoked' }]);
    expect((await alice.get('/people/me/agents')).json.agents.map((x: { status: string }) => x.status)).toEqual(['revoked', 'revoked']);
    expect((await alice.get('/people/me/approvals')).json.approvals).toEqual([]);
  });

  it('unlinking a host withdraws its trust: its agents are revoked, it is pending with no defaults, and its next delegated agent waits for a person again', async () => {
    const alice = await Person.signedIn('Alice');
    const a = await worldOf(alice);
    const res = await alice.post(`/people/me/hosts/${a.hostId}/unlink`);
    expect(res.json).toEqual({ host_id: a.hostId, status: 'pending', linked: false, agents_revoked: 2 });
    expect(code(await c.execute(a.active, 'echo', {}))).toBe('403 agent_revoked');
    expect((await c.admin('GET', `/admin/agents/${a.waiting.id}`)).json.status).toBe('revoked');
    const host = (await c.admin('GET', `/admin/hosts/${a.hostId}`)).json;
    expect(host.status).toBe('pending');
    expect(host.default_capabilities).toEqual([]);
    expect(host).not.toHaveProperty('user_id');
    // It is no longer Alice's: gone from her lists, and her ids for it answer 404.
    expect((await alice.get('/people/me/hosts')).json.hosts).toEqual([]);
    expect((await alice.get('/people/me/agents')).json.agents).toEqual([]);
    expect(code(await alice.post(`/people/me/hosts/${a.hostId}/unlink`))).toBe('404 host_not_found');
    expect(code(await alice.post(`/people/me/agents/${a.active.id}/revoke`))).toBe('404 agent_not_found');
    // A new delegated agent of the host, even asking only for its default, waits for a person's approval.
    const next = await c.register(a.host, { mode: 'delegated', capabilities: ['echo'] });
    expect(next.res.json.status).toBe('pending');
    expect(next.res.json.approval.user_code).toEqual(expect.any(String));
    // Whoever approves it through the page links the host to themselves.
    const bob = new PersonBrowser(server.baseUrl);
    const page = await bob.signIn(`Bob-${++seq}`, `/device?user_code=${next.res.json.approval.user_code}`);
    const decided = await bob.request('POST', '/device/decision', {
      csrf: bob.csrfOf(page.text), agent_id: next.agent!.id, approval_id: /name="approval_id" value="([^"]+)"/.exec(page.text)![1]!, verdict: 'approve', capabilities: ['echo'],
    });
    expect(decided.status).toBe(200);
    expect((await c.admin('GET', `/admin/hosts/${a.hostId}`)).json.user_id).toMatch(/^dev\|Bob-/);
  });

  it('an administrator linking the host to someone else withdraws the first person\'s trust: no agent keeps acting for a person who no longer answers for the host', async () => {
    const alice = await Person.signedIn('Alice');
    const a = await worldOf(alice);
    const bob = await Person.signedIn('Bob');
    // An administrator links Alice's host to Bob: Alice's agents are revoked with her link.
    await c.admin('POST', '/admin/hosts', { public_key: a.host.publicJwk, default_capabilities: ['echo'], user_id: bob.personId });
    expect(code(await c.execute(a.active, 'echo', {}))).toBe('403 agent_revoked');
    const bobs = await c.register(a.host, { mode: 'delegated', capabilities: ['echo'] });
    expect(bobs.res.json.status).toBe('active');
    // Back to Alice: Bob's agent goes with Bob's link, and Alice unlinking then has nothing left to revoke.
    await c.admin('POST', '/admin/hosts', { public_key: a.host.publicJwk, default_capabilities: ['echo'], user_id: alice.personId });
    expect(code(await c.execute(bobs.agent!, 'echo', {}))).toBe('403 agent_revoked');
    expect((await alice.post(`/people/me/hosts/${a.hostId}/unlink`)).json.agents_revoked).toBe(0);
  });

  it("a host an administrator linked to another person is no longer the first person's", async () => {
    const alice = await Person.signedIn('Alice');
    const bob = await Person.signedIn('Bob');
    const a = await worldOf(alice);
    const relinked = await c.admin('POST', '/admin/hosts', { public_key: a.host.publicJwk, default_capabilities: ['echo'], user_id: bob.personId });
    expect(relinked.json.user_id).toBe(bob.personId);
    expect((await alice.get('/people/me/hosts')).json.hosts).toEqual([]);
    expect((await alice.get('/people/me/agents')).json.agents).toEqual([]);
    expect(code(await alice.post(`/people/me/hosts/${a.hostId}/revoke`))).toBe('404 host_not_found');
    expect(code(await alice.post(`/people/me/agents/${a.waiting.id}/revoke`))).toBe('404 agent_not_found');
    // Bob sees the host, but its agents act for Alice: they stay out of his reach (an
    // administrator decides them now).
    expect((await bob.get('/people/me/hosts')).json.hosts.map((h: { host_id: string }) => h.host_id)).toEqual([a.hostId]);
    expect((await bob.get('/people/me/agents')).json.agents).toEqual([]);
    expect((await bob.get('/people/me/approvals')).json.approvals).toEqual([]);
    expect(code(await bob.post(`/people/me/agents/${a.active.id}/revoke`))).toBe('404 agent_not_found');
    expect(code(await bob.post(`/people/me/approvals/${a.approvalId}`, { verdict: 'approve' }))).toBe('404 not_found');
  });

  it('the admin API keeps working on the agents and hosts people manage', async () => {
    const alice = await Person.signedIn('Alice');
    const a = await worldOf(alice);
    // An approval the person sees can still be decided by automation, after which it is gone from the list.
    const approved = await c.admin('POST', `/admin/agents/${a.waiting.id}/approve`, { user_id: alice.personId, capabilities: ['weather_lookup'] });
    expect(approved.json.status).toBe('active');
    expect((await alice.get('/people/me/approvals')).json.approvals).toEqual([]);
    expect((await alice.get('/people/me/agents')).json.agents.find((x: { agent_id: string }) => x.agent_id === a.waiting.id).status).toBe('active');
    // A person's revocation is what the admin reads; the admin's revocation is what the person reads.
    await alice.post(`/people/me/agents/${a.waiting.id}/revoke`);
    expect((await c.admin('GET', `/admin/agents/${a.waiting.id}`)).json.status).toBe('revoked');
    expect((await c.admin('POST', `/admin/hosts/${a.hostId}/revoke`)).json.status).toBe('revoked');
    expect(code(await c.execute(a.active, 'echo', {}))).toBe('403 host_revoked');
    expect((await alice.get('/people/me/hosts')).json.hosts[0].status).toBe('revoked');
  });
});
