// Signing in to the approval page through a real OpenID Connect provider (oidc-provider, started by
// the test), then approving: the whole delegated flow a person goes through, without a browser.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '../support/client.ts';
import { newEd25519 } from '../support/keys.ts';
import { signInHeadless, startOidcProvider, type TestOidcProvider } from '../support/oidc-provider.ts';
import { PersonBrowser } from '../support/person-browser.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

let provider: TestOidcProvider;
let server: TestServer;
let c: Client;

beforeAll(async () => {
  server = await startTestServer({
    store: 'redis',
    oidc: async (redirectUri) => {
      provider = await startOidcProvider({ redirectUris: [redirectUri] });
      return { issuer: provider.issuer, clientId: provider.clientId, clientSecret: provider.clientSecret };
    },
  });
  c = new Client(server);
});
afterAll(async () => {
  await server.close();
  await provider.close();
});

/** Follows the page's sign-in link through the provider and back; answers the page it lands on. */
async function signInThroughProvider(browser: PersonBrowser, returnTo: string, sub: string) {
  const signInPage = await browser.request('GET', `/signin?return_to=${encodeURIComponent(returnTo)}`);
  const startPath = /href="(\/signin\/start[^"]*)"/.exec(signInPage.text)![1]!.replaceAll('&amp;', '&');
  const toProvider = await browser.request('GET', startPath);
  expect(toProvider.status).toBe(303);
  const callback = await signInHeadless(toProvider.headers.get('location')!, sub);
  const back = await browser.request('GET', `${callback.pathname}${callback.search}`);
  expect(back.status).toBe(303);
  return browser.request('GET', back.headers.get('location')!);
}

describe('sign-in through the OpenID Connect provider', () => {
  it('a person signs in at the provider, approves on the page, and the host is linked to that person (issuer-qualified)', async () => {
    const { res, agent } = await c.register(await newEd25519(), { mode: 'delegated', capabilities: ['echo'] });
    const userCode = res.json.approval.user_code as string;
    const browser = new PersonBrowser(server.baseUrl);
    const page = await signInThroughProvider(browser, `/device?user_code=${userCode}`, 'alice');
    expect(page.status).toBe(200);
    expect(page.text).toContain('signed in as Alice Example');
    const decided = await browser.request('POST', '/device/decision', {
      csrf: browser.csrfOf(page.text), agent_id: agent!.id, approval_id: /name="approval_id" value="([^"]+)"/.exec(page.text)![1]!, verdict: 'approve', capabilities: ['echo'],
    });
    expect(decided.text).toContain('You approved');
    const status = (await c.status(agent!.host, agent!.id)).json;
    expect(status.status).toBe('active');
    expect(status.user_id).toBe(`${provider.issuer}|alice`);
  });

  it('a callback that was not started in this session signs nobody in', async () => {
    const browser = new PersonBrowser(server.baseUrl);
    const other = new PersonBrowser(server.baseUrl);
    const signInPage = await other.request('GET', '/signin');
    const startPath = /href="(\/signin\/start[^"]*)"/.exec(signInPage.text)![1]!.replaceAll('&amp;', '&');
    const toProvider = await other.request('GET', startPath);
    const callback = await signInHeadless(toProvider.headers.get('location')!, 'bob');
    // The callback arrives in a browser session that never started a sign-in (login CSRF).
    const landed = await browser.request('GET', `${callback.pathname}${callback.search}`);
    expect(landed.status).toBe(400);
    expect((await browser.request('GET', '/device')).status).toBe(303);
  });
});
