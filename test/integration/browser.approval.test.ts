// The approval page in a real browser: headless Chromium plays the person, who
// signs in through a real OpenID Connect provider and decides, while a real protocol client plays the
// agent's host, registering with a fresh key and polling GET /agent/status at the approval's
// interval, as an agent would. Every page along the way is photographed (test-results/
// browser-approval/), runs no inline script, logs no console error, and every agentgate response the
// browser navigates to carries the Content-Security-Policy. The same flows without a browser are in
// people.oidc-page.test.ts and people.device-page.test.ts. A missing Chromium fails this file.
//
// The server's issuer stays 127.0.0.1 (the default): nothing here uses passkeys, so the browser has
// no reason to open the pages as localhost.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { approvalJourney, expectPolledPolitely, grantsOf } from '../support/approval-journey.ts';
import { personAtBrowserForBlock } from '../support/browser.ts';
import { Client, code } from '../support/client.ts';
import { newEd25519 } from '../support/keys.ts';
import { DEFAULT_ACCOUNTS, startOidcProvider, type TestOidcProvider } from '../support/oidc-provider.ts';
import { testServerForBlock } from '../support/server.ts';

const INTERVAL_SECONDS = 1;
/** Long enough for a person's few clicks in a headless browser (about 2 s); a poll loop never runs unbounded. */
const POLL_DEADLINE_MS = 15_000;
const TEST_TIMEOUT_MS = 20_000;

let provider: TestOidcProvider | undefined;
// The provider stops after the server that signs people in through it: vitest runs afterAll hooks
// in the reverse of the order they were registered, so this one is registered before the server's.
afterAll(async () => {
  await provider?.close();
});
const server = testServerForBlock({
  store: 'redis',
  env: { APPROVAL_INTERVAL_SECONDS: String(INTERVAL_SECONDS) },
  oidc: async (redirectUri) => {
    provider = await startOidcProvider({ redirectUris: [redirectUri] });
    return { issuer: provider.issuer, clientId: provider.clientId, clientSecret: provider.clientSecret };
  },
});
const client = new Client(server);
/** One person, one browser context for the whole file: the deny run relies on the sign-in of the approve run. */
const person = personAtBrowserForBlock({ screenshotsDir: 'browser-approval' });

beforeAll(async () => {
  // The test provider (test/support/oidc-provider.ts) has no favicon, and Chromium logs its 404 as a
  // console error on the login page; a real provider serves one. Answered here, for the provider
  // only, so the console check stays exact for agentgate's own pages (which answer it themselves).
  await person.context.route(`${provider!.issuer}/favicon.ico`, (route) => route.fulfill({ status: 204 }));
});

const { navigate, ourSteps, whilePolling } = approvalJourney(person, () => server.baseUrl, client, POLL_DEADLINE_MS);

/** A delegated agent under a host key the server has never seen, waiting for a person. */
async function registerPendingAgent(name: string) {
  const { res, agent } = await client.register(await newEd25519(), { mode: 'delegated', name, capabilities: ['echo', 'weather_lookup'] });
  expect(res.status).toBe(200);
  expect(res.json.status).toBe('pending');
  expect(res.json.approval).toMatchObject({ method: 'device_authorization', interval: INTERVAL_SECONDS });
  return { agent: agent!, approvalUrl: res.json.approval.verification_uri_complete as string, intervalSeconds: res.json.approval.interval as number };
}

