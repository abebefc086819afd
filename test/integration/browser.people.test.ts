// The account page in a real browser (headless Chromium, test/support/browser.ts): a person opens
// agentgate's root, is sent to sign in, approves an agent (the approval page shows the policy's
// reason as agentgate's, apart from the agent's claims), and on their account page sees their agents,
// hosts and passkeys; they add two passkeys (a platform authenticator, then a security key proven by
// the first), revoke a grant, revoke an agent, unlink a host (signing in again first, as a stale
// sign-in must), and remove the lost security key's passkey by confirming with the other. Every step
// is photographed (test-results/browser-people/), every agentgate response the browser navigates to
// carries the Content-Security-Policy, no page runs inline script, and nothing is logged as a
// console error. Opened as http://localhost:<port>: passkeys need a host name.
import { describe, expect, it } from 'vitest';
import { addVirtualAuthenticator, expectSoundStep, personAtBrowserForBlock } from '../support/browser.ts';
import { Client, code, http } from '../support/client.ts';
import { newEd25519 } from '../support/keys.ts';
import { testServerForBlock } from '../support/server.ts';

const PERSON = 'Robin';
const PERSON_ID = `dev|${PERSON}`;
const FRESH_SECONDS = 300;
const TEST_TIMEOUT_MS = 45_000;

const server = testServerForBlock({ store: 'redis', issuerHost: 'localhost', env: { INSECURE_DEV_SIGN_IN: 'true', SIGN_IN_FRESH_SECONDS: String(FRESH_SECONDS) } });
const c = new Client(server);
const person = personAtBrowserForBlock({ screenshotsDir: 'browser-people' });

/**
 * A person's action that navigates, waited for until the browser is at `lands`; then what every
 * page must satisfy: each agentgate response on the way (redirects included) carried the CSP, the
 * page runs no inline script, and no console error was logged. Takes the screenshot.
 */
async function step(name: string, lands: (url: URL) => boolean, action: () => Promise<unknown>): Promise<void> {
  person.navigations.length = 0;
  await Promise.all([person.page.waitForURL(lands), action()]);
  await person.page.waitForLoadState('load');
  await expectSoundStep(person, name, person.navigations.filter((r) => new URL(r.url()).origin === server.baseUrl));
}

const at = (pathname: string, search?: string) => (url: URL) => url.pathname === pathname && (search === undefined || url.search === search);
const mainText = async () => (await person.page.innerText('main')).replace(/\s+/g, ' ');

/** The dev sign-in form, filled and sent. */
async function signIn() {
  await person.page.fill('#name', PERSON);
  await person.page.click('form[action="/signin/dev"] button[type=submit]');
}

