// Hosts a person sets up (services/enrollments.ts, docs/approving.md "Enrolling a host"), over
// HTTP against a real server on loopback, both stores: with the host's key through the people's API
// (the host is active and linked at once), or without one (an enrollment token, shown once, that
// the host binds its key with at POST /host/enroll). Each test is named after the guarantee it
// protects or the attack it stops. Time moves on the server's ManualClock, never by waiting; the
// audit trail is read with bounded polls.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, code, http, type HttpResult } from '../support/client.ts';
import { auditEvents, devSignedIn, visibleText } from '../support/consent.ts';
import { hostJwt, newEd25519, type TestKey } from '../support/keys.ts';
import { PersonBrowser } from '../support/person-browser.ts';
import { forEachStore, startTestServer, testServerForBlock, type TestServer } from '../support/server.ts';

const FRESH_SECONDS = 300;
const HOUR_MS = 3600 * 1000;
const TOKEN = /^agent_enroll_[A-Za-z0-9_-]{43}$/;

forEachStore('hosts a person sets up', (storeKind) => {
  const server = testServerForBlock({ store: storeKind, env: { INSECURE_DEV_SIGN_IN: 'true', SIGN_IN_FRESH_SECONDS: String(FRESH_SECONDS) } });
  const c = new Client(server);
  let seq = 0;

  /** A person signed in through the dev sign-in, with their browser (the page) and their API. */
  async function person(prefix: string) {
    const signedIn = await devSignedIn(server.baseUrl, `${prefix}-${storeKind}-${++seq}`, '/account');
    expect(signedIn.landed.status, signedIn.landed.text.slice(0, 1500)).toBe(200);
    return signedIn;
  }
  type Person = Awaited<ReturnType<typeof person>>;

  const setUp = (who: Person, body: Record<string, unknown>, csrf?: string | null) => who.api.post('/people/me/hosts', body, csrf);
  /** POST /host/enroll with `body`, and, when `signer` is given, a host JWT it signed (the proof it holds its key). */
  const enroll = async (body: unknown, signer?: TestKey) =>
    http('POST', c.url('/host/enroll'), { json: body, ...(signer ? { token: await hostJwt(signer, c.issuer, { now: c.now }) } : {}) });

  /** An enrollment token of `who` for a host named `name` with these defaults (201). */
  async function tokenOf(who: Person, defaults: string[] = ['echo'], name = 'build runner'): Promise<{ token: string; res: HttpResult }> {
    const res = await setUp(who, { name, default_capabilities: defaults });
    expect(res.status, res.text).toBe(201);
    return { token: res.json.enrollment_token as string, res };
  }

  const myHostIds = async (who: Person) => ((await who.api.get('/people/me/hosts')).json.hosts as Array<{ host_id: string }>).map((h) => h.host_id);

  /** A delegated agent the host registers for echo: active at once, with echo granted by the defaults, and it executes. */
  async function registersWithDefaults(host: TestKey) {
    const { res, agent } = await c.register(host, { mode: 'delegated', name: 'nightly builder', capabilities: ['echo'] });
    expect(res.json.status, res.text).toBe('active');
    expect(res.json.agent_capability_grants.map((g: { capability: string; status: string }) => [g.capability, g.status])).toEqual([['echo', 'active']]);
    expect((await c.execute(agent!, 'echo', { hello: 'world' })).status).toBe(200);
    return agent!;
  }

  /** Runs `run` with the server's clock moved forward by `ms`, then moves it back. */
  async function later(ms: number, run: () => Promise<void>) {
    server.clock.advance(ms);
    try {
      await run();
    } finally {
      server.clock.advance(-ms);
    }
  }

  it('a host set up with its key is made when that key\'s holder binds it with the token, then linked to the person; its delegated agent gets the defaults without approval', async () => {
    const alice = await person('Alice');
    const key = await newEd25519();
    const res = await setUp(alice, { name: 'alice laptop', default_capabilities: ['echo'], public_key: key.publicJwk });
    expect(res.status, res.text).toBe(201);
    expect(res.json).toEqual({
      enrollment_id: expect.stringMatching(/^enr_/), status: 'pending_enrollment', enrollment_token: expect.stringMatching(TOKEN), expires_in: 3600,
      name: 'alice laptop', default_capabilities: ['echo'], key_thumbprint: key.thumbprint,
    });
    // A public key is public: no host answers for it until its holder shows the token.
    expect(await server.store.findHostByThumbprint(key.thumbprint)).toBeNull();
    const token = res.json.enrollment_token as string;
    // The token binds the key the person gave, and no other.
    const other = await newEd25519();
    expect(code(await enroll({ token, public_key: other.publicJwk }, other))).toBe('400 invalid_request');
    const enrolled = await enroll({ token, public_key: key.publicJwk }, key);
    expect(enrolled.status, enrolled.text).toBe(200);
    expect(await server.store.getHost(enrolled.json.host_id)).toMatchObject({ status: 'active', userId: alice.personId, thumbprint: key.thumbprint, defaultCapabilities: ['echo'] });
    expect(await myHostIds(alice)).toEqual([enrolled.json.host_id]);
    await registersWithDefaults(key);
    await expect.poll(async () => (await auditEvents(c, { host_id: enrolled.json.host_id, type: 'host' })).map((e) => [e.type, e.actor, e.via, e.person_id]).sort()).toEqual([
      ['host.enrolled', 'host', 'host_enroll', alice.personId],
      ['host.linked', 'host', 'host_enroll', alice.personId],
    ]);
  });

  it('POST /host/enroll without a host JWT, or with one another key signed, is 401 invalid_jwt, and the token stays usable', async () => {
    const dee = await person('Dee');
    const { token } = await tokenOf(dee);
    const key = await newEd25519();
    const stranger = await newEd25519();
    expect(code(await enroll({ token, public_key: key.publicJwk }))).toBe('401 invalid_jwt');
    expect(code(await enroll({ token, public_key: key.publicJwk }, stranger))).toBe('401 invalid_jwt');
    expect(await server.store.findHostByThumbprint(key.thumbprint)).toBeNull();
    expect((await enroll({ token, public_key: key.publicJwk }, key)).status).toBe(200);
  });

  it('without a key the token is given once; the host binds its key with it, is linked to the person, and its agent gets the defaults; a second use is 400 host_not_pending_enrollment', async () => {
    const bea = await person('Bea');
    const { token, res } = await tokenOf(bea, ['echo'], 'bea build runner');
    expect(res.json).toEqual({
      enrollment_id: expect.stringMatching(/^enr_/), status: 'pending_enrollment', enrollment_token: expect.stringMatching(TOKEN), expires_in: 3600,
      name: 'bea build runner', default_capabilities: ['echo'],
    });
    // No host exists until a key is bound.
    expect(await myHostIds(bea)).toEqual([]);

    const key = await newEd25519();
    const enrolled = await enroll({ token, public_key: key.publicJwk }, key);
    expect(enrolled.status, enrolled.text).toBe(200);
    expect(enrolled.json).toEqual({ host_id: expect.stringMatching(/^hst_/), status: 'active', name: 'bea build runner', default_capabilities: ['echo'] });
    expect(await server.store.getHost(enrolled.json.host_id)).toMatchObject({ status: 'active', userId: bea.personId, thumbprint: key.thumbprint });
    expect(await myHostIds(bea)).toEqual([enrolled.json.host_id]);
    await registersWithDefaults(key);

    // Used once: neither another key nor the same one binds again, and nothing changes.
    const other = await newEd25519();
    for (const again of [other, key]) {
      const second = await enroll({ token, public_key: again.publicJwk }, again);
      expect(code(second)).toBe('400 host_not_pending_enrollment');
      expect(typeof second.json.message).toBe('string');
    }
    expect(await server.store.findHostByThumbprint(other.thumbprint)).toBeNull();
    expect(await myHostIds(bea)).toEqual([enrolled.json.host_id]);

    await expect.poll(async () => (await auditEvents(c, { host_id: enrolled.json.host_id, type: 'host.enrolled' })).map((e) => [e.actor, e.person_id, e.enrollment_id])).toEqual([
      ['host', bea.personId, res.json.enrollment_id],
    ]);
    const created = (await auditEvents(c, { type: 'host.enrollment_created' })).filter((e) => e.person_id === bea.personId);
    expect(created.map((e) => [e.actor, e.via, e.enrollment_id])).toEqual([['person', 'people_api', res.json.enrollment_id]]);
    // The token is a credential: it is in no audit event.
    expect(JSON.stringify(await auditEvents(c))).not.toContain(token.slice('agent_enroll_'.length));
  });

  it("the host's own name, when it gives one, replaces the person's", async () => {
    const cleo = await person('Cleo');
    const { token } = await tokenOf(cleo, [], 'named by cleo');
    const key = await newEd25519();
    const enrolled = await enroll({ token, public_key: key.publicJwk, name: 'named by the host' }, key);
    expect(enrolled.json).toEqual({ host_id: expect.any(String), status: 'active', name: 'named by the host', default_capabilities: [] });
  });

  it('a wrong, malformed or altered token is 401 enrollment_token_invalid and makes no host', async () => {
    const dan = await person('Dan');
    const { token } = await tokenOf(dan);
    const key = await newEd25519();
    const last = token.at(-1) === 'A' ? 'B' : 'A';
    for (const wrong of [`agent_enroll_${'A'.repeat(43)}`, 'not-a-token', `${token.slice(0, -1)}${last}`, `${token}A`, token.toUpperCase()]) {
      const res = await enroll({ token: wrong, public_key: key.publicJwk }, key);
      expect([wrong, code(res)]).toEqual([wrong, '401 enrollment_token_invalid']);
    }
    expect(await server.store.findHostByThumbprint(key.thumbprint)).toBeNull();
    // The right token still works: the wrong ones spent nothing of it.
    expect((await enroll({ token, public_key: key.publicJwk }, key)).status).toBe(200);
  });

  it("past its hour a token is 401 enrollment_token_expired and makes no host; a day after it was made it is unknown, 401 enrollment_token_invalid", async () => {
    const eve = await person('Eve');
    const { token } = await tokenOf(eve);
    const key = await newEd25519();
    await later(HOUR_MS + 1000, async () => {
      expect(code(await enroll({ token, public_key: key.publicJwk }, key))).toBe('401 enrollment_token_expired');
    });
    await later(24 * HOUR_MS + 1000, async () => {
      expect(code(await enroll({ token, public_key: key.publicJwk }, key))).toBe('401 enrollment_token_invalid');
    });
    expect(await server.store.findHostByThumbprint(key.thumbprint)).toBeNull();
    expect(await myHostIds(eve)).toEqual([]);
    // Just inside its hour it still binds.
    await later(HOUR_MS - 60_000, async () => {
      expect((await enroll({ token, public_key: key.publicJwk }, key)).status).toBe(200);
    });
  });

  it('two enrolls at once with one token make exactly one host', async () => {
    const finn = await person('Finn');
    const { token } = await tokenOf(finn);
    const keys = await Promise.all(Array.from({ length: 8 }, () => newEd25519()));
    const answers = await Promise.all(keys.map((key) => enroll({ token, public_key: key.publicJwk }, key)));
    expect(answers.map(code).sort()).toEqual(['200', ...Array.from({ length: 7 }, () => '400 host_not_pending_enrollment')]);
    const hosts = await Promise.all(keys.map((key) => server.store.findHostByThumbprint(key.thumbprint)));
    expect(hosts.filter((h) => h !== null)).toHaveLength(1);
    expect(await myHostIds(finn)).toEqual([answers.find((a) => a.status === 200)!.json.host_id]);
  });

  it("POST /people/me/hosts without a signed-in session is 401, without the session's CSRF token 403, and with a stale sign-in 401, and makes nothing", async () => {
    const gus = await person('Gus');
    const other = await person('Other');
    const otherCsrf = (await other.api.get('/people/me')).json.csrf_token as string;
    const key = await newEd25519();
    const body = { name: 'gus laptop', default_capabilities: ['echo'], public_key: key.publicJwk };
    const visitor = new PersonBrowser(server.baseUrl);
    await visitor.request('GET', '/signin');
    for (const cookie of [undefined, visitor.cookie, 'agentgate_session=not-a-session']) {
      const res = await http('POST', c.url('/people/me/hosts'), { json: body, headers: { ...(cookie ? { cookie } : {}), 'x-csrf-token': otherCsrf } });
      expect([cookie, code(res)]).toEqual([cookie, '401 authentication_required']);
    }
    for (const csrf of [null, '', 'x'.repeat(43), otherCsrf]) expect([csrf, code(await setUp(gus, body, csrf))]).toEqual([csrf, '403 unauthorized']);
    await later((FRESH_SECONDS + 1) * 1000, async () => {
      expect(code(await setUp(gus, body))).toBe('401 authentication_required');
      expect(code(await setUp(gus, { name: 'no key' }))).toBe('401 authentication_required');
    });
    expect(await server.store.findHostByThumbprint(key.thumbprint)).toBeNull();
    expect(await myHostIds(gus)).toEqual([]);
  });

  it('a presence capability or an unknown one as a default is 400 invalid_capabilities, with a key or without, as the admin API answers', async () => {
    const hana = await person('Hana');
    const key = await newEd25519();
    for (const [defaults, refused] of [[['echo', 'transfer_money'], ['transfer_money']], [['no_such_capability'], ['no_such_capability']]] as const) {
      for (const publicKey of [key.publicJwk, undefined]) {
        const res = await setUp(hana, { name: 'hana host', default_capabilities: defaults, ...(publicKey ? { public_key: publicKey } : {}) });
        expect(code(res)).toBe('400 invalid_capabilities');
        expect(res.json.invalid_capabilities).toEqual(refused);
      }
      const admin = await c.admin('POST', '/admin/hosts', { public_key: key.publicJwk, default_capabilities: defaults, user_id: hana.personId });
      expect(code(admin)).toBe('400 invalid_capabilities');
      expect(admin.json.invalid_capabilities).toEqual(refused);
    }
    expect(await server.store.findHostByThumbprint(key.thumbprint)).toBeNull();
  });

  it("the key of a host linked to another person is 409 host_already_linked, by the API or an enrollment token, and that host is unchanged; the token is not spent", async () => {
    const ivan = await person('Ivan');
    const jo = await person('Jo');
    const ivanKey = await newEd25519();
    const created = await c.admin('POST', '/admin/hosts', { public_key: ivanKey.publicJwk, default_capabilities: ['echo'], user_id: ivan.personId, name: 'ivan host' });
    expect(created.status).toBe(201);
    const before = await server.store.getHost(created.json.host_id);
    const agent = await registersWithDefaults(ivanKey);

    expect(code(await setUp(jo, { name: 'mine now', default_capabilities: ['weather_lookup'], public_key: ivanKey.publicJwk }))).toBe('409 host_already_linked');
    const { token } = await tokenOf(jo, ['weather_lookup'], 'mine now');
    expect(code(await enroll({ token, public_key: ivanKey.publicJwk, name: 'mine now' }, ivanKey))).toBe('409 host_already_linked');
    // The caller's own linked host is no different: this door never touches an existing host.
    expect(code(await setUp(ivan, { name: 'again', default_capabilities: [], public_key: ivanKey.publicJwk }))).toBe('409 host_already_linked');

    expect(await server.store.getHost(created.json.host_id)).toEqual(before);
    expect((await server.store.getAgent(agent.id))!.agent.status).toBe('active');
    expect(await myHostIds(jo)).toEqual([]);
    // The refusal spent nothing of Jo's token.
    const own = await newEd25519();
    expect((await enroll({ token, public_key: own.publicJwk }, own)).status).toBe(200);
  });

  it("the key of an unlinked dynamic host is 409 conflict, by the API or an enrollment token, and its autonomous agent stays active, unclaimed", async () => {
    const kim = await person('Kim');
    const dynamic = await newEd25519();
    const { res, agent } = await c.register(dynamic, { mode: 'autonomous', capabilities: ['echo'] });
    expect(res.json.status, res.text).toBe('active');
    const before = await server.store.getHost(res.json.host_id);
    expect(before!.userId).toBeUndefined();

    const refused = await setUp(kim, { name: 'not mine', default_capabilities: ['echo'], public_key: dynamic.publicJwk });
    expect(code(refused)).toBe('409 conflict');
    expect(refused.json.message).toMatch(/a host with this key already exists/);
    const { token } = await tokenOf(kim);
    expect(code(await enroll({ token, public_key: dynamic.publicJwk }, dynamic))).toBe('409 conflict');

    expect(await server.store.getHost(res.json.host_id)).toEqual(before);
    expect((await c.status(dynamic, agent!.id)).json.status).toBe('active');
    expect((await c.execute(agent!, 'echo', {})).status).toBe(200);
    expect(await myHostIds(kim)).toEqual([]);
  });

  it('bad input to POST /host/enroll is 400 invalid_request with the error body, never a 500', async () => {
    const lea = await person('Lea');
    const { token } = await tokenOf(lea);
    const key = await newEd25519();
    const raw = (body: string, contentType = 'application/json') => http('POST', c.url('/host/enroll'), { body, headers: { 'content-type': contentType } });
    const answers: Array<[string, HttpResult]> = [
      ['not JSON', await raw('{"token": ')],
      ['text/plain', await raw(JSON.stringify({ token, public_key: key.publicJwk }), 'text/plain')],
      ['no body', await http('POST', c.url('/host/enroll'))],
      ['an array', await enroll([token])],
      ['null', await raw('null')],
      ['no token', await enroll({ public_key: key.publicJwk }, key)],
      ['no key', await enroll({ token })],
      ['a huge token', await enroll({ token: `agent_enroll_${'A'.repeat(20_000)}`, public_key: key.publicJwk })],
      ['a number as token', await enroll({ token: 42, public_key: key.publicJwk }, key)],
      ['an object as token', await enroll({ token: { token }, public_key: key.publicJwk })],
      ['a string as key', await enroll({ token, public_key: JSON.stringify(key.publicJwk) })],
      ['a key with its private part', await enroll({ token, public_key: { ...key.publicJwk, d: key.publicJwk.x } })],
      ['an empty name', await enroll({ token, public_key: key.publicJwk, name: '' }, key)],
      ['a number as name', await enroll({ token, public_key: key.publicJwk, name: 7 }, key)],
    ];
    for (const [what, res] of answers) {
      expect([what, code(res)]).toEqual([what, '400 invalid_request']);
      expect([what, typeof res.json.message]).toEqual([what, 'string']);
    }
    // None of them spent the token.
    expect((await enroll({ token, public_key: key.publicJwk }, key)).status).toBe(200);
  });

  describe('the account page', () => {
    /** The account page of `who`, 200. */
    async function accountOf(who: Person) {
      const page = await who.browser.request('GET', '/account');
      expect(page.status, page.text.slice(0, 1500)).toBe(200);
      return page;
    }
    const setUpOnPage = async (who: Person, fields: Record<string, string>, csrf?: string) =>
      who.browser.request('POST', '/account/hosts/new', { csrf: csrf ?? who.browser.csrfOf((await accountOf(who)).text, '/account/hosts/new'), ...fields });
    const tokenOnPage = (text: string) => /agent_enroll_[A-Za-z0-9_-]{43}/.exec(text)?.[0];

    it('the form without a key shows the enrollment token once, the name as text, and how to use it; the token binds the host, which the page then lists', async () => {
      const mia = await person('Mia');
      const name = '<img src=x onerror=alert(1)> "laptop"';
      const shown = await setUpOnPage(mia, { name, default_capabilities: 'echo, weather_lookup' });
      expect(shown.status, visibleText(shown.text).slice(0, 1500)).toBe(200);
      expect(shown.headers.get('cache-control')).toBe('no-store');
      const token = tokenOnPage(shown.text);
      expect(token).toMatch(TOKEN);
      expect(shown.text).not.toContain('<img src=x');
      expect(shown.text).toContain('&lt;img src=x onerror=alert(1)&gt; &quot;laptop&quot;');
      const text = visibleText(shown.text);
      expect(text).toContain('shown only this once');
      expect(text).toContain(`npx agentgate hosts enroll --url ${server.config.issuer} --token ${token}`);
      expect(text).toContain(`POST ${server.config.issuer}/host/enroll with a host JWT signed by that key`);
      expect(text).toMatch(/default capabilities echo, weather_lookup/);

      // Shown once: the account page never shows it again.
      expect((await accountOf(mia)).text).not.toContain(token!);
      const key = await newEd25519();
      const enrolled = await enroll({ token, public_key: key.publicJwk }, key);
      expect(enrolled.status, enrolled.text).toBe(200);
      expect(enrolled.json.default_capabilities).toEqual(['echo', 'weather_lookup']);
      const page = await accountOf(mia);
      expect(page.text).toContain(`Host id <code>${enrolled.json.host_id}</code>`);
      expect(page.text).not.toContain(token!);
      expect(page.text).not.toContain('<img src=x');
    });

    it('the form with a key shows a token that binds that key only; once the host binds it, the list shows the host', async () => {
      const ned = await person('Ned');
      const key = await newEd25519();
      const posted = await setUpOnPage(ned, { name: 'ned desktop', default_capabilities: 'echo', public_key: JSON.stringify(key.publicJwk) });
      expect(posted.status, visibleText(posted.text).slice(0, 1500)).toBe(200);
      const shown = visibleText(posted.text);
      expect(shown).toContain(`It binds only the key you gave (thumbprint ${key.thumbprint}).`);
      expect(shown).toContain('npx agentgate hosts enroll');
      // Nothing answers for the key until its holder binds it.
      expect(await server.store.findHostByThumbprint(key.thumbprint)).toBeNull();
      const token = tokenOnPage(posted.text) ?? '';
      expect((await enroll({ token, public_key: key.publicJwk }, key)).status).toBe(200);
      const host = await server.store.findHostByThumbprint(key.thumbprint);
      expect(host).toMatchObject({ status: 'active', userId: ned.personId, name: 'ned desktop', defaultCapabilities: ['echo'] });
      const page = visibleText((await ned.browser.request('GET', '/account')).text);
      expect(page).toContain('A host that calls itself ned desktop Status active');
      // A key that is not JSON, or a presence default, is a refusal page and makes nothing.
      const other = await newEd25519();
      const notJson = await setUpOnPage(ned, { name: 'x', public_key: '{kty: OKP' });
      expect(notJson.status).toBe(400);
      expect(visibleText(notJson.text)).toContain('The public key must be a JWK, written as JSON.');
      const presence = await setUpOnPage(ned, { name: 'x', default_capabilities: 'transfer_money', public_key: JSON.stringify(other.publicJwk) });
      expect(presence.status).toBe(400);
      expect(await server.store.findHostByThumbprint(other.thumbprint)).toBeNull();
    });

    it("a forged set-up form (no CSRF token, a wrong one, another session's) and one after a stale sign-in make nothing; the stale one is sent to sign in", async () => {
      const ola = await person('Ola');
      const other = await person('Other');
      const otherToken = other.browser.csrfOf((await accountOf(other)).text);
      const key = await newEd25519();
      const fields = { name: 'forged', default_capabilities: 'echo', public_key: JSON.stringify(key.publicJwk) };
      for (const csrf of [undefined, 'not-the-token-0123456789', otherToken]) {
        for (const withKey of [true, false]) {
          const body = withKey ? fields : { name: 'forged', default_capabilities: 'echo' };
          const refused = await ola.browser.request('POST', '/account/hosts/new', csrf === undefined ? body : { ...body, csrf });
          expect([csrf, withKey, refused.status]).toEqual([csrf, withKey, 403]);
          expect(visibleText(refused.text)).toContain('This form is out of date');
          expect(refused.text).not.toMatch(/agent_enroll_/);
        }
      }
      const page = await accountOf(ola);
      await later((FRESH_SECONDS + 60) * 1000, async () => {
        for (const body of [fields, { name: 'stale', default_capabilities: 'echo' }]) {
          const stale = await ola.browser.request('POST', '/account/hosts/new', { csrf: ola.browser.csrfOf(page.text, '/account/hosts/new'), ...body });
          expect(stale.status).toBe(303);
          expect(stale.headers.get('location')).toBe('/signin?return_to=%2Faccount');
        }
      });
      expect(await server.store.findHostByThumbprint(key.thumbprint)).toBeNull();
      expect(await myHostIds(ola)).toEqual([]);
      expect((await auditEvents(c, { type: 'host.enrollment_created' })).filter((e) => e.person_id === ola.personId)).toEqual([]);
    });

    it("another person sees nothing of a person's enrollment or of the host it made, and cannot act on that host", async () => {
      const pia = await person('Pia');
      const quinn = await person('Quinn');
      const shown = await setUpOnPage(pia, { name: 'pia secret runner', default_capabilities: 'echo' });
      const token = tokenOnPage(shown.text)!;
      const enrollmentId = /enr_[A-Za-z0-9_-]+/.exec((await auditEvents(c, { type: 'host.enrollment_created' })).find((e) => e.person_id === pia.personId)?.enrollment_id ?? '')?.[0];
      expect(enrollmentId).toMatch(/^enr_/);
      const seen = async () => [(await accountOf(quinn)).text, (await quinn.api.get('/people/me/hosts')).text].join('\n');
      for (const secret of [token, enrollmentId!, 'pia secret runner']) expect(await seen()).not.toContain(secret);

      const key = await newEd25519();
      const hostId = (await enroll({ token, public_key: key.publicJwk }, key)).json.host_id as string;
      for (const secret of [token, enrollmentId!, 'pia secret runner', hostId]) expect(await seen()).not.toContain(secret);
      expect(code(await quinn.api.post(`/people/me/hosts/${hostId}/unlink`))).toBe('404 host_not_found');
      expect(code(await quinn.api.post(`/people/me/hosts/${hostId}/revoke`))).toBe('404 host_not_found');
      expect(await server.store.getHost(hostId)).toMatchObject({ status: 'active', userId: pia.personId });
    });
  });
});