describe('the approval page in a real browser, with a real provider and a polling host', () => {
  it('a person signs in at the provider, approves one of two capabilities; the polling host sees it active, and only the approved capability runs', async () => {
    const { agent, approvalUrl, intervalSeconds } = await registerPendingAgent('weekly report bot');
    const { page } = person;

    const outcome = await whilePolling(agent, intervalSeconds, async () => {
      // Not signed in yet: the approval link leads to the sign-in page, which keeps where to return.
      const signInPage = await navigate('sign-in-page', () => page.goto(approvalUrl));
      expect(ourSteps()).toEqual(['303 /device', '200 /signin']);
      expect(new URL(signInPage.url()).searchParams.get('return_to')).toBe(new URL(approvalUrl).pathname + new URL(approvalUrl).search);
      await expect(page.getByRole('heading', { name: 'Sign in' }).isVisible()).resolves.toBe(true);

      // The provider's own login form, in the same browser.
      const loginForm = await navigate('provider-login-form', () => page.getByRole('link', { name: "Sign in with your organisation's account" }).click());
      expect(ourSteps()).toEqual(['303 /signin/start']);
      expect(new URL(loginForm.url()).origin).toBe(provider!.issuer);
      await page.getByLabel('Account').fill('alice');

      // Back on the approval page, signed in, with what the agent asks for.
      const approvalPage = await navigate('approval-page', () => page.getByRole('button', { name: 'Sign in' }).click());
      expect(ourSteps()).toEqual(['303 /signin/callback', '200 /device']);
      expect(approvalPage.url()).toBe(approvalUrl);
      expect(approvalPage.status()).toBe(200);
      const main = page.locator('main');
      await expect(page.getByRole('heading', { name: 'Allow this agent?' }).isVisible()).resolves.toBe(true);
      expect(await page.locator('header').textContent()).toContain(`signed in as ${DEFAULT_ACCOUNTS.alice!.name}`);
      expect(await main.textContent()).toContain('weekly report bot');
      const echo = page.getByRole('checkbox', { name: /^echo:/ });
      const weather = page.getByRole('checkbox', { name: /^weather_lookup:/ });
      expect([await echo.isChecked(), await weather.isChecked()]).toEqual([true, true]);

      await weather.uncheck();
      expect([await echo.isChecked(), await weather.isChecked()]).toEqual([true, false]);
      await person.screenshot('weather-unticked');

      const done = await navigate('approved', () => page.getByRole('button', { name: 'Approve ticked' }).click());
      expect(done.status()).toBe(200);
      await expect(page.getByRole('heading', { name: 'Done' }).isVisible()).resolves.toBe(true);
      expect(await main.textContent()).toContain('You approved the agent that calls itself weekly report bot');
    });

    expectPolledPolitely(outcome);
    expect(outcome.decided.status).toBe(200);
    expect(outcome.decided.json.status).toBe('active');
    expect(grantsOf(outcome.decided)).toEqual({ echo: 'active', weather_lookup: 'denied' });
    expect(outcome.decided.json.user_id).toBe(`${provider!.issuer}|alice`);

    const echoed = await client.execute(agent, 'echo', { hello: 'from the browser test' });
    expect(echoed.status).toBe(200);
    expect(code(await client.execute(agent, 'weather_lookup', { city: 'Oslo' }))).toBe('403 capability_not_granted');
    // A favicon request ends after its page loads, so an error from it would show only now.
    expect(person.consoleErrors).toEqual([]);
  }, TEST_TIMEOUT_MS);

  it('a person already signed in denies a second agent from its link; the polling host sees it rejected', async () => {
    const { agent, approvalUrl, intervalSeconds } = await registerPendingAgent('nightly sync bot');
    const { page } = person;

    const outcome = await whilePolling(agent, intervalSeconds, async () => {
      // Signed in moments ago in this browser: the link opens the approval page at once.
      const approvalPage = await navigate('second-approval-page', () => page.goto(approvalUrl));
      expect(approvalPage.url()).toBe(approvalUrl);
      expect(ourSteps()).toEqual(['200 /device']);
      expect(await page.locator('main').textContent()).toContain('nightly sync bot');

      const denied = await navigate('denied', () => page.getByRole('button', { name: 'Deny all' }).click());
      expect(denied.status()).toBe(200);
      await expect(page.getByRole('heading', { name: 'Denied' }).isVisible()).resolves.toBe(true);
      expect(await page.locator('main').textContent()).toContain('You denied the agent that calls itself nightly sync bot');
    });

    expectPolledPolitely(outcome);
    expect(outcome.decided.status).toBe(200);
    expect(outcome.decided.json.status).toBe('rejected');
    expect(person.consoleErrors).toEqual([]);
  }, TEST_TIMEOUT_MS);
});