describe('the account page in a real browser', () => {
  it('a person signs in from /, sees their agents, hosts and passkeys, revokes a grant and an agent, unlinks a host and removes a passkey with another', async () => {
    const { page } = person;
    // Agent A asks the person; agent B runs on a host an administrator linked to them with echo as a default.
    const planner = await c.register(await newEd25519(), {
      mode: 'delegated', name: 'trip planner', host_name: 'robin-laptop',
      capabilities: ['echo', { name: 'weather_lookup', constraints: { city: { in: ['Oslo', 'Bergen'] } } }],
    });
    expect(planner.res.json.status).toBe('pending');
    const buildHost = await newEd25519();
    expect((await c.admin('POST', '/admin/hosts', { public_key: buildHost.publicJwk, default_capabilities: ['echo'], user_id: PERSON_ID, name: 'build server' })).status).toBe(201);
    const builder = await c.register(buildHost, { mode: 'delegated', name: 'nightly builder', reason: 'runs the nightly build', capabilities: ['echo'] });
    expect(builder.res.json.status).toBe('active');

    // agentgate's root sends a browser to the account page, which sends it to sign in first.
    await step('root-sends-to-sign-in', at('/signin'), () => page.goto(`${server.baseUrl}/`));
    expect(new URL(page.url()).searchParams.get('return_to')).toBe('/account');
    expect(await mainText()).toContain('Sign in to see the agents you approved');
    await step('account-after-sign-in', at('/account'), signIn);
    expect(await mainText()).toContain('An agent that calls itself nightly builder');

    // The approval page: the policy's reason is agentgate's, the names are the agent's claims.
    await step('approval-page', at('/device'), () => page.goto(planner.res.json.approval.verification_uri_complete));
    const policyLines = await page.locator('p.policy').allTextContents();
    expect(policyLines).toEqual(['agentgate asks you because: user approval required', 'agentgate asks you because: user approval required']);
    expect(await mainText()).toContain('What agentgate itself says is marked as agentgate\'s.');
    await step('approved', at('/device/decision'), () => page.click('button[value="approve"]'));
    expect(await mainText()).toContain('You approved');

    // A passkey, then a second one on a security key, proven by the first: from the account page.
    const platform = await addVirtualAuthenticator(page);
    await step('account-with-agents', at('/account'), () => page.click('header a[href="/account"]'));
    await step('add-passkey', at('/passkeys/new'), () => page.click('a[href^="/passkeys/new"]'));
    await step('passkey-added', at('/account'), () => page.click('#create-passkey'));
    const securityKey = await addVirtualAuthenticator(page, { transport: 'usb' });
    await step('add-second-passkey', at('/passkeys/new'), () => page.click('a[href^="/passkeys/new"]'));
    await step('second-passkey-added', at('/account'), () => page.click('#create-passkey'));
    expect(await platform.credentials()).toHaveLength(1);
    expect(await securityKey.credentials()).toHaveLength(1);
    const passkeys = await server.store.listPasskeys(PERSON_ID);
    expect(passkeys).toHaveLength(2);

    // What the page shows: both agents with their grants in words, both hosts, both passkeys.
    const agents = page.locator('section.agent');
    expect(await agents.count()).toBe(2);
    const plannerSection = agents.filter({ hasText: 'trip planner' });
    const plannerText = (await plannerSection.innerText()).replace(/\s+/g, ' ');
    expect(plannerText).toContain('Running on a host that calls itself robin-laptop');
    expect(plannerText).toContain('city: one of "Oslo", "Bergen"');
    expect(plannerText).toContain('Granted in your name');
    const builderText = (await agents.filter({ hasText: 'nightly builder' }).innerText()).replace(/\s+/g, ' ');
    expect(builderText).toContain("Granted automatically, by agentgate's policy (a default capability of its host)");
    expect(builderText).toContain('Says why runs the nightly build');
    expect(await page.locator('section.host').count()).toBe(2);
    expect(await page.locator('ul.passkeys > li').count()).toBe(2);

    // Revoke one grant of the planner.
    const plannerAgent = planner.agent!;
    await step('grant-revoked', at('/account', '?done=grant_revoked'), () => plannerSection.locator('button', { hasText: 'Revoke weather_lookup' }).click());
    expect(await mainText()).toContain('The capability is revoked');
    expect(code(await c.execute(plannerAgent, 'weather_lookup', { city: 'Oslo' }))).toBe('403 grant_revoked');
    expect((await c.execute(plannerAgent, 'echo', {})).status).toBe(200);

    // Revoke the builder.
    await step('agent-revoked', at('/account', '?done=agent_revoked'), () => agents.filter({ hasText: 'nightly builder' }).locator('button', { hasText: 'Revoke this agent' }).click());
    expect(code(await c.execute(builder.agent!, 'echo', {}))).toBe('403 agent_revoked');
    expect((await agents.filter({ hasText: 'nightly builder' }).innerText()).replace(/\s+/g, ' ')).toContain('Status revoked');

    // Unlink the planner's host, after the sign-in went stale: sent to sign in, nothing changed, then done.
    server.clock.advance((FRESH_SECONDS + 60) * 1000);
    const laptop = page.locator('section.host').filter({ hasText: 'robin-laptop' });
    await step('unlink-needs-sign-in', at('/signin'), () => laptop.locator('button', { hasText: 'Unlink' }).click());
    expect((await server.store.getHost(planner.res.json.host_id))!.userId).toBe(PERSON_ID);
    await step('signed-in-again', at('/account'), signIn);
    await step('host-unlinked', at('/account', '?done=host_unlinked'), () => page.locator('section.host').filter({ hasText: 'robin-laptop' }).locator('button', { hasText: 'Unlink' }).click());
    expect((await server.store.getHost(planner.res.json.host_id))!).toMatchObject({ status: 'pending' });
    expect(code(await c.execute(plannerAgent, 'echo', {}))).toBe('403 agent_revoked');
    expect(await page.locator('section.host').count()).toBe(1);

    // The security key is lost: its passkey is removed by confirming with the platform one.
    const lostId = (await securityKey.credentials())[0]!.credentialId;
    // Removed without closing its DevTools session: closing one that enabled WebAuthn turns the
    // virtual authenticators off for the whole page, the platform one included.
    await securityKey.cdp.send('WebAuthn.removeVirtualAuthenticator', { authenticatorId: securityKey.authenticatorId });
    const lost = passkeys.find((p) => Buffer.from(p.id, 'base64url').equals(Buffer.from(lostId, 'base64')))!;
    expect(lost).toBeDefined();
    await step('remove-passkey', at('/account/passkeys/remove'), () => page.click(`a[href="/account/passkeys/remove?passkey_id=${encodeURIComponent(lost.id)}"]`));
    expect(await page.locator('#passkey-removal-options').count()).toBe(1);
    await step('passkey-removed', at('/account', '?done=passkey_removed'), () => page.click('#remove-passkey'));
    expect(await mainText()).toContain('The passkey is removed.');
    expect((await server.store.listPasskeys(PERSON_ID)).map((p) => p.id)).toEqual(passkeys.filter((p) => p.id !== lost.id).map((p) => p.id));
    expect(await page.locator('ul.passkeys > li').count()).toBe(1);
    await platform.remove();
    expect(person.consoleErrors).toEqual([]);
  }, TEST_TIMEOUT_MS);

  it('a person sets up a host with its key on the account page, gets the token once, and the host appears when its machine binds the key', async () => {
    const { page } = person;
    // A fresh sign-in: setting up a host gives default capabilities in the person's name.
    await step('sign-in-to-set-up', at('/signin'), () => page.goto(`${server.baseUrl}/signin?return_to=%2Faccount`));
    await step('account-to-set-up', at('/account'), signIn);
    const hostKey = await newEd25519();
    await page.fill('#host-name', 'render farm <b>01</b>');
    await page.fill('#host-defaults', 'echo');
    await page.fill('#host-key', JSON.stringify(hostKey.publicJwk));
    await step('enrollment-token', at('/account/hosts/new'), () => page.click('form.setup button[type=submit]'));
    const token = (await page.innerText('#enrollment-token')).trim();
    expect(token).toMatch(/^agent_enroll_[A-Za-z0-9_-]{43}$/);
    const shown = await mainText();
    expect(shown).toContain('For the host render farm <b>01</b>, with the default capabilities echo.');
    expect(shown).toContain(`It binds only the key you gave (thumbprint ${hostKey.thumbprint}).`);
    expect(await page.locator('main b').count()).toBe(0);
    // No host answers for the key until its machine binds it, signing with it.
    expect(await server.store.findHostByThumbprint(hostKey.thumbprint)).toBeNull();
    const enrolled = await http('POST', c.url('/host/enroll'), { json: { token, public_key: hostKey.publicJwk }, token: await c.hostToken(hostKey) });
    expect(enrolled.status, enrolled.text).toBe(200);
    await step('account-with-enrolled-host', at('/account'), () => page.goto(`${server.baseUrl}/account`));
    expect(await mainText()).not.toContain(token);
    const farm = (await page.locator('section.host').filter({ hasText: 'render farm' }).innerText()).replace(/\s+/g, ' ');
    expect(farm).toContain('Status active');
    expect(person.consoleErrors).toEqual([]);
  }, TEST_TIMEOUT_MS);
});
