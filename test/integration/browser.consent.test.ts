// The approval page of a constrained transfer_money request in a real browser (headless Chromium,
// test/support/browser.ts): what a person sees before they approve a capability that moves money
// must be what execute enforces. The constraints read in words, whole; an agent whose name imitates
// the person's own host is flagged; the presence capability cannot be ticked without a passkey; and
// once a passkey is added (a virtual authenticator), approving with it lets the agent transfer within
// the limits and nothing beyond. Every page is photographed (test-results/browser-consent/), runs no
// inline script and logs no console error. Opened as http://localhost:<port> (passkeys need a host name).
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addVirtualAuthenticator, assertNoInlineScript, launchBrowser, newPage } from '../support/browser.ts';
import { Client, code } from '../support/client.ts';
import { newEd25519 } from '../support/keys.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const PERSON = 'Alice';
const HOST_NAME = 'alice-laptop';
/** The person's own host's name with a Cyrillic а (U+0430) in front. */
const IMITATION = '\u0430lice-laptop';
const CURRENCIES = ['EUR', 'USD', 'GBP', 'CHF', 'SEK', 'NOK', 'DKK', 'PLN', 'CZK', 'HUF', 'JPY', 'CAD'];

let browser: Browser;
let server: TestServer;
let c: Client;

beforeAll(async () => {
  browser = await launchBrowser();
  server = await startTestServer({ store: 'redis', issuerHost: 'localhost', env: { INSECURE_DEV_SIGN_IN: 'true' } });
  c = new Client(server);
});
afterAll(async () => {
  await browser?.close();
  await server?.close();
});

describe('the approval page of a constrained transfer_money request, in a real browser', () => {
  it('shows the constraints in words and a look-alike warning, cannot tick transfer_money without a passkey, and approves it with one; execute then holds to the limits', async () => {
    // The person's own host, linked by an administrator: its name is one an agent could imitate.
    const ownHost = await newEd25519();
    expect((await c.admin('POST', '/admin/hosts', { public_key: ownHost.publicJwk, default_capabilities: ['echo'], user_id: `dev|${PERSON}`, name: HOST_NAME })).status).toBe(201);

    const { res, agent } = await c.register(await newEd25519(), {
      mode: 'delegated',
      name: IMITATION,
      host_name: 'build server',
      reason: 'Pay the monthly rent and the utility bills.',
      capabilities: [
        'echo',
        { name: 'transfer_money', constraints: { amount: { min: 1, max: 250 }, currency: { in: CURRENCIES }, region: 'EU', note: { not_in: ['urgent', 'gift'] } } },
      ],
    });
    expect(res.json.status).toBe('pending');
    const approvalUrl = res.json.approval.verification_uri_complete as string;
    expect(approvalUrl).toMatch(/^http:\/\/localhost:\d+\/device\?user_code=/);

    const { page, consoleErrors, screenshot } = await newPage(browser, { screenshotsDir: 'browser-consent' });
    const authenticator = await addVirtualAuthenticator(page);
    const main = page.locator('main');

    await page.goto(approvalUrl);
    await page.fill('#name', PERSON);
    await Promise.all([page.waitForURL(/\/device\?user_code=/), page.click('form[action="/signin/dev"] button[type=submit]')]);
    await assertNoInlineScript(page);
    await screenshot('approval-without-passkey');

    // The agent's claims, with the warnings under its name.
    const agentName = page.locator('dl.facts dd').first();
    expect(await agentName.textContent()).toContain(IMITATION);
    expect(await agentName.locator('.warning-inline').allTextContents()).toEqual([
      'Careful: it mixes letters from different alphabets (Cyrillic, Latin), a common trick to look like another name.',
      `Careful: it looks like “${HOST_NAME}” but is not the same text.`,
    ]);
    // The constraints in words, one line per argument, every value.
    const limits = page.locator('.capability').filter({ hasText: 'transfer_money' }).locator('ul.limits li');
    expect(await limits.allTextContents()).toEqual([
      'amount: at least 1, and at most 250',
      `currency: one of ${CURRENCIES.map((v) => `"${v}"`).join(', ')}`,
      'note: anything except "urgent", "gift"',
      'region: exactly "EU"',
    ]);
    const transfer = page.getByRole('checkbox', { name: /^transfer_money:/ });
    expect([await transfer.isDisabled(), await transfer.isChecked()]).toEqual([true, false]);
    expect(await main.textContent()).toContain('Add a passkey first, or approve only the rest.');

    await Promise.all([page.waitForURL(/\/passkeys\/new/), page.getByRole('link', { name: 'Add a passkey' }).click()]);
    await assertNoInlineScript(page);
    await screenshot('add-first-passkey');
    await Promise.all([page.waitForURL(/\/device\?user_code=/), page.click('#create-passkey')]);
    expect(await authenticator.credentials()).toHaveLength(1);
    await assertNoInlineScript(page);
    await screenshot('approval-with-passkey');
    expect([await transfer.isDisabled(), await transfer.isChecked()]).toEqual([false, true]);
    expect(await page.locator('#presence-options').count()).toBe(1);

    await Promise.all([page.waitForURL(/\/device\/decision/), page.getByRole('button', { name: 'Approve ticked' }).click()]);
    await screenshot('approved');
    // The done page names the agent by what it calls itself, with the same look-alike warning, and
    // repeats the limits each capability is now held to.
    const done = await main.textContent();
    expect(done).toContain(`You approved the agent that calls itself ${IMITATION}`);
    expect(done).toContain('looks like');
    const items = await page.locator('main > ul > li').allTextContents();
    expect(items.map((item) => item.split(',')[0]).sort()).toEqual(['echo', 'transfer_money']);
    expect(items.find((item) => item.startsWith('transfer_money'))).toContain('at most 250');
    expect(consoleErrors).toEqual([]);

    const within = { amount: 250, currency: 'CHF', region: 'EU', note: 'rent' };
    expect((await c.execute(agent!, 'transfer_money', within)).status).toBe(200);
    expect(code(await c.execute(agent!, 'transfer_money', { ...within, amount: 251 }))).toBe('403 constraint_violated');
    expect(code(await c.execute(agent!, 'transfer_money', { ...within, currency: 'BTC' }))).toBe('403 constraint_violated');
    expect(code(await c.execute(agent!, 'transfer_money', { ...within, region: 'US' }))).toBe('403 constraint_violated');
    expect(code(await c.execute(agent!, 'transfer_money', { ...within, note: 'gift' }))).toBe('403 constraint_violated');
    expect(code(await c.execute(agent!, 'transfer_money', { ...within, ['\u0430mount']: 1 }))).toBe('400 invalid_request');
  }, 30_000);
});
