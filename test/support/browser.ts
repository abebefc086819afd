// A real browser for tests of the pages a person sees (the approval page first): Debian's Chromium
// driven by playwright-core, a page wrapper that collects console errors and numbers screenshots, a
// check that a page runs no inline script (the pages are served under `script-src 'self'`), a person
// at a browser for a whole describe block with the checks each of their steps must pass, and a
// virtual passkey authenticator through the DevTools protocol. Facts behind the choices are in
// docs/research/approvals.md §1 and §2.
//
// Addresses: bind test servers to 127.0.0.1 but open pages that use passkeys as
// http://localhost:<port>. An IP address is never a valid WebAuthn RP ID (Chromium refuses the
// ceremony with "127.0.0.1 is an invalid domain" whatever the server says), while `localhost` is both
// a valid RP ID and a secure context over plain http. Node's fetch resolves `localhost` to 127.0.0.1,
// so the server needs no second listener.
import { existsSync } from 'node:fs';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type BrowserContext, type CDPSession, type Page, type Response } from 'playwright-core';
import { afterAll, beforeAll, expect } from 'vitest';

export const CHROMIUM_PATH = '/usr/bin/chromium';

/** Screenshots land under <repo>/test-results/ (ignored by git), wherever vitest was started. */
const RESULTS_DIR = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'test-results');

// Playwright already passes most of these; they are repeated so that the guarantee "the browser
// talks to nothing but the test server" does not rest on another project's defaults. These machines
// reach no network but package registries, and traffic to other addresses is flagged, so nothing may
// phone home: no component updates, sync, field trials, QUIC probes or GPU process.
const QUIET_FLAGS = [
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-default-apps',
  '--disable-domain-reliability',
  '--disable-client-side-phishing-detection',
  '--disable-sync',
  '--disable-quic',
  '--disable-gpu',
  '--no-first-run',
  '--no-default-browser-check',
  '--no-pings',
  '--metrics-recording-only',
  // A proxy from the environment must not sit between the browser and the loopback test server.
  '--no-proxy-server',
  // Every host but loopback resolves to nothing, so a page that names an outside host fails at once
  // and visibly (a console error) instead of reaching out. The rules apply to IP literals too
  // (without the 127.0.0.1 exclusion, http://127.0.0.1:<port> fails with ERR_NAME_NOT_RESOLVED).
  '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE *.localhost, EXCLUDE 127.0.0.1',
];

const LAUNCH_TIMEOUT_MS = 15_000;

/**
 * Starts headless Chromium. Callers close it in afterAll. A missing browser is an error, never a
 * skipped test: .ci/run installs it, so its absence means a broken machine, not an optional feature.
 */
export async function launchBrowser(): Promise<Browser> {
  if (!existsSync(CHROMIUM_PATH)) {
    throw new Error(
      `${CHROMIUM_PATH} is missing: the browser tests need Debian's chromium ` +
        `(.ci/run installs it; by hand: apt-get install -y --no-install-recommends chromium)`,
    );
  }
  // No `chromiumSandbox`: playwright then adds --no-sandbox itself, which is what works as root
  // (asking for the sandbox as root fails to launch).
  return chromium.launch({
    executablePath: CHROMIUM_PATH,
    headless: true,
    args: QUIET_FLAGS,
    timeout: LAUNCH_TIMEOUT_MS,
  });
}

export interface NewPageOptions {
  /** Folder under test-results/ for this page's screenshots; one per test file, it is emptied on first use. */
  screenshotsDir: string;
}

export interface TestPage {
  page: Page;
  context: BrowserContext;
  /** Console messages of type error and uncaught page errors, in order, with where they came from. */
  consoleErrors: string[];
  /** Writes test-results/<screenshotsDir>/<nn>-<name>.png (full page) and returns its path. */
  screenshot(name: string): Promise<string>;
}

// Screenshot numbers run on across every page of one test file that shares a folder, so the files
// sort in the order they were taken. Vitest runs each test file in its own module graph.
const screenshotCounters = new Map<string, number>();
const SAFE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,80}$/;
const NAVIGATION_TIMEOUT_MS = 10_000;
const ACTION_TIMEOUT_MS = 5_000;

