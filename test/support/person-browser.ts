// A person's browser for page tests that need no real browser: fetch with a cookie jar, redirects
// not followed unless asked, and helpers to read a page's CSRF token and sign in.
import { expect } from 'vitest';

/** A person's browser: a cookie jar, no redirects followed unless asked. */
export class PersonBrowser {
  readonly #base: string;
  cookie = '';
  constructor(base: string) {
    this.#base = base;
  }

  async request(method: string, path: string, form?: Record<string, string | string[]>) {
    const headers: Record<string, string> = {};
    if (this.cookie) headers.cookie = this.cookie;
    let body: string | undefined;
    if (form) {
      const params = new URLSearchParams();
      for (const [k, v] of Object.entries(form)) for (const item of ([] as string[]).concat(v)) params.append(k, item);
      body = params.toString();
      headers['content-type'] = 'application/x-www-form-urlencoded';
    }
    const res = await fetch(new URL(path, this.#base), { method, headers, body, redirect: 'manual', signal: AbortSignal.timeout(10_000) });
    const setCookie = res.headers.get('set-cookie');
    if (setCookie) {
      const [pair] = setCookie.split(';');
      this.cookie = pair!.endsWith('=') ? '' : pair!;
    }
    return { status: res.status, headers: res.headers, text: await res.text() };
  }

  csrfOf(text: string): string {
    const match = /name="csrf" value="([^"]+)"/.exec(text);
    if (!match) throw new Error(`no CSRF token on the page:\n${text}`);
    return match[1]!;
  }

  /** Signs in through the dev form and lands on `returnTo`. */
  async signIn(name: string, returnTo = '/device') {
    const form = await this.request('GET', `/signin?return_to=${encodeURIComponent(returnTo)}`);
    const posted = await this.request('POST', '/signin/dev', { name, csrf: this.csrfOf(form.text), return_to: returnTo });
    expect(posted.status).toBe(303);
    return this.request('GET', posted.headers.get('location')!);
  }
}
