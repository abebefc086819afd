// The approval page over HTTP, as a person's browser uses it (without the browser: fetch with a
// cookie jar). Dev sign-in stands in for the OpenID Connect provider; each test is named after the
// guarantee it protects. Both stores.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Client, code, http } from '../support/client.ts';
import { newEd25519 } from '../support/keys.ts';
import { PersonBrowser as Browser } from '../support/person-browser.ts';
import { forEachStore, startTestServer, type TestServer } from '../support/server.ts';

forEachStore('the approval page', (storeKind) => {
  let server: TestServer;
  let c: Client;

  beforeAll(async () => {
    server = await startTestServer({ store: storeKind, env: { INSECURE_DEV_SIGN_IN: 'true', SIGN_IN_FRESH_SECONDS: '300' } });
    c = new Client(server);
  });
  afterAll(() => server.close());

  const pendingAgent = async (body: Record<string, unknown> = {}) => {
    const { res, agent } = await c.register(await newEd25519(), { mode: 'delegated', capabilities: ['echo', 'weather_lookup'], ...body });
    expect(res.json.status).toBe('pending');
    return { agent: agent!, userCode: res.json.approval.user_code as string };
  };

  it("the policy's reason is shown as agentgate's, never as the agent's words; a reason the agent gave is shown as its claim", async () => {
    const silent = await pendingAgent({ name: 'quiet bot' });
    const page = await new Browser(server.baseUrl).signIn(`Ivy-${storeKind}`, `/device?user_code=${silent.userCode}`);
    expect(page.status).toBe(200);
    // The policy's "user approval required" is why it waits, said as agentgate's, not as the agent's words.
    expect(page.text).toContain('<p class="limits policy">agentgate asks you because: user approval required</p>');
    expect(page.text).not.toMatch(/Says why<\/dt><dd[^>]*>[^<]*user approval required/);
    expect(page.text).not.toContain('Note on this request');
    const talkative = await pendingAgent({ name: 'chatty bot', reason: 'to plan the trip' });
    const told = await new Browser(server.baseUrl).signIn(`Ivo-${storeKind}`, `/device?user_code=${talkative.userCode}`);
    expect(told.text).toMatch(/<dt>Says why<\/dt><dd class="quoted">to plan the trip/);
    expect(told.text).not.toMatch(/Says why<\/dt><dd[^>]*>[^<]*user approval required/);
  });

  it('a person signs in, enters the code, approves one of two capabilities; the agent is active with one grant denied', async () => {
    const { agent, userCode } = await pendingAgent({ name: 'report bot' });
    const browser = new Browser(server.baseUrl);
    const first = await browser.request('GET', `/device?user_code=${userCode}`);
    expect(first.status).toBe(303);
    expect(first.headers.get('location')).toMatch(/^\/signin\?return_to=/);
    const page = await browser.signIn('Alice', `/device?user_code=${userCode.toLowerCase().replace('-', '')}`);
    expect(page.status).toBe(200);
    expect(page.text).toContain('report bot');
    expect(page.text).toContain('Only approve if you started this yourself');
    expect(page.text).toMatch(/value="echo"[^>]*checked/);
    const decided = await browser.request('POST', '/device/decision', {
      csrf: browser.csrfOf(page.text), agent_id: agent.id, approval_id: /name="approval_id" value="([^"]+)"/.exec(page.text)![1]!, verdict: 'approve', capabilities: ['echo'],
    });
    expect(decided.status).toBe(200);
    expect(decided.text).toContain('You approved');
    // The page says back exactly what was allowed and what was refused.
    expect(decided.text).toMatch(/It may now:<\/p><ul><li><code>echo<\/code>, with no limits on its arguments<\/li><\/ul>/);
    expect(decided.text).toMatch(/Not approved \(it may ask again\):<\/p><ul><li><code>weather_lookup<\/code><\/li><\/ul>/);
    const status = (await c.status(agent.host, agent.id)).json;
    expect(status.status).toBe('active');
    expect(Object.fromEntries(status.agent_capability_grants.map((g: { capability: string; status: string }) => [g.capability, g.status]))).toEqual({ echo: 'active', weather_lookup: 'denied' });
    expect(status.user_id).toBe('dev|Alice');
    // The code is single use: it finds nothing now.
    expect((await browser.request('GET', `/device?user_code=${userCode}`)).status).toBe(400);
  });

  it('a denial from the page makes the agent rejected, and it is final', async () => {
    const { agent, userCode } = await pendingAgent();
    const browser = new Browser(server.baseUrl);
    const page = await browser.signIn('Bob', `/device?user_code=${userCode}`);
    const approvalId = /name="approval_id" value="([^"]+)"/.exec(page.text)![1]!;
    const denied = await browser.request('POST', '/device/decision', { csrf: browser.csrfOf(page.text), agent_id: agent.id, approval_id: approvalId, verdict: 'deny' });
    expect(denied.text).toContain('You denied');
    expect((await c.status(agent.host, agent.id)).json.status).toBe('rejected');
    expect(code(await c.hostPost('/agent/device/code', agent.host, { agent_id: agent.id }))).toBe('403 access_denied');
    // The same code again is told apart from a mistyped one: it was used, and a new one is needed.
    const again = await browser.request('GET', `/device?user_code=${userCode}`);
    expect(again.status).toBe(400);
    expect(again.text).toContain('That code was used already, or the agent asked again since (a code works once). Ask your agent for the code it shows now.');
    const typo = await browser.request('GET', '/device?user_code=BCDF-GHJK');
    expect(typo.text).toContain('That code is not valid. Check it against the one your agent shows and try again.');
  });

  it('every string the agent chose is shown as text, never as markup', async () => {
    const { userCode } = await pendingAgent({ name: '<script>alert(1)</script><a href="https://evil.example">click</a>', reason: '\u202eevil\u0000 <img src=x onerror=alert(1)>' });
    const browser = new Browser(server.baseUrl);
    const page = await browser.signIn('Carol', `/device?user_code=${userCode}`);
    expect(page.text).not.toContain('<script>alert(1)');
    expect(page.text).not.toContain('<a href="https://evil.example"');
    expect(page.text).not.toContain('<img src=x');
    expect(page.text).toContain('&lt;script&gt;alert(1)&lt;/script&gt;');
    expect(page.text).not.toContain('\u202e');
    expect(page.text).not.toMatch(/<script(?![^>]*\bsrc=)/);
  });

  it('pages forbid script, framing and caching, and the session cookie is HttpOnly and SameSite=Lax', async () => {
    const browser = new Browser(server.baseUrl);
    const form = await browser.request('GET', '/signin');
    expect(form.headers.get('content-security-policy')).toMatch(/default-src 'none'.*frame-ancestors 'none'/);
    expect(form.headers.get('x-frame-options')).toBe('DENY');
    expect(form.headers.get('cache-control')).toBe('no-store');
    const posted = await fetch(new URL('/signin/dev', server.baseUrl), {
      method: 'POST', redirect: 'manual', headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ name: 'Dan', csrf: browser.csrfOf(form.text), return_to: '/device' }).toString(),
    });
    // No cookie was sent with the form, so its CSRF token belongs to no session: refused.
    expect(posted.status).toBe(403);
    const b = new Browser(server.baseUrl);
    const f = await b.request('GET', '/signin');
    const res = await fetch(new URL('/signin/dev', server.baseUrl), {
      method: 'POST', redirect: 'manual', headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: b.cookie },
      body: new URLSearchParams({ name: 'Dan', csrf: b.csrfOf(f.text), return_to: '/device' }).toString(),
    });
    expect(res.status).toBe(303);
    const cookie = res.headers.get('set-cookie')!;
    expect(cookie).toMatch(/HttpOnly/i);
    expect(cookie).toMatch(/SameSite=Lax/i);
  });

  it('a form without the session CSRF token is refused and decides nothing', async () => {
    const { agent, userCode } = await pendingAgent();
    const browser = new Browser(server.baseUrl);
    const page = await browser.signIn('Erin', `/device?user_code=${userCode}`);
    const approvalId = /name="approval_id" value="([^"]+)"/.exec(page.text)![1]!;
    const forged = await browser.request('POST', '/device/decision', { csrf: 'x'.repeat(43), agent_id: agent.id, approval_id: approvalId, verdict: 'approve', capabilities: ['echo'] });
    expect(forged.status).toBe(403);
    expect((await server.store.getAgent(agent.id))!.agent.status).toBe('pending');
  });

  it('guessing codes is stopped after five wrong ones in a session', async () => {
    const browser = new Browser(server.baseUrl);
    await browser.signIn('Frank');
    for (let i = 0; i < 5; i++) expect((await browser.request('GET', '/device?user_code=BCDF-GHJK')).status).toBe(400);
    const { userCode } = await pendingAgent();
    const blocked = await browser.request('GET', `/device?user_code=${userCode}`);
    expect(blocked.status).toBe(429);
    expect(blocked.text).toContain('Too many wrong codes');
  });

  it('a sign-in older than SIGN_IN_FRESH_SECONDS is sent through sign-in again before it can decide', async () => {
    const { userCode } = await pendingAgent();
    const browser = new Browser(server.baseUrl);
    await browser.signIn('Grace', `/device?user_code=${userCode}`);
    server.clock.advance(301_000);
    try {
      const again = await browser.request('GET', `/device?user_code=${userCode}`);
      expect(again.status).toBe(303);
      expect(again.headers.get('location')).toMatch(/^\/signin/);
    } finally {
      server.clock.advance(-301_000);
    }
  });

  it("once a host is linked to a person, another person's code lookups find nothing", async () => {
    const host = await newEd25519();
    const first = await c.register(host, { mode: 'delegated', capabilities: ['echo'] });
    const alice = new Browser(server.baseUrl);
    const page = await alice.signIn('Heidi', `/device?user_code=${first.res.json.approval.user_code}`);
    await alice.request('POST', '/device/decision', {
      csrf: alice.csrfOf(page.text), agent_id: first.agent!.id, approval_id: /name="approval_id" value="([^"]+)"/.exec(page.text)![1]!, verdict: 'approve', capabilities: ['echo'],
    });
    const second = await c.register(host, { mode: 'delegated', capabilities: ['weather_lookup'] });
    expect(second.res.json.status).toBe('pending');
    const mallory = new Browser(server.baseUrl);
    const seen = await mallory.signIn('Mallory', `/device?user_code=${second.res.json.approval.user_code}`);
    expect(seen.status).toBe(400);
    expect((await http('GET', c.url('/healthz'))).status).toBe(200);
  });
});
