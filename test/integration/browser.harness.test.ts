// The real-browser harness (test/support/browser.ts) catches what the approval-page tests rely on it
// to catch: a page under the strict CSP loads cleanly and can be photographed, inline script of any
// kind is named, console errors and uncaught exceptions from external scripts are collected, and a
// passkey ceremony completes against the virtual authenticator when the page is opened as localhost
// but is refused when it is opened by IP address. A missing Chromium fails this file; it never skips.
import { readFile, stat } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Browser } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  addVirtualAuthenticator,
  assertNoInlineScript,
  launchBrowser,
  newPage,
  type TestPage,
} from '../support/browser.ts';

// The CSP the approval pages are meant to ship (docs/research/approvals.md §1).
const STRICT_CSP =
  "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; img-src 'self'; " +
  "base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

function html(title: string, body: string): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${title}</title></head><body>${body}</body></html>`;
}

// Script files the pages load. They are plain browser JavaScript, served as text.
const STRICT_JS = `
const data = JSON.parse(document.getElementById('data').textContent);
document.getElementById('out').textContent = 'external script ran with ' + data.greeting;
`;

const NOISY_JS = `
console.error('harness probe: console.error from an external script');
throw new Error('harness probe: uncaught exception');
`;

// Registers a passkey with a fixed challenge for RP ID localhost and writes the outcome into the DOM,
// where the test reads it; the page can do no more than a real approval page could under the CSP.
const REGISTER_JS = `
const out = document.getElementById('out');
navigator.credentials.create({
  publicKey: {
    challenge: new Uint8Array(32).fill(7),
    rp: { id: 'localhost', name: 'agentgate harness' },
    user: { id: new Uint8Array([1, 2, 3, 4]), name: 'person@example.test', displayName: 'Person' },
    pubKeyCredParams: [{ type: 'public-key', alg: -7 }, { type: 'public-key', alg: -257 }],
    authenticatorSelection: { residentKey: 'required', userVerification: 'required' },
    attestation: 'none',
    timeout: 10000,
  },
}).then(
  (credential) => { out.dataset.status = 'ok'; out.textContent = credential.id; },
  (error) => { out.dataset.status = 'error'; out.textContent = error.name + ': ' + error.message; },
);
`;

interface Route {
  type: string;
  body: string;
}

const routes: Record<string, Route> = {
  '/strict.html': {
    type: 'text/html',
    body: html(
      'strict',
      '<h1>Harness: strict page</h1><p id="out">external script did not run</p>' +
        '<script type="application/json" id="data">{"greeting":"data from a JSON block"}</script>' +
        '<script src="/strict.js"></script>',
    ),
  },
  '/strict.js': { type: 'text/javascript', body: STRICT_JS },
  '/inline.html': {
    type: 'text/html',
    body: html(
      'inline',
      '<script>document.title = "ran inline"</script>' +
        '<button onclick="alert(1)">click</button>' +
        '<a href=" java\tscript:alert(1)">link</a>',
    ),
  },
  '/noisy.html': { type: 'text/html', body: html('noisy', '<script src="/noisy.js"></script>') },
  '/noisy.js': { type: 'text/javascript', body: NOISY_JS },
  '/register.html': { type: 'text/html', body: html('register', '<p id="out">pending</p><script src="/register.js"></script>') },
  '/register.js': { type: 'text/javascript', body: REGISTER_JS },
};

let server: Server;
let port: number;
let browser: Browser;
const openPages: TestPage[] = [];

beforeAll(async () => {
  server = createServer((request, response) => {
    const path = new URL(request.url ?? '/', 'http://localhost').pathname;
    // Without an answer here Chromium logs a 404 as a console error on every page.
    if (path === '/favicon.ico') return void response.writeHead(204).end();
    const route = routes[path];
    if (!route) return void response.writeHead(404).end();
    response.writeHead(200, {
      'content-type': `${route.type}; charset=utf-8`,
      'cache-control': 'no-store',
      // The inline page goes out without a CSP, so its script really runs and only the check catches it.
      ...(path === '/inline.html' ? {} : { 'content-security-policy': STRICT_CSP }),
    });
    response.end(route.body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
  browser = await launchBrowser();
});

afterEach(async () => {
  for (const opened of openPages.splice(0)) await opened.context.close();
});

afterAll(async () => {
  await browser?.close();
  await new Promise((resolve) => server?.close(resolve));
});

async function open(path: string, host = 'localhost'): Promise<TestPage> {
  const opened = await newPage(browser, { screenshotsDir: 'browser-harness' });
  openPages.push(opened);
  await opened.page.goto(`http://${host}:${port}${path}`);
  return opened;
}

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

