// The smaller suspicions of the consent audit, each test named after the attack it stops, over real
// HTTP: a page decision for an agent that acts for someone else, session cookies another site could
// plant or read on https, /readyz telling anyone what Redis said, the people's lists reading every
// agent at once, and a presence capability on a server where passkeys cannot work (an IP issuer).
// Return paths (safeReturnTo) are unit-tested in test/unit/security.return-to.test.ts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, code, http, type TestAgent } from '../support/client.ts';
import { capturingLogger, checkboxOf, decideOnPage, PeopleApi, visibleText } from '../support/consent.ts';
import { newEd25519 } from '../support/keys.ts';
import { PersonBrowser } from '../support/person-browser.ts';
import { startThrowawayRedis, type ThrowawayRedis } from '../support/redis.ts';
import { forEachStore, startTestServer, type TestServer } from '../support/server.ts';
import { dataBlock } from '../support/software-passkey.ts';

const DEV = { INSECURE_DEV_SIGN_IN: 'true' };

forEachStore('page decisions and presence on an IP issuer', (storeKind) => {
  let server: TestServer;
  let c: Client;
  let seq = 0;

  beforeAll(async () => {
    // The tests' default issuer, http://127.0.0.1:<port>: an IP address, never a WebAuthn RP id.
    server = await startTestServer({ store: storeKind, env: DEV });
    c = new Client(server);
    expect(server.baseUrl).toMatch(/^http:\/\/127\.0\.0\.1:/);
  });
  afterAll(() => server.close());

  const person = async (prefix: string) => {
    const name = `${prefix}-${storeKind}-${++seq}`;
    const browser = new PersonBrowser(server.baseUrl);
    await browser.signIn(name);
    return { name, personId: `dev|${name}`, browser, api: new PeopleApi(browser, server.baseUrl) };
  };
  const grantsOf = async (agentId: string) => Object.fromEntries((await server.store.getAgent(agentId))!.grants.map((g) => [g.capability, g.status]));

  /**
   * An active agent of Alice's with an open approval for weather_lookup: its host linked to her by
   * her approval on the page, the agent naming her as its person.
   */
  async function alicesAgentAsking(alice: Awaited<ReturnType<typeof person>>) {
    const { res, agent } = await c.register(await newEd25519(), { mode: 'delegated', capabilities: ['echo'] });
    const first = await decideOnPage(alice.browser, res.json.approval.user_code, agent!.id, { capabilities: ['echo'] });
    expect(first.decided.status).toBe(200);
    const asked = await c.requestCapability(agent!, { capabilities: ['weather_lookup'] });
    expect(asked.json.status).toBe('pending');
    const snapshot = (await server.store.getAgent(agent!.id))!;
    expect(snapshot.agent.userId).toBe(alice.personId);
    return { agent: agent!, hostId: res.json.host_id as string, approvalId: snapshot.agent.approval!.id, userCode: asked.json.approval.user_code as string };
  }

  /** A forged decision: everything the form would carry, sent by a session that was never shown the page. */
  async function forgedDecision(from: Awaited<ReturnType<typeof person>>, agent: TestAgent, approvalId: string) {
    return from.browser.request('POST', '/device/decision', {
      csrf: (await from.api.get('/people/me')).json.csrf_token, agent_id: agent.id, approval_id: approvalId, verdict: 'approve', capabilities: ['weather_lookup'],
    });
  }

  it("a decision on the page for an agent whose own person is someone else is refused, even when its host's record names the decider (or nobody)", async () => {
    const alice = await person('Alice');
    const { agent, hostId, approvalId, userCode } = await alicesAgentAsking(alice);
    const bob = await person('Bob');

    // The host's record names Bob now (as a relink that did not withdraw Alice's trust would leave it).
    await server.store.updateHost(hostId, { userId: bob.personId });
    expect((await bob.browser.request('GET', `/device?user_code=${userCode}`)).status).toBe(400);
    const byBob = await forgedDecision(bob, agent, approvalId);
    expect(byBob.status).toBe(404);
    expect(visibleText(byBob.text)).toContain('This approval is no longer open');

    // The host's record names nobody (its link gone, the agent still Alice's): anyone else is refused too.
    await server.store.updateHost(hostId, { userId: null });
    const mallory = await person('Mallory');
    expect((await mallory.browser.request('GET', `/device?user_code=${userCode}`)).status).toBe(400);
    expect((await forgedDecision(mallory, agent, approvalId)).status).toBe(404);

    expect(await grantsOf(agent.id)).toEqual({ echo: 'active', weather_lookup: 'pending' });
    expect(code(await c.execute(agent, 'weather_lookup', { city: 'Oslo' }))).toBe('403 capability_not_granted');
    // The agent's own person still can.
    const byAlice = await decideOnPage(alice.browser, userCode, agent.id, { capabilities: ['weather_lookup'] });
    expect(byAlice.decided.status).toBe(200);
    expect(await grantsOf(agent.id)).toEqual({ echo: 'active', weather_lookup: 'active' });
  });

  it('on an IP issuer the presence capability is disabled and unticked; a forged approval of it is 403 (never 5xx) linking back to the request; approving the rest works and the page says what was not approved', async () => {
    const pat = await person('Pat');
    const { res, agent } = await c.register(await newEd25519(), { mode: 'delegated', name: 'treasury bot', capabilities: ['echo', 'transfer_money'] });
    const userCode = res.json.approval.user_code as string;
    const page = await pat.browser.request('GET', `/device?user_code=${userCode}`);
    expect(page.status).toBe(200);
    const transfer = checkboxOf(page.text, 'transfer_money');
    expect(transfer).toMatch(/\bdisabled\b/);
    expect(transfer).not.toMatch(/\bchecked\b/);
    expect(checkboxOf(page.text, 'echo')).toMatch(/\bchecked\b/);
    expect(dataBlock(page.text, 'presence-options')).toBeNull();
    expect(visibleText(page.text)).toContain('needs a passkey, which this server cannot use (its address is an IP address)');
    expect(visibleText(page.text)).toContain('it cannot be approved here now and is left unticked');

    // The form a browser cannot send (the box is disabled), forged.
    const forged = await pat.browser.request('POST', '/device/decision', {
      csrf: pat.browser.csrfOf(page.text, '/device/decision'), agent_id: agent!.id, approval_id: /name="approval_id" value="([^"]+)"/.exec(page.text)![1]!,
      user_code: userCode, verdict: 'approve', capabilities: ['echo', 'transfer_money'],
    });
    expect(forged.status).toBe(403);
    expect(visibleText(forged.text)).toContain('Approving transfer_money needs a passkey, which this server cannot use');
    expect(forged.text).toContain(`<a href="/device?user_code=${userCode}">Back to the request</a>`);
    expect((await server.store.getAgent(agent!.id))!.agent.status).toBe('pending');

    // The passkey page says the same, as a refusal, not a server error.
    const addPage = await pat.browser.request('GET', '/passkeys/new');
    expect(addPage.status).toBe(403);
    expect(visibleText(addPage.text)).toContain('Passkeys cannot work on this server');

    const { decided } = await decideOnPage(pat.browser, userCode, agent!.id, { capabilities: ['echo'] });
    expect(decided.status).toBe(200);
    const said = visibleText(decided.text);
    expect(said).toContain('You approved the agent that calls itself treasury bot');
    expect(said).toContain('It may now: echo');
    expect(said).toContain('Not approved (it may ask again): transfer_money');
    expect(said).not.toMatch(/refused/i);
    expect(await grantsOf(agent!.id)).toEqual({ echo: 'active', transfer_money: 'denied' });
    expect((await c.execute(agent!, 'echo', {})).status).toBe(200);
    expect(code(await c.execute(agent!, 'transfer_money', { amount: 1 }))).toBe('403 capability_not_granted');
  });

  it("the people's agents come in pages of at most 200 with next_cursor: 450 agents over three hosts are 200, 200 and 50, each agent once", async () => {
    const owner = await person('Quinn');
    const expected = new Set<string>();
    for (let h = 0; h < 3; h++) {
      const host = await newEd25519();
      expect((await c.admin('POST', '/admin/hosts', { public_key: host.publicJwk, default_capabilities: ['echo'], user_id: owner.personId })).status).toBe(201);
      for (let start = 0; start < 150; start += 25) {
        const made = await Promise.all(Array.from({ length: 25 }, () => c.register(host, { mode: 'delegated', capabilities: ['echo'] })));
        for (const { res, agent } of made) {
          expect(res.status, res.text).toBe(200);
          expected.add(agent!.id);
        }
      }
    }
    expect(expected.size).toBe(450);

    const sizes: number[] = [];
    const cursors: Array<string | null> = [];
    const seen: string[] = [];
    let cursor: string | null = null;
    for (let page = 0; page < 5; page++) {
      const res = await owner.api.get(`/people/me/agents${cursor === null ? '' : `?cursor=${encodeURIComponent(cursor)}`}`);
      expect(res.status, res.text).toBe(200);
      sizes.push(res.json.agents.length);
      seen.push(...res.json.agents.map((a: { agent_id: string }) => a.agent_id));
      cursor = res.json.next_cursor;
      cursors.push(cursor);
      if (cursor === null) break;
    }
    expect(sizes).toEqual([200, 200, 50]);
    expect(cursors.map((v) => (v === null ? null : 'cursor'))).toEqual(['cursor', 'cursor', null]);
    expect(seen).toHaveLength(450);
    expect(new Set(seen)).toEqual(expected);
    // The approvals list pages the same way (none are open here), and a made-up cursor is refused.
    const approvals = await owner.api.get('/people/me/approvals');
    expect(approvals.json).toEqual({ approvals: [], next_cursor: expect.any(String) });
    expect(code(await owner.api.get('/people/me/agents?cursor=not-a-cursor'))).toBe('400 invalid_request');
  }, 60_000);
});

