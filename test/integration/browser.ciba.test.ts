// CIBA approvals in a real browser, told by real e-mail: a real SMTP server (the smtp-server package)
// on 127.0.0.1 receives the notice, headless Chromium plays the person, who signs in through a real
// OpenID Connect provider and follows the link from the mail to the item in their inbox, and a real
// protocol client plays the agent's host, registering with `preferred_method: "ciba"` and a
// `login_hint` naming the person, then polling GET /agent/status at the approval's interval. Every
// page is photographed (test-results/browser-ciba/), runs no inline script, logs no console error,
// and every agentgate response the browser navigates to carries the Content-Security-Policy, as in
// browser.approval.test.ts, whose device-code flow this one mirrors. The mail's own contents are
// tested against the sender alone in notify.mail.test.ts; here it is the whole path. A missing
// Chromium fails this file.
import type { AddressInfo } from 'node:net';
import type { Response } from 'playwright-core';
import { SMTPServer, type SMTPServerDataStream } from 'smtp-server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { UserCodes } from '../../src/services/approvals/user-codes.ts';
import { approvalJourney, expectPolledPolitely, grantsOf } from '../support/approval-journey.ts';
import { personAtBrowserForBlock } from '../support/browser.ts';
import { Client, code, type HttpResult } from '../support/client.ts';
import { newEd25519 } from '../support/keys.ts';
import { parseMail } from '../support/mail.ts';
import { DEFAULT_ACCOUNTS, startOidcProvider, type TestOidcProvider } from '../support/oidc-provider.ts';
import { testServerForBlock } from '../support/server.ts';

const INTERVAL_SECONDS = 1;
/** Long enough for a person's few clicks in a headless browser (about 2 s); a poll loop never runs unbounded. */
const POLL_DEADLINE_MS = 15_000;
/** A mail goes out off the request path, on a loopback SMTP server: well under a second, bounded here. */
const MAIL_DEADLINE_MS = 10_000;
const TEST_TIMEOUT_MS = 30_000;
/** Known to the test, so it can derive the user code a device approval with the same id would show. */
const USER_CODE_KEY = 'browser-ciba-user-code-key-0123456789abcdef';
const SMTP_FROM = 'Agentgate approvals <approvals@agentgate.test>';
const ALICE = DEFAULT_ACCOUNTS.alice!;
/** The WORD JOINER the mail puts after '.', ':', '/' and '@' of what an agent chose (src/notify/approval-mail.ts). */
const WJ = '\u2060';

// ---- the mail server -----------------------------------------------------------------------------

/** A message the SMTP server accepted: the envelope's recipients and the raw message. */
interface ReceivedMail {
  rcptTo: string[];
  raw: string;
}

interface TestSmtpServer {
  port: number;
  received: ReceivedMail[];
  close(): Promise<void>;
}

/** Plain SMTP on 127.0.0.1 without authentication or STARTTLS, keeping every message it accepts. */
async function startSmtpServer(): Promise<TestSmtpServer> {
  const received: ReceivedMail[] = [];
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['AUTH', 'STARTTLS'],
    logger: false,
    closeTimeout: 100,
    onData(stream: SMTPServerDataStream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (chunk: Buffer) => chunks.push(chunk));
      stream.on('end', () => {
        received.push({ rcptTo: session.envelope.rcptTo.map((r) => r.address), raw: Buffer.concat(chunks).toString('utf8') });
        callback();
      });
    },
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.server.address() as AddressInfo).port,
    received,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

// ---- the servers and the person ------------------------------------------------------------------

