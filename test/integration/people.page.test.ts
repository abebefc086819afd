// The account page over HTTP (http/device/account.ts), as a person's browser uses it without the
// browser: fetch with a cookie jar (test/support/person-browser.ts), the dev sign-in standing in for
// the identity provider, passkeys played by a software authenticator. Each test is named after the
// guarantee it protects or the attack it stops; both stores. Passkeys need the issuer on a host
// name, so the server is reached as http://localhost:<port>. Freshness windows move on the server's
// ManualClock, never by waiting. The same page in Chromium: browser.people.test.ts.
import { beforeAll, expect, it } from 'vitest';
import { Client, code, http, type TestAgent } from '../support/client.ts';
import { addPasskeyOnPage, decideOnPage, devSignedIn, visibleText } from '../support/consent.ts';
import { newEd25519, type TestKey } from '../support/keys.ts';
import { PersonBrowser } from '../support/person-browser.ts';
import { forEachStore, testServerForBlock } from '../support/server.ts';
import { dataBlock, SoftwarePasskey } from '../support/software-passkey.ts';

const FRESH_SECONDS = 300;

forEachStore('the account page', (storeKind) => {
  const server = testServerForBlock({ store: storeKind, issuerHost: 'localhost', env: { INSECURE_DEV_SIGN_IN: 'true', SIGN_IN_FRESH_SECONDS: String(FRESH_SECONDS) } });
  const c = new Client(server);
  let origin: string;
  let seq = 0;
  beforeAll(() => {
    origin = server.baseUrl;
  });

  /** A person signed in through the dev sign-in, on their account page. */
  async function person(prefix: string) {
    const { landed, ...signedIn } = await devSignedIn(server.baseUrl, `${prefix}-${storeKind}-${++seq}`, '/account');
    expect(landed.status, landed.text.slice(0, 1500)).toBe(200);
    return signedIn;
  }
  type Person = Awaited<ReturnType<typeof person>>;

  /** The person's account page, 200. */
  async function accountOf(who: Person, path = '/account') {
    const page = await who.browser.request('GET', path);
    expect(page.status, page.text.slice(0, 1500)).toBe(200);
    return page;
  }

  /** An agent the person approved on the approval page (echo and weather_lookup, the latter limited). */
  async function approvedAgent(who: Person, body: Record<string, unknown> = {}, host?: TestKey) {
    const { res, agent } = await c.register(host ?? await newEd25519(), {
      mode: 'delegated', name: 'trip planner', capabilities: ['echo', { name: 'weather_lookup', constraints: { city: { in: ['Oslo', 'Bergen'] } } }], ...body,
    });
    expect(res.json.status, res.text).toBe('pending');
    const { decided } = await decideOnPage(who.browser, res.json.approval.user_code, agent!.id, { capabilities: ['echo', 'weather_lookup'] });
    expect(decided.status, visibleText(decided.text)).toBe(200);
    return { agent: agent!, hostId: res.json.host_id as string };
  }

  /** A form of the account page, as the browser would post it from `page`. */
  const formOn = (who: Person, page: { text: string }, action: string, fields: Record<string, string>) =>
    who.browser.request('POST', action, { csrf: who.browser.csrfOf(page.text, action), ...fields });

  const grantsOf = async (agentId: string) => Object.fromEntries((await server.store.getAgent(agentId))!.grants.map((g) => [g.capability, g.status]));
  const grantIdOf = async (agentId: string, capability: string) => (await server.store.getAgent(agentId))!.grants.find((g) => g.capability === capability)!.id;

  it('GET / sends a browser to the account page (and on to sign in) and a machine to the discovery document, with 303 and Vary: Accept', async () => {
    const browserAsks = await http('GET', `${origin}/`, { headers: { accept: 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8' } });
    // fetch follows redirects: read the first answer without following.
    const first = await fetch(`${origin}/`, { redirect: 'manual', headers: { accept: 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8' } });
    expect(first.status).toBe(303);
    expect(first.headers.get('location')).toBe('/account');
    expect(first.headers.get('vary')).toMatch(/Accept/);
    expect(first.headers.get('content-security-policy')).toMatch(/default-src 'none'/);
    expect(browserAsks.status).toBe(200);
    expect(browserAsks.text).toContain('<h1>Sign in</h1>');
    expect(visibleText(browserAsks.text)).toContain('Sign in to see the agents you approved');

    for (const accept of ['application/json', '*/*', undefined]) {
      const machine = await fetch(`${origin}/`, { redirect: 'manual', headers: accept === undefined ? {} : { accept } });
      expect(machine.status, String(accept)).toBe(303);
      expect(machine.headers.get('location'), String(accept)).toBe('/.well-known/agent-configuration');
    }
    const followed = await http('GET', `${origin}/`);
    expect(followed.status).toBe(200);
    expect(followed.json.issuer).toBe(server.config.issuer);

    const anonymous = await new PersonBrowser(origin).request('GET', '/account');
    expect(anonymous.status).toBe(303);
    expect(anonymous.headers.get('location')).toBe('/signin?return_to=%2Faccount');
  });

  it("a person sees each agent (name as its claim, host, status, each grant's capability, status, limits in words, granted by whom and when), their hosts and passkeys", async () => {
    const alice = await person('Alice');
    const { agent } = await approvedAgent(alice, { reason: 'to plan the trip', host_name: 'laptop of alice' });
    // A host an administrator linked to her with echo as a default: its agent gets echo from the policy.
    const linked = await newEd25519();
    expect((await c.admin('POST', '/admin/hosts', { public_key: linked.publicJwk, default_capabilities: ['echo'], user_id: alice.personId, name: 'build server' })).status).toBe(201);
    const auto = await c.register(linked, { mode: 'delegated', name: 'nightly builder', capabilities: ['echo'] });
    expect(auto.res.json.status).toBe('active');
    const passkey = new SoftwarePasskey();
    expect((await addPasskeyOnPage(alice.browser, origin, passkey, { returnTo: '/account' })).posted!.headers.get('location')).toBe('/account');

    const page = await accountOf(alice);
    expect(page.headers.get('content-security-policy')).toMatch(/script-src 'self'/);
    expect(page.headers.get('cache-control')).toBe('no-store');
    const text = visibleText(page.text);
    expect(text).toContain('An agent that calls itself trip planner');
    expect(text).toContain('Running on a host that calls itself laptop of alice');
    expect(text).toContain('Says why to plan the trip');
    expect(text).toMatch(/Status active Approved \d{4}-\d\d-\d\d \d\d:\d\d UTC; its capabilities granted in your name/);
    expect(text).toMatch(/weather_lookup: Looks up the weather for a city \(demonstration: echoes the request\)\. allowed Only within these limits: city: one of "Oslo", "Bergen" Granted in your name \(by you, or by an administrator for you\), \d{4}-\d\d-\d\d \d\d:\d\d UTC\./);
    expect(text).toMatch(/echo: Returns the arguments it was given\. Useful for trying the protocol end to end\. allowed With no limits on its arguments\. Granted in your name/);
    expect(text).toContain('An agent that calls itself nightly builder');
    expect(text).toContain("Granted automatically, by agentgate's policy (a default capability of its host)");
    // Hosts: both, by name as their claim, with status and default capabilities.
    expect(text).toContain('A host that calls itself laptop of alice Status active');
    expect(text).toContain('A host that calls itself build server Status active');
    expect(text).toMatch(/Agents it starts for you get without asking echo/);
    // Passkeys: when added, never used yet, with a link to remove it.
    expect(text).toMatch(/Passkey \S+: added \d{4}-\d\d-\d\d \d\d:\d\d UTC, last used never\./);
    expect(page.text).toContain(`href="/account/passkeys/remove?passkey_id=${encodeURIComponent(passkey.id)}"`);
    // Every form carries the session's CSRF token.
    const forms = [...page.text.matchAll(/<form method="post" action="([^"]+)"[^>]*>\s*<input type="hidden" name="csrf" value="([^"]+)">/g)];
    expect(forms.map((m) => m[1]).filter((a) => a !== '/signout').sort()).toEqual([
      '/account/agents/revoke', '/account/agents/revoke',
      '/account/grants/revoke', '/account/grants/revoke', '/account/grants/revoke',
      '/account/hosts/new', '/account/hosts/revoke', '/account/hosts/revoke', '/account/hosts/unlink', '/account/hosts/unlink',
    ]);
    expect(new Set(forms.map((m) => m[2]))).toEqual(new Set([(await alice.api.get('/people/me')).json.csrf_token]));
    expect(page.text).toContain(`Agent id <code>${agent.id}</code>`);
  });

  it('revoking a grant, then the agent, from the page takes effect at once: execute refuses each', async () => {
    const bea = await person('Bea');
    const { agent } = await approvedAgent(bea);
    expect((await c.execute(agent, 'echo', {})).status).toBe(200);
    let page = await accountOf(bea);
    const revokedGrant = await formOn(bea, page, '/account/grants/revoke', { agent_id: agent.id, grant_id: await grantIdOf(agent.id, 'echo') });
    expect(revokedGrant.status).toBe(303);
    expect(revokedGrant.headers.get('location')).toBe('/account?done=grant_revoked');
    expect(await grantsOf(agent.id)).toEqual({ echo: 'revoked', weather_lookup: 'active' });
    expect(code(await c.execute(agent, 'echo', {}))).toBe('403 grant_revoked');
    expect((await c.execute(agent, 'weather_lookup', { city: 'Oslo' })).status).toBe(200);

    page = await accountOf(bea, '/account?done=grant_revoked');
    expect(visibleText(page.text)).toContain('The capability is revoked: the agent cannot use it from now on.');
    expect(visibleText(page.text)).toMatch(/echo: Returns the arguments it was given\. Useful for trying the protocol end to end\. revoked, \d{4}/);
    const revokedAgent = await formOn(bea, page, '/account/agents/revoke', { agent_id: agent.id });
    expect(revokedAgent.headers.get('location')).toBe('/account?done=agent_revoked');
    expect((await server.store.getAgent(agent.id))!.agent.status).toBe('revoked');
    expect(code(await c.execute(agent, 'weather_lookup', { city: 'Oslo' }))).toBe('403 agent_revoked');
    page = await accountOf(bea);
    expect(visibleText(page.text)).toMatch(/An agent that calls itself trip planner .*Status revoked/);
    // A revoked agent offers no more forms.
    expect(page.text).not.toContain('action="/account/agents/revoke"');
    // The trail says the person did it, on their account page (not through the JSON API).
    await server.audit.log.flush();
    const trail = (await c.admin('GET', `/admin/audit?agent_id=${agent.id}`)).json.events as Array<Record<string, unknown>>;
    expect(trail.filter((e) => e.type === 'grant.revoked' || e.type === 'agent.revoked').map((e) => `${e.type} ${e.actor} ${e.via}`).sort())
      .toEqual(['agent.revoked person account_page', 'grant.revoked person account_page']);
    // A notice the page does not know shows nothing of the URL.
    expect(visibleText((await accountOf(bea, '/account?done=%3Cb%3Eyou%20were%20hacked')).text)).not.toMatch(/hacked/);
  });

  it("another person's agent, grant, host and passkey ids answer as not found on the page, and nothing of theirs changes", async () => {
    const alice = await person('Alice');
    const { agent, hostId } = await approvedAgent(alice);
    const passkey = new SoftwarePasskey();
    await addPasskeyOnPage(alice.browser, origin, passkey, { returnTo: '/account' });
    const mallory = await person('Mallory');
    const page = await accountOf(mallory);
    expect(visibleText(page.text)).not.toContain('trip planner');

    const attempts: Array<[string, Record<string, string>, string]> = [
      ['/account/agents/revoke', { agent_id: agent.id }, 'You have no agent with this id.'],
      ['/account/grants/revoke', { agent_id: agent.id, grant_id: await grantIdOf(agent.id, 'echo') }, 'You have no agent with this id.'],
      ['/account/hosts/revoke', { host_id: hostId }, 'You have no host with this id.'],
      ['/account/hosts/unlink', { host_id: hostId }, 'You have no host with this id.'],
      ['/account/passkeys/remove', { passkey_id: passkey.id, assertion: JSON.stringify({ id: passkey.id }) }, 'You have no passkey with this id.'],
    ];
    for (const [action, fields, message] of attempts) {
      const refused = await mallory.browser.request('POST', action, { csrf: mallory.browser.csrfOf(page.text), ...fields });
      expect(refused.status, action).toBe(404);
      expect(visibleText(refused.text).toLowerCase(), action).toContain(message.replace(/\.$/, '').toLowerCase());
      expect(refused.text, action).toContain('<a href="/account">Back to your agents</a>');
    }
    // Unknown ids answer the same as someone else's.
    const unknown = await mallory.browser.request('POST', '/account/agents/revoke', { csrf: mallory.browser.csrfOf(page.text), agent_id: 'agt_doesnotexist' });
    expect(unknown.status).toBe(404);
    const removal = await mallory.browser.request('GET', `/account/passkeys/remove?passkey_id=${encodeURIComponent(passkey.id)}`);
    expect(removal.status).toBe(404);
    expect(dataBlock(removal.text, 'passkey-removal-options')).toBeNull();

    expect(await grantsOf(agent.id)).toEqual({ echo: 'active', weather_lookup: 'active' });
    expect((await server.store.getAgent(agent.id))!.agent.status).toBe('active');
    expect((await server.store.getHost(hostId))!).toMatchObject({ status: 'active', userId: alice.personId });
    expect(await alice.api.passkeyIds()).toEqual([passkey.id]);
  });

  it("a forged form without the session's CSRF token (none, wrong, or another session's) changes nothing", async () => {
    const carl = await person('Carl');
    const { agent, hostId } = await approvedAgent(carl);
    const passkey = new SoftwarePasskey();
    await addPasskeyOnPage(carl.browser, origin, passkey, { returnTo: '/account' });
    const otherSession = await person('Other');
    const otherToken = otherSession.browser.csrfOf((await accountOf(otherSession)).text);
    const forms: Array<[string, Record<string, string>]> = [
      ['/account/agents/revoke', { agent_id: agent.id }],
      ['/account/grants/revoke', { agent_id: agent.id, grant_id: await grantIdOf(agent.id, 'echo') }],
      ['/account/hosts/revoke', { host_id: hostId }],
      ['/account/hosts/unlink', { host_id: hostId }],
      ['/account/passkeys/remove', { passkey_id: passkey.id, assertion: '{}' }],
    ];
    for (const [action, fields] of forms) {
      for (const csrf of [undefined, 'not-the-token-0123456789', otherToken]) {
        const refused = await carl.browser.request('POST', action, csrf === undefined ? fields : { ...fields, csrf });
        expect(refused.status, `${action} csrf=${csrf}`).toBe(403);
        expect(visibleText(refused.text)).toContain('This form is out of date');
      }
    }
    // A cross-site form carries the cookie but cannot know the token: the same as above. Without the cookie, the same.
    const anonymous = await new PersonBrowser(origin).request('POST', '/account/agents/revoke', { agent_id: agent.id, csrf: otherToken });
    expect(anonymous.status).toBe(403);
    expect(await grantsOf(agent.id)).toEqual({ echo: 'active', weather_lookup: 'active' });
    expect((await server.store.getAgent(agent.id))!.agent.status).toBe('active');
    expect((await server.store.getHost(hostId))!).toMatchObject({ status: 'active', userId: carl.personId });
    expect(await carl.api.passkeyIds()).toEqual([passkey.id]);
  });

  it('unlinking a host without a fresh sign-in is sent to sign in and changes nothing; after signing in again it withdraws the host and revokes its agents', async () => {
    const dora = await person('Dora');
    const { agent, hostId } = await approvedAgent(dora);
    const page = await accountOf(dora);
    server.clock.advance((FRESH_SECONDS + 60) * 1000);
    const stale = await formOn(dora, page, '/account/hosts/unlink', { host_id: hostId });
    expect(stale.status).toBe(303);
    expect(stale.headers.get('location')).toBe('/signin?return_to=%2Faccount');
    expect((await server.store.getHost(hostId))!).toMatchObject({ status: 'active', userId: dora.personId });
    expect((await server.store.getAgent(agent.id))!.agent.status).toBe('active');
    // Revoking needs no fresh sign-in (it only takes power away), as in the people's API.
    const revoked = await formOn(dora, page, '/account/grants/revoke', { agent_id: agent.id, grant_id: await grantIdOf(agent.id, 'weather_lookup') });
    expect(revoked.headers.get('location')).toBe('/account?done=grant_revoked');

    const again = await dora.browser.signIn(dora.name, '/account');
    const unlinked = await formOn(dora, again, '/account/hosts/unlink', { host_id: hostId });
    expect(unlinked.headers.get('location')).toBe('/account?done=host_unlinked');
    const host = (await server.store.getHost(hostId))!;
    expect(host.status).toBe('pending');
    expect(host.userId).toBeUndefined();
    expect((await server.store.getAgent(agent.id))!.agent.status).toBe('revoked');
    const after = visibleText((await accountOf(dora, '/account?done=host_unlinked')).text);
    expect(after).toContain('The host is unlinked');
    expect(after).toContain('No host is linked to you.');
  });

  it('revoking a host from the page revokes it and every agent on it, with no fresh sign-in needed', async () => {
    const erin = await person('Erin');
    const hostKey = await newEd25519();
    const first = await approvedAgent(erin, {}, hostKey);
    const second = await c.register(hostKey, { mode: 'delegated', name: 'second', capabilities: ['echo'] });
    expect(second.res.json.status).toBe('pending');
    server.clock.advance((FRESH_SECONDS + 60) * 1000);
    const page = await accountOf(erin);
    const revoked = await formOn(erin, page, '/account/hosts/revoke', { host_id: first.hostId });
    expect(revoked.headers.get('location')).toBe('/account?done=host_revoked');
    expect((await server.store.getHost(first.hostId))!.status).toBe('revoked');
    expect((await server.store.getAgent(first.agent.id))!.agent.status).toBe('revoked');
    expect((await server.store.getAgent(second.agent!.id))!.agent.status).toBe('revoked');
    const after = await accountOf(erin);
    expect(visibleText(after.text)).toMatch(/Hosts .* A host that gave no name Status revoked/);
    // The revoked host has no forms left (the page's one for setting up a new host is not the host's).
    expect(after.text).not.toMatch(/action="\/account\/hosts\/(revoke|unlink)"/);
  });

  it('removing a passkey without a fresh sign-in is sent to sign in and changes nothing', async () => {
    const finn = await person('Finn');
    const p1 = new SoftwarePasskey();
    await addPasskeyOnPage(finn.browser, origin, p1, { returnTo: '/account' });
    const removalPath = `/account/passkeys/remove?passkey_id=${encodeURIComponent(p1.id)}`;
    const fresh = await finn.browser.request('GET', removalPath);
    expect(fresh.status).toBe(200);
    const options = dataBlock(fresh.text, 'passkey-removal-options');
    server.clock.advance((FRESH_SECONDS + 60) * 1000);
    const page = await finn.browser.request('GET', removalPath);
    expect(page.status).toBe(303);
    expect(page.headers.get('location')).toBe(`/signin?return_to=${encodeURIComponent(removalPath)}`);
    // The form the fresh page gave, answered by the person's own passkey, is still refused: too late.
    const posted = await finn.browser.request('POST', '/account/passkeys/remove', {
      csrf: finn.browser.csrfOf(fresh.text, '/account/passkeys/remove'), passkey_id: p1.id, assertion: JSON.stringify(p1.assert(options, origin)),
    });
    expect(posted.status).toBe(303);
    expect(posted.headers.get('location')).toBe('/signin?return_to=%2Faccount');
    expect(await finn.api.passkeyIds()).toEqual([p1.id]);
  });

  it("removing a passkey without a user-verified assertion of one of the person's passkeys changes nothing; with one it is removed, once", async () => {
    const gus = await person('Gus');
    const p1 = new SoftwarePasskey();
    const p2 = new SoftwarePasskey();
    await addPasskeyOnPage(gus.browser, origin, p1, { returnTo: '/account' });
    expect((await addPasskeyOnPage(gus.browser, origin, p2, { proofBy: p1, returnTo: '/account' })).posted!.status).toBe(303);
    expect((await gus.api.passkeyIds()).sort()).toEqual([p1.id, p2.id].sort());
    const removalPath = `/account/passkeys/remove?passkey_id=${encodeURIComponent(p2.id)}`;

    let page = await gus.browser.request('GET', removalPath);
    expect(page.status).toBe(200);
    expect(visibleText(page.text)).toContain('To remove it, confirm with one of your passkeys');
    const form = (assertion?: string) => ({ csrf: gus.browser.csrfOf(page.text, '/account/passkeys/remove'), passkey_id: p2.id, ...(assertion === undefined ? {} : { assertion }) });
    // No assertion: the session alone.
    const none = await gus.browser.request('POST', '/account/passkeys/remove', form());
    expect(none.status).toBe(403);
    expect(visibleText(none.text)).toContain('Removing a passkey needs one of your passkeys');
    // A passkey that is not one of the person's.
    const stranger = new SoftwarePasskey();
    const foreign = await gus.browser.request('POST', '/account/passkeys/remove', form(JSON.stringify(stranger.assert(dataBlock(page.text, 'passkey-removal-options')!, origin))));
    expect(foreign.status).toBe(403);
    // Their own passkey, but answering a challenge this page did not issue.
    page = await gus.browser.request('GET', removalPath);
    const otherChallenge = await gus.browser.request('POST', '/account/passkeys/remove', form(JSON.stringify(p1.assert({ challenge: 'bm90LXRoaXMtcGFnZXM', rpId: 'localhost' }, origin))));
    expect(otherChallenge.status).toBe(403);
    expect((await gus.api.passkeyIds()).sort()).toEqual([p1.id, p2.id].sort());

    // The person's own passkey, for this page's challenge: removed.
    page = await gus.browser.request('GET', removalPath);
    const answer = JSON.stringify(p1.assert(dataBlock(page.text, 'passkey-removal-options')!, origin));
    const removed = await gus.browser.request('POST', '/account/passkeys/remove', form(answer));
    expect(removed.status).toBe(303);
    expect(removed.headers.get('location')).toBe('/account?done=passkey_removed');
    expect(await gus.api.passkeyIds()).toEqual([p1.id]);
    // The same answer again finds no challenge.
    const replayed = await gus.browser.request('POST', '/account/passkeys/remove', { ...form(answer), passkey_id: p1.id });
    expect(replayed.status).toBe(403);
    expect(await gus.api.passkeyIds()).toEqual([p1.id]);
    const last = await gus.browser.request('GET', `/account/passkeys/remove?passkey_id=${encodeURIComponent(p1.id)}`);
    expect(visibleText(last.text)).toContain('It is your last passkey');
  });

  it('every string an agent or host chose is shown as text on the account page, never as markup, and a look-alike name is flagged', async () => {
    const hana = await person('Hana');
    const evil = '<script>alert(1)</script><a href="https://evil.example">click</a>';
    await approvedAgent(hana, { name: evil, reason: '\u202eevil\u0000 <img src=x onerror=alert(1)>', host_name: '"><form action=https://evil.example>' });
    await approvedAgent(hana, { name: `${server.config.PROVIDER_NAME.replace(/a/g, '\u0430')}` });
    const page = await accountOf(hana);
    expect(page.text).not.toContain('<script>alert(1)');
    expect(page.text).not.toContain('<a href="https://evil.example"');
    expect(page.text).not.toContain('<img src=x');
    expect(page.text).not.toContain('<form action=https://evil.example');
    expect(page.text).not.toContain('\u202e');
    expect(page.text).toContain('&lt;script&gt;alert(1)&lt;/script&gt;');
    expect(page.text).toContain('&quot;&gt;&lt;form action=https://evil.example&gt;');
    expect(visibleText(page.text)).toContain('Careful: it');
    // The only scripts are the page's none; the only links are ours.
    expect([...page.text.matchAll(/<script\b[^>]*>/g)]).toEqual([]);
    expect([...page.text.matchAll(/href="([^"]+)"/g)].map((m) => m[1]).filter((href) => !href!.startsWith('/'))).toEqual([]);
  });

  it('the agents come in pages of 50 with a link to the next, each agent once; a made-up cursor is a 400 page', async () => {
    const ivy = await person('Ivy');
    const hostKey = await newEd25519();
    expect((await c.admin('POST', '/admin/hosts', { public_key: hostKey.publicJwk, default_capabilities: ['echo'], user_id: ivy.personId })).status).toBe(201);
    const made: TestAgent[] = [];
    for (let start = 0; start < 60; start += 20) {
      const batch = await Promise.all(Array.from({ length: 20 }, (_, i) => c.register(hostKey, { mode: 'delegated', name: `worker ${start + i}`, capabilities: ['echo'] })));
      made.push(...batch.map((b) => b.agent!));
    }
    const first = await accountOf(ivy);
    const idsOn = (text: string) => [...text.matchAll(/Agent id <code>([^<]+)<\/code>/g)].map((m) => m[1]!);
    expect(idsOn(first.text)).toHaveLength(50);
    const next = /<a href="([^"]+)" rel="next">More agents<\/a>/.exec(first.text)?.[1];
    expect(next).toMatch(/^\/account\?cursor=/);
    const second = await accountOf(ivy, next!.replace(/&amp;/g, '&'));
    expect(idsOn(second.text)).toHaveLength(10);
    expect(second.text).not.toContain('rel="next"');
    expect(new Set([...idsOn(first.text), ...idsOn(second.text)])).toEqual(new Set(made.map((a) => a.id)));
    const madeUp = await ivy.browser.request('GET', '/account?cursor=not-a-cursor');
    expect(madeUp.status).toBe(400);
    expect(visibleText(madeUp.text)).toContain('cursor');
  }, 30_000);

  it("the approval page shows the policy's reason as agentgate's, apart from what the agent says about itself", async () => {
    const jo = await person('Jo');
    const silent = await c.register(await newEd25519(), { mode: 'delegated', name: 'quiet bot', capabilities: ['echo'] });
    const page = await jo.browser.request('GET', `/device?user_code=${silent.res.json.approval.user_code}`);
    expect(page.status).toBe(200);
    expect(page.text).toContain('<p class="limits policy">agentgate asks you because: user approval required</p>');
    expect(visibleText(page.text)).not.toContain('Says why');
    // A reason of its own is the agent's claim; the policy's reason is then not the grant's to show.
    const talkative = await c.register(await newEd25519(), { mode: 'delegated', name: 'chatty bot', reason: 'user approval required', capabilities: ['echo'] });
    const told = await jo.browser.request('GET', `/device?user_code=${talkative.res.json.approval.user_code}`);
    expect(told.text).toMatch(/<dt>Says why<\/dt><dd class="quoted">user approval required<\/dd>/);
    expect(told.text).not.toContain('agentgate asks you because');
    // A later request's own reason is the agent's claim about that request, marked as such.
    const { agent } = await approvedAgent(jo, { reason: 'to plan the trip' });
    const asked = await c.requestCapability(agent, { capabilities: ['search_documents'], reason: 'to <b>find</b> the tickets' });
    expect(asked.json.status, asked.text).toBe('pending');
    const later = await jo.browser.request('GET', `/device?user_code=${asked.json.approval.user_code}`);
    expect(later.text).toContain('<p class="limits">The agent says about this request (its claim): <span class="quoted">to &lt;b&gt;find&lt;/b&gt; the tickets</span></p>');
    expect(later.text).not.toContain('agentgate asks you because');
  });
});