forEachStore('the enrollment budget', (storeKind) => {
  let server: TestServer;
  let c: Client;
  beforeAll(async () => {
    server = await startTestServer({ store: storeKind, env: { INSECURE_DEV_SIGN_IN: 'true', RATE_LIMIT_ENROLLMENTS_PER_HOUR: '3' } });
    c = new Client(server);
  });
  afterAll(() => server.close());

  it('enroll attempts past RATE_LIMIT_ENROLLMENTS_PER_HOUR from one address are 429 before any lookup, and a person can make only as many enrollments an hour', async () => {
    const key = await newEd25519();
    const guesses = [];
    for (let i = 0; i < 4; i++) guesses.push(await http('POST', c.url('/host/enroll'), { json: { token: `agent_enroll_${String(i).repeat(43)}`, public_key: key.publicJwk } }));
    expect(guesses.map(code)).toEqual(['401 enrollment_token_invalid', '401 enrollment_token_invalid', '401 enrollment_token_invalid', '429 rate_limited']);
    expect(Number(guesses[3]!.headers.get('retry-after'))).toBeGreaterThan(0);

    const rae = await devSignedIn(server.baseUrl, `Rae-${storeKind}`, '/account');
    const made = [];
    for (let i = 0; i < 4; i++) made.push(await rae.api.post('/people/me/hosts', { name: `runner ${i}` }));
    expect(made.map(code)).toEqual(['201', '201', '201', '429 rate_limited']);
  });
});