let provider: TestOidcProvider | undefined;
let smtp: TestSmtpServer | undefined;
// The provider and the mail server stop after the agentgate server that uses them: vitest runs
// afterAll hooks in the reverse of the order they were registered, so these are registered first.
afterAll(async () => {
  await provider?.close();
  await smtp?.close();
});
beforeAll(async () => {
  smtp = await startSmtpServer();
});
const server = testServerForBlock(() => ({
  store: 'redis',
  env: {
    APPROVAL_INTERVAL_SECONDS: String(INTERVAL_SECONDS),
    SMTP_URL: `smtp://127.0.0.1:${smtp!.port}`,
    SMTP_FROM,
    SMTP_TIMEOUT_MS: '5000',
    USER_CODE_KEY,
  },
  oidc: async (redirectUri) => {
    provider = await startOidcProvider({ redirectUris: [redirectUri] });
    return { issuer: provider.issuer, clientId: provider.clientId, clientSecret: provider.clientSecret };
  },
}));
const client = new Client(server);
const userCodes = new UserCodes(Buffer.from(USER_CODE_KEY, 'utf8'));
/** One person, one browser context for the whole file: each test goes on from where the last left the browser. */
const person = personAtBrowserForBlock({ screenshotsDir: 'browser-ciba' });

beforeAll(async () => {
  // The test provider has no favicon, and Chromium logs its 404 as a console error on the login
  // page; answered here for the provider only (browser.approval.test.ts does the same).
  await person.context.route(`${provider!.issuer}/favicon.ico`, (route) => route.fulfill({ status: 204 }));
});

// ---- steps ---------------------------------------------------------------------------------------

const { navigate, ourSteps, whilePolling } = approvalJourney(person, () => server.baseUrl, client, POLL_DEADLINE_MS);

/** Signs in at the provider's login form, which the page shows now, as `account`. */
async function loginAtProvider(name: string, account: string): Promise<Response> {
  expect(new URL(person.page.url()).origin).toBe(provider!.issuer);
  await person.page.getByLabel('Account').fill(account);
  return navigate(name, () => person.page.getByRole('button', { name: 'Sign in' }).click());
}

/**
 * A delegated agent under a host key the server has never seen, asking by CIBA for the person its
 * login_hint names: the answer is a CIBA approval, with no code and no link.
 */
async function registerCibaAgent(name: string, bindingMessage: string) {
  const { res, agent } = await client.register(await newEd25519(), {
    mode: 'delegated',
    name,
    capabilities: ['echo'],
    preferred_method: 'ciba',
    login_hint: ALICE.email,
    binding_message: bindingMessage,
  });
  expect(res.status, res.text).toBe(200);
  expect(res.json.status).toBe('pending');
  expect(res.json.approval).toEqual({ method: 'ciba', binding_message: bindingMessage, expires_in: expect.any(Number), interval: INTERVAL_SECONDS });
  expect(res.json.approval.expires_in).toBeGreaterThan(0);
  return { agent: agent!, intervalSeconds: res.json.approval.interval as number };
}

/** The one mail that arrives after `before` mails were received, once it is there; bounded. */
async function nextMail(before: number): Promise<ReceivedMail> {
  await expect.poll(() => smtp!.received.length, { timeout: MAIL_DEADLINE_MS, interval: 50 }).toBeGreaterThan(before);
  return smtp!.received[before]!;
}

/**
 * The approval mail for `agentName` to alice: one recipient (hers), the subject naming the agent,
 * the inbox link in both parts, the binding message in both, and nothing that grants anything: no
 * user code (not the one a device approval with this id would show, nor anything shaped like one),
 * no device link, no token. Answers the link and the decoded parts.
 */