/** A fresh context (own cookies and storage) with one page, recording console and page errors. */
export async function newPage(browser: Browser, options: NewPageOptions): Promise<TestPage> {
  if (!SAFE_NAME.test(options.screenshotsDir)) throw new Error(`unsafe screenshotsDir ${options.screenshotsDir}`);
  const dir = join(RESULTS_DIR, options.screenshotsDir);
  if (!screenshotCounters.has(dir)) {
    // Old pictures from an earlier run would interleave with this run's numbers.
    await rm(dir, { recursive: true, force: true });
    await mkdir(dir, { recursive: true });
    screenshotCounters.set(dir, 0);
  }

  const context = await browser.newContext();
  context.setDefaultNavigationTimeout(NAVIGATION_TIMEOUT_MS);
  context.setDefaultTimeout(ACTION_TIMEOUT_MS);
  const page = await context.newPage();
  const consoleErrors: string[] = [];
  page.on('console', (message) => {
    if (message.type() !== 'error') return;
    const { url, lineNumber } = message.location();
    consoleErrors.push(url ? `${message.text()} (${url}:${lineNumber})` : message.text());
  });
  page.on('pageerror', (error) => consoleErrors.push(`pageerror: ${error.message}`));

  async function screenshot(name: string): Promise<string> {
    if (!SAFE_NAME.test(name)) throw new Error(`unsafe screenshot name ${name}`);
    const number = (screenshotCounters.get(dir) ?? 0) + 1;
    screenshotCounters.set(dir, number);
    const path = join(dir, `${String(number).padStart(2, '0')}-${name}.png`);
    await writeFile(path, await page.screenshot({ fullPage: true }));
    return path;
  }

  return { page, context, consoleErrors, screenshot };
}

/** A person at a browser, whose page records the responses its main frame navigates to. */
export interface NavigatingPerson extends TestPage {
  /** Every main-frame navigation response (redirects included), in order; a step empties it as it begins. */
  readonly navigations: Response[];
}

/**
 * A person at headless Chromium for the tests of the enclosing describe block (or file): the browser
 * launched and one page opened (in a context of its own) in beforeAll, the page's main-frame
 * navigation responses recorded; the context and the browser closed in afterAll. Read it in the
 * tests (or a later beforeAll), once it has started.
 */
export function personAtBrowserForBlock(options: NewPageOptions): NavigatingPerson {
  let browser: Browser | undefined;
  let person: TestPage | undefined;
  const navigations: Response[] = [];
  beforeAll(async () => {
    browser = await launchBrowser();
    const opened = await newPage(browser, options);
    opened.page.on('response', (response) => {
      if (response.request().isNavigationRequest() && response.frame() === opened.page.mainFrame()) navigations.push(response);
    });
    person = opened;
  });
  afterAll(async () => {
    await person?.context.close();
    await browser?.close();
  });
  const current = (): TestPage => {
    if (!person) throw new Error("the person's browser runs only between its beforeAll and afterAll");
    return person;
  };
  return {
    get page() {
      return current().page;
    },
    get context() {
      return current().context;
    },
    get consoleErrors() {
      return current().consoleErrors;
    },
    screenshot: (name) => current().screenshot(name),
    navigations,
  };
}

/**
 * What every page a person reaches must satisfy, checked once a step has landed: each of `ours`
 * (agentgate's responses on the way, redirects included) carried the Content-Security-Policy, the
 * page runs no inline script, and nothing was logged as a console error. Takes the step's screenshot.
 */
export async function expectSoundStep(person: TestPage, name: string, ours: Response[]): Promise<void> {
  // Every step passes through agentgate, so an empty list would mean the check saw nothing.
  expect(ours.length, `agentgate responses during ${name}`).toBeGreaterThan(0);
  for (const response of ours) {
    const csp = await response.headerValue('content-security-policy');
    expect(csp, `Content-Security-Policy on ${response.status()} ${response.url()}`).toMatch(/default-src 'none'.*script-src 'self'.*frame-ancestors 'none'/);
  }
  await person.screenshot(name);
  await assertNoInlineScript(person.page);
  expect(person.consoleErrors, `console errors after ${name}`).toEqual([]);
}