describe('session cookies on an https issuer take the __Host- prefix, Secure and Path=/', () => {
  let server: TestServer;
  beforeAll(async () => {
    // Served over http on loopback, but the issuer people use is https: the cookies are set for that.
    server = await startTestServer({ store: 'memory', env: { ...DEV, ISSUER: 'https://agentgate.test' } });
  });
  afterAll(() => server.close());

  /** The Set-Cookie lines of a response, by cookie name. */
  const setCookies = (headers: Headers) => new Map(headers.getSetCookie().map((line) => [line.split('=')[0]!, line]));
  const expectHostPrefixed = (line: string | undefined) => {
    expect(line).toBeDefined();
    expect(line).toMatch(/;\s*Secure(;|$)/i);
    expect(line).toMatch(/;\s*Path=\/(;|$)/i);
    expect(line).toMatch(/;\s*HttpOnly/i);
    expect(line).toMatch(/;\s*SameSite=Lax/i);
    expect(line).not.toMatch(/;\s*Domain=/i);
  };

  it('the sign-in cookie and the session cookie are __Host-agentgate_signin and __Host-agentgate_session, and only those names are read', async () => {
    const browser = new PersonBrowser(server.baseUrl);
    const form = await browser.request('GET', '/signin?return_to=%2Fdevice');
    const formCookies = setCookies(form.headers);
    expect([...formCookies.keys()]).toEqual(['__Host-agentgate_signin']);
    expectHostPrefixed(formCookies.get('__Host-agentgate_signin'));

    const posted = await browser.request('POST', '/signin/dev', { name: 'Hedy', csrf: browser.csrfOf(form.text, '/signin/dev'), return_to: '/device' });
    expect(posted.status).toBe(303);
    const signedIn = setCookies(posted.headers);
    expectHostPrefixed(signedIn.get('__Host-agentgate_session'));
    // The sign-in cookie is cleared with the same attributes (a browser ignores a __Host- cookie set without them).
    expectHostPrefixed(signedIn.get('__Host-agentgate_signin'));
    expect(signedIn.get('__Host-agentgate_signin')).toMatch(/Expires=Thu, 01 Jan 1970/i);
    expect([...browser.jar.keys()]).toEqual(['__Host-agentgate_session']);

    const api = new PeopleApi(browser, server.baseUrl);
    expect((await api.get('/people/me')).json.person_id).toBe('dev|Hedy');
    expect((await browser.request('GET', '/device')).status).toBe(200);

    // The same session id under the unprefixed name (what a sibling site could plant) is not read.
    const planted = new PersonBrowser(server.baseUrl);
    planted.cookie = `agentgate_session=${browser.jar.get('__Host-agentgate_session')}`;
    expect(code(await new PeopleApi(planted, server.baseUrl).get('/people/me'))).toBe('401 authentication_required');
    expect((await planted.request('GET', '/device')).status).toBe(303);

    const out = await browser.request('POST', '/signout', { csrf: (await api.get('/people/me')).json.csrf_token });
    expect(out.status).toBe(303);
    expectHostPrefixed(setCookies(out.headers).get('__Host-agentgate_session'));
  });

  it('on a plain-http issuer the cookies keep their plain names and are not Secure (a browser would drop them)', async () => {
    const plain = await startTestServer({ store: 'memory', env: DEV });
    try {
      const browser = new PersonBrowser(plain.baseUrl);
      const form = await browser.request('GET', '/signin');
      const posted = await browser.request('POST', '/signin/dev', { name: 'Ida', csrf: browser.csrfOf(form.text, '/signin/dev'), return_to: '/device' });
      const line = setCookies(posted.headers).get('agentgate_session');
      expect(line).toMatch(/HttpOnly/i);
      expect(line).not.toMatch(/;\s*Secure/i);
    } finally {
      await plain.close();
    }
  });
});

