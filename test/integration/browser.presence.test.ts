// The third browser run: approving a capability that changes things needs a passkey. A real
// headless Chromium with a virtual authenticator (CDP) signs in, adds a passkey, and approves
// `transfer_money` (marked `approval_strength: "presence"` in the catalog) with a fresh assertion
// bound to that approval, while the agent's host polls its status. The server is reached as
// http://localhost:<port>: an IP address is never a valid WebAuthn relying-party id.
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertNoInlineScript, addVirtualAuthenticator, launchBrowser, newPage } from '../support/browser.ts';
import { Client, code } from '../support/client.ts';
import { newEd25519 } from '../support/keys.ts';
import { PersonBrowser } from '../support/person-browser.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

let browser: Browser;
let server: TestServer;
let c: Client;

beforeAll(async () => {
  browser = await launchBrowser();
  server = await startTestServer({ store: 'redis', issuerHost: 'localhost', env: { INSECURE_DEV_SIGN_IN: 'true', APPROVAL_INTERVAL_SECONDS: '1' } });
  c = new Client(server);
});
afterAll(async () => {
  await browser?.close();
  await server?.close();
});

/** Polls status at the approval's interval (never faster), until the agent no longer waits. */
async function pollUntilDecided(agent: Awaited<ReturnType<Client['register']>>['agent']) {
  for (let i = 0; i < 30; i++) {
    await new Promise((r) => setTimeout(r, 1000));
    const status = await c.status(agent!.host, agent!.id);
    expect(status.status, status.text).toBe(200);
    const grants = status.json.agent_capability_grants as Array<{ capability: string; status: string }>;
    if (status.json.status !== 'pending' && !grants.some((g) => g.status === 'pending')) return status.json;
  }
  throw new Error('the agent was not decided in time');
}

describe('proof of presence with a passkey', () => {
  it('a person adds a passkey and approves a capability that changes things with it; the agent can use it', async () => {
    const { res, agent } = await c.register(await newEd25519(), { name: 'treasury bot', mode: 'delegated', capabilities: ['echo', 'transfer_money'] });
    expect(res.json.status).toBe('pending');
    expect(res.json.approval.verification_uri_complete).toMatch(/^http:\/\/localhost:/);
    const { page, consoleErrors, screenshot } = await newPage(browser, { screenshotsDir: 'browser-presence' });
    const authenticator = await addVirtualAuthenticator(page);

    await page.goto(res.json.approval.verification_uri_complete);
    await screenshot('sign-in');
    await page.fill('#name', 'Pat');
    await Promise.all([page.waitForURL(/\/device\?/), page.click('form[action="/signin/dev"] button[type=submit]')]);
    await screenshot('approval-needs-passkey');
    await assertNoInlineScript(page);
    expect(await page.textContent('main')).toContain('needs a passkey');

    await Promise.all([page.waitForURL(/\/passkeys\/new/), page.click('a[href^="/passkeys/new"]')]);
    await screenshot('add-passkey');
    await assertNoInlineScript(page);
    await Promise.all([page.waitForURL(/\/device\?/), page.click('#create-passkey')]);
    expect(await authenticator.credentials()).toHaveLength(1);
    await screenshot('approval-with-passkey');
    expect(await page.locator('#presence-options').count()).toBe(1);

    await Promise.all([page.waitForURL(/\/device\/decision/), page.click('button[value="approve"]')]);
    await screenshot('approved');
    expect(await page.textContent('main')).toContain('You approved');
    expect(consoleErrors).toEqual([]);

    const decided = await pollUntilDecided(agent);
    expect(decided.status).toBe('active');
    expect(decided.agent_capability_grants.map((g: { capability: string; status: string }) => `${g.capability}:${g.status}`).sort())
      .toEqual(['echo:active', 'transfer_money:active']);
    expect((await c.execute(agent!, 'transfer_money', { amount: 5 })).status).toBe(200);

    // A second passkey (a security key) is added by proving the first one in the same ceremony:
    // the page asks the platform authenticator for an assertion, then the key creates the new one.
    const securityKey = await addVirtualAuthenticator(page, { transport: 'usb' });
    await page.goto(`${server.baseUrl}/passkeys/new?return_to=/device`);
    expect(await page.locator('#passkey-proof-options').count()).toBe(1);
    await screenshot('add-second-passkey');
    await Promise.all([page.waitForURL((url) => url.pathname === '/device'), page.click('#create-passkey')]);
    await screenshot('second-passkey-added');
    expect(await authenticator.credentials()).toHaveLength(1);
    expect(await server.store.listPasskeys('dev|Pat')).toHaveLength(2);
    await securityKey.remove();
    await server.audit.log.flush();
    const added = (await c.admin('GET', '/admin/audit?type=passkey.added')).json.events as Array<Record<string, unknown>>;
    expect(added.filter((e) => e.person_id === 'dev|Pat').map((e) => e.proof)).toEqual(['passkey', 'fresh_login']);
    expect(consoleErrors).toEqual([]);
  });
});