function expectApprovalMail(mail: ReceivedMail, agentName: string, bindingMessage: string) {
  expect(mail.rcptTo).toEqual([ALICE.email]);
  const { headers, text, html } = parseMail(mail.raw);
  expect(headers).toMatch(new RegExp(`^To: ${ALICE.email.replace(/\./g, '\\.')}$`, 'm'));
  expect(headers).toMatch(/^From: .*approvals@agentgate\.test/m);
  expect(headers).toContain(`Subject: agentgate: ${agentName} asks for your approval`);

  const links = [...text.matchAll(/https?:\/\/\S+/g)].map((m) => m[0]);
  const inboxLinks = links.filter((link) => link.startsWith(`${server.baseUrl}/inbox/`));
  expect(inboxLinks, text).toHaveLength(1);
  const link = inboxLinks[0]!;
  expect(link).toMatch(new RegExp(`^${server.baseUrl.replace(/\./g, '\\.')}/inbox/[A-Za-z0-9_-]+$`));
  expect(html).toContain(`<a href="${link}">`);
  // The binding message, as the mail shows an agent's words: word joiners after '.', ':', '/' and
  // '@', and escaped in the HTML part.
  expect(text.replaceAll(WJ, '')).toContain(bindingMessage);
  expect(html.replaceAll(WJ, '')).toContain(bindingMessage.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`));

  const approvalId = decodeURIComponent(new URL(link).pathname.slice('/inbox/'.length));
  const userCode = userCodes.codeFor(approvalId);
  for (const content of [mail.raw, text, html]) {
    expect(content).not.toContain(userCode);
    expect(content).not.toContain(userCode.replace('-', ''));
    expect(content).not.toMatch(/eyJ[\w-]+\./);
    expect(content).not.toMatch(/user_code|\/device\b/);
  }
  // What a person reads (the link aside, whose random id may hold any letters): nothing shaped like a
  // code, with or without its dash, in any case.
  for (const content of [headers, text, html]) {
    expect(content.replaceAll(link, '')).not.toMatch(/\b[BCDFGHJKLMNPQRSTVWXZ]{4}-?[BCDFGHJKLMNPQRSTVWXZ]{4}\b/i);
  }
  return { link, approvalId, text, html };
}

// ---- the tests -----------------------------------------------------------------------------------

describe('CIBA approvals in a real browser, told by e-mail, with a real provider and a polling host', () => {
  it('alice signed in once; an agent names her by her address; she gets one mail, follows its link, signs in, checks the binding message and approves; the host sees it active and its capability runs', async () => {
    const { page } = person;

    // Once, before any agent asks: her sign-in is how agentgate learns that the provider verified
    // her address. Then she signs out, as a person who is not signed in when a mail arrives.
    const signInPage = await navigate('first-sign-in-page', () => page.goto(`${server.baseUrl}/inbox`));
    expect(ourSteps()).toEqual(['303 /inbox', '200 /signin']);
    expect(new URL(signInPage.url()).searchParams.get('return_to')).toBe('/inbox');
    await navigate('first-provider-login-form', () => page.getByRole('link', { name: "Sign in with your organisation's account" }).click());
    expect(ourSteps()).toEqual(['303 /signin/start']);
    const emptyInbox = await loginAtProvider('first-inbox-empty', 'alice');
    expect(ourSteps()).toEqual(['303 /signin/callback', '200 /inbox']);
    expect(emptyInbox.status()).toBe(200);
    await expect(page.getByRole('heading', { name: 'Your requests' }).isVisible()).resolves.toBe(true);
    expect(await page.locator('main').textContent()).toContain('Nothing waits for you');
    expect(await page.locator('header').textContent()).toContain(`signed in as ${ALICE.name}`);
    await navigate('signed-out', () => page.getByRole('button', { name: 'Sign out' }).click());
    // Signed out, the code page asks her to sign in.
    expect(ourSteps()).toEqual(['303 /signout', '303 /device', '200 /signin']);
    expect(await page.locator('header').textContent()).not.toContain('signed in as');
    expect(smtp!.received).toHaveLength(0);

    // An agent asks for her by her address, with words its host shows her.
    const before = smtp!.received.length;
    const bindingMessage = 'Purple otter 318';
    const { agent, intervalSeconds } = await registerCibaAgent('weekly report bot', bindingMessage);
    const mail = await nextMail(before);
    const { link, text } = expectApprovalMail(mail, 'weekly report bot', bindingMessage);
    expect(text).toContain('  - echo');

    const outcome = await whilePolling(agent, intervalSeconds, async () => {
      // Not signed in any more: the link leads to the sign-in page, which keeps where to return.
      const linkSignIn = await navigate('mail-link-sign-in-page', () => page.goto(link));
      expect(ourSteps()).toEqual([`303 ${new URL(link).pathname}`, '200 /signin']);
      expect(new URL(linkSignIn.url()).searchParams.get('return_to')).toBe(new URL(link).pathname);
      await expect(page.getByRole('heading', { name: 'Sign in' }).isVisible()).resolves.toBe(true);

      // Through the provider, whose session from her first sign-in still stands (signing out of
      // agentgate does not end it), so it sends her straight back: a new agentgate sign-in, and the item.
      const item = await navigate('mail-link-item', () => page.getByRole('link', { name: "Sign in with your organisation's account" }).click());
      expect(ourSteps()).toEqual(['303 /signin/start', '303 /signin/callback', `200 ${new URL(link).pathname}`]);
      expect(item.url()).toBe(link);
      expect(item.status()).toBe(200);

      const main = page.locator('main');
      await expect(page.getByRole('heading', { name: 'Allow this agent?' }).isVisible()).resolves.toBe(true);
      expect(await page.locator('header').textContent()).toContain(`signed in as ${ALICE.name}`);
      expect(await main.textContent()).toContain('weekly report bot');
      // The binding message, set apart, to compare with what the agent shows.
      await expect(page.locator('#binding-message').isVisible()).resolves.toBe(true);
      expect(await page.locator('#binding-message .binding-text').textContent()).toBe(bindingMessage);
      expect(await page.locator('#binding-message').textContent()).toContain('Approve only if it shows exactly the same');
      // The host was linked to nobody: approving links it to her, and the page says so.
      expect(await main.textContent()).toContain('This host is not linked to anyone yet');
      // Her inbox form, not the device page's: there is no code to carry.
      expect(await page.locator('#decision-form').getAttribute('action')).toBe('/inbox/decision');
      expect(await page.locator('input[name="user_code"]').count()).toBe(0);
      const echo = page.getByRole('checkbox', { name: /^echo:/ });
      expect(await echo.isChecked()).toBe(true);

      const done = await navigate('approved', () => page.getByRole('button', { name: 'Approve ticked' }).click());
      expect(ourSteps()).toEqual(['200 /inbox/decision']);
      expect(done.status()).toBe(200);
      await expect(page.getByRole('heading', { name: 'Done' }).isVisible()).resolves.toBe(true);
      expect(await main.textContent()).toContain('You approved the agent that calls itself weekly report bot');
    });

    expectPolledPolitely(outcome);
    expect(outcome.decided.status).toBe(200);
    expect(outcome.decided.json.status).toBe('active');
    expect(grantsOf(outcome.decided)).toEqual({ echo: 'active' });
    expect(outcome.decided.json.user_id).toBe(`${provider!.issuer}|alice`);

    const echoed = await client.execute(agent, 'echo', { hello: 'from the CIBA browser test' });
    expect(echoed.status, echoed.text).toBe(200);
    // One mail for the whole flow: none for the sign-ins, none for the decision.
    expect(smtp!.received.length - before).toBe(1);
    expect(person.consoleErrors).toEqual([]);
  }, TEST_TIMEOUT_MS);

  it('alice, still signed in, follows the link of a second mail and denies; the polling host sees the agent rejected', async () => {
    const { page } = person;
    const before = smtp!.received.length;
    const bindingMessage = 'Green kettle 77';
    const { agent, intervalSeconds } = await registerCibaAgent('nightly sync bot', bindingMessage);
    const { link } = expectApprovalMail(await nextMail(before), 'nightly sync bot', bindingMessage);
    expect(code(await client.execute(agent, 'echo', { hello: 'too early' }))).not.toMatch(/^200/);

    const outcome = await whilePolling(agent, intervalSeconds, async () => {
      // Signed in moments ago in this browser: the link opens the item at once.
      const item = await navigate('second-item', () => page.goto(link));
      expect(ourSteps()).toEqual([`200 ${new URL(link).pathname}`]);
      expect(item.url()).toBe(link);
      expect(await page.locator('main').textContent()).toContain('nightly sync bot');
      expect(await page.locator('#binding-message .binding-text').textContent()).toBe(bindingMessage);

      const denied = await navigate('denied', () => page.getByRole('button', { name: 'Deny all' }).click());
      expect(ourSteps()).toEqual(['200 /inbox/decision']);
      expect(denied.status()).toBe(200);
      await expect(page.getByRole('heading', { name: 'Denied' }).isVisible()).resolves.toBe(true);
      expect(await page.locator('main').textContent()).toContain('You denied the agent that calls itself nightly sync bot');
    });

    expectPolledPolitely(outcome);
    expect(outcome.decided.status).toBe(200);
    expect(outcome.decided.json.status).toBe('rejected');
    expect(smtp!.received.length - before).toBe(1);
    expect(person.consoleErrors).toEqual([]);
  }, TEST_TIMEOUT_MS);

  it('her inbox lists the waiting request with its binding message as text, not markup, and its link opens the item', async () => {
    const { page } = person;
    const before = smtp!.received.length;
    // Markup in the agent's words: shown as the characters it is made of, never rendered.
    const bindingMessage = '<b>Teal & "heron"</b> 55';
    await registerCibaAgent('inbox list bot', bindingMessage);
    // The item is put in her inbox before the mail is queued, so once the mail is here, so is the item.
    const { link, approvalId } = expectApprovalMail(await nextMail(before), 'inbox list bot', bindingMessage);

    await navigate('inbox-list', () => page.getByRole('link', { name: 'Your requests' }).click());
    expect(ourSteps()).toEqual(['200 /inbox']);
    await expect(page.getByRole('heading', { name: 'Your requests' }).isVisible()).resolves.toBe(true);
    // The two requests decided above are no longer waiting; this one is.
    const items = page.locator('main section.item');
    expect(await items.count()).toBe(1);
    const item = items.first();
    expect(await item.locator('h3').textContent()).toBe('inbox list bot');
    expect(await item.locator('.binding-text').textContent()).toBe(bindingMessage);
    expect(await item.locator('b').count()).toBe(0);
    expect(await item.textContent()).toContain('echo');
    const itemLink = item.getByRole('link', { name: 'inbox list bot' });
    expect(await itemLink.getAttribute('href')).toBe(`/inbox/${encodeURIComponent(approvalId)}`);

    const opened = await navigate('inbox-item', () => itemLink.click());
    expect(ourSteps()).toEqual([`200 /inbox/${approvalId}`]);
    expect(opened.url()).toBe(link);
    await expect(page.getByRole('heading', { name: 'Allow this agent?' }).isVisible()).resolves.toBe(true);
    expect(await page.locator('#binding-message .binding-text').textContent()).toBe(bindingMessage);
    expect(await page.locator('#binding-message b').count()).toBe(0);
    expect(await page.locator('main').textContent()).toContain('inbox list bot');
    expect(smtp!.received.length - before).toBe(1);
    expect(person.consoleErrors).toEqual([]);
  }, TEST_TIMEOUT_MS);

  it('a login_hint that names nobody is answered exactly like one that names alice, and no mail goes to anyone for it', async () => {
    const before = smtp!.received.length;
    const ask = async (loginHint: string) => client.register(await newEd25519(), {
      mode: 'delegated', name: 'hint probe', capabilities: ['echo'], preferred_method: 'ciba', login_hint: loginHint, binding_message: 'Probe 1',
    });
    // The unknown one first: mails go out one at a time in order, so a mail for it would come before alice's.
    const unknown = await ask('nobody-at-all@example.test');
    const known = await ask(ALICE.email);
    // Everything but the ids and times that differ between any two registrations.
    const shape = (res: HttpResult) => ({
      status: res.status,
      body: {
        ...res.json, agent_id: '-', host_id: '-', created_at: '-',
        agent_capability_grants: (res.json.agent_capability_grants as Array<Record<string, unknown>>).map((g) => ({ ...g, id: '-' })),
        approval: { ...res.json.approval, expires_in: '-' },
      },
    });
    expect(shape(unknown.res)).toEqual(shape(known.res));
    expect(Object.keys(unknown.res.json.approval).sort()).toEqual(['binding_message', 'expires_in', 'interval', 'method']);
    const mail = await nextMail(before);
    expect(mail.rcptTo).toEqual([ALICE.email]);
    // Once alice's mail is here, any mail for the unknown hint would be too.
    expect(smtp!.received.length - before).toBe(1);
  }, TEST_TIMEOUT_MS);
});