// Just enough of the DOM's shape for the check below: the project compiles without the DOM library,
// and the function runs in the page, where these are the real objects.
interface DomAttribute {
  name: string;
  value: string;
}
interface DomElement {
  tagName: string;
  attributes: ArrayLike<DomAttribute>;
  getAttribute(name: string): string | null;
}
interface DomWindow {
  document: { querySelectorAll(selector: string): ArrayLike<DomElement> };
}

/**
 * Every way the page runs script it did not load from a file: a <script> without src (JSON data
 * blocks excepted, which never execute and which CSP does not block), an on* event handler
 * attribute, or a javascript: URL in any attribute. Runs in the page, so it sees the live DOM.
 */
function findInlineScriptInPage(): string[] {
  const found: string[] = [];
  const elements = (globalThis as unknown as DomWindow).document.querySelectorAll('*');
  for (let i = 0; i < elements.length; i++) {
    const element = elements[i]!;
    const tag = element.tagName.toLowerCase();
    if (tag === 'script') {
      const type = (element.getAttribute('type') ?? '').trim().toLowerCase();
      const src = element.getAttribute('src');
      if (!src && type !== 'application/json') found.push(`inline <script${type ? ` type="${type}"` : ''}>`);
    }
    for (let j = 0; j < element.attributes.length; j++) {
      const { name, value } = element.attributes[j]!;
      if (name.toLowerCase().startsWith('on')) found.push(`inline event handler <${tag} ${name}>`);
      // Browsers drop ASCII whitespace and control characters inside a URL's scheme ("java\tscript:").
      if (/^javascript:/i.test(value.replace(/[\u0000-\u0020]/g, ''))) found.push(`javascript: URL <${tag} ${name}>`);
    }
  }
  return found;
}

/** Throws, naming each finding, when any frame of the page runs inline script (see above). */
export async function assertNoInlineScript(page: Page): Promise<void> {
  const found: string[] = [];
  for (const frame of page.frames()) {
    for (const finding of await frame.evaluate(findInlineScriptInPage)) found.push(`${frame.url()}: ${finding}`);
  }
  if (found.length > 0) throw new Error(`page runs inline script:\n  ${found.join('\n  ')}`);
}

/** A credential as the DevTools protocol reports it (WebAuthn.Credential). */
export interface VirtualCredential {
  credentialId: string;
  isResidentCredential: boolean;
  rpId?: string;
  /** base64 PKCS#8 private key. */
  privateKey: string;
  userHandle?: string;
  signCount: number;
}

export interface VirtualAuthenticator {
  authenticatorId: string;
  cdp: CDPSession;
  credentials(): Promise<VirtualCredential[]>;
  remove(): Promise<void>;
}

/**
 * A platform passkey authenticator (CTAP2, internal transport, resident keys, user verification)
 * attached to this page's target, which answers ceremonies without any prompt. `userVerified: false`
 * keeps UV capability but fails verification: Chromium then refuses a ceremony that requires UV in
 * the browser, before the server sees anything (docs/research/approvals.md §2). To test the server's own UV check,
 * move a credential to an authenticator without UV through `cdp` (WebAuthn.addCredential).
 */
export async function addVirtualAuthenticator(
  page: Page,
  { userVerified = true, transport = 'internal' }: { userVerified?: boolean; transport?: 'internal' | 'usb' } = {},
): Promise<VirtualAuthenticator> {
  const cdp = await page.context().newCDPSession(page);
  // enableUI false: no account chooser or other dialog that a headless test could never answer.
  await cdp.send('WebAuthn.enable', { enableUI: false });
  const { authenticatorId } = await cdp.send('WebAuthn.addVirtualAuthenticator', {
    options: {
      protocol: 'ctap2',
      // Chromium allows one internal (platform) authenticator per page; a second one is a security key.
      transport,
      hasResidentKey: true,
      hasUserVerification: true,
      isUserVerified: userVerified,
      automaticPresenceSimulation: true,
    },
  });
  return {
    authenticatorId,
    cdp,
    async credentials() {
      const { credentials } = await cdp.send('WebAuthn.getCredentials', { authenticatorId });
      return credentials;
    },
    async remove() {
      await cdp.send('WebAuthn.removeVirtualAuthenticator', { authenticatorId });
      await cdp.detach();
    },
  };
}