describe('presence is checked by the server, not by the page', () => {
  it('approving a presence capability without a passkey assertion is refused and decides nothing', async () => {
    const { res, agent } = await c.register(await newEd25519(), { mode: 'delegated', capabilities: ['transfer_money'] });
    const person = new PersonBrowser(server.baseUrl);
    const page = await person.signIn('Quinn', `/device?user_code=${res.json.approval.user_code}`);
    const approvalId = /name="approval_id" value="([^"]+)"/.exec(page.text)![1]!;
    const refused = await person.request('POST', '/device/decision', {
      csrf: person.csrfOf(page.text), agent_id: agent!.id, approval_id: approvalId, verdict: 'approve', capabilities: ['transfer_money'],
    });
    expect(refused.status).toBe(403);
    expect(refused.text).toContain('needs your passkey');
    expect((await server.store.getAgent(agent!.id))!.agent.status).toBe('pending');
    // The rest of an approval needs no passkey: denying works.
    const denied = await person.request('POST', '/device/decision', { csrf: person.csrfOf(page.text), agent_id: agent!.id, approval_id: approvalId, verdict: 'deny' });
    expect(denied.status).toBe(200);
    expect(code(await c.status(agent!.host, agent!.id))).toBe('200');
  });

  it("a passkey challenge issued for one approval cannot decide another", async () => {
    const a = await c.register(await newEd25519(), { mode: 'delegated', capabilities: ['transfer_money'] });
    const b = await c.register(await newEd25519(), { mode: 'delegated', capabilities: ['transfer_money'] });
    const person = new PersonBrowser(server.baseUrl);
    // Pretend the person has a passkey: the page then issues a challenge for the approval it shows.
    const personId = 'dev|Rae';
    await server.store.addPasskey(personId, 'AAAA', JSON.stringify({ publicKey: 'AAAA', counter: 0, createdAtMs: 0 }), 20);
    const pageA = await person.signIn('Rae', `/device?user_code=${a.res.json.approval.user_code}`);
    expect(pageA.text).toContain('presence-options');
    const pageB = /name="approval_id" value="([^"]+)"/.exec((await person.request('GET', `/device?user_code=${b.res.json.approval.user_code}`)).text)![1]!;
    // B's page replaced the session's challenge with one for B; an answer submitted for A now finds none for A.
    const approvalA = /name="approval_id" value="([^"]+)"/.exec(pageA.text)![1]!;
    const refused = await person.request('POST', '/device/decision', {
      csrf: person.csrfOf(pageA.text), agent_id: a.agent!.id, approval_id: approvalA, verdict: 'approve', capabilities: ['transfer_money'],
      webauthn_response: JSON.stringify({ id: 'AAAA', rawId: 'AAAA', type: 'public-key', response: {} }),
    });
    expect(refused.status).toBe(403);
    expect(refused.text).toContain('out of date');
    expect(pageB).not.toBe(approvalA);
    expect((await server.store.getAgent(a.agent!.id))!.agent.status).toBe('pending');
  });
});