describe('/readyz with the store down', () => {
  let redis: ThrowawayRedis;
  let server: TestServer;
  const { logger, lines } = capturingLogger();
  beforeAll(async () => {
    redis = await startThrowawayRedis();
    server = await startTestServer({ store: 'redis', redisUrl: redis.url, logger, env: { REDIS_COMMAND_TIMEOUT_MS: '500' } });
  });
  afterAll(async () => {
    await server.close();
    await redis.stop();
  });

  it("answers 503 naming the store, without the store's own error text (that goes to the log), and recovers", async () => {
    expect((await http('GET', `${server.baseUrl}/readyz`)).status).toBe(200);
    const port = redis.port;
    await redis.stop();
    const mark = lines.length;
    const ready = await http('GET', `${server.baseUrl}/readyz`);
    expect(ready.status).toBe(503);
    expect(ready.json).toMatchObject({
      error: 'service_unavailable', status: 'not_ready',
      message: 'not ready: the redis store cannot be reached (the log says why)',
      checks: { store: { ok: false, kind: 'redis', problem: 'the redis store cannot be reached (the log says why)' } },
    });
    // What Redis (or its client) said stays in the log, with the request id the body names.
    const logged = lines.slice(mark).find((l) => l.msg === 'readiness: the store cannot be reached');
    expect(logged).toBeDefined();
    const why = String((logged!.fields.err as Error)?.message ?? logged!.fields.err);
    expect(why.length).toBeGreaterThan(0);
    expect(ready.text).not.toContain(why);
    for (const detail of [String(port), '127.0.0.1', 'ECONNREFUSED', 'closed', 'timed out', 'timeout', 'writeable', 'redis://']) expect(ready.text).not.toContain(detail);
    expect((await http('GET', `${server.baseUrl}/healthz`)).status).toBe(200);

    redis = await startThrowawayRedis([], { port });
    await expect.poll(async () => (await http('GET', `${server.baseUrl}/readyz`)).status, { timeout: 10_000 }).toBe(200);
  }, 30_000);
});
