// The consent invariants of DESIGN §8, each test named after the attack it stops, replayed over
// real HTTP as the adversarial audit ran them: a passkey added with the browser session alone
// (finding 1), a constraint on a look-alike argument name (finding 2), an unlinked host handed its
// defaults (finding 3), and every path that can make a `presence` capability active. Passkeys are a
// software authenticator (test/support/software-passkey.ts): what an agent holding a person's
// browser session could mint itself, or, with user verification claimed, the person's own device.
// Passkeys need the issuer on a host name, so these servers are reached as http://localhost:<port>.
// Freshness windows move on the server's ManualClock, never by waiting.
import { readFileSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { Client, code, http, type TestAgent } from '../support/client.ts';
import {
  addPasskeyOnPage, auditEvents, capturingLogger, decideOnPage, devSignedIn, PeopleApi, storedPasskeyJson, visibleText, type LoggedLine,
} from '../support/consent.ts';
import { newEd25519, type TestKey } from '../support/keys.ts';
import { CookieJar, signInHeadless, startOidcProvider, type TestOidcProvider } from '../support/oidc-provider.ts';
import { PersonBrowser } from '../support/person-browser.ts';
import { forEachStore, startTestServer, testServerForBlock, type TestServer } from '../support/server.ts';
import { dataBlock, SoftwarePasskey } from '../support/software-passkey.ts';

/** Long enough that moving the clock past the first passkey's 5-minute window keeps decisions possible. */
const FRESH_SECONDS = 3600;
/** people/passkeys.ts FIRST_PASSKEY_LOGIN_WINDOW_MS. */
const FIRST_PASSKEY_WINDOW_MS = 5 * 60_000;

const TRANSFER_WITHIN_100 = { name: 'transfer_money', constraints: { amount: { max: 100 } } };

/**
 * A person signed in as `name` who added a passkey on the page (their first, so no proof of another),
 * and a host an administrator linked to them with `defaults`: what the presence and look-alike tests
 * start from.
 */
async function personWithLinkedHost(c: Client, name: string, host: { defaults: string[]; hostName: string }) {
  const { personId, browser, api } = await devSignedIn(c.server.baseUrl, name);
  const passkey = new SoftwarePasskey();
  expect((await addPasskeyOnPage(browser, c.server.baseUrl, passkey)).posted!.status).toBe(303);
  const hostKey = await newEd25519();
  const created = await c.admin('POST', '/admin/hosts', { public_key: hostKey.publicJwk, default_capabilities: host.defaults, user_id: personId, name: host.hostName });
  expect(created.status).toBe(201);
  return { personId, browser, api, passkey, host: hostKey, hostId: created.json.host_id as string };
}

forEachStore('finding 1: a passkey is never added with the browser session alone', (storeKind) => {
  const { logger, lines } = capturingLogger();
  const server = testServerForBlock({ store: storeKind, issuerHost: 'localhost', logger, env: { INSECURE_DEV_SIGN_IN: 'true', SIGN_IN_FRESH_SECONDS: String(FRESH_SECONDS) } });
  const c = new Client(server);
  let origin: string;
  let seq = 0;
  beforeAll(() => {
    origin = server.baseUrl;
    expect(origin).toMatch(/^http:\/\/localhost:\d+$/);
  });

  /** A person signed in through the dev sign-in (which counts as credentials entered now). */
  async function signedIn(prefix: string) {
    return devSignedIn(server.baseUrl, `${prefix}-${storeKind}-${++seq}`);
  }

  /** A person holding one passkey, added the legitimate way (their first, right after signing in). */
  async function withFirstPasskey(prefix: string) {
    const person = await signedIn(prefix);
    const p1 = new SoftwarePasskey();
    const first = await addPasskeyOnPage(person.browser, origin, p1);
    expect(first.page.status).toBe(200);
    // The first passkey needs no proof of another: the page asks for none.
    expect(dataBlock(first.page.text, 'passkey-proof-options')).toBeNull();
    expect(first.posted!.status).toBe(303);
    expect(await person.api.passkeyIds()).toEqual([p1.id]);
    return { ...person, p1 };
  }

  /** A delegated agent on the person's own host (linked by the admin), waiting for them to approve transfer_money (at most 100). */
  async function pendingTransfer(personId: string): Promise<{ agent: TestAgent; userCode: string }> {
    const host = await newEd25519();
    expect((await c.admin('POST', '/admin/hosts', { public_key: host.publicJwk, default_capabilities: ['echo'], user_id: personId, name: 'laptop' })).status).toBe(201);
    const { res, agent } = await c.register(host, { mode: 'delegated', name: 'treasury bot', capabilities: [TRANSFER_WITHIN_100] });
    expect(res.json.status).toBe('pending');
    return { agent: agent!, userCode: res.json.approval.user_code };
  }

  const warningsSince = (mark: number, msg: string) => lines.slice(mark).filter((l) => l.level === 'warn' && l.msg === msg).map((l: LoggedLine) => String(l.fields.error));

  /** The agent still waits: its transfer_money grant pending, and execute never answers 200. */
  async function expectStillPending(agent: TestAgent) {
    const snapshot = (await server.store.getAgent(agent.id))!;
    expect(snapshot.agent.status).toBe('pending');
    expect(snapshot.grants.map((g) => `${g.capability}:${g.status}`)).toEqual(['transfer_money:pending']);
    const executed = await c.execute(agent, 'transfer_money', { amount: 5 });
    expect(executed.status).not.toBe(200);
    expect(code(executed)).toBe('403 agent_pending');
  }

  it('the audit replay: with only the session and its CSRF token, no second passkey is added (no proof, a stranger passkey as proof, an unverified registration), and the pending transfer_money stays pending', async () => {
    const person = await withFirstPasskey('Ann');
    const { agent, userCode } = await pendingTransfer(person.personId);
    const p2 = new SoftwarePasskey();
    let mark = lines.length;

    // No proof at all: what the audit's POST /passkeys sent.
    const noProof = await addPasskeyOnPage(person.browser, origin, p2, { proofBy: null });
    expect(dataBlock(noProof.page.text, 'passkey-proof-options')).toMatchObject({ allowCredentials: [expect.objectContaining({ id: person.p1.id })] });
    expect(noProof.posted!.status).toBe(403);
    expect(visibleText(noProof.posted!.text)).toContain('Adding a passkey needs one of your passkeys first');

    // A proof signed by a passkey the attacker minted, not one of the person's.
    const stranger = new SoftwarePasskey();
    const strangerProof = await addPasskeyOnPage(person.browser, origin, p2, { proofBy: stranger });
    expect(strangerProof.posted!.status).toBe(403);
    expect(visibleText(strangerProof.posted!.text)).toContain('That passkey is not one of yours');

    // A registration without user verification, even behind a valid proof by P1.
    const unverified = new SoftwarePasskey({ userVerified: false });
    const unverifiedRegistration = await addPasskeyOnPage(person.browser, origin, unverified, { proofBy: person.p1 });
    expect(unverifiedRegistration.posted!.status).toBe(400);
    expect(visibleText(unverifiedRegistration.posted!.text)).toContain('The passkey could not be verified');
    expect(warningsSince(mark, 'passkey registration refused')).toEqual([expect.stringMatching(/user could not be verified/i)]);
    mark = lines.length;

    expect(await person.api.passkeyIds()).toEqual([person.p1.id]);

    // What the audit did next: approve the pending transfer_money with the would-be P2.
    const approved = await decideOnPage(person.browser, userCode, agent.id, { capabilities: ['transfer_money'], passkey: p2, origin });
    expect(approved.decided.status).toBe(403);
    expect(visibleText(approved.decided.text)).toContain('That passkey is not one of yours');
    await expectStillPending(agent);

    // Only the legitimate first passkey is in the trail.
    const added = (await auditEvents(c, { type: 'passkey' })).filter((e) => e.person_id === person.personId);
    expect(added).toEqual([expect.objectContaining({ type: 'passkey.added', actor: 'person', passkey_id: person.p1.id, proof: 'fresh_login' })]);
  });

  it('a proof by one of the person\'s passkeys without user verification does not add another', async () => {
    const person = await withFirstPasskey('Bea');
    // A passkey of the person's on an authenticator that does not verify the user (as if moved to
    // one): the page would never register it, so it is put in the store the way the page keeps one.
    const noUv = new SoftwarePasskey({ userVerified: false });
    const registration = noUv.register({ challenge: 'AAAA', rp: { id: 'localhost' } }, origin);
    expect(await server.store.addPasskey(person.personId, noUv.id, storedPasskeyJson(registration, server.clock.nowMs()), 20)).toBe('added');
    const mark = lines.length;

    const p2 = new SoftwarePasskey();
    const attempt = await addPasskeyOnPage(person.browser, origin, p2, { proofBy: noUv });
    expect(attempt.posted!.status).toBe(403);
    expect(visibleText(attempt.posted!.text)).toContain('Your passkey could not be verified');
    // Refused for the right reason: the assertion did not verify the user (not a bad signature or challenge).
    expect(warningsSince(mark, 'passkey assertion refused')).toEqual([expect.stringMatching(/user verification required/i)]);
    expect((await person.api.passkeyIds()).sort()).toEqual([person.p1.id, noUv.id].sort());
  });

  it('the legitimate path: a proof by P1 adds P2, and P2 then approves the pending transfer_money with an assertion bound to that approval; execute answers 200 within the limits', async () => {
    const person = await withFirstPasskey('Cal');
    const p2 = new SoftwarePasskey();
    const added = await addPasskeyOnPage(person.browser, origin, p2, { proofBy: person.p1 });
    expect(added.posted!.status).toBe(303);
    expect(added.posted!.headers.get('location')).toBe('/device');
    expect((await person.api.passkeyIds()).sort()).toEqual([person.p1.id, p2.id].sort());

    const { agent, userCode } = await pendingTransfer(person.personId);
    const { page, decided } = await decideOnPage(person.browser, userCode, agent.id, { capabilities: ['transfer_money'], passkey: p2, origin });
    // The page's presence challenge names both of the person's passkeys.
    expect((dataBlock(page.text, 'presence-options').allowCredentials as Array<{ id: string }>).map((d) => d.id).sort()).toEqual([person.p1.id, p2.id].sort());
    expect(decided.status).toBe(200);
    expect(visibleText(decided.text)).toContain('You approved the agent that calls itself treasury bot');
    expect((await server.store.getAgent(agent.id))!.agent.status).toBe('active');
    expect((await c.execute(agent, 'transfer_money', { amount: 50 })).status).toBe(200);
    expect(code(await c.execute(agent, 'transfer_money', { amount: 500 }))).toBe('403 constraint_violated');

    const events = (await auditEvents(c, { type: 'passkey.added' })).filter((e) => e.person_id === person.personId).reverse();
    expect(events).toEqual([
      expect.objectContaining({ actor: 'person', passkey_id: person.p1.id, proof: 'fresh_login' }),
      expect.objectContaining({ actor: 'person', passkey_id: p2.id, proof: 'passkey' }),
    ]);
    const approvedBy = (await auditEvents(c, { agent_id: agent.id, type: 'approval.approved' }));
    expect(approvedBy).toEqual([expect.objectContaining({ actor: 'person', via: 'approval_page', person_id: person.personId, approved: ['transfer_money'] })]);
  });

  it('a removed passkey can no longer approve; removing needs the CSRF token, a fresh sign-in and an assertion of one of the person\'s passkeys, and is in the audit trail', async () => {
    const person = await withFirstPasskey('Dee');
    const p2 = new SoftwarePasskey();
    expect((await addPasskeyOnPage(person.browser, origin, p2, { proofBy: person.p1 })).posted!.status).toBe(303);
    const removePath = `/people/me/passkeys/${encodeURIComponent(p2.id)}/remove`;

    expect(code(await person.api.post(removePath, {}, null))).toBe('403 unauthorized');
    server.clock.advance((FRESH_SECONDS + 1) * 1000);
    try {
      // Signed in over an hour ago: the session still reads, but may not strip passkeys.
      expect((await person.api.get('/people/me/passkeys')).status).toBe(200);
      expect(code(await person.api.post(removePath))).toBe('401 authentication_required');
    } finally {
      server.clock.advance(-(FRESH_SECONDS + 1) * 1000);
    }
    expect((await person.api.passkeyIds()).sort()).toEqual([person.p1.id, p2.id].sort());

    // The session alone is asked for a passkey; a stranger's, or one without user verification, does not do.
    const asked = await person.api.post(removePath);
    expect(code(asked)).toBe('403 unauthorized');
    expect(asked.json.assertion_options.challenge).toEqual(expect.any(String));
    const stranger = await person.api.post(removePath, { assertion: new SoftwarePasskey().assert(asked.json.assertion_options, origin) });
    expect(code(stranger)).toBe('403 unauthorized');
    const reasked = await person.api.post(removePath);
    const unverified = await person.api.post(removePath, { assertion: new SoftwarePasskey({ userVerified: false }).assert(reasked.json.assertion_options, origin) });
    expect(code(unverified)).toBe('403 unauthorized');
    expect((await person.api.passkeyIds()).sort()).toEqual([person.p1.id, p2.id].sort());

    const { removed } = await person.api.removePasskey(p2.id, person.p1, origin);
    expect(removed.status).toBe(200);
    expect(removed.json).toEqual({ passkey_id: p2.id, removed: true });
    expect(await person.api.passkeyIds()).toEqual([person.p1.id]);
    expect(code(await person.api.post(removePath))).toBe('404 not_found');

    const { agent, userCode } = await pendingTransfer(person.personId);
    const withRemoved = await decideOnPage(person.browser, userCode, agent.id, { capabilities: ['transfer_money'], passkey: p2, origin });
    expect(withRemoved.page.text).not.toContain(p2.id);
    expect(withRemoved.decided.status).toBe(403);
    expect(visibleText(withRemoved.decided.text)).toContain('That passkey is not one of yours');
    await expectStillPending(agent);
    const withP1 = await decideOnPage(person.browser, userCode, agent.id, { capabilities: ['transfer_money'], passkey: person.p1, origin });
    expect(withP1.decided.status).toBe(200);

    const trail = (await auditEvents(c, { type: 'passkey' })).filter((e) => e.person_id === person.personId).reverse();
    expect(trail.map((e) => `${e.type} ${e.passkey_id === p2.id ? 'P2' : 'P1'}`)).toEqual(['passkey.added P1', 'passkey.added P2', 'passkey.removed P2']);
    expect(trail[2]).toMatchObject({ actor: 'person', via: 'people_api', person_id: person.personId });
  });

  // Removing a passkey needs an assertion of one of the person's passkeys, so the session alone
  // cannot empty the person's passkeys and then add its own as their "first".
  it('the audit replay through the people\'s API: the session alone removes P1, then adds P2 as if it were the first; P2 must not be added, nor approve the pending transfer_money', async () => {
    const person = await withFirstPasskey('Kit');
    const { agent, userCode } = await pendingTransfer(person.personId);
    // A minute after the person signed in (typing their name: credentials entered now), the session acts alone.
    server.clock.advance(60_000);
    try {
      const removal = await person.api.post(`/people/me/passkeys/${encodeURIComponent(person.p1.id)}/remove`);
      const p2 = new SoftwarePasskey();
      const attempt = await addPasskeyOnPage(person.browser, origin, p2, { proofBy: null });
      const outcome = `remove P1: ${removal.status}; GET /passkeys/new: ${attempt.page.status}; POST /passkeys: ${attempt.posted?.status ?? '-'}`;
      expect(await person.api.passkeyIds(), `a passkey was added with the session alone (${outcome})`).not.toContain(p2.id);
      const approved = await decideOnPage(person.browser, userCode, agent.id, { capabilities: ['transfer_money'], passkey: p2, origin });
      expect(approved.decided.status).not.toBe(200);
      await expectStillPending(agent);
    } finally {
      server.clock.advance(-60_000);
    }
  });

  it('the first passkey needs credentials entered within 5 minutes: past the window the page sends the person to a fresh sign-in, and a form kept open from before is refused', async () => {
    const person = await signedIn('Eve');
    server.clock.advance(FIRST_PASSKEY_WINDOW_MS + 1000);
    try {
      const page = await person.browser.request('GET', '/passkeys/new?return_to=%2Fdevice');
      expect(page.status).toBe(303);
      expect(page.headers.get('location')).toBe(`/signin?return_to=${encodeURIComponent('/passkeys/new?return_to=%2Fdevice')}&fresh=1`);
    } finally {
      server.clock.advance(-(FIRST_PASSKEY_WINDOW_MS + 1000));
    }

    // The page was opened inside the window and the form posted just after it closed.
    server.clock.advance(FIRST_PASSKEY_WINDOW_MS - 1000);
    try {
      const page = await person.browser.request('GET', '/passkeys/new');
      expect(page.status).toBe(200);
      server.clock.advance(2000);
      const late = await person.browser.request('POST', '/passkeys', {
        csrf: person.browser.csrfOf(page.text, '/passkeys'), return_to: '/device',
        response: JSON.stringify(new SoftwarePasskey().register(dataBlock(page.text, 'passkey-registration-options')!, origin)),
      });
      expect(late.status).toBe(401);
      expect(visibleText(late.text)).toContain('Your first passkey needs a fresh sign-in');
    } finally {
      server.clock.advance(-(FIRST_PASSKEY_WINDOW_MS + 1000));
    }
    expect(await person.api.passkeyIds()).toEqual([]);

    // Entering credentials again (the dev sign-in's name) opens the window anew.
    await person.browser.signIn(person.name);
    const p1 = new SoftwarePasskey();
    expect((await addPasskeyOnPage(person.browser, origin, p1)).posted!.status).toBe(303);
    expect(await person.api.passkeyIds()).toEqual([p1.id]);
  });

  it('a person who lost their authenticator gets back in only through an administrator, who removes their passkeys in the trail; their next one is a first one, after a fresh login', async () => {
    const person = await withFirstPasskey('Lou');
    // Without P1 the session can neither add a passkey (no proof) nor remove P1 (no assertion).
    expect((await addPasskeyOnPage(person.browser, origin, new SoftwarePasskey(), { proofBy: null })).posted!.status).toBe(403);
    expect(code((await person.api.removePasskey(person.p1.id, new SoftwarePasskey(), origin)).removed)).toBe('403 unauthorized');
    const reset = await c.admin('POST', '/admin/passkeys/remove', { user_id: person.personId });
    expect(reset.json).toEqual({ user_id: person.personId, passkeys_removed: 1 });
    expect(code(await c.admin('POST', '/admin/passkeys/remove', { user_id: person.personId, passkey_id: person.p1.id }))).toBe('404 not_found');
    expect(await person.api.passkeyIds()).toEqual([]);
    const removed = (await auditEvents(c, { type: 'passkey.removed' })).filter((e) => e.person_id === person.personId);
    expect(removed).toEqual([expect.objectContaining({ actor: 'admin', via: 'admin_api', passkey_id: person.p1.id })]);
    const p2 = new SoftwarePasskey();
    expect((await addPasskeyOnPage(person.browser, origin, p2)).posted!.status).toBe(303);
    expect(await person.api.passkeyIds()).toEqual([p2.id]);
  });
});

describe('finding 1 at the identity provider: the first passkey needs credentials entered now, not a single sign-on session', () => {
  let provider: TestOidcProvider | undefined;
  let server: TestServer;
  let c: Client;

  beforeAll(async () => {
    server = await startTestServer({
      store: 'redis',
      issuerHost: 'localhost',
      env: { SIGN_IN_FRESH_SECONDS: String(FRESH_SECONDS) },
      oidc: async (redirectUri) => {
        provider = await startOidcProvider({ redirectUris: [redirectUri] });
        return { issuer: provider.issuer, clientId: provider.clientId, clientSecret: provider.clientSecret };
      },
    });
    c = new Client(server);
  });
  afterAll(async () => {
    await server?.close();
    await provider?.close();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  /**
   * Follows the sign-in page's provider link (`signInPath` is where a page sent the person) through
   * the provider, whose login form `jar` answers as alice when it is shown, and back to our callback.
   */
  async function signInAtProvider(browser: PersonBrowser, signInPath: string, jar: CookieJar) {
    const signInPage = await browser.request('GET', signInPath);
    expect(signInPage.status).toBe(200);
    const startPath = /href="(\/signin\/start[^"]*)"/.exec(signInPage.text)![1]!.replaceAll('&amp;', '&');
    const toProvider = await browser.request('GET', startPath);
    expect(toProvider.status).toBe(303);
    const authorization = new URL(toProvider.headers.get('location')!);
    expect(authorization.origin).toBe(provider!.issuer);
    const callback = await signInHeadless(authorization, 'alice', { cookieJar: jar });
    const back = await browser.request('GET', `${callback.pathname}${callback.search}`);
    expect(back.status).toBe(303);
    return { signInPage, authorization, landedOn: back.headers.get('location')! };
  }

  it("the first passkey after a sign-in the provider answered from its own session is sent to a fresh sign-in (prompt=login, max_age=0); once the login is entered again, it is added", async () => {
    // The provider's auth_time and our sign-in's start are wall-clock times in this process: Date
    // is faked (and moved) so that the single sign-on session is a minute old without waiting.
    const startMs = Date.now();
    vi.useFakeTimers({ toFake: ['Date'], now: startMs });
    const jar = new CookieJar();
    const personId = `${provider!.issuer}|alice`;

    // A minute ago the person signed in at the provider, typing their credentials.
    await signInAtProvider(new PersonBrowser(server.baseUrl), '/signin?return_to=%2Fdevice', jar);
    expect(jar.loginsSubmitted).toBe(1);

    // Now a sign-in in another browser session is answered from the provider's session: nobody typed anything.
    vi.setSystemTime(startMs + 60_000);
    const person = new PersonBrowser(server.baseUrl);
    const quiet = await signInAtProvider(person, '/signin?return_to=%2Fdevice', jar);
    expect(jar.loginsSubmitted).toBe(1);
    expect(quiet.authorization.searchParams.get('prompt')).toBeNull();
    expect(quiet.authorization.searchParams.get('max_age')).toBe(String(FRESH_SECONDS));
    const api = new PeopleApi(person, server.baseUrl);
    expect((await api.get('/people/me')).json.person_id).toBe(personId);

    // That session alone adds no first passkey: the page sends it to a fresh sign-in ...
    const refused = await person.request('GET', '/passkeys/new?return_to=%2Fdevice');
    expect(refused.status).toBe(303);
    const freshSignIn = refused.headers.get('location')!;
    expect(freshSignIn).toBe(`/signin?return_to=${encodeURIComponent('/passkeys/new?return_to=%2Fdevice')}&fresh=1`);
    // ... and a registration posted without the page finds no ceremony to finish.
    const forged = await person.request('POST', '/passkeys', {
      csrf: (await api.get('/people/me')).json.csrf_token, return_to: '/device',
      response: JSON.stringify(new SoftwarePasskey().register({ challenge: 'AAAAAAAAAAAAAAAAAAAAAA', rp: { id: 'localhost' } }, server.baseUrl)),
    });
    expect(forged.status).toBe(403);
    expect(await api.passkeyIds()).toEqual([]);

    // The fresh sign-in asks the provider for the credentials now, and the person types them.
    const fresh = await signInAtProvider(person, freshSignIn, jar);
    expect(visibleText(fresh.signInPage.text)).toContain('Adding your first passkey needs you to sign in again at your identity provider');
    expect(fresh.authorization.searchParams.get('prompt')).toBe('login');
    expect(fresh.authorization.searchParams.get('max_age')).toBe('0');
    expect(jar.loginsSubmitted).toBe(2);
    expect(fresh.landedOn).toBe('/passkeys/new?return_to=%2Fdevice');

    const p1 = new SoftwarePasskey();
    const added = await addPasskeyOnPage(person, server.baseUrl, p1);
    expect(added.page.status).toBe(200);
    expect(added.posted!.status).toBe(303);
    expect(await api.passkeyIds()).toEqual([p1.id]);
    const trail = (await auditEvents(c, { type: 'passkey.added' })).filter((e) => e.person_id === personId);
    expect(trail).toEqual([expect.objectContaining({ actor: 'person', passkey_id: p1.id, proof: 'fresh_login' })]);
  });
});

forEachStore('the presence invariant: transfer_money becomes active only through a passkey on the page or a recorded admin decision', (storeKind) => {
  const server = testServerForBlock({ store: storeKind, issuerHost: 'localhost', env: { INSECURE_DEV_SIGN_IN: 'true', SIGN_IN_FRESH_SECONDS: String(FRESH_SECONDS) } });
  const c = new Client(server);
  let seq = 0;

  /** A signed-in person with a passkey, and a host an administrator linked to them. */
  async function personWithHost(prefix: string, defaults: string[] = ['echo']) {
    const name = `${prefix}-${storeKind}-${++seq}`;
    return personWithLinkedHost(c, name, { defaults, hostName: `${name}'s laptop` });
  }

  const grantsOf = async (agentId: string) => Object.fromEntries((await server.store.getAgent(agentId))!.grants.map((g) => [g.capability, g.status]));
  const statusOf = async (agentId: string) => (await server.store.getAgent(agentId))!.agent.status;

  /** execute of transfer_money is refused (never 200), with the code it was refused with. */
  async function transferRefused(agent: TestAgent): Promise<string> {
    const res = await c.execute(agent, 'transfer_money', { amount: 1 });
    expect(res.status, res.text).not.toBe(200);
    expect(res.status).toBe(403);
    return code(res);
  }

  it('on the page: approving without an assertion, or with an assertion over another approval\'s challenge, is refused; the assertion bound to this approval approves it', async () => {
    const person = await personWithHost('Fay');
    const a = await c.register(person.host, { mode: 'delegated', capabilities: ['transfer_money'] });
    const b = await c.register(person.host, { mode: 'delegated', capabilities: ['transfer_money'] });
    const codeA = a.res.json.approval.user_code as string;
    const codeB = b.res.json.approval.user_code as string;

    const bare = await decideOnPage(person.browser, codeA, a.agent!.id, { capabilities: ['transfer_money'] });
    expect(bare.decided.status).toBe(403);
    expect(visibleText(bare.decided.text)).toContain('Approving this needs your passkey');

    // The person's passkey answers the challenge the page issued for B; that answer is sent to decide A.
    const pageB = await person.browser.request('GET', `/device?user_code=${codeB}`);
    const optionsB = dataBlock(pageB.text, 'presence-options');
    const moved = await decideOnPage(person.browser, codeA, a.agent!.id, { capabilities: ['transfer_money'], passkey: person.passkey, origin: server.baseUrl, presenceOptions: optionsB });
    expect(moved.decided.status).toBe(403);
    expect(visibleText(moved.decided.text)).toContain('Your passkey could not be verified');
    expect(await grantsOf(a.agent!.id)).toEqual({ transfer_money: 'pending' });
    expect(await transferRefused(a.agent!)).toBe('403 agent_pending');

    // The other way round, and without opening B's page: A's page issues a challenge for A, the
    // passkey answers it, and the answer is posted to decide B. The challenge matches what the
    // session holds; only its binding to approval A stops it.
    const pageA = await person.browser.request('GET', `/device?user_code=${codeA}`);
    const answeredForA = person.passkey.assert(dataBlock(pageA.text, 'presence-options')!, server.baseUrl);
    const toB = await person.browser.request('POST', '/device/decision', {
      csrf: person.browser.csrfOf(pageA.text, '/device/decision'), agent_id: b.agent!.id, approval_id: (await server.store.getAgent(b.agent!.id))!.agent.approval!.id,
      user_code: codeB, verdict: 'approve', capabilities: ['transfer_money'], webauthn_response: JSON.stringify(answeredForA),
    });
    expect(toB.status).toBe(403);
    expect(visibleText(toB.text)).toContain('This passkey request is out of date');
    expect(await grantsOf(b.agent!.id)).toEqual({ transfer_money: 'pending' });

    const bound = await decideOnPage(person.browser, codeA, a.agent!.id, { capabilities: ['transfer_money'], passkey: person.passkey, origin: server.baseUrl });
    expect(bound.decided.status).toBe(200);
    expect(await grantsOf(a.agent!.id)).toEqual({ transfer_money: 'active' });
    expect((await c.execute(a.agent!, 'transfer_money', { amount: 1 })).status).toBe(200);
    // B was never decided by any of it.
    expect(await grantsOf(b.agent!.id)).toEqual({ transfer_money: 'pending' });
  });

  it("through the people's API: approving or proactively granting transfer_money is refused (it carries no passkey); the rest of an approval can still be decided there", async () => {
    const person = await personWithHost('Gus');
    const waiting = await c.register(person.host, { mode: 'delegated', capabilities: ['echo', 'transfer_money', 'weather_lookup'] });
    expect(await grantsOf(waiting.agent!.id)).toEqual({ echo: 'active', transfer_money: 'pending', weather_lookup: 'pending' });
    const approvals = (await person.api.get('/people/me/approvals')).json.approvals as Array<{ approval_id: string; agent: { agent_id: string } }>;
    const approvalId = approvals.find((a) => a.agent.agent_id === waiting.agent!.id)!.approval_id;

    for (const body of [{ verdict: 'approve' }, { verdict: 'approve', capabilities: ['transfer_money'] }, { verdict: 'approve', capabilities: ['weather_lookup', 'transfer_money'] }]) {
      const refused = await person.api.post(`/people/me/approvals/${approvalId}`, body);
      expect(code(refused), JSON.stringify(body)).toBe('403 unauthorized');
      expect(refused.json.message).toContain('needs proof of presence');
    }
    expect(await grantsOf(waiting.agent!.id)).toEqual({ echo: 'active', transfer_money: 'pending', weather_lookup: 'pending' });

    const active = await c.register(person.host, { mode: 'delegated', capabilities: ['echo'] });
    expect(active.res.json.status).toBe('active');
    const granted = await person.api.post(`/people/me/agents/${active.agent!.id}/grants`, { capability: 'transfer_money', constraints: { amount: { max: 10 } } });
    expect(code(granted)).toBe('403 unauthorized');
    expect(await grantsOf(active.agent!.id)).toEqual({ echo: 'active' });
    expect(await transferRefused(active.agent!)).toBe('403 capability_not_granted');

    const rest = await person.api.post(`/people/me/approvals/${approvalId}`, { verdict: 'approve', capabilities: ['weather_lookup'] });
    expect(rest.status).toBe(200);
    expect(await grantsOf(waiting.agent!.id)).toEqual({ echo: 'active', transfer_money: 'denied', weather_lookup: 'active' });
    expect(await transferRefused(waiting.agent!)).not.toBe('200');
  });

  it('by the admin API: an administrator may approve transfer_money, and the trail names the admin as the one who decided', async () => {
    const person = await personWithHost('Hal');
    const { agent } = await c.register(person.host, { mode: 'delegated', capabilities: ['transfer_money'] });
    const approved = await c.admin('POST', `/admin/agents/${agent!.id}/approve`, { user_id: person.personId });
    expect(approved.status).toBe(200);
    expect(approved.json.status).toBe('active');
    expect((await c.execute(agent!, 'transfer_money', { amount: 1 })).status).toBe(200);
    expect(await auditEvents(c, { agent_id: agent!.id, type: 'approval.approved' })).toEqual([
      expect.objectContaining({ actor: 'admin', via: 'admin_api', person_id: person.personId, approved: ['transfer_money'], denied: [] }),
    ]);
  });

  it('as host defaults: POST /admin/hosts refuses transfer_money as a default (400 invalid_capabilities) and creates nothing', async () => {
    const host = await newEd25519();
    const refused = await c.admin('POST', '/admin/hosts', { public_key: host.publicJwk, default_capabilities: ['echo', 'transfer_money'], user_id: 'dev|Ida' });
    expect(code(refused)).toBe('400 invalid_capabilities');
    expect(refused.json.invalid_capabilities).toEqual(['transfer_money']);
    // The key is unknown still: it registers as a new host nobody vouched for.
    const { res } = await c.register(host, { mode: 'delegated', capabilities: ['echo'] });
    expect(res.json.status).toBe('pending');
    expect((await c.admin('GET', `/admin/hosts/${res.json.host_id}`)).json).toMatchObject({ status: 'pending', default_capabilities: [] });
  });

  describe('a host record that still lists transfer_money in its defaults (an old record, or a policy that grants it) never makes it active', () => {
    /** A linked host whose stored defaults name transfer_money, written behind the admin API's back. */
    async function hostListingTransfer(prefix: string) {
      const person = await personWithHost(prefix);
      const updated = await server.store.updateHost(person.hostId, { defaultCapabilities: ['echo', 'transfer_money'] });
      expect(updated!.host.defaultCapabilities).toEqual(['echo', 'transfer_money']);
      return person;
    }

    it('at registration: the agent waits with transfer_money pending, echo active', async () => {
      const person = await hostListingTransfer('Jon');
      const { res, agent } = await c.register(person.host, { mode: 'delegated', capabilities: ['echo', 'transfer_money'] });
      expect(res.json.status).toBe('pending');
      expect(await grantsOf(agent!.id)).toEqual({ echo: 'active', transfer_money: 'pending' });
      expect(await transferRefused(agent!)).toBe('403 agent_pending');
      expect((await auditEvents(c, { agent_id: agent!.id, type: 'agent.registered' }))[0]).toMatchObject({ granted: ['echo'], pending: ['transfer_money'] });
    });

    it('at request-capability: an active agent asking for it gets a pending grant', async () => {
      const person = await hostListingTransfer('Kim');
      const { agent } = await c.register(person.host, { mode: 'delegated', capabilities: ['echo'] });
      expect(await statusOf(agent!.id)).toBe('active');
      const requested = await c.requestCapability(agent!, { capabilities: ['transfer_money'] });
      expect(requested.status).toBe(200);
      expect(requested.json.status).toBe('pending');
      expect(await grantsOf(agent!.id)).toEqual({ echo: 'active', transfer_money: 'pending' });
      expect(await transferRefused(agent!)).toBe('403 capability_not_granted');
    });

    it('at reactivation: an expired agent reactivated by its host gets the defaults again, transfer_money pending', async () => {
      const person = await hostListingTransfer('Lea');
      const { agent } = await c.register(person.host, { mode: 'delegated', capabilities: ['echo'] });
      expect((await c.admin('POST', `/admin/agents/${agent!.id}/expire`)).status).toBe(200);
      const reactivated = await c.hostPost('/agent/reactivate', person.host, { agent_id: agent!.id });
      expect(reactivated.status).toBe(200);
      expect(reactivated.json.status).toBe('pending');
      expect(await grantsOf(agent!.id)).toEqual({ echo: 'active', transfer_money: 'pending' });
      expect(await transferRefused(agent!)).toBe('403 agent_pending');
      expect((await auditEvents(c, { agent_id: agent!.id, type: 'agent.reactivated' }))[0]).toMatchObject({ granted: ['echo'], pending: ['transfer_money'] });
    });

    it('at an autonomous registration: the host defaults the policy grants autonomous agents leave transfer_money pending', async () => {
      const host = await newEd25519();
      const first = await c.register(host, { mode: 'autonomous', capabilities: ['echo'] });
      expect(first.res.json.status).toBe('active');
      const hostId = first.res.json.host_id as string;
      await server.store.updateHost(hostId, { defaultCapabilities: ['echo', 'transfer_money'] });
      const { res, agent } = await c.register(host, { mode: 'autonomous', capabilities: ['transfer_money'] });
      expect(res.json.status).toBe('pending');
      expect(await grantsOf(agent!.id)).toEqual({ transfer_money: 'pending' });
      expect(await transferRefused(agent!)).toBe('403 agent_pending');
    });
  });
});

/** Cyrillic small a (U+0430): "аmount" below reads as "amount" and is not. */
const LOOK_ALIKE_AMOUNT = '\u0430mount';

/**
 * The shipped catalog plus one capability whose own schema declares a look-alike of `amount`
 * beside it (a careless catalog): the only way a constraint may name a non-ASCII argument, and
 * what the page must then mark.
 */
function catalogWithLookAlikeArgument(): unknown[] {
  const shipped = JSON.parse(readFileSync(new URL('../../config/capabilities.json', import.meta.url), 'utf8')).capabilities as unknown[];
  return [...shipped, {
    name: 'ledger_entry',
    description: 'Writes a ledger entry (a test catalog entry declaring a look-alike of amount beside it).',
    input: { type: 'object', properties: { amount: { type: 'number' }, [LOOK_ALIKE_AMOUNT]: { type: 'number' } } },
    handler: { type: 'echo' },
  }];
}

forEachStore('finding 2: what the page shows is what execute enforces', (storeKind) => {
  const server = testServerForBlock({
    store: storeKind, issuerHost: 'localhost', capabilities: catalogWithLookAlikeArgument(), env: { INSECURE_DEV_SIGN_IN: 'true', SIGN_IN_FRESH_SECONDS: String(FRESH_SECONDS) },
  });
  const c = new Client(server);
  let seq = 0;

  async function personWithHost(prefix: string, hostName = 'laptop') {
    return personWithLinkedHost(c, `${prefix}-${storeKind}-${++seq}`, { defaults: ['echo'], hostName });
  }

  /** The approval page of a pending registration, as the person sees it. */
  async function pageOf(person: { browser: PersonBrowser }, userCode: string) {
    const page = await person.browser.request('GET', `/device?user_code=${userCode}`);
    expect(page.status).toBe(200);
    return page.text;
  }

  it('the audit replay: transfer_money limited by {"аmount":{"max":10}} (Cyrillic а) is refused when asked for, naming the field, at registration, request-capability and a person\'s own grant', async () => {
    const person = await personWithHost('Max');
    const lookAlike = { name: 'transfer_money', constraints: { [LOOK_ALIKE_AMOUNT]: { max: 10 } } };
    const expectNamed = (res: Awaited<ReturnType<typeof http>>) => {
      expect(code(res)).toBe('400 invalid_request');
      // Named in printable ASCII, so the refusal itself cannot hide the look-alike.
      expect(res.json.message).toContain('constraint field "\\u0430mount" is not an argument of transfer_money; it declares amount, count, currency, note, region');
    };
    const registered = await c.register(person.host, { mode: 'delegated', capabilities: [lookAlike] });
    expectNamed(registered.res);
    expect(registered.agent).toBeNull();

    const { agent } = await c.register(person.host, { mode: 'delegated', capabilities: ['echo'] });
    expectNamed(await c.requestCapability(agent!, { capabilities: [lookAlike] }));
    expectNamed(await person.api.post(`/people/me/agents/${agent!.id}/grants`, { capability: 'transfer_money', constraints: lookAlike.constraints }));
    expect((await server.store.getAgent(agent!.id))!.grants.map((g) => g.capability)).toEqual(['echo']);
  });

  it('the page shows "amount: at most 10" in words; approved with the passkey, execute refuses the look-alike argument beside it (400 naming it) and enforces the limit', async () => {
    const person = await personWithHost('Ned');
    const { res, agent } = await c.register(person.host, { mode: 'delegated', name: 'treasury bot', capabilities: [{ name: 'transfer_money', constraints: { amount: { max: 10 } } }] });
    const userCode = res.json.approval.user_code as string;
    const text = await pageOf(person, userCode);
    expect(visibleText(text)).toContain('Only within these limits: amount: at most 10');
    expect(text).toContain('<li><code>amount</code>: at most 10</li>');

    const { decided } = await decideOnPage(person.browser, userCode, agent!.id, { capabilities: ['transfer_money'], passkey: person.passkey, origin: server.baseUrl });
    expect(decided.status).toBe(200);

    // The audit's execute: the constrained name within the limit is not what it sent.
    const smuggled = await c.execute(agent!, 'transfer_money', { amount: 1_000_000, [LOOK_ALIKE_AMOUNT]: 1 });
    expect(code(smuggled)).toBe('400 invalid_request');
    expect(smuggled.json.message).toBe('argument "\\u0430mount" is not declared by transfer_money; it takes amount, count, currency, note, region');
    const undeclared = await c.execute(agent!, 'transfer_money', { amount: 1, destination: 'elsewhere' });
    expect(code(undeclared)).toBe('400 invalid_request');
    expect(undeclared.json.message).toContain('argument "destination" is not declared by transfer_money');
    const over = await c.execute(agent!, 'transfer_money', { amount: 1_000_000 });
    expect(code(over)).toBe('403 constraint_violated');
    expect(over.json.violations).toEqual([expect.objectContaining({ field: 'amount', actual: 1_000_000 })]);
    const within = await c.execute(agent!, 'transfer_money', { amount: 10 });
    expect(within.status).toBe(200);
  });

  it('constraint values holding invisible characters are refused when asked for, naming the code points', async () => {
    const person = await personWithHost('Oli');
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ currency: { in: ['USD', 'EUR\u200b'] } }, 'U+200B'],
      [{ region: 'EU\u202e' }, 'U+202E'],
      [{ note: { not_in: ['\u2066ok\u2069'] } }, 'U+2066, U+2069'],
    ];
    for (const [constraints, named] of cases) {
      const { res } = await c.register(person.host, { mode: 'delegated', capabilities: [{ name: 'transfer_money', constraints }] });
      expect(code(res), JSON.stringify(constraints)).toBe('400 invalid_request');
      expect(res.json.message).toContain(`holds characters a person cannot see (${named})`);
    }
  });

  it('a 4096-byte constraint (a long `in` list) is shown whole on the page, every value in order', async () => {
    const person = await personWithHost('Pam');
    const regions: string[] = [];
    const bytes = (list: string[]) => Buffer.byteLength(JSON.stringify({ region: { in: list } }));
    for (let i = 0; bytes([...regions, `region-${String(i).padStart(3, '0')}`]) <= 4096 && i < 256; i++) regions.push(`region-${String(i).padStart(3, '0')}`);
    // Pad the last value so the constraints are exactly at the 4096-byte limit.
    regions[regions.length - 1] += 'x'.repeat(4096 - bytes(regions));
    expect(bytes(regions)).toBe(4096);
    const constraints = { region: { in: regions } };

    const tooLong = await c.register(person.host, { mode: 'delegated', capabilities: [{ name: 'transfer_money', constraints: { region: { in: [...regions.slice(0, -1), `${regions.at(-1)}y`] } } }] });
    expect(code(tooLong.res)).toBe('400 invalid_request');

    const { res } = await c.register(person.host, { mode: 'delegated', capabilities: [{ name: 'transfer_money', constraints }] });
    expect(res.json.status).toBe('pending');
    const text = await pageOf(person, res.json.approval.user_code);
    const line = /<li><code>region<\/code>: one of ([^<]*)<\/li>/.exec(text)?.[1];
    expect(line, visibleText(text).slice(0, 500)).toBeDefined();
    expect(line!.replaceAll('&quot;', '"')).toBe(regions.map((r) => JSON.stringify(r)).join(', '));
    expect(visibleText(text)).not.toContain('…');
  });

  it('a constrained argument whose name is outside printable ASCII is marked with its code points, beside the plain one it imitates', async () => {
    const person = await personWithHost('Quy');
    const { res } = await c.register(person.host, {
      mode: 'delegated', capabilities: [{ name: 'ledger_entry', constraints: { amount: { max: 1_000_000 }, [LOOK_ALIKE_AMOUNT]: { max: 10 } } }],
    });
    expect(res.json.status).toBe('pending');
    const text = await pageOf(person, res.json.approval.user_code);
    expect(text).toContain('<li><code>amount</code>: at most 1000000</li>');
    expect(text).toContain('<code class="unusual">&quot;\\u0430mount&quot;</code> <span class="warning-inline">(not plain letters: U+0430)</span>: at most 10');
    // The look-alike itself never reaches the page unescaped.
    expect(text).not.toContain(LOOK_ALIKE_AMOUNT);
  });

  it("an agent whose name imitates the person's other host's name (and mixes alphabets) is shown with warnings", async () => {
    const person = await personWithHost('Ray', 'alice-laptop');
    const imitation = '\u0430lice-laptop';
    const { res } = await c.register(await newEd25519(), { mode: 'delegated', name: imitation, host_name: 'home server', capabilities: ['echo'] });
    expect(res.json.status).toBe('pending');
    const shown = visibleText(await pageOf(person, res.json.approval.user_code));
    expect(shown).toContain(`Agent calls itself ${imitation} Careful: it mixes letters from different alphabets (Cyrillic, Latin), a common trick to look like another name. Careful: it looks like “alice-laptop” but is not the same text.`);
    expect(shown).toContain('Running on a host that calls itself home server Acts');
    expect(shown).toContain('The names and reasons below are what the agent and its host say about themselves');
  });
});