describe('browser harness', () => {
  it('a page under the strict CSP with only an external script loads cleanly and is photographed', async () => {
    const { page, consoleErrors, screenshot } = await open('/strict.html');
    await expect.poll(() => page.textContent('#out')).toBe('external script ran with data from a JSON block');

    const path = await screenshot('strict-page');
    expect(path).toMatch(/test-results\/browser-harness\/\d{2}-strict-page\.png$/);
    expect((await stat(path)).size).toBeGreaterThan(PNG_SIGNATURE.length);
    expect((await readFile(path)).subarray(0, 8)).toEqual(PNG_SIGNATURE);

    await assertNoInlineScript(page);
    expect(consoleErrors).toEqual([]);
  });

  it('an inline script, an inline event handler and a javascript: URL are each named', async () => {
    const { page } = await open('/inline.html');
    const failure = await assertNoInlineScript(page).then(
      () => new Error('assertNoInlineScript passed a page with inline script'),
      (error: Error) => error,
    );
    expect(failure.message).toContain('inline <script>');
    expect(failure.message).toContain('inline event handler <button onclick>');
    expect(failure.message).toContain('javascript: URL <a href>');
  });

  it('a console.error and an uncaught exception from an external script are collected', async () => {
    const { consoleErrors } = await open('/noisy.html');
    await expect.poll(() => consoleErrors.length).toBe(2);
    expect(consoleErrors[0]).toMatch(/^harness probe: console\.error from an external script \(.*\/noisy\.js:\d+\)$/);
    expect(consoleErrors[1]).toBe('pageerror: harness probe: uncaught exception');
  });

  it('a passkey registers on the virtual authenticator when the page is opened as localhost', async () => {
    const opened = await newPage(browser, { screenshotsDir: 'browser-harness' });
    openPages.push(opened);
    const { page, consoleErrors, screenshot } = opened;
    // Attached before the page loads, since the page starts the ceremony as soon as its script runs.
    const authenticator = await addVirtualAuthenticator(page);
    await page.goto(`http://localhost:${port}/register.html`);

    const out = page.locator('#out[data-status]');
    await out.waitFor();
    const [status, text] = [await out.getAttribute('data-status'), await out.textContent()];
    expect({ status, text }).toMatchObject({ status: 'ok' });

    const credentials = await authenticator.credentials();
    expect(credentials).toHaveLength(1);
    const [credential] = credentials;
    // The protocol reports ids in base64; the page's credential.id is base64url.
    expect(Buffer.from(credential!.credentialId, 'base64').toString('base64url')).toBe(text);
    expect(credential).toMatchObject({ rpId: 'localhost', isResidentCredential: true });
    expect(Buffer.from(credential!.userHandle ?? '', 'base64')).toEqual(Buffer.from([1, 2, 3, 4]));

    await screenshot('passkey-registered');
    await assertNoInlineScript(page);
    expect(consoleErrors).toEqual([]);
    await authenticator.remove();
  });

  it('the same ceremony opened by IP address is refused, which is why pages must use localhost', async () => {
    const opened = await newPage(browser, { screenshotsDir: 'browser-harness' });
    openPages.push(opened);
    const authenticator = await addVirtualAuthenticator(opened.page);
    await opened.page.goto(`http://127.0.0.1:${port}/register.html`);

    const out = opened.page.locator('#out[data-status]');
    await out.waitFor();
    expect(await out.getAttribute('data-status')).toBe('error');
    expect(await out.textContent()).toMatch(/^SecurityError: /);
    expect(await authenticator.credentials()).toEqual([]);
  });
});