forEachStore('finding 3: unlinking withdraws trust, and nothing becomes active without a new approval', (storeKind) => {
  const server = testServerForBlock({ store: storeKind, env: { INSECURE_DEV_SIGN_IN: 'true', SIGN_IN_FRESH_SECONDS: String(FRESH_SECONDS) } });
  const c = new Client(server);
  let seq = 0;

  interface LinkedWorld {
    personId: string;
    browser: PersonBrowser;
    api: PeopleApi;
    host: TestKey;
    hostId: string;
    /** Active with the host's defaults. */
    active: TestAgent;
    /** Waiting for the person: weather_lookup. */
    waiting: TestAgent;
  }

  /**
   * A person, a host the admin linked to them with defaults, one active agent and one waiting. The
   * stored defaults then list transfer_money as well: the record the audit unlinked (written as an
   * old record would be, since the admin API no longer accepts it).
   */
  async function linkedWorld(prefix: string): Promise<LinkedWorld> {
    const name = `${prefix}-${storeKind}-${++seq}`;
    const browser = new PersonBrowser(server.baseUrl);
    await browser.signIn(name);
    const personId = `dev|${name}`;
    const host = await newEd25519();
    const created = await c.admin('POST', '/admin/hosts', { public_key: host.publicJwk, default_capabilities: ['echo'], user_id: personId, name: `${name}-laptop` });
    expect(created.status).toBe(201);
    const hostId = created.json.host_id as string;
    await server.store.updateHost(hostId, { defaultCapabilities: ['echo', 'transfer_money'] });
    const active = await c.register(host, { mode: 'delegated', capabilities: ['echo'] });
    expect(active.res.json.status).toBe('active');
    const waiting = await c.register(host, { mode: 'delegated', capabilities: ['weather_lookup'] });
    expect(waiting.res.json.status).toBe('pending');
    return { personId, browser, api: new PeopleApi(browser, server.baseUrl), host, hostId, active: active.agent!, waiting: waiting.agent! };
  }

  const hostRecord = async (hostId: string) => (await c.admin('GET', `/admin/hosts/${hostId}`)).json;
  const grantsOf = async (agentId: string) => Object.fromEntries((await server.store.getAgent(agentId))!.grants.map((g) => [g.capability, g.status]));

  /** Nothing the host runs may act: every capability it could try is refused for every agent. */
  async function nothingRuns(agents: TestAgent[]) {
    for (const agent of agents) {
      for (const [capability, args] of [['echo', {}], ['transfer_money', { amount: 1 }], ['weather_lookup', { city: 'Oslo' }]] as const) {
        const res = await c.execute(agent, capability, args);
        expect(res.status, `${agent.id} ${capability}: ${res.text}`).not.toBe(200);
        expect(res.status).toBe(403);
      }
    }
  }

  /** What the host gets when it registers after trust is withdrawn: everything waits for a person. */
  async function registrationsAfterwardsWait(world: LinkedWorld) {
    const autonomous = await c.register(world.host, { mode: 'autonomous', capabilities: ['echo', 'transfer_money'] });
    expect(autonomous.res.status, autonomous.res.text).toBe(200);
    expect(autonomous.res.json.status).toBe('pending');
    expect((await grantsOf(autonomous.agent!.id)).transfer_money).toBe('pending');
    const delegated = await c.register(world.host, { mode: 'delegated', capabilities: ['echo', 'weather_lookup'] });
    expect(delegated.res.json.status).toBe('pending');
    expect(await grantsOf(delegated.agent!.id)).toEqual({ echo: 'pending', weather_lookup: 'pending' });
    await nothingRuns([autonomous.agent!, delegated.agent!]);
    return { autonomous: { agent: autonomous.agent!, res: autonomous.res }, delegated: { agent: delegated.agent!, res: delegated.res } };
  }

  /** The agents that ran under the withdrawn trust are revoked, grants and all. */
  async function agentsRevoked(world: LinkedWorld) {
    for (const agent of [world.active, world.waiting]) {
      const snapshot = (await server.store.getAgent(agent.id))!;
      expect(snapshot.agent.status).toBe('revoked');
      expect(snapshot.grants.every((g) => g.status === 'revoked' || g.status === 'denied')).toBe(true);
    }
    expect(code(await c.execute(world.active, 'echo', {}))).toBe('403 agent_revoked');
  }

  it("the audit replay: a person unlinks a host whose defaults list echo and transfer_money; the host is pending without defaults, its agents revoked, and an autonomous agent it registers next is pending; the person's next approval links it again without the old defaults", async () => {
    const world = await linkedWorld('Sam');
    const unlinked = await world.api.post(`/people/me/hosts/${world.hostId}/unlink`);
    expect(unlinked.status).toBe(200);
    expect(unlinked.json).toEqual({ host_id: world.hostId, status: 'pending', linked: false, agents_revoked: 2 });
    const record = await hostRecord(world.hostId);
    expect(record).toMatchObject({ status: 'pending', default_capabilities: [] });
    expect(record.user_id).toBeUndefined();
    expect((await world.api.get('/people/me/hosts')).json.hosts).toEqual([]);
    await agentsRevoked(world);

    const { autonomous, delegated } = await registrationsAfterwardsWait(world);
    expect(await auditEvents(c, { host_id: world.hostId, type: 'host.unlinked' })).toEqual([
      expect.objectContaining({ actor: 'person', via: 'people_api', person_id: world.personId, unlinked_person_id: world.personId, agents_revoked: 2 }),
    ]);

    // Vouching again takes the person's own approval of one of its agents, on the page.
    const { decided } = await decideOnPage(world.browser, delegated.res.json.approval.user_code, delegated.agent.id, { capabilities: ['echo'] });
    expect(decided.status).toBe(200);
    expect(await hostRecord(world.hostId)).toMatchObject({ status: 'active', user_id: world.personId, default_capabilities: [] });
    expect((await world.api.get('/people/me/hosts')).json.hosts.map((h: { host_id: string }) => h.host_id)).toEqual([world.hostId]);
    expect(await grantsOf(delegated.agent.id)).toEqual({ echo: 'active', weather_lookup: 'denied' });
    expect((await c.execute(delegated.agent, 'echo', {})).status).toBe(200);
    // The autonomous agent registered in between is claimed by the link (an autonomous agent never
    // runs on a host a person answers for), so no later administrator approval can make it active.
    expect((await server.store.getAgent(autonomous.agent.id))!.agent.status).toBe('claimed');
    await nothingRuns([autonomous.agent]);
    // A later delegated agent gets nothing by default: the old defaults are gone for good.
    const later = await c.register(world.host, { mode: 'delegated', capabilities: ['echo'] });
    expect(later.res.json.status).toBe('pending');
  });

  it("the admin's unlink (POST /admin/hosts/:id/unlink) withdraws the same way, and the trail names the admin", async () => {
    const world = await linkedWorld('Tia');
    const unlinked = await c.admin('POST', `/admin/hosts/${world.hostId}/unlink`);
    expect(unlinked.status).toBe(200);
    expect(unlinked.json).toEqual({ host_id: world.hostId, status: 'pending', linked: false, agents_revoked: 2 });
    const record = await hostRecord(world.hostId);
    expect(record).toMatchObject({ status: 'pending', default_capabilities: [] });
    expect(record.user_id).toBeUndefined();
    await agentsRevoked(world);
    expect((await world.api.get('/people/me/hosts')).json.hosts).toEqual([]);
    // The person who unlinked it no longer decides for it either: their page finds nothing to decide.
    const { delegated } = await registrationsAfterwardsWait(world);
    expect(await auditEvents(c, { host_id: world.hostId, type: 'host.unlinked' })).toEqual([
      expect.objectContaining({ actor: 'admin', via: 'admin_api', unlinked_person_id: world.personId, agents_revoked: 2 }),
    ]);
    const { decided } = await decideOnPage(world.browser, delegated.res.json.approval.user_code, delegated.agent.id, { capabilities: ['echo'] });
    expect(decided.status).toBe(200);
    expect(await hostRecord(world.hostId)).toMatchObject({ status: 'active', user_id: world.personId, default_capabilities: [] });
  });

  it("the admin's relink to another person (POST /admin/hosts with the same key) revokes what the first person's trust admitted; the first person can decide nothing more for it", async () => {
    const world = await linkedWorld('Uma');
    const other = `dev|Vic-${storeKind}-${++seq}`;
    const relinked = await c.admin('POST', '/admin/hosts', { public_key: world.host.publicJwk, default_capabilities: ['echo'], user_id: other });
    expect(relinked.status).toBe(201);
    expect(relinked.json).toMatchObject({ host_id: world.hostId, status: 'active', user_id: other, default_capabilities: ['echo'] });
    await agentsRevoked(world);
    expect((await world.api.get('/people/me/hosts')).json.hosts).toEqual([]);
    const events = (await auditEvents(c, { host_id: world.hostId, type: 'host' })).reverse().map((e) => `${e.type} ${e.actor} ${e.person_id ?? e.unlinked_person_id}`);
    expect(events.slice(-2)).toEqual([`host.unlinked admin ${world.personId}`, `host.linked admin ${other}`]);

    // The host's next delegated agent acts for the new person, with the defaults the admin gave them.
    const next = await c.register(world.host, { mode: 'delegated', capabilities: ['echo', 'transfer_money'] });
    expect(next.res.json.status).toBe('pending');
    expect(await grantsOf(next.agent!.id)).toEqual({ echo: 'active', transfer_money: 'pending' });
    expect((await server.store.getAgent(next.agent!.id))!.agent.userId).toBe(other);
    // The first person finds nothing to decide for it.
    const lookup = await world.browser.request('GET', `/device?user_code=${next.res.json.approval.user_code}`);
    expect(lookup.status).toBe(400);
    const forged = await world.browser.request('POST', '/device/decision', {
      csrf: (await world.api.get('/people/me')).json.csrf_token,
      agent_id: next.agent!.id, approval_id: (await server.store.getAgent(next.agent!.id))!.agent.approval!.id, verdict: 'approve', capabilities: ['transfer_money'],
    });
    expect(forged.status).toBe(404);
    expect(await grantsOf(next.agent!.id)).toEqual({ echo: 'active', transfer_money: 'pending' });
  });
});
